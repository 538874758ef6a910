"""Swapping the first layer of torchvision / timm models for one that eats DCT coefficients.

- ViTs (torchvision ``vit_*``: ``conv_proj``; timm ``VisionTransformer``: ``patch_embed.proj``): the
  patch embedding is converted exactly (:class:`DCTPatchEmbed.from_conv`) — same logits, no IDCT.
- torchvision ResNets: ``stem="exact"`` keeps the original conv and feeds it the device-side
  RGB reconstruction (block IDCT + colour + normalisation); ``stem="dct8"`` (Gueguen et al. 2018
  style) projects the 192 coefficients of each 8×8 block with a 1×1 conv straight into the
  1/8-resolution stage, skipping conv1, max-pool and layer1; ``stem="dct-up"`` projects them to
  4× the channels of layer1's input and pixel-shuffles to 1/4 resolution, feeding layer1
  unchanged. Learned stems start from a spatial Kaiming init transformed to the DCT domain.

Every swapped model takes a coefficient image ``(B, 3, Hb, Wb, 64)``
(:func:`dctnet.transforms.crops_to_coefficients`); ViTs with ``chroma="native"`` take ``(y, c)``.
"""

from __future__ import annotations

import types
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from dctnet import functional as F
from dctnet.nn.patch_embed import DCTPatchEmbed, frequency_index
from dctnet.transforms.augment import IMAGENET_MEAN, IMAGENET_STD

__all__ = ["DCTToRGB", "ResNetDCTStem", "count_flops", "param_groups", "stem_modules", "swap_stem"]



class DCTToRGB(nn.Module):
    """Coefficient image → normalised RGB ``(B, 3, H, W)``: ``((rgb/255) − mean)/std`` (no clamp,
    so the map is affine and exact against ``model(normalize(to_rgb(...)))`` on in-range images)."""

    def __init__(self, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).reshape(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).reshape(1, 3, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[1] == 1:
            x = torch.cat([x, x.new_zeros(x.shape[0], 2, *x.shape[2:])], dim=1)
        rgb = F.ycbcr_to_rgb(F.block_idct(x.to(self.mean.dtype)) + 128.0, dim=1) / 255.0
        return (rgb - self.mean) / self.std


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


def _is_timm_vit(model: nn.Module) -> bool:
    pe = getattr(model, "patch_embed", None)
    return pe is not None and isinstance(getattr(pe, "proj", None), nn.Conv2d)


def _is_resnet(model: nn.Module) -> bool:
    return all(hasattr(model, n) for n in ("conv1", "bn1", "maxpool", "layer1", "layer2", "fc"))


class _TimmDCTPatchEmbed(nn.Module):
    """timm's PatchEmbed interface around a DCTPatchEmbed (tokens ``(B, N, C)`` + the original norm)."""

    def __init__(self, original: nn.Module, embed: DCTPatchEmbed) -> None:
        super().__init__()
        self.proj = embed
        self.norm = original.norm
        for attr in ("patch_size", "img_size", "grid_size", "num_patches", "flatten", "output_fmt",
                     "dynamic_img_pad", "strict_img_size"):
            if hasattr(original, attr):
                setattr(self, attr, getattr(original, attr))
        self.dynamic_img_size = False

    def forward(self, x):
        x = self.proj(x)
        if getattr(self, "flatten", True):
            x = x.flatten(2).transpose(1, 2)
        return self.norm(x)


def _torchvision_vit_process_input(self, x):
    """``VisionTransformer._process_input`` for coefficient input: DCT patch embedding → tokens."""
    x = self.conv_proj(x)
    n, c, h, w = x.shape
    return x.reshape(n, c, h * w).permute(0, 2, 1)


def swap_stem(model: nn.Module, *, stem: str = "exact", chroma: str = "upsampled",
              chroma_factor: tuple[int, int] = (2, 2), keep: int | str | Sequence[int] | None = None,
              mean: Sequence[float] | None = None, std: Sequence[float] | None = None) -> nn.Module:
    """Replace the first layer of ``model`` (in place) so it takes DCT coefficients.

    ViTs: the patch embedding is converted exactly (``chroma``, ``chroma_factor`` and ``keep`` as
    for :class:`DCTPatchEmbed`; ``mean``/``std`` default to the model's: timm's ``pretrained_cfg``,
    ImageNet's for torchvision). ResNets: ``stem="exact" | "dct8" | "dct-up"`` (module docstring).
    Returns the model.
    """
    if _is_torchvision_vit(model):
        embed = DCTPatchEmbed.from_conv(model.conv_proj, mean or IMAGENET_MEAN, std or IMAGENET_STD,
                                        chroma=chroma, chroma_factor=chroma_factor, keep=keep)
        model.conv_proj = embed
        model._process_input = types.MethodType(_torchvision_vit_process_input, model)
        model.dctnet_stem = "dct-patch"
        return model
    if _is_timm_vit(model):
        cfg = getattr(model, "pretrained_cfg", None) or {}
        embed = DCTPatchEmbed.from_conv(model.patch_embed.proj, mean or cfg.get("mean", IMAGENET_MEAN),
                                        std or cfg.get("std", IMAGENET_STD), chroma=chroma,
                                        chroma_factor=chroma_factor, keep=keep)
        model.patch_embed = _TimmDCTPatchEmbed(model.patch_embed, embed)
        model.dctnet_stem = "dct-patch"
        return model
    if _is_resnet(model):
        if stem == "exact":
            model.conv1 = nn.Sequential(DCTToRGB(mean or IMAGENET_MEAN, std or IMAGENET_STD), model.conv1)
        elif stem == "dct-up":
            model.conv1 = ResNetDCTStem(model.conv1.out_channels, "dct-up", keep)
            model.bn1, model.relu, model.maxpool = nn.Identity(), nn.Identity(), nn.Identity()
        elif stem == "dct8":
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
        else:
            raise ValueError(f"ResNet stem must be 'exact', 'dct8' or 'dct-up', not {stem!r}")
        model.dctnet_stem = stem
        return model
    raise TypeError(f"swap_stem supports torchvision ViT/ResNet and timm VisionTransformer, not {type(model).__name__}")


def stem_modules(model: nn.Module) -> list[nn.Module]:
    """The modules swap_stem put in (for learning-rate groups)."""
    if isinstance(getattr(model, "conv_proj", None), DCTPatchEmbed):
        return [model.conv_proj]
    if isinstance(getattr(model, "patch_embed", None), _TimmDCTPatchEmbed):
        return [model.patch_embed.proj]
    if _is_resnet(model) and isinstance(model.conv1, (ResNetDCTStem, nn.Sequential)):
        return [model.conv1]
    raise ValueError("model has no dctnet stem (call swap_stem first)")


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

