"""Checkpoint conversion: an RGB checkpoint → the state_dict of its DCT-stem model.

``dctnet convert IN OUT --arch ARCH`` builds ARCH without downloading anything (torchvision names
such as ``vit_b_16`` / ``resnet50``, or ``timm:vit_small_patch16_224``), loads IN into it, swaps
and converts the stem (:func:`dctnet.nn.swap_stem`), checks on a sample image that the converted
model gives the RGB model's logits, and only then writes OUT — a state_dict that
``swap_stem(build(ARCH))`` loads directly.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from dctnet.nn.stems import IMAGENET_MEAN, IMAGENET_STD, swap_stem

__all__ = ["build_model", "convert_checkpoint", "input_mean_std", "load_state_dict", "num_classes_of"]


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


def num_classes_of(state: dict[str, torch.Tensor]) -> int | None:
    """The class count of a classifier checkpoint (its head's rows), or ``None`` when unknown."""
    for key in _HEADS:
        if key in state and state[key].dim() == 2:
            return int(state[key].shape[0])
    return None


def load_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """A checkpoint's state_dict: plain, or under ``state_dict``/``model``; ``module.`` prefixes removed."""
    obj = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("state_dict", "model"):
        if isinstance(obj, dict) and key in obj and isinstance(obj[key], dict):
            obj = obj[key]
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: not a state_dict checkpoint")
    return {k.removeprefix("module."): v for k, v in obj.items()}


def input_mean_std(arch: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The RGB normalisation ``arch`` expects: timm's ``pretrained_cfg`` (e.g. 0.5/0.5 for its
    ViTs), ImageNet's for torchvision models — what training pipelines and conversion must share."""
    if arch.startswith("timm:"):
        import timm

        try:
            cfg = timm.models.get_pretrained_cfg(arch[5:])
        except (RuntimeError, ValueError):  # unknown name: build_model reports it
            cfg = None
        if cfg is not None and getattr(cfg, "mean", None) and getattr(cfg, "std", None):
            return tuple(cfg.mean), tuple(cfg.std)
    return tuple(IMAGENET_MEAN), tuple(IMAGENET_STD)


def _mean_std(model: nn.Module) -> tuple[tuple[float, ...], tuple[float, ...]]:
    cfg = getattr(model, "pretrained_cfg", None) or {}
    return tuple(cfg.get("mean", IMAGENET_MEAN)), tuple(cfg.get("std", IMAGENET_STD))


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


def convert_checkpoint(src: str | Path, dst: str | Path, arch: str, *, stem: str = "exact",
                       image_size: int | None = None, image: str | None = None, keep=None,
                       tolerance: float = 1e-4) -> tuple[float, float]:
    """Convert and verify; returns the max |logit difference|, absolute and relative to max |logit|."""
    from dctnet import functional as F

    state = load_state_dict(src)
    model = build_model(arch, image_size=image_size, num_classes=num_classes_of(state))
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0:3]
        raise ValueError(f"{src} does not fit {arch}" + (f" at image size {image_size}" if image_size else "")
                         + ": " + " ".join(line.strip() for line in first)) from None
    model.eval()
    mean, std = _mean_std(model)
    size = image_size or getattr(model, "image_size", None) or (model.patch_embed.img_size[0]
                                                                if hasattr(model, "patch_embed") else 224)
    x = sample_input(model, image, size)
    dct = swap_stem(copy.deepcopy(model), stem=stem, mean=mean, std=std, keep=keep).eval()
    with torch.no_grad():
        rgb = F.ycbcr_to_rgb(F.block_idct(x) + 128.0, dim=1) / 255.0
        ref = model((rgb - torch.tensor(mean).reshape(1, 3, 1, 1)) / torch.tensor(std).reshape(1, 3, 1, 1))
        out = dct(x)
    diff = (out - ref).abs().max().item()
    rel = diff / max(ref.abs().max().item(), 1e-12)
    if keep is None and rel > tolerance:
        raise RuntimeError(f"converted model disagrees with the original: max |logit difference| {diff:.3g} "
                           f"({rel:.3g} relative, tolerance {tolerance}); nothing written")
    torch.save(dct.state_dict(), dst)
    return diff, rel
