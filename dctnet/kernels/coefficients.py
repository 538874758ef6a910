r"""DCT-domain augmentation kernels: pure functions of (batch, per-sample parameters).

The tensor every kernel here takes is a *coefficient image* ``x (B, 3, Hb, Wb, 64)``, float:
channels Y, Cb, Cr all on the luma block grid ("4:4:4"), each block the orthonormal DCT of the
level-shifted samples ``(s − 128)``, natural order ``k = 8v + u``. Parameters are
tensors with one entry per sample (drawn on the host by the classes in
:mod:`dctnet.transforms.base`); kernels are batched torch with no Python loop over samples or
blocks, and are exact against the pixel-domain operation unless a docstring says otherwise
(the identities, pixel domain → DCT domain):

- flips reverse the block grid and negate odd frequencies: ``F'[v,u] = (−1)^u F[v,u]``;
- transpose swaps grid axes and transposes each 8×8 block; rot90 = transpose ∘ flip;
- brightness ``b``: everything × b, Y's DC += 8·128·(b − 1);
- contrast ``c`` towards the mean grey ``m``: Y's AC × c, Y's DC' = c·DC + (1 − c)·8·(m − 128),
  chroma × c; saturation ``s``: chroma × s — torchvision's ops up to its final clamp to [0, 1];
- mixing is linear and CutMix / erasing with block-aligned boxes are exact (their kernels live
  with the transforms, :mod:`dctnet.transforms.mixing` and :mod:`dctnet.transforms.erasing`, which
  work on pixels and coefficients alike);
- requantization ``round(F/Q)·Q`` simulates re-encoding at a coarser table exactly.
"""

from __future__ import annotations

import torch
from torch import Tensor

from dctnet.kernels.color import rgb_to_ycbcr, ycbcr_to_rgb
from dctnet.kernels.dct import ZIGZAG, block_dct, block_idct
from dctnet.quality import IJG_STD_TABLES

__all__ = [
    "adjust_brightness", "adjust_contrast", "adjust_saturation", "coefficient_image_from_rgb",
    "coefficient_image_to_rgb", "flip_blocks", "frequency_dropout", "grayscale", "hflip",
    "ijg_tables", "normalize", "requantize", "rotate_chroma", "select_frequencies", "square_indices", "transpose",
    "transpose_blocks", "vflip", "zigzag_first",
]

_DC_SHIFT = 8.0 * 128.0  # a constant block of level s has DC 8·(s − 128): scaling s by b adds 8·128·(b − 1)


def flip_blocks(x: Tensor, axis: int) -> Tensor:
    """Mirror blocks ``(..., Hb, Wb, 64)`` along a block axis (``-2``: left–right, ``-3``:
    top–bottom), exactly: reverse the blocks and negate the frequencies that are odd in that
    direction (a mirrored 8×8 DCT-II basis function of odd order changes sign)."""
    if axis not in (-2, -3):
        raise ValueError(f"axis must be -2 (columns) or -3 (rows), got {axis}")
    k = torch.arange(64, device=x.device)
    freq = k % 8 if axis == -2 else k // 8
    return x.flip(axis) * (1 - 2 * (freq % 2)).to(x.dtype)


def transpose_blocks(x: Tensor) -> Tensor:
    """Transpose blocks ``(..., Hb, Wb, 64)`` → ``(..., Wb, Hb, 64)``: swap the grid axes and
    transpose every 8×8 block (coefficient ``(v, u)`` becomes ``(u, v)``). Exact."""
    *lead, hb, wb, _ = x.shape
    return x.transpose(-3, -2).reshape(*lead, wb, hb, 8, 8).transpose(-1, -2).reshape(*lead, wb, hb, 64)


def _select(mask: Tensor | None, new: Tensor, old: Tensor) -> Tensor:
    if mask is None:
        return new
    return torch.where(mask.reshape(-1, *([1] * (old.dim() - 1))), new, old)


def hflip(x: Tensor, mask: Tensor | None = None) -> Tensor:
    """Horizontal flip of the samples where ``mask (B,)`` is True (all if None). Exact."""
    return _select(mask, flip_blocks(x, -2), x)


def vflip(x: Tensor, mask: Tensor | None = None) -> Tensor:
    """Vertical flip. Exact."""
    return _select(mask, flip_blocks(x, -3), x)


def transpose(x: Tensor, mask: Tensor | None = None) -> Tensor:
    """Swap image rows and columns (needs a square block grid when ``mask`` is given). Exact."""
    t = transpose_blocks(x)
    return _select(mask, t, x) if mask is not None else t


def adjust_brightness(x: Tensor, factor: Tensor) -> Tensor:
    """RGB × ``factor (B,)``: every coefficient × b, Y's DC += 8·128·(b − 1)."""
    f = factor.to(x.dtype).reshape(-1, 1, 1, 1, 1)
    out = x * f
    out[:, 0, ..., 0] += _DC_SHIFT * (f[:, 0, ..., 0] - 1.0)
    return out


def adjust_contrast(x: Tensor, factor: Tensor) -> Tensor:
    """torchvision's ``adjust_contrast``: blend with the image's mean grey level.

    The mean grey is the mean of Y (DC / 8 + 128 averaged over blocks) — torchvision uses
    ``0.2989 R + 0.587 G + 0.114 B``, JFIF's Y uses 0.299/0.587/0.114 (≤ 0.03 grey levels apart)."""
    c = factor.to(x.dtype).reshape(-1, 1, 1, 1)
    mean_dc = x[:, 0, :, :, 0].mean(dim=(-2, -1)).reshape(-1, 1, 1)         # 8·(m − 128)
    out = x * c.unsqueeze(-1)
    out[:, 0, ..., 0] += (1.0 - c[:, 0]) * mean_dc
    return out


