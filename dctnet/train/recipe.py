"""Training recipes: a YAML file → validated, typed configuration.

A recipe has five sections; every field has a default, so a recipe names only what it changes.
Unknown keys and values of the wrong type or outside their choices are errors that name the key
(and suggest the closest valid name), never silently ignored. ``--set a.b=value`` overrides any
field (values parsed as YAML: ``--set optim.lr=0.1 --set train.amp=off``).

See ``recipes/README.md`` for every field with its meaning.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import yaml
from torch import nn

from dctnet.models import build_model, default_stem, stems_for
from dctnet.models.surgery import check_stem, check_swap, family, stem_error
from dctnet.transforms import build_transform, is_mixer_spec
from dctnet.transforms.detection.presets import DETECTION_PRESETS
from dctnet.train.recipe_tasks import misplaced_fields

__all__ = ["Recipe", "RecipeError", "load_recipe", "parse_overrides"]


class RecipeError(ValueError):
    """A recipe that cannot be used; the message names the file, the key and the reason."""


@dataclass
class DataConfig:
    source: Literal["folder", "cache", "shards", "synthetic", "coco", "hf"] = "folder"
    root: str = "${DCTNET_DATA:../shared/data/imagenette}"  # folder root, or synthetic output dir
    # under root: subfolder, cache directory, or shard glob (train-*.tar); source hf: a save_to_disk
    # directory, or a parquet file, glob or folder; source coco: {images: DIR, annotations: FILE.json}
    # (relative to root unless absolute)
    train: str | dict[str, str] = "train"
    val: str | dict[str, str] = "val"
    # source hf (Hugging Face datasets): the image column (JPEG bytes, read undecoded) and the label
    # column (ClassLabel names become the classes) — ImageNet-1k's names on the Hub; streaming: read
    # the data as a stream (split and mixed as tar shards are) instead of by row
    image_column: str = "image"
    label_column: str = "label"
    streaming: bool = False
    on_error: Literal["raise", "skip"] = "raise"  # unreadable files: stop naming the file, or skip and report them
    # which libjpeg warnings make a file unreadable: raise = those that lost data (truncated, corrupt
    # entropy-coded data), accept = none (train on libjpeg's fill-in), strict = all
    warnings: Literal["raise", "accept", "strict"] = "raise"
    verify: Literal["stat", "hash", "none"] = "stat"  # source: cache — how the cache's sources are checked
    cache_checksums: bool = True      # source: cache — check each record's checksum as it is read (false: skip)
    # streamed sources (shards, hf with streaming): shards each reader keeps open at once, read front to back, drawn
    # from at random before the shuffle buffer — class-sorted shards mix ~2 classes per open shard
    interleave: int = 32
    buffer: int = 1000                # streamed sources: the shuffle buffer each reader draws from
    image_size: int = 224             # side of the square crops fed to the model
    batch_size: int = 64              # per process
    threads: int = 2                  # dctnet loader threads (input dct / device-rgb)
    workers: int = 2                  # DataLoader worker processes (input rgb: torchvision pipeline)
    scale: tuple[float, float] = (0.08, 1.0)   # RandomResizedCrop area range
    interpolation: Literal["bilinear", "bicubic"] = "bilinear"  # the training crop's antialiased resize (timm, DeiT: bicubic)
    # the eval transform: the model's own (timm's resolve_data_config over its pretrained_cfg;
    # torchvision models: Resize(size/0.875) + CenterCrop, bilinear), each field overridable
    crop_pct: float | None = None     # resize to floor(eval crop / crop_pct), then the centre crop
    # torchvision's --val-resize-size / --val-crop-size: resize the shorter side to eval_resize, then the
    # eval_crop centre crop (e.g. train at 176, eval 232 → 224); eval_crop alone keeps the crop_pct rule.
    # Neither set: image_size, or the model's test_input_size / test_crop_pct where its timm config has one
    eval_resize: int | None = None
    eval_crop: int | None = None
    crop_mode: Literal["center", "squash", "border"] | None = None
    eval_interpolation: Literal["bilinear", "bicubic"] | None = None
    decode: Literal["float", "exact"] = "float"  # device decode: float maths, or libjpeg's integer decode (= Pillow's pixels)
    # the pixel stages' values: float, or 8bit — rounded to 1/255 levels after the crop and after each op
    # the RGB arm runs on 8-bit PIL images (policies, ColorJitter, grayscale), as Pillow hands them over
    pixels: Literal["float", "8bit"] = "float"
    # repeated augmentation (DeiT's --repeated-aug: 3; torchvision's --ra-sampler --ra-reps 4): each image N
    # times an epoch, spread over the ranks, each repeat its own crop and draws; 1: off
    repeated_aug: int = 1
    limit_train: int = 0              # use only the first N training samples (0: all), for smoke tests
    limit_val: int = 0
    synthetic_classes: int = 6        # source: synthetic — classes, images per class, JPEG side range
    synthetic_train_per_class: int = 400
    synthetic_val_per_class: int = 100
    synthetic_size: tuple[int, int] = (64, 112)


@dataclass
class ModelConfig:
    arch: str = "resnet18"            # torchvision name (resnet18, resnet50, vit_b_16, …) or timm:NAME
    input: Literal["rgb", "device-rgb", "dct"] = "dct"  # (detection recipes, data.source coco: device-rgb)
    # rgb: torchvision CPU pipeline (Pillow decode, v2 transforms in DataLoader workers) — the baseline
    # device-rgb: dctnet reads coefficients; decode/crop/resize on the device; unchanged model (plan A)
    # dct: dctnet reads coefficients; the model's first layer is replaced by a DCT stem
    # input dct: the DCT stem, a name of dctnet.models.STEMS as swap_stem and `dctnet convert` take them —
    # dct-patch (ViT, Swin, ConvNeXt), idct (any model), dct8 / dct-up (learned, ResNets); null: the
    # model's default, swap_stem's (dct-patch where the first conv is a block-aligned patchify conv, else idct)
    stem: str | None = None
    keep: int | None = None           # frequencies kept per block (zigzag order); None: all 64
    chroma: Literal["upsampled", "native"] = "upsampled"  # DCT ViTs: chroma on the luma grid, or native 4:2:0 (y, c)
    normalize: Literal["stats", "none"] = "stats"  # input dct + ViT: per-(c,u,v) standardisation from data
    stats_batches: int = 20           # batches used for those statistics
    num_classes: int = 0              # 0: from the data
    drop_path_rate: float = 0.0       # stochastic depth: timm's --drop-path, torchvision's stochastic_depth_prob
    # weights to start from: a state_dict (timm / torchvision, or a dctnet run's last.pt); for input dct
    # an RGB checkpoint is loaded into the RGB model and converted into the stem (exact where the stem is);
    # a head of another class count is left at its init
    init: str | None = None


@dataclass
class OptimConfig:
    optimizer: Literal["sgd", "adamw"] = "sgd"
    lr: float = 0.1                   # peak learning rate for the global batch of lr_batch samples
    lr_batch: int = 256               # lr scales linearly with (global batch / lr_batch)
    momentum: float = 0.9
    weight_decay: float = 5e-5        # not applied to biases and norm parameters
    epochs: int = 10
    warmup_epochs: float = 1.0        # linear warm-up, then cosine to zero
    label_smoothing: float = 0.1
    stem_lr_mult: float = 1.0         # learning-rate multiplier of the DCT stem's parameters
    grad_clip: float = 0.0            # max gradient norm (0: off)
    # timm's --min-lr / --warmup-lr (absolute, not scaled with the batch): the warm-up climbs linearly from
    # warmup_lr, the cosine decays to min_lr
    min_lr: float = 0.0
    warmup_lr: float = 0.0


#: the training augmentation when a recipe names none: a horizontal flip of half the samples
DEFAULT_AUGMENT: tuple[dict[str, Any], ...] = ({"name": "RandomHorizontalFlip", "p": 0.5},)


@dataclass
class EmaConfig:
    decay: float = 0.0                # 0: no EMA; timm's --model-ema-decay (0.9998), torchvision's (0.99998)
    every: int = 1                    # average every N optimizer updates (torchvision's --model-ema-steps: 32)
    warmup: bool = False              # timm ModelEmaV3's warm-up of the decay (--model-ema-warmup)
    adjust: bool = False              # torchvision's rescaling of the decay by world size, batch, every and epochs


@dataclass
class TrainConfig:
    seed: int = 0
    out: str = "runs/${name}"         # run directory: metrics.jsonl, plot.png, last.pt, recipe.yaml
    amp: Literal["auto", "off", "bf16", "fp16"] = "auto"   # auto: bf16 on CUDA, off on CPU
    compile: bool = False             # torch.compile the model
    # CUDA: convolutional models (and their pixel inputs) in channels_last, cudnn.benchmark on (detection:
    # the detector's weights only, no benchmark: its image sizes vary); nothing on a CPU
    channels_last: bool = True
    # auto: cuda:LOCAL_RANK when available, else cpu; cuda (and cuda:N under torchrun): cuda:LOCAL_RANK
    device: str = "auto"
    eval_every: int = 1               # epochs between evaluations (the last epoch always evaluates)
    checkpoint: bool = True           # write last.pt after every epoch (resume with --resume)
    progress: bool = True             # progress bars (rank 0)
    log_every: int = 20               # steps between step records in metrics.jsonl
    torch_threads: int = 0            # intra-op threads (0: torch's default)
    max_steps: int = 0                # stop each epoch after N steps (0: full epochs), for smoke tests
    # model EMA (timm's --model-ema, torchvision's --model-ema): evaluated each epoch beside the model
    # (val_top1_ema), saved in the checkpoint and resumed
    ema: EmaConfig = field(default_factory=EmaConfig)


@dataclass
class DetectConfig:
    """Detection recipes (``data.source: coco``): the training geometry and the detector's own resize."""

    # torchvision's --data-augmentation: a name of dctnet.transforms.detection's preset table (its DETECTION_PRESETS)
    preset: Literal[DETECTION_PRESETS] = "hflip"
    hflip_prob: float = 0.5
    masks: bool = False               # instance masks in the targets (Mask R-CNN)
    # torchvision's references' --use-copypaste: SimpleCopyPaste over each training batch (lsj preset;
    # the instance masks are read for it, whatever the model)
    copy_paste: bool = False
    # instead of a preset: the training ops by torchvision's names with their arguments, in order
    # (dctnet.transforms.detection; SanitizeBoundingBoxes is appended as the presets end)
    ops: list[dict[str, Any]] = field(default_factory=list)
    # leave out training images without a usable box (no annotation, or every box at most 1 px wide or
    # tall), as torchvision's detection and segmentation references always do; false trains on them as
    # background-only images. The val split is evaluated whole either way
    drop_unannotated: bool = True
    # the detector: another ResNet for the ResNet-50 of fasterrcnn/maskrcnn_resnet50_fpn, the stages its
    # FPN reads, the smallest anchor per feature map, and any other argument of torchvision's builder
    backbone: str | None = None
    returned_layers: list[int] | None = None
    anchor_sizes: list[int] | None = None
    model_args: dict[str, Any] = field(default_factory=dict)
    # the detector's GeneralizedRCNNTransform: shorter side / longer side cap; 0 keeps the model's default
    min_size: int = 0
    max_size: int = 0
    # false: no detector resize at all — images reach the model at the size the ops leave them (train
    # crops and whole eval images at the files' scale); both arms turn the model's own resize off
    resize: bool = True
    # segmentation models (torchvision's segmentation references): train RandomResize(0.5-2 x base_size),
    # flip, PadIfSmaller + RandomCrop(crop_size); eval Resize(base_size)
    base_size: int = 520
    crop_size: int = 480


