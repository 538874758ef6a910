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

__all__ = ["JpegBatch", "SAMPLING_420", "crops_to_rgb", "crops_to_coefficients"]

SAMPLING_420 = ((2, 2), (1, 1), (1, 1))


@dataclass
class JpegBatch:
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

    def tensors(self) -> list[Tensor]:
        return [getattr(self, name) for name in self._TENSORS]

    def pin_memory(self) -> "JpegBatch":
        """Page-locked copies (``DataLoader(pin_memory=True)`` calls this)."""
        return replace(self, **{n: getattr(self, n).pin_memory() for n in self._TENSORS})

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "JpegBatch":
        return replace(self, **{n: getattr(self, n).to(device, non_blocking=non_blocking) for n in self._TENSORS})


def crops_to_rgb(batch: JpegBatch, size: tuple[int, int], *, upsampling: str = "fancy") -> Tensor:
    """Decode the windows on the device (block IDCT, libjpeg's chroma upsampling, colour) and
    resize every crop box to ``size``: float RGB ``(B, 3, *size)`` in [0, 1] — what torchvision's
    ``resized_crop(decoded, box, size, antialias=True)`` gives on the decoded image."""
    rgb = F.to_rgb([batch.y, batch.c[:, 0], batch.c[:, 1]], SAMPLING_420, batch.valid, upsampling=upsampling)
    return F.resized_crop(rgb, batch.boxes, size).clamp(0.0, 1.0)


def crops_to_coefficients(batch: JpegBatch, size: tuple[int, int], *, upsampling: str = "fancy") -> Tensor:
    """:func:`crops_to_rgb`, back in the DCT domain: the coefficient image ``(B, 3, h/8, w/8, 64)``
    (Y, Cb, Cr on the luma grid, i.e. chroma upsampled) that the DCT-domain transforms take."""
    if size[0] % 8 or size[1] % 8:
        raise ValueError(f"size must be a multiple of 8 for the DCT domain, got {size}")
    return TF.from_rgb(crops_to_rgb(batch, size, upsampling=upsampling))