def adjust_saturation(x: Tensor, factor: Tensor) -> Tensor:
    """torchvision's ``adjust_saturation`` (blend with grey): chroma × ``factor (B,)``."""
    out = x.clone()
    out[:, 1:] *= factor.to(x.dtype).reshape(-1, 1, 1, 1, 1)
    return out


def grayscale(x: Tensor, mask: Tensor | None = None) -> Tensor:
    """Grayscale of a coefficient image: chroma zeroed (grey RGB with R = G = B = Y) where ``mask`` is True."""
    gray = x.clone()
    gray[:, 1:] = 0
    return _select(mask, gray, x)


def rotate_chroma(x: Tensor, angle: Tensor) -> Tensor:
    """Rotate the (Cb, Cr) plane by ``angle (B,)`` radians: a linear hue-like shift.

    This is *not* torchvision's ``adjust_hue`` (an HSV operation, nonlinear per pixel); it keeps
    luma and chroma magnitude exactly and is exact in the DCT domain."""
    cos = torch.cos(angle).to(x.dtype).reshape(-1, 1, 1, 1)
    sin = torch.sin(angle).to(x.dtype).reshape(-1, 1, 1, 1)
    cb, cr = x[:, 1], x[:, 2]
    return torch.stack([x[:, 0], cos * cb - sin * cr, sin * cb + cos * cr], dim=1)


def ijg_tables(quality: Tensor) -> Tensor:
    """libjpeg's (IJG) quantization tables for ``quality (B,)`` in 1..100: ``(B, 3, 64)``
    (luma table for Y, chroma table for Cb and Cr), natural order, entries clamped to 1..255."""
    q = quality.to(torch.float64).clamp(1, 100)
    scale = torch.where(q < 50, 5000.0 / q, 200.0 - 2.0 * q)[:, None, None]
    std = torch.from_numpy(IJG_STD_TABLES).to(quality.device, torch.float64, non_blocking=True)  # a blocking copy waits
    t = torch.floor((std[None] * scale + 50.0) / 100.0).clamp(1, 255)
    return t[:, [0, 1, 1]]


def requantize(x: Tensor, tables: Tensor) -> Tensor:
    """``round(F / Q)·Q`` with per-sample tables ``(B, 3, 64)`` (see :func:`ijg_tables`): the
    coefficients a JPEG encoder at that table would store, i.e. JPEG re-compression. Exact."""
    q = tables.to(x.dtype)[:, :, None, None, :]
    return torch.round(x / q) * q


def frequency_dropout(x: Tensor, keep: Tensor) -> Tensor:
    """Zero the frequencies where ``keep (B, 64)`` (or ``(B, 3, 64)``) is False."""
    k = keep.to(x.dtype)
    k = k[:, None, None, None, :] if k.dim() == 2 else k[:, :, None, None, :]
    return x * k


def normalize(x: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """Per-(channel, frequency) standardisation: ``(x − mean) / std`` with ``(3, 64)`` statistics."""
    return (x - mean.to(x)[None, :, None, None, :]) / std.to(x)[None, :, None, None, :]


def select_frequencies(x: Tensor, index: Tensor) -> Tensor:
    """Keep the coefficients listed in ``index (K,)`` (natural order): ``(..., 64) -> (..., K)``."""
    return x.index_select(-1, index.to(x.device, non_blocking=True))  # a host index: copied without waiting


def coefficient_image_to_rgb(x: Tensor, *, clamp: bool = True) -> Tensor:
    """Coefficient image ``(B, 3, Hb, Wb, 64)`` (or ``(B, 1, ...)`` grayscale: zero chroma) → float
    RGB ``(B, 3, 8·Hb, 8·Wb)`` on the 0..1 scale: block IDCT, +128, JFIF's YCbCr → RGB, /255.

    ``clamp=True`` clips to [0, 1] as a decoder does (transforms, plan A). ``clamp=False`` keeps the
    map affine — what converted stems need to give the RGB model's logits exactly (on in-range
    images the two agree)."""
    if x.shape[1] == 1:
        x = torch.cat([x, x.new_zeros(x.shape[0], 2, *x.shape[2:])], dim=1)
    rgb = ycbcr_to_rgb(block_idct(x) + 128.0, dim=1)
    return (rgb.clamp(0.0, 255.0) if clamp else rgb) / 255.0



def coefficient_image_from_rgb(rgb: Tensor) -> Tensor:
    """Float RGB ``(B, 3, H, W)`` in [0, 1] (H, W multiples of 8) → coefficient image."""
    ycc = rgb_to_ycbcr(rgb * 255.0, dim=1) - 128.0
    return block_dct(ycc)


def square_indices(k: int) -> Tensor:
    """Natural indices of the top-left ``k×k`` frequencies."""
    return torch.tensor([8 * v + u for v in range(k) for u in range(k)], dtype=torch.long)


def zigzag_first(k: int) -> Tensor:
    """Natural indices of the first ``k`` frequencies in zigzag order."""
    return torch.tensor(ZIGZAG[:k], dtype=torch.long)
