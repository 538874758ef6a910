r"""Detection and segmentation geometry: torchvision's ops on images, boxes and masks, drawn per
sample on the host and applied batched on the device.

A detection sample is a whole image with a target (``boxes`` XYXY in pixels, ``labels``, and
optionally ``masks (N, H, W)``, ``iscrowd``, ``area``). Its augmentation is geometric — flips,
resizes, crops, padding — so it is a short per-sample program, not a per-pixel op:

1. **Host, per sample** (boxes are few): each op draws its parameters from the sample's own
   generator exactly as torchvision's class draws them from torch's global one (the same calls in
   the same order: seeded alike, the two give the same parameters), moves the boxes with
   torchvision's rules (``tv_tensors.BoundingBoxes``: flips, resizes scale, crops and pads shift
   and clamp to the canvas; :class:`RandomIoUCrop` zeroes the boxes whose centre left the crop;
   :class:`SanitizeBoundingBoxes` drops degenerate ones with their labels and masks), and folds
   the image geometry into **stages**. A stage is one resampling of its input canvas — resize the
   whole canvas to ``resized`` (antialiased bilinear, torchvision's ``resize``), keep the window
   ``(top, left, height, width)`` of that (outside the resized canvas: ``fill``), then mirror the
   window if flipped. Crops, pads and flips join the current stage; a resize after any of them
   starts a new one, because torchvision resamples the already cropped pixels again.
2. **Device, batched**: stage 1 decodes every window and resamples it in one pass
   (:func:`dctnet.transforms.crops_to_rgb` with the stage's per-sample resize), later stages
   resample the previous output (:func:`dctnet.resize.resized_crop`: dense matrices on a GPU,
   their bands on a CPU). A flip — and a vertical flip's warp — permutes the rows of its stage's
   resampling matrices (no pass of its own); a first stage that only selects pixels (crops, pads
   with 0, flips) is read through by the next stage's resampling, never written out. Masks follow
   torchvision's nearest-neighbour resize (``interpolate(mode="nearest")``: source
   ``min(floor(k·in/out), in − 1)`` in float32), their pads are 0, and every stage's index map is
   composed on the host into one gather per axis: the masks are gathered once.

Shapes: images come out as a list of ``(3, h_b, w_b)`` float tensors in [0, 1] — what
torchvision's detectors take — views into one batch tensor padded to the batch's largest canvas.
``fill`` values are in 8-bit levels (0–255), as torchvision's detection references state them
(``fill=mean`` with ``mean = (123, 117, 104)``); masks are always padded with 0, as the references'
``{tv_tensors.Mask: 0}`` fill does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dctnet import functional as F
from dctnet import resize as RS
from dctnet.transforms import geometry as G
from dctnet.transforms import pixel as P
from dctnet.transforms.base import to_coefficients
from dctnet.transforms.device_crop import crops_to_rgb
from dctnet.transforms.transfer import move_plan

__all__ = [
    "DetectionCompose", "DetectionPlan", "DetectionStep", "DetectorResize", "FixedSizeCrop", "PadIfSmaller",
    "RandomAffine", "RandomCrop", "RandomHorizontalFlip", "RandomIoUCrop", "RandomPhotometricDistort",
    "RandomResize", "RandomResizedCrop", "RandomRotation", "RandomShortestSize", "RandomVerticalFlip",
    "RandomZoomOut", "Resize", "SanitizeBoundingBoxes", "ScaleJitter", "SimpleCopyPaste", "apply_plan",
    "build_detection_ops", "coefficient_mosaics", "detection_preset", "resized_output_size", "sample_generator",
    "segmentation_preset", "semantic_maps", "torchvision_ops",
]

#: per-box fields of a target, dropped together with their boxes
BOX_FIELDS = ("boxes", "labels", "masks", "iscrowd", "area")


def sample_generator(seed: int, epoch: int, index: int, stream: str = "") -> torch.Generator:
    """A CPU ``torch.Generator`` that is a pure function of ``(seed, epoch, index)``: one sample's
    draws, whatever the batch, worker or thread it is drawn in (a keyed BLAKE2b hash of the three).
    ``stream`` names another, independent stream of the same sample (copy-paste's draw)."""
    key = (int(seed), int(epoch), int(index)) + ((stream,) if stream else ())
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8, person=b"dctnet.detect").digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)


# ---------------------------------------------------------------------------------------------- geometry
@dataclass
class _Stage:
    """One resampling: the ``box`` ``(top, left, h, w)`` of the input canvas ``src`` (h, w) — the
    whole canvas, or a crop made before the resize (torchvision's ``resized_crop``) — resized to
    ``resized`` (h, w), the window ``(top, left, h, w)`` of that kept (outside ``[0, resized)``:
    ``fill``), then mirrored if ``flip``."""

    src: tuple[int, int]
    resized: tuple[int, int]
    window: tuple[int, int, int, int]
    box: tuple[int, int, int, int] = (0, 0, 0, 0)
    flip: bool = False
    fill: tuple[float, float, float] | None = None
    #: antialiased resampling (torchvision's ``resize``), or torch's plain bilinear (a detector's own)
    antialias: bool = True
    #: an affine warp of this stage's output (:class:`RandomAffine`, :class:`RandomRotation`): the
    #: ``inverse`` (2, 3) in torchvision's centred coordinates, ``mode``, ``fill``; it seals the stage
    warp: dict[str, Any] | None = None
    #: colour ops applied to this stage's output (after its warp; :class:`RandomPhotometricDistort`'s
    #: drawn parameters); a stage with them is sealed: later geometry resamples its result
    photometric: dict[str, Any] | None = None

    @classmethod
    def identity(cls, size: tuple[int, int]) -> "_Stage":
        return cls(src=size, resized=size, window=(0, 0, *size), box=(0, 0, *size))

    @property
    def is_identity(self) -> bool:
        return (self.resized == self.src and self.window == (0, 0, *self.src) and not self.flip
                and self.box == (0, 0, *self.src))

    @property
    def is_crop(self) -> bool:
        """Nothing but a crop so far (no resampling, padding or flip): a resize can take the crop as its box."""
        t, lft, h, w = self.window
        return (self.resized == self.src and self.box == (0, 0, *self.src) and not self.flip and self.fill is None
                and t >= 0 and lft >= 0 and t + h <= self.src[0] and lft + w <= self.src[1])

    @property
    def canvas(self) -> tuple[int, int]:
        """The stage's output size: its window, or its warp's output (a rotation with ``expand``)."""
        if self.warp is not None:
            return self.warp["size"]
        return self.window[2], self.window[3]


