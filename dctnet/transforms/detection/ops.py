"""The detection ops: :class:`DetectionOp` and the ops that resize, flip, warp (affine, rotation,
perspective), distort colour or sanitize (the crops and pads: :mod:`.crop_ops`). Each draws as
torchvision's class of the same name, and registers itself by being declared (:data:`RECIPE_OPS`):
adding an op is its class in one of the package's op modules, plus its test."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from dctnet.kernels import geometry as G
from dctnet.transforms.augment import perspective_points
from dctnet.transforms.detection.geometry import (Geometry, affine_boxes, expanded_size, keep_boxes, perspective_boxes,
                                                  resize_boxes, resized_output_size)

#: every op an op list (a recipe's ``detect.ops``, a preset's) may name, by torchvision's class name, in
#: declaration order: a :class:`DetectionOp` subclass registers itself by being declared (a private
#: base, its name starting with ``_``, or a class that says ``recipe_op = False`` does not)
RECIPE_OPS: dict[str, type["DetectionOp"]] = {}


class DetectionOp:
    """An op on one sample: ``op(geometry, target, generator)`` draws as torchvision's class of the
    same name and updates the geometry and the target in place. Declaring a subclass registers it in
    :data:`RECIPE_OPS` (an op list names it; torchvision v2's class of the same name is its ``rgb``
    arm: :func:`~dctnet.transforms.detection.bridge.torchvision_ops`)."""

    #: whether an op list may name this op (``False``: the step's own, such as :class:`DetectorResize`)
    recipe_op: bool = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__name__.startswith("_") and cls.__dict__.get("recipe_op", True):
            RECIPE_OPS[cls.__name__] = cls

    def __call__(self, geom: Geometry, target: dict[str, Any], gen: torch.Generator) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"


def fill_rgb(fill: float | Sequence[float]) -> tuple[float, float, float]:
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
        resize_boxes(target, old, new)
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
        resize_boxes(target, (h, w), new)
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
        resize_boxes(target, (h, w), new)
        geom.resize(*new)


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
        resize_boxes(target, old, new)
        geom.resize(*new)


class _AffineOp(DetectionOp):
    """What :class:`RandomAffine` and :class:`RandomRotation` share: the warp of image, boxes, masks."""

    def _apply(self, geom: Geometry, target: dict[str, Any], angle: float, translate: Sequence[float], scale: float,
               shear: Sequence[float], expand: bool = False) -> None:
        h, w = geom.canvas
        # (the draws are float32 values: exact in float64)
        args = [torch.tensor([v], dtype=torch.float64) for v in (angle, list(translate), scale, list(shear))]
        inverse = G.affine_matrix(*args, size=(h, w))[0].reshape(-1).tolist()
        # the boxes' corners: the forward map in pixel coordinates about the image centre
        forward = G.affine_matrix(*args, size=(h, w), inverted=False)[0].reshape(-1).tolist()
        size = None
        if expand:
            ow, oh = expanded_size(inverse, w, h)
            size = (oh, ow)
        affine_boxes(target, forward, (h, w), size)
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
        self._fill = fill_rgb(fill)

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
        self._fill = fill_rgb(fill)

    def __call__(self, geom, target, gen):
        angle = torch.empty(1).uniform_(self.degrees[0], self.degrees[1], generator=gen).item()
        # torchvision's rotate: affine by −angle
        self._apply(geom, target, -angle, (0.0, 0.0), 1.0, (0.0, 0.0), self.expand)


class RandomPerspective(DetectionOp):
    """torchvision v2's ``RandomPerspective(distortion_scale, p, interpolation, fill)``: with
    probability ``p``, its draw of the four corners' end points
    (:func:`~dctnet.transforms.augment.perspective_points`), the warp on the device (``fill`` in
    8-bit levels; masks nearest, filled with 0), boxes as its ``perspective_bounding_boxes`` (the
    corners mapped, their enclosing box, clamped). The canvas keeps its size."""

    def __init__(self, distortion_scale: float = 0.5, p: float = 0.5, interpolation: str = "bilinear",
                 fill: float | Sequence[float] = 0) -> None:
        if not 0.0 <= float(distortion_scale) <= 1.0:
            raise ValueError(f"distortion_scale must be in [0, 1], got {distortion_scale!r}")
        interpolation = getattr(interpolation, "value", interpolation)  # (torchvision's InterpolationMode too)
        if interpolation not in ("nearest", "bilinear"):
            raise ValueError(f"interpolation must be 'nearest' or 'bilinear', got {interpolation!r}")
        self.distortion_scale, self.p = float(distortion_scale), float(p)
        self.interpolation, self.fill = interpolation, fill
        self._fill = fill_rgb(fill)

    def __call__(self, geom, target, gen):
        if torch.rand(1, generator=gen) >= self.p:  # torchvision's _RandomApplyTransform: the coin first
            return
        h, w = geom.canvas
        start, end = perspective_points(1, h, w, self.distortion_scale, gen)
        coefficients = G.perspective_coefficients(start, end)[0].tolist()
        perspective_boxes(target, coefficients, (h, w))
        geom.perspective(coefficients, self.interpolation, self._fill)


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

    recipe_op = False  # the step's own, from the model

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
        keep_boxes(target, valid)
