"""The recipe check: what a schema's types cannot say — each numeric field within the range its
field declares, the fields a task's trainer does not read (:mod:`dctnet.train.recipe_tasks`), the
augment list built once and in order, the data source's own keys, a detection recipe's splits, detector
and geometry, and the model a recipe names (built on the meta device). Each refusal is a
``RecipeError`` naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from dctnet.data.sources import SOURCES, get_source
from dctnet.models import build_model, default_stem, stems_for
from dctnet.models.surgery import check_stem, check_swap, family, stem_error
from dctnet.transforms import build_transform, is_mixer_spec
from dctnet.transforms.detection.presets import DETECTION_PRESETS
from dctnet.train.recipe_coerce import SUGGEST_CUTOFF
from dctnet.train.recipe_schema import DEFAULT_AUGMENT, DataConfig, Recipe, RecipeError
from dctnet.train.recipe_tasks import misplaced_fields

__all__ = ["check_model_fits", "check_recipe", "check_recipe_model", "input_stats"]


def _ranged(section: Any, prefix: str) -> Iterator[tuple[str, Any, tuple[float, float, bool, bool]]]:
    """``(key, value, range)`` of every field of ``section`` (and of the sections within it) that
    declares a range in the schema (``metadata["range"]``), in the schema's order."""
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if "range" in f.metadata:
            yield f"{prefix}{f.name}", value, f.metadata["range"]
        elif dataclasses.is_dataclass(value):
            yield from _ranged(value, f"{prefix}{f.name}.")


def _check_ranges(r: Recipe, bad) -> None:
    """Every numeric field within the range its schema field declares."""
    for key, value, (lo, hi, lo_open, hi_open) in _ranged(r, ""):
        if value is None:
            continue
        if (value < lo or (lo_open and value == lo)) or (value > hi or (hi_open and value == hi)):
            span = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
            bad(f"{key} must be in {span}, got {value}")


def _pointer(exc: Exception, spec: dict) -> str:
    """The transform's error, with a pointer where a name belongs to another section of the recipe."""
    if spec.get("name") in ("RandomResizedCrop", "RandomCrop", "Resize", "CenterCrop"):
        return ("crops are the loader's, not an augment entry: the training crop is data.scale (RandomResizedCrop's "
                "area range), data.image_size and data.interpolation")
    return str(exc)


#: dctnet transforms the torchvision/timm baseline has no class for
_NO_BASELINE = ("FrequencyDropout", "RandomTranspose", "RandomChromaRotation")


def _check_augment_order(r: Recipe, bad) -> None:
    """Mixing acts on the batch after every per-sample op (timm and torchvision erase before they
    mix), and a recipe names one mixer: timm's Mixup switches between mixup and CutMix itself."""

    names = [s.get("name") for s in r.augment]
    for i, name in enumerate(names):
        if name == "Compose":
            bad(f"augment[{i}]: a recipe's augment list is already one Compose: list the transforms themselves")
        if name in ("ToRGB", "SelectFrequencies"):
            bad(f"augment[{i}] ({name}): the model's input is the pipeline's last step (ToRGB for device-rgb, the "
                "DCT for dct, model.keep for frequency selection), not an augment entry")
        if r.model.input == "rgb" and name in _NO_BASELINE:
            bad(f"augment[{i}] ({name}) has no torchvision or timm counterpart for model.input 'rgb' (the baseline); "
                "use it with input 'dct' or 'device-rgb'")
    mixers = [n for n, s in zip(names, r.augment) if is_mixer_spec(s)]
    if len(mixers) > 1:
        bad(f"augment names {len(mixers)} mixers ({', '.join(mixers)}): use one — timm's Mixup with mixup_alpha, "
            "cutmix_alpha and switch_prob mixes with one or the other per batch (or per sample in mode elem)")
    if mixers and not is_mixer_spec(r.augment[-1]):
        bad(f"augment: {mixers[0]} must come last: mixing acts on the batch after every per-sample op "
            f"({names[-1]} follows it); timm and torchvision erase before they mix")
    if mixers and r.data.batch_size % 2:
        bad(f"data.batch_size must be even with {mixers[0]} (timm mixes each sample with its mirror in the batch), "
            f"got {r.data.batch_size}")