@dataclass
class Geometry:
    """One sample's image geometry so far: its stages (the last one open)."""

    stages: list[_Stage]

    @classmethod
    def of(cls, height: int, width: int) -> "Geometry":
        return cls([_Stage.identity((int(height), int(width)))])

    @property
    def canvas(self) -> tuple[int, int]:
        """The current image size (h, w)."""
        return self.stages[-1].canvas

    def _open(self) -> _Stage:
        """The stage geometry joins: the last one, unless a warp or colour ops sealed it."""
        last = self.stages[-1]
        return last if last.photometric is None and last.warp is None else self._new_stage()

    def _new_stage(self) -> _Stage:
        self.stages.append(_Stage.identity(self.canvas))
        return self.stages[-1]

    def resize(self, height: int, width: int, antialias: bool = True) -> None:
        """torchvision's ``resize`` of the current canvas to ``(height, width)`` (``antialias=False``:
        torch's plain bilinear, as a detector's ``GeneralizedRCNNTransform`` resizes)."""
        if (height, width) == self.canvas:  # torchvision returns the input unchanged
            return
        # stage 0 decodes with antialiased weights: a plain resize of the image is a stage of its own;
        # a crop so far becomes the box the resize reads (torchvision's resized_crop: one resampling)
        s = self._open()
        if not (s.is_crop and (antialias or len(self.stages) > 1)):
            s = self._new_stage()
        s.box = s.window
        s.resized, s.window, s.antialias = (height, width), (0, 0, height, width), antialias

    def crop(self, top: int, left: int, height: int, width: int) -> None:
        """``crop`` of the current canvas; the box lies inside it (the ops here only crop inside)."""
        h, w = self.canvas
        if top < 0 or left < 0 or top + height > h or left + width > w or height <= 0 or width <= 0:
            raise ValueError(f"crop ({top}, {left}, {height}, {width}) outside the canvas {h}×{w}")
        s = self._open()
        if s.flip:  # the window is kept in unmirrored coordinates: mirror the crop's columns
            left = w - left - width
        t0, l0 = s.window[:2]
        s.window = (t0 + top, l0 + left, height, width)

    def pad(self, left: int, top: int, right: int, bottom: int, fill: tuple[float, float, float]) -> None:
        """``pad`` of the current canvas with ``fill`` (RGB in [0, 1])."""
        if not (left or top or right or bottom):
            return
        s = self._open()
        # the window is unmirrored: on a flipped stage, the canvas's left is the window's right
        wl, wr = (right, left) if s.flip else (left, right)
        t0, l0, h, w = s.window
        rh, rw = s.resized
        # padding joins this stage only where the window still reaches the resized canvas's edge
        # (beyond it is this stage's fill) and the fill is the same; else it pads a new stage's
        # canvas (unflipped: the flip happened in the stage before)
        joins = ((not top or t0 <= 0) and (not bottom or t0 + h >= rh) and (not wl or l0 <= 0)
                 and (not wr or l0 + w >= rw) and (s.fill is None or s.fill == fill))
        if not joins:
            s = self._new_stage()
            t0, l0, h, w = s.window
            wl, wr = left, right
        s.window = (t0 - top, l0 - wl, h + top + bottom, w + wl + wr)
        s.fill = fill

    def hflip(self) -> None:
        s = self._open()
        s.flip = not s.flip

    def warp(self, inverse: Sequence[float], mode: str, fill: tuple[float, float, float],
             size: tuple[int, int] | None = None) -> None:
        """torchvision's ``affine`` of the current canvas: ``inverse`` the 6 numbers of
        ``_get_inverse_affine_matrix`` in its centred coordinates; ``size`` the output (h, w)
        (``None``: the canvas's; a rotation with ``expand``: larger)."""
        s = self.stages[-1]
        if s.warp is not None or s.photometric is not None:
            s = self._new_stage()
        canvas = (s.window[2], s.window[3])
        s.warp = {"inverse": [float(v) for v in inverse], "mode": mode, "fill": fill, "size": size or canvas,
                  "input": canvas}

    def photometric(self, params: dict[str, Any]) -> None:
        """Colour ops on the current canvas (after everything so far), drawn as ``params``."""
        s = self.stages[-1]
        if s.photometric is not None:  # two distortions in a row: the second on a stage of its own
            s = self._new_stage()
        s.photometric = params

    def mask_maps(self) -> list[tuple]:
        """How masks move, as a short program: ``("maps", rows, cols)`` — row and column index maps
        ``int64 (h,)``, ``(w,)`` into the previous canvas, torchvision's nearest resizes, crops, pads
        (−1: padding) and flips composed over consecutive stages — and ``("warp", inverse (2, 3),
        (h, w))``, an affine warp (nearest) of the canvas at that point."""
        program: list[tuple] = []
        rows = cols = None
        for s in self.stages:
            r = _nearest_map(s.box[0], s.box[2], s.resized[0], s.window[0], s.window[2], False)
            c = _nearest_map(s.box[1], s.box[3], s.resized[1], s.window[1], s.window[3], s.flip)
            rows = r if rows is None else _compose(rows, r)
            cols = c if cols is None else _compose(cols, c)
            if s.warp is not None:
                program += [("maps", rows, cols), ("warp", s.warp["inverse"], s.warp["size"])]
                rows = cols = None
        if rows is not None:
            program.append(("maps", rows, cols))
        return program


def _nearest_map(start: int, in_size: int, resized: int, offset: int, length: int, flip: bool) -> np.ndarray:
    """Output k of a stage's window → source index: torch's ``interpolate(mode="nearest")``
    (``min(floor(j·scale), in − 1)``, ``scale = in/out`` in float32; same size: identity; twice:
    ``j >> 1``) of resized index ``j = offset + k`` (mirrored if ``flip``) into the box
    ``[start, start + in_size)``, −1 outside."""
    k = np.arange(length, dtype=np.int64)
    j = offset + (length - 1 - k if flip else k)
    if resized == in_size:
        src = j.copy()
    elif resized == 2 * in_size:
        src = j >> 1
    else:
        scale = np.float32(in_size) / np.float32(resized)
        src = np.minimum(np.floor(j.astype(np.float32) * scale).astype(np.int64), in_size - 1)
    return np.where((j >= 0) & (j < resized), start + src, -1)


def _compose(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Index map of ``second`` applied after ``first`` (−1 stays −1)."""
    return np.where(second >= 0, first[np.clip(second, 0, None)], -1)


# ---------------------------------------------------------------------------------------------- boxes
def _clamp(boxes: Tensor, canvas: tuple[int, int]) -> Tensor:
    """torchvision's ``clamp_bounding_boxes`` for XYXY: x to [0, W], y to [0, H]."""
    out = boxes.clone()
    out[:, 0::2] = out[:, 0::2].clamp(0, canvas[1])
    out[:, 1::2] = out[:, 1::2].clamp(0, canvas[0])
    return out


def _keep(target: dict[str, Any], keep: Tensor) -> None:
    """Drop the boxes (and their per-box fields) where ``keep`` is False."""
    for k in BOX_FIELDS:
        if k in target and target[k] is not None:
            target[k] = target[k][keep]
    target["_kept"] = target["_kept"][keep]


def _box_iou(a: Tensor, b: Tensor) -> Tensor:
    """IoU of XYXY boxes ``a (N, 4)`` with ``b (M, 4)``: ``(N, M)``."""
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[:, None] + area_b[None, :] - inter)


def resized_output_size(canvas: tuple[int, int], size: int | Sequence[int] | None,
                        max_size: int | None = None) -> tuple[int, int]:
    """torchvision's ``Resize`` output size ``(h, w)``: ``size`` (h, w), or an int (one-element
    sequence) for the shorter side — ``int(size·long/short)`` for the longer, then capped at
    ``max_size`` (``int(max_size·short/long)``) — or ``None`` with ``max_size``: the longer side."""
    h, w = canvas
    short, long = (w, h) if w <= h else (h, w)
    if size is None:
        if not isinstance(max_size, int):
            raise ValueError(f"max_size must be an int when size is None, got {max_size!r}")
        new_short, new_long = int(max_size * short / long), max_size
    else:
        size = [size] if isinstance(size, int) else list(size)
        if len(size) == 2:
            return int(size[0]), int(size[1])
        new_short, new_long = size[0], int(size[0] * long / short)
        if max_size is not None:
            if max_size <= size[0]:
                raise ValueError(f"max_size = {max_size} must be greater than the shorter side's size {size[0]}")
            if new_long > max_size:
                new_short, new_long = int(max_size * new_short / new_long), max_size
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    return new_h, new_w


def _resize_boxes(target: dict[str, Any], old: tuple[int, int], new: tuple[int, int]) -> None:
    """torchvision's ``resize_bounding_boxes``: x·(new_w/old_w), y·(new_h/old_h), the ratios as
    torchvision builds them (a float32 tensor), no clamp."""
    if new == old:
        return
    ratios = torch.tensor([new[1] / old[1], new[0] / old[0]] * 2)  # float32, as torchvision's
    target["boxes"] = target["boxes"].mul(ratios).to(target["boxes"].dtype)


# ---------------------------------------------------------------------------------------------- ops
class DetectionOp:
    """An op on one sample: ``op(geometry, target, generator)`` draws as torchvision's class of the
    same name and updates the geometry and the target in place."""

    def __call__(self, geom: Geometry, target: dict[str, Any], gen: torch.Generator) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"


def _fill(fill: float | Sequence[float]) -> tuple[float, float, float]:
    """An 8-bit fill (one value or RGB) as RGB in [0, 1]."""
    values = [float(fill)] * 3 if isinstance(fill, (int, float)) else [float(v) for v in fill]
    if len(values) != 3 or not all(math.isfinite(v) for v in values):
        raise ValueError(f"fill must be one value or three (RGB, 8-bit levels), got {fill!r}")
    return tuple(v / 255.0 for v in values)


class _RandomFlip(DetectionOp):
    """What the two flips share: torchvision's ``_RandomApplyTransform`` coin, then :meth:`_flip`."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = float(p)

    def __call__(self, geom, target, gen):
        if torch.rand(1, generator=gen) >= self.p:
            return
        self._flip(geom, target, target["boxes"])

    def _flip(self, geom: Geometry, target: dict[str, Any], b: Tensor) -> None:
        raise NotImplementedError


class RandomHorizontalFlip(_RandomFlip):
    """torchvision v2's ``RandomHorizontalFlip(p)``: boxes ``x ↦ W − x``, masks and image mirrored."""

    def _flip(self, geom, target, b):
        w = geom.canvas[1]
        target["boxes"] = torch.stack([w - b[:, 2], b[:, 1], w - b[:, 0], b[:, 3]], dim=1)
        geom.hflip()


class RandomVerticalFlip(_RandomFlip):
    """torchvision v2's ``RandomVerticalFlip(p)``: boxes ``y ↦ H − y``; image and masks mirrored
    top to bottom — on the device as an affine warp of the canvas (``y ↦ −y`` about its centre:
    every sample position is a pixel centre, so nearest sampling is an exact row permutation)."""

    def _flip(self, geom, target, b):
        h = geom.canvas[0]
        target["boxes"] = torch.stack([b[:, 0], h - b[:, 3], b[:, 2], h - b[:, 1]], dim=1)
        geom.warp([1.0, 0.0, 0.0, 0.0, -1.0, 0.0], "nearest", (0.0, 0.0, 0.0))


