"""Swapping the first layer of torchvision / timm models for one that eats DCT coefficients.

:func:`swap_stem` finds the model's first conv (:func:`first_conv`: torchvision ViTs' ``conv_proj``,
timm's ``pretrained_cfg["first_conv"]``, else the first 3-channel ``nn.Conv2d`` in module order)
and replaces it, in place. The default, ``stem="converted"``, converts the RGB model so that it
gives the same logits on the coefficients as it gave on the decoded pixels — the best such stem
the maths allows:

- a block-aligned patchify conv (kernel = stride = p, p a multiple of 8 or a divisor of 8) becomes
  a :class:`~dctnet.nn.DCTPatchEmbed` (:meth:`~dctnet.nn.DCTPatchEmbed.from_conv`): decode and
  normalisation are affine and the orthonormal DCT preserves inner products, so the conv folds
  into a linear map on each patch's coefficients, no IDCT at run time. ViTs of any patch 8k
  (torchvision ``vit_b_16``, ``vit_b_32``; timm ``vit_*_patch8/16/32``) and the 4×4 stride-4 stems
  of ConvNeXt and Swin (timm and torchvision; each block's coefficients give its 2×2 patches,
  pixel-shuffled onto the stride-4 grid);
- any other first conv (ResNet's 7×7/2, the 3×3/2 of EfficientNet, MobileNetV3 and RegNet, a
  patch-14 ViT) gets :class:`~dctnet.nn.IDCTStem`: block IDCT + colour + normalisation on the
  device, then the original conv — the same logits as well, at the cost of the reconstruction.

Whatever follows the conv (ConvNeXt's LayerNorm, Swin's norm and timm's NHWC output, a ViT's
tokens and position embeddings) is kept; where the model's forward inspects the input before the
conv, an adapter (:mod:`dctnet.models.adapters`, :mod:`dctnet.models.torchvision_vit`) makes the
same checks on the block grid. torchvision ResNets also take the learned stems ``stem="dct8"`` and
``"dct-up"`` (:class:`~dctnet.nn.ResNetDCTStem`): trained from their DCT-domain init, never
converted.

Every swapped model takes a coefficient image ``(B, 3, Hb, Wb, 64)``
(:func:`dctnet.transforms.crops_to_coefficients`); ViTs with ``chroma="native"`` take ``(y, c)``.
The normalisation folded in is ``mean``/``std`` when given, else
:func:`dctnet.transforms.normalization.input_mean_std` of the model (its timm ``pretrained_cfg``,
else ImageNet's).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from torch import nn

from dctnet.models.adapters import TimmDCTPatchEmbed, is_timm_patch_embed
from dctnet.nn import DCTPatchEmbed, DCTToRGB, IDCTStem, ResNetDCTStem, is_patchify
from dctnet.transforms.normalization import input_mean_std

__all__ = ["STEMS", "check_stem", "first_conv", "set_module", "stem_modules", "swap_stem"]

#: ``swap_stem``'s stems: the RGB model converted, or a learned ResNet stem
STEMS = ("converted", "dct8", "dct-up")

Keep = int | str | Sequence[int] | None


def check_stem(stem: str) -> None:
    """``ValueError`` unless ``stem`` is one of :data:`STEMS`; the pre-rename ``"exact"`` says its
    new name (``exact`` now means only the libjpeg integer decode, ``to_rgb(exact=True)``)."""
    if stem == "exact":
        raise ValueError("stem='exact' is now stem='converted' (the converted stem that reproduces the RGB model; "
                         "'exact' is the libjpeg integer decode of crops_to_rgb/to_rgb)")
    if stem not in STEMS:
        raise ValueError(f"stem must be one of {', '.join(map(repr, STEMS))}, not {stem!r}")


def _is_torchvision_vit(model: nn.Module) -> bool:
    # a VisionTransformer exists only once its module is imported: checking sys.modules spares
    # every other model the cost of importing torchvision
    vit = sys.modules.get("torchvision.models.vision_transformer")
    return vit is not None and isinstance(model, vit.VisionTransformer)


def _is_resnet(model: nn.Module) -> bool:
    return all(hasattr(model, n) for n in ("conv1", "bn1", "maxpool", "layer1", "layer2", "fc"))


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


def swap_stem(model: nn.Module, *, stem: str = "converted", chroma: str = "upsampled",
              chroma_factor: tuple[int, int] = (2, 2), keep: Keep = None,
              mean: Sequence[float] | None = None, std: Sequence[float] | None = None) -> nn.Module:
    """Replace the first layer of ``model`` (in place) so it takes DCT coefficients; returns the model.

    Args:
        model: an RGB torchvision or timm classifier (any family with a conv first layer: ViT,
            Swin, ConvNeXt, ResNet, EfficientNet, MobileNetV3, RegNet, ...), in any dtype/device.
        stem: ``"converted"`` (default): the converted patch embedding where the first conv is
            block-aligned, the IDCT stem otherwise (module docstring) — the RGB model's logits.
            ``"dct8"`` / ``"dct-up"``: learned stems, torchvision ResNets only.
        chroma, chroma_factor: ``"native"`` feeds ``(y, c)`` with chroma at its own resolution
            (patch embeddings of size ≥ 8 only; see :class:`~dctnet.nn.DCTPatchEmbed`).
        keep: frequencies used (:func:`dctnet.nn.frequency_index`); the converted stem is exact
            when the others are zero.
        mean, std: the RGB normalisation (``rgb`` in [0, 1]) the model was trained with, folded into
            the stem. Default :func:`~dctnet.transforms.normalization.input_mean_std` of ``model``:
            timm's ``pretrained_cfg``, else ImageNet's — the rule ``ToRGB.for_model`` applies too.

    The model records ``dctnet_stem`` (``"dct-patch"``, ``"idct"``, ``"dct8"`` or ``"dct-up"``)
    and, for converted stems, ``dctnet_mean_std``.

    Raises:
        ValueError: the model already has a DCT stem, or the options do not fit it.
        TypeError: no supported first layer.
    """
    found = _existing_stem(model)
    if found:
        raise ValueError(f"{type(model).__name__} already has a DCT stem ({found}); swap_stem converts an RGB model "
                         "once — call it on a fresh model (or one with its RGB weights reloaded)")
    check_stem(stem)
    if stem != "converted":
        if not _is_resnet(model):
            raise ValueError(f"learned stems ({stem!r}) are for torchvision ResNets; {type(model).__name__} takes "
                             "stem='converted'")
        return _learned_resnet_stem(model, stem, keep)
    if getattr(model, "transform_input", False):  # torchvision Inception / GoogLeNet re-normalise in forward
        raise TypeError(f"{type(model).__name__} was built with transform_input=True: it changes its input before "
                        "the first conv; build it with transform_input=False")
    default_mean, default_std = input_mean_std(model)
    mean = tuple(float(v) for v in mean) if mean is not None else default_mean
    std = tuple(float(v) for v in std) if std is not None else default_std
    name, conv = first_conv(model)
    if not name:
        raise TypeError("swap_stem takes a model, not a bare conv (use DCTPatchEmbed.from_conv or IDCTStem)")
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    if is_patchify(conv):
        new: nn.Module = DCTPatchEmbed.from_conv(conv, mean, std, chroma=chroma, chroma_factor=chroma_factor, keep=keep)
        kind = "dct-patch"
    else:
        if chroma != "upsampled":
            raise ValueError(f"chroma={chroma!r} needs a block-aligned patch embedding; the first layer of "
                             f"{type(model).__name__} ({name}: {conv}) gets the IDCT stem, which takes the "
                             "coefficient image (B, 3, Hb, Wb, 64)")
        if isinstance(conv, nn.Conv2d) and conv.in_channels != 3:
            raise TypeError(f"swap_stem: the first conv of {type(model).__name__} ({name}) takes {conv.in_channels} "
                            "channels; DCT stems produce 3 (RGB)")
        new = IDCTStem(conv, mean, std, keep)
        ref = next(iter(conv.parameters()), None)
        if ref is not None:  # the reconstruction runs in the conv's dtype, on its device
            new[0].to(device=ref.device, dtype=ref.dtype)
        kind = "idct"
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
    model.dctnet_stem = kind
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
