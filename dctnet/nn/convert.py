"""Checkpoint conversion: an RGB checkpoint → the state_dict of its DCT-stem model.

``dctnet convert IN OUT --arch ARCH`` builds ARCH without downloading anything (torchvision names
such as ``vit_b_16`` / ``resnet50`` / ``convnext_tiny``, or ``timm:NAME``), loads IN into it, swaps
and converts the stem (:func:`dctnet.nn.swap_stem`), checks on a sample image that the converted
model gives the RGB model's logits, and only then writes OUT — a state_dict that
``swap_stem(build(ARCH), ...)`` loads directly (:func:`load_hint` says with which arguments).

The normalisation folded into the stem follows :mod:`dctnet.nn.normalization`: ``--mean/--std``,
else the checkpoint's own metadata, else timm's ``pretrained_cfg``, else ImageNet's; the self-check
feeds the RGB model pixels normalised the same way.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dctnet.nn.normalization import input_mean_std, resolve_mean_std
from dctnet.nn.stems import IMAGENET_MEAN, IMAGENET_STD, swap_stem

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "Conversion", "build_model", "check_state_dict", "checkpoint_mean_std",
           "convert", "convert_checkpoint", "input_mean_std", "load_checkpoint", "load_hint", "load_state_dict",
           "num_classes_of"]


def build_model(arch: str, *, image_size: int | None = None, num_classes: int | None = None) -> nn.Module:
    """Randomly initialised ``arch``: a torchvision model name or ``timm:NAME``."""
    if arch.startswith("timm:"):
        import timm

        kwargs = {"img_size": image_size} if image_size else {}
        if num_classes:
            kwargs["num_classes"] = num_classes
        try:
            return timm.create_model(arch[5:], pretrained=False, **kwargs)
        except RuntimeError as exc:  # timm: "Unknown model (...)"
            raise ValueError(f"unknown architecture {arch!r}: {exc}") from exc
    import torchvision

    try:
        builder = torchvision.models.get_model_builder(arch)
    except ValueError as exc:
        raise ValueError(f"unknown architecture {arch!r} (torchvision name, or timm:NAME)") from exc
    kwargs = {"image_size": image_size} if image_size and arch.startswith("vit") else {}
    if num_classes:
        kwargs["num_classes"] = num_classes
    return builder(weights=None, **kwargs)


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


def checkpoint_mean_std(meta: dict[str, Any]) -> tuple[tuple[tuple[float, ...], tuple[float, ...]] | None, str]:
    """The RGB normalisation a checkpoint's metadata records, and how it says so.

    Top-level ``mean`` and ``std`` (3 floats each) win; else a ``dctnet train`` recipe gives its
    ``model.arch``'s :func:`input_mean_std` (what its RGB pipeline normalised with). Raises
    ``ValueError`` for a recipe trained on DCT input (already a DCT-stem model: nothing to convert)."""
    mean, std = meta.get("mean"), meta.get("std")
    if mean is not None and std is not None:
        return (tuple(float(v) for v in torch.as_tensor(mean).flatten()),
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
    unexpected and mis-shaped keys with a few examples each (not torch's full key lists)."""
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
    # a DCT model's own state_dict: a converted patch embedding (``luma``) or an IDCT stem (the
    # original conv one level down, ``<name>.1.weight``)
    converted = any(".luma." in k or re.sub(r"\.1\.weight$", ".weight", k) in missing for k in unexpected)
    raise ValueError(f"{what}: {len(state)} checkpoint keys vs {len(own)} model keys; " + "; ".join(parts)
                     + ("; it looks like an already converted DCT checkpoint" if converted else ""))


def load_hint(keep: int | str | list[int] | None = None, mean: tuple[float, ...] | None = None,
              std: tuple[float, ...] | None = None, default: tuple[tuple[float, ...], tuple[float, ...]] | None = None
              ) -> str:
    """The ``swap_stem`` call that builds the model a converted state_dict loads into: ``keep``
    changes weight shapes; ``mean``/``std`` are written out unless they are ``default``
    (``input_mean_std`` of the model, what swap_stem would take anyway) — an IDCT stem keeps them
    as (non-persistent) buffers, so loading the file alone would not restore them."""
    args = ["model"]
    if keep is not None:
        args.append(f"keep={keep!r}")
    if mean is not None and std is not None and (default is None or (tuple(mean), tuple(std)) != tuple(map(tuple, default))):
        args += [f"mean={tuple(mean)!r}", f"std={tuple(std)!r}"]
    return f"dctnet.nn.swap_stem({', '.join(args)})"


