"""Host-side crop policy: boxes drawn per sample, planes sliced to an MCU-aligned window.

Box selection is torchvision's (``RandomResizedCrop`` v2: ten tries of a uniform area fraction
and a log-uniform aspect ratio, then a centre crop with the ratio clamped), drawing from a
``torch.Generator`` in the same order, so the same seed gives the same boxes as torchvision. The
box stays exact; what is snapped to the MCU grid is the window of blocks cut from the planes
around it (plus a one-MCU margin so chroma upsampling at the box edge sees real neighbours).
The window is pure slicing of the coefficient planes: no pixel work on the CPU.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import torch

__all__ = ["CenterCrop", "FullImage", "RandomResizedCrop", "mcu_window"]

Box = tuple[int, int, int, int]  # top, left, height, width in pixels


_local = threading.local()


def _scratch() -> tuple[torch.Tensor, torch.Tensor]:
    """Per-thread one-element tensors to draw into (allocating one per draw costs more than the
    draw); same generator calls, so the same numbers as torchvision's."""
    pair = getattr(_local, "pair", None)
    if pair is None:
        pair = _local.pair = (torch.empty(1), torch.empty(1, dtype=torch.long))
    return pair


@dataclass(frozen=True)
class RandomResizedCrop:
    """torchvision's ``RandomResizedCrop`` box distribution (the resize happens on the device)."""

    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)

    def __call__(self, height: int, width: int, gen: torch.Generator) -> Box:
        area = height * width
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        f, n = _scratch()
        for _ in range(10):
            target_area = area * f.uniform_(self.scale[0], self.scale[1], generator=gen).item()
            aspect = math.exp(f.uniform_(log_ratio[0], log_ratio[1], generator=gen).item())
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                i = int(torch.randint(0, height - h + 1, (1,), generator=gen, out=n).item())
                j = int(torch.randint(0, width - w + 1, (1,), generator=gen, out=n).item())
                return i, j, h, w
        in_ratio = width / height
        if in_ratio < min(self.ratio):
            w, h = width, int(round(width / min(self.ratio)))
        elif in_ratio > max(self.ratio):
            h, w = height, int(round(height * max(self.ratio)))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w


@dataclass(frozen=True)
class CenterCrop:
    """Eval crop: the centred square of side ``crop_fraction · min(H, W)`` (torchvision's
    ``Resize(256) + CenterCrop(224)`` is ``crop_fraction = 0.875``), as torchvision rounds it."""

    crop_fraction: float = 0.875

    def __call__(self, height: int, width: int, gen: torch.Generator | None = None) -> Box:
        side = max(1, int(round(min(height, width) * self.crop_fraction)))
        return int(round((height - side) / 2.0)), int(round((width - side) / 2.0)), side, side


@dataclass(frozen=True)
class FullImage:
    """The whole image (no crop)."""

    def __call__(self, height: int, width: int, gen: torch.Generator | None = None) -> Box:
        return 0, 0, height, width


def mcu_window(box: Box, height: int, width: int, mcu: int = 16, margin: int = 1) -> tuple[int, int, int, int]:
    """MCU rows/cols ``(r0, r1, c0, c1)`` covering ``box`` plus ``margin`` MCUs, inside the image."""
    top, left, h, w = box
    rows, cols = -(-height // mcu), -(-width // mcu)
    r0 = max(0, top // mcu - margin)
    c0 = max(0, left // mcu - margin)
    r1 = min(rows, -(-(top + h) // mcu) + margin)
    c1 = min(cols, -(-(left + w) // mcu) + margin)
    return r0, r1, c0, c1
