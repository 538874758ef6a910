"""Stems that take DCT coefficients: the IDCT stem and the learned ResNet stems.

- :class:`DCTToRGB` rebuilds normalised RGB from a coefficient image on the device (block IDCT,
  JFIF colour, ``(rgb − mean)/std``). Every step is affine and nothing is clamped, so
  :class:`IDCTStem` — ``DCTToRGB`` followed by a model's original first conv — gives exactly what
  the conv gives on the decoded, normalised pixels, for any first conv (ResNet's 7×7/2, the 3×3/2
  of EfficientNet, MobileNetV3 and RegNet, a patch-14 ViT), at the cost of the reconstruction.
- :class:`ResNetDCTStem` is a learned stem (trained, never converted) for torchvision ResNets,
  Gueguen et al. 2018 style: ``mode="dct8"`` projects the 192 coefficients of each 8×8 block with
  a 1×1 conv straight into the 1/8-resolution stage (skipping conv1, max-pool and layer1);
  ``mode="dct-up"`` projects them to 4× the channels of layer1's input and pixel-shuffles to 1/4
  resolution, feeding layer1 unchanged. Both start from a spatial Kaiming init transformed to the
  DCT domain (:meth:`ResNetDCTStem.init_from_spatial`).

Inputs are coefficient images ``(B, 3, Hb, Wb, 64)`` (:func:`dctnet.transforms.crops_to_coefficients`),
or ``(B, 1, Hb, Wb, 64)`` for grayscale. Putting them into a model is
:func:`dctnet.models.swap_stem`'s job.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from dctnet.kernels import dct as F
from dctnet.nn.patch_embed import frequency_index
from dctnet.kernels import coefficients as TF
from dctnet.kernels.normalization import IMAGENET_MEAN, IMAGENET_STD

__all__ = ["DCTToRGB", "IDCTStem", "MosaicToCoefficients", "ResNetDCTStem"]


def _autocast_off(device_type: str) -> contextlib.AbstractContextManager:
    """Autocast disabled on ``device_type`` (a no-op where autocast does not exist, e.g. ``meta``)."""
    if torch.amp.is_autocast_available(device_type):
        return torch.autocast(device_type=device_type, enabled=False)
    return contextlib.nullcontext()


class MosaicToCoefficients(nn.Module):
    """Coefficient mosaics ``(B, C, H, W)`` (:func:`dctnet.kernels.dct.coefficient_mosaic`, H and W
    multiples of 8) → the coefficient image ``(B, C, H/8, W/8, 64)`` the stems take. Zero padding
    of a mosaic (a detector batching mosaics of several sizes) is zero coefficients: mid-grey blocks."""

    def forward(self, x: Tensor) -> Tensor:
        return F.mosaic_coefficients(x)


class DCTToRGB(nn.Module):
    """Coefficient image ``(B, 3, Hb, Wb, 64)`` (or ``(B, 1, ...)`` grayscale) → normalised RGB
    ``(B, 3, 8·Hb, 8·Wb)``: ``((rgb/255) − mean)/std`` with no clamp, so the map is affine and exact
    against ``model(normalize(to_rgb(...)))`` on in-range images. ``keep`` zeroes the other
    frequencies first (:func:`dctnet.nn.frequency_index`), the IDCT-stem analogue of a patch
    embedding's dropped columns. Runs in the buffers' dtype (float32; ``model.double()`` makes it
    float64) with autocast off, so a bf16/fp16 autocast does not round the reconstruction."""

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
        # Under the caller's autocast the IDCT matmul would run in bf16/fp16 (bf16: errors of a few
        # grey levels) and the stem would no longer be the exact conversion it claims.
        # It runs in the buffers' dtype with autocast off; the first conv after it (IDCTStem[1])
        # stays under the caller's autocast, as it was in the RGB model.
        with _autocast_off(x.device.type):
            x = x.to(self.mean.dtype)
            if self.mask is not None:
                x = x * self.mask
            return (TF.coefficient_image_to_rgb(x, clamp=False) - self.mean) / self.std


class IDCTStem(nn.Sequential):
    """The converted stem for a first conv that is not block-aligned: :class:`DCTToRGB` (device
    IDCT, colour, normalisation), then the model's original first layer ``conv``, unchanged (its
    state_dict keys become ``<name>.1.*``). Input ``(B, 3, Hb, Wb, 64)``; output exactly what
    ``conv`` gives on the ``(B, 3, 8·Hb, 8·Wb)`` normalised pixels."""

    def __init__(self, conv: nn.Module, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
                 keep: int | str | Sequence[int] | None = None) -> None:
        super().__init__(DCTToRGB(mean, std, keep), conv)


class ResNetDCTStem(nn.Module):
    """Learned DCT stem for a torchvision ResNet (module docstring: where each mode feeds in).

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
