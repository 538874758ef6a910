"""Op lists (``{"name": <torchvision's class name>, **its arguments}``, a recipe's ``detect.ops`` or a
preset's) built into ops for either arm: dctnet's detection ops (the device arms) or torchvision v2's own
classes (the ``rgb`` arm, with :func:`per_box_fields` keeping every per-box field aligned)."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Sequence
from typing import Any

from torch import Tensor

from dctnet.coerce import coerce, did_you_mean
from dctnet.transforms.detection.ops import RECIPE_OPS, DetectionOp, SanitizeBoundingBoxes

__all__ = ["RECIPE_OPS", "ReferencePadIfSmaller", "build_detection_ops", "per_box_fields", "torchvision_ops",
           "torchvision_sanitize"]


def build_detection_ops(specs: Sequence[dict[str, Any]], *, sanitize: bool = True) -> list[DetectionOp]:
    """Training ops from specs ``{"name": <torchvision's class name>, **its arguments}`` (a recipe's
    ``detect.ops``), in order, ending in ``SanitizeBoundingBoxes`` (appended unless last), as the
    presets end (``sanitize=False``: nothing appended, as the segmentation presets). Each argument is
    checked against the op's signature and annotations (:func:`dctnet.coerce.coerce`, as the
    classification ops' are); an unknown op or argument is a ``ValueError`` with a "did you mean"."""
    ops: list[DetectionOp] = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, dict) or "name" not in spec:
            raise ValueError(f"op {i}: a mapping with a name, got {spec!r}")
        name = spec["name"]
        cls = RECIPE_OPS.get(name) if isinstance(name, str) else None
        if cls is None:
            raise ValueError(f"op {i}: unknown detection op {name!r}{_hint(name, RECIPE_OPS)} "
                             f"(known: {', '.join(sorted(RECIPE_OPS))})")
        try:
            ops.append(cls(**_arguments(i, cls, {k: v for k, v in spec.items() if k != "name"})))
        except TypeError as exc:
            raise ValueError(f"op {i} ({name}): {exc}") from None
    if sanitize and (not ops or not isinstance(ops[-1], SanitizeBoundingBoxes)):
        ops.append(SanitizeBoundingBoxes())
    return ops


def _hint(word: Any, choices: Sequence[str]) -> str:
    close = did_you_mean(word, list(choices))
    return f"; {close}" if close else ""


def _arguments(i: int, cls: type[DetectionOp], args: dict[str, Any]) -> dict[str, Any]:
    """Op ``i``'s arguments checked against ``cls``'s signature and annotations."""
    params = {n: p for n, p in inspect.signature(cls.__init__).parameters.items()
              if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    hints = typing.get_type_hints(cls.__init__)
    out = {}
    for arg, value in args.items():
        if arg not in params:
            raise ValueError(f"op {i} ({cls.__name__}): unknown argument {arg!r}{_hint(arg, params)} "
                             f"(takes: {', '.join(params) or 'no arguments'})")
        out[arg] = coerce(value, hints.get(arg, Any), f"op {i} ({cls.__name__}) argument {arg!r}")
    return out


#: ops whose ``fill`` torchvision v2 takes per type: the image's (8-bit levels), masks 0 as the references
_FILLED = ("RandomZoomOut", "RandomAffine", "RandomRotation", "RandomPerspective", "RandomCrop")


def torchvision_ops(specs: list[dict[str, Any]], *, references: bool = False, sanitize: bool = True) -> Any:
    """torchvision v2's own classes for a recipe's ``detect.ops`` (the ``rgb`` arm), ending in
    ``SanitizeBoundingBoxes``: the same names and arguments; ``ValueError`` for an op torchvision's
    package lacks (the references' ``FixedSizeCrop``, ``RandomResize``, ``PadIfSmaller``).
    ``references``: the segmentation references' v2 ops too (v2's ``RandomResize``, their
    :class:`ReferencePadIfSmaller`), as their presets run them; ``sanitize=False``: nothing appended."""
    from torchvision.transforms import v2  # optional dependency (the rgb baseline's own ops)

    ops = [_torchvision_op(i, spec, references) for i, spec in enumerate(specs)]
    if sanitize and (not ops or not isinstance(ops[-1], v2.SanitizeBoundingBoxes)):
        ops.append(torchvision_sanitize())
    return v2.Compose(ops)


def _torchvision_op(i: int, spec: dict[str, Any], references: bool) -> Any:
    """Op ``i`` of :func:`torchvision_ops`."""
    from torchvision import tv_tensors  # optional dependency (the rgb baseline's own ops)
    from torchvision.transforms import v2  # (as above)

    name = spec["name"]
    cls = ReferencePadIfSmaller if references and name == "PadIfSmaller" else getattr(v2, name, None)
    # v2.RandomResize exists but is not the detection references' op (the segmentation presets' is v2's)
    if cls is None or (name == "RandomResize" and not references):
        raise ValueError(f"op {i} ({name}) is torchvision's references', not in the torchvision package: "
                         "input 'rgb' cannot run it; use 'device-rgb'")
    args = {k: v for k, v in spec.items() if k != "name"}
    if name == "SanitizeBoundingBoxes":  # every per-box field dropped with its box, as the appended one
        args.setdefault("labels_getter", per_box_fields)
    if name in _FILLED and "fill" in args:
        args["fill"] = {tv_tensors.Image: args["fill"], tv_tensors.Mask: 0}
    return cls(**args)


class ReferencePadIfSmaller:
    """torchvision's segmentation references' ``PadIfSmaller`` (their v2 extras) for the ``rgb``
    arm: bottom/right padding up to ``size``, images with ``fill`` (their 0), masks with 255."""

    def __init__(self, size: int, fill: float | Sequence[float] = 0) -> None:
        self.size, self.fill = int(size), fill

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        from torchvision import tv_tensors  # optional dependency (the baseline's)
        from torchvision.transforms.v2 import functional as TVF  # (as above)

        h, w = sample["image"].shape[-2:]
        padding = [0, 0, max(self.size - w, 0), max(self.size - h, 0)]
        if not any(padding):
            return sample
        out = dict(sample)
        for k, v in sample.items():
            if isinstance(v, (tv_tensors.Image, tv_tensors.Mask, tv_tensors.BoundingBoxes)):
                out[k] = TVF.pad(v, padding=padding, fill=255 if isinstance(v, tv_tensors.Mask) else self.fill)
        return out


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
