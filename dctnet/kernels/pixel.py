r"""Pixel-domain augmentation kernels: torchvision's float-image ops, batched with per-sample parameters.

Every kernel takes ``img (n, 3, H, W)``, float RGB on the [0, 1] scale (float32 or float64;
float16 / bfloat16 are computed in float32 and cast back), and per-sample parameters as tensors
of shape ``(n,)`` (``(n, 2)``, ``(n, 3)``, ``(n, 2, 3)`` where stated; a Python number or a
0-d tensor is shared by the batch) on any device: they are moved to ``img``'s device and dtype
inside, with ``non_blocking=True``. Outputs have ``img``'s shape and dtype. Parameter ranges are
not checked (that would read tensors on the host).

Conventions:

- **Reference.** Each kernel equals ``torchvision.transforms.v2.functional.<op>_image`` on a float
  image in [0, 1], applied sample by sample with that sample's parameter, up to float rounding
  (the tolerances are stated and tested in ``tests/test_pixel_ops.py``). torchvision's own
  discretisations are kept: ``equalize`` goes through uint8, ``posterize`` floors ``x·2^bits``,
  nearest-neighbour warps round half to even.
- **Clamping.** As torchvision does on float images: ``brightness``, ``contrast``,
  ``saturation``, ``sharpness`` (its blends) and ``autocontrast`` clamp to [0, 1]; the other ops
  stay in range by construction (``bicubic`` warps, which torchvision does not offer, clamp).
- **Batched, no host sync.** No Python loop over samples or pixels, no ``.item()``, no branch on
  tensor values: the aten op count does not depend on the batch size. The kernels run on the CPU
  or CUDA and under autocast, which does not change their results: they use none of the ops
  autocast runs in half precision — blurs are shifted multiply-adds rather than convolutions,
  and the sampling grid is built elementwise rather than by a matmul (which TF32 would also
  round to 10 mantissa bits).
- **timm.** timm's ``auto_augment`` ops act on uint8 PIL images; :func:`solarize_add` is its op on
  the [0, 1] scale.

The geometric ops (affine, rotate, and PIL's affine matrices for timm's) are
:mod:`dctnet.kernels.geometry`, under the same conventions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as nnf
from torch import Tensor

from dctnet.kernels.cache import constant, plain_eager

__all__ = [
    "adjust_brightness", "adjust_contrast", "adjust_hue", "adjust_saturation", "adjust_sharpness", "autocontrast",
    "equalize", "gaussian_blur", "invert", "posterize", "rgb_to_grayscale", "smooth_interior", "solarize",
    "solarize_add",
]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def as_compute_dtype(img: Tensor) -> Tensor:
    """``img`` in the dtype the kernels compute in: float32 for half types, else as given."""
    if not img.is_floating_point():
        raise TypeError(f"expected a float image on the [0, 1] scale, got {img.dtype}")
    if img.dim() != 4:
        raise ValueError(f"expected img (n, C, H, W), got shape {tuple(img.shape)}")
    return img.float() if img.dtype in _LOW_PRECISION else img


def as_tensor(p: Tensor | float | Sequence[float]) -> Tensor:
    """``p`` as a tensor; Python numbers become float64 (not float32: 0.3 must stay 0.3)."""
    return p if isinstance(p, Tensor) else torch.as_tensor(p, dtype=torch.float64)


def _sum(terms) -> Tensor:
    """Sum of tensors, left to right, without Python's ``sum`` adding them to a leading 0."""
    it = iter(terms)
    total = next(it)
    for t in it:
        total = total + t
    return total


def per_sample(p: Tensor | float, x: Tensor, *, ndim: int = 4) -> Tensor:
    """A per-sample parameter ``(n,)`` (or a shared scalar) on ``x``'s device and dtype, shaped
    ``(n or 1, 1, …)`` with ``ndim`` dims so that it broadcasts against ``x``."""
    t = as_tensor(p).to(device=x.device, dtype=x.dtype, non_blocking=True)
    if t.dim() > 1:
        raise ValueError(f"expected a per-sample parameter of shape (n,), got {tuple(t.shape)}")
    return t.reshape(-1, *([1] * (ndim - 1)))


