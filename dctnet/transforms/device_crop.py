"""The first device step: decode each layout group of a :class:`dctnet.batch.JpegBatch`
batched — block IDCT, libjpeg's chroma upsampling, colour (CMYK/YCCK as Pillow does) — cut and
resize every crop box with torchvision's antialiased bilinear or bicubic weights, and merge the
groups back into one tensor in batch order; everything after it sees one uniform tensor.

Two geometries, as the batch says (:attr:`dctnet.batch.JpegBatch.resize`): crop then resize
(torchvision's ``resized_crop``: training crops, :class:`dctnet.data.CenterCrop`), or resize then
crop (timm's and torchvision's eval ``Resize`` + ``CenterCrop``: :class:`dctnet.data.ResizeCenterCrop`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from dctnet.kernels import dct as F
from dctnet import image as IM
from dctnet import resize as RS
from dctnet.batch import JpegBatch, PackedJpegBatch, PlaneGroup, SparseJpegBatch, as_jpeg_batch
from dctnet.kernels import coefficients as TF

__all__ = ["crops_to_coefficients", "crops_to_rgb", "native_chroma"]


def _extent(batch: JpegBatch, i: int) -> tuple[int, int]:
    """``(H, W)`` in pixels to decode group ``i`` to, host ints: the largest valid size of its
    samples (:attr:`JpegBatch.extents`, read on the host where the batch was built), else its whole
    MCU grid (read off the plane shapes). Never ``valid.max()`` on the device: that is a host sync
    a group, the GPU's queue drained before the next kernel could be launched."""
    g = batch.groups[i]
    extent = batch.extents[i] if batch.extents is not None else None
    return extent if extent is not None else IM.grid_size(g.planes, g.sampling)


def _merge(batch: JpegBatch, per_group: Callable[..., Tensor], shape: tuple[int, ...]) -> Tensor:
    """Run ``per_group(group, extent, valid, boxes, resize, into)`` on each layout group (``extent``:
    :func:`_extent`) and merge the outputs ``(n, *shape)`` into one ``(B, *shape)`` tensor in
    batch order (no copy for one group). On a CPU the largest group is asked for the whole batch
    (``into = (rows, B)``: its crops at its rows; :func:`dctnet.resize.banded_resample`) and the
    others are copied into it, rather than every group into a new batch."""
    if len(batch.groups) == 1:  # the common case: rows are 0..B-1 in order (collate's contract)
        g = batch.groups[0]
        return per_group(g, _extent(batch, 0), batch.valid, batch.boxes, batch.resize, None)
    if not batch.groups:
        return torch.zeros((0, *shape), device=batch.valid.device)

    def run(i: int, into: tuple[Tensor, int] | None = None) -> Tensor:
        g = batch.groups[i]
        return per_group(g, _extent(batch, i), batch.valid[g.rows], batch.boxes[g.rows],
                         None if batch.resize is None else batch.resize[g.rows], into)

    base = max(range(len(batch.groups)), key=lambda i: len(batch.groups[i]))
    rows = batch.groups[base].rows
    # host-side rows only (a CPU batch): reading a device tensor's order would be a host sync
    ordered = rows.device.type == "cpu" and bool((rows[1:] > rows[:-1]).all())
    first = run(base, (rows, len(batch)) if ordered else None)
    if first.shape[0] == len(batch) and len(batch) != len(rows):  # the group filled the batch at its rows
        out = first
    else:
        out = first.new_empty((len(batch), *shape))
        out.index_copy_(0, rows, first)
    for i, g in enumerate(batch.groups):
        if i != base:
            out.index_copy_(0, g.rows, run(i))
    return out


