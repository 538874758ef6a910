"""Host-side crop policy: boxes drawn per sample, planes sliced to an MCU-aligned window.

Box selection follows torchvision's ``RandomResizedCrop`` (ten tries of a uniform area fraction
and a log-uniform aspect ratio, rounding as torchvision does, a uniform position; then a centre
crop with the ratio clamped). The random numbers are counter-based — splitmix64 of
``(seed, epoch, index, draw)`` — so a sample's box depends only on those, whatever the batch,
worker or thread it lands in. The sampler runs in C (``csrc/crop.c``, ~0.1 µs a box: in numpy
it cost more per sample than copying the sample out of a dense cache); :func:`uniforms` is the
same random stream in numpy, which the tests feed to a transcription of torchvision's code.

The box stays exact; what is snapped to the MCU grid is the window of blocks cut from the planes
around it, reaching at least 2 luma pixels past the box so that libjpeg's chroma upsampling at
the box edge sees the real neighbouring chroma sample. The window is pure slicing of the
coefficient planes: no pixel work on the CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dctnet import _jpeg

__all__ = ["CenterCrop", "FullImage", "RandomResizedCrop", "mcu_window", "mcu_windows", "uniforms"]

Box = tuple[int, int, int, int]  # top, left, height, width in pixels

_M64_INT = (1 << 64) - 1
#: pixels a window reaches past its box: what 2x fancy chroma upsampling reads (one chroma sample)
MCU_MARGIN = 2


def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def uniforms(seed: int, epoch: int, index: np.ndarray | int, count: int) -> np.ndarray:
    """``float64 (B, count)`` uniforms in [0, 1): a pure function of (seed, epoch, index, k)."""
    idx = np.atleast_1d(np.asarray(index, dtype=np.uint64))
    with np.errstate(over="ignore"):
        key = _splitmix64(_splitmix64(np.uint64(seed & 0xFFFFFFFFFFFFFFFF)) ^ np.uint64(epoch & 0xFFFFFFFF))
        base = _splitmix64(key ^ (idx * np.uint64(0xD1B54A32D192ED03)))
        k = np.arange(count, dtype=np.uint64)
        bits = _splitmix64(base[:, None] + k[None, :] * np.uint64(0x9E3779B97F4A7C15))
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


@dataclass(frozen=True)
class RandomResizedCrop:
    """torchvision's ``RandomResizedCrop`` box distribution (the resize happens on the device)."""

    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)

    def __post_init__(self) -> None:
        for name in ("scale", "ratio"):
            v = getattr(self, name)
            if len(v) != 2 or not all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in v):
                raise ValueError(f"RandomResizedCrop: {name} must be two positive finite numbers, not {v!r}")

    def boxes(self, heights: np.ndarray, widths: np.ndarray, seed: int, epoch: int, index: np.ndarray) -> np.ndarray:
        """``int64 (B, 4)`` boxes (top, left, height, width) for images of ``heights``/``widths``,
        samples ``index``: per try ``u[4t:4t+4]`` = (area, log-ratio, top, left) of :func:`uniforms`."""
        index = np.ascontiguousarray(np.atleast_1d(index), np.int64)
        if np.shape(heights) != index.shape or np.shape(widths) != index.shape:
            heights, widths = np.broadcast_to(heights, index.shape), np.broadcast_to(widths, index.shape)
        heights, widths = np.ascontiguousarray(heights, np.int64), np.ascontiguousarray(widths, np.int64)
        if min(heights.min(initial=1), widths.min(initial=1)) <= 0:
            raise ValueError("RandomResizedCrop: image sizes must be positive")
        out = np.empty((len(index), 4), np.int64)
        _jpeg.rrc_boxes(seed & _M64_INT, epoch & _M64_INT, index, heights, widths, self.scale[0], self.scale[1],
                        self.ratio[0], self.ratio[1], math.log(self.ratio[0]), math.log(self.ratio[1]), out)
        return out

    def box(self, height: int, width: int, seed: int, epoch: int, index: int) -> Box:
        """:meth:`boxes` for one sample."""
        return tuple(int(v) for v in self.boxes(np.array([height]), np.array([width]), seed, epoch, np.array([index]))[0])


