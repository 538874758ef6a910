"""Datasets that yield cropped coefficient samples: image folders and WebDataset tar shards.

A sample is the coefficient planes of one image, converted to the loader's canonical layout
(4:2:0 YCbCr; see :func:`to_canonical`), sliced to an MCU-aligned window around its crop box
(:mod:`dctnet.data.crop`), plus its label. Randomness is a pure function of
``(seed, epoch, index)`` (counter-based draws), so batches are the same whatever the number of
workers or threads, and a sample can be re-drawn on its own.

Bad samples follow ``on_error``: ``"raise"`` (a :class:`dctnet.JpegError` naming the file) or
``"skip"`` (the sample becomes ``None``; collate drops it and records ``(index, name, reason)``
in the batch's ``skipped``).

EXIF orientation is **ignored by default**, like ``torchvision.io.decode_jpeg`` and Pillow's
``Image.open``; ``exif="apply"`` rotates/flips the coefficient planes of images whose tag asks for
it (exact in the DCT domain; see :func:`apply_orientation`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from dctnet.codec import DEFAULT_MAX_PIXELS, JpegCoefficients, JpegError, read_coefficients, read_coefficients_batch
from dctnet.data.crop import Box, FullImage, draw_boxes, mcu_windows

__all__ = ["CoefficientSample", "CropDataset", "ImageFolderDataset", "apply_orientation", "sample_from_coefficients",
           "samples_from_coefficients", "to_canonical"]

IMG_EXTENSIONS = (".jpg", ".jpeg", ".jpe", ".jfif")


@dataclass
class CoefficientSample:
    """One cropped sample (host, numpy).

    Attributes:
        y: ``int16 (hb, wb, 64)`` luma window (hb, wb even).
        c: ``(cb, cr)``, each ``int16 (hb/2, wb/2, 64)`` (views into the decoded planes).
        valid: (height, width) in pixels of image content in the window.
        box: (top, left, height, width) crop box in pixels relative to the window.
        label, index: class index and dataset index.
    """

    y: np.ndarray
    c: tuple[np.ndarray, np.ndarray]
    valid: tuple[int, int]
    box: Box
    label: int
    index: int


def to_canonical(c: JpegCoefficients) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], int, int]:
    """``(y, (cb, cr), height, width)`` in the loader's layout: 4:2:0 YCbCr int16 planes.

    4:2:0 YCbCr files pass through untouched (views). Grayscale gets zero chroma (exact:
    Cb = Cr = 128 decodes to R = G = B = Y) and its luma grid padded to whole MCUs. Anything else
    (4:4:4, 4:2:2, other sampling, RGB/CMYK/YCCK colour) is converted through pixels on the host
    — decode, RGB → YCbCr, 2×2 chroma box average, forward DCT, rounding to int16 — which is lossy
    for the chroma and costs a few ms; such files are rare in photo datasets."""
    h, w = c.height, c.width
    if c.color_space == "YCbCr" and c.sampling == ((2, 2), (1, 1), (1, 1)):
        return c.planes[0], (c.planes[1], c.planes[2]), h, w
    rows, cols = -(-h // 16), -(-w // 16)
    if c.color_space == "gray" and c.num_components == 1:
        y = np.zeros((2 * rows, 2 * cols, 64), np.int16)
        p = c.planes[0]
        y[: min(p.shape[0], 2 * rows), : min(p.shape[1], 2 * cols)] = p[: 2 * rows, : 2 * cols]
        zero = np.zeros((rows, cols, 64), np.int16)
        return y, (zero, zero), h, w
    from dctnet import functional as F

    rgb = F.coefficients_to_rgb(c)
    planes = F.from_rgb(rgb, ((2, 2), (1, 1), (1, 1)))
    out = [p[0].round().clamp(-32768, 32767).to(torch.int16).numpy() for p in planes]
    return out[0], (out[1], out[2]), h, w


# EXIF orientation → (transpose, then hflip, then vflip) on the image, applied in that order.
_ORIENTATION = {1: (False, False, False), 2: (False, True, False), 3: (False, True, True), 4: (False, False, True),
                5: (True, False, False), 6: (True, True, False), 7: (True, True, True), 8: (True, False, True)}


def _flip_blocks(p: np.ndarray, axis: int) -> np.ndarray:
    """Mirror a plane ``(..., hb, wb, 64)`` along a block axis, exactly: reverse the blocks and
    negate the odd frequencies of that direction."""
    k = np.arange(64)
    freq = k % 8 if axis == -2 else k // 8
    return np.flip(p, axis=axis) * np.where(freq % 2 == 1, -1, 1).astype(np.int16)


def _transpose_blocks(p: np.ndarray) -> np.ndarray:
    """Transpose a plane ``(hb, wb, 64)``: swap the grid axes and transpose every 8×8 block."""
    hb, wb, _ = p.shape
    return p.transpose(1, 0, 2).reshape(wb, hb, 8, 8).transpose(0, 1, 3, 2).reshape(wb, hb, 64)


def apply_orientation(y: np.ndarray, cbcr: tuple[np.ndarray, np.ndarray], height: int, width: int,
                      orientation: int | None) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], int, int]:
    """Rotate/flip 4:2:0 planes as EXIF ``orientation`` (1..8) asks, in the DCT domain.

    Exact for images whose size is a multiple of 16 (whole MCUs); otherwise the padding blocks
    move to the top/left edge and the image is shifted by less than one MCU, as with
    ``jpegtran -trim`` off. Returns the new planes and the displayed (height, width)."""
    t, hf, vf = _ORIENTATION.get(orientation or 1, (False, False, False))
    planes = [y, *cbcr]
    if t:
        planes = [_transpose_blocks(p) for p in planes]
        height, width = width, height
    if hf:
        planes = [_flip_blocks(p, -2) for p in planes]
    if vf:
        planes = [_flip_blocks(p, -3) for p in planes]
    y, cb, cr = (np.ascontiguousarray(p) for p in planes)
    return y, (cb, cr), height, width


def samples_from_coefficients(coeffs: Sequence[Any], crop: Any, labels: Sequence[int], indices: Sequence[int], *,
                              seed: int = 0, epochs: Sequence[int], exif: str = "ignore") -> list[CoefficientSample]:
    """Canonical layout → (optional orientation) → crop boxes of ``(seed, epoch, index)``, drawn
    for the whole list at once → MCU window slices."""
    planes = []
    for c in coeffs:
        y, cbcr, h, w = to_canonical(c)
        if exif == "apply" and c.exif_orientation not in (None, 1):
            y, cbcr, h, w = apply_orientation(y, cbcr, h, w, c.exif_orientation)
        planes.append((y, cbcr, h, w))
    if not planes:
        return []
    hs = np.array([p[2] for p in planes], np.int64)
    ws = np.array([p[3] for p in planes], np.int64)
    idx = np.asarray(indices, np.int64)
    ep = np.asarray(epochs, np.int64)
    boxes = np.empty((len(planes), 4), np.int64)
    for e in np.unique(ep):  # one vectorised draw per epoch present (normally one)
        m = ep == e
        boxes[m] = draw_boxes(crop, hs[m], ws[m], seed, int(e), idx[m])
    win = mcu_windows(boxes, hs, ws)
    out = []
    for (y, cbcr, h, w), box, (r0, r1, c0, c1), label, index in zip(planes, boxes.tolist(), win.tolist(), labels,
                                                                   indices):
        out.append(CoefficientSample(
            y=y[2 * r0:2 * r1, 2 * c0:2 * c1], c=(cbcr[0][r0:r1, c0:c1], cbcr[1][r0:r1, c0:c1]),
            valid=(min(h - 16 * r0, 16 * (r1 - r0)), min(w - 16 * c0, 16 * (c1 - c0))),
            box=(box[0] - 16 * r0, box[1] - 16 * c0, box[2], box[3]), label=label, index=index))
    return out


def sample_from_coefficients(coeffs: Any, crop: Any, label: int, index: int, *, seed: int = 0, epoch: int = 0,
                             exif: str = "ignore") -> CoefficientSample:
    """:func:`samples_from_coefficients` for one image."""
    return samples_from_coefficients([coeffs], crop, [label], [index], seed=seed, epochs=[epoch], exif=exif)[0]


class CropDataset(torch.utils.data.Dataset):
    """What the map-style datasets share: the crop policy and randomness settings, the epoch,
    the bad-sample policy, and indexing by ``index`` or ``(epoch, index)``. Subclasses implement
    ``load(index, epoch)`` and ``load_batch(keys)``."""

    def __init__(self, crop: Any, seed: int, on_error: str, exif: str) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        if exif not in ("ignore", "apply"):
            raise ValueError(f"exif must be 'ignore' or 'apply', not {exif!r}")
        self.crop = crop or FullImage()
        self.seed, self.on_error, self.exif = seed, on_error, exif
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _keys(self, keys: Sequence[int | tuple[int, int]]) -> list[tuple[int, int]]:
        return [k if isinstance(k, tuple) else (self.epoch, k) for k in keys]

    def __getitem__(self, key: int | tuple[int, int]) -> CoefficientSample | tuple[int, str, str]:
        epoch, index = key if isinstance(key, tuple) else (self.epoch, key)
        return self.load(index, epoch)  # type: ignore[attr-defined]

    def __getitems__(self, keys: Sequence[int | tuple[int, int]]) -> Any:
        """Batched fetch for ``DataLoader`` (its collate accepts the result)."""
        return self.load_batch(self._keys(keys))  # type: ignore[attr-defined]

    def __iter__(self) -> Iterator[CoefficientSample | tuple[int, str, str]]:
        for i in range(len(self)):  # type: ignore[arg-type]
            yield self[i]


class ImageFolderDataset(CropDataset):
    """``root/<class>/<image>.jpg`` (torchvision's ImageFolder layout, classes sorted) → samples.

    Args:
        root: dataset folder.
        crop: box policy (``RandomResizedCrop()`` for training, ``CenterCrop()`` for eval).
        seed: base of the per-sample randomness.
        on_error: ``"raise"`` or ``"skip"`` (see module docs).
        exif: ``"ignore"`` (default) or ``"apply"``.
        max_pixels: decompression-bomb guard passed to the reader.

    Indexing takes ``index`` or ``(epoch, index)`` — :class:`dctnet.data.EpochSampler` yields the
    latter so that worker processes know the epoch without shared state.
    """

    def __init__(self, root: str | os.PathLike, *, crop: Callable | None = None, seed: int = 0,
                 on_error: str = "raise", exif: str = "ignore", max_pixels: int | None = DEFAULT_MAX_PIXELS,
                 extensions: Sequence[str] = IMG_EXTENSIONS) -> None:
        super().__init__(crop, seed, on_error, exif)
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"dataset folder not found: {self.root}")
        self.classes = sorted(d.name for d in os.scandir(self.root) if d.is_dir())
        if not self.classes:
            raise ValueError(f"no class folders in {self.root}")
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        exts = tuple(e.lower() for e in extensions)
        self.samples: list[tuple[str, int]] = []
        for c in self.classes:
            for dirpath, _, files in sorted(os.walk(self.root / c)):
                for f in sorted(files):
                    if f.lower().endswith(exts):
                        self.samples.append((os.path.join(dirpath, f), self.class_to_idx[c]))
        if not self.samples:
            raise ValueError(f"no JPEG files under {self.root}")
        self.targets = [t for _, t in self.samples]
        self.max_pixels = max_pixels

    def __len__(self) -> int:
        return len(self.samples)

    def load(self, index: int, epoch: int) -> CoefficientSample | tuple[int, str, str]:
        """Read and crop one sample; on a bad file under ``"skip"``, ``(index, path, reason)``."""
        path, label = self.samples[index]
        try:
            coeffs = read_coefficients(path, max_pixels=self.max_pixels)
        except (JpegError, OSError) as exc:
            if self.on_error == "raise":
                raise
            return index, path, str(exc)
        return sample_from_coefficients(coeffs, self.crop, label, index, seed=self.seed, epoch=epoch, exif=self.exif)

    def load_batch(self, keys: Sequence[tuple[int, int]]) -> list[CoefficientSample | tuple[int, str, str]]:
        """:meth:`load` for ``(epoch, index)`` keys, reading the files in one GIL-free pass
        (:func:`dctnet.read_coefficients_batch` on the calling thread)."""
        paths = [self.samples[i][0] for _, i in keys]
        results = read_coefficients_batch(paths, threads=1, max_pixels=self.max_pixels, errors="return")
        out: list[CoefficientSample | tuple[int, str, str] | None] = [None] * len(keys)
        good = []
        for k, ((epoch, index), res, path) in enumerate(zip(keys, results, paths)):
            if isinstance(res, BaseException):
                if self.on_error == "raise":
                    raise res
                out[k] = (index, path, str(res))
            else:
                good.append(k)
        made = samples_from_coefficients([results[k] for k in good], self.crop,
                                         [self.samples[keys[k][1]][1] for k in good], [keys[k][1] for k in good],
                                         seed=self.seed, epochs=[keys[k][0] for k in good], exif=self.exif)
        for k, sample in zip(good, made):
            out[k] = sample
        return out  # type: ignore[return-value]