def blend(img1: Tensor, img2: Tensor, ratio: Tensor) -> Tensor:
    """torchvision's ``_blend`` on floats: ``ratio·img1 + (1 − ratio)·img2``, clamped to [0, 1]."""
    return (img1 * ratio + img2 * (1.0 - ratio)).clamp_(0.0, 1.0)


def gray(x: Tensor) -> Tensor:
    """``(n, 1, H, W)`` luma with torchvision's weights (ITU-R 601 rounded: 0.2989, 0.587, 0.114),
    summed in torchvision's order so that the rounding matches too."""
    r, g, b = x.unbind(dim=-3)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(-3)


# -- point ops ------------------------------------------------------------------------------------------------------


def invert(img: Tensor) -> Tensor:
    """``1 − x`` per value: torchvision's ``invert`` on float images."""
    return 1.0 - img


def posterize(img: Tensor, bits: Tensor) -> Tensor:
    """Keep ``bits (n,)`` (integers 0..8) bits per channel, torchvision's float rule:
    ``floor(x·2^b)`` clamped to ``0..2^b − 1``, times ``2^−b``.

    This is *not* uint8 posterization carried to [0, 1] (``(i & mask)/255``): the levels are
    ``k/2^b`` rather than ``k·2^(8−b)/255``, and ``b = 8`` is not the identity (``x → ⌊256x⌋/256``,
    up to one grey level off) — torchvision's float kernel does exactly this."""
    x = as_compute_dtype(img)
    levels = torch.exp2(per_sample(bits, x))  # exact powers of two
    out = torch.minimum(x.mul(levels).floor_().clamp_min_(0.0), levels - 1.0).mul_(1.0 / levels)
    return out.to(img.dtype)


def solarize(img: Tensor, threshold: Tensor, *, inplace: bool = False) -> Tensor:
    """Invert the values ``x ≥ threshold``, ``x → 1 − x`` (``threshold (n,)`` on the [0, 1]
    scale): torchvision's ``solarize``. ``inplace``: written into ``img`` (a float32 image the caller
    owns; the same values).

    PIL's / timm's uint8 threshold ``t`` is ``t/255``. On images decoded as ``u8/255`` the
    comparison at ``x = t/255`` is exact only if ``t/255`` is rounded like the image's values:
    compute it in float64 or in the image's dtype (a float32 quotient cast to float64 misses)."""
    x = as_compute_dtype(img)
    t = per_sample(threshold, x)
    return torch.where(x >= t, 1.0 - x, x, out=_into(img, x, inplace)).to(img.dtype)


def solarize_add(img: Tensor, addition: Tensor, threshold: Tensor | float = 128 / 255, *,
                 inplace: bool = False) -> Tensor:
    """timm's ``solarize_add`` on the [0, 1] scale: values ``x < threshold`` become
    ``min(1, x + addition)``, the others stay (``addition (n,)``, ``threshold (n,)`` or shared;
    timm's uint8 ``add``, ``thresh`` are ``add/255``, ``thresh/255``; its default threshold is 128).
    ``inplace``: as :func:`solarize`'s."""
    x = as_compute_dtype(img)
    a, t = per_sample(addition, x), per_sample(threshold, x)
    return torch.where(x < t, (x + a).clamp_(max=1.0), x, out=_into(img, x, inplace)).to(img.dtype)


def _into(img: Tensor, x: Tensor, inplace: bool) -> Tensor | None:
    """Where an elementwise kernel of ``x = as_compute_dtype(img)`` may write its result: ``img`` itself when the
    caller allows it and ``x`` is ``img`` (no dtype copy) and no gradient or trace forbids ``out=``."""
    return img if inplace and x is img and plain_eager(img) else None


def rgb_to_grayscale(img: Tensor) -> Tensor:
    """torchvision's ``rgb_to_grayscale(num_output_channels=3)``: ``0.2989 R + 0.587 G + 0.114 B``
    in all three channels (a new contiguous tensor, not an expanded view)."""
    x = as_compute_dtype(img)
    return gray(x).expand_as(x).to(img.dtype, copy=True)