@dataclass(frozen=True)
class CenterCrop:
    """Eval crop: the centred square of side ``crop_fraction · min(H, W)`` (torchvision's
    ``Resize(256) + CenterCrop(224)`` is ``crop_fraction = 0.875``), as torchvision rounds it."""

    crop_fraction: float = 0.875

    def boxes(self, heights: np.ndarray, widths: np.ndarray, seed: int = 0, epoch: int = 0,
              index: np.ndarray | None = None) -> np.ndarray:
        h = np.asarray(heights, np.int64)
        w = np.asarray(widths, np.int64)
        side = np.maximum(1, np.rint(np.minimum(h, w) * self.crop_fraction).astype(np.int64))
        return np.stack([np.rint((h - side) / 2.0).astype(np.int64), np.rint((w - side) / 2.0).astype(np.int64),
                         side, side], axis=1)

    def box(self, height: int, width: int, seed: int = 0, epoch: int = 0, index: int = 0) -> Box:
        side = max(1, round(min(height, width) * self.crop_fraction))
        return round((height - side) / 2.0), round((width - side) / 2.0), side, side


@dataclass(frozen=True)
class FullImage:
    """The whole image (no crop)."""

    def boxes(self, heights: np.ndarray, widths: np.ndarray, seed: int = 0, epoch: int = 0,
              index: np.ndarray | None = None) -> np.ndarray:
        h = np.asarray(heights, np.int64)
        return np.stack([np.zeros_like(h), np.zeros_like(h), h, np.asarray(widths, np.int64)], axis=1)

    def box(self, height: int, width: int, seed: int = 0, epoch: int = 0, index: int = 0) -> Box:
        return 0, 0, height, width


def draw_boxes(crop, heights, widths, seed: int, epoch, index) -> np.ndarray:
    """Boxes ``(B, 4)`` for samples ``index`` of the given sizes under ``crop``. ``epoch``: one
    epoch, or one per sample (a batch may straddle epochs): one vectorised draw per epoch present."""
    index = np.atleast_1d(index)
    if np.shape(heights) != index.shape or np.shape(widths) != index.shape:
        heights, widths = np.broadcast_to(heights, index.shape), np.broadcast_to(widths, index.shape)
    if np.ndim(epoch) == 0:
        return crop.boxes(heights, widths, seed, int(epoch), index)
    epochs = np.asarray(epoch, np.int64)
    if len(epochs) and epochs.min() == epochs.max():  # the usual batch: one epoch, one draw
        return crop.boxes(heights, widths, seed, int(epochs[0]), index)
    boxes = np.empty((len(index), 4), np.int64)
    for e in np.unique(epochs):  # normally one
        m = epochs == e
        boxes[m] = crop.boxes(heights[m], widths[m], seed, int(e), index[m])
    return boxes


def mcu_windows(boxes: np.ndarray, heights: np.ndarray, widths: np.ndarray, mcu: int | tuple[Any, Any] = 16,
                margin: int = MCU_MARGIN) -> np.ndarray:
    """MCU rows/cols ``(B, 4)`` = (r0, r1, c0, c1) covering each box plus ``margin`` pixels, inside the image.

    ``mcu`` is the MCU size in pixels: one int for square MCUs (16: 4:2:0), or ``(mcu_h, mcu_w)``,
    each an int or a per-sample array (``8·v_max``, ``8·h_max`` of each image's layout). Two
    pixels are what 2× fancy chroma upsampling reaches: one chroma sample each side."""
    mh, mw = (mcu, mcu) if isinstance(mcu, int) else mcu
    mh, mw = np.asarray(mh, np.int64), np.asarray(mw, np.int64)
    top, left, h, w = boxes.T
    rows, cols = -(-np.asarray(heights) // mh), -(-np.asarray(widths) // mw)
    r0 = np.maximum(0, (top - margin) // mh)
    c0 = np.maximum(0, (left - margin) // mw)
    r1 = np.minimum(rows, -(-(top + h + margin) // mh))
    c1 = np.minimum(cols, -(-(left + w + margin) // mw))
    return np.stack([r0, r1, c0, c1], axis=1).astype(np.int64)


def mcu_window(box: Box, height: int, width: int, mcu: int = 16, margin: int = MCU_MARGIN) -> tuple[int, int, int, int]:
    """:func:`mcu_windows` for one box."""
    return tuple(int(v) for v in mcu_windows(np.array([box]), np.array([height]), np.array([width]), mcu, margin)[0])
