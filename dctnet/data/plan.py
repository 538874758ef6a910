"""Batch planning shared by the folder and cache datasets: from each sample's layout, size and
crop box to its MCU window, its layout group and the group's grid, each plane's window in blocks,
and the valid size and relative box the device step needs — vectorised over the batch.

The batch gather that follows (:func:`gather_collated`) copies each plane's window straight into
the collated group tensors in one C call per layout group (``dctnet._jpeg.gather_planes``), from
a cache's memory-mapped records or from freshly decoded planes alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import math

import numpy as np
import torch

from dctnet import _jpeg
from dctnet.data.crop import MCU_MARGIN
from dctnet.batch import JpegBatch, PlaneGroup

__all__ = ["COLOR_SPACES", "COPY_RANGE", "GATHER_ITEM", "HEADER_ROW", "PLAN_ROW", "BatchPlan", "batch_storage",
           "check_table", "copy_ranges", "decode_windows", "gather_collated", "gather_items", "gather_packed",
           "gather_planes", "layout_grid", "plan_batch", "read_headers", "set_windows"]

# The rows of the int64 tables that cross the C boundary, as structured dtypes: each mirrors a C
# struct, whose layout the extension exports (``_jpeg.TABLES``) and :func:`check_table` compares
# at import, so a field added, moved or resized on one side only fails the import instead of
# misreading columns. Code on both sides reads the fields by name.
_I8 = np.dtype(np.int64)

#: a file's row of ``_jpeg.read_headers``' table (csrc/batch.h ``header_row``): status (0 read),
#: height, width, components, colour space (:data:`COLOR_SPACES` index), EXIF orientation (0
#: none), progressive, plane bytes, then ``(h, v)`` sampling and ``(blocks_h, blocks_w)`` for four
#: component slots (zero past the count)
HEADER_ROW = np.dtype([("status", _I8), ("height", _I8), ("width", _I8), ("ncomp", _I8), ("color", _I8),
                       ("exif", _I8), ("progressive", _I8), ("nbytes", _I8), ("sampling", _I8, (4, 2)),
                       ("blocks", _I8, (4, 2))])
#: a sample's row of ``_jpeg.plan_windows`` (csrc/plan.h ``plan_row``): the MCU window (r0, r1,
#: c0, c1), each plane's window in blocks ``pwin[k, c]`` (k: r0, r1, c0, c1; c: component slot),
#: valid size, box relative to the window, layout group
PLAN_ROW = np.dtype([("win", _I8, (4,)), ("pwin", _I8, (4, 4)), ("valid", _I8, (2,)), ("rel", _I8, (4,)),
                     ("group", _I8)])
#: a sample's row of the C gathers and ``decode_windows`` (csrc/sparse.h ``gather_item``): its
#: record (part, offset, nbytes), table row, component count, plane sizes in blocks, sparse
#: value/escape counts, and each plane's window in blocks (r0, r1, c0, c1 per component)
GATHER_ITEM = np.dtype([("part", _I8), ("offset", _I8), ("nbytes", _I8), ("table", _I8), ("ncomp", _I8),
                        ("bh", _I8, (4,)), ("bw", _I8, (4,)), ("nvalues", _I8), ("nescapes", _I8),
                        ("r0", _I8, (4,)), ("r1", _I8, (4,)), ("c0", _I8, (4,)), ("c1", _I8, (4,))])
#: a row of ``_jpeg.copy_ranges`` (csrc/sparse.h ``copy_range``): ``size`` bytes of part ``part``
#: from offset ``src`` to offset ``dst`` of the output
COPY_RANGE = np.dtype([("part", _I8), ("src", _I8), ("size", _I8), ("dst", _I8)])

_TABLES = {"header_row": HEADER_ROW, "plan_row": PLAN_ROW, "gather_item": GATHER_ITEM, "copy_range": COPY_RANGE}


def check_table(name: str, dtype: np.dtype, layouts: dict | None = None) -> None:
    """Raise ``ImportError`` naming the first difference between ``dtype`` and the C struct
    ``name`` as the extension lays it out (``layouts``: ``_jpeg.TABLES`` by default): its size,
    field names in order, each field's offset, size and shape, int64 elements, no gap."""
    layouts = _jpeg.TABLES if layouts is None else layouts
    where = f"dctnet.data.plan's {name} dtype and the extension's C struct {name}"
    hint = " (a stale build of dctnet._jpeg? rebuild it: python setup.py build_ext --inplace)"
    if name not in layouts:
        raise ImportError(f"the extension has no table {name!r}{hint}")
    itemsize, fields = layouts[name]
    end = 0
    for fname, offset, size, _ in fields:  # the C side itself: fields back to back, no padding
        if offset != end:
            raise ImportError(f"C struct {name}: field {fname!r} at byte {offset}, not {end} (padding)")
        end = offset + size
    if end != itemsize:
        raise ImportError(f"C struct {name}: {itemsize} bytes, its fields {end}")
    c_names = tuple(f[0] for f in fields)
    if dtype.names != c_names:
        diff = next((i for i, (a, b) in enumerate(zip(dtype.names or (), c_names)) if a != b),
                    min(len(dtype.names or ()), len(c_names)))
        py = dtype.names[diff] if diff < len(dtype.names or ()) else "nothing"
        c = c_names[diff] if diff < len(c_names) else "nothing"
        raise ImportError(f"{where} disagree: field {diff} is {py!r} in Python, {c!r} in C{hint}")
    for fname, offset, size, shape in fields:
        ftype, foffset = dtype.fields[fname][:2]
        if (foffset, ftype.itemsize, ftype.shape) != (offset, size, tuple(shape)) or ftype.base != _I8:
            raise ImportError(f"{where} disagree on field {fname!r}: {ftype} at byte {foffset} in Python, "
                              f"int64 {tuple(shape)} ({size} bytes) at byte {offset} in C{hint}")
    if dtype.itemsize != itemsize:
        raise ImportError(f"{where} disagree: {dtype.itemsize} bytes in Python, {itemsize} in C{hint}")


