"""Presets and the torchvision bridge: torchvision's detection and segmentation references' presets,
recipe op lists (``detect.ops``) built into ops, and torchvision v2's own classes for the ``rgb`` arm."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

from dctnet.transforms.detection.crop_ops import (FixedSizeCrop, PadIfSmaller, RandomCrop, RandomIoUCrop,
                                                  RandomResizedCrop, RandomZoomOut)
from dctnet.transforms.detection.ops import (DetectionOp, RandomAffine, RandomHorizontalFlip, RandomPhotometricDistort,
                                             RandomResize, RandomRotation, RandomShortestSize, RandomVerticalFlip, Resize,
                                             SanitizeBoundingBoxes, ScaleJitter)


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
