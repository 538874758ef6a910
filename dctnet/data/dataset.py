"""Datasets that yield cropped coefficient samples: image folders and WebDataset tar shards.

A sample is the coefficient planes of one image **in the file's own layout** (any sampling
factors; gray, YCbCr, RGB, CMYK or YCCK), sliced to an MCU-aligned window around its crop box
(:mod:`dctnet.data.crop`), plus its label. The host never decodes pixels: the loaders' collate
groups samples by layout and the device decodes each group (:func:`dctnet.transforms.crops_to_rgb`).
Randomness is a pure function of ``(seed, epoch, index)`` (counter-based draws), so batches are
the same whatever the number of workers or threads, and a sample can be re-drawn on its own.

Bad samples follow ``on_error``: ``"raise"`` (a :class:`dctnet.JpegError` naming the file) or
``"skip"`` (the sample becomes ``None``; collate drops it and records ``(index, name, reason)``
in the batch's ``skipped``). A file that lost data — truncated, or corrupt entropy-coded data
that libjpeg would fill in — is a bad sample too unless ``warnings="accept"``
(:data:`dctnet.codec.WARNING_POLICIES` lists which libjpeg warnings mean lost data; the others
stay recorded on the sample's coefficients). A read stops entropy decoding below its crop window,
so corrupt data further down a file goes unseen by that read (truncation is found from the bytes
by every read): :meth:`ImageFolderDataset.check` decodes every file in full once, to decide which
files are usable before training (``dctnet train`` does).

EXIF orientation is **ignored by default**, like ``torchvision.io.decode_jpeg`` and Pillow's
``Image.open``; ``exif="apply"`` rotates/flips the coefficient planes of images whose tag asks for
it (exact in the DCT domain; see :func:`apply_orientation`).
"""

from __future__ import annotations

import os
import warnings as pywarnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from pathlib import Path

import numpy as np
import torch

from dctnet.codec import (DEFAULT_MAX_BYTES, DEFAULT_MAX_PIXELS, JpegError, guard_limit, read_coefficients,
                          read_coefficients_batch, warn_mode)
from dctnet.data.crop import FullImage, crop_frames, draw_boxes, mcu_windows
from dctnet.data.collate import collate
from dctnet.data.plan import decode_windows, gather_collated, gather_items, plan_batch, read_headers
from dctnet.data.sample import CoefficientSample
from dctnet.data.usable import check_files
from dctnet.batch import Sampling
from dctnet.kernels import coefficients as TF

__all__ = ["CropDataset", "ImageFolderDataset", "UnusedFilesWarning", "apply_orientation",
           "sample_from_coefficients", "samples_from_coefficients"]

IMG_EXTENSIONS = (".jpg", ".jpeg", ".jpe", ".jfif")


class UnusedFilesWarning(UserWarning):
    """A dataset folder holds files the dataset does not read (not JPEGs by name), or class
    folders without a JPEG."""


def describe_unused(root: str | os.PathLike, non_jpeg: Sequence[str], empty_classes: Sequence[str]) -> str:
    """One message for the files a folder dataset leaves out."""
    parts = []
    if non_jpeg:
        exts = sorted({os.path.splitext(p)[1].lower() or "(no extension)" for p in non_jpeg})
        parts.append(f"{len(non_jpeg)} file(s) are not JPEGs and are not used ({', '.join(exts)}; e.g. "
                     f"{os.path.relpath(non_jpeg[0], root)})")
    if empty_classes:
        parts.append(f"class folder(s) without any JPEG: {', '.join(empty_classes[:10])}"
                     + (" …" if len(empty_classes) > 10 else ""))
    return f"{root}: " + "; ".join(parts) + ". dctnet reads JPEG only: convert other images to JPEG first."


def mcu_size(sampling: Sampling) -> tuple[int, int]:
    """MCU size in pixels ``(8·v_max, 8·h_max)``."""
    return 8 * max(v for _, v in sampling), 8 * max(h for h, _ in sampling)


# EXIF orientation → (transpose, then hflip, then vflip) on the image, applied in that order.
_ORIENTATION = {1: (False, False, False), 2: (False, True, False), 3: (False, True, True), 4: (False, False, True),
                5: (True, False, False), 6: (True, True, False), 7: (True, True, True), 8: (True, False, True)}