for _name, _dtype in _TABLES.items():
    check_table(_name, _dtype)

#: colour-space codes (the cache index stores the position)
COLOR_SPACES = ("unknown", "gray", "RGB", "YCbCr", "CMYK", "YCCK")


@dataclass
class BatchPlan:
    """Where every sample's windows go.

    Attributes:
        layouts: per group ``(color_space, sampling)``, in order of first appearance.
        rows: per group ``int64 (n,)`` batch positions.
        grids: per group ``(R, C)`` in MCUs.
        pwin: ``int64 (B, 4, 4)`` each plane's window in blocks: (r0, r1, c0, c1) × component.
        valid: ``int64 (B, 2)`` image content in the window, pixels.
        rel: ``int64 (B, 4)`` crop box relative to the window, pixels (with ``resize``: the
            resized region, the whole image, relative to the window).
        win: ``int64 (B, 4)`` the MCU window (r0, r1, c0, c1).
        resize: ``int64 (B, 4)`` (height, width, top, left) of a resize-then-crop policy
            (:attr:`dctnet.batch.JpegBatch.resize`), or ``None``.
    """

    layouts: list[tuple[str, tuple[tuple[int, int], ...]]]
    rows: list[np.ndarray]
    grids: list[tuple[int, int]]
    pwin: np.ndarray
    valid: np.ndarray
    rel: np.ndarray
    win: np.ndarray
    resize: np.ndarray | None = None


def layout_grid(sampling: tuple[tuple[int, int], ...], windows: np.ndarray, grid: tuple[int, int] | None) -> tuple[int, int]:
    """One group's grid ``(R, C)`` in MCUs for its windows ``(n, 2)`` (see :func:`dctnet.data.loader.group_grids`)."""
    need = windows.max(axis=0) if len(windows) else np.zeros(2, np.int64)
    return _grid(sampling, int(need[0]), int(need[1]), grid)


