"""``dctnet browse``: the samples of a recipe exactly as its device step hands them to the model
(before the model's normalisation), written as lossless 8-bit PNGs with their targets — for
checking an augmentation before a long run.

``out/`` receives ``00000.png`` …, ``targets.json`` (COCO format in those images' pixels: boxes
``[x, y, w, h]``, masks as RLE, category ids as the dataset's; for classification recipes no
annotations, each image entry carrying its ``label`` and, under mixing, its soft ``target``) and
``contact_sheet.png`` (thumbnails with the boxes and masks drawn). Segmentation recipes write one
annotation per class present (COCO's stuff format: the class index as ``category_id``, its pixels as
RLE; the ignore index 255 left out). Training samples take the draws
of epoch 0's first steps (the same as training's); eval samples the eval transform.

PNG values are the pixels clamped to [0, 1] and rounded to 8 bits: an op that leaves the range on
purpose (erasing's noise) shows clamped.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dctnet import transforms as T
from dctnet.train.pipeline import build_pipeline
from dctnet.train.process import start_process
from dctnet.train.recipe import Recipe
from dctnet.train.tasks import build_task
from dctnet.kernels.normalization import input_mean_std

__all__ = ["browse"]

#: colours of the boxes and masks drawn on the contact sheet (RGB)
_PALETTE = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48), (145, 30, 180),
            (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212)]

#: the dark stroke each side of a box's coloured line: a box coloured like the object under it (a red
#: box on a red object) still shows as two dark lines, and on a dark background the colour shows
_BOX_EDGE = (0, 0, 0)


def _draw_box(draw: Any, box: tuple[float, float, float, float], colour: tuple[int, int, int]) -> None:
    """A two-tone box outline ``[x1, y1, x2, y2]``: a 2-pixel line of ``colour`` between two 1-pixel
    dark lines, so that it shows on any background — on one of its own colour the dark lines do,
    on a dark one the colour does (Pillow's ``width`` grows a rectangle's outline inwards)."""
    x1, y1, x2, y2 = box
    draw.rectangle([x1 - 1, y1 - 1, x2 + 1, y2 + 1], outline=_BOX_EDGE, width=4)
    draw.rectangle([x1, y1, x2, y2], outline=colour, width=2)


def _png(image: Tensor, path: Path) -> tuple[int, int]:
    """``(3, H, W)`` float in [0, 1] → an 8-bit RGB PNG; returns (H, W)."""
    from PIL import Image  # optional dependency (Pillow writes the PNGs)

    arr = (image.detach().float().clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).cpu().numpy()
    Image.fromarray(np.ascontiguousarray(arr), "RGB").save(path, format="PNG")
    return arr.shape[0], arr.shape[1]


def _rle(mask: Tensor) -> dict[str, Any]:
    from pycocotools import mask as mask_utils  # optional dependency (pycocotools, the "coco" extra)

    rle = mask_utils.encode(np.asfortranarray(mask.detach().cpu().numpy().astype(np.uint8)))
    rle["counts"] = rle["counts"].decode("ascii")
    return rle


def _contact_sheet(paths: list[Path], annotations: list[list[dict[str, Any]]], out: Path, thumb: int = 256) -> None:
    from PIL import Image, ImageDraw  # optional dependency (Pillow)

    n = len(paths)
    cols = max(1, math.ceil(math.sqrt(n)))
    rows = max(1, math.ceil(n / cols))
    sheet = Image.new("RGB", (cols * (thumb + 4), rows * (thumb + 4)), (32, 32, 32))
    for k, (path, anns) in enumerate(zip(paths, annotations)):
        with Image.open(path) as im:
            im = im.convert("RGB")
        if any("segmentation" in a for a in anns):
            from pycocotools import mask as mask_utils  # optional dependency (pycocotools)

            over = np.asarray(im).astype(np.float32)
            for j, a in enumerate(anns):
                m = mask_utils.decode(a["segmentation"]).astype(bool)
                over[m] = 0.5 * over[m] + 0.5 * np.array(_PALETTE[j % len(_PALETTE)], np.float32)
            im = Image.fromarray(over.round().astype(np.uint8))
        scale = thumb / max(im.size)
        im = im.resize((max(1, round(im.width * scale)), max(1, round(im.height * scale))), Image.BILINEAR)
        draw = ImageDraw.Draw(im)  # boxes drawn on the thumbnail: a line stays visible at any scale
        for j, a in enumerate(anns):
            x, y, w, h = (v * scale for v in a["bbox"])
            _draw_box(draw, (x, y, x + w, y + h), _PALETTE[j % len(_PALETTE)])
        sheet.paste(im, ((k % cols) * (thumb + 4) + 2, (k // cols) * (thumb + 4) + 2))
    sheet.save(out, format="PNG")


def _classification_samples(recipe: Recipe, split: str, n: int):
    """``(image (3, H, W) in [0, 1], label, soft target or None)`` as the device step makes them."""
    r = recipe
    pipe = build_pipeline(r, torch.device("cpu"), 0, 1)
    train = split == "train"
    loader = pipe.train_loader if train else pipe.val_loader
    if r.model.input == "rgb":  # the baseline: its workers normalised; undo it
        mean, std = (torch.tensor(v).reshape(1, 3, 1, 1) for v in input_mean_std(r.model.arch))
        for x, y, _ in loader:
            target = None
            if train:
                x, target = pipe._mix_rgb(x, y)
                target = target if target.dim() == 2 else None
            for b in range(x.shape[0]):
                yield (x[b:b + 1] * std + mean)[0], int(y[b]), None if target is None else target[b]
                n -= 1
                if n <= 0:
                    return
        return
    s = pipe.step  # the same geometry and ops, ending in plain [0, 1] RGB instead of the model's input
    ops = list(s.train_transform.transforms[:-1])
    step = T.DeviceStep(s.size, input="rgb", augment=ops, mean=None, std=None, exact=s.exact,
                        interpolation=s.interpolation, eval_interpolation=s.eval_interpolation, eval_fill=s.eval_fill,
                        pixels="8bit" if s.pixel_levels else "float", seed=s.seed, eval_size=s.eval_size)
    for i, batch in enumerate(loader):
        batch = T.as_jpeg_batch(batch)
        if train:
            x, target, labels = step.run(batch, step.train_transform, T.step_generator(r.train.seed, 0, i, 0))
        else:
            x, target, labels = step.run(batch, None, None)
        for b in range(x.shape[0]):
            yield x[b], int(labels[b]), target[b] if target.dim() == 2 else None
            n -= 1
            if n <= 0:
                return


def _detection_samples(recipe: Recipe, split: str, n: int, out: Path):
    """``(image (3, h, w) in [0, 1], target, dataset)`` as the detection step hands them to the model."""
    recipe.train.out = str(out)
    task = build_task(recipe, start_process(recipe, lambda msg: None))  # the task's data, as training reads it
    train = split == "train"
    loader = task.train_loader if train else task.val_loader
    step = task.step if train else task.eval_step
    ds = task.train_set if train else task.val_set
    cost = {"cpu": 0.0, "n": 0.0}
    for images, targets in task.batches(loader, step, 0, cost):
        for image, target in zip(images, targets):
            yield image, target, ds
            n -= 1
            if n <= 0:
                return


def browse(recipe: Recipe, *, split: str = "train", n: int = 16, out: str | Path = "browse") -> dict[str, Any]:
    """Write ``n`` samples of ``split`` (``train`` or ``val``) of ``recipe`` to ``out`` (see the
    module docstring). Returns the COCO dict written to ``targets.json``."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    images, annotations, paths, per_image = [], [], [], []
    categories: list[dict[str, Any]] = []
    if recipe.detection:
        ann_id = 1
        seen_classes: set[int] = set()
        for k, (image, target, ds) in enumerate(_detection_samples(recipe, split, n, out)):
            path = out / f"{k:05d}.png"
            h, w = _png(image, path)
            images.append({"id": k + 1, "file_name": path.name, "width": w, "height": h,
                           "source_image_id": int(target["image_id"])})
            anns = []
            boxes = target["boxes"].detach().cpu().double()
            masks = target.get("masks")
            for j in range(boxes.shape[0]):
                x1, y1, x2, y2 = boxes[j].tolist()
                a = {"id": ann_id, "image_id": k + 1, "category_id": int(ds.category_ids[int(target["labels"][j])]),
                     "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1), "iscrowd": 0}
                if masks is not None:
                    a["segmentation"] = _rle(masks[j])
                    a["area"] = float(masks[j].sum())
                anns.append(a)
                ann_id += 1
            if target.get("semantic") is not None:  # a segmentation recipe: one annotation per class (COCO stuff)
                anns = []
                sem = target["semantic"].cpu()
                for c in sorted(int(v) for v in sem.unique().tolist() if v != 255):
                    m = sem == c
                    ys, xs = m.nonzero(as_tuple=True)
                    x0, y0 = int(xs.min()), int(ys.min())
                    anns.append({"id": ann_id, "image_id": k + 1, "category_id": c, "segmentation": _rle(m),
                                 "area": float(m.sum()), "iscrowd": 0,
                                 "bbox": [x0, y0, int(xs.max()) - x0 + 1, int(ys.max()) - y0 + 1]})
                    ann_id += 1
                    seen_classes.add(c)
            annotations += anns
            paths.append(path)
            per_image.append(anns)
            categories = ([{"id": c, "name": f"class {c}"} for c in sorted(seen_classes)] if seen_classes else
                          [{"id": cid, "name": name} for cid, name in zip(ds.category_ids[1:], ds.classes)])
    else:
        for k, (image, label, target) in enumerate(_classification_samples(recipe, split, n)):
            path = out / f"{k:05d}.png"
            h, w = _png(image, path)
            entry = {"id": k + 1, "file_name": path.name, "width": w, "height": h, "label": label}
            if target is not None:
                entry["target"] = [round(float(v), 6) for v in target]
            images.append(entry)
            paths.append(path)
            per_image.append([])
    coco = {"images": images, "annotations": annotations, "categories": categories}
    (out / "targets.json").write_text(json.dumps(coco))
    _contact_sheet(paths, per_image, out / "contact_sheet.png")
    return coco
