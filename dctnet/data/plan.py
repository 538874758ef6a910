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

import math

import numpy as np
import torch

from dctnet import _jpeg
from dctnet.data.crop import MCU_MARGIN
from dctnet.batch import JpegBatch, PlaneGroup

__all__ = ["COLOR_SPACES", "BatchPlan", "batch_storage", "gather_collated", "gather_items", "layout_grid", "plan_batch"]

#: int64 columns of one sample's row from ``_jpeg.plan_windows`` (csrc/crop.h: PLAN_FIELDS)
_PLAN_FIELDS = 27

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
    table, firsts, need = np.empty((n, _PLAN_FIELDS), np.int64), np.empty(n, np.int64), np.empty((n, 2), np.int64)
    groups = _jpeg.plan_windows(color_l, ncomp_l, samp, c64(heights), c64(widths), c64(boxes), MCU_MARGIN, table,
                                firsts, need)
    firsts, need = firsts[:groups].tolist(), need[:groups].tolist()
    layouts = [(COLOR_SPACES[int(color_l[j])], tuple((int(samp[j, c, 0]), int(samp[j, c, 1])) for c in range(int(ncomp_l[j]))))
               for j in firsts]
    if len(firsts) == 1:  # the common case: one layout, rows in order
        rows = [np.arange(n, dtype=np.int64)]
    else:
        gid = table[:, 26]
        rows = [np.flatnonzero(gid == g) for g in range(len(firsts))]
    grids = [_grid(s, r, c, grid) for (_, s), (r, c) in zip(layouts, need)]
    rel, resize = table[:, 22:26], None
    if frames is not None:  # the window origin is box − rel; the batch carries the resized region
        sources, resize = (np.ascontiguousarray(f, np.int64) for f in frames)
        rel = np.concatenate([sources[:, :2] - (np.asarray(boxes, np.int64)[:, :2] - rel[:, :2]), sources[:, 2:]], axis=1)
    return BatchPlan(layouts, rows, grids, table[:, 4:20].reshape(n, 4, 4), table[:, 20:22], rel,
                     table[:, 0:4], resize)


def gather_items(part, ncomp, blocks, *, offset=0, nbytes=0, table=0, nvalues=0, nescapes=0) -> np.ndarray:
    """``int64 (B, 31)`` rows of csrc/sparse.h's ``gather_item`` (the plane windows, columns
    15–30, are filled by :func:`gather_collated`): record ``part``/``offset``/``nbytes``, table
    row, component count, ``blocks (B, 4, 2)`` plane sizes, sparse value/escape counts."""
    part = np.asarray(part, np.int64)
    items = np.zeros((len(part), 31), np.int64)
    items[:, 0], items[:, 1], items[:, 2], items[:, 3], items[:, 4] = part, offset, nbytes, table, ncomp
    items[:, 5:9], items[:, 9:13] = blocks[:, :, 0], blocks[:, :, 1]
    items[:, 13], items[:, 14] = nvalues, nescapes
    return items


def gather_collated(plan: BatchPlan, copy: Callable[[np.ndarray, np.ndarray, list], None], items: np.ndarray,
                    labels: np.ndarray, index: np.ndarray, *, pin_memory: bool = False,
                    skipped: tuple = ()) -> JpegBatch:
    """The collated :class:`JpegBatch` of a plan: one C call per layout group.

    ``items`` are the rows of :func:`gather_items`, with the plan's plane windows filled in here; ``copy(rows, items_of_rows, outputs)`` fills one group's outputs
    (``gather_planes`` from a cache's records, ``decode_windows`` from JPEG bytes). A bad record
    raises ``ValueError(message, batch position)``."""
    items[:, 15:31] = plan.pwin.reshape(len(items), 16)
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
