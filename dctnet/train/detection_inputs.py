"""The detection task's inputs: the COCO splits a recipe names, the ``rgb`` arm's dataset
(Pillow's decode and torchvision v2's ops in DataLoader workers, each sample's draws seeded), the
worker-CPU stamp on each batch, and the box accounting both arms report per epoch."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dctnet.data import CocoDataset
from dctnet.train.recipe import Recipe

__all__ = ["PillowCoco", "StampedCollate", "box_drops", "list_collate", "semantic_dir", "split_paths", "time_resize"]


def semantic_dir(recipe: Recipe, split: str) -> Path | None:
    """The split's folder of class-index PNGs (``semantic``), or None."""
    spec = getattr(recipe.data, split)
    if "semantic" not in spec:
        return None
    return Path(spec["semantic"]) if os.path.isabs(spec["semantic"]) else Path(recipe.data.root) / spec["semantic"]


def split_paths(recipe: Recipe, split: str) -> tuple[Path, Path]:
    spec = getattr(recipe.data, split)
    root = Path(recipe.data.root)
    return tuple(Path(p) if os.path.isabs(p) else root / p for p in (spec["images"], spec["annotations"]))


class _TimedResize:
    """A transform's own ``resize``, timed (an object, not a closure: a deep copy of the model — its
    EMA — then calls its own transform's resize, not the original's)."""

    def __init__(self, own: Any, clock: list[float]) -> None:
        self.own, self.clock = own, clock

    def __call__(self, image, target=None):
        t0 = time.thread_time()
        try:
            return self.own(image, target)
        finally:
            self.clock[0] += time.thread_time() - t0


def time_resize(transform: nn.Module, clock: list[float]) -> None:
    """Add the host CPU of each call of ``transform.resize`` (a ``GeneralizedRCNNTransform``'s, per
    image in the model's forward) to ``clock[0]``: the rgb arm's last input op, which the device arm's
    step does itself (:class:`~dctnet.transforms.detection.DetectorResize`)."""
    transform.resize = _TimedResize(transform.resize, clock)


class StampedCollate:
    """A DataLoader collate that also returns its worker's id and CPU seconds so far, so the host
    CPU of the input pipeline can be read off the batches (0 workers: the main thread's)."""

    def __init__(self, collate) -> None:
        self.collate = collate

    def __call__(self, items):
        info = torch.utils.data.get_worker_info()
        return self.collate(items), (info.id if info else -1, time.process_time() if info else 0.0)


def box_drops(boxes: Any, size: tuple[int, int], kept: Any) -> tuple[int, int, int]:
    """One training sample's box accounting: ``(boxes, dropped, dropped past the image)`` — its file's
    boxes ``(N, 4)`` XYXY in an image of ``size (H, W)``, of which the geometry and
    ``SanitizeBoundingBoxes`` kept those at indices ``kept``; the last counts the dropped boxes that
    ran past their image in the file (sanitizing drops those wherever no crop cuts them back in).
    Host arrays or tensors (never the device's: no sync)."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    h, w = size
    lost = np.ones(len(b), bool)
    lost[np.asarray(kept, dtype=np.int64)] = False
    past = (b[:, 0] < 0) | (b[:, 1] < 0) | (b[:, 2] > w) | (b[:, 3] > h)
    return len(b), int(lost.sum()), int((lost & past).sum())


class PillowCoco(torch.utils.data.Dataset):
    """The torchvision arm's dataset: Pillow's decode of each image of a :class:`CocoDataset` (its
    targets as ``tv_tensors``), then torchvision v2's ops of the preset, in the DataLoader worker.
    Its ops draw from the process's generators: wrap it in :class:`dctnet.train.rng.SeededDraws`
    for draws seeded per sample from (seed, epoch, index)."""

    def __init__(self, coco: CocoDataset, transforms: Any) -> None:
        self.coco, self.transforms = coco, transforms

    def __len__(self) -> int:
        return len(self.coco)

    def __getitem__(self, index: int):
        from PIL import Image  # optional dependency (Pillow: the baseline's decoder)
        from torchvision import tv_tensors  # optional dependency (the baseline's)
        from torchvision.transforms.v2 import functional as TVF  # (as above)

        path = self.coco.paths[index]
        with Image.open(path) as im:
            image = TVF.pil_to_tensor(im.convert("RGB"))
        h, w = image.shape[-2:]
        semantic = self.coco._semantic(index, h, w) if self.coco.semantic is not None else None
        t = self.coco._target(index, h, w, semantic)
        sample = {"image": tv_tensors.Image(image), "labels": t["labels"], "iscrowd": t["iscrowd"], "area": t["area"],
                  "boxes": tv_tensors.BoundingBoxes(t["boxes"].float(), format="XYXY", canvas_size=(h, w)),
                  "box_index": torch.arange(len(t["boxes"]))}  # (which boxes the ops keep: per_box_fields)
        if "masks" in t:
            sample["masks"] = tv_tensors.Mask(t["masks"])
        if "semantic" in t:
            sample["semantic"] = tv_tensors.Mask(t["semantic"])
        if self.transforms is not None:
            sample = self.transforms(sample)
        image = TVF.to_dtype(sample.pop("image"), torch.float32, scale=True).as_subclass(torch.Tensor)
        target = {k: (v.as_subclass(torch.Tensor) if isinstance(v, torch.Tensor) else v) for k, v in sample.items()}
        target.update(image_id=t["image_id"], size=t["size"],
                      box_drops=box_drops(t["boxes"], (h, w), target.pop("box_index")))
        return image, target


def list_collate(items):
    return [i[0] for i in items], [i[1] for i in items]