def adjust_brightness(img: Tensor, factor: Tensor) -> Tensor:
    """``x·factor`` clamped to [0, 1] (``factor (n,)`` ≥ 0): torchvision's ``adjust_brightness``."""
    x = as_compute_dtype(img)
    return (x * per_sample(factor, x)).clamp_(0.0, 1.0).to(img.dtype)


def adjust_saturation(img: Tensor, factor: Tensor) -> Tensor:
    """Blend with the image's own grey (``rgb_to_grayscale``): ``f·x + (1 − f)·gray``, clamped
    (``factor (n,)`` ≥ 0; 0 = grey, 1 = unchanged): torchvision's ``adjust_saturation``."""
    x = as_compute_dtype(img)
    return blend(x, gray(x), per_sample(factor, x)).to(img.dtype)


def adjust_contrast(img: Tensor, factor: Tensor, *, sizes: Tensor | None = None) -> Tensor:
    """Blend with the mean grey level ``m`` of the sample (mean of ``rgb_to_grayscale`` over the
    image): ``f·x + (1 − f)·m``, clamped (``factor (n,)`` ≥ 0): torchvision's ``adjust_contrast``.

    ``sizes (n, 2)``: each sample's image is its top-left ``(h, w)`` of a padded batch (detection's
    canvases): ``m`` is the mean over that canvas alone, not the batch's padding."""
    x = as_compute_dtype(img)
    return blend(x, _canvas_mean(gray(x), sizes), per_sample(factor, x)).to(img.dtype)


def _canvas_mean(g: Tensor, sizes: Tensor | None) -> Tensor:
    """The mean of ``g (n, 1, H, W)`` per sample ``(n, 1, 1, 1)``: over the whole image, or over each
    sample's top-left canvas ``sizes (n, 2)`` of a padded batch."""
    if sizes is None:
        return g.mean(dim=(-3, -2, -1), keepdim=True)
    s = sizes.to(g.device, non_blocking=True)
    rows = torch.arange(g.shape[-2], device=g.device)[None, :, None] < s[:, 0, None, None]
    cols = torch.arange(g.shape[-1], device=g.device)[None, None, :] < s[:, 1, None, None]
    inside = (rows & cols)[:, None].to(g.dtype)                                          # (n, 1, H, W)
    return (g * inside).sum(dim=(-3, -2, -1), keepdim=True) / inside.sum(dim=(-3, -2, -1), keepdim=True)


# -- torchvision's uint8 kernels --------------------------------------------------------------------------------------
# On 8-bit images (``uint8``, what Pillow's decode gives torchvision's reference pipelines) torchvision's colour ops
# compute in float32 and truncate each result to an integer level (``.to(uint8)``), and take the grey of contrast and
# saturation floored. These run the same maths on levels 0..255 held in a float tensor.


def to_levels(x: Tensor) -> Tensor:
    """An image in [0, 1] as the 8-bit levels of the uint8 image it stands for: ``round(255·x)``."""
    return x.mul(255.0).round_()


def from_levels(levels: Tensor) -> Tensor:
    """Levels 0..255 back in [0, 1]: torchvision's ``to_dtype(uint8 → float32, scale=True)``."""
    return levels.mul(1.0 / 255.0)


def _blend_levels(img1: Tensor, img2: Tensor, ratio: Tensor) -> Tensor:
    """torchvision's ``_blend`` on uint8: ``img1·r + img2·(1 − r)`` clamped to [0, 255], truncated."""
    return (img1 * ratio).add_(img2 * (1.0 - ratio)).clamp_(0.0, 255.0).trunc_()


def adjust_brightness_levels(levels: Tensor, factor: Tensor) -> Tensor:
    """torchvision's ``adjust_brightness`` on a uint8 image (as levels: :func:`to_levels`)."""
    return (levels * per_sample(factor, levels)).clamp_(0.0, 255.0).trunc_()


def adjust_saturation_levels(levels: Tensor, factor: Tensor) -> Tensor:
    """torchvision's ``adjust_saturation`` on a uint8 image: blend with its floored grey."""
    return _blend_levels(levels, gray(levels).floor_(), per_sample(factor, levels))