@dataclass
class Recipe:
    name: str = "run"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    # training augmentation on the device: dctnet.transforms by name with their arguments, in order
    augment: list[dict[str, Any]] = field(default_factory=lambda: [dict(t) for t in DEFAULT_AUGMENT])
    train: TrainConfig = field(default_factory=TrainConfig)
    detect: DetectConfig = field(default_factory=DetectConfig)

    @property
    def detection(self) -> bool:
        """A detection or segmentation recipe (COCO data, a torchvision detector or segmentation model)."""
        return self.data.source == "coco"

    @property
    def segmentation(self) -> bool:
        """A semantic segmentation recipe (a torchvision segmentation model on class-index PNGs)."""
        from dctnet.models.detection import segmenter_names  # (torchvision: the detection recipes' dependency)

        return self.detection and self.model.arch.split(":", 1)[-1] in segmenter_names()

    def to_dict(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


_NUMBER = re.compile(r"[+-]?(\d[\d_]*\.?[\d_]*|\.\d[\d_]*)([eE][+-]?\d+)?")


def _number(value: Any) -> int | float | None:
    """A finite number from YAML: ints and floats, and the strings YAML 1.1 leaves unparsed
    although they are standard notation (``1e-3``, ``5E4``, ``+2``); ``None`` otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        text = value.strip().replace("_", "")
        value = float(text) if any(ch in text for ch in ".eE") else int(text)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return value
    return None


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """``value`` checked against the annotation ``tp`` (YAML gives ints for floats, lists for tuples)."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        if isinstance(value, bool) and "off" in typing.get_args(tp):
            value = "on" if value else "off"  # YAML 1.1 reads a bare off/on/no/yes as a boolean
        if value not in typing.get_args(tp):
            choices = ", ".join(repr(c) for c in typing.get_args(tp))
            raise RecipeError(f"{where}: {value!r} is not one of {choices}")
        return value
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None and type(None) in typing.get_args(tp):
            return None
        mapping = next((a for a in args if typing.get_origin(a) is dict), None)
        if mapping is not None and isinstance(value, dict):
            return _coerce(value, mapping, where)
        return _coerce(value, args[0], where)
    if origin is dict and typing.get_args(tp)[1] is Any:  # free arguments (detect.model_args): YAML values
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise RecipeError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if origin is dict:  # a mapping of string fields (source coco's {images, annotations})
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise RecipeError(f"{where}: expected a mapping, got {value!r}")
        return {k: _coerce(v, typing.get_args(tp)[1], f"{where}.{k}") for k, v in value.items()}
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise RecipeError(f"{where}: expected a list of {len(args)} values, got {value!r}")
        return tuple(_coerce(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if tp is bool:
        if not isinstance(value, bool):
            raise RecipeError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is int:
        number = _number(value)
        if number is None or not float(number).is_integer():
            raise RecipeError(f"{where}: expected an integer, got {value!r}")
        return int(number)
    if tp is float:
        number = _number(value)
        if number is None:
            raise RecipeError(f"{where}: expected a number, got {value!r}")
        return float(number)
    if origin is list and typing.get_args(tp)[0] in (int, float):  # a list of numbers
        if not isinstance(value, (list, tuple)):
            raise RecipeError(f"{where}: expected a list of numbers, got {value!r}")
        return [_coerce(v, typing.get_args(tp)[0], f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is list:  # the augment list: mappings with a name (their arguments are checked in _check)
        if not isinstance(value, list) or not all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in value):
            raise RecipeError(f"{where}: expected a list of transforms such as [{{name: RandomHorizontalFlip, p: 0.5}}, "
                              f"{{name: Mixup, alpha: 0.8}}] (recipes/README.md lists them), got {value!r}")
        return [dict(v) for v in value]
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise RecipeError(f"{where}: expected a string, got {value!r}")
        return str(value)
    raise TypeError(f"unsupported annotation {tp}")


#: training options of timm's train.py and torchvision's classification reference that a recipe
#: does not have under that name: key → what to write instead, or why it is not there. Checked
#: before any "did you mean", so that an option dctnet lacks is not mistaken for a misspelt field.
FOREIGN_KEYS: dict[str, str] = {
    **{k: "write train.ema: {decay: D, every: N, warmup: true|false, adjust: true|false} (timm's --model-ema "
          "--model-ema-decay D --model-ema-warmup; torchvision's --model-ema --model-ema-decay D --model-ema-steps N)"
       for k in ("model_ema", "model_ema_decay", "model_ema_steps", "model_ema_warmup", "ema_decay", "ema_every")},
    **{k: "write data.repeated_aug: N (DeiT's --repeated-aug is 3; torchvision's --ra-sampler --ra-reps N)"
       for k in ("ra_sampler", "ra_reps", "sampler", "repeated_augmentation")},
    "drop_path": "write model.drop_path_rate (timm's --drop-path)",
    "drop": "not supported: a dropout rate (timm's --drop) is not a recipe field",
    "lr_min": "write optim.min_lr (timm's --min-lr)",
    "warmup_lr_init": "write optim.warmup_lr (timm's --warmup-lr)",
    **{k: "write model.init: PATH (a state_dict file; nothing is downloaded)"
       for k in ("pretrained", "initial_checkpoint", "weights", "resume_from")},
    **{k: "not supported: the schedule is linear warm-up then cosine (optim.warmup_epochs)"
       for k in ("sched", "lr_scheduler")},
    "opt": "write optim.optimizer (sgd or adamw)",
    "smoothing": "write optim.label_smoothing (timm's --smoothing)",
    "clip_grad": "write optim.grad_clip (timm's --clip-grad)",
    "lr_warmup_epochs": "write optim.warmup_epochs (torchvision's --lr-warmup-epochs)",
    "warmup_epochs_lr": "write optim.warmup_epochs",
    "train_interpolation": "write data.interpolation (timm's --train-interpolation)",
    "input_size": "write data.image_size",
    "train_crop_size": "write data.image_size (torchvision's --train-crop-size)",
    "val_resize_size": "write data.eval_resize (torchvision's --val-resize-size)",
    "val_crop_size": "write data.eval_crop (torchvision's --val-crop-size)",
    "test_input_size": "write data.eval_crop (timm's --test-input-size; a model's own test_input_size is used "
                       "when the recipe sets no eval size)",
    **{k: "write the augmentation as an `augment:` list entry (e.g. {name: TimmAugment, policy: rand-m9-mstd0.5-inc1}, "
          "{name: RandomErasing, p: 0.25, mode: pixel}, {name: Mixup, mixup_alpha: 0.8, cutmix_alpha: 1.0}); "
          "recipes/README.md lists them"
       for k in ("aa", "auto_augment", "reprob", "remode", "recount", "mixup", "cutmix", "mixup_prob",
                 "mixup_switch_prob", "mixup_mode", "color_jitter", "hflip", "vflip", "auto_augment_policy",
                 "random_erase", "random_erase_prob", "mixup_alpha", "cutmix_alpha", "ra_magnitude",
                 "trivial_augment")},
}

#: how close an unknown key must be to a field for a "did you mean" (difflib's ratio): close enough
#: for misspellings (batchsize → batch_size), not for unrelated words (sampler → scale)
SUGGEST_CUTOFF = 0.8


def _build(cls: type, values: Any, where: str) -> Any:
    if not isinstance(values, dict):
        raise RecipeError(f"{where}: expected a mapping of fields, got {values!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        if key not in hints:
            if str(key) in FOREIGN_KEYS:
                raise RecipeError(f"{where}: unknown key {key!r}: {FOREIGN_KEYS[str(key)]}")
            close = difflib.get_close_matches(str(key), names, n=1, cutoff=SUGGEST_CUTOFF)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(names)})"
            raise RecipeError(f"{where}: unknown key {key!r}{hint}")
        tp = hints[key]
        sub = f"{where}.{key}" if where else key
        kwargs[key] = _build(tp, value, sub) if dataclasses.is_dataclass(tp) else _coerce(value, tp, sub)
    return cls(**kwargs)


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["optim.lr=0.1", "train.amp=off"]`` → nested dict (values parsed as YAML)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise RecipeError(f"--set {item!r}: expected key=value (e.g. optim.lr=0.1)")
        key, raw = item.split("=", 1)
        node = out
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise RecipeError(f"--set {item!r}: {p!r} is a value, not a section")
        node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else ""
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _expand(text: str, name: str) -> str:
    """``${VAR:default}`` → environment variable or default; ``${name}`` → the recipe name."""

    def sub(m: re.Match) -> str:
        var, _, default = m.group(1).partition(":")
        return name if var == "name" else os.environ.get(var, default)

    return re.sub(r"\$\{([^}]+)\}", sub, text)


def _expand_strings(recipe: Recipe) -> None:
    """``${VAR:default}`` and ``${name}`` expanded in every string field of every section and in the
    string arguments of the augment list (the name first, so that it may use the environment too)."""
    recipe.name = _expand(recipe.name, "run")
    for section in (recipe.data, recipe.model, recipe.optim, recipe.train, recipe.detect):
        for f in dataclasses.fields(section):
            value = getattr(section, f.name)
            if isinstance(value, str):
                setattr(section, f.name, _expand(value, recipe.name))
            elif isinstance(value, dict):
                setattr(section, f.name, {k: _expand(v, recipe.name) if isinstance(v, str) else v
                                          for k, v in value.items()})
    for spec in recipe.augment:
        if isinstance(spec, dict):
            for k, v in spec.items():
                if isinstance(v, str) and k != "name":
                    spec[k] = _expand(v, recipe.name)


def load_recipe(path: str | Path | None, overrides: list[str] | dict[str, Any] | None = None) -> Recipe:
    """Read and validate a recipe (``None``: all defaults), applying ``overrides``.

    Relative data paths in the recipe are resolved against the current directory; environment
    references ``${VAR:default}`` (and ``${name}``, the recipe's name) are expanded in every string
    field."""
    where = str(path) if path is not None else "<defaults>"
    values: dict[str, Any] = {}
    if path is not None:
        try:
            values = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError:
            raise RecipeError(f"{path}: no such recipe file") from None
        except yaml.YAMLError as e:
            raise RecipeError(f"{path}: not valid YAML: {e}") from None
        if not isinstance(values, dict):
            raise RecipeError(f"{path}: a recipe is a mapping of sections, got {type(values).__name__}")
    if overrides:
        values = _merge(values, parse_overrides(overrides) if isinstance(overrides, list) else overrides)
    model = values.get("model") if isinstance(values.get("model"), dict) else {}
    data = values.get("data") if isinstance(values.get("data"), dict) else {}
    if data.get("source") == "coco" and "input" not in model:
        # a detector's default input is plan A (the unchanged model, decode and geometry on the device):
        # the classification default, dct, would swap a ResNet-FPN backbone's stem unasked
        values = _merge(values, {"model": {"input": "device-rgb"}})
    try:
        recipe = _build(Recipe, values, "")
    except RecipeError as e:
        raise RecipeError(f"{where}: {e}") from None
    _expand_strings(recipe)
    _check(recipe, where)
    return recipe


_INF = float("inf")
#: numeric fields' ranges: (low, high, low excluded, high excluded)
_RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "data.image_size": (16, 8192, False, False), "data.interleave": (1, 4096, False, False),
    "data.buffer": (1, _INF, False, True),
    "data.batch_size": (1, _INF, False, True),
    "data.threads": (1, 1024, False, False), "data.workers": (0, 1024, False, False),
    "data.crop_pct": (0, 4, True, False), "data.limit_train": (0, _INF, False, True),
    "data.eval_resize": (16, 8192, False, False), "data.eval_crop": (16, 8192, False, False),
    "data.repeated_aug": (1, 4095, False, False),
    "data.limit_val": (0, _INF, False, True), "data.synthetic_classes": (2, 100_000, False, False),
    "data.synthetic_train_per_class": (1, _INF, False, True), "data.synthetic_val_per_class": (1, _INF, False, True),
    "model.keep": (1, 64, False, False), "model.stats_batches": (1, _INF, False, True),
    "model.num_classes": (0, _INF, False, True),
    "optim.lr": (0, _INF, True, True), "optim.lr_batch": (1, _INF, False, True), "optim.momentum": (0, 1, False, True),
    "optim.weight_decay": (0, _INF, False, True), "optim.epochs": (1, _INF, False, True),
    "optim.warmup_epochs": (0, _INF, False, True), "optim.label_smoothing": (0, 1, False, True),
    "optim.stem_lr_mult": (0, _INF, False, True), "optim.grad_clip": (0, _INF, False, True),
    "optim.min_lr": (0, _INF, False, True), "optim.warmup_lr": (0, _INF, False, True),
    "model.drop_path_rate": (0, 1, False, True),
    "train.seed": (0, 2**63 - 1, False, False), "train.eval_every": (1, _INF, False, True),
    "train.log_every": (1, _INF, False, True), "train.torch_threads": (0, 4096, False, False),
    "train.max_steps": (0, _INF, False, True),
    "detect.hflip_prob": (0, 1, False, False), "detect.min_size": (0, 8192, False, False),
    "detect.max_size": (0, 8192, False, False), "detect.base_size": (16, 8192, False, False),
    "detect.crop_size": (16, 8192, False, False),
}


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


def _check(r: Recipe, where: str) -> None:
    def bad(msg: str) -> None:
        raise RecipeError(f"{where}: {msg}")

    for key, (lo, hi, lo_open, hi_open) in _RANGES.items():
        section, name = key.split(".")
        value = getattr(getattr(r, section), name)
        if value is None:
            continue
        if (value < lo or (lo_open and value == lo)) or (value > hi or (hi_open and value == hi)):
            span = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
            bad(f"{key} must be in {span}, got {value}")
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
    if r.data.source in ("cache", "shards") and r.model.input == "rgb":
        bad(f"data.source: {r.data.source!r} holds JPEG coefficients; model.input 'rgb' (the torchvision "
            "baseline) reads image folders — use 'dct' or 'device-rgb'")
    _check_hf(r, bad)

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


def _check_hf(r: Recipe, bad) -> None:
    """The keys of ``data.source: hf`` (Hugging Face datasets), and only with it."""
    d = r.data
    if d.source != "hf":
        if d.streaming:
            bad(f"data.streaming is for data.source: hf (a streamed Hugging Face dataset), not {d.source!r}; tar shards "
                "are always streamed")
        return
    if r.model.input == "rgb":
        bad("data.source: 'hf' is read as JPEG bytes by dctnet's reader; model.input 'rgb' (the torchvision baseline) "
            "reads image folders — use 'dct' or 'device-rgb'")
    for key in ("image_column", "label_column"):
        if not getattr(d, key).strip():
            bad(f"data.{key} must name a column of the dataset (ImageNet-1k on the Hub: image, label)")
    if d.image_column == d.label_column:
        bad(f"data.image_column and data.label_column are both {d.image_column!r}")
    if d.streaming and (d.limit_train or d.limit_val or d.repeated_aug > 1):
        bad("data.limit_train / limit_val / repeated_aug need indexable data; data.streaming: true streams the "
            "dataset (set streaming: false to read it by row)")


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
