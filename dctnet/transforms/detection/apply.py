"""The device half: a :class:`~dctnet.transforms.detection.plan.DetectionPlan` applied to a batch —
decode and resampling per stage, padding fills, affine and perspective warps, colour ops, and the
masks' gathers. The warps' grids and sampling and the colour ops are the kernels of
:mod:`dctnet.kernels.geometry` and :mod:`dctnet.kernels.pixel`, with per-sample canvases."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dctnet import resize as RS
from dctnet.kernels import geometry as G
from dctnet.kernels import pixel as P
from dctnet.transforms.detection.plan import DetectionPlan, StageWarp
from dctnet.transforms.device_crop import crops_to_rgb
from dctnet.transforms.transfer import move_plan


def _resample(x: Tensor, stage: Tensor, antialias: Tensor, size: tuple[int, int],
              flip: tuple[Tensor, Tensor]) -> Tensor:
    """One later stage on the device: each sample's box of its canvas in ``x`` resized to the
    stage's ``resized``, its window kept (0 outside: :func:`_fill_padding`), then mirrored by
    ``flip`` (:func:`dctnet.resize.resized_crop`'s: permutations of the matrices' rows), as
    antialiased (torchvision's ``resize``) or plain bilinear weights (a detector's own resize) per
    sample — ``antialias`` is a host mask — dense matrices on a GPU, their bands on a CPU."""
    return RS.resized_crop(x, stage[:, 6:10], size, resize=stage[:, :4], antialias=antialias,
                           flip=flip).clamp_(0.0, 1.0)  # a new tensor: clamped in place


def _photometric(x: Tensor, p: dict[str, Tensor], sizes: Tensor) -> Tensor:
    """:class:`RandomPhotometricDistort`'s ops in torchvision's order, each sample keeping its own
    draws (an op it did not draw leaves it unchanged): no host sync (the masks are host tensors).
    Each op runs on the samples that drew it alone (at ``p = 0.5``, half the batch), written back
    into ``x`` in place (the stage's own output).

    As on the uint8 images of torchvision's reference pipeline (Pillow's decode, the ops, then
    ``ToDtype(float32, scale=True)``): the image as 8-bit levels, each op's result truncated to a
    level as torchvision's uint8 kernels do (:func:`dctnet.kernels.pixel.adjust_brightness_levels`,
    …). In float, the four ops would leave the images up to ~2 grey levels (mean) from the
    reference's."""
    dev = x.device
    f, on, before = p["factors"], p["on"], p["before"]
    x = P.to_levels(x)

    def each(mask: Tensor, op) -> None:
        """``op(images, rows)`` on the samples of the host ``mask`` (``rows``: their host indices)."""
        nonlocal x
        if bool(mask.all()):
            x = op(x, torch.arange(len(mask)))
        elif bool(mask.any()):
            rows = mask.nonzero()[:, 0]
            at = rows.to(dev, non_blocking=True)
            x.index_copy_(0, at, op(x.index_select(0, at), rows))

    def factor(k: int, rows: Tensor) -> Tensor:
        return f[rows, k].to(dev, non_blocking=True).to(x.dtype)

    each(on[:, 0], lambda v, r: P.adjust_brightness_levels(v, factor(0, r)))
    each(on[:, 1] & before, lambda v, r: P.adjust_contrast_levels(v, factor(1, r), sizes=sizes[r]))
    each(on[:, 2], lambda v, r: P.adjust_saturation_levels(v, factor(2, r)))
    each(on[:, 3], lambda v, r: P.adjust_hue_levels(v, factor(3, r)))
    each(on[:, 1] & ~before, lambda v, r: P.adjust_contrast_levels(v, factor(1, r), sizes=sizes[r]))
    each(p["permute"], lambda v, r: torch.gather(v, 1, p["permutation"][r].to(dev, non_blocking=True)
                                                 [:, :, None, None].expand_as(v)))
    return P.from_levels(x)