def adjust_contrast_levels(levels: Tensor, factor: Tensor, *, sizes: Tensor | None = None) -> Tensor:
    """torchvision's ``adjust_contrast`` on a uint8 image: blend with the mean of its floored grey
    (over each sample's canvas ``sizes (n, 2)`` of a padded batch, as :func:`adjust_contrast`)."""
    return _blend_levels(levels, _canvas_mean(gray(levels).floor_(), sizes), per_sample(factor, levels))


def adjust_hue_levels(levels: Tensor, hue_factor: Tensor) -> Tensor:
    """torchvision's ``adjust_hue`` on a uint8 image: to float (``/255``), the hue shift, back to
    uint8 as its ``to_dtype`` does (``·(255 + 1 − 10⁻³)``, truncated)."""
    return adjust_hue(from_levels(levels), hue_factor).mul_(256.0 - 1e-3).trunc_()


def smooth_interior(x: Tensor) -> Tensor:
    """The interior ``(n, C, H − 2, W − 2)`` of ``x (n, C, H, W)`` smoothed by torchvision's (and PIL's)
    sharpness kernel ``[[1, 1, 1], [1, 5, 1], [1, 1, 1]]/13``: the 3×3 sum ``·1/13`` plus the centre
    ``·4/13``. The sum is separable: three rows, then three columns, each a sum over an ``unfold``
    view (two kernels; immune to autocast and to cuDNN's TF32, which would round a ``conv2d``'s input
    to 10 mantissa bits; on a CPU ~10× cheaper than ``avg_pool2d``'s 3×3 window)."""
    box = x.unfold(-2, 3, 1).sum(-1).unfold(-1, 3, 1).sum(-1)
    return box.mul_(1.0 / 13.0).add_(x[..., 1:-1, 1:-1], alpha=4.0 / 13.0)


def adjust_sharpness(img: Tensor, factor: Tensor) -> Tensor:
    """torchvision's (and PIL's) ``adjust_sharpness``: blend with the image smoothed by the 3×3
    kernel ``[[1, 1, 1], [1, 5, 1], [1, 1, 1]]/13`` (:func:`smooth_interior`),
    ``f·x + (1 − f)·smooth`` on the interior, the one-pixel border unchanged; clamped
    (``factor (n,)`` ≥ 0; images with ``H`` or ``W`` ≤ 2 are returned as they are, as torchvision does)."""
    h, w = img.shape[-2:]
    if img.numel() == 0 or h <= 2 or w <= 2:
        return img
    x = as_compute_dtype(img)
    f = per_sample(factor, x)
    centre = x[..., 1:-1, 1:-1]
    smooth = smooth_interior(x)
    out = x.clone()
    # x + (1 − f)(smooth − x): torchvision's in-place form of the blend
    out[..., 1:-1, 1:-1] = centre + (1.0 - f) * (smooth - centre)
    return out.clamp_(0.0, 1.0).to(img.dtype)


def autocontrast(img: Tensor) -> Tensor:
    """Stretch each channel of each sample to [0, 1]: ``(x − min)/(max − min)`` (channels with
    ``max = min`` unchanged): torchvision's ``autocontrast`` on floats."""
    x = as_compute_dtype(img)
    lo = x.amin(dim=(-2, -1), keepdim=True)
    hi = x.amax(dim=(-2, -1), keepdim=True)
    flat = hi == lo
    lo = torch.where(flat, 0.0, lo)
    scale = torch.where(flat, 1.0, hi - lo)
    return ((x - lo) / scale).clamp_(0.0, 1.0).to(img.dtype)