class Resize(DetectionOp):
    """torchvision v2's ``Resize(size, max_size)`` (antialiased bilinear)."""

    def __init__(self, size: int | Sequence[int] | None, max_size: int | None = None) -> None:
        self.size, self.max_size = size, max_size

    def __call__(self, geom, target, gen):
        old = geom.canvas
        new = resized_output_size(old, self.size, self.max_size)
        _resize_boxes(target, old, new)
        geom.resize(*new)


class RandomShortestSize(DetectionOp):
    """torchvision v2's ``RandomShortestSize(min_size, max_size)``: the shorter side becomes one of
    ``min_size`` (uniform), capped so that the longer stays within ``max_size``."""

    def __init__(self, min_size: int | Sequence[int], max_size: int | None = None) -> None:
        self.min_size = [int(min_size)] if isinstance(min_size, int) else [int(v) for v in min_size]
        self.max_size = max_size

    def __call__(self, geom, target, gen):
        h, w = geom.canvas
        min_size = self.min_size[int(torch.randint(len(self.min_size), (), generator=gen))]
        r = min_size / min(h, w)
        if self.max_size is not None:
            r = min(r, self.max_size / max(h, w))
        new = (int(h * r), int(w * r))
        _resize_boxes(target, (h, w), new)
        geom.resize(*new)


class ScaleJitter(DetectionOp):
    """torchvision v2's ``ScaleJitter(target_size, scale_range)`` (large scale jitter): the image is
    resized by ``min(target_h/h, target_w/w) · U(scale_range)``, keeping its aspect ratio."""

    def __init__(self, target_size: Sequence[int], scale_range: Sequence[float] = (0.1, 2.0)) -> None:
        self.target_size = (int(target_size[0]), int(target_size[1]))
        self.scale_range = (float(scale_range[0]), float(scale_range[1]))

    def __call__(self, geom, target, gen):
        h, w = geom.canvas
        lo, hi = self.scale_range
        scale = lo + torch.rand(1, generator=gen) * (hi - lo)   # float32, as torchvision's
        # torchvision's (sic): target_size[1] against the height, [0] against the width
        r = min(self.target_size[1] / h, self.target_size[0] / w) * scale
        new = (int(h * r), int(w * r))
        _resize_boxes(target, (h, w), new)
        geom.resize(*new)


class FixedSizeCrop(DetectionOp):
    """torchvision's detection references' ``FixedSizeCrop(size, fill)`` (their LSJ preset): a crop
    of at most ``size`` at a random offset (one draw for both axes, as theirs), boxes shifted, clamped
    and the empty ones dropped with their labels and masks; then padding at the bottom and right up
    to ``size`` with ``fill`` (8-bit levels; masks 0)."""

    def __init__(self, size: int | Sequence[int], fill: float | Sequence[float] = 0) -> None:
        size = (size, size) if isinstance(size, int) else tuple(size)
        self.size = (int(size[0]), int(size[1]))
        self.fill = fill
        self._fill = _fill(fill)

    def __call__(self, geom, target, gen):
        h, w = geom.canvas
        ch, cw = self.size
        nh, nw = min(h, ch), min(w, cw)
        if (nh, nw) != (h, w):
            r = torch.rand(1, generator=gen)
            top, left = int(max(h - ch, 0) * r), int(max(w - cw, 0) * r)
            b = target["boxes"].clone()
            b[:, 0::2] -= left
            b[:, 1::2] -= top
            b[:, 0::2] = b[:, 0::2].clamp(0, nw)
            b[:, 1::2] = b[:, 1::2].clamp(0, nh)
            target["boxes"] = b
            _keep(target, (b[:, 0] < b[:, 2]) & (b[:, 1] < b[:, 3]))
            geom.crop(top, left, nh, nw)
        geom.pad(0, 0, max(cw - nw, 0), max(ch - nh, 0), self._fill)


class RandomResizedCrop(DetectionOp):
    """torchvision v2's ``RandomResizedCrop(size, scale, ratio)`` on a detection sample: its crop
    draw (10 tries of area and log-uniform aspect, else the central crop), the crop resized to
    ``size`` with antialiasing in one resampling, boxes shifted, clamped to the crop and scaled."""

    def __init__(self, size: int | Sequence[int], scale: Sequence[float] = (0.08, 1.0),
                 ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0)) -> None:
        size = (size, size) if isinstance(size, int) else tuple(size)
        self.size = (int(size[0]), int(size[1]))
        self.scale, self.ratio = (float(scale[0]), float(scale[1])), (float(ratio[0]), float(ratio[1]))
        self._log_ratio = torch.log(torch.tensor(self.ratio))  # float32, as torchvision's

    def _draw(self, height: int, width: int, gen: torch.Generator) -> tuple[int, int, int, int]:
        area = height * width
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(self.scale[0], self.scale[1], generator=gen).item()
            aspect = torch.exp(torch.empty(1).uniform_(float(self._log_ratio[0]), float(self._log_ratio[1]),
                                                       generator=gen)).item()
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                i = int(torch.randint(0, height - h + 1, size=(1,), generator=gen).item())
                j = int(torch.randint(0, width - w + 1, size=(1,), generator=gen).item())
                return i, j, h, w
        in_ratio = float(width) / float(height)
        if in_ratio < min(self.ratio):
            w, h = width, int(round(width / min(self.ratio)))
        elif in_ratio > max(self.ratio):
            h, w = height, int(round(height * max(self.ratio)))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, geom, target, gen):
        i, j, h, w = self._draw(*geom.canvas, gen)
        b = target["boxes"] - torch.tensor([j, i, j, i], dtype=target["boxes"].dtype)
        target["boxes"] = _clamp(b, (h, w))
        geom.crop(i, j, h, w)
        _resize_boxes(target, (h, w), self.size)
        geom.resize(*self.size)


class RandomResize(DetectionOp):
    """torchvision v2's ``RandomResize(min_size, max_size)``: the shorter side resized to a size
    drawn uniformly from ``[min_size, max_size)`` (``torch.randint``; the segmentation references'
    training scale, ``0.5–2.0 × base_size``)."""

    def __init__(self, min_size: int, max_size: int) -> None:
        self.min_size, self.max_size = int(min_size), int(max_size)

    def __call__(self, geom, target, gen):
        size = int(torch.randint(self.min_size, self.max_size, (), generator=gen))
        old = geom.canvas
        new = resized_output_size(old, size)
        _resize_boxes(target, old, new)
        geom.resize(*new)


class PadIfSmaller(DetectionOp):
    """torchvision's segmentation references' ``PadIfSmaller(size, fill)``: pad the bottom and
    right up to ``size`` on each side shorter than it, the image with ``fill`` (8-bit levels;
    their default 0) and masks with 255 (the ignore index)."""

    def __init__(self, size: int, fill: float | Sequence[float] = 0) -> None:
        self.size, self.fill = int(size), fill
        self._fill = _fill(fill)

    def __call__(self, geom, target, gen):
        h, w = geom.canvas
        geom.pad(0, 0, max(self.size - w, 0), max(self.size - h, 0), self._fill)


class RandomCrop(DetectionOp):
    """torchvision v2's ``RandomCrop(size, pad_if_needed, fill)`` (``padding=None``): a crop at a
    uniformly drawn offset, boxes shifted and clamped. ``pad_if_needed``: a side shorter than the
    crop is first padded on both ends by the shortfall (torchvision's rule: the canvas grows by
    twice it), the image with ``fill`` (8-bit levels), masks with 0; without it a short side is an
    error, as torchvision's (the segmentation references put :class:`PadIfSmaller` first)."""

    def __init__(self, size: int | Sequence[int], pad_if_needed: bool = False, fill: float | Sequence[float] = 0) -> None:
        size = (size, size) if isinstance(size, int) else tuple(size)
        self.size = (int(size[0]), int(size[1]))
        self.pad_if_needed, self.fill = bool(pad_if_needed), fill
        self._fill = _fill(fill)

    def __call__(self, geom, target, gen):
        h, w = geom.canvas
        ch, cw = self.size
        dy = ch - h if self.pad_if_needed and h < ch else 0
        dx = cw - w if self.pad_if_needed and w < cw else 0
        if dy or dx:
            geom.pad(dx, dy, dx, dy, self._fill)
            target["boxes"] = _clamp(target["boxes"] + torch.tensor([dx, dy, dx, dy], dtype=target["boxes"].dtype),
                                     (h + 2 * dy, w + 2 * dx))
            h, w = h + 2 * dy, w + 2 * dx
        if h < ch or w < cw:
            raise ValueError(f"Required crop size {self.size} is larger than input image size {(h, w)}.")
        top = int(torch.randint(0, h - ch + 1, size=(), generator=gen)) if h > ch else 0
        left = int(torch.randint(0, w - cw + 1, size=(), generator=gen)) if w > cw else 0
        target["boxes"] = _clamp(target["boxes"] - torch.tensor([left, top, left, top], dtype=target["boxes"].dtype),
                                 (ch, cw))
        geom.crop(top, left, ch, cw)


