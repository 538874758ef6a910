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

Two kinds of policy:

- **crop, then resize** (:class:`RandomResizedCrop`, :class:`CenterCrop`, :class:`FullImage`):
  torchvision's ``resized_crop`` cuts the box first, so the resize filter never reads past it; the
  2-pixel margin is for chroma upsampling only.
- **resize, then crop** (:class:`ResizeCenterCrop`, timm's and torchvision's eval transform):
  the whole image is resized and a centre crop of the output kept. That is a fractional box of
  source pixels whose filter taps, clipped to the image and not to the box, reach
  ``R·max(scale, 1)`` pixels past it (``R`` = 2 for bicubic). Such a policy has ``boxes()`` give
  the *read box* (every pixel a kept output reads, for the window) and ``frames()`` the
  geometry the batch carries (:attr:`dctnet.batch.JpegBatch.resize`); :func:`crop_frames` is
  the switch the planners use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dctnet import _jpeg

__all__ = ["CROP_MODES", "CenterCrop", "FullImage", "RandomResizedCrop", "ResizeCenterCrop", "crop_frames", "mcu_window",
           "mcu_windows", "uniforms"]

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
    """Eval crop: the centred square of side ``crop_fraction · min(H, W)``, as torchvision rounds
    it, then resized. That is torchvision's ``Resize(256) + CenterCrop(224)`` (``crop_fraction =
    0.875``) up to a sub-pixel shift. The exact transform, and timm's, resize first:
    :class:`ResizeCenterCrop`."""

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


#: timm's eval ``crop_mode`` values (``timm.data.transforms_factory.transforms_imagenet_eval``)
CROP_MODES = ("center", "squash", "border")
#: the widest filter support the device resize has (bicubic: 2 input pixels, times the shrink)
_READ_SUPPORT = 2.0


