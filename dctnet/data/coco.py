"""COCO-format detection and segmentation data: whole-image coefficient samples and their targets.

:class:`CocoDataset` reads a COCO annotation file (``images``, ``annotations``, ``categories``;
pycocotools' index) and yields, per image, the coefficient planes of the **whole** image in the
file's own layout (a :class:`dctnet.data.CoefficientSample` cut by :class:`dctnet.data.FullImage`)
with a target dict of host tensors in torchvision's detection conventions: XYXY pixel boxes and
contiguous labels ``1..K`` (0 is the background). Geometry (resize, flips, crops) is drawn later,
per sample, by the detection transforms on the device; this module draws no randomness.

The annotation file is untrusted input: its structure is checked when the dataset is built, and a
malformed file raises ``ValueError`` naming the file, the image or annotation id and the reason,
before pycocotools indexes it (pycocotools would raise bare ``KeyError``s, silently keep the last
of two records sharing an id, read a 4-number polygon as a box, and its C mask decoder trusts
run-length counts). Images follow the datasets' bad-sample rule (:mod:`dctnet.data.dataset`):
``on_error="raise"`` or ``"skip"``, where a skipped image becomes the ``(index, path, reason)``
tuple that :func:`collate_detection` drops, its target with it. An image whose size differs from
the annotation file's ``width``/``height`` is a bad sample too: its boxes and masks would be in
another frame.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import torch

from dctnet.batch import JpegBatch
from dctnet.codec import DEFAULT_MAX_PIXELS, JpegError, read_coefficients_batch, read_header
from dctnet.data.collate import collate
from dctnet.data.crop import FullImage
from dctnet.data.dataset import CropDataset, sample_from_coefficients
from dctnet.data.sample import CoefficientSample
from dctnet.data.sources import DataSource, register_source
from dctnet.data.usable import check_files

__all__ = ["CocoDataset", "collate_detection"]

MASK_MODES = ("none", "instance")
#: EXIF orientations that transpose the image (its displayed width and height swap)
_TRANSPOSING = (5, 6, 7, 8)
#: a polygon point may lie this many image sizes outside the image: pycocotools' rasterizer
#: allocates memory per unit of edge length, so unbounded coordinates are a memory bomb
_POLYGON_REACH = 1.0

Item = tuple[CoefficientSample, dict[str, Any]]


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _rle_string_counts(counts: str) -> np.ndarray:
    """The run lengths of COCO's compressed RLE string (pycocotools' ``rleFrString``), decoded in
    numpy with the bounds its C code does not check: ASCII ``'0'..'o'`` only, no number cut off
    at the end, at most 7 characters a number. Returns ``int64 (m,)`` (the caller checks the
    range and the sum). Raises ``ValueError`` saying what is wrong."""
    try:
        raw = counts.encode("ascii")
    except UnicodeEncodeError:
        raise ValueError("RLE counts string is not ASCII") from None
    c = np.frombuffer(raw, np.uint8).astype(np.int64) - 48
    if c.size == 0:
        return c
    if ((c < 0) | (c > 63)).any():
        raise ValueError("RLE counts string holds characters outside '0'..'o'")
    more = (c & 0x20) != 0
    if more[-1]:
        raise ValueError("RLE counts string ends inside a number")
    ends = np.flatnonzero(~more)  # the last character of each number
    starts = np.concatenate([[0], ends[:-1] + 1])
    lengths = ends - starts + 1
    if lengths.max() > 7:  # 35 bits: more than any run of a 2^32-pixel image needs
        raise ValueError("RLE counts string holds a number longer than 7 characters")
    shift = 5 * (np.arange(c.size) - np.repeat(starts, lengths))
    x = np.add.reduceat((c & 0x1F) << shift, starts)
    x = np.where((c[ends] & 0x10) != 0, x - (np.int64(1) << (5 * lengths)), x)  # sign extension
    # from the fourth number on, each is a difference to the number two places before
    out = x.copy()
    if out.size > 3:
        out[3::2] = x[1] + np.cumsum(x[3::2])
    if out.size > 4:
        out[4::2] = x[2] + np.cumsum(x[4::2])
    return out


class _Checker:
    """Structure checks of one annotation file; each failure a ``ValueError`` naming the file."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, reason: str) -> ValueError:
        return ValueError(f"{self.source}: {where}: {reason}")

    def records(self, data: dict, key: str, required: bool) -> list[dict]:
        if key not in data:
            if required:
                raise self.fail("top level", f"missing key {key!r} (a COCO file has 'images', 'annotations', "
                                f"'categories')")
            return []
        value = data[key]
        if not isinstance(value, list):
            raise self.fail(key, f"must be a list, not {type(value).__name__}")
        for k, rec in enumerate(value):
            if not isinstance(rec, dict):
                raise self.fail(f"{key}[{k}]", f"must be an object, not {type(rec).__name__}")
        return value

    def ids(self, records: list[dict], kind: str, key: str) -> None:
        seen: set[int] = set()
        for k, rec in enumerate(records):
            if "id" not in rec:
                raise self.fail(f"{key}[{k}]", f"{kind} without an 'id'")
            if not _is_int(rec["id"]):
                raise self.fail(f"{key}[{k}]", f"{kind} id must be an integer, not {rec['id']!r}")
            if rec["id"] in seen:
                raise self.fail(f"{kind} id {rec['id']}", f"two {kind}s share this id")
            seen.add(rec["id"])

    def image(self, img: dict) -> None:
        where = f"image id {img['id']}"
        name = img.get("file_name")
        if not isinstance(name, str) or not name or "\0" in name:
            raise self.fail(where, f"'file_name' must be a non-empty string, not {name!r}")
        # the file must lie under the images folder: no absolute path, no '..', on any separator
        parts = PurePosixPath(name.replace("\\", "/")).parts
        if os.path.isabs(name) or name.startswith(("/", "\\")) or ".." in parts or os.path.splitdrive(name)[0]:
            raise self.fail(where, f"'file_name' {name!r} leaves the images folder (absolute, or with '..')")
        for key in ("width", "height"):
            v = img.get(key)
            if not _is_int(v) or v <= 0:
                raise self.fail(where, f"{key!r} must be a positive integer, not {v!r}")

    def category(self, cat: dict) -> None:
        if not isinstance(cat.get("name"), str):
            raise self.fail(f"category id {cat['id']}", f"'name' must be a string, not {cat.get('name')!r}")

    def annotation(self, ann: dict, images: dict[int, dict], categories: set[int], masks: bool) -> None:
        where = f"annotation id {ann['id']}"
        image_id = ann.get("image_id")
        if not _is_int(image_id) or image_id not in images:
            raise self.fail(where, f"image id {image_id!r} is not among the images")
        if not _is_int(ann.get("category_id")) or ann["category_id"] not in categories:
            raise self.fail(where, f"category id {ann.get('category_id')!r} is not among the categories")
        bbox = ann.get("bbox")
        if not isinstance(bbox, list) or len(bbox) != 4 or not all(_is_number(v) for v in bbox):
            raise self.fail(where, f"'bbox' must be 4 finite numbers [x, y, width, height], not {bbox!r}")
        if bbox[2] < 0 or bbox[3] < 0:
            raise self.fail(where, f"'bbox' has a negative width or height: {bbox!r}")
        if "area" in ann and (not _is_number(ann["area"]) or ann["area"] < 0):
            raise self.fail(where, f"'area' must be a finite non-negative number, not {ann['area']!r}")
        if ann.get("iscrowd", 0) not in (0, 1):  # True/False compare equal to 1/0
            raise self.fail(where, f"'iscrowd' must be 0 or 1, not {ann['iscrowd']!r}")
        if masks:
            img = images[image_id]
            self.segmentation(where, ann.get("segmentation"), img["height"], img["width"])

    def segmentation(self, where: str, seg: Any, h: int, w: int) -> None:
        """Polygons (a list of ``[x0, y0, x1, y1, ...]``) or RLE (``{"size": [h, w], "counts": ...}``,
        counts a list of run lengths or COCO's compressed string)."""
        if isinstance(seg, list):
            for poly in seg:
                try:
                    a = np.array(poly) if isinstance(poly, list) else None
                except ValueError:  # ragged nesting
                    a = None
                if a is None or a.ndim != 1 or a.dtype.kind not in "iuf" or not np.isfinite(a).all():
                    raise self.fail(where, "a segmentation polygon must be a list of finite numbers")
                if a.size % 2:
                    raise self.fail(where, f"a segmentation polygon has an odd number of coordinates ({a.size})")
                xy = a.reshape(-1, 2)
                lo, hi = -_POLYGON_REACH * np.array([w, h]), (1 + _POLYGON_REACH) * np.array([w, h])
                if (xy < lo).any() or (xy > hi).any():
                    raise self.fail(where, f"a segmentation polygon reaches more than one image size outside the "
                                    f"{w}x{h} image")
            return
        if not isinstance(seg, dict) or "counts" not in seg or "size" not in seg:
            raise self.fail(where, "'segmentation' must be polygons or an RLE object with 'size' and 'counts', "
                            f"not {type(seg).__name__}" + ("" if seg is not None else " (masks='instance' needs it)"))
        if not isinstance(seg["size"], list) or not all(_is_int(v) for v in seg["size"]) or seg["size"] != [h, w]:
            raise self.fail(where, f"RLE 'size' {seg['size']!r} is not the image's [height, width] [{h}, {w}]")
        counts = seg["counts"]
        if isinstance(counts, list):
            if not all(_is_int(v) for v in counts):
                raise self.fail(where, "RLE 'counts' must be integers")
            runs = counts
        elif isinstance(counts, str):
            try:
                runs = _rle_string_counts(counts).tolist()
            except ValueError as exc:
                raise self.fail(where, str(exc)) from None
        else:
            raise self.fail(where, f"RLE 'counts' must be a list or a string, not {type(counts).__name__}")
        # pycocotools stores runs as uint32 and decodes them without bounds: each must fit and all
        # must cover the image exactly
        if any(r < 0 or r >= 2 ** 32 for r in runs):
            raise self.fail(where, "RLE 'counts' holds a negative or oversized run")
        covered = int(sum(runs))
        if covered != h * w:
            raise self.fail(where, f"RLE runs cover {covered} pixels, not the image's {h}x{w} = {h * w}")


