"""Antialiased resized crops as batched matrices: torchvision's / PIL's bilinear and bicubic
weights for each output pixel of each crop (:func:`resize_matrices`), applied as two matmuls per
batch (:func:`resized_crop`; on a CPU, two sparse products of the matrices' bands:
:func:`banded_resample`). Antialiased (torchvision's ``resize``) or torch's plain bilinear (a
detector's own resize, :func:`plain_bilinear_matrices`), with offsets and padding for resize-then-crop.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import torch
from torch import Tensor

# torch announces its CSR tensors as beta the first time one is built; the resize's use of them (one
# sparse × dense product, the most established CSR operation) is tested against the dense matrices.
# The filter is process-wide (a local catch_warnings is not thread-safe): it hides that one message
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state", category=UserWarning)

__all__ = ["RESIZE_SUPPORT", "apply_matrices", "banded_resample", "plain_bilinear_matrices", "resize_matrices",
           "resized_crop", "use_band"]


#: what :func:`resize_matrices` offers: each filter's half-width in input pixels when the axis is
#: not shrunk (PIL's and torch's ``interp_size / 2``); a shrink by ``s > 1`` widens it ``s`` times
RESIZE_SUPPORT = {"bilinear": 1.0, "bicubic": 2.0}


def _resize_filter(x: Tensor, interpolation: str) -> Tensor:
    """The resampling kernel at ``x`` (input pixels, already divided by ``max(scale, 1)``):
    bilinear's triangle, or Keys' cubic convolution with ``a = −0.5`` — the kernel of PIL's
    ``BICUBIC`` and of torch's antialiased bicubic (``aa_filter``), not the ``a = −0.75`` of torch's
    non-antialiased bicubic and ``grid_sample``."""
    ax = torch.abs(x)
    if interpolation == "bilinear":
        return torch.clamp(1.0 - ax, min=0.0)
    a = -0.5
    near = ((a + 2.0) * ax - (a + 3.0)) * ax * ax + 1.0                         # |x| < 1
    far = ((a * ax - 5.0 * a) * ax + 8.0 * a) * ax - 4.0 * a                     # 1 ≤ |x| < 2
    return torch.where(ax < 1.0, near, torch.where(ax < 2.0, far, torch.zeros_like(ax)))


def _check_interpolation(interpolation: str) -> None:
    if interpolation not in RESIZE_SUPPORT:
        raise ValueError(f"interpolation must be one of {sorted(RESIZE_SUPPORT)}, not {interpolation!r}")


def resize_matrices(starts: Tensor, lengths: Tensor, in_size: int, out_size: int, *,
                    interpolation: str = "bilinear", resized: Tensor | None = None, offsets: Tensor | None = None,
                    dtype: torch.dtype = torch.float32, band: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Per-sample 1-D resampling matrices ``(B, out_size, in_size)`` for an antialiased resize of
    the segment ``[starts[b], starts[b] + lengths[b])`` of an axis of ``in_size`` pixels.

    Without ``resized``/``offsets`` the segment is resized to ``out_size`` (torchvision's
    ``resized_crop``: crop, then resize). With them, the segment is resized to ``resized[b]``
    samples and the ``out_size`` outputs from ``offsets[b]`` on are kept (timm's eval transform:
    resize the whole image, then centre-crop); outputs outside ``[0, resized[b])`` (``offsets < 0``
    or past the end: a centre crop larger than the image, whose padding a caller fills) get an
    all-zero row. The segment may reach outside ``[0, in_size)`` (a whole image whose window is a
    part of it): taps are clipped to the segment, and the caller's window must hold every tap the
    kept outputs use (:class:`dctnet.data.ResizeCenterCrop` plans it so).

    The weights are exactly those of ``torch.nn.functional.interpolate(mode=interpolation,
    antialias=True, align_corners=False)``, i.e. PIL's resampling, which torchvision's ``resize``
    and ``resized_crop`` use: in segment coordinates, with ``scale = length/resized``, output ``k``
    (``offsets + i``) has centre ``c = scale·(k + ½)``, support ``R·max(scale, 1)`` (``R`` = 1
    bilinear, 2 bicubic), taps ``j ∈ [trunc(c − support + ½), trunc(c + support + ½))`` clipped to
    ``[0, length)``, weight ``filter((j − c + ½)/max(scale, 1))`` (the triangle, or the ``a = −0.5``
    cubic), normalised to sum 1. Applying ``M_y @ img @ M_xᵀ`` crops and resizes every sample at
    once. ``starts``, ``lengths``, ``resized``, ``offsets``: ``int64 (B,)`` in pixels.

    ``band=True``: the same weights as ``(weights (B, out, K), columns (B, out, K) int64)``, the
    matrix's non-zero band before it is scattered (a dropped tap: weight 0, any column in range; a
    row's columns ascending, fewer than ``K`` apart). With ``resized``, ``K`` follows the largest
    shrink ``lengths/resized``, read on the host: a band is for a CPU (:func:`use_band`)."""
    _check_interpolation(interpolation)
    device = starts.device
    lengths = lengths.to(torch.float64)
    size = lengths if resized is None else resized.to(torch.float64)           # (B,) the resized segment
    scale = (lengths / (out_size if resized is None else size))[:, None]        # (B, 1)
    i = torch.arange(out_size, device=device, dtype=torch.float64)[None, :]
    if offsets is not None:
        i = i + offsets.to(torch.float64)[:, None]                              # (B, out) output index k
    centre = scale * (i + 0.5)                                                  # (B, out)
    stretch = torch.clamp(scale, min=1.0)                                       # the antialiasing widening
    support = stretch * RESIZE_SUPPORT[interpolation]
    lo = torch.clamp(torch.trunc(centre - support + 0.5), min=0.0)
    hi = torch.minimum(torch.trunc(centre + support + 0.5), lengths[:, None])
    # Only a band of K taps per output can be non-zero. For a crop K is known on the host from the
    # shapes: the taps [lo, hi) number at most 2·support + 1, and support ≤ R·max(in/out, 1), as the
    # box lies in the axis. Weights are computed on the band (B, out, K) and scattered into the
    # matrix: K ≈ 6 bicubic taps instead of in_size columns per output. (A resized segment can be
    # smaller than the output — a padded centre crop — and its scale is not bounded by the shapes:
    # the band reads it from the scales, which a GPU's dense matrices would wait for — all in_size
    # columns there.)
    if resized is None:
        max_scale = max(in_size / out_size, 1.0)
        taps = min(in_size, int(math.ceil(2.0 * RESIZE_SUPPORT[interpolation] * max_scale)) + 2)
    elif band and lengths.numel():  # the band a CPU multiplies: its width read from the scales (host tensors there)
        max_scale = max(float(scale.max()), 1.0)
        taps = min(in_size, int(math.ceil(2.0 * RESIZE_SUPPORT[interpolation] * max_scale)) + 2)
    else:
        taps = in_size
    j = lo[..., None] + torch.arange(taps, device=device, dtype=torch.float64)    # (B, out, K) segment coordinates
    if interpolation == "bilinear":  # the expression the bilinear matrices have always used
        w = torch.clamp(1.0 - torch.abs((j - centre[..., None] + 0.5) / support[..., None]), min=0.0)
    else:
        w = _resize_filter((j - centre[..., None] + 0.5) / stretch[..., None], interpolation)
    column = j + starts.to(torch.float64)[:, None, None]                        # (B, out, K) in the tensor
    keep = (j < hi[..., None]) & (column >= 0) & (column < in_size)
    if resized is not None:  # outputs past the resized segment: padding, no taps
        keep = keep & ((i >= 0) & (i < size[:, None]))[..., None]
    w = w * keep
    w = w / w.sum(-1, keepdim=True).clamp(min=1e-12)
    # dropped taps have weight 0 and a clamped column: scatter_add (not scatter) so that a clamped
    # duplicate adds 0 rather than overwriting a kept weight
    index = column.clamp(0, in_size - 1).long()
    if band:
        return w.to(dtype), index
    out = torch.zeros(w.shape[0], out_size, in_size, dtype=dtype, device=device)
    return out.scatter_add_(2, index, w.to(dtype))


