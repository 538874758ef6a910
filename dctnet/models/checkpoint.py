"""Checkpoint files: reading a state_dict and its metadata, and checking it fits a model.

A checkpoint is a plain state_dict, or a dict holding one under ``state_dict``/``model`` next to
metadata (a ``dctnet train`` checkpoint's ``recipe``, ``classes``, ...; or top-level ``mean`` /
``std``). Files are read with ``torch.load(weights_only=True)``: tensors and plain containers only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dctnet.kernels.normalization import MeanStd, input_mean_std

__all__ = ["check_state_dict", "checkpoint_mean_std", "load_checkpoint", "load_state_dict", "num_classes_of"]

#: classifier weights by model family, for reading the class count off a checkpoint
_HEADS = ("head.weight", "heads.head.weight", "fc.weight", "classifier.weight", "head.fc.weight")
#: any other classifier: ``classifier.2.weight`` (torchvision ConvNeXt), ``classifier.1.weight``
#: (EfficientNet), ``classifier.3.weight`` (MobileNetV3), ``head.fc.weight`` (timm RegNet, ConvNeXt)
_HEAD_PATTERN = re.compile(r"^(classifier|head|heads|fc)(\.\w+)*\.weight$")


def num_classes_of(state: dict[str, torch.Tensor]) -> int | None:
    """The class count of a classifier checkpoint (its head's rows), or ``None`` when unknown."""
    for key in _HEADS:
        if key in state and state[key].dim() == 2:
            return int(state[key].shape[0])
    heads = [k for k, v in state.items() if _HEAD_PATTERN.match(k) and getattr(v, "dim", lambda: 0)() == 2]
    return int(state[heads[-1]].shape[0]) if heads else None


def load_checkpoint(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A checkpoint's state_dict and the metadata next to it.

    The state_dict is the file itself, or its ``state_dict``/``model`` entry (``module.`` prefixes
    removed); the metadata is every other top-level entry of such a wrapper (a ``dctnet train``
    checkpoint's ``recipe``, ``classes``, ...; empty for a plain state_dict)."""
    obj = torch.load(path, map_location="cpu", weights_only=True)
    meta: dict[str, Any] = {}
    for key in ("state_dict", "model"):
        if isinstance(obj, dict) and key in obj and isinstance(obj[key], dict):
            meta = {k: v for k, v in obj.items() if k != key}
            obj = obj[key]
            break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ValueError(f"{path}: not a state_dict checkpoint")
    return {k.removeprefix("module."): v for k, v in obj.items()}, meta


def load_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """A checkpoint's state_dict: plain, or under ``state_dict``/``model``; ``module.`` prefixes removed."""
    return load_checkpoint(path)[0]


def checkpoint_mean_std(meta: dict[str, Any]) -> tuple[MeanStd | None, str]:
    """The RGB normalisation a checkpoint's metadata records (step 2 of
    :mod:`dctnet.kernels.normalization`'s rule), and how it says so; ``(None, "")`` when it
    records none.

    Top-level ``mean`` and ``std`` (3 floats each) win; else a ``dctnet train`` recipe gives its
    ``model.arch``'s :func:`input_mean_std` (what its RGB pipeline normalised with). Raises
    ``ValueError`` for a recipe trained on DCT input (already a DCT-stem model: nothing to convert)."""
    mean, std = meta.get("mean"), meta.get("std")
    if mean is not None and std is not None:
        return (tuple(float(v) for v in torch.as_tensor(mean).flatten()),  # type: ignore[return-value]
                tuple(float(v) for v in torch.as_tensor(std).flatten())), "checkpoint metadata (mean/std)"
    recipe = meta.get("recipe")
    model = recipe.get("model") if isinstance(recipe, dict) else None
    if isinstance(model, dict) and isinstance(model.get("arch"), str):
        if model.get("input") == "dct":
            raise ValueError("the checkpoint comes from a dctnet recipe with input: dct — it already has a DCT stem; "
                             "dctnet convert converts RGB models (input: rgb or device-rgb)")
        return input_mean_std(model["arch"]), f"checkpoint metadata (dctnet recipe, model.arch={model['arch']})"
    return None, ""


def check_state_dict(model: nn.Module, state: dict[str, torch.Tensor], what: str, *, examples: int = 3) -> None:
    """Raise a short ``ValueError`` when ``state`` does not fit ``model``: counts of missing,
    unexpected and mis-shaped keys with a few examples each (not torch's full key lists), and
    whether ``state`` looks like an already converted DCT checkpoint. ``what`` starts the message."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in own
              if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    if not (missing or unexpected or shapes):
        return
    parts = []
    for label, keys in (("missing", missing), ("unexpected", unexpected), ("of another shape", shapes)):
        if keys:
            more = f", ... {len(keys) - examples} more" if len(keys) > examples else ""
            parts.append(f"{len(keys)} key{'s' if len(keys) > 1 else ''} {label} (e.g. {', '.join(keys[:examples])}{more})")
    # a DCT model's own state_dict: a converted patch embedding (``linear``) or an IDCT stem (the
    # original conv one level down, ``<name>.1.weight``)
    converted = any(".linear." in k or re.sub(r"\.1\.weight$", ".weight", k) in missing for k in unexpected)
    raise ValueError(f"{what}: {len(state)} checkpoint keys vs {len(own)} model keys; " + "; ".join(parts)
                     + ("; it looks like an already converted DCT checkpoint" if converted else ""))