def _grid(sampling: tuple[tuple[int, int], ...], need_r: int, need_c: int, grid: tuple[int, int] | None) -> tuple[int, int]:
    """A group's grid from its largest window ``(need_r, need_c)`` in MCUs."""
    if grid is None:
        return max(need_r, 1), max(need_c, 1)
    vmax, hmax = max(v for _, v in sampling), max(h for h, _ in sampling)
    fixed = (grid[0] // vmax, grid[1] // hmax)
    if need_r > fixed[0] or need_c > fixed[1]:
        raise ValueError(f"a window of {need_r * vmax}x{need_c * hmax} blocks does not fit the fixed grid {grid}")
    return fixed


def batch_storage(shape: tuple[int, ...], pin_memory: bool) -> torch.Tensor:
    """int16 batch storage. Pinned: torch's caching host allocator. In a DataLoader worker:
    shared memory directly, so sending the batch to the main process moves a handle instead of
    copying the planes. Otherwise: the reader's pool of resident buffers, because a fresh
    multi-megabyte allocation page-faults its way in on every batch."""
    nbytes = 2 * math.prod(shape)
    if pin_memory:
        return torch.empty(shape, dtype=torch.int16, pin_memory=True)
    if torch.utils.data.get_worker_info() is not None:
        storage = torch.UntypedStorage._new_shared(nbytes)
        return torch.empty(0, dtype=torch.int16).set_(storage, 0, shape)
    if nbytes == 0:
        return torch.empty(shape, dtype=torch.int16)
    return torch.frombuffer(_jpeg.alloc(nbytes), dtype=torch.int16).view(shape)


def _empty_planes(shapes: list[tuple[int, ...]], pin_memory: bool) -> list[torch.Tensor]:
    """int16 tensors of the given shapes carved out of one :func:`batch_storage` allocation (each at a
    64-byte offset): a batch's planes cost one allocation, not one per component and group."""
    sizes = [math.prod(s) for s in shapes]
    offsets, total = [], 0
    for n in sizes:
        offsets.append(total)
        total += -(-n // 32) * 32
    buf = batch_storage((total,), pin_memory)
    return [buf[o:o + n].view(s) for o, n, s in zip(offsets, sizes, shapes)]


def plan_batch(color: np.ndarray, ncomp: np.ndarray, sampling: np.ndarray, heights: np.ndarray, widths: np.ndarray,
               boxes: np.ndarray, grid: tuple[int, int] | None = None,
               frames: tuple[np.ndarray, np.ndarray] | None = None) -> BatchPlan:
    """Plan a batch. ``color (B,)`` codes of :data:`COLOR_SPACES`, ``ncomp (B,)``,
    ``sampling (B, 4, 2)`` ``(h, v)`` per component (slots past ``ncomp`` are ignored), true sizes
    ``(B,)``, crop ``boxes (B, 4)`` (top, left, height, width) in pixels. ``grid``: see
    :func:`dctnet.data.loader.group_grids`. ``frames``: ``(sources, resize)`` of a
    resize-then-crop policy (:func:`dctnet.data.crop.crop_frames`); ``boxes`` are then its read
    boxes, which place the windows, and the plan's ``rel`` is ``sources`` relative to them.

    The arithmetic is :func:`dctnet.data.crop.mcu_windows` per sample (the box plus 2 pixels,
    snapped out to the MCU grid, inside the image) and the grouping is by layout in order of first
    appearance; it runs in one C call (``_jpeg.plan_windows``), because as a few dozen numpy calls
    it cost 0.5–1.8 ms a 64-sample batch (the decode between batches evicts the interpreter's
    working set), more than decoding several images. Raises ``ValueError`` for a
    sample whose layout, size or box is out of range."""
    def c64(a):
        return np.ascontiguousarray(a, np.int64)

    samp, color_l, ncomp_l = c64(sampling), c64(color), c64(ncomp)
    n = len(samp)
    table, firsts, need = np.empty(n, PLAN_ROW), np.empty(n, np.int64), np.empty((n, 2), np.int64)
    groups = _jpeg.plan_windows(color_l, ncomp_l, samp, c64(heights), c64(widths), c64(boxes), MCU_MARGIN, table,
                                firsts, need)
    firsts, need = firsts[:groups].tolist(), need[:groups].tolist()
    layouts = [(COLOR_SPACES[int(color_l[j])], tuple((int(samp[j, c, 0]), int(samp[j, c, 1])) for c in range(int(ncomp_l[j]))))
               for j in firsts]
    if len(firsts) == 1:  # the common case: one layout, rows in order
        rows = [np.arange(n, dtype=np.int64)]
    else:
        gid = table["group"]
        rows = [np.flatnonzero(gid == g) for g in range(len(firsts))]
    grids = [_grid(s, r, c, grid) for (_, s), (r, c) in zip(layouts, need)]
    rel, resize = table["rel"], None
    if frames is not None:  # the window origin is box − rel; the batch carries the resized region
        sources, resize = (np.ascontiguousarray(f, np.int64) for f in frames)
        rel = np.concatenate([sources[:, :2] - (np.asarray(boxes, np.int64)[:, :2] - rel[:, :2]), sources[:, 2:]], axis=1)
    return BatchPlan(layouts, rows, grids, table["pwin"], table["valid"], rel, table["win"], resize)


def gather_items(part, ncomp, blocks, *, offset=0, nbytes=0, table=0, nvalues=0, nescapes=0) -> np.ndarray:
    """:data:`GATHER_ITEM` rows ``(B,)`` (the plane windows are filled by :func:`gather_collated`):
    record ``part``/``offset``/``nbytes``, table row, component count, ``blocks (B, 4, 2)`` plane
    sizes, sparse value/escape counts."""
    part = np.asarray(part, np.int64)
    items = np.zeros(len(part), GATHER_ITEM)
    items["part"], items["offset"], items["nbytes"], items["table"], items["ncomp"] = part, offset, nbytes, table, ncomp
    items["bh"], items["bw"] = blocks[:, :, 0], blocks[:, :, 1]
    items["nvalues"], items["nescapes"] = nvalues, nescapes
    return items


def set_windows(items: np.ndarray, pwin: np.ndarray) -> None:
    """Fill :data:`GATHER_ITEM` rows' plane windows from a plan's ``pwin (B, 4, 4)``."""
    items["r0"], items["r1"], items["c0"], items["c1"] = pwin[:, 0], pwin[:, 1], pwin[:, 2], pwin[:, 3]


def gather_collated(plan: BatchPlan, copy: Callable[[np.ndarray, np.ndarray, list], None], items: np.ndarray,
                    labels: np.ndarray, index: np.ndarray, *, pin_memory: bool = False,
                    skipped: tuple = ()) -> JpegBatch:
    """The collated :class:`JpegBatch` of a plan: one C call per layout group.

    ``items`` are the rows of :func:`gather_items`, with the plan's plane windows filled in here;
    ``copy(rows, items_of_rows, outputs)`` fills one group's outputs
    (``gather_planes`` from a cache's records, ``decode_windows`` from JPEG bytes). A bad record
    raises ``ValueError(message, batch position)``."""
    set_windows(items, plan.pwin)
    groups = []
    shapes = [(len(r), gr * v, gc * hh, 64) for (_, sampling), r, (gr, gc) in zip(plan.layouts, plan.rows, plan.grids)
              for hh, v in sampling]
    free = iter(_empty_planes(shapes, pin_memory))
    for (color_space, sampling), r in zip(plan.layouts, plan.rows):
        planes = tuple(next(free) for _ in sampling)
        try:
            copy(r, np.ascontiguousarray(items[r]), [p.numpy() for p in planes])
        except ValueError as exc:  # name the batch position, not the group's
            j = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], int) else 0
            raise ValueError(exc.args[0], int(r[j])) from None
        rows_t = torch.from_numpy(r)
        groups.append(PlaneGroup(color_space, sampling, planes, rows_t.pin_memory() if pin_memory else rows_t))
    extra = [] if plan.resize is None else [plan.resize]
    meta = torch.from_numpy(np.concatenate([plan.valid, plan.rel, np.asarray(labels, np.int64)[:, None],
                                            np.asarray(index, np.int64)[:, None], *extra], axis=1))
    if pin_memory:
        meta = meta.pin_memory()
    return JpegBatch(groups=tuple(groups), valid=meta[:, 0:2], boxes=meta[:, 2:6], labels=meta[:, 6], index=meta[:, 7],
                     skipped=skipped, resize=meta[:, 8:12] if extra else None)