def _read_annotations(path: str, masks: bool) -> tuple[Any, list[int]]:
    """The checked annotation file as a pycocotools ``COCO`` index, and its sorted category ids."""
    from pycocotools.coco import COCO  # optional dependency (pycocotools, the "coco" extra)

    check = _Checker(path)
    try:
        with open(path, "rb") as f:
            data = json.load(f)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, too many digits, nesting
        raise ValueError(f"{path}: not a JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a COCO annotation file (the top level is a {type(data).__name__}, not an object)")
    images = check.records(data, "images", True)
    categories = check.records(data, "categories", True)
    # an image-info file (COCO's test sets) has no annotations: its images get empty targets
    annotations = check.records(data, "annotations", False)
    check.ids(images, "image", "images")
    check.ids(categories, "category", "categories")
    check.ids(annotations, "annotation", "annotations")
    for img in images:
        check.image(img)
    for cat in categories:
        check.category(cat)
    by_id = {img["id"]: img for img in images}
    cat_ids = {cat["id"] for cat in categories}
    for ann in annotations:
        check.annotation(ann, by_id, cat_ids, masks)
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        coco = COCO()
        coco.dataset = data
        coco.createIndex()
    return coco, sorted(cat_ids)


class CocoDataset(CropDataset):
    """A COCO-format detection / instance / semantic segmentation dataset → ``(sample, target)``.

    Args:
        images: the folder the annotation file's ``file_name``s are relative to.
        annotations: the COCO annotation file (json).
        masks: ``"none"`` (default) or ``"instance"``: the target holds each object's mask.
        semantic: a folder of class-index PNGs, ``<semantic>/<file_name with .png>`` per image
            (torchvision's segmentation references' layout: palette or gray PNGs, 255 = ignore);
            the target then holds ``semantic``. ``None``: none.
        seed: kept for the detection transforms, which draw each sample's geometry from
            ``(seed, epoch, index)``; this dataset draws nothing.
        on_error: ``"raise"`` or ``"skip"`` (see :mod:`dctnet.data.dataset`): a skipped image
            becomes ``(index, path, reason)``, which :func:`collate_detection` drops.
        warnings, exif, max_pixels: as for :class:`dctnet.data.ImageFolderDataset`. With
            ``exif="apply"`` the annotations must be in the displayed (rotated) frame: the size the
            annotation file gives is checked against it.

    Indexing (``ds[i]`` or ``ds[epoch, i]``) goes over the image ids sorted ascending (as
    torchvision's ``CocoDetection``), **images without annotations included** (their targets are
    empty). torchvision's references leave them out of their training split:
    :meth:`annotated_indices` names the images they keep, :meth:`select` keeps only those. ``ds[i]``
    is ``(sample, target)``:

    - ``sample``: :class:`dctnet.data.CoefficientSample` of the whole image, label 0, index ``i``.
    - ``target["boxes"]``: ``float64 (N, 4)`` XYXY in pixels of the image (COCO's
      ``[x, y, w, h]`` → ``[x, y, x + w, y + h]``; not clamped: the transforms' sanitizing does that).
    - ``target["labels"]``: ``int64 (N,)`` in ``1..K``, the categories in ascending id order.
    - ``target["iscrowd"]``: ``int64 (N,)``; ``target["area"]``: ``float64 (N,)`` (the file's
      ``area``; the box's when absent).
    - ``target["image_id"]``: the COCO image id (int); ``target["size"]``: ``(H, W)`` ints.
    - with ``masks="instance"``: ``target["masks"]``: ``uint8 (N, H, W)``, 1 inside the object
      (pycocotools' ``annToMask``: polygons and RLE, crowd regions included). Polygons of fewer
      than 3 points enclose nothing and are left out, as detectron2 does (pycocotools would read
      a 4-number one as a box).
    - with ``semantic``: ``target["semantic"]``: ``uint8 (H, W)`` class indices.

    Attributes:
        coco: the pycocotools ``COCO`` index (for ``COCOeval``).
        ids: the image id of each index.
        classes: category names in label order (``classes[k - 1]`` names label ``k``).
        category_ids: the COCO category id of each label; ``category_ids[0]`` is ``None`` (background).
        category_to_label: COCO category id → label.
    """

    def __init__(self, images: str | os.PathLike, annotations: str | os.PathLike, *, masks: str = "none",
                 semantic: str | os.PathLike | None = None, seed: int = 0, on_error: str = "raise",
                 warnings: str = "raise", exif: str = "ignore", max_pixels: int | None = DEFAULT_MAX_PIXELS) -> None:
        super().__init__(FullImage(), seed, on_error, exif, warnings)
        if masks not in MASK_MODES:
            raise ValueError(f"masks must be one of {MASK_MODES}, not {masks!r}")
        self.root = Path(images)
        if not self.root.is_dir():
            raise FileNotFoundError(f"images folder not found: {self.root}")
        self.semantic = None if semantic is None else Path(semantic)
        if self.semantic is not None and not self.semantic.is_dir():
            raise FileNotFoundError(f"semantic mask folder not found: {self.semantic}")
        self.annotations = os.fspath(annotations)
        self.masks, self.max_pixels = masks, max_pixels
        self.coco, cat_ids = _read_annotations(self.annotations, masks == "instance")
        self.category_ids: list[int | None] = [None, *cat_ids]
        self.category_to_label = {cid: k for k, cid in enumerate(self.category_ids) if k}
        self.classes = [self.coco.cats[cid]["name"] for cid in cat_ids]
        self.ids: list[int] = sorted(self.coco.imgs)
        self.paths = [str(self.root / self.coco.imgs[i]["file_name"]) for i in self.ids]
        #: files that read with libjpeg warnings that lost nothing, once :meth:`check` ran
        self.warned: dict[str, tuple[str, ...]] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def annotated_indices(self) -> list[int]:
        """The indices whose images torchvision's references train on
        (``_coco_remove_images_without_annotations``): at least one annotation, and not every box at
        most 1 px wide or tall."""
        def usable(anns: list[dict[str, Any]]) -> bool:
            return bool(anns) and not all(a["bbox"][2] <= 1 or a["bbox"][3] <= 1 for a in anns)

        return [k for k, i in enumerate(self.ids) if usable(self.coco.imgToAnns.get(i, []))]

    def select(self, indices: Sequence[int]) -> None:
        """Keep only the images at ``indices`` (in that order): :attr:`ids` and their paths."""
        self.ids = [self.ids[k] for k in indices]
        self.paths = [self.paths[k] for k in indices]

    def box_warnings(self) -> list[str]:
        """What in the annotations of :attr:`ids` trains without error but likely not as meant, one
        line each: no annotations at all (the detector learns background only); boxes running past
        their image (``SanitizeBoundingBoxes`` drops them at every step); and, when most of those
        would fit as ``[x0, y0, x1, y1]``, that COCO's ``bbox`` is ``[x, y, width, height]``."""
        anns = [(a["bbox"], self.coco.imgs[i]) for i in self.ids for a in self.coco.imgToAnns.get(i, ())]
        if not anns:
            return [f"{self.annotations}: no annotations for its {len(self.ids)} images: a detector trained on it "
                    "learns background only"]
        past = [(b, im) for b, im in anns if b[0] + b[2] > im["width"] + 0.5 or b[1] + b[3] > im["height"] + 0.5]
        if not past:
            return []
        out = [f"{self.annotations}: {len(past)} of {len(anns)} boxes run past their image "
               "(SanitizeBoundingBoxes drops them at every step)"]
        as_xyxy = sum(b[2] <= im["width"] + 0.5 and b[3] <= im["height"] + 0.5 and b[2] > b[0] and b[3] > b[1]
                      for b, im in past)
        if len(past) > len(anns) / 2 and as_xyxy >= 0.9 * len(past):
            out.append(f"{self.annotations}: {as_xyxy} of them fit their image when read as [x0, y0, x1, y1]: COCO's "
                       "bbox is [x, y, width, height] — were they written as corners?")
        return out

    def _size_mismatch(self, index: int, height: int, width: int) -> str | None:
        img = self.coco.imgs[self.ids[index]]
        if (img["height"], img["width"]) == (height, width):
            return None
        return (f"the image is {width}x{height} pixels but {self.annotations} says {img['width']}x{img['height']} "
                f"(image id {self.ids[index]})")

    def _semantic(self, index: int, height: int, width: int) -> np.ndarray:
        """``uint8 (H, W)`` class indices of the image's PNG. Raises ``OSError`` (missing, unreadable)
        or ``ValueError`` (not a P/L PNG, another size) naming the PNG."""
        from PIL import Image  # optional dependency (Pillow, only for semantic=)

        assert self.semantic is not None
        path = self.semantic / PurePosixPath(self.coco.imgs[self.ids[index]]["file_name"]).with_suffix(".png")
        try:
            with Image.open(path) as im:
                if im.format != "PNG" or im.mode not in ("P", "L"):
                    raise ValueError(f"{path}: a semantic mask must be a palette or gray PNG of class indices, "
                                     f"not {im.format} mode {im.mode}")
                if im.size != (width, height):
                    raise ValueError(f"{path}: the mask is {im.size[0]}x{im.size[1]}, the image {width}x{height}")
                return np.array(im, dtype=np.uint8)  # a writable copy (torch refuses read-only arrays)
        except Image.DecompressionBombError as exc:
            raise ValueError(f"{path}: {exc}") from None

    def _target(self, index: int, height: int, width: int, semantic: np.ndarray | None) -> dict[str, Any]:
        image_id = self.ids[index]
        anns = self.coco.imgToAnns.get(image_id, [])
        xywh = np.array([a["bbox"] for a in anns], np.float64).reshape(-1, 4)
        boxes = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
        area = [a["area"] if "area" in a else a["bbox"][2] * a["bbox"][3] for a in anns]
        target: dict[str, Any] = {
            "boxes": torch.from_numpy(boxes),
            "labels": torch.tensor([self.category_to_label[a["category_id"]] for a in anns], dtype=torch.int64),
            "iscrowd": torch.tensor([int(a.get("iscrowd", 0)) for a in anns], dtype=torch.int64),
            "area": torch.tensor(area, dtype=torch.float64),
            "image_id": image_id,
            "size": (height, width),
        }
        if self.masks == "instance":
            masks = np.zeros((len(anns), height, width), np.uint8)
            for k, ann in enumerate(anns):
                seg = ann["segmentation"]
                if isinstance(seg, list):
                    seg = [p for p in seg if len(p) >= 6]
                    if not seg:
                        continue  # no polygon with an inside: an empty mask
                    ann = {"image_id": image_id, "segmentation": seg}
                masks[k] = self.coco.annToMask(ann)
            target["masks"] = torch.from_numpy(masks)
        if semantic is not None:
            target["semantic"] = torch.from_numpy(semantic)
        return target

    def _item(self, index: int, epoch: int, coeffs: Any) -> Item | tuple[int, str, str]:
        """One ``(sample, target)`` from a read's result (coefficients, or the exception it raised)."""
        path = self.paths[index]
        try:
            if isinstance(coeffs, BaseException):
                raise coeffs
            sample = sample_from_coefficients(coeffs, self.crop, 0, index, seed=self.seed, epoch=epoch, exif=self.exif)
            height, width = sample.box[2], sample.box[3]  # the whole image, after any EXIF rotation
            mismatch = self._size_mismatch(index, height, width)
            if mismatch:
                raise JpegError(mismatch, path)
            semantic = None if self.semantic is None else self._semantic(index, height, width)
        except (JpegError, OSError, ValueError) as exc:  # ValueError: a semantic PNG refused
            if self.on_error == "raise":
                raise
            return index, path, str(exc)
        return sample, self._target(index, height, width, semantic)

    def load(self, index: int, epoch: int) -> Item | tuple[int, str, str]:
        """Read one image and its target; on a bad sample under ``"skip"``, ``(index, path, reason)``."""
        return self.load_batch([(epoch, index)])[0]

    def load_batch(self, keys: Sequence[tuple[int, int]]) -> list[Item | tuple[int, str, str]]:
        """:meth:`load` for ``(epoch, index)`` keys, the files read in one GIL-free pass."""
        results = read_coefficients_batch([self.paths[i] for _, i in keys], threads=1, max_pixels=self.max_pixels,
                                          warnings=self.warnings, errors="return")
        return [self._item(index, epoch, res) for (epoch, index), res in zip(keys, results)]

    def check(self, *, threads: int | None = None) -> list[tuple[str, str]]:
        """Decide which images are usable before training: every file decoded in full once under
        the ``warnings`` policy (:func:`dctnet.data.usable.check_files`), its size checked against
        the annotation file's, and its semantic PNG (if any) read. Returns ``(path, reason)`` of
        the refused images. Under ``on_error="raise"`` a refused image raises
        :class:`dctnet.JpegError` naming it, its reason and the others; under ``"skip"`` they
        leave :attr:`ids` (indices renumbered), so no epoch meets them. Costs about one epoch of
        entropy decoding."""
        found = check_files(self.paths, warnings=self.warnings, max_pixels=self.max_pixels, threads=threads)
        self.warned = found.warned
        bad: list[tuple[int, str, str]] = []
        for index, path in enumerate(self.paths):
            if path in found.unusable:
                bad.append((index, path, found.unusable[path]))
                continue
            try:
                head = read_header(path, max_pixels=self.max_pixels)
                height, width = head.size
                if self.exif == "apply" and head.exif_orientation in _TRANSPOSING:
                    height, width = width, height
                reason = self._size_mismatch(index, height, width)
                if reason is None and self.semantic is not None:
                    self._semantic(index, height, width)
            except (JpegError, OSError, ValueError) as exc:
                reason = str(exc)
            if reason:
                bad.append((index, path, reason))
        if bad and self.on_error == "raise":
            others = "; ".join(f"{p}: {why}" for _, p, why in bad[1:6]) + ("; …" if len(bad) > 6 else "")
            more = f" — and {len(bad) - 1} more unusable images ({others})" if len(bad) > 1 else ""
            raise JpegError(f"{bad[0][2]}{more} (on_error='skip' leaves them out)", bad[0][1])
        if bad:
            drop = {i for i, _, _ in bad}
            self.ids = [v for i, v in enumerate(self.ids) if i not in drop]
            self.paths = [v for i, v in enumerate(self.paths) if i not in drop]
        return [(p, why) for _, p, why in bad]


