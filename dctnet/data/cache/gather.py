"""The cache's C gathers with the record checksums checked: :mod:`dctnet.data.plan`'s
``gather_planes`` / ``gather_packed`` / ``copy_ranges`` plus the check, in the same C call."""

from __future__ import annotations

from typing import Any

import numpy as np

from dctnet import _jpeg

__all__ = ["copy_records_checked", "gather_packed_checked", "gather_planes_checked", "record_checksums"]

# ---------------------------------------------------------------- the cache's C gathers, checked
# dctnet.data.plan's gather_planes / gather_packed / copy_ranges with the record checksums checked
# in the same C call: each record is hashed (XXH3-64, seeded with its tables row: format.py
# record_checksum, computed by the C code in csrc/checksum.c) right after it is copied or
# expanded, while its bytes are in cache. ``sums``: the records' expected checksums, uint64 (n,),
# or None to skip the check (then the call is plan's). Each returns the positions of the items
# whose record does not give its checksum ([] when all do); the gathers zero those items' outputs.

def _sums_arg(sums: np.ndarray | None) -> tuple:
    # passed only when there is something to check, so the unchecked calls are the plain ones
    return () if sums is None else (np.ascontiguousarray(sums, np.uint64),)


def gather_planes_checked(parts: Any, tables: Any, items: np.ndarray, fmt: int, outs: list,
                          sums: np.ndarray | None) -> list[int]:
    """A cache's records → the windows of ``outs``, each record checked against ``sums``."""
    return _jpeg.gather_planes(parts, tables, items, fmt, outs, *_sums_arg(sums)) or []


def gather_packed_checked(parts: Any, tables: Any, items: np.ndarray, fmt: int, blocks: np.ndarray,
                          offsets: np.ndarray, sums: np.ndarray | None) -> list[int]:
    """A cache's window blocks packed in ``blocks`` at ``offsets``, each record checked against ``sums``."""
    return _jpeg.gather_packed(parts, tables, items, fmt, blocks, offsets, *_sums_arg(sums)) or []


def copy_records_checked(parts: Any, ranges: np.ndarray, out: np.ndarray, tables: Any, items: np.ndarray,
                         sums: np.ndarray | None) -> list[int]:
    """:data:`COPY_RANGE` rows into ``out``, ``len(ranges) // len(items)`` per record, each record
    (``items``: :data:`GATHER_ITEM` rows, whose part, offset, nbytes and table are read) checked
    against ``sums`` as its ranges are copied (they must lie inside it)."""
    if sums is None:
        return _jpeg.copy_ranges(parts, ranges, out) or []
    return _jpeg.copy_ranges(parts, ranges, out, tables, items, *_sums_arg(sums))


def record_checksums(parts: Any, tables: Any, items: np.ndarray) -> np.ndarray:
    """The checksums the C gathers compute for :data:`GATHER_ITEM` rows' records: uint64 (n,)."""
    out = np.empty(len(items), np.uint64)
    _jpeg.record_checksums(parts, tables, items, out)
    return out