class RandomZoomOut(DetectionOp):
    """torchvision v2's ``RandomZoomOut(fill, side_range, p)``: with probability ``p``, the image is
    placed at a random offset on a canvas ``U(side_range)`` times its size, filled with ``fill``
    (8-bit levels; masks 0); boxes shifted."""

    def __init__(self, fill: float | Sequence[float] = 0, side_range: Sequence[float] = (1.0, 4.0),
                 p: float = 0.5) -> None:
        if side_range[0] < 1.0 or side_range[0] > side_range[1]:
            raise ValueError(f"Invalid side range provided {side_range}.")
        self.fill, self.side_range, self.p = fill, (float(side_range[0]), float(side_range[1])), float(p)
        self._fill = _fill(fill)

    def __call__(self, geom, target, gen):
        if torch.rand(1, generator=gen) >= self.p:
            return
        h, w = geom.canvas
        r = self.side_range[0] + torch.rand(1, generator=gen) * (self.side_range[1] - self.side_range[0])
        canvas_w, canvas_h = int(w * r), int(h * r)
        r = torch.rand(2, generator=gen)
        left, top = int((canvas_w - w) * r[0]), int((canvas_h - h) * r[1])
        right, bottom = canvas_w - (left + w), canvas_h - (top + h)
        b = target["boxes"] + torch.tensor([left, top, left, top], dtype=target["boxes"].dtype)
        target["boxes"] = _clamp(b, (canvas_h, canvas_w))
        geom.pad(left, top, right, bottom, self._fill)


class RandomIoUCrop(DetectionOp):
    """torchvision v2's ``RandomIoUCrop`` (SSD's sampler): draws a minimum IoU among
    ``sampler_options`` (1.0 or more: no crop), then up to ``trials`` crops of scale
    ``U(min_scale, max_scale)`` per side within the aspect range, until one contains a box centre
    and overlaps a contained box by at least that IoU; boxes whose centre left the crop become
    ``(0, 0, 0, 0)`` (for :class:`SanitizeBoundingBoxes` to drop)."""

    def __init__(self, min_scale: float = 0.3, max_scale: float = 1.0, min_aspect_ratio: float = 0.5,
                 max_aspect_ratio: float = 2.0, sampler_options: Sequence[float] | None = None,
                 trials: int = 40) -> None:
        self.min_scale, self.max_scale = float(min_scale), float(max_scale)
        self.min_aspect_ratio, self.max_aspect_ratio = float(min_aspect_ratio), float(max_aspect_ratio)
        self.sampler_options = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0] if sampler_options is None else list(sampler_options)
        self.trials = int(trials)

    def __call__(self, geom, target, gen):
        h, w = geom.canvas
        boxes = target["boxes"]
        while True:
            idx = int(torch.randint(low=0, high=len(self.sampler_options), size=(1,), generator=gen))
            min_iou = self.sampler_options[idx]
            if min_iou >= 1.0:
                return
            for _ in range(self.trials):
                r = self.min_scale + (self.max_scale - self.min_scale) * torch.rand(2, generator=gen)
                new_w, new_h = int(w * r[0]), int(h * r[1])
                if not (self.min_aspect_ratio <= new_w / new_h <= self.max_aspect_ratio):
                    continue
                r = torch.rand(2, generator=gen)
                left, top = int((w - new_w) * r[0]), int((h - new_h) * r[1])
                right, bottom = left + new_w, top + new_h
                if left == right or top == bottom:
                    continue
                cx = 0.5 * (boxes[:, 0] + boxes[:, 2])
                cy = 0.5 * (boxes[:, 1] + boxes[:, 3])
                inside = (left < cx) & (cx < right) & (top < cy) & (cy < bottom)
                if not inside.any():
                    continue
                crop = torch.tensor([[left, top, right, bottom]], dtype=boxes.dtype)
                if _box_iou(boxes[inside], crop).max() < min_iou:
                    continue
                b = boxes - torch.tensor([left, top, left, top], dtype=boxes.dtype)
                b = _clamp(b, (new_h, new_w))
                b[~inside] = 0
                target["boxes"] = b
                geom.crop(top, left, new_h, new_w)
                return


def _forward_affine(center: tuple[float, float], angle: float, translate: Sequence[float], scale: float,
                    shear: Sequence[float]) -> list[float]:
    """torchvision's ``_get_inverse_affine_matrix(..., inverted=False)``: the forward map of the
    points (boxes' corners) in pixel coordinates about ``center``."""
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    m = [v * scale for v in (a, b, 0.0, c, d, 0.0)]
    m[2] += m[0] * (-cx) + m[1] * (-cy) + cx + tx
    m[5] += m[3] * (-cx) + m[4] * (-cy) + cy + ty
    return m


def _expanded_size(inverse: Sequence[float], w: int, h: int) -> tuple[int, int]:
    """torchvision's ``_compute_affine_output_size``: the (w, h) a rotation with ``expand`` makes
    (float32 corners, 1e-4 tolerance before floor/ceil)."""
    half_w, half_h = 0.5 * w, 0.5 * h
    pts = torch.tensor([[-half_w, -half_h, 1.0], [-half_w, half_h, 1.0], [half_w, half_h, 1.0], [half_w, -half_h, 1.0]])
    new = pts @ torch.tensor(list(inverse), dtype=torch.float).view(2, 3).T
    lo, hi = new.aminmax(dim=0)
    halfs = torch.tensor((half_w, half_h))
    size = (hi + halfs - 1e-4).ceil() - (lo + halfs + 1e-4).floor()
    return int(size[0]), int(size[1])


def _affine_boxes(target: dict[str, Any], forward: list[float], canvas: tuple[int, int],
                  expanded: tuple[int, int] | None = None) -> None:
    """torchvision's ``affine_bounding_boxes``: the 4 corners mapped, their bounding box, clamped to
    the canvas — with ``expanded`` (h, w) (a rotation with ``expand``), shifted by the mapped canvas's
    top-left first and clamped to the new canvas."""
    b = target["boxes"]
    if not len(b):
        return
    m = torch.tensor(forward, dtype=b.dtype).reshape(2, 3).T
    pts = b[:, [[0, 1], [2, 1], [2, 3], [0, 3]]].reshape(-1, 2)
    pts = torch.cat([pts, torch.ones(pts.shape[0], 1, dtype=b.dtype)], 1)
    out = (pts @ m).reshape(-1, 4, 2)
    lo, hi = torch.aminmax(out, dim=1)
    boxes = torch.cat([lo, hi], 1)
    if expanded is not None:
        h, w = canvas
        corners = torch.tensor([[0.0, 0.0, 1.0], [0.0, float(h), 1.0], [float(w), float(h), 1.0], [float(w), 0.0, 1.0]],
                               dtype=b.dtype)
        boxes = boxes - torch.amin(corners @ m, dim=0, keepdim=True).repeat(1, 2)
        canvas = expanded
    target["boxes"] = _clamp(boxes, canvas)


class _AffineOp(DetectionOp):
    """What :class:`RandomAffine` and :class:`RandomRotation` share: the warp of image, boxes, masks."""

    def _apply(self, geom: Geometry, target: dict[str, Any], angle: float, translate: Sequence[float], scale: float,
               shear: Sequence[float], expand: bool = False) -> None:
        h, w = geom.canvas
        inverse = G.affine_matrix(torch.tensor([angle]), torch.tensor([list(translate)], dtype=torch.float64),
                                  torch.tensor([scale]), torch.tensor([list(shear)], dtype=torch.float64),
                                  size=(h, w))[0].reshape(-1).tolist()
        size = None
        if expand:
            ow, oh = _expanded_size(inverse, w, h)
            size = (oh, ow)
        _affine_boxes(target, _forward_affine((w * 0.5, h * 0.5), angle, translate, scale, shear), (h, w), size)
        geom.warp(inverse, self.interpolation, self._fill, size)