def sample_input(model: nn.Module, image: str | None, size: int) -> torch.Tensor:
    """An in-range coefficient image (1, 3, size/8, size/8, 64) from ``image`` (or a generated photo)."""
    import dctnet
    from dctnet import functional as F
    from dctnet.synthetic import synthetic_jpeg
    from dctnet.transforms import functional as TF

    c = dctnet.read_coefficients(image if image else synthetic_jpeg(0, size, size))
    rgb = F.coefficients_to_rgb(c)
    rgb = F.resized_crop(rgb, torch.tensor([[0, 0, c.height, c.width]]), (size, size))
    return TF.from_rgb(rgb.double()).float()


def _input_size(model: nn.Module, image_size: int | None) -> int:
    if image_size:
        return image_size
    if isinstance(getattr(model, "image_size", None), int):          # torchvision ViT
        return model.image_size
    img = getattr(getattr(model, "patch_embed", None), "img_size", None)
    if img is not None:                                               # timm ViT / Swin
        return int(img[0])
    cfg = getattr(model, "pretrained_cfg", None) or {}
    size = cfg.get("input_size") if isinstance(cfg, dict) else None
    return int(size[-1]) if size else 224


@dataclass
class Conversion:
    """What :func:`convert` did: the self-check's max |logit difference| (absolute, relative to max
    |logit|), the normalisation folded in and where it came from, the stem kind (``"dct-patch"``:
    converted patch embedding; ``"idct"``: device IDCT + the original conv) and the ``swap_stem``
    call that builds the model OUT loads into."""

    diff: float
    rel: float
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    source: str
    stem: str
    hint: str


def convert(src: str | Path, dst: str | Path, arch: str, *, image_size: int | None = None, image: str | None = None,
            keep: int | str | list[int] | None = None, mean: tuple[float, ...] | None = None,
            std: tuple[float, ...] | None = None, tolerance: float = 1e-4) -> Conversion:
    """Load ``src`` into ``arch``, swap and convert its stem, check the logits on a sample image
    (``image``, default a generated photo) and write the DCT model's state_dict to ``dst``.

    Normalisation (:mod:`dctnet.nn.normalization`): ``mean``/``std`` (both or neither), else the
    checkpoint's metadata (:func:`checkpoint_mean_std`), else timm's ``pretrained_cfg``, else
    ImageNet's; the self-check normalises the RGB model's pixels the same way. Without ``keep`` a
    relative difference above ``tolerance`` raises ``RuntimeError`` and nothing is written; with
    ``keep`` the difference is the truncation's and only reported."""
    from dctnet.transforms import functional as TF

    state, meta = load_checkpoint(src)
    recorded, recorded_source = (None, "") if mean is not None or std is not None else checkpoint_mean_std(meta)
    mean, std, source = resolve_mean_std(arch, mean, std, metadata=recorded, metadata_source=recorded_source)
    model = build_model(arch, image_size=image_size, num_classes=num_classes_of(state))
    check_state_dict(model, state, f"{src} does not fit {arch}" + (f" at image size {image_size}" if image_size else ""))
    model.load_state_dict(state)
    model.eval()
    size = _input_size(model, image_size)
    x = sample_input(model, image, size)
    dct = swap_stem(copy.deepcopy(model), mean=mean, std=std, keep=keep).eval()
    with torch.no_grad():
        rgb = TF.coefficient_image_to_rgb(x, clamp=False)
        ref = model((rgb - torch.tensor(mean).reshape(1, 3, 1, 1)) / torch.tensor(std).reshape(1, 3, 1, 1))
        out = dct(x)
    diff = (out - ref).abs().max().item()
    rel = diff / max(ref.abs().max().item(), 1e-12)
    if keep is None and not rel <= tolerance:
        raise RuntimeError(f"converted model disagrees with the original: max |logit difference| {diff:.3g} "
                           f"({rel:.3g} relative, tolerance {tolerance}; normalisation mean {mean} std {std} from "
                           f"{source}); nothing written")
    torch.save(dct.state_dict(), dst)
    hint = load_hint(keep, mean, std, default=input_mean_std(model))
    return Conversion(diff, rel, mean, std, source, dct.dctnet_stem, hint)


def convert_checkpoint(src: str | Path, dst: str | Path, arch: str, *, stem: str = "exact",
                       image_size: int | None = None, image: str | None = None, keep=None,
                       mean: tuple[float, ...] | None = None, std: tuple[float, ...] | None = None,
                       tolerance: float = 1e-4) -> tuple[float, float]:
    """:func:`convert`, returning the max |logit difference|, absolute and relative to max |logit|.
    Only ``stem="exact"`` exists: learned stems start from random weights, nothing to convert."""
    if stem != "exact":
        raise ValueError(f"stem {stem!r} is a learned stem (trained from scratch): only stem='exact' converts")
    r = convert(src, dst, arch, image_size=image_size, image=image, keep=keep, mean=mean, std=std, tolerance=tolerance)
    return r.diff, r.rel