def check_recipe(r: Recipe, where: str) -> None:
    """Raise ``RecipeError`` (``where``: the file) for the first thing ``r`` gets wrong that its types cannot say."""
    def bad(msg: str) -> None:
        raise RecipeError(f"{where}: {msg}")

    _check_ranges(r, bad)
    for line in misplaced_fields(r, Recipe()):  # a field its task's trainer does not read is refused, not ignored
        bad(line)
    if r.data.image_size % 16:
        bad(f"data.image_size must be a positive multiple of 16, got {r.data.image_size}")
    if not 0.0 <= r.train.ema.decay < 1.0:
        bad(f"train.ema.decay must be in [0, 1), got {r.train.ema.decay}")
    if r.train.ema.every < 1:
        bad(f"train.ema.every must be >= 1, got {r.train.ema.every}")
    if r.data.eval_crop is not None and r.data.eval_crop % 16:
        bad(f"data.eval_crop must be a positive multiple of 16, got {r.data.eval_crop}")
    if r.data.eval_resize is not None and r.data.crop_pct is not None:
        bad("data.eval_resize and data.crop_pct both say how far to resize for eval: set one (eval_resize: "
            "torchvision's Resize(eval_resize); crop_pct: timm's floor(crop / crop_pct))")
    if r.data.eval_resize is not None and r.data.crop_mode not in (None, "center"):
        bad(f"data.eval_resize is torchvision's Resize(int) + CenterCrop: crop_mode 'center' only, got "
            f"{r.data.crop_mode!r}")
    if not 0 < r.data.scale[0] <= r.data.scale[1] <= 1:
        bad(f"data.scale must satisfy 0 < lo <= hi <= 1, got {r.data.scale}")
    if not 8 <= r.data.synthetic_size[0] <= r.data.synthetic_size[1]:
        bad(f"data.synthetic_size must satisfy 8 <= lo <= hi, got {r.data.synthetic_size}")

    if r.detection or any(isinstance(v, dict) for v in (r.data.train, r.data.val)):
        _check_detection(r, bad)
        return
    for i, spec in enumerate(r.augment):  # built once here, so a typo fails before any data is read
        try:
            build_transform(spec, num_classes=max(2, r.model.num_classes), seed=0,
                            label_smoothing=r.optim.label_smoothing)
        except (TypeError, ValueError) as exc:
            bad(f"augment[{i}] ({spec.get('name')}): {_pointer(exc, spec)}")
    _check_augment_order(r, bad)
    if r.model.init is not None and input_stats(r):
        bad("model.init with model.normalize: stats — the stem converted from the checkpoint expects raw coefficients; "
            "set model.normalize: none to start from it")
    _check_source(r, bad)

    try:
        check_stem(r.model.stem)
    except ValueError as exc:
        bad(f"model.stem: {exc}")
    if r.model.chroma == "native" and r.model.input != "dct":
        bad("model.chroma: 'native' is for input 'dct' with a 'dct-patch' stem (ViTs of patch 8k)")
    if r.model.input == "dct":
        try:
            check_recipe_model(r)
        except ValueError as exc:
            bad(str(exc))


def _check_source(r: Recipe, bad) -> None:
    """The data source's own keys, and only with it, as its registration declares them
    (:mod:`dctnet.data.sources`): an arm it has no datasets for, a field that other sources read and
    this one does not (in the words of their ``refused_elsewhere`` where they give some), its own check."""
    d = r.data
    source = get_source(d.source)
    if r.model.input == "rgb" and source.pillow is None:
        bad(f"data.source: {d.source!r} {source.rgb_refusal}; model.input 'rgb' (the torchvision baseline) reads "
            "image folders — use 'dct' or 'device-rgb'")
    default = DataConfig()
    readers: dict[str, list[str]] = {}  # a source-specific field -> the sources that read it
    for other in SOURCES.values():
        for key in other.fields:
            readers.setdefault(key, []).append(other.name)
    for key, names in readers.items():
        if key in source.fields or getattr(d, key) == getattr(default, key):
            continue
        why = next((SOURCES[n].refused_elsewhere[key] for n in names if key in SOURCES[n].refused_elsewhere), None)
        bad(f"data.{key} is for data.source: {' or '.join(names)} " +
            (why.format(source=d.source) if why else f"(not read by {d.source!r}); remove it"))
    if source.check is not None:
        source.check(d, bad)