class RandomAffine(_AffineOp):
    """torchvision v2's ``RandomAffine(degrees, translate, scale, shear, interpolation, fill)``
    (``center`` the image centre): its draws, the warp on the device (``fill`` in 8-bit levels;
    masks filled with 0), boxes as its ``affine_bounding_boxes`` (corners, then clamped)."""

    def __init__(self, degrees: float | Sequence[float], translate: Sequence[float] | None = None,
                 scale: Sequence[float] | None = None, shear: float | Sequence[float] | None = None,
                 interpolation: str = "nearest", fill: float | Sequence[float] = 0) -> None:
        self.degrees = (-float(degrees), float(degrees)) if isinstance(degrees, (int, float)) else tuple(degrees)
        self.translate, self.scale = translate, scale
        if isinstance(shear, (int, float)):
            shear = (-float(shear), float(shear))
        self.shear = None if shear is None else tuple(float(v) for v in shear)
        if interpolation not in ("nearest", "bilinear"):
            raise ValueError(f"interpolation must be 'nearest' or 'bilinear', got {interpolation!r}")
        self.interpolation, self.fill = interpolation, fill
        self._fill = _fill(fill)

    def __call__(self, geom, target, gen):
        h, w = geom.canvas
        angle = torch.empty(1).uniform_(self.degrees[0], self.degrees[1], generator=gen).item()
        if self.translate is not None:
            max_dx, max_dy = float(self.translate[0] * w), float(self.translate[1] * h)
            tx = int(round(torch.empty(1).uniform_(-max_dx, max_dx, generator=gen).item()))
            ty = int(round(torch.empty(1).uniform_(-max_dy, max_dy, generator=gen).item()))
            translate = (tx, ty)
        else:
            translate = (0, 0)
        scale = torch.empty(1).uniform_(self.scale[0], self.scale[1], generator=gen).item() if self.scale else 1.0
        shear_x = shear_y = 0.0
        if self.shear is not None:
            shear_x = torch.empty(1).uniform_(self.shear[0], self.shear[1], generator=gen).item()
            if len(self.shear) == 4:
                shear_y = torch.empty(1).uniform_(self.shear[2], self.shear[3], generator=gen).item()
        self._apply(geom, target, angle, translate, scale, (shear_x, shear_y))


class RandomRotation(_AffineOp):
    """torchvision v2's ``RandomRotation(degrees, interpolation, expand, fill)`` (counter-clockwise,
    about the image centre; ``expand``: the canvas grows to hold the whole rotated image)."""

    def __init__(self, degrees: float | Sequence[float], interpolation: str = "nearest", expand: bool = False,
                 fill: float | Sequence[float] = 0) -> None:
        self.expand = bool(expand)
        self.degrees = (-float(degrees), float(degrees)) if isinstance(degrees, (int, float)) else tuple(degrees)
        if interpolation not in ("nearest", "bilinear"):
            raise ValueError(f"interpolation must be 'nearest' or 'bilinear', got {interpolation!r}")
        self.interpolation, self.fill = interpolation, fill
        self._fill = _fill(fill)

    def __call__(self, geom, target, gen):
        angle = torch.empty(1).uniform_(self.degrees[0], self.degrees[1], generator=gen).item()
        # torchvision's rotate: affine by −angle
        self._apply(geom, target, -angle, (0.0, 0.0), 1.0, (0.0, 0.0), self.expand)


class RandomPhotometricDistort(DetectionOp):
    """torchvision v2's ``RandomPhotometricDistort`` (SSD's colour distortion): each of brightness,
    contrast, saturation and hue with probability ``p`` (factor uniform in its range), contrast
    before or after saturation and hue (a fair coin), and a random channel permutation with
    probability ``p``; on the image as it is at that point of the list (the ``ssd`` preset: the
    decoded image, before any geometry). Boxes and masks are unchanged."""

    def __init__(self, brightness: Sequence[float] = (0.875, 1.125), contrast: Sequence[float] = (0.5, 1.5),
                 saturation: Sequence[float] = (0.5, 1.5), hue: Sequence[float] = (-0.05, 0.05), p: float = 0.5) -> None:
        self.brightness, self.contrast = tuple(brightness), tuple(contrast)
        self.saturation, self.hue, self.p = tuple(saturation), tuple(hue), float(p)

    def __call__(self, geom, target, gen):
        params: dict[str, Any] = {}
        for key, (lo, hi) in (("brightness", self.brightness), ("contrast", self.contrast),
                              ("saturation", self.saturation), ("hue", self.hue)):
            on = bool(torch.rand(1, generator=gen) < self.p)  # torchvision: the coin, then the value
            params[key] = float(torch.empty(1).uniform_(lo, hi, generator=gen).item()) if on else None
        params["contrast_before"] = bool(torch.rand((), generator=gen) < 0.5)
        params["permutation"] = (torch.randperm(3, generator=gen).tolist()
                                 if bool(torch.rand(1, generator=gen) < self.p) else None)
        geom.photometric(params)


class DetectorResize(DetectionOp):
    """What a torchvision detector's ``GeneralizedRCNNTransform`` does to its input, done in the
    device step so that the model's own transform no longer resamples
    (:func:`dctnet.models.detection.prepare_detector` turns it off): the scale
    ``min(min_size/short, max_size/long)`` with ``min_size`` drawn uniformly from the tuple in
    training (its ``torch_choice``) and the last one in eval, output ``floor(side·scale)``, torch's
    plain (non-antialiased) bilinear; boxes by its ``resize_boxes`` (float32 ratios), masks nearest.
    ``fixed_size`` (SSD's transform): exactly that ``(w, h)``, as torchvision's argument reads."""

    def __init__(self, min_size: int | Sequence[int], max_size: int, *, train: bool = True,
                 fixed_size: Sequence[int] | None = None) -> None:
        self.min_size = (int(min_size),) if isinstance(min_size, int) else tuple(int(v) for v in min_size)
        self.max_size, self.train = int(max_size), bool(train)
        self.fixed_size = None if fixed_size is None else (int(fixed_size[0]), int(fixed_size[1]))

    @classmethod
    def from_model(cls, model: Any, *, train: bool = True) -> "DetectorResize":
        """The resize of ``model.transform`` (a torchvision detector's ``GeneralizedRCNNTransform``)."""
        t = getattr(model, "transform", None)
        if t is None or not hasattr(t, "min_size") or not hasattr(t, "max_size"):
            raise ValueError(f"{type(model).__name__} has no GeneralizedRCNNTransform (model.transform) to take "
                             "its min_size/max_size from")
        return cls(tuple(t.min_size), t.max_size, train=train, fixed_size=getattr(t, "fixed_size", None))

    def __call__(self, geom, target, gen):
        h, w = geom.canvas
        if self.fixed_size is not None:
            new = (self.fixed_size[1], self.fixed_size[0])
        else:
            if self.train:  # torchvision's torch_choice
                size = self.min_size[int(torch.empty(1).uniform_(0.0, float(len(self.min_size)), generator=gen).item())]
            else:
                size = self.min_size[-1]
            scale = min(size / min(h, w), self.max_size / max(h, w))
            new = (int(math.floor(h * scale)), int(math.floor(w * scale)))
        # its resize_boxes: ratios of float32 sizes
        ratio_h = float(torch.tensor(new[0], dtype=torch.float32) / torch.tensor(h, dtype=torch.float32))
        ratio_w = float(torch.tensor(new[1], dtype=torch.float32) / torch.tensor(w, dtype=torch.float32))
        b = target["boxes"]
        target["boxes"] = b * torch.tensor([ratio_w, ratio_h, ratio_w, ratio_h], dtype=torch.float32).to(b.dtype)
        geom.resize(*new, antialias=False)


class SanitizeBoundingBoxes(DetectionOp):
    """torchvision v2's ``SanitizeBoundingBoxes(min_size, min_area)``: drops boxes narrower or
    lower than ``min_size``, smaller than ``min_area``, or outside the canvas, with their labels,
    masks and other per-box fields."""

    def __init__(self, min_size: float = 1.0, min_area: float = 1.0) -> None:
        if min_size < 1 or min_area < 1:
            raise ValueError(f"min_size and min_area must be >= 1, got {min_size}, {min_area}")
        self.min_size, self.min_area = float(min_size), float(min_area)

    def __call__(self, geom, target, gen):
        b = target["boxes"]
        h, w = geom.canvas
        ws, hs = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
        valid = (ws >= self.min_size) & (hs >= self.min_size) & (b >= 0).all(dim=-1) & (ws * hs >= self.min_area)
        valid &= (b[:, 0] <= w) & (b[:, 2] <= w) & (b[:, 1] <= h) & (b[:, 3] <= h)
        _keep(target, valid)


# ---------------------------------------------------------------------------------------------- plans
@dataclass
class DetectionPlan:
    """A batch's drawn geometry (host).

    Attributes:
        sizes: ``int64 (B, 2)`` each sample's output (h, w).
        stages: ``int64 (S, B, 10)`` per stage and sample: ``(resized_h, resized_w, top, left,
            out_h, out_w, box_top, box_left, box_h, box_w)``: the box of the input canvas (the
            previous stage's ``out``; stage 0: the image) resized, the window kept.
        flips: ``bool (S, B)``.
        antialias: ``bool (S, B)``: antialiased resampling, or torch's plain bilinear.
        fills: per stage, ``(B, 3)`` RGB in [0, 1] of each sample's padding (samples may pad a
            stage with different fills: which ops join a stage depends on each sample's draws).
        targets: per sample, the target moved (boxes float32 XYXY; ``_kept``: the indices of the
            source boxes that remain, in order).
        mask_maps: per sample, how its masks move (:meth:`Geometry.mask_maps`).
        warps: per stage, ``None`` or ``(inverse (B, 2, 3) float64, mode, fill, on (B,))``: the
            stage's affine warp per sample (identity where a sample has none).
    """

    sizes: Tensor
    stages: Tensor
    flips: Tensor
    antialias: Tensor
    fills: list[Tensor]
    #: per stage: ``None`` (no colour ops), or host tensors of the drawn :class:`RandomPhotometricDistort`
    #: parameters per sample — ``factors (B, 4)`` (brightness, contrast, saturation, hue; identities 1,
    #: 1, 1, 0), ``on (B, 4)``, ``before (B,)``, ``permutation (B, 3)``, ``permute (B,)``
    photometric: list[dict[str, Tensor] | None]
    targets: list[dict[str, Any]]
    mask_maps: list[list[tuple]] = field(repr=False)
    warps: list[tuple | None] = field(default_factory=list)
    #: per stage, ``int64 (B, 2)``: each sample's canvas after the stage (its window, or its warp's output)
    canvas: list[Tensor] = field(default_factory=list)
    #: :class:`SimpleCopyPaste`'s draw: per sample, the indices of the previous sample's objects
    #: pasted onto it (``None``: no copy-paste)
    paste: list[Tensor] | None = None