# ---------------------------------------------------------------- the data layer's calls into the engine
# dctnet.data reaches the C engine through these (and codec for whole-file reads), never directly.

def read_headers(paths: list[str], limits: tuple[int, int, int]) -> tuple[np.ndarray, list, Any]:
    """Each file read once and its header parsed, in one GIL-free C call (FIFOs refused):
    ``(rows, errors, files)`` — :data:`HEADER_ROW` rows, per file ``None`` or its exception, and
    the files' bytes for :func:`decode_windows`. ``limits``: ``(warn_mode, max_pixels, max_bytes)``."""
    table, errors, files = _jpeg.read_headers(paths, *limits)
    return np.frombuffer(table, HEADER_ROW), errors, files


def decode_windows(files: Any, items: np.ndarray, outs: list, limits: tuple[int, int, int]) -> list:
    """Decode each :data:`GATHER_ITEM` of ``files`` (from :func:`read_headers`) into its windows of
    ``outs``; per item ``None`` or its exception (libjpeg's reason)."""
    return _jpeg.decode_windows(files, items, outs, *limits)


def gather_planes(parts: Any, tables: Any, items: np.ndarray, fmt: int, outs: list) -> None:
    """A cache's records → the windows of ``outs`` (dense copy or sparse expansion), one C call."""
    _jpeg.gather_planes(parts, tables, items, fmt, outs)


def gather_packed(parts: Any, tables: Any, items: np.ndarray, fmt: int, blocks: np.ndarray, offsets: np.ndarray) -> None:
    """A cache's window blocks, packed back to back in ``blocks`` at ``offsets``, one C call."""
    _jpeg.gather_packed(parts, tables, items, fmt, blocks, offsets)


def copy_ranges(parts: Any, ranges: np.ndarray, out: np.ndarray) -> None:
    """:data:`COPY_RANGE` rows: byte ranges of the part files into ``out``, one C call."""
    _jpeg.copy_ranges(parts, ranges, out)
