"""Swapping the first layer of torchvision / timm models for one that eats DCT coefficients.

:func:`swap_stem` finds the model's first conv (timm's ``pretrained_cfg["first_conv"]``, else the
first 3-channel ``nn.Conv2d`` in module order; torchvision ViTs: ``conv_proj``) and replaces it, in
place, by the best exact stem the maths allows:

- a block-aligned patchify conv (kernel = stride = p, p a multiple of 8 or a divisor of 8) becomes
  an exact :class:`DCTPatchEmbed` (:meth:`DCTPatchEmbed.from_conv`) — same logits, no IDCT: ViTs
  of any patch 8k (torchvision ``vit_b_16``, ``vit_b_32``; timm ``vit_*_patch8/16/32``) and the
  4×4 stride-4 stems of ConvNeXt and Swin (timm and torchvision; each block's coefficients give
  its 2×2 patches, pixel-shuffled onto the stride-4 grid);
- any other first conv (ResNet's 7×7/2, the 3×3/2 of EfficientNet, MobileNetV3 and RegNet, a
  patch-14 ViT) gets :class:`IDCTStem`: block IDCT + colour + normalisation on the device, then
  the original conv — exact as well, at the cost of the pixel reconstruction.

Whatever follows the conv (ConvNeXt's LayerNorm, Swin's norm and timm's NHWC output, a ViT's
tokens and position embeddings) is kept. torchvision ResNets also take two learned stems:
``stem="dct8"`` (Gueguen et al. 2018 style) projects the 192 coefficients of each 8×8 block with a
1×1 conv straight into the 1/8-resolution stage, skipping conv1, max-pool and layer1;
``stem="dct-up"`` projects them to 4× the channels of layer1's input and pixel-shuffles to 1/4
resolution, feeding layer1 unchanged. Learned stems start from a spatial Kaiming init transformed
to the DCT domain; they are trained, never converted.

Every swapped model takes a coefficient image ``(B, 3, Hb, Wb, 64)``
(:func:`dctnet.transforms.crops_to_coefficients`); ViTs with ``chroma="native"`` take ``(y, c)``.
The normalisation folded in is ``mean``/``std`` when given, else
:func:`dctnet.nn.input_mean_std` of the model (its timm ``pretrained_cfg``, else ImageNet's).
"""

from __future__ import annotations

import types
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from dctnet import functional as F
from dctnet.transforms import functional as TF
from dctnet.nn.normalization import IMAGENET_MEAN, IMAGENET_STD, input_mean_std
from dctnet.nn.patch_embed import DCTPatchEmbed, frequency_index, is_patchify

__all__ = ["DCTToRGB", "IDCTStem", "ResNetDCTStem", "count_flops", "param_groups", "stem_modules", "swap_stem"]


def _block_grid(x: object, what: str) -> tuple[int, int]:
    """``(Hb, Wb)`` of a coefficient image ``(B, C, Hb, Wb, 64)`` or a native pair ``(y, c)``."""
    if isinstance(x, Tensor) and x.dim() == 5:
        return int(x.shape[2]), int(x.shape[3])
    if isinstance(x, (tuple, list)) and len(x) == 2 and isinstance(x[0], Tensor) and x[0].dim() == 4:
        return int(x[0].shape[1]), int(x[0].shape[2])
    got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
    raise ValueError(f"{what} takes a coefficient image (B, 3, Hb, Wb, 64) from dctnet.transforms.crops_to_coefficients "
                     f"(or (y, c) with chroma='native'), got {got}")


def _grid_error(what: str, expected_px: tuple[int, int], got: tuple[int, int], patch: int | None) -> ValueError:
    eh, ew = expected_px
    tokens = f", {eh // patch}x{ew // patch} patches" if patch else ""
    return ValueError(f"{what} expects {eh}x{ew} pixels = a {eh / 8:g}x{ew / 8:g} block grid{tokens}; got a "
                      f"{got[0]}x{got[1]} block grid ({8 * got[0]}x{8 * got[1]} pixels"
                      + (f", {8 * got[0] / patch:g}x{8 * got[1] / patch:g} patches" if patch else "") + ")")