class DetectionCompose:
    """torchvision-style ``Compose`` of detection ops, drawn per sample from
    :func:`sample_generator` ``(seed, epoch, index)``."""

    def __init__(self, ops: Sequence[DetectionOp], seed: int = 0) -> None:
        ops = list(ops)
        if not all(isinstance(o, DetectionOp) for o in ops):
            raise TypeError("DetectionCompose takes dctnet.transforms.detection ops")
        self.ops, self.seed = ops, int(seed)

    def __repr__(self) -> str:
        return "DetectionCompose(\n" + "".join(f"    {o!r}\n" for o in self.ops) + ")"

    def draw_one(self, size: tuple[int, int], target: dict[str, Any],
                 gen: torch.Generator) -> tuple[Geometry, dict[str, Any]]:
        """One sample: its geometry and its moved target (a copy; the input is not changed)."""
        # masks and semantic maps: gathered on the device by apply_plan
        t = {k: v for k, v in target.items() if k not in ("masks", "semantic")}
        # float32, as torchvision's detection references and the rgb arm carry boxes: every op's arithmetic
        # then rounds where theirs does — a box on the border stays on it after a resize (81 · float32(256/81)
        # is 256 in float32 and 256.0000019 in float64, past the canvas: sanitize dropped it)
        t["boxes"] = torch.as_tensor(t.get("boxes", torch.zeros(0, 4))).to(torch.float32).reshape(-1, 4)
        t["_kept"] = torch.arange(t["boxes"].shape[0])
        geom = Geometry.of(*size)
        for op in self.ops:
            op(geom, t, gen)
        return geom, t

    def draw(self, sizes: Sequence[tuple[int, int]], targets: Sequence[dict[str, Any]], indices: Sequence[int],
             epoch: int = 0) -> DetectionPlan:
        """The plan of a batch: ``sizes`` (h, w) of the images, their ``targets``, dataset ``indices``."""
        geoms, moved = [], []
        for size, target, index in zip(sizes, targets, indices):
            g, t = self.draw_one(tuple(size), target, sample_generator(self.seed, epoch, index))
            geoms.append(g)
            moved.append(t)
        return plan_of(geoms, moved)


def plan_of(geoms: Sequence[Geometry], targets: Sequence[dict[str, Any]]) -> DetectionPlan:
    """Stack per-sample geometries into a :class:`DetectionPlan` (samples with fewer stages get
    identity stages at the end)."""
    n = max(len(g.stages) for g in geoms)
    stages = np.zeros((n, len(geoms), 10), np.int64)
    flips = np.zeros((n, len(geoms)), bool)
    antialias = np.ones((n, len(geoms)), bool)
    fills = np.zeros((n, len(geoms), 3), np.float64)
    for b, g in enumerate(geoms):
        seq = g.stages + [_Stage.identity(g.canvas) for _ in range(n - len(g.stages))]
        for s, st in enumerate(seq):
            stages[s, b] = (*st.resized, *st.window, *st.box)
            flips[s, b] = st.flip
            antialias[s, b] = st.antialias
            if st.fill is not None:
                fills[s, b] = st.fill
    photometric: list[dict[str, Tensor] | None] = []
    for s in range(n):
        drawn = [g.stages[s].photometric if s < len(g.stages) else None for g in geoms]
        if all(d is None for d in drawn):
            photometric.append(None)
            continue
        keys = ("brightness", "contrast", "saturation", "hue")
        identity = {"brightness": 1.0, "contrast": 1.0, "saturation": 1.0, "hue": 0.0}
        on = torch.tensor([[d is not None and d[k] is not None for k in keys] for d in drawn])
        factors = torch.tensor([[d[k] if d is not None and d[k] is not None else identity[k] for k in keys]
                                for d in drawn], dtype=torch.float64)
        photometric.append({
            "factors": factors, "on": on,
            "before": torch.tensor([bool(d is not None and d["contrast_before"]) for d in drawn]),
            "permute": torch.tensor([d is not None and d["permutation"] is not None for d in drawn]),
            "permutation": torch.tensor([d["permutation"] if d is not None and d["permutation"] is not None
                                         else [0, 1, 2] for d in drawn], dtype=torch.int64)})
    warps: list[tuple | None] = []
    for s in range(n):
        drawn = [g.stages[s].warp if s < len(g.stages) else None for g in geoms]
        if all(d is None for d in drawn):
            warps.append(None)
            continue
        kinds = {(d["mode"], d["fill"]) for d in drawn if d is not None}
        if len(kinds) > 1:
            raise ValueError(f"stage {s}: samples warp with different interpolations or fills ({sorted(kinds)})")
        mode, fill = kinds.pop()
        inverse = torch.tensor([d["inverse"] if d is not None else [1.0, 0.0, 0.0, 0.0, 1.0, 0.0] for d in drawn],
                               dtype=torch.float64).reshape(-1, 2, 3)
        # each sample's warp input (its window) and output canvas; identity where it has no warp
        ins = torch.tensor([d["input"] if d is not None else tuple(stages[s, b, 4:6]) for b, d in enumerate(drawn)],
                           dtype=torch.int64)
        outs = torch.tensor([d["size"] if d is not None else tuple(stages[s, b, 4:6]) for b, d in enumerate(drawn)],
                            dtype=torch.int64)
        warps.append((inverse, mode, fill, torch.tensor([d is not None for d in drawn]), ins, outs))
    return DetectionPlan(sizes=torch.tensor([g.canvas for g in geoms], dtype=torch.int64).reshape(-1, 2),
                         stages=torch.from_numpy(stages), flips=torch.from_numpy(flips),
                         antialias=torch.from_numpy(antialias),
                         fills=list(torch.from_numpy(fills)), photometric=photometric, targets=list(targets),
                         mask_maps=[g.mask_maps() for g in geoms], warps=warps,
                         canvas=[torch.tensor([(seq[s].canvas if s < len(seq) else g.canvas)
                                               for g, seq in zip(geoms, (g.stages for g in geoms))],
                                              dtype=torch.int64).reshape(-1, 2) for s in range(n)])


# ---------------------------------------------------------------------------------------------- device
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