def _check_detection(r: Recipe, bad) -> None:
    """A detection recipe: COCO splits as {images, annotations}, a torchvision detector, the
    geometry in ``detect`` (not ``augment``)."""
    from dctnet.models.detection import detector_names, segmenter_names  # (torchvision: detection recipes only)

    if not r.detection:
        bad(f"data.train / data.val as {{images, annotations}} are for data.source: coco, not {r.data.source!r}")
    for split in ("train", "val"):
        v = getattr(r.data, split)
        if not isinstance(v, dict) or not {"images", "annotations"} <= set(v) <= {"images", "annotations", "semantic"}:
            bad(f"data.{split}: source coco takes {{images: DIR, annotations: FILE.json}} (and semantic: DIR of "
                f"class-index PNGs for segmentation models), got {v!r}")
    arch = r.model.arch
    if not arch.startswith("torchvision:"):
        bad(f"model.arch: a detection recipe names a torchvision detector as torchvision:NAME "
            f"(e.g. torchvision:fasterrcnn_mobilenet_v3_large_320_fpn), got {arch!r}")
    names = detector_names() + segmenter_names()
    if arch.split(":", 1)[1] not in names:
        close = difflib.get_close_matches(arch.split(":", 1)[1], names, n=1, cutoff=SUGGEST_CUTOFF)
        bad(f"model.arch: {arch!r} is not a torchvision detector" + (f" (did you mean 'torchvision:{close[0]}'?)"
                                                                     if close else f" (known: {', '.join(names)})"))
    if r.model.input == "dct":
        from dctnet.models.detection import DETECTOR_STEMS  # (as above)

        name = arch.split(":", 1)[1]
        if r.segmentation or "resnet" not in name:
            fit = ", ".join(n for n in detector_names() if "resnet" in n)
            bad(f"model.input: 'dct' swaps the stem of a detector's ResNet backbone ({fit}); {name!r} has none — "
                "use 'device-rgb' (plan A: the unchanged model, the decode and geometry on the device) or 'rgb'")
        if r.model.stem is not None and r.model.stem not in DETECTOR_STEMS:
            bad(f"model.stem: a detector's ResNet backbone takes {' or '.join(DETECTOR_STEMS)} "
                f"(idct: converted, the RGB detector exactly; dct-up: learned), not {r.model.stem!r}")
    if [dict(a) for a in r.augment] != [dict(a) for a in DEFAULT_AUGMENT]:
        bad("augment: a detection recipe's training geometry is detect.preset (torchvision's detection presets: "
            f"{', '.join(DETECTION_PRESETS)}), not an augment list")
    if r.detect.ops:
        from dctnet.transforms.detection import build_detection_ops  # (as above)

        try:
            build_detection_ops(r.detect.ops)
            if r.model.input == "rgb":
                from dctnet.transforms.detection import torchvision_ops  # (as above)

                torchvision_ops(r.detect.ops)
        except (TypeError, ValueError) as exc:
            bad(f"detect.ops: {exc}")
        if r.detect.preset != "hflip" or r.detect.copy_paste:
            bad("detect.ops replaces detect.preset (and its copy_paste): set one of them")
    if r.detect.backbone is not None:
        from dctnet.models.detection import RESNET_FPN_BUILDERS  # (as above)

        if arch.split(":", 1)[1] not in RESNET_FPN_BUILDERS:
            bad(f"detect.backbone replaces the ResNet-50 of {', '.join(RESNET_FPN_BUILDERS)}, not of {arch!r}")
    elif r.detect.returned_layers is not None:
        bad("detect.returned_layers: give detect.backbone too (it rebuilds the FPN)")
    if r.detect.copy_paste and (r.detect.preset != "lsj" or r.model.input == "rgb" or r.segmentation):
        bad("detect.copy_paste: torchvision's SimpleCopyPaste runs with the lsj preset (as the references' "
            "--use-copypaste), on a detector, with input 'device-rgb' or 'dct' (the references' class is not in "
            f"the torchvision package); got preset {r.detect.preset!r}, input {r.model.input!r}")
    if r.detect.masks and "mask" not in arch:
        bad(f"detect.masks: true is for a mask head (torchvision:maskrcnn_*), not {arch!r}")
    if r.segmentation:
        for split in ("train", "val"):
            if "semantic" not in getattr(r.data, split):
                bad(f"data.{split}: a segmentation model ({arch}) trains on class-index PNGs: add semantic: DIR")
        if not r.model.num_classes:
            bad(f"model.num_classes: a segmentation model ({arch}) needs the number of classes of its PNGs")
    if r.detect.max_size and r.detect.min_size and r.detect.max_size < r.detect.min_size:
        bad(f"detect.max_size ({r.detect.max_size}) must be at least detect.min_size ({r.detect.min_size})")
    if arch.split(":", 1)[-1].startswith("maskrcnn") and not r.detect.masks:  # (last: the other checks name more)
        bad(f"model.arch: {arch} is a Mask R-CNN (it trains on instance masks): set detect.masks: true")