def _fill_padding(x: Tensor, stage: Tensor, fill: Tensor, flips: Tensor) -> Tensor:
    """Each sample's own fill where its window lies outside its resized canvas: output row ``i`` is
    padding when ``top + i`` is outside ``[0, resized_h)``, likewise columns — of the window before
    its flips (``flips (B, 2)``: vertical, horizontal): a flipped sample's column ``j < out_w`` is the
    window's ``out_w − 1 − j``, likewise rows."""
    if not bool(fill.any()):  # (a host tensor) no sample pads with anything but 0 here
        return x
    dev = x.device
    i = torch.arange(x.shape[-2], device=dev)[None, :]
    j = torch.arange(x.shape[-1], device=dev)[None, :]
    h, w = stage[:, 4, None], stage[:, 5, None]
    i = torch.where(flips[:, :1] & (i < h), h - 1 - i, i)                              # (B, H) unflipped
    j = torch.where(flips[:, 1:] & (j < w), w - 1 - j, j)                              # (B, W)
    r, c = stage[:, 2, None] + i, stage[:, 3, None] + j
    pad = (((r < 0) | (r >= stage[:, 0, None]))[:, :, None] | ((c < 0) | (c >= stage[:, 1, None]))[:, None, :])
    value = fill.to(dev, non_blocking=True).to(x.dtype)[:, :, None, None]
    return torch.where(pad[:, None], value, x)


def _warp_stage(x: Tensor, plan: DetectionPlan, s: int) -> Tensor:
    """Stage ``s``'s warps, if any, onto the stage's output canvases (one pass per interpolation and fill)."""
    if not plan.warps or plan.warps[s] is None:
        return x
    shape = (int(plan.canvas[s][:, 0].max()), int(plan.canvas[s][:, 1].max()))
    for warp in plan.warps[s]:
        x = _warp(x, warp, shape)
    return x


#: torchvision's vertical flip as an affine warp's inverse (:class:`RandomVerticalFlip`): ``y ↦ −y``
_VFLIP = ((1.0, 0.0, 0.0), (0.0, -1.0, 0.0))


def _vertical_flips(plan: DetectionPlan, s: int) -> Tensor | None:
    """Stage ``s``'s warp when, for every sample it warps, it is a vertical flip of the window
    (:class:`RandomVerticalFlip`; nearest, onto the same canvas: a row permutation) — host ``bool
    (B,)``, the samples flipped — else ``None`` (no warp, or another one)."""
    if not plan.warps or plan.warps[s] is None or len(plan.warps[s]) != 1:
        return None
    w = plan.warps[s][0]
    flip = (w.inverse == torch.tensor(_VFLIP, dtype=w.inverse.dtype)).all(-1).all(-1) & ~w.perspective
    if w.mode != "nearest" or not bool((flip | ~w.on).all()) or not torch.equal(w.ins, w.outs):
        return None
    return w.on


def selects(plan: DetectionPlan, s: int) -> bool:
    """Whether stage ``s`` only selects pixels for every sample — no resampling (each box resized to
    its own size), no warp, no colour ops, padding 0 — and a later stage resamples its output, which
    can then read through it (host data only)."""
    st = plan.stages[s]
    return (s + 1 < plan.stages.shape[0] and bool((st[:, 0:2] == st[:, 8:10]).all())
            and not (plan.warps and plan.warps[s] is not None) and plan.photometric[s] is None
            and not bool(plan.fills[s].any()))