class SimpleCopyPaste:
    """torchvision's detection references' ``SimpleCopyPaste`` (``--use-copypaste``, with the
    ``lsj`` preset), on the batch the geometry leaves: sample ``b`` gets a random subset of the
    objects of sample ``b − 1`` (the batch rolled by one) pasted onto it.

    The references' rule (their ``_copy_paste``), step by step:

    - the subset: ``unique(randint(0, n, (n,)))`` of the ``n`` objects of the paste sample
      (drawn on the host, per sample, from its own generator; nothing is pasted when ``n = 0``);
    - the paste mask ``α`` = the union of their masks; ``blending`` passes it through their
      ``gaussian_blur(α, 5, σ=2)`` of a boolean mask, which comes back boolean and true wherever
      the blur is non-zero — a 5×5 dilation with reflected borders, computed as that;
    - image ← ``image·¬α + paste_image·α``; each own mask ← ``mask·¬α``; own objects whose mask
      is now empty are dropped; their boxes become ``masks_to_boxes`` of the occluded masks
      (inclusive pixel extents, as torchvision's); the pasted objects keep their boxes; ``area``
      (when present) becomes the masks' pixel counts; ``iscrowd`` is concatenated; degenerate
      boxes are dropped last. A sample whose paste sample has no objects is left as it was.

    The images must share one size (the references' LSJ pipeline crops every image to it; their
    resize of a differently sized paste image is not reproduced) and every target needs masks.

    Host syncs: which occluded objects survive depends on mask pixels, so :meth:`apply` ends with
    one device → host read of the batch's survival flags — the only synchronisation of a step with
    copy-paste (torchvision's detectors read the boxes back right after, in their degenerate-box
    test) — and keeps the survivors by index. The pixel and mask work is batched over the batch's
    objects; the per-sample loop only concatenates each target's fields."""

    def __init__(self, blending: bool = True) -> None:
        self.blending = bool(blending)

    def __repr__(self) -> str:
        return f"SimpleCopyPaste(blending={self.blending})"

    def draw(self, counts: Sequence[int], keys: Sequence[int], seed: int, epoch: int) -> list[Tensor]:
        """Per sample ``b``, the indices (sorted, unique) of the objects of sample ``b − 1`` pasted
        onto it; ``counts[b]`` is sample ``b``'s number of objects after the geometry."""
        out = []
        for b, key in enumerate(keys):
            n = int(counts[b - 1])
            g = sample_generator(seed, epoch, int(key), "copy-paste")  # apart from the geometry's stream
            out.append(torch.unique(torch.randint(0, n, (n,), generator=g)) if n else torch.zeros(0, dtype=torch.int64))
        return out

    def apply(self, images: Sequence[Tensor], targets: Sequence[dict[str, Any]],
              paste: Sequence[Tensor]) -> tuple[list[Tensor], list[dict[str, Any]]]:
        """``images[b]`` ``(3, h, w)`` and ``targets[b]`` (``boxes``, ``labels``, ``masks``
        ``(N_b, h, w)``, optionally ``area``, ``iscrowd``) on one device; ``paste`` from :meth:`draw`."""
        B = len(images)
        if B == 0:
            return [], []
        sizes = {tuple(im.shape[-2:]) for im in images}
        if len(sizes) != 1 or any(t.get("masks") is None for t in targets):
            raise ValueError("SimpleCopyPaste pastes between images of one size (the lsj preset crops every image to "
                             f"it; got sizes {sorted(sizes)}) and needs every target's instance masks")
        h, w = sizes.pop()
        device = images[0].device
        counts = [len(t["labels"]) for t in targets]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        owner = np.repeat(np.arange(B), counts)
        masks = torch.cat([t["masks"] for t in targets]) if sum(counts) else images[0].new_zeros((0, h, w),
                                                                                                 dtype=torch.uint8)
        # the pasted objects: global indices into ``masks`` and the sample each lands on
        picked = [paste[b].numpy() + offsets[(b - 1) % B] for b in range(B)]
        src = torch.from_numpy(np.concatenate(picked).astype(np.int64)).to(device, non_blocking=True)
        dst = torch.from_numpy(np.repeat(np.arange(B), [len(p) for p in picked])).to(device, non_blocking=True)
        pasted = masks.index_select(0, src)
        alpha = images[0].new_zeros((B, h, w)).index_add_(0, dst, pasted.to(images[0].dtype)) > 0
        if self.blending:  # gaussian_blur of a boolean mask → non-zero anywhere in the 5×5 reach
            alpha = torch.nn.functional.max_pool2d(
                torch.nn.functional.pad(alpha[:, None].to(images[0].dtype), (2, 2, 2, 2), mode="reflect"), 5, 1)[:, 0] > 0
        x = torch.stack(list(images))
        rolled = x.roll(1, 0)
        x = torch.where(alpha[:, None], rolled, x)
        own = masks * (~alpha).index_select(0, torch.from_numpy(owner).to(device, non_blocking=True))
        boxes = _masks_to_boxes(own)
        alive = (own != 0).flatten(1).any(1)
        out = []
        for b, t in enumerate(targets):  # host bookkeeping of the concatenation; device work is above
            o = slice(int(offsets[b]), int(offsets[b + 1]))
            p = paste[b]
            prev = targets[(b - 1) % B]
            if not len(p):  # nothing to paste (the previous sample has no objects): unchanged, as theirs
                out.append({**t, "_valid": torch.ones(counts[b], dtype=torch.bool, device=device)})
                x[b] = images[b]
                continue
            dev_p = p.to(device, non_blocking=True)
            t2 = dict(t)
            t2["masks"] = torch.cat([own[o], prev["masks"].index_select(0, dev_p)])
            t2["boxes"] = torch.cat([boxes[o], prev["boxes"].index_select(0, dev_p).to(boxes.dtype)])
            t2["labels"] = torch.cat([t["labels"], prev["labels"].index_select(0, dev_p)])
            valid = torch.cat([alive[o], torch.ones(len(p), dtype=torch.bool, device=device)])
            if "area" in t:
                t2["area"] = t2["masks"].flatten(1).sum(1).to(torch.float32)
            if "iscrowd" in t and "iscrowd" in prev and len(t["iscrowd"]) == counts[b]:
                t2["iscrowd"] = torch.cat([t["iscrowd"], prev["iscrowd"].index_select(0, dev_p)])
            elif "iscrowd" in t2:
                del t2["iscrowd"]
            bx = t2["boxes"]
            t2["_valid"] = valid & (bx[:, 2:] > bx[:, :2]).all(1)
            out.append(t2)
        # the one host read: which objects survive (their count sizes every target)
        flags = torch.cat([t.pop("_valid") for t in out]).cpu().numpy()
        ends = np.cumsum([len(t["labels"]) for t in out])
        for t, f in zip(out, np.split(flags, ends[:-1])):
            keep = torch.from_numpy(np.flatnonzero(f)).to(device, non_blocking=True)
            for k in BOX_FIELDS:
                if isinstance(t.get(k), Tensor):
                    t[k] = t[k].index_select(0, keep)
        return list(x.unbind(0)), out


def _masks_to_boxes(masks: Tensor) -> Tensor:
    """torchvision's ``ops.masks_to_boxes`` (XYXY, inclusive extents: the first and last pixel
    index along each axis) without its per-mask loop or host sync; an empty mask gives a
    degenerate box, dropped by the caller."""
    n, h, w = masks.shape
    rows, cols = (masks != 0).any(2), (masks != 0).any(1)
    ar_h = torch.arange(h, device=masks.device)
    ar_w = torch.arange(w, device=masks.device)
    y0 = torch.where(rows, ar_h, h).amin(1)
    y1 = torch.where(rows, ar_h, -1).amax(1)
    x0 = torch.where(cols, ar_w, w).amin(1)
    x1 = torch.where(cols, ar_w, -1).amax(1)
    return torch.stack([x0, y0, x1, y1], 1).to(torch.float32)