@dataclass(frozen=True)
class ResizeCenterCrop:
    """Eval crop, resize then crop: timm's ``create_transform(is_training=False)`` geometry — and
    torchvision's ``Resize(256) + CenterCrop(224)`` (``size=224, crop_pct=0.875``).

    ``size``: the output (h, w) (an int: square). The image is resized to ``scale_size =
    floor(size / crop_pct)`` per axis, with the aspect rule of ``crop_mode``:

    - ``"center"``: the shorter side becomes ``scale_size`` and the longer ``int(scale_size·long/short)``
      (torchvision's ``Resize(int)``); for a non-square size, timm's ``ResizeKeepRatio``:
      ``round(side / min(H/sh, W/sw))``;
    - ``"squash"``: exactly ``scale_size`` (the aspect ratio is not kept);
    - ``"border"``: the longer side fits ``scale_size`` (``ResizeKeepRatio(longest=1)``).

    Then the ``size`` crop at ``round((resized − size)/2)`` is kept. Where the resized image is
    smaller (``"border"``, ``crop_pct > 1``), it is centred with ``(size − resized)//2``
    pixels of padding before it. The padding is black for torchvision's ``CenterCrop``, and
    timm's mean colour for ``"border"`` (:meth:`fill`).

    On the device the interpolation is free: bilinear or bicubic (``crops_to_rgb(...,
    interpolation=)``). The read box covers the wider bicubic taps, so one batch serves both.
    The crop is deterministic: ``seed``/``epoch``/``index`` are ignored.

    ``resize``: the shorter side's length instead of ``floor(size / crop_pct)`` — torchvision's
    ``Resize(resize) + CenterCrop(size)`` (its reference's ``--val-resize-size`` /
    ``--val-crop-size``, e.g. 232 then 224); ``crop_mode`` ``"center"`` only.
    """

    size: int | tuple[int, int] = 224
    crop_pct: float = 0.875
    crop_mode: str = "center"
    resize: int | None = None

    def __post_init__(self) -> None:
        size = (self.size, self.size) if isinstance(self.size, (int, np.integer)) else tuple(self.size)
        if len(size) != 2 or not all(isinstance(v, (int, np.integer)) and v > 0 for v in size):
            raise ValueError(f"ResizeCenterCrop: size must be a positive int or (h, w), not {self.size!r}")
        object.__setattr__(self, "size", (int(size[0]), int(size[1])))
        if not (isinstance(self.crop_pct, (int, float)) and math.isfinite(self.crop_pct) and self.crop_pct > 0):
            raise ValueError(f"ResizeCenterCrop: crop_pct must be a positive number, not {self.crop_pct!r}")
        if self.crop_mode not in CROP_MODES:
            raise ValueError(f"ResizeCenterCrop: crop_mode must be one of {CROP_MODES}, not {self.crop_mode!r}")
        if self.resize is not None:
            if isinstance(self.resize, bool) or not isinstance(self.resize, (int, np.integer)) or self.resize <= 0:
                raise ValueError(f"ResizeCenterCrop: resize must be a positive int (the shorter side), not {self.resize!r}")
            if self.crop_mode != "center":
                raise ValueError(f"ResizeCenterCrop: resize= is torchvision's Resize(int) + CenterCrop: crop_mode "
                                 f"'center' only, not {self.crop_mode!r}")
            object.__setattr__(self, "resize", int(self.resize))

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ResizeCenterCrop:
        """The crop of a data config (:func:`dctnet.kernels.normalization.data_config`, or
        timm's ``resolve_data_config``): ``input_size`` (C, H, W), ``crop_pct``, ``crop_mode``, and
        ``resize`` (the shorter side, torchvision's rule) where the config has one."""
        _, h, w = config["input_size"]
        return cls((int(h), int(w)), float(config.get("crop_pct") or 0.875), config.get("crop_mode") or "center",
                   config.get("resize"))

    @property
    def scale_size(self) -> tuple[int, int]:
        """What the image is resized to before the crop, per axis: ``resize`` or ``floor(size / crop_pct)``."""
        if self.resize is not None:
            return self.resize, self.resize
        return math.floor(self.size[0] / self.crop_pct), math.floor(self.size[1] / self.crop_pct)

    def fill(self, mean: tuple[float, float, float] | None = None) -> tuple[float, float, float]:
        """RGB in [0, 1] of the padding: timm's ``"border"`` pads with ``round(255·mean)`` (the
        model's ``mean``), torchvision's ``CenterCrop`` with black. For ``crops_to_rgb(fill=)``."""
        if self.crop_mode == "border" and mean is not None:
            return tuple(round(255 * float(m)) / 255 for m in mean)  # type: ignore[return-value]
        return (0.0, 0.0, 0.0)

    def resized_sizes(self, heights: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``int64 (B,)`` heights and widths each image is resized to (the rules of the class
        docstring, in timm's / torchvision's float arithmetic and rounding)."""
        h = np.atleast_1d(np.asarray(heights, np.int64))
        w = np.atleast_1d(np.asarray(widths, np.int64))
        lh, lw = self.scale_size
        if self.crop_mode == "squash":
            return np.full_like(h, lh), np.full_like(w, lw)
        if self.crop_mode == "center" and lh == lw:  # torchvision's Resize(int): the shorter side
            short, long = np.minimum(h, w), np.maximum(h, w)
            # int(lh * long / short), in Python's float arithmetic: truncation, as torchvision does
            new_long = np.trunc(lh * long.astype(np.float64) / short).astype(np.int64)
            return np.where(w <= h, new_long, lh), np.where(w <= h, lw, new_long)
        # timm's ResizeKeepRatio: one ratio for both sides, the smaller ("center") or larger ("border")
        rh, rw = h / lh, w / lw
        ratio = np.minimum(rh, rw) if self.crop_mode == "center" else np.maximum(rh, rw)
        return np.rint(h / ratio).astype(np.int64), np.rint(w / ratio).astype(np.int64)  # Python's round

    def frames(self, heights: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(sources, resize)``, ``int64 (B, 4)`` each: the region resized, (0, 0, H, W) in image
        pixels (the whole image), and (height, width, top, left) of the resize and the kept
        crop in it (:attr:`dctnet.batch.JpegBatch.resize`)."""
        h = np.atleast_1d(np.asarray(heights, np.int64))
        w = np.atleast_1d(np.asarray(widths, np.int64))
        rh, rw = self.resized_sizes(h, w)
        top, left = _centre_offset(rh, self.size[0]), _centre_offset(rw, self.size[1])
        zero = np.zeros_like(h)
        return np.stack([zero, zero, h, w], axis=1), np.stack([rh, rw, top, left], axis=1)

    def boxes(self, heights: np.ndarray, widths: np.ndarray, seed: int = 0, epoch: int = 0,
              index: np.ndarray | None = None) -> np.ndarray:
        """``int64 (B, 4)`` read boxes (top, left, height, width) in image pixels: every source
        pixel a kept output's bicubic (or bilinear) taps read, and one more each side against
        float rounding in the tap bounds, inside the image. The window is planned around it; the
        batch carries :meth:`frames`."""
        h = np.atleast_1d(np.asarray(heights, np.int64))
        w = np.atleast_1d(np.asarray(widths, np.int64))
        _, resize = self.frames(h, w)
        top, height = _read_span(h, resize[:, 0], resize[:, 2], self.size[0])
        left, width = _read_span(w, resize[:, 1], resize[:, 3], self.size[1])
        return np.stack([top, left, height, width], axis=1)

    def box(self, height: int, width: int, seed: int = 0, epoch: int = 0, index: int = 0) -> Box:
        """:meth:`boxes` for one image."""
        return tuple(int(v) for v in self.boxes(np.array([height]), np.array([width]))[0])


def _centre_offset(resized: np.ndarray, size: int) -> np.ndarray:
    """Top (or left) of a centre crop of ``size`` in ``resized`` pixels, as torchvision's
    ``center_crop`` and timm's ``center_crop_or_pad`` place it: ``round((resized − size)/2)``
    (half to even, Python's ``round``), or ``−((size − resized)//2)`` when the crop is larger and
    the image is padded first (``(size − resized)//2`` pixels before it)."""
    return np.where(size > resized, -((size - resized) // 2), np.rint((resized - size) / 2.0).astype(np.int64))


def _read_span(length: np.ndarray, resized: np.ndarray, offset: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(start, length)`` of the source pixels the kept outputs ``offset .. offset + size − 1``
    of a resize of ``length`` to ``resized`` samples read: the taps of the first and last kept
    output inside the resized axis, computed as :func:`dctnet.resize.resize_matrices` does
    (the same float64 expressions), at the bicubic support, one pixel wider each side, clipped
    to the image."""
    scale = length.astype(np.float64) / resized
    first = np.maximum(offset, 0).astype(np.float64)
    last = (np.minimum(offset + size, resized) - 1).astype(np.float64)
    support = np.maximum(scale, 1.0) * _READ_SUPPORT
    lo = np.maximum(np.trunc(scale * (first + 0.5) - support + 0.5) - 1, 0).astype(np.int64)
    hi = np.minimum(np.trunc(scale * (last + 0.5) + support + 0.5) + 1, length).astype(np.int64)
    hi = np.maximum(hi, np.minimum(lo + 1, length))  # never empty (all padding cannot happen; be safe)
    return lo, hi - lo


def crop_frames(crop: Any, heights: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``crop.frames(heights, widths)`` for a resize-then-crop policy (:class:`ResizeCenterCrop`),
    ``None`` for a crop-then-resize one: what the planners call to fill
    :attr:`dctnet.batch.JpegBatch.resize` and the boxes it goes with."""
    frames = getattr(crop, "frames", None)
    return None if frames is None else frames(np.asarray(heights, np.int64), np.asarray(widths, np.int64))


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