class DCTToRGB(nn.Module):
    """Coefficient image ``(B, 3, Hb, Wb, 64)`` (or ``(B, 1, ...)`` grayscale) → normalised RGB
    ``(B, 3, 8·Hb, 8·Wb)``: ``((rgb/255) − mean)/std`` with no clamp, so the map is affine and exact
    against ``model(normalize(to_rgb(...)))`` on in-range images. ``keep`` zeroes the other
    frequencies first (:func:`dctnet.nn.frequency_index`), the IDCT-stem analogue of a patch
    embedding's dropped columns. Runs in the buffers' dtype (``model.double()`` makes it float64)."""

    def __init__(self, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
                 keep: int | str | Sequence[int] | None = None) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).reshape(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).reshape(1, 3, 1, 1), persistent=False)
        mask = None
        if keep is not None:
            mask = torch.zeros(64)
            mask[frequency_index(keep)] = 1.0
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or x.dim() != 5 or x.shape[1] not in (1, 3) or x.shape[-1] != 64:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError("the IDCT stem takes a coefficient image (B, 3, Hb, Wb, 64) from "
                             f"dctnet.transforms.crops_to_coefficients, got {got}")
        x = x.to(self.mean.dtype)
        if self.mask is not None:
            x = x * self.mask
        return (TF.coefficient_image_to_rgb(x, clamp=False) - self.mean) / self.std


class IDCTStem(nn.Sequential):
    """The exact stem for a first conv that is not block-aligned: :class:`DCTToRGB` (device IDCT,
    colour, normalisation), then the model's original first layer ``conv``, unchanged (its
    state_dict keys become ``<name>.1.*``). Input ``(B, 3, Hb, Wb, 64)``, output what ``conv``
    gives on ``(B, 3, 8·Hb, 8·Wb)`` pixels."""

    def __init__(self, conv: nn.Module, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
                 keep: int | str | Sequence[int] | None = None) -> None:
        super().__init__(DCTToRGB(mean, std, keep), conv)