def coefficient_mosaics(images: Sequence[Tensor]) -> list[Tensor]:
    """The step's images (``(3, h_b, w_b)`` in [0, 1], sizes may differ) as what a DCT detector
    takes (:func:`dctnet.models.detection.dct_detector`): coefficient mosaics ``(3, H_b, W_b)``,
    ``H_b, W_b`` = ``h_b, w_b`` rounded up to multiples of 8 (the new rows and columns repeat the
    edge, as JPEG encoders pad), block DCT of YCbCr (:func:`dctnet.functional.coefficient_mosaic`).

    Each image is padded to its own blocks (a handful of small copies, like the detector's own
    batching), then one forward DCT runs over the batch padded to its largest image."""
    if not images:
        return []
    sizes = [(8 * -(-im.shape[-2] // 8), 8 * -(-im.shape[-1] // 8)) for im in images]
    h, w = max(s[0] for s in sizes), max(s[1] for s in sizes)
    batch = images[0].new_zeros(len(images), 3, h, w)
    for b, (im, (hb, wb)) in enumerate(zip(images, sizes)):
        padded = torch.nn.functional.pad(im[None], (0, wb - im.shape[-1], 0, hb - im.shape[-2]), mode="replicate")
        batch[b, :, :hb, :wb] = padded[0]
    mosaic = F.coefficient_mosaic(to_coefficients(batch))
    return [mosaic[b, :, :hb, :wb] for b, (hb, wb) in enumerate(sizes)]


class DetectionStep:
    """The detection device step: the batch's geometry drawn on the host from its targets, then the
    images (and instance masks) decoded and transformed on the batch's device.

    ``step(batch, targets, epoch)`` → ``(images, targets)``: ``images[b]`` float ``(3, h_b, w_b)`` in
    [0, 1] — the list torchvision's detectors take — and ``targets[b]`` on the batch's device with
    ``boxes`` float32 XYXY in those pixels, ``labels`` int64, ``masks`` uint8 ``(N_b, h_b, w_b)``
    (when the input target has masks), ``iscrowd``/``area`` where given (``area`` as the file
    states it, not rescaled), ``image_id``. Each sample's draws come from
    :func:`sample_generator` ``(seed, epoch, key)``, ``key`` its ``image_id`` (else its position
    ``index`` in the batch's dataset order, ``targets[b]["index"]``). ``targets[b]["size"]`` (h, w)
    is the image's size, a host value (:class:`dctnet.data.CocoDataset` sets it): the step reads
    nothing back from the device."""

    def __init__(self, ops: Sequence[DetectionOp] | DetectionCompose, seed: int = 0, *, exact: bool = False,
                 copy_paste: SimpleCopyPaste | None = None) -> None:
        self.compose = ops if isinstance(ops, DetectionCompose) else DetectionCompose(ops, seed)
        self.exact = bool(exact)
        self.seed = int(seed)
        #: a batch-level op after the per-sample geometry (torchvision's references apply it in their
        #: collate function, after the preset)
        self.copy_paste = copy_paste

    def __repr__(self) -> str:
        paste = f", {self.copy_paste!r}" if self.copy_paste is not None else ""
        return f"DetectionStep(exact={self.exact}, {self.compose!r}{paste})"

    def plan(self, targets: Sequence[dict[str, Any]], epoch: int = 0) -> DetectionPlan | None:
        """The host half: the batch's geometry and moved targets (``None`` for an empty batch)."""
        if not targets:
            return None
        keys = []
        for b, t in enumerate(targets):
            key = t.get("image_id", t.get("index"))
            if key is None or "size" not in t:
                raise ValueError(f"DetectionStep: target {b} needs 'size' (h, w) and an 'image_id' or 'index' "
                                 "(dctnet.data.CocoDataset's targets have both)")
            keys.append(int(key))
        plan = self.compose.draw([tuple(t["size"]) for t in targets], targets, keys, epoch)
        if self.copy_paste is not None:
            plan.paste = self.copy_paste.draw([len(t["labels"]) for t in plan.targets], keys, self.seed, epoch)
        return plan

    def __call__(self, batch: Any, targets: Sequence[dict[str, Any]],
                 epoch: int = 0) -> tuple[list[Tensor], list[dict[str, Any]]]:
        return self.apply(batch, targets, self.plan(targets, epoch))

    def apply(self, batch: Any, targets: Sequence[dict[str, Any]],
              plan: DetectionPlan | None) -> tuple[list[Tensor], list[dict[str, Any]]]:
        """The device half: ``plan`` (:meth:`plan` of these ``targets``) applied to ``batch``."""
        if plan is None:  # an empty batch (every sample skipped under on_error="skip")
            return [], []
        device = batch.valid.device
        has_masks = [t.get("masks") is not None for t in targets]
        # every host tensor the targets need, in one copy from pinned memory (transfer.move_plan), not a
        # pageable copy per field per image
        host = {"masks": [t["masks"] if m else None for t, m in zip(targets, has_masks)],
                "semantic": [t.get("semantic") for t in targets],
                "targets": [{"boxes": t["boxes"].to(torch.float32),
                             "labels": torch.as_tensor(t["labels"], dtype=torch.int64),
                             **{k: t[k] for k in ("iscrowd", "area") if t.get(k) is not None}}
                            for t in plan.targets]}
        on_device = move_plan(host, device)
        masks = on_device["masks"]
        images, out_masks = apply_plan(batch, plan, masks if any(has_masks) else None, exact=self.exact)
        out = []
        for b, t in enumerate(plan.targets):
            moved = dict(on_device["targets"][b])
            if out_masks[b] is not None:
                moved["masks"] = out_masks[b]
            if on_device["semantic"][b] is not None:
                moved["semantic"] = _gather(on_device["semantic"][b], plan.mask_maps[b], 255)  # padding: ignore index
            if "image_id" in t:
                moved["image_id"] = t["image_id"]
            out.append(moved)
        if plan.paste is not None:
            if self.copy_paste is None:
                raise ValueError("this plan was drawn with copy-paste; apply it with the step that drew it")
            images, out = self.copy_paste.apply(images, out, plan.paste)
        return images, out


def segmentation_preset(base_size: int = 520, crop_size: int = 480, hflip_prob: float = 0.5, *,
                        train: bool = True) -> list[DetectionOp]:
    """torchvision's segmentation references' presets: training ``RandomResize(0.5·base, 2·base)``,
    a flip, ``PadIfSmaller(crop)`` (images 0, masks 255) and ``RandomCrop(crop)``; eval ``Resize(base)``."""
    if not train:
        return [Resize(base_size)]
    ops: list[DetectionOp] = [RandomResize(int(0.5 * base_size), int(2.0 * base_size))]
    if hflip_prob > 0:
        ops.append(RandomHorizontalFlip(hflip_prob))
    return [*ops, PadIfSmaller(crop_size), RandomCrop(crop_size)]


def build_detection_ops(specs: Sequence[dict[str, Any]]) -> list[DetectionOp]:
    """Training ops from specs ``{"name": <torchvision's class name>, **its arguments}`` (a recipe's
    ``detect.ops``), in order, ending in ``SanitizeBoundingBoxes`` (appended unless last), as the
    presets end."""
    table = {cls.__name__: cls for cls in (RandomHorizontalFlip, RandomVerticalFlip, Resize, RandomShortestSize,
                                           ScaleJitter, FixedSizeCrop, RandomResizedCrop, RandomResize, PadIfSmaller,
                                           RandomCrop, RandomZoomOut, RandomIoUCrop, RandomAffine, RandomRotation,
                                           RandomPhotometricDistort, SanitizeBoundingBoxes)}
    ops: list[DetectionOp] = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, dict) or "name" not in spec:
            raise ValueError(f"op {i}: a mapping with a name, got {spec!r}")
        args = {k: v for k, v in spec.items() if k != "name"}
        cls = table.get(spec["name"])
        if cls is None:
            raise ValueError(f"op {i}: unknown detection op {spec['name']!r} (known: {', '.join(sorted(table))})")
        try:
            ops.append(cls(**args))
        except TypeError as exc:
            raise ValueError(f"op {i} ({spec['name']}): {exc}") from None
    if not ops or not isinstance(ops[-1], SanitizeBoundingBoxes):
        ops.append(SanitizeBoundingBoxes())
    return ops


#: ops whose ``fill`` torchvision v2 takes per type: the image's (8-bit levels), masks 0 as the references
_FILLED = ("RandomZoomOut", "RandomAffine", "RandomRotation", "RandomCrop")


def torchvision_ops(specs: list[dict[str, Any]]) -> Any:
    """torchvision v2's own classes for a recipe's ``detect.ops`` (the ``rgb`` arm), ending in
    ``SanitizeBoundingBoxes``: the same names and arguments; ``ValueError`` for an op torchvision's
    package lacks (the references' ``FixedSizeCrop``, ``RandomResize``, ``PadIfSmaller``)."""
    from torchvision import tv_tensors  # optional dependency (the rgb baseline's own ops)
    from torchvision.transforms import v2  # (as above)

    ops = []
    for i, spec in enumerate(specs):
        name = spec["name"]
        cls = getattr(v2, name, None)
        if cls is None or name in ("RandomResize",):  # v2.RandomResize exists but is not the references' op
            raise ValueError(f"op {i} ({name}) is torchvision's references', not in the torchvision package: "
                             "input 'rgb' cannot run it; use 'device-rgb'")
        args = {k: v for k, v in spec.items() if k != "name"}
        if name == "SanitizeBoundingBoxes":  # every per-box field dropped with its box, as the appended one
            args.setdefault("labels_getter", per_box_fields)
        if name in _FILLED and "fill" in args:
            args["fill"] = {tv_tensors.Image: args["fill"], tv_tensors.Mask: 0}
        ops.append(cls(**args))
    if not ops or not isinstance(ops[-1], v2.SanitizeBoundingBoxes):
        ops.append(torchvision_sanitize())
    return v2.Compose(ops)


def per_box_fields(sample: dict[str, Any]) -> tuple[Tensor, ...]:
    """What v2's ``SanitizeBoundingBoxes`` drops with the boxes: ``labels`` and the other per-box
    fields a COCO target carries (``iscrowd``, ``area``) — its default getter finds ``labels`` only,
    which leaves the others misaligned; ``box_index`` too when a sample carries it (each box's
    index in the file, to count what was dropped). A module-level function: DataLoader workers pickle it."""
    return tuple(sample[k] for k in ("labels", "iscrowd", "area", "box_index") if k in sample)


def torchvision_sanitize() -> Any:
    """torchvision v2's ``SanitizeBoundingBoxes`` keeping every per-box field aligned (:func:`per_box_fields`)."""
    from torchvision.transforms import v2  # optional dependency (the rgb baseline's own ops)

    return v2.SanitizeBoundingBoxes(labels_getter=per_box_fields)


def detection_preset(name: str, hflip_prob: float = 0.5,
                     mean: Sequence[float] = (123.0, 117.0, 104.0)) -> list[DetectionOp]:
    """torchvision's detection references' training presets (``DetectionPresetTrain``), then
    ``SanitizeBoundingBoxes`` as their v2 path ends: ``hflip``, ``lsj``, ``multiscale``, ``ssd``,
    ``ssdlite`` (their v2 path fills the ``ssd`` zoom-out with the mean and masks with 0)."""
    flip = RandomHorizontalFlip(p=hflip_prob)
    presets = {
        "hflip": [flip],
        "lsj": [ScaleJitter(target_size=(1024, 1024)), FixedSizeCrop(size=(1024, 1024), fill=list(mean)), flip],
        "multiscale": [RandomShortestSize(min_size=(480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800),
                                          max_size=1333), flip],
        "ssdlite": [RandomIoUCrop(), flip],
    }
    presets["ssd"] = [RandomPhotometricDistort(), RandomZoomOut(fill=list(mean)), RandomIoUCrop(), flip]
    if name not in presets:
        raise ValueError(f"unknown detection preset {name!r} (known: {', '.join(presets)})")
    return [*presets[name], SanitizeBoundingBoxes()]