def collate_detection(items: Sequence[Item | tuple[int, str, str] | None], *, grid: tuple[int, int] | None = None,
                      pin_memory: bool | None = None) -> tuple[JpegBatch, list[dict[str, Any]]]:
    """:class:`CocoDataset` items → ``(batch, targets)``: the samples collated by
    :func:`dctnet.data.collate` (grouped by layout; ``grid`` and ``pin_memory`` as there) and the
    targets in batch order (``targets[b]`` belongs to ``batch.index[b]``). Skipped items
    (``(index, path, reason)``) are left out with their targets and listed in ``batch.skipped``.
    Usable as a ``DataLoader``'s ``collate_fn`` as it is."""
    samples: list[CoefficientSample | tuple[int, str, str]] = []
    targets: list[dict[str, Any]] = []
    for item in items:
        if item is None:
            continue
        if len(item) == 2 and isinstance(item[0], CoefficientSample):
            samples.append(item[0])
            targets.append(item[1])  # type: ignore[arg-type]
        else:
            samples.append(item)  # type: ignore[arg-type]
    return collate(samples, grid=grid, pin_memory=pin_memory), targets


#: ``data.source: coco``: detection and segmentation recipes, whose trainer (:mod:`dctnet.train.detection`) reads it
register_source(DataSource("coco", task="detection"))
