"""Which recipe fields act in which task: every field of the schema is listed here, with the tasks
whose trainer reads it, and a field set away from its default in a recipe of another task is refused
by the recipe check (:func:`misplaced_fields`) — never silently ignored.

Tasks: ``classification`` (image folders, shards, caches, Hugging Face data), ``detection``
(``data.source: coco`` with a torchvision detector, Mask R-CNN included) and ``segmentation``
(``coco`` with a torchvision segmentation model on class-index PNGs).
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["FIELD_TASKS", "TASKS", "field_paths", "misplaced_fields", "task_of"]

TASKS = ("classification", "detection", "segmentation")
_ALL = frozenset(TASKS)
_C = frozenset({"classification"})
_D = frozenset({"detection"})
_S = frozenset({"segmentation"})
_CD = _C | _D
_DS = _D | _S

#: every leaf field of :class:`~dctnet.train.recipe.Recipe` → the tasks it acts in
FIELD_TASKS: dict[str, frozenset[str]] = {
    "name": _ALL,
    **{f"data.{k}": _ALL for k in ("source", "root", "train", "val", "on_error", "warnings", "batch_size", "workers",
                                   "decode", "limit_train", "limit_val")},
    # the classification pipeline's own: Hugging Face columns, streams, caches, the crop and eval
    # geometry (detection's is detect.*), the loader threads (detection reads in DataLoader workers)
    **{f"data.{k}": _C for k in ("image_column", "label_column", "streaming", "verify", "cache_checksums",
                                 "interleave", "buffer", "image_size", "threads", "scale", "interpolation", "crop_pct",
                                 "eval_resize", "eval_crop", "crop_mode", "eval_interpolation", "pixels",
                                 "repeated_aug", "synthetic_classes", "synthetic_train_per_class",
                                 "synthetic_val_per_class", "synthetic_size")},
    **{f"model.{k}": _ALL for k in ("arch", "input", "num_classes", "init")},
    "model.stem": _CD, "model.keep": _CD,  # (a detector's ResNet backbone takes a DCT stem too)
    **{f"model.{k}": _C for k in ("chroma", "normalize", "stats_batches", "drop_path_rate")},
    **{f"optim.{k}": _ALL for k in ("optimizer", "lr", "lr_batch", "momentum", "weight_decay", "epochs",
                                    "warmup_epochs", "grad_clip", "min_lr", "warmup_lr")},
    "optim.label_smoothing": _C,  # (torchvision's detection and segmentation losses take none)
    "optim.stem_lr_mult": _CD,
    "augment": _C,  # (detection's training geometry is detect.preset / detect.ops)
    **{f"train.{k}": _ALL for k in ("seed", "out", "amp", "channels_last", "device", "eval_every", "checkpoint",
                                    "progress", "log_every", "torch_threads", "max_steps")},
    "train.compile": _C,
    **{f"train.ema.{k}": _ALL for k in ("decay", "every", "warmup", "adjust")},
    **{f"detect.{k}": _D for k in ("preset", "masks", "copy_paste", "ops", "backbone", "returned_layers",
                                   "anchor_sizes", "model_args", "min_size", "max_size", "resize")},
    "detect.hflip_prob": _DS, "detect.drop_unannotated": _DS,
    "detect.base_size": _S, "detect.crop_size": _S,
}

#: fields whose misuse another check names better (it says what to use instead)
_CHECKED_ELSEWHERE = {"augment"}


def field_paths(obj: Any, prefix: str = "") -> list[str]:
    """The dotted names of a dataclass's leaf fields (nested sections walked), in declaration order."""
    out: list[str] = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out += field_paths(value, f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def task_of(recipe: Any) -> str:
    """``classification``, ``detection`` or ``segmentation``."""
    if not recipe.detection:
        return "classification"
    return "segmentation" if recipe.segmentation else "detection"


def misplaced_fields(recipe: Any, default: Any) -> list[str]:
    """One line per field of ``recipe`` set away from ``default``'s value (a fresh ``Recipe()``) that
    its task does not read: what the recipe check refuses."""
    task = task_of(recipe)
    out = []
    for path in field_paths(recipe):
        tasks = FIELD_TASKS[path]  # (a field missing from the table fails the schema-walk test first)
        if task in tasks or path in _CHECKED_ELSEWHERE or _get(recipe, path) == _get(default, path):
            continue
        out.append(f"{path}: not used by a {task} recipe (it acts in {', '.join(sorted(tasks))} recipes); "
                   "remove it")
    return out
