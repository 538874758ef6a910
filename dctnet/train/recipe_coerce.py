"""A recipe's values checked against the schema's annotations: YAML's ints and strings read as the
field's type (``1e-3`` a float, a list a tuple, a bare ``off`` the choice ``'off'``), a mapping built
into its section's dataclass, and an unknown key named with the field it was likely meant to be — or,
for an option of timm's or torchvision's training scripts, with what a recipe writes instead
(:data:`FOREIGN_KEYS`).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from dctnet.coerce import coerce, did_you_mean
from dctnet.train.recipe_schema import RecipeError

__all__ = ["FOREIGN_KEYS", "SUGGEST_CUTOFF", "build_config"]

#: the recipe's lists of op specs (``augment``, ``detect.ops``): mappings with a name, whose arguments
#: the op's own signature checks (:func:`dctnet.transforms.build_transform`)
_OP_LIST = list[dict[str, Any]]


def _field(value: Any, tp: Any, where: str) -> Any:
    """``value`` checked against the field's annotation ``tp`` (:func:`dctnet.coerce.coerce`, lenient:
    YAML's numbers and bare on/off), a list of op specs with the example a newcomer needs."""
    if tp == _OP_LIST:
        if not isinstance(value, list) or not all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in value):
            raise RecipeError(f"{where}: expected a list of transforms such as [{{name: RandomHorizontalFlip, p: 0.5}}, "
                              f"{{name: Mixup, alpha: 0.8}}] (recipes/README.md lists them), got {value!r}")
        return [dict(v) for v in value]
    return coerce(value, tp, where, lenient=True, error=RecipeError)


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
            close = did_you_mean(key, names, cutoff=SUGGEST_CUTOFF)
            hint = f" ({close})" if close else f" (known: {', '.join(names)})"
            raise RecipeError(f"{where}: unknown key {key!r}{hint}")
        tp = hints[key]
        sub = f"{where}.{key}" if where else key
        kwargs[key] = build_config(tp, value, sub) if dataclasses.is_dataclass(tp) else _field(value, tp, sub)
    return cls(**kwargs)

