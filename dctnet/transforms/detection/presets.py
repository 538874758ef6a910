"""torchvision's references' presets, each declared once as a named op list (:data:`PRESETS`:
torchvision's class names and arguments, :class:`Arg` standing for the preset's own arguments) that
builds both arms: dctnet's ops for the device arms (:func:`detection_preset`,
:func:`segmentation_preset`) and torchvision v2's for the ``rgb`` arm
(:func:`torchvision_detection_preset`, :func:`torchvision_segmentation_preset`), through
:mod:`.bridge`. A recipe's ``detect.preset`` takes the names in :data:`DETECTION_PRESETS`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dctnet.transforms.detection.bridge import build_detection_ops, torchvision_ops
from dctnet.transforms.detection.ops import DetectionOp

#: the references' ``mean`` in 8-bit levels (``fill=mean``: the lsj crop's padding, the ssd zoom-out)
MEAN = (123.0, 117.0, 104.0)


@dataclass(frozen=True)
class Arg:
    """A preset's argument in its op list: its value, or ``int(scale · value)`` when ``scale`` is set."""

    name: str
    scale: float | None = None

    def value(self, args: dict[str, Any]) -> Any:
        v = args[self.name]
        return v if self.scale is None else int(self.scale * v)


@dataclass(frozen=True)
class Preset:
    """A named op list: ``train`` (and ``eval``) the ops in order, ``{"name": <torchvision's class
    name>, **its arguments}``; an op with ``"when": ARG`` is there only when that argument is
    positive. ``task`` ``"detection"``: the ops end in ``SanitizeBoundingBoxes`` (as the references'
    v2 path); ``"segmentation"``: they do not."""

    task: str
    train: tuple[dict[str, Any], ...]
    eval: tuple[dict[str, Any], ...] = ()


_FLIP = {"name": "RandomHorizontalFlip", "p": Arg("hflip_prob")}

#: every preset, by name
PRESETS: dict[str, Preset] = {
    # torchvision's detection references' training presets (DetectionPresetTrain's data_augmentation)
    "hflip": Preset("detection", (_FLIP,)),
    "lsj": Preset("detection", ({"name": "ScaleJitter", "target_size": (1024, 1024)},
                                {"name": "FixedSizeCrop", "size": (1024, 1024), "fill": Arg("mean")}, _FLIP)),
    "multiscale": Preset("detection", ({"name": "RandomShortestSize", "max_size": 1333,
                                        "min_size": (480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800)}, _FLIP)),
    # (their v2 path fills the zoom-out's images with the mean and masks with 0)
    "ssd": Preset("detection", ({"name": "RandomPhotometricDistort"}, {"name": "RandomZoomOut", "fill": Arg("mean")},
                                {"name": "RandomIoUCrop"}, _FLIP)),
    "ssdlite": Preset("detection", ({"name": "RandomIoUCrop"}, _FLIP)),
    # overhead imagery (aerial and satellite tiles, the tree crowns): no "up", so flips both ways
    "aerial": Preset("detection", ({"name": "RandomVerticalFlip", "p": Arg("hflip_prob")}, _FLIP)),
    # torchvision's segmentation references' presets (SegmentationPresetTrain, SegmentationPresetEval); their
    # PadIfSmaller pads images with 0 and masks with 255
    "segmentation": Preset(
        "segmentation",
        train=({"name": "RandomResize", "min_size": Arg("base_size", 0.5), "max_size": Arg("base_size", 2.0)},
               {**_FLIP, "when": "hflip_prob"}, {"name": "PadIfSmaller", "size": Arg("crop_size")},
               {"name": "RandomCrop", "size": Arg("crop_size")}),
        eval=({"name": "Resize", "size": Arg("base_size")},)),
}

#: the detection presets' names: a recipe's ``detect.preset``
DETECTION_PRESETS = tuple(name for name, p in PRESETS.items() if p.task == "detection")


def preset_specs(name: str, task: str = "detection", *, train: bool = True, **args: Any) -> list[dict[str, Any]]:
    """Preset ``name``'s op list with its arguments ``args`` filled in (the ops of one arm or the other
    are built from it: :func:`~.bridge.build_detection_ops`, :func:`~.bridge.torchvision_ops`)."""
    preset = PRESETS.get(name)
    if preset is None or preset.task != task:
        known = ", ".join(n for n, p in PRESETS.items() if p.task == task)
        raise ValueError(f"unknown {task} preset {name!r} (known: {known})")
    specs = []
    for spec in preset.train if train else preset.eval:
        when = spec.get("when")
        if when is not None and not args[when] > 0:
            continue
        specs.append({k: v.value(args) if isinstance(v, Arg) else v for k, v in spec.items() if k != "when"})
    return specs


def detection_preset(name: str, hflip_prob: float = 0.5, mean: Sequence[float] = MEAN) -> list[DetectionOp]:
    """torchvision's detection references' training presets (``DetectionPresetTrain``), then
    ``SanitizeBoundingBoxes`` as their v2 path ends: ``hflip``, ``lsj``, ``multiscale``, ``ssd``,
    ``ssdlite`` (their v2 path fills the ``ssd`` zoom-out with the mean and masks with 0); and
    ``aerial`` for overhead imagery, which has no "up": vertical and horizontal flips, each with
    ``hflip_prob``."""
    return build_detection_ops(preset_specs(name, hflip_prob=hflip_prob, mean=list(mean)))


def torchvision_detection_preset(name: str, hflip_prob: float = 0.5, mean: Sequence[float] = MEAN) -> Any:
    """:func:`detection_preset` with torchvision v2's own classes (the ``rgb`` arm): ``ValueError`` for
    ``lsj``, whose ``FixedSizeCrop`` lives in torchvision's references, not in the torchvision package."""
    try:
        return torchvision_ops(preset_specs(name, hflip_prob=hflip_prob, mean=list(mean)))
    except ValueError as exc:
        raise ValueError(f"detect.preset {name!r} with input 'rgb': {exc} (or another preset)") from None


def segmentation_preset(base_size: int = 520, crop_size: int = 480, hflip_prob: float = 0.5, *,
                        train: bool = True) -> list[DetectionOp]:
    """torchvision's segmentation references' presets: training ``RandomResize(0.5·base, 2·base)``,
    a flip, ``PadIfSmaller(crop)`` (images 0, masks 255) and ``RandomCrop(crop)``; eval ``Resize(base)``."""
    specs = preset_specs("segmentation", "segmentation", train=train, base_size=base_size, crop_size=crop_size,
                         hflip_prob=hflip_prob)
    return build_detection_ops(specs, sanitize=False)


def torchvision_segmentation_preset(base_size: int = 520, crop_size: int = 480, hflip_prob: float = 0.5, *,
                                    train: bool = True) -> Any:
    """:func:`segmentation_preset` with torchvision v2's own classes and the references' ``PadIfSmaller``
    (the ``rgb`` arm)."""
    specs = preset_specs("segmentation", "segmentation", train=train, base_size=base_size, crop_size=crop_size,
                         hflip_prob=hflip_prob)
    return torchvision_ops(specs, references=True, sanitize=False)