def crops_to_rgb(batch: JpegBatch | PackedJpegBatch | SparseJpegBatch, size: tuple[int, int], *, upsampling: str = "fancy",
                 exact: bool = False, interpolation: str = "bilinear",
                 fill: float | tuple[float, float, float] = 0.0, antialias: bool | Tensor = True,
                 flip: tuple[Tensor, Tensor] | None = None, through: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """Decode the windows on the device, one batched decode per layout group (block IDCT,
    libjpeg's chroma upsampling, colour; CMYK/YCCK as Pillow does) and resize every crop box to
    ``size`` = (h, w): float RGB ``(B, 3, h, w)`` in [0, 1], in batch order.

    The geometry is the batch's (:attr:`dctnet.batch.JpegBatch.resize`): torchvision's
    ``resized_crop(decoded, box, size, interpolation, antialias=True)`` of each box (training
    crops), or ``resize`` to the batch's per-sample size then ``center_crop(size)`` of the whole
    decoded image (:class:`dctnet.data.ResizeCenterCrop`, whose ``size`` must be this one), where
    ``fill`` (RGB in [0, 1]) is the padding of a crop larger than the resized image
    (``ResizeCenterCrop.fill``). ``interpolation``: ``"bilinear"`` or ``"bicubic"`` (PIL's,
    ``a = −0.5``), antialiased, with torch's and PIL's weights (:func:`dctnet.resize.resize_matrices`).

    The result is clamped to [0, 1]. Bicubic overshoots the input's range near edges;
    torchvision's float tensors keep the overshoot, but PIL's and a decoder's 8-bit output
    clamps it, and so does this. ``exact``: decode in libjpeg's integer arithmetic
    (:func:`dctnet.image.to_rgb`), so the crops are those of Pillow's very pixels.

    The detection step's geometry (each as :func:`dctnet.resize.resized_crop` takes it, per sample
    in batch order): ``antialias`` (``False`` or a ``bool (B,)`` mask: torch's plain bilinear, with
    the batch's ``resize``), ``flip = (flips bool (B, 2), sizes int64 (B, 2))`` (rows ``[0,
    sizes[b, 0])`` of the samples with ``flips[b, 0]`` mirrored, columns likewise), ``through =
    (rows (B, h), cols (B, w))`` (the boxes are in a canvas selected from the decoded image by these
    index maps, −1 a zero pixel). A :class:`PackedJpegBatch` or :class:`SparseJpegBatch` is expanded
    first (:func:`as_jpeg_batch`)."""
    batch = as_jpeg_batch(batch)
    if isinstance(antialias, Tensor) and antialias.device.type == "cpu":  # a host mask: read here, moved if mixed
        antialias = (True if bool(antialias.all()) else False if not bool(antialias.any())
                     else antialias.to(batch.valid.device, non_blocking=True))

    def decode(g: PlaneGroup, extent: tuple[int, int], valid: Tensor, boxes: Tensor, resize: Tensor | None,
               into: tuple[Tensor, int] | None) -> Tensor:
        # decoded to a host-known size (the group's extent, else its grid), never to valid.max() read
        # back from the device. Pixels past a sample's own valid size are padding no resize tap reads:
        # taps are clipped to the box, which lies in the valid window (training crops), and the eval
        # window (``resize``) holds every tap of the kept crop (dctnet.resize.resize_matrices)
        # a CPU's training crops: decoded column by column, which its sparse resize reads without a transposed copy
        columns = resize is None and not exact and RS.use_band(valid)
        rgb = IM.to_rgb(list(g.planes), g.sampling, valid, color_space=g.color_space, upsampling=upsampling,
                       exact=exact, out_size=extent, column_major=columns)

        def mine(t: Tensor) -> Tensor:  # this group's samples (one group: rows 0..B-1 in order)
            return t if len(batch.groups) == 1 else t[g.rows]

        # on the band path, the batch's tensor with this group at its rows where that is free (see _merge)
        return RS.resized_crop(rgb, boxes, size, interpolation=interpolation, resize=resize, fill=fill,
                               antialias=mine(antialias) if isinstance(antialias, Tensor) else antialias,
                               flip=None if flip is None else (mine(flip[0]), mine(flip[1])),
                               through=None if through is None else (mine(through[0]), mine(through[1])), into=into)

    return _merge(batch, decode, (3, *size)).clamp_(0.0, 1.0)  # a new tensor: _merge's, or the resize's


def crops_to_coefficients(batch: JpegBatch | PackedJpegBatch | SparseJpegBatch, size: tuple[int, int], *,
                          upsampling: str = "fancy", exact: bool = False, chroma: str = "upsampled",
                          interpolation: str = "bilinear",
                          fill: float | tuple[float, float, float] = 0.0) -> Tensor | tuple[Tensor, Tensor]:
    """:func:`crops_to_rgb` (``interpolation``, ``fill``: as there), back in the DCT domain, for
    DCT-domain transforms and stems.

    ``chroma="upsampled"``: the coefficient image ``(B, 3, h/8, w/8, 64)`` (Y, Cb, Cr on the luma
    grid). ``chroma="native"``: ``(y, c)`` with ``y (B, h/8, w/8, 64)`` and 4:2:0 chroma
    ``c (B, 2, h/16, w/16, 64)``, the input of ``chroma="native"`` stems; the chroma is the 2×2 box
    average of the upsampled chroma, computed exactly in the DCT domain
    (:func:`dctnet.kernels.dct.box_downsample_dct`) — a JPEG encoder's 4:2:0 downsampling."""
    if size[0] % 8 or size[1] % 8:
        raise ValueError(f"size must be a multiple of 8 for the DCT domain, got {size}")
    if chroma not in ("upsampled", "native"):
        raise ValueError(f"chroma must be 'upsampled' or 'native', not {chroma!r}")
    if chroma == "native" and (size[0] % 16 or size[1] % 16):
        raise ValueError(f"size must be a multiple of 16 for native 4:2:0 chroma, got {size}")
    rgb = crops_to_rgb(batch, size, upsampling=upsampling, exact=exact, interpolation=interpolation, fill=fill)
    x = TF.coefficient_image_from_rgb(rgb)
    return x if chroma == "upsampled" else native_chroma(x)


def native_chroma(x: Tensor) -> tuple[Tensor, Tensor]:
    """Coefficient image ``(B, 3, Hb, Wb, 64)`` → ``(y, c)``: luma ``(B, Hb, Wb, 64)`` and 4:2:0
    chroma ``(B, 2, Hb/2, Wb/2, 64)``, the 2×2 box average computed exactly in the DCT domain
    (:func:`dctnet.kernels.dct.box_downsample_dct`)."""
    return x[:, 0], F.box_downsample_dct(x[:, 1:], 2, 2)