def equalize(img: Tensor) -> Tensor:
    """Histogram equalization per channel per sample, torchvision's algorithm (PIL's LUT rule).

    As torchvision does for float images, the image goes through uint8 first
    (``q = ⌊x·(256 − 10⁻³)⌋``) and the result is ``lut[q]/255``:

    - ``hist`` = 256-bin histogram of ``q`` (one ``scatter_add`` for the whole batch);
    - ``step = ⌊(N − hist[last non-empty bin])/255⌋`` (``N`` = pixels per channel);
    - ``lut[0] = 0``, ``lut[k] = min(255, ⌊(cumhist[k−1] + ⌊step/2⌋)/step⌋)``;
    - a channel with ``step = 0`` (one or two grey levels) keeps ``q``, i.e. ``q/255``.

    On images decoded as ``u8/255``, ``q`` is ``u8`` again: the result is PIL's / timm's
    ``equalize`` exactly."""
    x = as_compute_dtype(img)
    n, c, h, w = x.shape
    # float → uint8 as torchvision's to_dtype(scale=True): multiply by 255.999 and truncate
    # (the clamp only guards values outside [0, 1]).
    # (the clamp only guards values outside [0, 1]; truncating a value in [0, 255] to int64 is the
    # uint8 cast)
    flat = x.mul(256.0 - 1e-3).clamp_(0.0, 255.0).long().flatten(start_dim=-2)  # (n, c, HW)
    hist = torch.zeros(n, c, 256, dtype=torch.int64, device=x.device)
    hist.scatter_add_(-1, flat, torch.ones((), dtype=torch.int64, device=x.device).expand_as(flat))
    cum = hist.cumsum(dim=-1)
    # the last non-empty bin is the first bin where the cumulative histogram reaches its maximum
    last = cum.argmax(dim=-1, keepdim=True)
    step = torch.div(h * w - hist.gather(-1, last), 255, rounding_mode="floor")
    lut = torch.div(cum[..., :-1] + step // 2, step.clamp(min=1), rounding_mode="floor").clamp_(0, 255)
    lut = torch.nn.functional.pad(lut, (1, 0))                         # lut[0] = 0
    # the rest on the (n, c, 256) tables, not on the pixels: a step-0 channel's table is the identity,
    # and the values are made floats on the [0, 1] scale there (the same operations on the same integers)
    lut = torch.where(step.ne(0), lut, constant("levels_256", range(256), lut)).to(x.dtype).mul_(1.0 / 255.0)
    return lut.gather(-1, flat).view(n, c, h, w).to(img.dtype)


# -- hue ------------------------------------------------------------------------------------------------------------


def _rgb_to_hsv(x: Tensor) -> Tensor:
    """torchvision's ``_rgb_to_hsv`` (PIL's formulas; h, s, v all in [0, 1])."""
    r, g, _ = x.unbind(dim=-3)
    minc, maxc = torch.aminmax(x, dim=-3)
    eqc = maxc == minc  # grey pixels: s = 0 and h = 0, without dividing by zero
    crange = maxc - minc
    ones = torch.ones_like(maxc)
    s = crange / torch.where(eqc, ones, maxc)
    divisor = torch.where(eqc, ones, crange).unsqueeze(-3)
    rc, gc, bc = ((maxc.unsqueeze(-3) - x) / divisor).unbind(dim=-3)
    maxc_neq_r = maxc != r
    maxc_eq_g = maxc == g
    hg = (rc + 2.0 - bc) * (maxc_eq_g & maxc_neq_r)
    hr = (bc - gc) * ~maxc_neq_r
    hb = (gc + 4.0 - rc) * (maxc_neq_r & ~maxc_eq_g)
    h = (hr + hg + hb).mul_(1.0 / 6.0).add_(1.0).fmod_(1.0)
    return torch.stack((h, s, maxc), dim=-3)


# (v, p, q, t) → (r, g, b) for each sector i = ⌊6h⌋ (rows r, g, b; columns i = 0..5)
_HSV_SELECT = ((0, 2, 1, 1, 3, 0), (3, 0, 0, 2, 1, 1), (1, 1, 3, 0, 0, 2))


def _hsv_to_rgb(hsv: Tensor) -> Tensor:
    """torchvision's ``_hsv_to_rgb``."""
    h, s, v = hsv.unbind(dim=-3)
    h6 = h * 6.0
    i = torch.floor(h6)
    f = h6 - i
    i = i.to(torch.long).remainder_(6)
    sxf = s * f
    one_minus_s = 1.0 - s
    q = ((1.0 - sxf) * v).clamp_(0.0, 1.0)
    t = ((sxf + one_minus_s) * v).clamp_(0.0, 1.0)
    p = (one_minus_s * v).clamp_(0.0, 1.0)
    vpqt = torch.stack((v, p, q, t), dim=-3)
    select = torch.tensor(_HSV_SELECT, dtype=torch.long).to(hsv.device, non_blocking=True)
    index = select[:, i].movedim(0, -3)  # (n, 3, H, W)
    return vpqt.gather(-3, index)


def adjust_hue(img: Tensor, hue_factor: Tensor) -> Tensor:
    """Shift the hue by ``hue_factor (n,)`` in [−0.5, 0.5] (fractions of the colour circle):
    RGB → HSV, ``h ← (h + f) mod 1``, HSV → RGB, torchvision's ``adjust_hue``.

    torchvision computes in float32 even for float64 images; here float64 stays float64 (the two
    agree to float32 rounding)."""
    x = as_compute_dtype(img)
    hsv = _rgb_to_hsv(x)
    h, s, v = hsv.unbind(dim=-3)
    h = (h + per_sample(hue_factor, x, ndim=3)).remainder_(1.0)
    return _hsv_to_rgb(torch.stack((h, s, v), dim=-3)).to(img.dtype)


# -- blur -----------------------------------------------------------------------------------------------------------


def _gaussian_kernel1d(size: int, sigma: Tensor) -> Tensor:
    """torchvision's 1-D kernel, one per sample: ``softmax(−(x/σ)²)`` over ``size`` taps at
    ``x = linspace(−l, l)``, ``l = (size − 1)/(2√2)`` (taps ``1/√2`` apart, so the kernel is
    ``exp(−k²/(2σ²))`` normalised, ``k`` the tap offset). ``sigma (n, 1)`` → ``(n, size)``."""
    lim = (size - 1) / (2.0 * math.sqrt(2.0))
    x = torch.linspace(-lim, lim, steps=size, dtype=sigma.dtype, device=sigma.device)
    return torch.softmax(-(x / sigma).pow(2), dim=-1)


def gaussian_blur(img: Tensor, kernel_size: int | Sequence[int], sigma: Tensor) -> Tensor:
    """torchvision's ``gaussian_blur`` with a per-sample ``sigma``: ``(n,)`` (both axes) or
    ``(n, 2)`` = (σx, σy), in pixels, > 0. ``kernel_size`` is an odd int or an ``(kx, ky)`` pair
    (x = width), shared by the batch. Reflect padding (``kx//2`` left/right, ``ky//2`` top/bottom;
    needs ``kx//2 < W`` and ``ky//2 < H``, as torchvision does).

    torchvision convolves with the 2-D outer product of the two 1-D kernels; this is the same
    filter applied separably, each pass ``k`` shifted multiply-adds with per-sample weights (the
    result agrees to float rounding)."""
    kx, ky = (kernel_size, kernel_size) if isinstance(kernel_size, int) else (int(kernel_size[0]), int(kernel_size[1]))
    if kx % 2 == 0 or ky % 2 == 0 or kx <= 0 or ky <= 0:
        raise ValueError(f"kernel_size should have odd and positive integers. Got {kernel_size}")
    x = as_compute_dtype(img)
    h, w = x.shape[-2:]
    s = as_tensor(sigma).to(device=x.device, dtype=x.dtype, non_blocking=True)
    s = s.reshape(-1, 2) if s.dim() == 2 else s.reshape(-1, 1).expand(-1, 2)
    wx = _gaussian_kernel1d(kx, s[:, :1]).view(-1, 1, 1, 1, kx)
    wy = _gaussian_kernel1d(ky, s[:, 1:]).view(-1, 1, 1, 1, ky)
    xp = nnf.pad(x, [kx // 2, kx // 2, ky // 2, ky // 2], mode="reflect")
    rows = _sum(wx[..., i] * xp[..., :, i:i + w] for i in range(kx))  # (n, C, H + 2(ky//2), W)
    out = _sum(wy[..., j] * rows[..., j:j + h, :] for j in range(ky))
    return out.to(img.dtype)