def apply_orientation(planes: Sequence[np.ndarray], sampling: Sampling, height: int, width: int,
                      orientation: int | None) -> tuple[tuple[np.ndarray, ...], Sampling, int, int]:
    """Rotate/flip the planes of any layout as EXIF ``orientation`` (1..8) asks, in the DCT domain.

    A transpose also swaps each component's sampling factors. Exact for images whose size is a
    multiple of the MCU; otherwise the padding blocks move to the top/left edge and the image is
    shifted by less than one MCU, as with ``jpegtran -trim`` off. Returns the new planes, sampling
    and the displayed (height, width)."""
    t, hf, vf = _ORIENTATION.get(orientation or 1, (False, False, False))
    out = [torch.from_numpy(np.ascontiguousarray(p)) for p in planes]  # the device kernels, on host planes
    if t:
        out = [TF.transpose_blocks(p) for p in out]
        sampling = tuple((v, h) for h, v in sampling)
        height, width = width, height
    if hf:
        out = [TF.flip_blocks(p, -2) for p in out]
    if vf:
        out = [TF.flip_blocks(p, -3) for p in out]
    return tuple(np.ascontiguousarray(p.numpy()) for p in out), sampling, height, width


def samples_from_coefficients(coeffs: Sequence[Any], crop: Any, labels: Sequence[int], indices: Sequence[int], *,
                              seed: int = 0, epochs: Sequence[int], exif: str = "ignore") -> list[CoefficientSample]:
    """(optional orientation) → crop boxes of ``(seed, epoch, index)``, drawn for the whole list at
    once → MCU window slices of every component, in the file's own layout (no pixel work)."""
    planes = []
    for c in coeffs:
        p, sampling, h, w = tuple(c.planes), tuple(c.sampling), c.height, c.width
        if exif == "apply" and c.exif_orientation not in (None, 1):
            p, sampling, h, w = apply_orientation(p, sampling, h, w, c.exif_orientation)
        planes.append((p, sampling, c.color_space, h, w))
    if not planes:
        return []
    hs = np.array([p[3] for p in planes], np.int64)
    ws = np.array([p[4] for p in planes], np.int64)
    mcus = np.array([mcu_size(p[1]) for p in planes], np.int64)
    idx = np.asarray(indices, np.int64)
    boxes = draw_boxes(crop, hs, ws, seed, np.asarray(epochs, np.int64), idx)
    win = mcu_windows(boxes, hs, ws, (mcus[:, 0], mcus[:, 1]))
    frames = crop_frames(crop, hs, ws)  # resize-then-crop: the windows hold the read boxes
    sources, resizes = (boxes.tolist(), [None] * len(boxes)) if frames is None else (frames[0].tolist(),
                                                                                      frames[1].tolist())
    out = []
    for (p, sampling, cs, h, w), (mh, mw), box, resize, (r0, r1, c0, c1), label, index in zip(
            planes, mcus.tolist(), sources, resizes, win.tolist(), labels, indices):
        out.append(CoefficientSample(
            planes=tuple(pl[r0 * v:r1 * v, c0 * hh:c1 * hh] for pl, (hh, v) in zip(p, sampling)), sampling=sampling,
            color_space=cs, valid=(min(h - mh * r0, mh * (r1 - r0)), min(w - mw * c0, mw * (c1 - c0))),
            box=(box[0] - mh * r0, box[1] - mw * c0, box[2], box[3]), label=label, index=index,
            resize=None if resize is None else tuple(resize)))
    return out


def sample_from_coefficients(coeffs: Any, crop: Any, label: int, index: int, *, seed: int = 0, epoch: int = 0,
                             exif: str = "ignore") -> CoefficientSample:
    """:func:`samples_from_coefficients` for one image."""
    return samples_from_coefficients([coeffs], crop, [label], [index], seed=seed, epochs=[epoch], exif=exif)[0]


