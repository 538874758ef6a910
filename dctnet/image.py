"""Whole images between coefficient planes and RGB: :func:`to_rgb` (a JPEG's planes, any layout,
→ float RGB in [0, 1]; float maths by default, within a few grey levels of libjpeg, or
``exact=True``, libjpeg-turbo's integer decode bit for bit — Pillow's 8-bit pixels as ``k/255``),
:func:`coefficients_to_rgb` (a :class:`dctnet.JpegCoefficients`), and :func:`from_rgb` (RGB →
planes at a sampling). Conventions: :mod:`dctnet.kernels.dct`, :mod:`dctnet.kernels.color`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from dctnet.exact import block_idct_islow, components_to_rgb_exact, upsample_pixels_exact
from dctnet.kernels.cache import constant
from dctnet.kernels.color import CENTRED_COMPONENTS, RGB_TO_YCC, rgb_to_ycbcr, unit_planes_to_rgb
from dctnet.kernels.dct import Size, as_sizes, block_dct, component_extent, unit_samples, upsample_pixels

__all__ = ["coefficients_to_rgb", "from_rgb", "grid_size", "to_rgb"]


def to_rgb(planes: Sequence[Tensor], sampling: Sequence[tuple[int, int]], size: Size, *,
           color_space: str = "YCbCr", upsampling: str = "fancy", clamp: bool = True,
           dtype: torch.dtype = torch.float32, exact: bool = False,
           out_size: tuple[int, int] | None = None, column_major: bool = False) -> Tensor:
    """Rebuild RGB images from coefficient planes (block IDCT, chroma upsampling, colour).

    Args:
        planes: one tensor per component, ``(B, Hb_c, Wb_c, 64)`` (int16 or float), MCU-aligned
            as :func:`dctnet.read_coefficients` returns them (``Hb_c = mcu_rows·v_c`` …).
        sampling: ``(h, v)`` sampling factors per component.
        size: true ``(height, width)``, shared, or an ``int64 (B, 2)`` tensor per sample.
        color_space: ``"YCbCr"``, ``"gray"``, ``"RGB"``, ``"CMYK"`` or ``"YCCK"``.
        upsampling: ``"fancy"`` (libjpeg's default, matches Pillow/libjpeg output) or
            ``"nearest"``. Non-integer ratios (e.g. 3×2 luma with 2×1 chroma), which libjpeg
            cannot decode, always use nearest: output pixel ``x`` takes component sample
            ``floor(x·h_c/h_max)``.
        clamp: clamp each component's samples to [0, 255] after the IDCT and the RGB result to
            [0, 1], as an 8-bit decoder does (off: the purely linear reconstruction).
        dtype: compute dtype (float32 default; autocast is disabled inside so AMP does not
            degrade reconstruction).
        exact: reproduce libjpeg-turbo's default decode bit for bit (integer ``islow`` IDCT,
            integer fancy upsampling, fixed-point colour conversion; Pillow's CMYK → RGB): the
            result is exactly ``k/255`` for Pillow's 8-bit pixel ``k``. Costs float64 matmuls and
            integer ops instead of one float32 matmul; for models that must see the very pixels
            they were trained on (e.g. comparing with a Pillow pipeline). Needs integer
            coefficients; always clamps; non-integer sampling ratios (which libjpeg cannot
            decode) raise ``ValueError``.
        out_size: the output's ``(H, W)``, at most the planes' MCU grid in pixels
            (:func:`grid_size`). ``None`` (default): the true size — with a per-sample ``size``
            tensor the largest in the batch, which is *read from the tensor*: a host sync when it is
            on an accelerator. The device step (:func:`dctnet.transforms.crops_to_rgb`) passes
            host ints instead — each group's extent from the host batch, or its grid — and reads
            nothing.
        column_major: the float decode lays the result out column by column (the returned tensor is
            a transposed view of a contiguous ``(B, 3, W, H)`` one: the same values), at no extra
            cost, for a reader that wants columns — a CPU's sparse resize (:mod:`dctnet.resize`)
            then copies one transposed image fewer. Ignored for the exact decode and for
            non-integer sampling ratios.

    Returns:
        ``(B, 3, H, W)`` float RGB in [0, 1], ``H, W`` = ``out_size``, else the largest true size
        in the batch; pixels beyond a sample's own size are padding (whatever its blocks decode to).
    """
    if len(planes) != len(sampling):
        raise ValueError(f"{len(planes)} planes but {len(sampling)} sampling factors")
    device = planes[0].device
    batch = planes[0].shape[0]
    sizes = as_sizes(size, batch, device)
    hmax = max(h for h, _ in sampling)
    vmax = max(v for _, v in sampling)
    if out_size is not None:
        out_h, out_w = (int(v) for v in out_size)
        grid_h, grid_w = grid_size(planes, sampling)
        if not (0 <= out_h <= grid_h and 0 <= out_w <= grid_w):
            raise ValueError(f"out_size {tuple(out_size)} must lie within the planes' grid {grid_h}x{grid_w} (pixels)")
    elif isinstance(size, Tensor):  # per-sample sizes: their maximum, read back (a host sync on a device)
        out_h, out_w = int(sizes[:, 0].max()), int(sizes[:, 1].max())
    else:
        out_h, out_w = int(size[0]), int(size[1])
    with torch.autocast(device_type=device.type, enabled=False):
        if exact:
            return _to_rgb_exact(planes, sampling, sizes, out_h, out_w, hmax, vmax, color_space, upsampling).to(dtype) / 255.0
        comps = []
        centred = CENTRED_COMPONENTS.get(color_space, ())
        columns = column_major and all(hmax % h == 0 and vmax % v == 0 for h, v in sampling)
        for i, (plane, (h, v)) in enumerate(zip(planes, sampling)):
            # (B, 8Hb, 8Wb) samples / 255 (chroma − 128), transposed for columns; a decoder's samples are
            # 8-bit: with clamp, ringing past 0/255 is cut before the colour maths
            pix = unit_samples(plane.to(dtype), centred=i in centred, clamp=clamp, transposed=columns)
            valid = component_extent(sizes, h, v, hmax, vmax)
            if hmax % h == 0 and vmax % v == 0:
                pix = upsample_pixels(pix, hmax // h, vmax // v, valid, mode=upsampling, transposed=columns)
            else:
                pix = _upsample_fractional(pix, h, v, hmax, vmax, valid, out_h, out_w)
            comps.append(pix[:, :out_w, :out_h] if columns else pix[:, :out_h, :out_w])
        rgb = unit_planes_to_rgb(comps, color_space, clamp)
        return rgb.transpose(-1, -2) if columns else rgb


def grid_size(planes: Sequence[Tensor], sampling: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """``(H, W)`` in pixels of the MCU grid the planes ``(B, R·v_c, C·h_c, 64)`` cover: ``8·R·vmax``
    × ``8·C·hmax``, read off the shapes (no tensor values: host-known on any device). Every
    component's upsampled samples cover exactly this grid."""
    (h0, v0), plane = sampling[0], planes[0]
    hmax = max(h for h, _ in sampling)
    vmax = max(v for _, v in sampling)
    return 8 * (plane.shape[-3] // v0) * vmax, 8 * (plane.shape[-2] // h0) * hmax


def _to_rgb_exact(planes: Sequence[Tensor], sampling: Sequence[tuple[int, int]], sizes: Tensor, out_h: int, out_w: int,
                  hmax: int, vmax: int, color_space: str, upsampling: str) -> Tensor:
    """:func:`to_rgb` with ``exact=True``: ``int32 (B, 3, H, W)`` pixels, libjpeg's own."""
    comps = []
    for plane, (h, v) in zip(planes, sampling):
        if hmax % h or vmax % v:
            raise ValueError(f"exact decode needs integer sampling ratios (libjpeg cannot decode {sampling})")
        valid = component_extent(sizes, h, v, hmax, vmax)
        pix = upsample_pixels_exact(block_idct_islow(plane), hmax // h, vmax // v, valid, mode=upsampling)
        comps.append(pix[:, :out_h, :out_w])
    return components_to_rgb_exact(torch.stack(comps, dim=1), color_space)


def _upsample_fractional(pix: Tensor, h: int, v: int, hmax: int, vmax: int, valid: Tensor, out_h: int,
                         out_w: int) -> Tensor:
    """Nearest mapping for non-integer sampling ratios: out (y, x) ← (⌊y·v/vmax⌋, ⌊x·h/hmax⌋)."""
    b = pix.shape[0]
    ys = torch.arange(out_h, device=pix.device) * v // vmax
    xs = torch.arange(out_w, device=pix.device) * h // hmax
    ys = torch.minimum(ys[None, :], (valid[:, :1] - 1).clamp(min=0)).clamp(max=pix.shape[1] - 1)
    xs = torch.minimum(xs[None, :], (valid[:, 1:] - 1).clamp(min=0)).clamp(max=pix.shape[2] - 1)
    rows = torch.gather(pix, 1, ys[:, :, None].expand(b, out_h, pix.shape[2]))
    return torch.gather(rows, 2, xs[:, None, :].expand(b, out_h, out_w))


def coefficients_to_rgb(coeffs: Any, *, device: torch.device | str | None = None, **kwargs: Any) -> Tensor:
    """:func:`to_rgb` for one :class:`dctnet.JpegCoefficients`: ``(1, 3, H, W)`` float in [0, 1]."""
    planes = [t.to(device).unsqueeze(0) for t in coeffs.to_torch()]
    return to_rgb(planes, coeffs.sampling, (coeffs.height, coeffs.width), color_space=coeffs.color_space, **kwargs)


def from_rgb(rgb: Tensor, sampling: Sequence[tuple[int, int]] = ((2, 2), (1, 1), (1, 1)), *,
             quant_tables: Tensor | None = None) -> list[Tensor]:
    """Encode-side counterpart of :func:`to_rgb`: RGB → YCbCr → chroma downsampling → block DCT.

    Args:
        rgb: ``(B, 3, H, W)`` float RGB in [0, 1] (torchvision convention).
        sampling: per component ``(h, v)``; one entry gives a grayscale (luma-only) result.
        quant_tables: optional ``(C, 64)`` or ``(C, 8, 8)`` tables; when given, coefficients are
            quantized and dequantized (``round(F/Q)·Q``) as a JPEG encoder at that table would.

    Returns:
        One float plane per component, ``(B, mcu_rows·v_c, mcu_cols·h_c, 64)``: MCU-aligned like
        the reader's output. Edges are padded by replicating the last row/column (what libjpeg's
        encoder does); chroma is downsampled by box averaging (libjpeg's downsampler, without
        its alternating rounding bias).
    """
    b, c, height, width = rgb.shape
    if c != 3:
        raise ValueError(f"from_rgb expects (B, 3, H, W) RGB, got {tuple(rgb.shape)}")
    hmax = max(h for h, _ in sampling)
    vmax = max(v for _, v in sampling)
    mcu_h, mcu_w = 8 * vmax, 8 * hmax
    pad_h, pad_w = -height % mcu_h, -width % mcu_w
    x = rgb.float() * 255.0
    ycc = rgb_to_ycbcr(x, dim=1) if len(sampling) > 1 else (x * constant(
        "luma_weights", RGB_TO_YCC[0], x).reshape(1, 3, 1, 1)).sum(1, keepdim=True)
    if pad_h or pad_w:
        ycc = torch.nn.functional.pad(ycc, (0, pad_w, 0, pad_h), mode="replicate")
    planes = []
    for ci, (h, v) in enumerate(sampling):
        fh, fv = hmax // h, vmax // v
        if hmax % h or vmax % v:
            raise ValueError(f"from_rgb supports integer sampling ratios only, got {sampling}")
        comp = ycc[:, ci:ci + 1]
        if fh > 1 or fv > 1:
            comp = torch.nn.functional.avg_pool2d(comp, (fv, fh))
        coeffs = block_dct(comp[:, 0] - 128.0)
        if quant_tables is not None:
            q = quant_tables[ci].reshape(64).to(coeffs)
            coeffs = torch.round(coeffs / q) * q
        planes.append(coeffs)
    return planes
