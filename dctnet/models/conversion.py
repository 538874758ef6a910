"""Checkpoint conversion: an RGB checkpoint → the state_dict of its DCT-stem model.

``dctnet convert IN OUT --arch ARCH [--stem dct-patch|idct]`` builds ARCH without downloading
anything (:func:`dctnet.models.build_model`), loads IN into it, swaps and converts the stem
(:func:`dctnet.models.swap_stem`: one of the converted stems, ``dct-patch`` or ``idct``; the
learned ``dct8``/``dct-up`` start from random weights, there is nothing to convert), checks on a
sample image that the converted model gives the RGB model's logits, and only then writes OUT — a
state_dict that ``swap_stem(build_model(ARCH), ...)`` loads directly (:func:`load_hint` says with
which arguments).

The normalisation folded into the stem follows :mod:`dctnet.kernels.normalization`:
``--mean/--std``, else the checkpoint's own metadata, else timm's ``pretrained_cfg``, else
ImageNet's; the self-check feeds the RGB model pixels normalised the same way.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from dctnet import image as IM
from dctnet import resize as RS
from dctnet.codec import read_coefficients
from dctnet.models.build import build_model
from dctnet.models.checkpoint import check_state_dict, checkpoint_mean_std, load_checkpoint, num_classes_of
from dctnet.models.surgery import (
    CONVERTED_STEMS,
    LEARNED_STEMS,
    check_stem,
    default_stem,
    stem_error,
    stems_for,
    swap_stem,
)
from dctnet.synthetic import synthetic_jpeg
from dctnet.kernels import coefficients as TF
from dctnet.kernels.normalization import MeanStd, input_mean_std, resolve_mean_std

__all__ = ["Conversion", "convert", "convert_checkpoint", "load_hint", "sample_input"]


def load_hint(keep: int | str | list[int] | None = None, mean: tuple[float, ...] | None = None,
              std: tuple[float, ...] | None = None, default: MeanStd | None = None, stem: str | None = None) -> str:
    """The ``swap_stem`` call that builds the model a converted state_dict loads into: ``stem``
    (written out when given: a stem other than the model's default), ``keep`` changes weight
    shapes; ``mean``/``std`` are written out unless they are ``default`` (``input_mean_std`` of the
    model, what swap_stem would take anyway) — an IDCT stem keeps them as (non-persistent) buffers,
    so loading the file alone would not restore them."""
    args = ["model"]
    if stem is not None:
        args.append(f"stem={stem!r}")
    if keep is not None:
        args.append(f"keep={keep!r}")
    if mean is not None and std is not None and (default is None or (tuple(mean), tuple(std)) != tuple(map(tuple, default))):
        args += [f"mean={tuple(mean)!r}", f"std={tuple(std)!r}"]
    return f"dctnet.models.swap_stem({', '.join(args)})"


def sample_input(image: str | None, size: int) -> torch.Tensor:
    """An in-range coefficient image ``(1, 3, size/8, size/8, 64)`` float32 from the JPEG file
    ``image`` (or a generated photo), resized to ``size``²."""
    c = read_coefficients(image if image else synthetic_jpeg(0, size, size))
    rgb = IM.coefficients_to_rgb(c)
    rgb = RS.resized_crop(rgb, torch.tensor([[0, 0, c.height, c.width]]), (size, size))
    return TF.coefficient_image_from_rgb(rgb.double()).float()


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
    |logit|), the normalisation folded in and where it came from, the stem's name (``"dct-patch"``:
    converted patch embedding; ``"idct"``: device IDCT + the original conv) and the ``swap_stem``
    call that builds the model OUT loads into."""

    diff: float
    rel: float
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    source: str
    stem: str
    hint: str


def _check_converted_stem(stem: str | None) -> None:
    """``ValueError`` for a name that is not a stem, or a learned stem (nothing to convert)."""
    check_stem(stem)
    if stem in LEARNED_STEMS:
        raise ValueError(f"stem {stem!r} is a learned stem (trained from its DCT-domain init, nothing to convert); "
                         f"conversion makes the converted stems {', '.join(map(repr, CONVERTED_STEMS))} (unset: "
                         "'dct-patch' where the first conv is a block-aligned patchify conv, else 'idct')")


def convert(src: str | Path, dst: str | Path, arch: str, *, stem: str | None = None, image_size: int | None = None,
            image: str | None = None, keep: int | str | list[int] | None = None, mean: tuple[float, ...] | None = None,
            std: tuple[float, ...] | None = None, tolerance: float = 1e-4) -> Conversion:
    """Load ``src`` into ``arch``, swap and convert its stem, check the logits on a sample image
    (``image``, default a generated photo) and write the DCT model's state_dict to ``dst``.

    ``stem``: ``"dct-patch"`` or ``"idct"`` (:data:`~dctnet.models.CONVERTED_STEMS`); default the
    model's own (:func:`~dctnet.models.default_stem`). A learned stem, a name that is not a stem,
    or a stem the architecture does not take is a ``ValueError`` listing the ones it takes.

    Normalisation (:mod:`dctnet.kernels.normalization`): ``mean``/``std`` (both or neither),
    else the checkpoint's metadata (:func:`~dctnet.models.checkpoint_mean_std`), else timm's
    ``pretrained_cfg``, else ImageNet's; the self-check normalises the RGB model's pixels the same
    way. Without ``keep`` a relative difference above ``tolerance`` raises ``RuntimeError`` and
    nothing is written; with ``keep`` the difference is the truncation's and only reported."""
    _check_converted_stem(stem)
    state, meta = load_checkpoint(src)
    recorded, recorded_source = (None, "") if mean is not None or std is not None else checkpoint_mean_std(meta)
    mean, std, source = resolve_mean_std(arch, mean, std, metadata=recorded, metadata_source=recorded_source)
    model = build_model(arch, image_size=image_size, num_classes=num_classes_of(state))
    check_state_dict(model, state, f"{src} does not fit {arch}" + (f" at image size {image_size}" if image_size else ""))
    model.load_state_dict(state)
    model.eval()
    if stem is not None and stem not in stems_for(model):
        raise stem_error(model, stem, CONVERTED_STEMS, takes=f"converting {arch} makes")
    x = sample_input(image, _input_size(model, image_size))
    dct = swap_stem(copy.deepcopy(model), stem=stem, mean=mean, std=std, keep=keep).eval()
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
    hint = load_hint(keep, mean, std, default=input_mean_std(model),
                     stem=stem if stem is not None and stem != default_stem(model) else None)
    return Conversion(diff, rel, mean, std, source, dct.dctnet_stem, hint)


def convert_checkpoint(src: str | Path, dst: str | Path, arch: str, *, stem: str | None = None,
                       image_size: int | None = None, image: str | None = None,
                       keep: int | str | list[int] | None = None, mean: tuple[float, ...] | None = None,
                       std: tuple[float, ...] | None = None, tolerance: float = 1e-4) -> tuple[float, float]:
    """:func:`convert`, returning the max |logit difference|, absolute and relative to max |logit|."""
    r = convert(src, dst, arch, stem=stem, image_size=image_size, image=image, keep=keep, mean=mean, std=std,
                tolerance=tolerance)
    return r.diff, r.rel
