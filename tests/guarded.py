"""Guarded memory for the C code's untrusted inputs: each buffer is placed so that its last byte is
the last byte before an inaccessible page (``mmap`` + ``mprotect(PROT_NONE)``), or its first byte
the first after one. A read one byte past the record's end (or before its start) is then a
segfault, where in a cache part or a file's bytes it would read the next record or the file's
slack and go unseen — by the tests and by ASan alike.

:func:`guarded` places one buffer; :func:`install` wraps the C entry points that walk untrusted
bytes (``dctnet._jpeg``: ``read``, ``read_many``, ``decode_windows``, ``sparse_expand``,
``gather_planes``, ``gather_packed``, ``copy_ranges``) so that every JPEG source, every sparse
stream, and every record or byte range a gather item names is copied into a guarded region of its
own before the call (the call's own checks see the same bytes and lengths). The fuzzers call
``install()`` first; ``tests/test_guarded.py`` runs hand-built lying records through it in a
child process, so a read past a record is a named failure rather than a crashed test run.

Only for tests: every call copies its inputs into fresh maps (two extra pages each, unmapped when
the call's views are gone).
"""

from __future__ import annotations

import ctypes
import mmap
import os

import numpy as np

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_PROT_NONE = 0


class Guarded:
    """A byte buffer flush against an inaccessible page: ``view`` (a writable memoryview of exactly
    ``len(data)`` bytes) ends just before the guard page (``at="end"``) or starts just after one
    (``at="start"``). ``align``: with ``at="end"``, the buffer's start address modulo ``align``
    (default 0: wherever the length puts it)."""

    def __init__(self, data, at: str = "end") -> None:
        raw = memoryview(data).cast("B")
        n = len(raw)
        body = max(1, -(-n // PAGE)) * PAGE
        self._map = mmap.mmap(-1, body + 2 * PAGE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self._base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        for page in (self._base, self._base + PAGE + body):  # the guards: one page each side
            if _libc.mprotect(ctypes.c_void_p(page), PAGE, _PROT_NONE) != 0:
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        start = PAGE + body - n if at == "end" else PAGE
        self.view = memoryview(self._map)[start:start + n]
        self.view[:] = raw
        self.address = self._base + start

    def __len__(self) -> int:
        return len(self.view)


def guarded(data, at: str = "end") -> memoryview:
    """``data``'s bytes in a guarded region (see :class:`Guarded`). The view holds the map: the region
    is unmapped when the last view of it is gone (after the call that reads it)."""
    return Guarded(data, at).view


def guarded_array(arr: np.ndarray, at: str = "end") -> np.ndarray:
    """A copy of ``arr`` whose bytes end at (or start after) a guard page, as an ndarray view."""
    arr = np.ascontiguousarray(arr)
    view = guarded(arr.view(np.uint8).reshape(-1), at)
    return np.frombuffer(view, dtype=arr.dtype).reshape(arr.shape)


# ---------------------------------------------------------------------- the C entry points, guarded
def _src(s):
    """A JPEG source: a path is read by the C code itself; bytes are guarded."""
    return s if isinstance(s, str) else guarded(s)


def _rehome(parts, items, fields=("part", "offset", "nbytes")):
    """Each item's record (part bytes [offset, offset + size)) copied into a guarded part of its own,
    the item pointing at offset 0 of it; an item naming bytes outside its part keeps pointing there
    (the C checks must refuse it, and there is nothing to guard)."""
    pidx, off, size = fields
    parts = [memoryview(p).cast("B") for p in parts]
    items = np.array(items, copy=True)
    out = list(parts)
    for row in items.reshape(-1):
        p, o, n = int(row[pidx]), int(row[off]), int(row[size])
        if 0 <= p < len(parts) and 0 <= o and 0 <= n and o + n <= len(parts[p]):
            out.append(guarded(parts[p][o:o + n]))
            row[pidx], row[off] = len(out) - 1, 0
    return out, items


def install() -> None:
    """Wrap ``dctnet._jpeg``'s entry points that read untrusted bytes so that each input is guarded."""
    import dctnet.codec  # noqa: F401  (loads the extension under its dlopen flags)
    from dctnet import _jpeg

    if getattr(_jpeg, "_guarded", False):
        return
    orig = {name: getattr(_jpeg, name) for name in ("read", "read_many", "decode_windows", "sparse_expand",
                                                     "gather_planes", "gather_packed", "copy_ranges")}

    def read(src, *args):
        return orig["read"](_src(src), *args)

    def read_many(srcs, *args):
        return orig["read_many"]([_src(s) for s in srcs], *args)

    def decode_windows(srcs, *args):  # a list of sources, or read_headers' FileBatch (C-owned copies)
        return orig["decode_windows"]([_src(s) for s in srcs] if isinstance(srcs, (list, tuple)) else srcs, *args)

    def sparse_expand(masks, values, escapes, tables, table_of_block, out):
        return orig["sparse_expand"](*(guarded(b) for b in (masks, values, escapes, tables, table_of_block)), out)

    def gather_planes(parts, tables, items, fmt, outs):
        parts, items = _rehome(parts, items)
        return orig["gather_planes"](parts, guarded(tables), items, fmt, outs)

    def gather_packed(parts, tables, items, fmt, out, offsets):
        parts, items = _rehome(parts, items)
        return orig["gather_packed"](parts, guarded(tables), items, fmt, out, offsets)

    def copy_ranges(parts, ranges, out):
        parts, ranges = _rehome(parts, ranges, ("part", "src", "size"))
        return orig["copy_ranges"](parts, ranges, out)

    for name, fn in (("read", read), ("read_many", read_many), ("decode_windows", decode_windows),
                     ("sparse_expand", sparse_expand), ("gather_planes", gather_planes),
                     ("gather_packed", gather_packed), ("copy_ranges", copy_ranges)):
        fn.__doc__ = orig[name].__doc__
        setattr(_jpeg, name, fn)
    _jpeg._guarded = True
