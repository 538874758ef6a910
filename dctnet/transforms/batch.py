"""The batch the loaders hand to the device, and its first device step (crop + resize).

``JpegBatch`` holds int16 coefficient planes exactly as read (4:2:0 layout; grayscale images
carry zero chroma, which decodes to R = G = B = Y), each sample sliced on the host to an
MCU-aligned window around its crop box and zero-padded to a common grid. The crop box itself is
exact (torchvision's), given in pixels relative to the window, so no snapping bias enters the
augmentation distribution; the device step cuts and resizes it with torchvision's antialiased
bilinear weights.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from dctnet import functional as F
from dctnet.transforms import functional as TF

__all__ = ["JpegBatch", "SAMPLING_420", "SparseJpegBatch", "crops_to_rgb", "crops_to_coefficients", "expand_sparse"]

SAMPLING_420 = ((2, 2), (1, 1), (1, 1))


class _TensorFields:
    """``tensors`` / ``pin_memory`` / ``to`` over the tensor fields named in ``_TENSORS``."""

    _TENSORS: tuple[str, ...] = ()

    def tensors(self) -> list[Tensor]:
        return [getattr(self, n) for n in self._TENSORS]

    def pin_memory(self):
        """Page-locked copies (``DataLoader(pin_memory=True)`` calls this)."""
        return replace(self, **{n: getattr(self, n).pin_memory() for n in self._TENSORS})

    def to(self, device: torch.device | str, non_blocking: bool = False):
        return replace(self, **{n: getattr(self, n).to(device, non_blocking=non_blocking) for n in self._TENSORS})


@dataclass
class JpegBatch(_TensorFields):
    """A collated batch of cropped coefficient planes (host or device).

    Attributes:
        y: ``int16 (B, Hb, Wb, 64)`` luma planes (dequantized), zero-padded.
        c: ``int16 (B, 2, Hb/2, Wb/2, 64)`` Cb, Cr planes.
        valid: ``int64 (B, 2)`` (height, width) in pixels of real image content in each window
            (the image edge, where decoders replicate samples); the rest is padding.
        boxes: ``int64 (B, 4)`` crop box (top, left, height, width) in pixels within the window.
        labels: ``int64 (B,)`` class indices.
        index: ``int64 (B,)`` dataset indices of the samples (for bookkeeping and tests).
        skipped: ``(index, name, reason)`` of samples the loader dropped under ``on_error="skip"``.
    """

    y: Tensor
    c: Tensor
    valid: Tensor
    boxes: Tensor
    labels: Tensor
    index: Tensor
    skipped: tuple = field(default=())

    _TENSORS = ("y", "c", "valid", "boxes", "labels", "index")

    def __len__(self) -> int:
        return self.y.shape[0]


def crops_to_rgb(batch: JpegBatch, size: tuple[int, int], *, upsampling: str = "fancy", exact: bool = False) -> Tensor:
    """Decode the windows on the device (block IDCT, libjpeg's chroma upsampling, colour) and
    resize every crop box to ``size``: float RGB ``(B, 3, *size)`` in [0, 1] — what torchvision's
    ``resized_crop(decoded, box, size, antialias=True)`` gives on the decoded image. ``exact``:
    decode in libjpeg's integer arithmetic (:func:`dctnet.functional.to_rgb`), so the crops are
    those of Pillow's very pixels."""
    rgb = F.to_rgb([batch.y, batch.c[:, 0], batch.c[:, 1]], SAMPLING_420, batch.valid, upsampling=upsampling,
                   exact=exact)
    return F.resized_crop(rgb, batch.boxes, size).clamp(0.0, 1.0)


def crops_to_coefficients(batch: JpegBatch, size: tuple[int, int], *, upsampling: str = "fancy",
                          exact: bool = False) -> Tensor:
    """:func:`crops_to_rgb`, back in the DCT domain: the coefficient image ``(B, 3, h/8, w/8, 64)``
    (Y, Cb, Cr on the luma grid, i.e. chroma upsampled) that the DCT-domain transforms take."""
    if size[0] % 8 or size[1] % 8:
        raise ValueError(f"size must be a multiple of 8 for the DCT domain, got {size}")
    return TF.from_rgb(crops_to_rgb(batch, size, upsampling=upsampling, exact=exact))


@dataclass
class SparseJpegBatch(_TensorFields):
    """A batch still in the cache's sparse form (see :mod:`dctnet.data.sparse`): the host only
    concatenates compressed records; :func:`expand_sparse` builds the :class:`JpegBatch` on the
    device. Records are whole images (4:2:0 YCbCr, or gray with ``blocks[:, 1:] = 0``).

    Attributes:
        masks ``int64 (NB,)``, values ``int8 (NV,)``, escapes ``int16 (NE,)``: concatenated records.
        tables: ``int32 (B, 3, 64)`` per-sample component tables.
        blocks: ``int64 (B, 3, 2)`` plane sizes; offsets: ``int64 (B, 3)`` first block of each plane.
        windows: ``int64 (B, 4)`` MCU window (r0, r1, c0, c1); grid: ``int64 (2,)`` luma grid (Hb, Wb).
        valid, boxes, labels, index: as :class:`JpegBatch`.
    """

    masks: Tensor
    values: Tensor
    escapes: Tensor
    tables: Tensor
    blocks: Tensor
    offsets: Tensor
    windows: Tensor
    grid: Tensor
    valid: Tensor
    boxes: Tensor
    labels: Tensor
    index: Tensor

    _TENSORS = ("masks", "values", "escapes", "tables", "blocks", "offsets", "windows", "grid", "valid", "boxes",
                "labels", "index")

    def __len__(self) -> int:
        return self.labels.shape[0]


def _window_blocks(dense: Tensor, offset: Tensor, bh: Tensor, bw: Tensor, r0: Tensor, rows: Tensor, c0: Tensor,
                   cols: Tensor, out_h: int, out_w: int) -> Tensor:
    """Gather each sample's window of a plane from the expanded blocks: ``(B, out_h, out_w, 64)``,
    zero outside the window and the plane."""
    r = torch.arange(out_h, device=dense.device)[None, :]
    c = torch.arange(out_w, device=dense.device)[None, :]
    src_r, src_c = r0[:, None] + r, c0[:, None] + c
    ok_r = (r < rows[:, None]) & (src_r < bh[:, None])
    ok_c = (c < cols[:, None]) & (src_c < bw[:, None])
    ok = ok_r[:, :, None] & ok_c[:, None, :]
    idx = offset[:, None, None] + src_r[:, :, None] * bw[:, None, None] + src_c[:, None, :]
    idx = torch.where(ok, idx, torch.zeros_like(idx))
    return dense[idx] * ok[..., None].to(dense.dtype)


def expand_sparse(batch: SparseJpegBatch) -> JpegBatch:
    """Expand a :class:`SparseJpegBatch` on its device into the :class:`JpegBatch` the host path
    would have built (bit-identical): batched torch, no per-sample loop."""
    from dctnet.data.sparse import expand_torch

    nb = batch.masks.shape[0]
    b = len(batch)
    counts = (batch.blocks[:, :, 0] * batch.blocks[:, :, 1])                      # (B, 3)
    owner = torch.repeat_interleave(torch.arange(b * 3, device=batch.masks.device), counts.reshape(-1), output_size=nb)
    dense = expand_torch(batch.masks, batch.values, batch.escapes, batch.tables.reshape(b * 3, 64)[owner])
    hb, wb = int(batch.grid[0]), int(batch.grid[1])
    r0, r1, c0, c1 = batch.windows.unbind(1)
    y = _window_blocks(dense, batch.offsets[:, 0], batch.blocks[:, 0, 0], batch.blocks[:, 0, 1], 2 * r0,
                       2 * (r1 - r0), 2 * c0, 2 * (c1 - c0), hb, wb)
    cs = [_window_blocks(dense, batch.offsets[:, k], batch.blocks[:, k, 0], batch.blocks[:, k, 1], r0, r1 - r0, c0,
                         c1 - c0, hb // 2, wb // 2) for k in (1, 2)]
    return JpegBatch(y=y, c=torch.stack(cs, 1), valid=batch.valid, boxes=batch.boxes, labels=batch.labels,
                     index=batch.index)
