"""The sparse coefficient record: encode (numpy) and expand on the host (C); on the device the
batch contract expands it (:func:`dctnet.batch.expand_torch`).

Per image, the blocks of all components are taken in order (component 0's plane row by row,
then component 1, …). A record stores

* ``masks``: one uint64 per block, bit ``k`` set where natural coefficient ``k`` is nonzero;
* ``values``: the nonzero *quantized* values in block order, int8, with −128 as an escape;
* ``escapes``: the real value of each escape, int16, in order;
* ``tables``: one uint16 table of 64 per component (the JPEG's table, or ones for a component
  whose planes are not exact multiples of it — saturated files — so expansion is still exact).

Expansion is ``plane[k] = q · table[k]``, bit-identical to :func:`dctnet.read_coefficients`.
Quantized values are small (most fit int8), and a block costs 8 bytes of mask plus one byte per
nonzero coefficient: about 2–3× the JPEG's own size, against ~15× for dense int16 planes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dctnet import _jpeg

__all__ = ["SparseRecord", "encode", "expand", "record_bytes", "record_from_bytes", "record_layout"]

_BITS = np.left_shift(np.uint64(1), np.arange(64, dtype=np.uint64))


@dataclass
class SparseRecord:
    masks: np.ndarray    # uint64 (nblocks,)
    values: np.ndarray   # int8 (nvalues,)
    escapes: np.ndarray  # int16 (nescapes,)
    tables: np.ndarray   # uint16 (ncomponents, 64)


def record_layout(nblocks, nvalues, nescapes):
    """Where a stored record's streams lie, in bytes: ``(values_at, escapes_at, nbytes)``. The
    masks come first (8 bytes a block), then the values (a byte each), then the escapes, 2-byte
    aligned (2 bytes each). Takes ints, or int64 arrays elementwise. The one place this layout is
    computed in Python; csrc/sparse.c's ``sparse_record_layout`` is the same in C."""
    values_at = 8 * nblocks
    values_end = values_at + nvalues
    escapes_at = values_end + values_end % 2
    return values_at, escapes_at, escapes_at + 2 * nescapes


def record_bytes(rec: SparseRecord) -> list[bytes]:
    """A record's streams as stored (:func:`record_layout`), in order, padding included."""
    _, escapes_at, _ = record_layout(len(rec.masks), len(rec.values), len(rec.escapes))
    pad = b"\0" * (escapes_at - rec.masks.nbytes - rec.values.nbytes)
    return [rec.masks.tobytes(), rec.values.tobytes(), pad, rec.escapes.tobytes()]


def record_from_bytes(raw: np.ndarray, nblocks: int, nvalues: int, nescapes: int, tables: np.ndarray) -> SparseRecord:
    """The record stored in ``raw`` (uint8, 8-byte aligned; views, no copy) by :func:`record_bytes`."""
    values_at, escapes_at, _ = record_layout(nblocks, nvalues, nescapes)
    return SparseRecord(raw[:values_at].view(np.uint64), raw[values_at:values_at + nvalues].view(np.int8),
                        raw[escapes_at:escapes_at + 2 * nescapes].view(np.int16), tables)


def encode(planes: list[np.ndarray] | tuple[np.ndarray, ...], tables: np.ndarray) -> SparseRecord:
    """Sparse record of int16 planes ``(bh, bw, 64)`` dequantized with ``tables (C, 8, 8)``."""
    qs, used = [], []
    for plane, table in zip(planes, tables):
        t = table.reshape(64).astype(np.int32)
        p = plane.reshape(-1, 64).astype(np.int32)
        if t.min() >= 1:
            q = p // t
            if np.array_equal(q * t, p):
                qs.append(q)
                used.append(t)
                continue
        qs.append(p)  # not a multiple of its table (saturated / odd file): store values themselves
        used.append(np.ones(64, np.int32))
    q = np.concatenate(qs) if qs else np.zeros((0, 64), np.int32)
    nz = q != 0
    masks = (nz.astype(np.uint64) * _BITS).sum(axis=1, dtype=np.uint64)
    vals = q[nz]
    esc = (vals < -127) | (vals > 127)
    values = np.where(esc, -128, vals).astype(np.int8)
    return SparseRecord(masks=masks, values=values, escapes=vals[esc].astype(np.int16),
                        tables=np.stack(used).astype(np.uint16))


def expand(rec: SparseRecord, block_counts: list[int], out: np.ndarray | None = None) -> np.ndarray:
    """Dense ``int16 (nblocks, 64)`` from a record, in C (GIL released)."""
    nblocks = rec.masks.shape[0]
    if out is None:
        out = np.empty((nblocks, 64), np.int16)
    table_of_block = np.repeat(np.arange(len(block_counts), dtype=np.uint8), block_counts)
    _jpeg.sparse_expand(rec.masks, rec.values, rec.escapes, np.ascontiguousarray(rec.tables), table_of_block, out)
    return out