def _selection_maps(stage: Tensor, flips: Tensor, size: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """A selecting stage (:func:`selects`) as index maps of its output canvas into its input:
    ``rows (B, h)``, ``cols (B, w)`` int64 (``size = (h, w)``), −1 for padding and for the batch's
    padding past a sample's own canvas — what :func:`dctnet.resize.resized_crop`'s ``through`` takes."""
    maps = []
    for axis, n in enumerate(size):
        k = torch.arange(n, device=stage.device)[None, :]
        length = stage[:, 4 + axis, None]
        if axis == 1:  # the window is unmirrored: a flipped sample's column k < w is the window's w − 1 − k
            k = torch.where(flips[:, None] & (k < length), length - 1 - k, k)
        j = stage[:, 2 + axis, None] + k                                      # in the resized (= box-sized) canvas
        inside = (j >= 0) & (j < stage[:, axis, None]) & (k < length)
        maps.append(torch.where(inside, stage[:, 6 + axis, None] + j, -1))
    return maps[0], maps[1]


def _stage_size(stage: Tensor) -> tuple[int, int]:
    return int(stage[:, 4].max()), int(stage[:, 5].max())


def gather_masks(m: Tensor, program: list[tuple], pad: int) -> Tensor:
    """``m (..., H, W)`` through a sample's mask program (:meth:`Geometry.mask_maps`): index maps
    (−1 reads ``pad``) and nearest warps (outside the canvas: ``pad``)."""
    for step in program:
        if step[0] == "warp":
            m = _warp_nearest(m, step[1], step[2], step[3], pad)
            continue
        _, rows, cols = step
        m = torch.nn.functional.pad(m, (0, 1, 0, 1), value=pad)  # index −1: the padding row and column
        r = torch.from_numpy(rows).to(m.device, non_blocking=True)
        c = torch.from_numpy(cols).to(m.device, non_blocking=True)
        r = torch.where(r < 0, m.shape[-2] - 1, r)
        c = torch.where(c < 0, m.shape[-1] - 1, c)
        m = m.index_select(-2, r).index_select(-1, c)
    return m


def _warp_nearest(m: Tensor, kind: str, matrix: Sequence[float], size: tuple[int, int], pad: int) -> Tensor:
    """torchvision's nearest ``affine`` (``kind`` ``"affine"``, ``matrix`` its inverse) or
    ``perspective`` (its coefficients) of masks ``m (..., h, w)`` (their canvas), to ``size``;
    outside the canvas: ``pad``."""
    lead = m.shape[:-2]
    if (kind == "affine" and tuple(size) == tuple(m.shape[-2:])
            and [tuple(r) for r in np.reshape(matrix, (2, 3)).tolist()] == list(_VFLIP)):
        return m.flip(-2)  # a vertical flip (RandomVerticalFlip): nearest sampling of it is a row permutation
    x = m.reshape(-1, 1, *m.shape[-2:]).to(torch.float32)
    n = x.shape[0]
    if n == 0:  # no instance left (an image without boxes, or all sanitised away)
        return m.new_zeros(*lead, *size)
    ins = torch.tensor([list(m.shape[-2:])] * n)
    outs = torch.tensor([list(size)] * n)
    warp = StageWarp.of([(kind, matrix)] * n, "nearest", (float(pad),), ins, outs)
    return _warp(x, warp, tuple(size)).round().to(m.dtype).reshape(*lead, *size)


def _warp(x: Tensor, warp: StageWarp, shape: tuple[int, int]) -> Tensor:
    """Each sample's canvas ``warp.ins[b]`` (h, w) of the padded batch ``x`` warped onto an
    ``warp.outs[b]`` canvas by its affine inverse or its perspective — torchvision's grids
    (:func:`~dctnet.kernels.geometry.affine_grid`, :func:`~dctnet.kernels.geometry.perspective_grid`,
    per-sample canvases) and ``_apply_grid_transform`` with the fill
    (:func:`~dctnet.kernels.geometry.grid_transform`) — in a batch of ``shape`` (H, W); samples
    with ``on`` False keep their input (host masks: no sync)."""
    _, _, hh, ww = x.shape
    oh, ow = shape
    dev, dt = x.device, x.dtype
    grid = None
    if bool((warp.on & ~warp.perspective).any()):
        theta = warp.inverse.to(dev, non_blocking=True).to(dt)
        grid = G.affine_grid(theta, oh, ow, in_sizes=warp.ins, out_sizes=warp.outs, in_shape=(hh, ww))
    if bool((warp.on & warp.perspective).any()):
        coefficients = warp.coefficients.to(dev, non_blocking=True).to(dt)
        pg = G.perspective_grid(coefficients, oh, ow, in_shape=(hh, ww))
        grid = pg if grid is None else torch.where(warp.perspective.to(dev, non_blocking=True)[:, None, None, None],
                                                   pg, grid)
    if grid is None:
        return x
    out = G.grid_transform(x, grid, interpolation=warp.mode, fill=warp.fill, in_sizes=warp.ins)
    if (hh, ww) != (oh, ow):  # samples without a warp keep their input, in the output's shape
        x = torch.nn.functional.pad(x, (0, max(ow - ww, 0), 0, max(oh - hh, 0)))[..., :oh, :ow]
    return torch.where(warp.on.to(dev, non_blocking=True).reshape(-1, 1, 1, 1), out, x)


def semantic_maps(plan: DetectionPlan, semantic: Sequence[Tensor], ignore_index: int = 255) -> list[Tensor]:
    """Semantic masks ``uint8 (H_b, W_b)`` (class indices) through ``plan``: ``(h_b, w_b)`` each,
    nearest as torchvision resizes masks, padding ``ignore_index`` (the segmentation references'
    255)."""
    return [gather_masks(m, maps, ignore_index) for m, maps in zip(semantic, plan.mask_maps)]


def apply_plan(batch: Any, plan: DetectionPlan, masks: Sequence[Tensor | None] | None = None, *,
               exact: bool = False) -> tuple[list[Tensor], list[Tensor | None]]:
    """The images (and masks) of ``batch`` — whole-image windows (:class:`dctnet.data.FullImage`),
    on any device — through ``plan``: ``(images, masks)``, ``images[b]`` float ``(3, h_b, w_b)`` in
    [0, 1] (views into one padded batch), ``masks[b]`` uint8 ``(N_b, h_b, w_b)`` of the boxes kept.

    Stage sizes come from the host plan (no host sync). ``exact``: decode in libjpeg's integer
    arithmetic (Pillow's pixels)."""
    device = batch.valid.device
    stages, flips = move_plan([plan.stages, plan.flips], device)  # one copy, from pinned memory
    # the first stage decodes and resamples in one pass: each window is the whole image, so stage 0's box
    # is the image; a stage 0 that only selects pixels (crops, pads with 0, flips: the hflip preset before
    # a detector's resize) is read through by stage 1 instead of being written out
    head = 1 if selects(plan, 0) else 0
    first = dataclasses.replace(batch, boxes=stages[head, :, 6:10], resize=stages[head, :, :4])
    through = _selection_maps(stages[0], flips[0], _stage_size(plan.stages[0])) if head else None
    for s in range(head, stages.shape[0]):
        # flips — the stage's own, and a warp that is a vertical flip — are part of its resampling (a
        # permutation of its matrices' rows), not passes of their own
        vflips = _vertical_flips(plan, s)
        rows = torch.zeros_like(flips[s]) if vflips is None else vflips.to(device, non_blocking=True)
        mirror = torch.stack([rows, flips[s]], 1)                                    # (B, 2): vertical, horizontal
        flip = (mirror, stages[s, :, 4:6])
        if s == head:
            x = crops_to_rgb(first, _stage_size(plan.stages[s]), exact=exact, fill=0.0, antialias=plan.antialias[s],
                             flip=flip, through=through)
        else:
            x = _resample(x, stages[s], plan.antialias[s], _stage_size(plan.stages[s]), flip)
        x = _fill_padding(x, stages[s], plan.fills[s], mirror)
        if vflips is None:
            x = _warp_stage(x, plan, s)
        if plan.photometric[s] is not None:
            x = _photometric(x, plan.photometric[s], plan.canvas[s])
    sizes = plan.sizes.tolist()
    images = [x[b, :, :h, :w] for b, (h, w) in enumerate(sizes)]
    out_masks: list[Tensor | None] = []
    for b, (h, w) in enumerate(sizes):
        m = None if masks is None else masks[b]
        if m is None:
            out_masks.append(None)
            continue
        kept = plan.targets[b]["_kept"].to(m.device, non_blocking=True)
        out_masks.append(gather_masks(m.index_select(0, kept), plan.mask_maps[b], 0))  # padding is 0 in a mask
    return images, out_masks