def plain_bilinear_matrices(lengths: Tensor, resized: Tensor, offsets: Tensor, in_size: int, out_size: int, *,
                            dtype: torch.dtype = torch.float32, starts: Tensor | None = None,
                            band: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """``(B, out_size, in_size)`` matrices of torch's **non-antialiased** bilinear resize
    (``interpolate(mode="bilinear", align_corners=False)`` given the output size, or a scale factor
    with ``recompute_scale_factor=True`` — what torchvision's detectors' ``GeneralizedRCNNTransform``
    runs): the ``lengths[b]`` pixels of an axis from ``starts[b]`` (default 0) resized to
    ``resized[b]``, outputs ``offsets[b] + i`` kept; outputs outside ``[0, resized)`` get an all-zero
    row (padding, filled by the caller). ``lengths``, ``resized``, ``offsets``, ``starts``: ``int64 (B,)``.

    As ATen computes it, in float32: ``scale = in/out``, source ``max(scale·(j + ½) − ½, 0)``, taps
    ``i0 = ⌊src⌋`` and ``min(i0 + 1, in − 1)`` with weights ``1 − λ`` and ``λ = src − i0``. Two taps,
    however much the axis shrinks: no antialiasing. ``band=True``: those two taps as ``(weights
    (B, out, 2) dtype, columns (B, out, 2) int64)`` (:func:`resize_matrices`' band)."""
    device = lengths.device
    scale = lengths.to(torch.float32) / resized.to(torch.float32)                  # (B,)
    j = torch.arange(out_size, device=device, dtype=torch.int64)[None, :] + offsets[:, None]   # (B, out)
    src = torch.clamp(scale[:, None] * (j.to(torch.float32) + 0.5) - 0.5, min=0.0)
    i0 = src.to(torch.int64)                                                       # trunc = floor (src ≥ 0)
    lam = src - i0.to(torch.float32)
    i1 = torch.where(i0 < lengths[:, None] - 1, i0 + 1, i0)
    inside = ((j >= 0) & (j < resized[:, None])).to(torch.float32)
    if starts is not None:  # the segment's first pixel in the tensor
        i0, i1 = i0 + starts[:, None], i1 + starts[:, None]
    columns = torch.stack([i0, i1], -1).clamp_(0, in_size - 1)                   # (B, out, 2)
    weights = torch.stack([(1.0 - lam) * inside, lam * inside], -1)
    if band:
        return weights.to(dtype), columns
    out = torch.zeros(lengths.shape[0], out_size, in_size, dtype=torch.float32, device=device)
    out.scatter_add_(2, columns[..., :1], weights[..., :1])
    out.scatter_add_(2, columns[..., 1:], weights[..., 1:])
    return out.to(dtype)


def use_band(x: Tensor) -> bool:
    """Whether :func:`resized_crop` resamples ``x`` with the band of each matrix (two sparse
    products, :func:`banded_resample`): on a CPU, which pays for every multiply-add, the zeros of
    the dense matrices included. A GPU multiplies the dense matrices (:func:`apply_matrices`), a
    fraction of its peak, in fewer kernels, and without reading the band's width back. (A function,
    so that a benchmark can force the dense path on a CPU.)"""
    return x.device.type == "cpu"


def _axis(starts: Tensor, lengths: Tensor, in_size: int, out_size: int, interpolation: str,
          resized: Tensor | None, offsets: Tensor | None, antialias: bool | Tensor, dtype: torch.dtype,
          band: bool) -> Tensor | tuple[Tensor, Tensor]:
    """One axis's resampling, dense ``(B, out, in)`` or its band: antialiased
    (:func:`resize_matrices`), torch's plain bilinear (:func:`plain_bilinear_matrices`), or, with
    ``antialias`` a ``bool (B,)`` mask, each sample its own (a host mask is read; a device one is not)."""
    if isinstance(antialias, Tensor) and antialias.device.type == "cpu":  # a host mask: read without a sync
        antialias = True if bool(antialias.all()) else False if not bool(antialias.any()) else antialias
    if antialias is True:
        return resize_matrices(starts, lengths, in_size, out_size, interpolation=interpolation, resized=resized,
                               offsets=offsets, dtype=dtype, band=band)
    if interpolation != "bilinear" or resized is None or offsets is None:
        raise ValueError("antialias=False is for bilinear resizes given resize= (a detector's own resize)")
    plain = plain_bilinear_matrices(lengths, resized, offsets, in_size, out_size, dtype=dtype, starts=starts, band=band)
    if antialias is False:
        return plain
    smooth = resize_matrices(starts, lengths, in_size, out_size, interpolation=interpolation, resized=resized,
                             offsets=offsets, dtype=dtype, band=band)
    keep = antialias.to(starts.device, non_blocking=True)[:, None, None]
    if not band:
        return torch.where(keep, smooth, plain)
    # bands of both widths: each padded to the wider with weight 0 (on its first column)
    k = max(smooth[0].shape[-1], plain[0].shape[-1])
    (sw, sc), (pw, pc) = (_widen(*smooth, k), _widen(*plain, k))
    return torch.where(keep, sw, pw), torch.where(keep, sc, pc)


def _widen(weights: Tensor, columns: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """A band ``(B, out, K)`` widened to ``k`` taps: weight 0 on the row's first column."""
    extra = k - weights.shape[-1]
    if extra <= 0:
        return weights, columns
    return (torch.cat([weights, weights.new_zeros(*weights.shape[:-1], extra)], -1),
            torch.cat([columns, columns[..., :1].expand(*columns.shape[:-1], extra)], -1))


def _mirror(m: Tensor | tuple[Tensor, ...], flips: Tensor, widths: Tensor) -> Tensor | tuple[Tensor, ...]:
    """An axis's matrix ``(B, out, in)`` or band (each ``(B, out, K)``) with rows ``[0, widths[b])``
    reversed where ``flips[b]``: the output mirrored. (Host flips with none set: ``m`` as it is.)"""
    if flips.device.type == "cpu" and not bool(flips.any()):
        return m
    parts = m if isinstance(m, tuple) else (m,)
    j = torch.arange(parts[0].shape[1], device=parts[0].device)[None, :]
    w = widths.to(parts[0].device)[:, None]
    order = torch.where(flips.to(parts[0].device)[:, None] & (j < w), w - 1 - j, j)        # (B, out)
    out = tuple(p.gather(1, order[..., None].expand(p.shape)) for p in parts)
    return out if isinstance(m, tuple) else out[0]


def _through(m: Tensor | tuple[Tensor, Tensor], index: Tensor, n: int) -> Tensor | tuple[Tensor, Tensor]:
    """An axis's matrix ``(B, out, in)`` or band over a canvas read through ``index (B, in)``
    (canvas pixel ``i`` is input pixel ``index[b, i]``; −1: a zero pixel) as one over the ``n``
    input pixels: each weight moved to its input column, a −1's dropped."""
    valid = index >= 0
    source = index.clamp(min=0)
    if isinstance(m, tuple):
        weights, columns = m
        flat = columns.reshape(columns.shape[0], -1)
        ok = valid.gather(1, flat).view_as(columns)
        return weights * ok, source.gather(1, flat).view_as(columns)
    b, out, _ = m.shape
    moved = m * valid[:, None, :]
    return m.new_zeros(b, out, n).scatter_add_(2, source[:, None, :].expand(b, out, -1), moved)


def resized_crop(images: Tensor, boxes: Tensor, size: tuple[int, int], *, interpolation: str = "bilinear",
                 resize: Tensor | None = None, fill: float | Sequence[float] = 0.0, antialias: bool | Tensor = True,
                 flip: tuple[Tensor, Tensor] | None = None, through: tuple[Tensor, Tensor] | None = None,
                 into: tuple[Tensor, int] | None = None) -> Tensor:
    """Crop ``boxes (B, 4)`` = (top, left, height, width) — each inside the image tensor, as a training
    crop's box lies in its window — out of ``images (B, C, H, W)`` and
    resize each to ``size`` = (h, w) with antialiased ``interpolation`` (``"bilinear"`` or
    ``"bicubic"``) weights — torchvision's ``resized_crop(..., antialias=True)`` on float tensors
    for every sample at once, as two batched matmuls (:func:`resize_matrices`; on a CPU their bands,
    two sparse products: :func:`banded_resample`). Returns a new ``(B, C, h, w)`` tensor in the
    images' dtype, not clamped: bicubic overshoots the input's range, as torchvision's does on float
    tensors.

    ``resize``: ``int64 (B, 4)`` = (height, width, top, left): resize each box to height × width
    instead and keep the ``size`` crop at (top, left) of it — ``Resize`` then ``CenterCrop`` of
    the box (:attr:`dctnet.batch.JpegBatch.resize`). The box may then reach outside the image
    tensor (it is the whole image, of which ``images`` holds a window); taps are clipped to it.
    Output pixels outside the resized box (a crop larger than it) are ``fill`` (a float, or one
    per channel), as a padding centre crop gives.

    ``antialias=False`` (bilinear, with ``resize``): torch's plain bilinear weights instead
    (:func:`plain_bilinear_matrices`), as torchvision's detectors resize; a ``bool (B,)`` tensor:
    each sample's own kind.

    ``flip = (flips bool (B, 2), sizes int64 (B, 2))``: output rows ``[0, sizes[b, 0])`` of the
    samples with ``flips[b, 0]`` mirrored, columns ``[0, sizes[b, 1])`` with ``flips[b, 1]`` —
    vertical and horizontal flips of each sample's own canvas in a padded batch — as permutations of
    the matrices' rows: no pass over the pixels of their own.

    ``through = (rows int64 (B, h_in), cols int64 (B, w_in))``: the boxes and ``resize`` are in a
    canvas that is a selection of ``images`` — canvas pixel ``(i, j)`` is ``images[b, :, rows[b, i],
    cols[b, j]]``, 0 where either is −1 (a crop, pad or flip done before, never materialised): each
    weight is moved to its image column, so the selection and this resampling are one pass.

    ``into = (rows, batch)`` (``rows`` ascending, host): the result may come as ``(batch, C, h, w)``
    with these samples at ``rows`` and zeros elsewhere, where that is free (:func:`banded_resample`);
    otherwise ``(B, C, h, w)`` (a caller tells them apart by the batch size)."""
    th, tw = size
    _check_interpolation(interpolation)
    band = use_band(images)
    # the band's sparse products are float32/float64 only (torch's CPU CSR): a half batch's weights in float32
    dtype = images.dtype if not band or images.dtype in (torch.float32, torch.float64) else torch.float32
    ry = rx = (None, None)
    if resize is not None:
        ry, rx = (resize[:, 0], resize[:, 2]), (resize[:, 1], resize[:, 3])
    h_in, w_in = images.shape[-2:] if through is None else (through[0].shape[1], through[1].shape[1])
    my = _axis(boxes[:, 0], boxes[:, 2], h_in, th, interpolation, *ry, antialias, dtype, band)
    mx = _axis(boxes[:, 1], boxes[:, 3], w_in, tw, interpolation, *rx, antialias, dtype, band)
    if flip is not None:
        my, mx = _mirror(my, flip[0][:, 0], flip[1][:, 0]), _mirror(mx, flip[0][:, 1], flip[1][:, 1])
    if through is not None:
        my, mx = _through(my, through[0], images.shape[-2]), _through(mx, through[1], images.shape[-1])
    fill = fill if resize is not None else 0.0  # a crop inside its image has no padding
    if band:
        return banded_resample(images, my, mx, fill, into=into)
    return apply_matrices(images, my, mx, fill)


def _fills(fill: float | Sequence[float]) -> list[float]:
    return [float(v) for v in fill] if isinstance(fill, Sequence) else [float(fill)]


def apply_matrices(images: Tensor, my: Tensor, mx: Tensor, fill: float | Sequence[float]) -> Tensor:
    """``M_y @ img @ M_xᵀ`` per sample; outputs where either axis has no taps (padding) are ``fill``."""
    out = torch.einsum("bih,bchw,bjw->bcij", my, images, mx)
    fills = _fills(fill)
    if any(fills):  # padding (zero so far): where either axis has no taps
        inside = (my.abs().sum(-1) > 0)[:, :, None] & (mx.abs().sum(-1) > 0)[:, None, :]   # (B, h, w)
        value = torch.tensor(fills, dtype=images.dtype).to(images.device, non_blocking=True)
        out = torch.where(inside[:, None], out, value.reshape(1, -1, 1, 1).expand(1, images.shape[1], 1, 1))
    return out


def banded_resized_crop(images: Tensor, boxes: Tensor, size: tuple[int, int], *,
                        interpolation: str = "bilinear", into: tuple[Tensor, int] | None = None) -> Tensor:
    """:func:`resized_crop` without ``resize`` (training crops) on the band path (a CPU's): the
    resampling matrices' non-zero band (:func:`resize_matrices`' ``band``: ~6 bicubic taps per output
    of a 224-pixel crop, instead of every input pixel) applied by :func:`banded_resample`; ``into``
    as there."""
    _check_interpolation(interpolation)
    dtype = images.dtype if images.dtype in (torch.float32, torch.float64) else torch.float32
    th, tw = size
    my = resize_matrices(boxes[:, 0], boxes[:, 2], images.shape[-2], th, interpolation=interpolation, dtype=dtype,
                         band=True)
    mx = resize_matrices(boxes[:, 1], boxes[:, 3], images.shape[-1], tw, interpolation=interpolation, dtype=dtype,
                         band=True)
    return banded_resample(images, my, mx, 0.0, into=into)


def banded_resample(images: Tensor, my: tuple[Tensor, Tensor], mx: tuple[Tensor, Tensor],
                    fill: float | Sequence[float] = 0.0, *, into: tuple[Tensor, int] | None = None) -> Tensor:
    """:func:`apply_matrices` from the matrices' bands ``(weights (B, h, K) float, columns (B, h, K)
    int64)`` and ``(B, w, K')`` (:func:`resize_matrices` and :func:`plain_bilinear_matrices` with
    ``band=True``; columns in ``[0, H)`` resp. ``[0, W)``, in any order; a dropped tap: weight 0, any
    column), each axis one sparse matmul: the band as one block-diagonal CSR matrix over all the
    batch's planes, times the images' rows. ``images (B, C, H, W)`` → a new ``(B, C, h, w)`` in
    their dtype, row-major; outputs where either axis has no taps are ``fill``. The same weights, the
    same sums up to float rounding (the dense matmul adds zeros too); a CPU pays for the taps alone,
    ~10× fewer multiply-adds than the dense matrices for a 224² crop of a 224² image and more for
    larger photos. An axis whose every output is one input with weight 1 or none (a crop, a pad, a
    flip: no resampling) is copied instead — rows selected, or nothing at all for an identity — with
    no multiply.

    Images stored column by column (``images.transpose(-1, -2)`` contiguous, as
    :func:`dctnet.image.to_rgb` decodes them with ``column_major``) are resized along x first: one
    transposed copy between the axes instead of two.

    ``into = (rows, batch)`` (``rows`` ascending, host): where it is free — column-major images, no
    fill, a product along y — the result is ``(batch, C, h, w)``, these samples at ``rows`` and zeros
    elsewhere, straight from the last product's empty rows: one layout group of a batch in place,
    which the other groups then fill, instead of every group copied into a new batch. Otherwise
    ``(B, C, h, w)``."""
    if images.dtype not in (torch.float32, torch.float64):  # torch's CPU CSR product: float32 and float64 only
        my = (my[0].float(), my[1])
        mx = (mx[0].float(), mx[1])
        return banded_resample(images.float(), my, mx, fill, into=into).to(images.dtype)
    fills = _fills(fill)
    by, bx = _Band(*my, images.shape[-2]), _Band(*mx, images.shape[-1])
    if not images.is_contiguous() and images.transpose(-1, -2).is_contiguous():  # stored by columns: x first
        x = bx.rows(images.transpose(-1, -2))                                                  # (B, C, w, H)
        # (the padding's fill is written after the product: not into a whole batch)
        out = by.rows(x.transpose(-1, -2).contiguous(), into if not any(fills) else None)
    else:
        out = bx.columns(by.rows(images))                                                     # (B, C, h, w)
    if out is images:  # both axes identities: still a new tensor, as every other path gives
        out = images.clone()
    if any(fills):
        inside = by.present[:, :, None] & bx.present[:, None, :]                                # (B, h, w)
        value = torch.tensor(fills, dtype=out.dtype, device=out.device).reshape(1, -1, 1, 1)
        out = torch.where(inside[:, None], out, value.expand(1, out.shape[1], 1, 1))
    return out


class _Band:
    """One axis's band ``weights (B, out, K)``, ``columns (B, out, K)`` over an input of ``n``
    pixels, laid out as CSR wants it: a row's columns distinct and in order — the window
    ``[first, first + k)`` holding its non-zero taps (``k`` ≥ ``K`` where a band's taps spread
    wider, as one read through a selection can; at most ``n``), each weight at its column's place
    in it (dropped taps add their 0 somewhere in it). A band whose every row is one weight exactly
    1 or none only selects: :attr:`source` ``(B, out)`` the input of each output (``None``
    otherwise), :attr:`identity` when it is output ``i`` = input ``i`` throughout."""

    def __init__(self, weights: Tensor, columns: Tensor, n: int) -> None:
        b, out, k = weights.shape
        nonzero = weights != 0
        # each row's first and last non-zero tap (a min over a few columns: torch's amin over a short
        # last axis is slow); rows without any: n and -1
        lo, hi = torch.where(nonzero, columns, n), torch.where(nonzero, columns, -1)
        first, last = lo[..., 0], hi[..., 0]
        for i in range(1, k):
            first, last = torch.minimum(first, lo[..., i]), torch.maximum(last, hi[..., i])
        self.present = last >= 0                                                                # (B, out): has taps
        spread = int((last - first).max()) + 1 if b and bool(self.present.any()) else 1
        self.n, self.k = n, min(max(k, spread), n)
        self.first = torch.clamp(first, max=n - self.k)[..., None]                           # (B, out, 1)
        offset = (columns - self.first).clamp_(0, self.k - 1)  # a dropped tap's 0: anywhere in the window
        self.weights = weights.new_zeros(b, out, self.k).scatter_add_(2, offset, weights)
        self.source: Tensor | None = None
        self.identity = False
        kept = self.weights != 0
        if b and bool(((self.weights == 1) | ~kept).all()) and bool((kept.sum(-1) <= 1).all()):
            self.source = self.first[..., 0] + kept.to(torch.uint8).argmax(-1)
            self.identity = (out == n and bool(self.present.all())
                             and bool((self.source == torch.arange(n, device=weights.device)).all()))

    def rows(self, x: Tensor, into: tuple[Tensor, int] | None = None) -> Tensor:
        """``x (B, C, n, W)`` resampled along ``n``: ``(B, C, out, W)``; with ``into``, a product's
        result is ``(batch, C, out, W)``, the other samples zeros. An identity returns ``x`` itself."""
        if self.identity:
            return x
        if self.source is not None:
            return self._select(x.contiguous())
        return self._product(x.contiguous(), into)

    def columns(self, x: Tensor) -> Tensor:
        """``x (B, C, H, n)`` resampled along its last axis: ``(B, C, H, out)`` row-major — a gather
        for a selection, else the rows' product between two transposed copies. An identity returns
        ``x`` itself."""
        if self.identity:
            return x
        b, c, h, _ = x.shape
        if self.source is None:
            return self._product(x.transpose(-1, -2).contiguous()).transpose(-1, -2).contiguous()
        out = self.source.shape[1]
        picked = torch.gather(x, 3, self.source[:, None, None, :].expand(b, c, h, out))
        if not bool(self.present.all()):
            picked.masked_fill_(~self.present[:, None, None, :], 0.0)
        return picked

    def _select(self, x: Tensor) -> Tensor:
        b, c, n, w = x.shape
        out = self.source.shape[1]
        rows = (torch.arange(b * c, device=x.device).view(b, c, 1) * n + self.source[:, None, :]).reshape(-1)
        picked = x.reshape(b * c * n, w).index_select(0, rows).view(b, c, out, w)
        if not bool(self.present.all()):
            picked.masked_fill_(~self.present[:, None, :, None], 0.0)
        return picked

    def _product(self, x: Tensor, into: tuple[Tensor, int] | None = None) -> Tensor:
        """One CSR matrix ``(B·C·out, B·C·n)`` with ``k`` entries a row times contiguous ``x`` as
        ``(B·C·n, W)``; ``into = (rows, batch)``: the other samples' rows of the matrix empty (so zeros)."""
        b, c, n, w = x.shape
        out_size, k = self.weights.shape[1], self.k
        total = b if into is None else into[1]
        if b == 0:
            return x.new_zeros(total, c, out_size, w)
        columns = self.first + torch.arange(k, device=x.device)
        # int32 indices where they fit (what MKL's sparse BLAS takes without converting them)
        index = torch.int32 if max(b, total) * c * max(n, out_size) * k < 2**31 else torch.int64
        planes = torch.arange(b * c, device=x.device).view(b, c, 1, 1) * n           # each plane's first row
        col = (planes + columns.view(b, 1, out_size, k)).view(-1).to(index)
        val = self.weights.to(x.dtype).view(b, 1, out_size, k).expand(b, c, out_size, k).reshape(-1)
        if into is None:
            crow = torch.arange(0, b * c * out_size * k + 1, k, device=x.device, dtype=index)
        else:  # k entries in each output row of a sample at one of the rows, none elsewhere
            present = torch.zeros(total, dtype=index, device=x.device).index_fill_(0, into[0], k)
            crow = torch.cat([present.new_zeros(1), present.repeat_interleave(c * out_size).cumsum(0, dtype=index)])
        m = torch.sparse_csr_tensor(crow, col, val, size=(total * c * out_size, b * c * n), check_invariants=False)
        dense = x.reshape(b * c * n, w)
        if torch.is_grad_enabled() and x.requires_grad:
            return torch.sparse.mm(m, dense).view(total, c, out_size, w)
        # addmm into a new tensor with beta = 0: torch.sparse.mm zero-fills its result and copies it once
        # more, which costs a CPU as much again as the product
        out = x.new_empty(total * c * out_size, w)
        return torch.addmm(out, m, dense, beta=0, out=out).view(total, c, out_size, w)
