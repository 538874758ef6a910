"""Swapping the first layer of torchvision / timm models for one that eats DCT coefficients.

:func:`swap_stem` finds the model's first conv (:func:`first_conv`: torchvision ViTs' ``conv_proj``,
timm's ``pretrained_cfg["first_conv"]``, else the first 3-channel ``nn.Conv2d`` in module order)
and replaces it, in place, by one of four stems (:data:`STEMS`, the names ``dctnet convert`` and
a recipe's ``model.stem`` take as well):

- ``"dct-patch"``, a converted patch embedding (:class:`~dctnet.nn.DCTPatchEmbed`,
  :meth:`~dctnet.nn.DCTPatchEmbed.from_conv`), for a block-aligned patchify first conv
  (kernel = stride = p, p a multiple of 8 or a divisor of 8): decode and normalisation are affine
  and the orthonormal DCT preserves inner products, so the conv folds into a linear map on each
  patch's coefficients, no IDCT at run time. ViTs of any patch 8k (torchvision ``vit_b_16``,
  ``vit_b_32``; timm ``vit_*_patch8/16/32``) and the 4×4 stride-4 stems of ConvNeXt and Swin
  (timm and torchvision; each block's coefficients give its 2×2 patches, pixel-shuffled onto the
  stride-4 grid);
- ``"idct"``, the IDCT stem (:class:`~dctnet.nn.IDCTStem`): block IDCT + colour + normalisation
  on the device, then the original conv, for any first conv (ResNet's 7×7/2, the 3×3/2 of
  EfficientNet, MobileNetV3 and RegNet, a patch-14 ViT — and the patchify convs above);
- ``"dct8"`` and ``"dct-up"``, the learned ResNet stems (:class:`~dctnet.nn.ResNetDCTStem`):
  trained from their DCT-domain init, never converted; ResNets only.

``dct-patch`` and ``idct`` are the converted stems: the model gives the RGB model's logits on the
coefficients of the pixels it was given. Without ``stem`` a model gets the better of the two the
maths allows — ``dct-patch`` where the first conv is block-aligned, ``idct`` otherwise
(:func:`default_stem`); :func:`stems_for` lists the stems a model takes.

Whatever follows the conv (ConvNeXt's LayerNorm, Swin's norm and timm's NHWC output, a ViT's
tokens and position embeddings) is kept; where the model's forward inspects the input before the
conv, an adapter (:mod:`dctnet.models.adapters`, :mod:`dctnet.models.torchvision_vit`) makes the
same checks on the block grid.

Every swapped model takes a coefficient image ``(B, 3, Hb, Wb, 64)``
(:func:`dctnet.transforms.crops_to_coefficients`); ``dct-patch`` stems with ``chroma="native"``
take ``(y, c)``. The normalisation folded into a converted stem is ``mean``/``std`` when given,
else :func:`dctnet.kernels.normalization.input_mean_std` of the model (its timm
``pretrained_cfg``, else ImageNet's).
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence

import torch
from torch import nn

from dctnet.models.adapters import TimmDCTPatchEmbed, is_timm_patch_embed
from dctnet.nn import DCTPatchEmbed, DCTToRGB, IDCTStem, ResNetDCTStem, frequency_index, is_patchify
from dctnet.kernels.normalization import input_mean_std

__all__ = ["CONVERTED_STEMS", "LEARNED_STEMS", "STEMS", "check_stem", "check_swap", "default_stem", "family", "first_conv",
           "set_module", "stem_error", "stem_modules", "stems_for", "swap_stem"]

#: every DCT stem by name, with what it is: the names of ``swap_stem``, ``dctnet convert`` and recipes
STEMS: dict[str, str] = {
    "dct-patch": "converted patch embedding (a block-aligned patchify first conv as a linear map on each patch's "
                 "coefficients: ViT, Swin, ConvNeXt)",
    "idct": "IDCT stem (device IDCT + colour + normalisation, then the original first conv: any model)",
    "dct8": "learned ResNet stem at 1/8 resolution, replacing conv1..layer1",
    "dct-up": "learned ResNet stem upsampled into layer1 at 1/4 resolution",
}
#: the stems that reproduce the RGB model (what ``dctnet convert`` makes)
CONVERTED_STEMS = ("dct-patch", "idct")
#: the stems trained from their DCT-domain init (ResNets)
LEARNED_STEMS = ("dct8", "dct-up")
#: names that are not stems, with what to say instead
_NOT_STEMS = {
    "converted": "'converted' is not a stem name: the converted stems are 'dct-patch' and 'idct'; leave stem unset "
                 "(None) for the one the model takes",
    "exact": "'exact' is not a stem name ('exact' is the libjpeg integer decode of crops_to_rgb/to_rgb): the converted "
             "stems are 'dct-patch' and 'idct'; leave stem unset (None) for the one the model takes",
}

Keep = int | str | Sequence[int] | None


def _listing(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names)


def check_stem(stem: str | None) -> None:
    """``ValueError`` unless ``stem`` is ``None`` (the model's default) or one of :data:`STEMS`;
    the message lists them with what each is."""
    if stem is None or (isinstance(stem, str) and stem in STEMS):
        return
    if stem in _NOT_STEMS:
        raise ValueError(f"stem={stem!r}: {_NOT_STEMS[stem]}")

    close = difflib.get_close_matches(str(stem), list(STEMS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"stem {stem!r} is not a DCT stem{hint}; the stems are "
                     + "; ".join(f"{n!r}: {what}" for n, what in STEMS.items())
                     + "; or leave it unset for the model's default ('dct-patch' where the first conv is a "
                       "block-aligned patchify conv, else 'idct')")


def family(model: nn.Module) -> str:
    """The model's family as its class names it, with the library: ``"timm's ConvNeXt"``,
    ``"torchvision's ResNet"``, ``"timm's SwinTransformer"``."""
    cls = type(model)
    lib = cls.__module__.split(".")[0]
    return f"{lib}'s {cls.__name__}" if lib in ("timm", "torchvision") else cls.__name__


def _is_torchvision_vit(model: nn.Module) -> bool:
    # a VisionTransformer exists only once its module is imported: checking sys.modules spares
    # every other model the cost of importing torchvision
    vit = sys.modules.get("torchvision.models.vision_transformer")
    return vit is not None and isinstance(model, vit.VisionTransformer)


def _is_resnet(model: nn.Module) -> bool:
    return (all(hasattr(model, n) for n in ("conv1", "bn1", "maxpool", "layer1", "layer2", "fc"))
            and isinstance(model.conv1, nn.Conv2d))


_DCT_MODULES = (DCTPatchEmbed, DCTToRGB, ResNetDCTStem, TimmDCTPatchEmbed)


def _existing_stem(model: nn.Module) -> str | None:
    for name, m in model.named_modules():
        if isinstance(m, _DCT_MODULES):
            return f"{type(m).__name__} at {name or 'the top level'}"
    return None


def first_conv(model: nn.Module) -> tuple[str, nn.Module]:
    """Name and module of the layer the input meets first: torchvision ViT's ``conv_proj``;
    timm's ``pretrained_cfg["first_conv"]`` (a conv, or the first conv inside it); else the first
    3-channel ``nn.Conv2d`` in module (definition) order. ``TypeError`` when there is none."""
    if _is_torchvision_vit(model):
        return "conv_proj", model.conv_proj
    cfg = getattr(model, "pretrained_cfg", None) or {}
    name = cfg.get("first_conv") if isinstance(cfg, dict) else None
    if isinstance(name, str) and name:
        try:
            m = model.get_submodule(name)
        except AttributeError:
            m = None
        if isinstance(m, nn.Conv2d):
            return name, m
        if m is not None:
            for sub, c in m.named_modules():
                if isinstance(c, nn.Conv2d):
                    return f"{name}.{sub}", c
    for n, m in model.named_modules():
        if isinstance(m, nn.Conv2d) and m.in_channels == 3:
            return n, m
    raise TypeError(f"swap_stem: {type(model).__name__} has no 3-channel nn.Conv2d to put a DCT stem in front of")


def set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    """Replace the submodule ``name`` (dotted, as in ``named_modules``) of ``model`` by ``module``."""
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def _describe_conv(name: str, conv: nn.Module) -> str:
    if isinstance(conv, nn.Conv2d):
        k, st = conv.kernel_size, conv.stride
        return f"{name}, a {k[0]}x{k[1]}/{st[0]} conv"
    return f"{name}, a {type(conv).__name__}"


def stems_for(model: nn.Module) -> tuple[str, ...]:
    """The stems ``model`` takes, in :data:`STEMS` order: ``dct-patch`` where its first conv is a
    block-aligned patchify conv, ``idct`` always, ``dct8``/``dct-up`` for ResNets. ``TypeError``
    when the model has no first conv to put a stem in front of."""
    _, conv = first_conv(model)
    names = ["dct-patch"] if is_patchify(conv) else []
    names.append("idct")
    if _is_resnet(model):
        names += LEARNED_STEMS
    return tuple(names)


def default_stem(model: nn.Module) -> str:
    """The stem ``swap_stem(model)`` puts in without ``stem``: the converted stem the maths allows
    at no reconstruction cost — ``dct-patch`` for a block-aligned patchify first conv, else ``idct``."""
    return "dct-patch" if is_patchify(first_conv(model)[1]) else "idct"


def stem_error(model: nn.Module, stem: str, allowed: Sequence[str] | None = None, takes: str = "it takes") -> ValueError:
    """The error for a ``stem`` (a name in :data:`STEMS`) that ``model`` does not take: the model's
    family, its first conv, and (after ``takes``) the stems it takes — ``allowed`` narrows them,
    e.g. to the converted ones — its default marked."""
    name, conv = first_conv(model)
    fits = [n for n in stems_for(model) if allowed is None or n in allowed]
    default = default_stem(model)
    listed = ", ".join(f"{n!r}" + (" (the default)" if n == default else "") for n in fits)
    why = ("learned stems are for ResNets" if stem in LEARNED_STEMS
           else "its first conv is not a block-aligned patchify conv (kernel = stride = p, p a multiple or divisor of 8)")
    return ValueError(f"stem {stem!r} does not fit {family(model)} (first conv {_describe_conv(name, conv)}): {why}; "
                      f"{takes} {listed}")


def _resolve(model: nn.Module, stem: str | None, chroma: str) -> tuple[str, str, nn.Module]:
    """``(stem, first conv name, first conv)`` for ``swap_stem``'s arguments, or its errors."""
    check_stem(stem)
    name, conv = first_conv(model)
    if stem is None:
        stem = default_stem(model)
    elif stem not in stems_for(model):
        raise stem_error(model, stem)
    if chroma != "upsampled" and stem != "dct-patch":
        raise ValueError(f"chroma={chroma!r} needs a 'dct-patch' stem (a block-aligned patch embedding); the {stem!r} "
                         f"stem of {family(model)} ({_describe_conv(name, conv)}) takes the coefficient image "
                         "(B, 3, Hb, Wb, 64)")
    return stem, name, conv


def check_swap(model: nn.Module, *, stem: str | None = None, chroma: str = "upsampled",
               chroma_factor: tuple[int, int] = (2, 2), keep: Keep = None) -> str:
    """The stem ``swap_stem(model, ...)`` would put in, or the ``ValueError`` / ``TypeError`` it
    would raise for these arguments — without touching ``model`` or converting its weights, so
    ``model`` may live on the meta device (a recipe's model checked before it is built). Nothing
    else runs on the meta device: dctnet caches constant matrices per device."""
    stem, _, conv = _resolve(model, stem, chroma)
    with torch.random.fork_rng(devices=[]):  # the throwaway layers below draw no one's numbers
        if stem == "dct-patch":
            DCTPatchEmbed(conv.kernel_size[0], 1, chroma=chroma, chroma_factor=chroma_factor, keep=keep)
        elif keep is not None:
            frequency_index(keep)
    return stem


def swap_stem(model: nn.Module, *, stem: str | None = None, chroma: str = "upsampled",
              chroma_factor: tuple[int, int] = (2, 2), keep: Keep = None,
              mean: Sequence[float] | None = None, std: Sequence[float] | None = None) -> nn.Module:
    """Replace the first layer of ``model`` (in place) so it takes DCT coefficients; returns the model.

    Args:
        model: an RGB torchvision or timm classifier (any family with a conv first layer: ViT,
            Swin, ConvNeXt, ResNet, EfficientNet, MobileNetV3, RegNet, ...), in any dtype/device.
        stem: a name in :data:`STEMS` (module docstring): ``"dct-patch"`` (block-aligned patchify
            first convs: ViT, Swin, ConvNeXt) and ``"idct"`` (any first conv) are converted — the
            RGB model's logits; ``"dct8"`` / ``"dct-up"`` are learned, ResNets only. Default
            (``None``): :func:`default_stem`, ``dct-patch`` where the first conv allows it, else
            ``idct``. :func:`stems_for` lists a model's stems.
        chroma, chroma_factor: ``"native"`` feeds ``(y, c)`` with chroma at its own resolution
            (``dct-patch`` stems of patch size ≥ 8 only; see :class:`~dctnet.nn.DCTPatchEmbed`).
        keep: frequencies used (:func:`dctnet.nn.frequency_index`); the converted stem is exact
            when the others are zero.
        mean, std: the RGB normalisation (``rgb`` in [0, 1]) the model was trained with, folded into
            a converted stem. Default :func:`~dctnet.kernels.normalization.input_mean_std` of
            ``model``: timm's ``pretrained_cfg``, else ImageNet's — the rule ``ToRGB.for_model``
            applies too.

    The model records ``dctnet_stem`` (the stem's name) and, for converted stems, ``dctnet_mean_std``.

    Raises:
        ValueError: the model already has a DCT stem, ``stem`` is not a stem name or not one the
            model takes (the message names the model's family and lists its stems), or the other
            options do not fit it.
        TypeError: no supported first layer.
    """
    found = _existing_stem(model)
    if found:
        raise ValueError(f"{type(model).__name__} already has a DCT stem ({found}); swap_stem converts an RGB model "
                         "once — call it on a fresh model (or one with its RGB weights reloaded)")
    if isinstance(model, nn.Conv2d):
        raise TypeError("swap_stem takes a model, not a bare conv (use DCTPatchEmbed.from_conv or IDCTStem)")
    stem, name, conv = _resolve(model, stem, chroma)
    if stem in LEARNED_STEMS:
        return _learned_resnet_stem(model, stem, keep)
    if getattr(model, "transform_input", False):  # torchvision Inception / GoogLeNet re-normalise in forward
        raise TypeError(f"{type(model).__name__} was built with transform_input=True: it changes its input before "
                        "the first conv; build it with transform_input=False")
    default_mean, default_std = input_mean_std(model)
    mean = tuple(float(v) for v in mean) if mean is not None else default_mean
    std = tuple(float(v) for v in std) if std is not None else default_std
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    if stem == "dct-patch":
        new: nn.Module = DCTPatchEmbed.from_conv(conv, mean, std, chroma=chroma, chroma_factor=chroma_factor, keep=keep)
    else:
        if isinstance(conv, nn.Conv2d) and conv.in_channels != 3:
            raise TypeError(f"swap_stem: the first conv of {type(model).__name__} ({name}) takes {conv.in_channels} "
                            "channels; DCT stems produce 3 (RGB)")
        new = IDCTStem(conv, mean, std, keep)
        ref = next(iter(conv.parameters()), None)
        if ref is not None:  # the reconstruction runs in the conv's dtype, on its device
            new[0].to(device=ref.device, dtype=ref.dtype)
    if _is_torchvision_vit(model):
        from dctnet.models.torchvision_vit import to_dct_vision_transformer  # imports torchvision

        model.conv_proj = new
        to_dct_vision_transformer(model)
    elif child == "proj" and is_timm_patch_embed(parent):
        set_module(model, parent_name, TimmDCTPatchEmbed(parent, new))
    elif child == "proj" and hasattr(parent, "strict_img_size"):
        raise TypeError(f"swap_stem: {type(parent).__name__} ({parent_name}) is a patch embedding dctnet has no "
                        "wrapper for")
    else:
        set_module(model, name, new)
    model.dctnet_stem = stem
    model.dctnet_mean_std = (mean, std)
    return model


def _learned_resnet_stem(model: nn.Module, stem: str, keep: Keep) -> nn.Module:
    """``dct-up``: the stem replaces conv1 (bn1, relu and max-pool become identities) and feeds
    layer1 at 1/4 resolution; ``dct8``: it replaces conv1…layer1 and feeds layer2 at 1/8, whose
    first block then keeps the resolution instead of halving it."""
    if stem == "dct-up":
        model.conv1 = ResNetDCTStem(model.conv1.out_channels, "dct-up", keep)
        model.bn1, model.relu, model.maxpool = nn.Identity(), nn.Identity(), nn.Identity()
    else:
        first = model.layer2[0]
        in_ch = first.conv1.in_channels
        model.conv1 = ResNetDCTStem(in_ch, "dct8", keep)
        model.bn1, model.relu, model.maxpool, model.layer1 = nn.Identity(), nn.Identity(), nn.Identity(), nn.Identity()
        for m in (first.conv1, getattr(first, "conv2", None)):
            if m is not None and m.stride != (1, 1):
                m.stride = (1, 1)
        if first.downsample is not None:
            first.downsample[0].stride = (1, 1)
    model.dctnet_stem = stem
    return model


def stem_modules(model: nn.Module) -> list[nn.Module]:
    """The modules swap_stem put in (for learning-rate groups): each :class:`~dctnet.nn.DCTPatchEmbed`,
    :class:`~dctnet.nn.ResNetDCTStem` and :class:`~dctnet.nn.IDCTStem` (with the original conv it
    wraps), outermost first. ``ValueError`` when there is none."""
    out: list[nn.Module] = []
    inside: list[str] = []
    for name, m in model.named_modules():
        if any(name.startswith(p + ".") for p in inside):
            continue
        if isinstance(m, (DCTPatchEmbed, ResNetDCTStem, IDCTStem)):
            out.append(m)
            inside.append(name)
    if not out:
        raise ValueError("model has no dctnet stem (call swap_stem first)")
    return out