class CropDataset(torch.utils.data.Dataset):
    """What the map-style datasets share: the crop policy and randomness settings, the epoch,
    the bad-sample policy, and indexing by ``index`` or ``(epoch, index)``. Subclasses implement
    ``load(index, epoch)`` and ``load_batch(keys)``."""

    def __init__(self, crop: Any, seed: int, on_error: str, exif: str, warnings: str = "raise") -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        if exif not in ("ignore", "apply"):
            raise ValueError(f"exif must be 'ignore' or 'apply', not {exif!r}")
        warn_mode(warnings)  # validated here, not at the first read
        self.crop = crop or FullImage()
        self.seed, self.on_error, self.exif, self.warnings = seed, on_error, exif, warnings
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
        warnings: ``"raise"`` (default: a file that lost data is a bad sample), ``"accept"``
            (train on libjpeg's fill-in) or ``"strict"`` (any libjpeg warning is a bad sample).

    Indexing takes ``index`` or ``(epoch, index)`` — :class:`dctnet.data.EpochSampler` yields the
    latter so that worker processes know the epoch without shared state.
    """

    def __init__(self, root: str | os.PathLike, *, crop: Callable | None = None, seed: int = 0,
                 on_error: str = "raise", exif: str = "ignore", max_pixels: int | None = DEFAULT_MAX_PIXELS,
                 extensions: Sequence[str] = IMG_EXTENSIONS, warnings: str = "raise") -> None:
        super().__init__(crop, seed, on_error, exif, warnings)
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"dataset folder not found: {self.root}")
        self.classes = sorted(d.name for d in os.scandir(self.root) if d.is_dir())
        if not self.classes:
            raise ValueError(f"no class folders in {self.root}")
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        exts = tuple(e.lower() for e in extensions)
        self.samples: list[tuple[str, int]] = []
        #: files that are not JPEGs by name (hidden files aside): dctnet reads JPEG only
        self.non_jpeg: list[str] = []
        for c in self.classes:
            for dirpath, _, files in sorted(os.walk(self.root / c)):
                for f in sorted(files):
                    if f.lower().endswith(exts):
                        self.samples.append((os.path.join(dirpath, f), self.class_to_idx[c]))
                    elif not f.startswith("."):
                        self.non_jpeg.append(os.path.join(dirpath, f))
        have = {label for _, label in self.samples}
        #: class folders holding no JPEG (they keep their label, so labels match torchvision's)
        self.empty_classes = [c for c in self.classes if self.class_to_idx[c] not in have]
        if not self.samples:
            raise ValueError(f"no JPEG files under {self.root}" + (f" ({len(self.non_jpeg)} other files, e.g. "
                             f"{self.non_jpeg[0]}: dctnet reads JPEG only)" if self.non_jpeg else ""))
        if self.non_jpeg or self.empty_classes:
            pywarnings.warn(describe_unused(self.root, self.non_jpeg, self.empty_classes), UnusedFilesWarning,
                          stacklevel=2)
        self.targets = [t for _, t in self.samples]
        self.max_pixels = max_pixels
        #: files that read with libjpeg warnings that lost nothing, once :meth:`check` ran
        self.warned: dict[str, tuple[str, ...]] = {}

    @classmethod
    def from_files(cls, paths: Sequence[str], *, crop: Callable | None = None, seed: int = 0, on_error: str = "raise",
                   exif: str = "ignore", max_pixels: int | None = DEFAULT_MAX_PIXELS,
                   warnings: str = "raise") -> ImageFolderDataset:
        """A dataset over a plain list of JPEG paths (all labelled 0), e.g. to time the loader."""
        if not paths:
            raise ValueError("from_files needs at least one path")
        ds = cls.__new__(cls)
        CropDataset.__init__(ds, crop, seed, on_error, exif, warnings)
        ds.root, ds.classes, ds.class_to_idx = Path(os.path.commonpath([os.path.abspath(p) for p in paths])), ["all"], \
            {"all": 0}
        ds.samples = [(str(p), 0) for p in paths]
        ds.targets = [0] * len(ds.samples)
        ds.max_pixels, ds.warned = max_pixels, {}
        return ds

    def __len__(self) -> int:
        return len(self.samples)

    def check(self, *, threads: int | None = None) -> list[tuple[str, str]]:
        """Decode every file in full once and decide which are usable, before training: returns
        ``(path, reason)`` of the files the readers refuse under this dataset's ``warnings``
        policy (:func:`dctnet.data.usable.check_files`), and keeps the files that read with
        harmless warnings in :attr:`warned` (``{path: warnings}``). Under ``on_error="raise"``
        a refused file raises :class:`dctnet.JpegError` naming it, its reason and the others;
        under ``"skip"`` they leave :attr:`samples` (labels unchanged, indices renumbered), so no
        epoch meets them. Costs about one epoch of entropy decoding."""
        found = check_files([p for p, _ in self.samples], warnings=self.warnings, max_pixels=self.max_pixels,
                            threads=threads)
        self.warned = found.warned
        bad = [(p, found.unusable[p]) for p, _ in self.samples if p in found.unusable]
        if bad and self.on_error == "raise":
            others = "; ".join(f"{p}: {why}" for p, why in bad[1:6]) + ("; …" if len(bad) > 6 else "")
            more = f" — and {len(bad) - 1} more unusable files ({others})" if len(bad) > 1 else ""
            raise JpegError(f"{bad[0][1]}{more} (on_error='skip' leaves them out)", bad[0][0])
        if bad:
            self.samples = [s for s in self.samples if s[0] not in found.unusable]
            self.targets = [t for _, t in self.samples]
        return bad

    def load(self, index: int, epoch: int) -> CoefficientSample | tuple[int, str, str]:
        """Read and crop one sample; on a bad file under ``"skip"``, ``(index, path, reason)``."""
        path, label = self.samples[index]
        try:
            coeffs = read_coefficients(path, max_pixels=self.max_pixels, warnings=self.warnings)
        except (JpegError, OSError) as exc:
            if self.on_error == "raise":
                raise
            return index, path, str(exc)
        return sample_from_coefficients(coeffs, self.crop, label, index, seed=self.seed, epoch=epoch, exif=self.exif)

    def load_batch(self, keys: Sequence[tuple[int, int]]) -> list[CoefficientSample | tuple[int, str, str]]:
        """:meth:`load` for ``(epoch, index)`` keys, reading the files in one GIL-free pass
        (:func:`dctnet.read_coefficients_batch` on the calling thread)."""
        paths = [self.samples[i][0] for _, i in keys]
        results = read_coefficients_batch(paths, threads=1, max_pixels=self.max_pixels, warnings=self.warnings,
                                          errors="return")
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

    def load_collated(self, keys: Sequence[tuple[int, int]], *, grid: tuple[int, int] | None = None,
                      pin_memory: bool = False) -> Any:
        """The collated batch for ``keys`` — the same batch as ``collate(load_batch(keys))`` —
        built without per-sample Python objects: one GIL-free call reads every file once and
        parses its header into a table, the batch is planned vectorised
        (:func:`dctnet.data.plan.plan_batch`), then one GIL-free C call per layout group decodes
        each file from those bytes straight into the batch. Single-scan (baseline/sequential)
        files stream into their windows one MCU row at a time and stop entropy decoding after the
        last row the window needs; progressive files decode into a reused buffer first.

        A file that fails, in its header or in the decode of its windows, follows ``on_error``:
        its exception is raised (the first in ``keys`` order), or it is left out and listed in
        ``skipped`` as ``(index, path, reason)`` — a decode failure then plans and decodes the
        rest again, as the batch without it. Batches with EXIF rotations to apply take
        :meth:`load_batch` + collate: a rotation needs a file's whole planes, not its windows."""
        limits = (warn_mode(self.warnings), guard_limit("max_pixels", self.max_pixels),
                  guard_limit("max_bytes", DEFAULT_MAX_BYTES))
        paths = [self.samples[i][0] for _, i in keys]
        # every file read once and its header parsed, in one GIL-free C call (FIFOs refused); the
        # bytes stay in `files` for the decode below
        head, errors, files = read_headers(paths, limits)
        failed = {k: errors[k] for k in np.flatnonzero(head["status"]).tolist()}  # key position -> exception
        if failed and self.on_error == "raise":
            raise failed[min(failed)]
        good = np.flatnonzero(head["status"] == 0)  # key positions of the files still in the batch
        exif = head["exif"][good]
        if self.exif == "apply" and ((exif != 0) & (exif != 1)).any():
            return collate(self.load_batch(keys), grid=grid, pin_memory=pin_memory)
        idx = np.fromiter((i for _, i in keys), np.int64, len(keys))
        epochs = np.fromiter((e for e, _ in keys), np.int64, len(keys))
        labels = np.array([self.samples[i][1] for i in idx.tolist()], np.int64)
        while True:
            rows = head[good]
            h, w, ncomp = rows["height"], rows["width"], rows["ncomp"]
            boxes = draw_boxes(self.crop, h, w, self.seed, epochs[good], idx[good])
            plan = plan_batch(rows["color"], ncomp, rows["sampling"], h, w, boxes, grid, crop_frames(self.crop, h, w))
            items = gather_items(good, ncomp, rows["blocks"])  # part: the file's position in `files`
            decoded: dict[int, BaseException] = {}  # key position -> exception, of this pass

            def decode(r: np.ndarray, it: np.ndarray, outs: list, good: np.ndarray = good,
                       decoded: dict[int, BaseException] = decoded) -> None:
                found = decode_windows(files, it, outs, limits)
                if found.count(None) != len(found):
                    decoded.update((int(good[j]), exc) for j, exc in zip(r.tolist(), found) if exc is not None)

            skipped = tuple((keys[k][1], paths[k], str(failed[k])) for k in sorted(failed))
            batch = gather_collated(plan, decode, items, labels[good], idx[good], pin_memory=pin_memory,
                                    skipped=skipped)
            if not decoded:
                return batch
            if self.on_error == "raise":
                raise decoded[min(decoded)]
            failed.update(decoded)
            good = good[~np.isin(good, list(decoded))]
