"""A recipe's values checked against the schema's annotations: YAML's ints and strings read as the
field's type (``1e-3`` a float, a list a tuple, a bare ``off`` the choice ``'off'``), a mapping built
into its section's dataclass, and an unknown key named with the field it was likely meant to be — or,
for an option of timm's or torchvision's training scripts, with what a recipe writes instead
(:data:`FOREIGN_KEYS`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from typing import Any, Literal

from dctnet.train.recipe_schema import RecipeError

__all__ = ["FOREIGN_KEYS", "SUGGEST_CUTOFF", "build_config"]


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


def build_config(cls: type, values: Any, where: str) -> Any:
    """The dataclass ``cls`` from a mapping of its fields (``where``: the mapping's key in the recipe), each value coerced
    to its annotation and each section built in turn; an unknown key is a ``RecipeError`` naming it."""
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
        kwargs[key] = build_config(tp, value, sub) if dataclasses.is_dataclass(tp) else _coerce(value, tp, sub)
    return cls(**kwargs)

