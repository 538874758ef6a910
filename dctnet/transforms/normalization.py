"""The one rule for the RGB normalisation a model expects.

A model trained on RGB saw ``(rgb − mean) / std`` with ``rgb`` in [0, 1]. Everything in dctnet that
feeds a model or folds that normalisation into a stem takes it from the same place:

1. an explicit ``mean`` / ``std`` (function argument, ``dctnet convert --mean/--std``);
2. (``dctnet convert`` only) the checkpoint's own metadata: top-level ``mean``/``std`` next to its
   state_dict, or the recipe a ``dctnet train`` checkpoint carries (its ``model.arch``);
3. the model's timm ``pretrained_cfg`` (e.g. 0.5/0.5 for timm's ViTs);
4. ImageNet's statistics (:data:`IMAGENET_MEAN`, :data:`IMAGENET_STD`) — torchvision's models.

:func:`input_mean_std` gives steps 3–4 for a model or an architecture name, :func:`resolve_mean_std`
all of them with where the answer came from. The rule reads a model's attributes (or timm's config
registry) and needs no model class, so it lives at the transforms layer: ``ToRGB.for_model(model)``
applies it to the RGB path, :func:`dctnet.models.swap_stem` folds ``input_mean_std(model)`` into a
DCT stem unless given ``mean``/``std``, and ``dctnet convert`` resolves all four steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dctnet.transforms.augment import IMAGENET_MEAN, IMAGENET_STD

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "MeanStd", "input_mean_std", "resolve_mean_std"]

#: ``(mean, std)``, 3 floats each (R, G, B), for ``rgb`` in [0, 1]
MeanStd = tuple[tuple[float, float, float], tuple[float, float, float]]


def _triple(v: Sequence[float], name: str) -> tuple[float, float, float]:
    out = tuple(float(a) for a in v)
    if len(out) != 3:
        raise ValueError(f"{name} must have 3 values (R, G, B), got {len(out)}: {out}")
    if name == "std" and min(out) <= 0:
        raise ValueError(f"std must be positive, got {out}")
    return out  # type: ignore[return-value]


def _timm_cfg(model: Any) -> tuple[dict | None, str]:
    """timm's pretrained config of a model (its ``pretrained_cfg``) or of ``timm:NAME``, and a name
    for messages."""
    if isinstance(model, str):
        if not model.startswith("timm:"):
            return None, model
        try:
            import timm

            cfg = timm.models.get_pretrained_cfg(model[5:])
        except (ImportError, RuntimeError, ValueError):  # unknown name: the model builder reports it
            return None, model
        return (cfg.to_dict() if cfg is not None else None), model
    cfg = getattr(model, "pretrained_cfg", None)
    cfg = dict(cfg) if isinstance(cfg, dict) and cfg else None
    name = cfg.get("architecture") if cfg else None
    return cfg, f"timm:{name}" if name else type(model).__name__


def _resolve_model(model: Any) -> tuple[MeanStd, str]:
    cfg, name = _timm_cfg(model)
    if cfg and cfg.get("mean") and cfg.get("std"):
        return (_triple(cfg["mean"], "mean"), _triple(cfg["std"], "std")), f"timm pretrained_cfg of {name}"
    return (tuple(IMAGENET_MEAN), tuple(IMAGENET_STD)), "ImageNet default"  # type: ignore[return-value]


def input_mean_std(model: Any) -> MeanStd:
    """The RGB normalisation ``model`` expects: its timm ``pretrained_cfg`` mean/std when it has one
    (a timm model, or an architecture name ``"timm:NAME"``), else ImageNet's — torchvision models
    and names. ``model``: an ``nn.Module`` or an architecture name. Returns ``(mean, std)``, 3
    floats each, for ``rgb`` in [0, 1]."""
    return _resolve_model(model)[0]


def resolve_mean_std(model: Any, mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                     *, metadata: MeanStd | None = None, metadata_source: str = "checkpoint metadata"
                     ) -> tuple[tuple[float, float, float], tuple[float, float, float], str]:
    """``(mean, std, source)`` by the module rule: explicit ``mean``+``std`` (both or neither), then
    ``metadata`` (a checkpoint's own, described by ``metadata_source``), then
    :func:`input_mean_std` of ``model`` (an ``nn.Module`` or an architecture name). ``source`` says
    which one answered, for messages."""
    if (mean is None) != (std is None):
        raise ValueError("give mean and std together (3 floats each), or neither")
    if mean is not None and std is not None:
        return _triple(mean, "mean"), _triple(std, "std"), "argument"
    if metadata is not None:
        return _triple(metadata[0], "mean"), _triple(metadata[1], "std"), metadata_source
    (m, s), source = _resolve_model(model)
    return m, s, source
