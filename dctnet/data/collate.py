"""Samples → a :class:`dctnet.batch.JpegBatch`: grouped by layout, each group zero-padded to a
common MCU grid, metadata in sample order."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from dctnet.batch import JpegBatch, PlaneGroup, Sampling
from dctnet.data.plan import batch_storage, layout_grid
from dctnet.data.sample import CoefficientSample

__all__ = ["collate", "group_grids"]


def group_grids(layouts: Sequence[tuple[str, Sampling]], windows: np.ndarray,
                grid: tuple[int, int] | None) -> tuple[list[tuple[str, Sampling]], list[np.ndarray], list[tuple[int, int]]]:
    """Group samples by layout: (layouts in order of first appearance, the batch rows of each,
    each group's grid ``(R, C)`` in MCUs). ``windows (B, 2)`` are the samples' window sizes in MCUs.

    ``grid=(Hb, Wb)`` fixes the full-resolution block grid (8-pixel blocks of the finest
    component): a group's grid is then ``(Hb // v_max, Wb // h_max)`` MCUs, so that batch shapes
    stay constant (for ``torch.compile``); a window that does not fit raises ``ValueError``."""
    order: dict[tuple[str, Sampling], list[int]] = {}
    for i, layout in enumerate(layouts):
        order.setdefault(layout, []).append(i)
    keys, rows = list(order), [np.asarray(v, np.int64) for v in order.values()]
    return keys, rows, [layout_grid(sampling, windows[r], grid) for (_, sampling), r in zip(keys, rows)]


def collate(samples: Sequence[CoefficientSample | tuple[int, str, str] | None], *,
            grid: tuple[int, int] | None = None, pin_memory: bool | None = None) -> JpegBatch:
    """Stack samples into a :class:`JpegBatch`: grouped by layout, each group zero-padded to a
    common MCU grid, metadata in sample order.

    ``grid=(Hb, Wb)`` fixes the full-resolution block grid for constant batch shapes (see
    :func:`group_grids`); by default each group's grid is its largest window. Skipped samples
    (``(index, name, reason)`` tuples) are left out and listed in ``batch.skipped``.
    ``pin_memory`` (default: when CUDA is available) allocates the batch page-locked, ready for an
    asynchronous copy."""
    if isinstance(samples, JpegBatch):  # a dataset's __getitems__ already collated the batch
        return samples
    ok = [s for s in samples if isinstance(s, CoefficientSample)]
    skipped = tuple(s for s in samples if isinstance(s, tuple))
    if pin_memory is None:
        pin_memory = torch.cuda.is_available()
    windows = np.array([s.mcu for s in ok], np.int64).reshape(-1, 2)
    layouts, rows, grids = group_grids([s.layout for s in ok], windows, grid)
    groups = []
    for (color_space, sampling), r, (gr, gc) in zip(layouts, rows, grids):
        planes = []
        for c, (h, v) in enumerate(sampling):
            plane = batch_storage((len(r), gr * v, gc * h, 64), pin_memory)
            pn = plane.numpy()
            for j, i in enumerate(r.tolist()):
                src = ok[i].planes[c]
                ph, pw = src.shape[:2]
                pn[j, :ph, :pw] = src
                pn[j, ph:] = 0  # zero only the padding: writing the batch once is the cost that matters
                pn[j, :ph, pw:] = 0
            planes.append(plane)
        groups.append(PlaneGroup(color_space, sampling, tuple(planes), _tensor(r, pin_memory)))
    resized = sum(s.resize is not None for s in ok)  # resize-then-crop samples (an eval crop)
    if resized not in (0, len(ok)):
        raise ValueError("collate: a batch mixes resize-then-crop samples with crop-then-resize ones (two crop policies)")
    meta = np.array([(*s.valid, *s.box, s.label, s.index, *(s.resize or ())) for s in ok],
                    np.int64).reshape(-1, 12 if resized else 8)
    meta_t = _tensor(meta, pin_memory)
    return JpegBatch(groups=tuple(groups), valid=meta_t[:, 0:2], boxes=meta_t[:, 2:6], labels=meta_t[:, 6],
                     index=meta_t[:, 7], skipped=skipped, resize=meta_t[:, 8:12] if resized else None)


def _tensor(a: np.ndarray, pin_memory: bool) -> torch.Tensor:
    t = torch.from_numpy(a)
    return t.pin_memory() if pin_memory else t