class ResNetDCTStem(nn.Module):
    """Learned DCT stem for a torchvision ResNet (see module docstring).

    ``mode="dct8"``: BN over the 192 coefficient channels, 1×1 conv → ``out_channels``, BN, ReLU,
    at 1/8 resolution. ``mode="dct-up"``: same, to ``4·out_channels``, then pixel shuffle ×2 (1/4)."""

    def __init__(self, out_channels: int, mode: str = "dct8", keep: int | str | Sequence[int] | None = None) -> None:
        super().__init__()
        if mode not in ("dct8", "dct-up"):
            raise ValueError(f"mode must be 'dct8' or 'dct-up', not {mode!r}")
        self.mode = mode
        self.register_buffer("index", frequency_index(keep), persistent=False)
        k = self.index.numel()
        proj = out_channels * (4 if mode == "dct-up" else 1)
        self.bn_in = nn.BatchNorm2d(3 * k)
        self.proj = nn.Conv2d(3 * k, proj, 1, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.init_from_spatial()

    @torch.no_grad()
    def init_from_spatial(self) -> None:
        """A 1×1 conv over the 64 coefficients of a block is an 8×8 stride-8 conv on its pixels:
        Kaiming-initialise that spatial conv and transform it (orthonormal DCT keeps the scale)."""
        spatial = torch.empty(self.proj.out_channels, 3, 8, 8)
        nn.init.kaiming_normal_(spatial, mode="fan_out", nonlinearity="relu")
        coef = F.block_dct(spatial.double())[..., 0, 0, :][..., self.index]        # (O, 3, K)
        self.proj.weight.copy_(coef.reshape(self.proj.out_channels, -1, 1, 1).float())

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[1] == 1:
            x = torch.cat([x, x.new_zeros(x.shape[0], 2, *x.shape[2:])], dim=1)
        b, c, hb, wb, _ = x.shape
        x = x.index_select(-1, self.index).to(self.proj.weight.dtype)
        x = x.permute(0, 1, 4, 2, 3).reshape(b, c * self.index.numel(), hb, wb)
        x = self.proj(self.bn_in(x))
        if self.mode == "dct-up":
            x = nn.functional.pixel_shuffle(x, 2)
        return self.relu(self.bn(x))



def _is_torchvision_vit(model: nn.Module) -> bool:
    return hasattr(model, "conv_proj") and hasattr(model, "_process_input") and hasattr(model, "encoder")


def _is_resnet(model: nn.Module) -> bool:
    return all(hasattr(model, n) for n in ("conv1", "bn1", "maxpool", "layer1", "layer2", "fc"))


def _is_timm_patch_embed(module: nn.Module) -> bool:
    """timm's ``PatchEmbed`` (ViT, Swin, ...): its forward reads ``B, C, H, W = x.shape`` before
    the conv, so the DCT stem goes into a wrapper with the same interface."""
    return type(module).__name__ == "PatchEmbed" and all(hasattr(module, a) for a in ("proj", "norm", "img_size"))


class _TimmDCTPatchEmbed(nn.Module):
    """timm's ``PatchEmbed`` interface around a DCT stem: the original's size checks (on the block
    grid, as a ValueError naming both sizes), its output format (tokens ``(B, N, C)``, or NHWC for
    Swin) and its norm."""

    def __init__(self, original: nn.Module, proj: nn.Module) -> None:
        super().__init__()
        self.proj = proj
        self.norm = original.norm
        for attr in ("patch_size", "img_size", "grid_size", "num_patches", "flatten", "output_fmt",
                     "dynamic_img_pad", "strict_img_size", "dynamic_img_size"):
            if hasattr(original, attr):
                setattr(self, attr, getattr(original, attr))

    def feat_ratio(self, as_scalar: bool = True) -> int | tuple[int, int]:
        return max(self.patch_size) if as_scalar else self.patch_size

    def dynamic_feat_size(self, img_size: tuple[int, int]) -> tuple[int, int]:
        return img_size[0] // self.patch_size[0], img_size[1] // self.patch_size[1]

    def forward(self, x: Tensor | tuple[Tensor, Tensor | None]) -> Tensor:
        hb, wb = _block_grid(x, "this model")
        p = self.patch_size[0]
        img = getattr(self, "img_size", None)
        if img is not None and getattr(self, "strict_img_size", True):
            if (8 * hb, 8 * wb) != tuple(img):
                raise _grid_error("this model", tuple(img), (hb, wb), p)
        elif (8 * hb) % self.patch_size[0] or (8 * wb) % self.patch_size[1]:
            # a conv would pad with normalised zeros (the mean colour): no block-grid equivalent
            raise ValueError(f"this model's {self.patch_size[0]}x{self.patch_size[1]} patches need a pixel size that "
                             f"they divide; got a {hb}x{wb} block grid ({8 * hb}x{8 * wb} pixels)")
        x = self.proj(x)                                                         # (B, C, H, W)
        fmt = getattr(getattr(self, "output_fmt", "NCHW"), "value", getattr(self, "output_fmt", "NCHW"))
        if getattr(self, "flatten", False) or fmt == "NLC":
            x = x.flatten(2).transpose(1, 2)
        elif fmt == "NHWC":
            x = x.permute(0, 2, 3, 1)
        elif fmt == "NCL":
            x = x.flatten(2)
        return self.norm(x)


def _torchvision_vit_process_input(self, x):
    """``VisionTransformer._process_input`` for coefficient input: DCT stem → tokens, after the
    size check torchvision makes on pixels (here on the block grid, as a ValueError)."""
    hb, wb = _block_grid(x, "this model")
    if (8 * hb, 8 * wb) != (self.image_size, self.image_size):
        raise _grid_error("this model", (self.image_size, self.image_size), (hb, wb), self.patch_size)
    x = self.conv_proj(x)
    n, c, h, w = x.shape
    return x.reshape(n, c, h * w).permute(0, 2, 1)


_DCT_MODULES = (DCTPatchEmbed, DCTToRGB, ResNetDCTStem, _TimmDCTPatchEmbed)


def _existing_stem(model: nn.Module) -> str | None:
    for name, m in model.named_modules():
        if isinstance(m, _DCT_MODULES):
            return f"{type(m).__name__} at {name or 'the top level'}"
    return None


def _first_conv(model: nn.Module) -> tuple[str, nn.Module]:
    """Name and module of the layer the input meets first: torchvision ViT's ``conv_proj``;
    timm's ``pretrained_cfg["first_conv"]`` (a conv, or the first conv inside it); else the first
    3-channel ``nn.Conv2d`` in module (definition) order."""
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


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def swap_stem(model: nn.Module, *, stem: str = "exact", chroma: str = "upsampled",
              chroma_factor: tuple[int, int] = (2, 2), keep: int | str | Sequence[int] | None = None,
              mean: Sequence[float] | None = None, std: Sequence[float] | None = None) -> nn.Module:
    """Replace the first layer of ``model`` (in place) so it takes DCT coefficients; returns the model.

    Args:
        model: an RGB torchvision or timm classifier (any family with a conv first layer: ViT,
            Swin, ConvNeXt, ResNet, EfficientNet, MobileNetV3, RegNet, ...), in any dtype/device.
        stem: ``"exact"`` (default): the converted patch embedding where the first conv is
            block-aligned, the IDCT stem otherwise (module docstring) — the RGB model's logits.
            ``"dct8"`` / ``"dct-up"``: learned stems, torchvision ResNets only.
        chroma, chroma_factor: ``"native"`` feeds ``(y, c)`` with chroma at its own resolution
            (patch embeddings of size ≥ 8 only; see :class:`DCTPatchEmbed`).
        keep: frequencies used (:func:`dctnet.nn.frequency_index`); exact when the rest are zero.
        mean, std: the RGB normalisation (``rgb`` in [0, 1]) the model was trained with, folded into
            the stem. Default :func:`dctnet.nn.input_mean_std` of ``model``: timm's
            ``pretrained_cfg``, else ImageNet's — the same rule as ``dctnet.transforms.ToRGB.for_model``.

    Raises:
        ValueError: the model already has a DCT stem, or the options do not fit it.
        TypeError: no supported first layer.
    """
    found = _existing_stem(model)
    if found:
        raise ValueError(f"{type(model).__name__} already has a DCT stem ({found}); swap_stem converts an RGB model "
                         "once — call it on a fresh model (or one with its RGB weights reloaded)")
    if stem not in ("exact", "dct8", "dct-up"):
        raise ValueError(f"stem must be 'exact', 'dct8' or 'dct-up', not {stem!r}")
    if stem != "exact":
        if not _is_resnet(model):
            raise ValueError(f"learned stems ({stem!r}) are for torchvision ResNets; {type(model).__name__} takes "
                             "stem='exact'")
        return _learned_resnet_stem(model, stem, keep)
    if getattr(model, "transform_input", False):  # torchvision Inception / GoogLeNet re-normalise in forward
        raise TypeError(f"{type(model).__name__} was built with transform_input=True: it changes its input before "
                        "the first conv; build it with transform_input=False")
    default_mean, default_std = input_mean_std(model)
    mean = tuple(float(v) for v in mean) if mean is not None else default_mean
    std = tuple(float(v) for v in std) if std is not None else default_std
    name, conv = _first_conv(model)
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
        model.conv_proj = new
        model._process_input = types.MethodType(_torchvision_vit_process_input, model)
    elif child == "proj" and _is_timm_patch_embed(parent):
        _set_module(model, parent_name, _TimmDCTPatchEmbed(parent, new))
    elif child == "proj" and hasattr(parent, "strict_img_size"):
        raise TypeError(f"swap_stem: {type(parent).__name__} ({parent_name}) is a patch embedding dctnet has no "
                        "wrapper for")
    else:
        _set_module(model, name, new)
    model.dctnet_stem = kind
    model.dctnet_mean_std = (mean, std)
    return model


def _learned_resnet_stem(model: nn.Module, stem: str, keep: int | str | Sequence[int] | None) -> nn.Module:
    if stem == "dct-up":
        model.conv1 = ResNetDCTStem(model.conv1.out_channels, "dct-up", keep)
        model.bn1, model.relu, model.maxpool = nn.Identity(), nn.Identity(), nn.Identity()
    else:
        first = model.layer2[0]
        in_ch = first.conv1.in_channels
        model.conv1 = ResNetDCTStem(in_ch, "dct8", keep)
        model.bn1, model.relu, model.maxpool, model.layer1 = nn.Identity(), nn.Identity(), nn.Identity(), nn.Identity()
        # already at 1/8: layer2 keeps its resolution instead of halving it
        for m in (first.conv1, getattr(first, "conv2", None)):
            if m is not None and m.stride != (1, 1):
                m.stride = (1, 1)
        if first.downsample is not None:
            first.downsample[0].stride = (1, 1)
    model.dctnet_stem = stem
    return model


def stem_modules(model: nn.Module) -> list[nn.Module]:
    """The modules swap_stem put in (for learning-rate groups): each :class:`DCTPatchEmbed`,
    :class:`ResNetDCTStem` and :class:`IDCTStem` (with the original conv it wraps)."""
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


def param_groups(model: nn.Module, lr: float, *, stem_lr_mult: float = 0.1, weight_decay: float = 0.0,
                 decay_norms_and_biases: bool = True) -> list[dict]:
    """Optimizer groups: the DCT stem at ``lr · stem_lr_mult`` (the literature uses 0.1–0.2, as
    coefficient inputs have a much wider dynamic range than normalised pixels), the rest at ``lr``.

    ``decay_norms_and_biases=False`` exempts 1-d parameters (biases, norm scales) and ViT tokens /
    position embeddings from weight decay, the usual practice. A model without a dctnet stem gets
    no stem group. Empty groups are left out; with the defaults the groups are ``[rest, stem]``."""
    try:
        stem_ids = {id(p) for m in stem_modules(model) for p in m.parameters()}
    except ValueError:
        stem_ids = set()
    tokens = ("pos_embed", "cls_token", "class_token", "pos_embedding")
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {(False, True): [], (True, True): [], (False, False): [],
                                                           (True, False): []}
    for name, p in model.named_parameters():
        if p.requires_grad:
            decay = decay_norms_and_biases or (p.dim() > 1 and not any(t in name for t in tokens))
            groups[(id(p) in stem_ids, decay)].append(p)
    return [{"params": ps, "lr": lr * (stem_lr_mult if is_stem else 1.0), "weight_decay": weight_decay if decay else 0.0}
            for (is_stem, decay), ps in groups.items() if ps]


def count_flops(module: nn.Module, *inputs: object) -> int:
    """Floating-point operations of one forward pass (torch's FlopCounterMode: 2 per MAC)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        module(*inputs)
    return int(counter.get_total_flops())

