"""The one rule for the RGB normalisation a model expects.

A model trained on RGB saw ``(rgb − mean) / std`` with ``rgb`` in [0, 1]. Everything in dctnet that
feeds a model or folds that normalisation into a stem takes it from the same place:

1. an explicit ``mean`` / ``std`` (function argument, ``dctnet convert --mean/--std``);
2. (``dctnet convert`` only) the checkpoint's own metadata: top-level ``mean``/``std`` next to its
   state_dict, or the recipe a ``dctnet train`` checkpoint carries (its ``model.arch``);
3. the model's timm ``pretrained_cfg`` (e.g. 0.5/0.5 for timm's ViTs);
4. ImageNet's statistics (:data:`IMAGENET_MEAN`, :data:`IMAGENET_STD`) — torchvision's models.

:func:`input_mean_std` gives steps 3–4 for a model or an architecture name, :func:`resolve_mean_std`
all of them with where the answer came from. :func:`data_config` extends the same rule to the
whole eval transform (input size, interpolation, crop fraction and mode, mean, std): timm's
``resolve_data_config`` for timm models, torchvision's ImageNet eval for the others. The rule
reads a model's attributes (or timm's config registry) and needs no model class nor anything else
of dctnet, so it is a leaf of the kernels layer, below everything that uses it:
``ToRGB.for_model(model)`` applies it to the RGB path,
:func:`dctnet.models.swap_stem` folds ``input_mean_std(model)`` into a DCT stem unless given
``mean``/``std``, and ``dctnet convert`` resolves all four steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: ImageNet's channel statistics on the [0, 1] scale (torchvision's models, timm's defaults)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

__all__ = ["DATA_CONFIG_KEYS", "IMAGENET_MEAN", "IMAGENET_STD", "MeanStd", "data_config", "input_mean_std",
           "resolve_mean_std"]

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
            import timm  # optional and slow to import: only for timm names

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


#: the keys of :func:`data_config` (those of timm's ``resolve_data_config``)
DATA_CONFIG_KEYS = ("input_size", "interpolation", "crop_pct", "crop_mode", "mean", "std")


def data_config(model: Any, *, use_test_size: bool = False, **overrides: Any) -> dict[str, Any]:
    """The eval transform ``model`` expects, as timm's ``resolve_data_config`` states it: a dict
    with ``input_size`` ``(3, H, W)``, ``interpolation`` (``"bilinear"`` / ``"bicubic"``),
    ``crop_pct`` (the crop is ``crop_pct`` of the resized image: resize to
    ``floor(H / crop_pct)``), ``crop_mode`` (``"center"``, ``"squash"`` or ``"border"``),
    ``mean`` and ``std`` (3 floats each, for ``rgb`` in [0, 1]).

    ``model``: an ``nn.Module`` or an architecture name. A timm model (one with a
    ``pretrained_cfg``, which timm sets even at random init) or a name ``"timm:NAME"`` gets
    timm's rule over its config: each field from the config, else timm's default (224,
    ``"bicubic"``, 0.875, ``"center"``, ImageNet's mean/std); ``use_test_size``: the config's
    ``test_input_size`` / ``test_crop_pct`` where it has them, as timm's. Any other model or
    name gets torchvision's ImageNet eval: ``Resize(256)`` + ``CenterCrop(224)`` (224,
    ``"bilinear"``, 0.875, ``"center"``), ImageNet's mean/std. ``mean``/``std`` agree with
    :func:`input_mean_std` of the same model unless overridden.

    ``overrides`` (the keys above; ``None`` leaves a field to the model; ``img_size`` = an int
    or ``(H, W)`` is accepted for ``input_size``) win, as timm's ``args`` do: what a recipe sets.
    :meth:`dctnet.data.ResizeCenterCrop.from_config` turns the result into the host crop."""
    unknown = set(overrides) - set(DATA_CONFIG_KEYS) - {"img_size"}
    if unknown:
        raise ValueError(f"data_config: unknown override(s) {sorted(unknown)}; expected {DATA_CONFIG_KEYS} or img_size")
    cfg, _ = _timm_cfg(model)
    if cfg is not None or (isinstance(model, str) and model.startswith("timm:")):
        cfg = cfg or {}  # a timm name without a config: timm's defaults
        size = cfg.get("test_input_size") if use_test_size and cfg.get("test_input_size") else cfg.get("input_size")
        pct = cfg.get("test_crop_pct") if use_test_size and cfg.get("test_crop_pct") else cfg.get("crop_pct")
        out: dict[str, Any] = {
            "input_size": tuple(size) if size else (3, 224, 224),
            "interpolation": cfg.get("interpolation") or "bicubic",
            "crop_pct": pct or 0.875,
            "crop_mode": cfg.get("crop_mode") or "center",
            "mean": tuple(cfg["mean"]) if cfg.get("mean") else tuple(IMAGENET_MEAN),
            "std": tuple(cfg["std"]) if cfg.get("std") else tuple(IMAGENET_STD),
        }
    else:  # torchvision's ImageNet eval (its weights' transforms: resize 256, crop 224, bilinear)
        out = {"input_size": (3, 224, 224), "interpolation": "bilinear", "crop_pct": 0.875, "crop_mode": "center",
               "mean": tuple(IMAGENET_MEAN), "std": tuple(IMAGENET_STD)}
    if overrides.get("img_size") is not None and overrides.get("input_size") is None:
        img = overrides["img_size"]
        h, w = (img, img) if isinstance(img, int) else tuple(img)
        out["input_size"] = (out["input_size"][0], int(h), int(w))
    for key in DATA_CONFIG_KEYS:
        if overrides.get(key) is not None:
            out[key] = overrides[key]
    return _checked_config(out)


def _checked_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with its types normalised (tuples, floats), or ``ValueError`` naming the bad field."""
    size = tuple(int(v) for v in cfg["input_size"])
    if len(size) != 3 or min(size) <= 0:
        raise ValueError(f"input_size must be (C, H, W) positive, got {cfg['input_size']!r}")
    pct = float(cfg["crop_pct"])
    if not pct > 0:
        raise ValueError(f"crop_pct must be positive, got {cfg['crop_pct']!r}")
    if cfg["crop_mode"] not in ("center", "squash", "border"):
        raise ValueError(f"crop_mode must be 'center', 'squash' or 'border', got {cfg['crop_mode']!r}")
    if cfg["interpolation"] not in ("bilinear", "bicubic"):  # what the device resize offers (timm's configs use these)
        raise ValueError(f"interpolation must be 'bilinear' or 'bicubic', got {cfg['interpolation']!r}")
    return {"input_size": size, "interpolation": cfg["interpolation"], "crop_pct": pct, "crop_mode": cfg["crop_mode"],
            "mean": _triple(cfg["mean"], "mean"), "std": _triple(cfg["std"], "std")}
