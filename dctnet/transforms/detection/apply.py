"""The device half: a :class:`~dctnet.transforms.detection.plan.DetectionPlan` applied to a batch —
decode and resampling per stage, padding fills, affine warps, colour ops, and the masks' gathers."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dctnet import resize as RS
from dctnet.kernels import pixel as P
from dctnet.transforms.detection.plan import DetectionPlan
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


def _contrast(x: Tensor, factor: Tensor, sizes: Tensor) -> Tensor:
    """torchvision's ``adjust_contrast`` per sample, the grey mean over each sample's own canvas
    ``sizes (B, 2)`` (not the batch's padding)."""
    rows = torch.arange(x.shape[-2], device=x.device)[None, :, None] < sizes[:, 0, None, None]
    cols = torch.arange(x.shape[-1], device=x.device)[None, None, :] < sizes[:, 1, None, None]
    inside = (rows & cols)[:, None].to(x.dtype)                                          # (B, 1, H, W)
    gray = P.rgb_to_grayscale(x)[:, :1]
    mean = (gray * inside).sum(dim=(-3, -2, -1), keepdim=True) / inside.sum(dim=(-3, -2, -1), keepdim=True)
    f = factor.to(x.dtype).reshape(-1, 1, 1, 1)
    return (f * x + (1.0 - f) * mean).clamp(0.0, 1.0)


def _photometric(x: Tensor, p: dict[str, Tensor], sizes: Tensor) -> Tensor:
    """:class:`RandomPhotometricDistort`'s ops in torchvision's order, each sample keeping its own
    draws (an op it did not draw leaves it unchanged): no host sync (the masks are host tensors).
    Each op runs on the samples that drew it alone (at ``p = 0.5``, half the batch), written back
    into ``x`` in place (the stage's own output)."""
    dev = x.device
    f, on, before = p["factors"], p["on"], p["before"]

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

    each(on[:, 0], lambda v, r: P.adjust_brightness(v, factor(0, r)))
    each(on[:, 1] & before, lambda v, r: _contrast(v, factor(1, r), sizes[r].to(dev, non_blocking=True)))
    each(on[:, 2], lambda v, r: P.adjust_saturation(v, factor(2, r)))
    each(on[:, 3], lambda v, r: P.adjust_hue(v, factor(3, r)))
    each(on[:, 1] & ~before, lambda v, r: _contrast(v, factor(1, r), sizes[r].to(dev, non_blocking=True)))
    each(p["permute"], lambda v, r: torch.gather(v, 1, p["permutation"][r].to(dev, non_blocking=True)
                                                 [:, :, None, None].expand_as(v)))
    return x


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
    """Stage ``s``'s warps, if any, onto the stage's output canvases."""
    if not plan.warps or plan.warps[s] is None:
        return x
    inverse, mode, fill, on, ins, outs = plan.warps[s]
    shape = (int(plan.canvas[s][:, 0].max()), int(plan.canvas[s][:, 1].max()))
    return _warp(x, inverse, mode, fill, on, ins, outs, shape)


#: torchvision's vertical flip as an affine warp's inverse (:class:`RandomVerticalFlip`): ``y ↦ −y``
_VFLIP = ((1.0, 0.0, 0.0), (0.0, -1.0, 0.0))


def _vertical_flips(plan: DetectionPlan, s: int) -> Tensor | None:
    """Stage ``s``'s warp when, for every sample it warps, it is a vertical flip of the window
    (:class:`RandomVerticalFlip`; nearest, onto the same canvas: a row permutation) — host ``bool
    (B,)``, the samples flipped — else ``None`` (no warp, or another one)."""
    if not plan.warps or plan.warps[s] is None:
        return None
    inverse, mode, _, on, ins, outs = plan.warps[s]
    flip = (inverse == torch.tensor(_VFLIP, dtype=inverse.dtype)).all(-1).all(-1)
    if mode != "nearest" or not bool((flip | ~on).all()) or not torch.equal(ins, outs):
        return None
    return on


def _selects(plan: DetectionPlan, s: int) -> bool:
    """Whether stage ``s`` only selects pixels for every sample — no resampling (each box resized to
    its own size), no warp, no colour ops, padding 0 — and a later stage resamples its output, which
    can then read through it (host data only)."""
    st = plan.stages[s]
    return (s + 1 < plan.stages.shape[0] and bool((st[:, 0:2] == st[:, 8:10]).all())
            and not (plan.warps and plan.warps[s] is not None) and plan.photometric[s] is None
            and not bool(plan.fills[s].any()))


def _selection_maps(stage: Tensor, flips: Tensor, size: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """A selecting stage (:func:`_selects`) as index maps of its output canvas into its input:
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


def _gather(m: Tensor, program: list[tuple], pad: int) -> Tensor:
    """``m (..., H, W)`` through a sample's mask program (:meth:`Geometry.mask_maps`): index maps
    (−1 reads ``pad``) and nearest affine warps (outside the canvas: ``pad``)."""
    for step in program:
        if step[0] == "warp":
            m = _warp_nearest(m, step[1], step[2], pad)
            continue
        _, rows, cols = step
        m = torch.nn.functional.pad(m, (0, 1, 0, 1), value=pad)  # index −1: the padding row and column
        r = torch.from_numpy(rows).to(m.device, non_blocking=True)
        c = torch.from_numpy(cols).to(m.device, non_blocking=True)
        r = torch.where(r < 0, m.shape[-2] - 1, r)
        c = torch.where(c < 0, m.shape[-1] - 1, c)
        m = m.index_select(-2, r).index_select(-1, c)
    return m


def _warp_nearest(m: Tensor, inverse: Sequence[float], size: tuple[int, int], pad: int) -> Tensor:
    """torchvision's nearest ``affine`` of masks ``m (..., h, w)`` (their canvas) by ``inverse``, to
    ``size``; outside the canvas: ``pad``."""
    lead = m.shape[:-2]
    if tuple(size) == tuple(m.shape[-2:]) and [tuple(r) for r in np.reshape(inverse, (2, 3)).tolist()] == list(_VFLIP):
        return m.flip(-2)  # a vertical flip (RandomVerticalFlip): nearest sampling of it is a row permutation
    x = m.reshape(-1, 1, *m.shape[-2:]).to(torch.float32)
    n = x.shape[0]
    if n == 0:  # no instance left (an image without boxes, or all sanitised away)
        return m.new_zeros(*lead, *size)
    theta = torch.tensor(inverse, dtype=torch.float64).reshape(1, 2, 3).expand(n, 2, 3)
    ins = torch.tensor([list(m.shape[-2:])] * n)
    outs = torch.tensor([list(size)] * n)
    out = _warp(x, theta, "nearest", (float(pad),), torch.ones(n, dtype=torch.bool), ins, outs, size)
    return out.round().to(m.dtype).reshape(*lead, *size)


def _warp(x: Tensor, inverse: Tensor, mode: str, fill: Sequence[float], on: Tensor, ins: Tensor, outs: Tensor,
          shape: tuple[int, int]) -> Tensor:
    """Each sample's canvas ``ins[b]`` (h, w) of the padded batch ``x`` warped by its ``inverse
    (B, 2, 3)`` onto an ``outs[b]`` canvas — torchvision's ``_affine_grid`` (output centred
    coordinates, read in the input's) + ``_apply_grid_transform`` with ``fill`` — in a batch of
    ``shape`` (H, W); samples with ``on`` False keep their input (host tensors: no sync)."""
    b, c, hh, ww = x.shape
    oh, ow = shape
    dev, dt = x.device, x.dtype
    h = ins[:, 0].to(dev, non_blocking=True).to(dt).reshape(-1, 1, 1)
    w = ins[:, 1].to(dev, non_blocking=True).to(dt).reshape(-1, 1, 1)
    h2 = outs[:, 0].to(dev, non_blocking=True).to(dt).reshape(-1, 1, 1)
    w2 = outs[:, 1].to(dev, non_blocking=True).to(dt).reshape(-1, 1, 1)
    j = torch.arange(ow, device=dev, dtype=dt).reshape(1, 1, ow)
    i = torch.arange(oh, device=dev, dtype=dt).reshape(1, oh, 1)
    u, v = j - (w2 - 1) * 0.5, i - (h2 - 1) * 0.5                     # each output canvas's centred coordinates
    th = inverse.to(dev, non_blocking=True).to(dt)
    su = th[:, 0, 0, None, None] * u + th[:, 0, 1, None, None] * v + th[:, 0, 2, None, None]
    sv = th[:, 1, 0, None, None] * u + th[:, 1, 1, None, None] * v + th[:, 1, 2, None, None]
    # the source pixel in the sample's input canvas, normalised for the padded tensor grid_sample reads
    gx = (2.0 * (su + (w - 1) * 0.5) + 1.0) / ww - 1.0
    gy = (2.0 * (sv + (h - 1) * 0.5) + 1.0) / hh - 1.0
    ii = torch.arange(hh, device=dev, dtype=dt).reshape(1, hh, 1)
    jj = torch.arange(ww, device=dev, dtype=dt).reshape(1, 1, ww)
    inside = ((ii < h) & (jj < w)).to(dt)[:, None]                     # (B, 1, H, W): the canvas, not the padding
    out = torch.nn.functional.grid_sample(torch.cat([x * inside, inside], 1), torch.stack([gx, gy], -1), mode=mode,
                                          padding_mode="zeros", align_corners=False)
    out, mask = out[:, :c], out[:, c:]
    f = torch.tensor(list(fill), dtype=dt).to(dev, non_blocking=True).reshape(1, -1, 1, 1)
    out = torch.where(mask < 0.5, f, out) if mode == "nearest" else (out - f) * mask + f
    if (hh, ww) != (oh, ow):  # samples without a warp keep their input, in the output's shape
        x = torch.nn.functional.pad(x, (0, max(ow - ww, 0), 0, max(oh - hh, 0)))[..., :oh, :ow]
    return torch.where(on.to(dev, non_blocking=True).reshape(-1, 1, 1, 1), out, x)


def semantic_maps(plan: DetectionPlan, semantic: Sequence[Tensor], ignore_index: int = 255) -> list[Tensor]:
    """Semantic masks ``uint8 (H_b, W_b)`` (class indices) through ``plan``: ``(h_b, w_b)`` each,
    nearest as torchvision resizes masks, padding ``ignore_index`` (the segmentation references'
    255)."""
    return [_gather(m, maps, ignore_index) for m, maps in zip(semantic, plan.mask_maps)]


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
    head = 1 if _selects(plan, 0) else 0
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
        out_masks.append(_gather(m.index_select(0, kept), plan.mask_maps[b], 0))  # padding is 0 in a mask
    return images, out_masks