# ---------------------------------------------------------------- the model a recipe names
def input_stats(recipe: Recipe) -> bool:
    """Whether the pipeline standardises the model's coefficient input per (c,u,v) from data
    (``normalize: stats``): input ``dct`` with a ViT (``dctnet.train.pipeline``'s rule)."""
    m = recipe.model
    return m.input == "dct" and "vit" in m.arch and m.normalize == "stats"


def check_model_fits(model: nn.Module, recipe: Recipe) -> str:
    """The stem ``model`` gets from the recipe, or a ``RecipeError`` naming the key. ``model`` may
    live on the meta device (nothing is converted)."""
    m = recipe.model
    try:
        stem = m.stem if m.stem is not None else default_stem(model)
        if stem not in stems_for(model):
            raise RecipeError(f"model.stem: {stem_error(model, stem, takes=f'{m.arch} takes')}")
        check_swap(model, stem=stem, keep=m.keep, chroma=m.chroma)
    except RecipeError:
        raise
    except (ValueError, TypeError) as exc:
        raise RecipeError(f"model.arch {m.arch!r} with input 'dct'" + (f", stem {m.stem!r}" if m.stem else "")
                          + f": {exc}") from None
    if input_stats(recipe) and stem != "dct-patch":
        raise RecipeError(f"model.normalize: 'stats' standardises the coefficients per (channel, frequency) for a "
                          f"'dct-patch' stem; the {stem!r} stem of {family(model)} takes raw coefficients — set "
                          "model.normalize: none (or model.stem: dct-patch where the model takes it)")
    return stem


def check_recipe_model(recipe: Recipe) -> None:
    """Everything :func:`dctnet.train.recipe_model.build_recipe_model` would refuse about the model of an ``input: dct``
    recipe (an unknown ``model.arch``, a stem the family does not take, options that do not fit
    the stem), found without building it: the architecture is built on the meta device (no memory,
    no random draws) and only its structure is read. ``RecipeError`` naming the key; a model that
    cannot be built on the meta device is left to :func:`dctnet.train.recipe_model.build_recipe_model`."""
    m = recipe.model
    if m.input != "dct":
        return
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        try:
            model = build_model(m.arch, image_size=recipe.data.image_size)
        except ValueError as exc:
            raise RecipeError(f"model.arch: {exc}") from None
        except Exception:  # noqa: BLE001 — not buildable on the meta device: the real build says why
            return
    check_model_fits(model, recipe)  # off the meta device: dctnet caches its constant matrices per device

