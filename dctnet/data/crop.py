"""Host-side crop policy: boxes drawn per sample, planes sliced to an MCU-aligned window.

Box selection follows torchvision's ``RandomResizedCrop`` (ten tries of a uniform area fraction
and a log-uniform aspect ratio, rounding as torchvision does, a uniform position; then a centre
crop with the ratio clamped). The random numbers are counter-based — splitmix64 of
``(seed, epoch, index, draw)`` — so a sample's box depends only on those, whatever the batch,
worker or thread it lands in, and a whole batch is drawn in a few vectorised numpy operations.

The box stays exact; what is snapped to the MCU grid is the window of blocks cut from the planes
around it, reaching at least 2 luma pixels past the box so that libjpeg's chroma upsampling at
the box edge sees the real neighbouring chroma sample. The window is pure slicing of the
coefficient planes: no pixel work on the CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["CenterCrop", "FullImage", "RandomResizedCrop", "mcu_window", "mcu_windows", "uniforms"]

Box = tuple[int, int, int, int]  # top, left, height, width in pixels

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


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


_MASK = (1 << 64) - 1


def _splitmix64_int(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def uniform_scalar(seed: int, epoch: int, index: int, k: int) -> float:
    """One of :func:`uniforms`' numbers, in plain Python (same bits): for per-sample draws, where
    a dozen numpy calls on one-element arrays would cost more than the decode savings."""
    key = _splitmix64_int(_splitmix64_int(seed & _MASK) ^ (epoch & 0xFFFFFFFF))
    base = _splitmix64_int(key ^ ((index * 0xD1B54A32D192ED03) & _MASK))
    bits = _splitmix64_int((base + k * 0x9E3779B97F4A7C15) & _MASK)
    return (bits >> 11) * (1.0 / (1 << 53))


def _exp(x: np.ndarray) -> np.ndarray:
    # math.exp, not np.exp: numpy's SIMD exp may differ in the last bit, and the scalar path
    # below must give the very same boxes
    return np.array([math.exp(v) for v in x.ravel().tolist()]).reshape(x.shape)


@dataclass(frozen=True)
class RandomResizedCrop:
    """torchvision's ``RandomResizedCrop`` box distribution (the resize happens on the device)."""

    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    draws = 40  # 10 tries × (area, ratio, top, left)

    def boxes(self, heights: np.ndarray, widths: np.ndarray, u: np.ndarray) -> np.ndarray:
        """``int64 (B, 4)`` boxes for images of ``heights``/``widths`` from uniforms ``u (B, 40)``."""
        h_img = np.asarray(heights, np.int64)[:, None]
        w_img = np.asarray(widths, np.int64)[:, None]
        u = u.reshape(-1, 10, 4)
        area = (h_img * w_img) * (self.scale[0] + (self.scale[1] - self.scale[0]) * u[..., 0])
        lo, hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        aspect = _exp(lo + (hi - lo) * u[..., 1])
        w = np.rint(np.sqrt(area * aspect)).astype(np.int64)  # round half to even, like Python's round
        h = np.rint(np.sqrt(area / aspect)).astype(np.int64)
        ok = (w > 0) & (w <= w_img) & (h > 0) & (h <= h_img)
        first = np.argmax(ok, axis=1)
        rows = np.arange(len(first))
        found = ok[rows, first]
        h, w = h[rows, first], w[rows, first]
        top = np.floor(u[rows, first, 2] * (h_img[:, 0] - h + 1)).astype(np.int64)
        left = np.floor(u[rows, first, 3] * (w_img[:, 0] - w + 1)).astype(np.int64)
        # fallback: centre crop with the aspect ratio clamped to the range
        in_ratio = w_img[:, 0] / h_img[:, 0]
        fw = np.where(in_ratio < min(self.ratio), w_img[:, 0],
                      np.where(in_ratio > max(self.ratio), np.rint(h_img[:, 0] * max(self.ratio)), w_img[:, 0]))
        fh = np.where(in_ratio < min(self.ratio), np.rint(w_img[:, 0] / min(self.ratio)), h_img[:, 0])
        fw, fh = fw.astype(np.int64), fh.astype(np.int64)
        h = np.where(found, h, fh)
        w = np.where(found, w, fw)
        top = np.where(found, top, (h_img[:, 0] - fh) // 2)
        left = np.where(found, left, (w_img[:, 0] - fw) // 2)
        return np.stack([top, left, h, w], axis=1)

    def box(self, height: int, width: int, seed: int, epoch: int, index: int) -> Box:
        """:meth:`boxes` for one sample, in plain Python (identical result)."""
        area = height * width
        lo, hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        for t in range(10):
            u = [uniform_scalar(seed, epoch, index, 4 * t + k) for k in range(4)]
            target = area * (self.scale[0] + (self.scale[1] - self.scale[0]) * u[0])
            aspect = math.exp(lo + (hi - lo) * u[1])
            w = int(round(math.sqrt(target * aspect)))
            h = int(round(math.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                return math.floor(u[2] * (height - h + 1)), math.floor(u[3] * (width - w + 1)), h, w
        in_ratio = width / height
        if in_ratio < min(self.ratio):
            w, h = width, round(width / min(self.ratio))
        elif in_ratio > max(self.ratio):
            h, w = height, round(height * max(self.ratio))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w


@dataclass(frozen=True)
class CenterCrop:
    """Eval crop: the centred square of side ``crop_fraction · min(H, W)`` (torchvision's
    ``Resize(256) + CenterCrop(224)`` is ``crop_fraction = 0.875``), as torchvision rounds it."""

    crop_fraction: float = 0.875
    draws = 0

    def boxes(self, heights: np.ndarray, widths: np.ndarray, u: np.ndarray | None = None) -> np.ndarray:
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

    draws = 0

    def boxes(self, heights: np.ndarray, widths: np.ndarray, u: np.ndarray | None = None) -> np.ndarray:
        h = np.asarray(heights, np.int64)
        return np.stack([np.zeros_like(h), np.zeros_like(h), h, np.asarray(widths, np.int64)], axis=1)

    def box(self, height: int, width: int, seed: int = 0, epoch: int = 0, index: int = 0) -> Box:
        return 0, 0, height, width


def draw_boxes(crop, heights, widths, seed: int, epoch: int, index) -> np.ndarray:
    """Boxes ``(B, 4)`` for samples ``index`` of the given sizes under ``crop`` (one sample: the
    scalar path, same numbers)."""
    if np.ndim(index) == 0 or np.size(index) == 1:
        return np.array([crop.box(int(np.ravel(heights)[0]), int(np.ravel(widths)[0]), seed, epoch,
                                  int(np.ravel(index)[0]))], np.int64)
    u = uniforms(seed, epoch, index, crop.draws) if crop.draws else None
    return crop.boxes(np.atleast_1d(heights), np.atleast_1d(widths), u)


def mcu_windows(boxes: np.ndarray, heights: np.ndarray, widths: np.ndarray, mcu: int = 16,
                margin: int = 2) -> np.ndarray:
    """MCU rows/cols ``(B, 4)`` = (r0, r1, c0, c1) covering each box plus ``margin`` pixels, inside the image.

    Two pixels are what 2× fancy chroma upsampling reaches: one chroma sample each side."""
    top, left, h, w = boxes.T
    rows, cols = -(-np.asarray(heights) // mcu), -(-np.asarray(widths) // mcu)
    r0 = np.maximum(0, (top - margin) // mcu)
    c0 = np.maximum(0, (left - margin) // mcu)
    r1 = np.minimum(rows, -(-(top + h + margin) // mcu))
    c1 = np.minimum(cols, -(-(left + w + margin) // mcu))
    return np.stack([r0, r1, c0, c1], axis=1).astype(np.int64)


def mcu_window(box: Box, height: int, width: int, mcu: int = 16, margin: int = 2) -> tuple[int, int, int, int]:
    """:func:`mcu_windows` for one box."""
    return tuple(int(v) for v in mcu_windows(np.array([box]), np.array([height]), np.array([width]), mcu, margin)[0])
