"""COCO evaluation of detections with pycocotools: predictions in COCO's results format, bbox (and
segm) AP by ``COCOeval``, and the mIoU of semantic masks.

Predictions are gathered over ranks before the evaluation (every rank's list, in rank order), so a
DDP run reports the AP of the whole split.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["COCO_STATS", "batch_results", "coco_results", "evaluate_coco", "gather_results", "mean_iou"]

#: the names of COCOeval's 12 summary numbers, in its order (``stats``), as metrics keys
COCO_STATS = ("AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")


def coco_results(image_id: int, boxes: Tensor, scores: Tensor, labels: Tensor, category_ids: Sequence[int | None],
                 masks: Tensor | None = None, mask_threshold: float = 0.5) -> list[dict[str, Any]]:
    """One image's detections in COCO's results format: ``bbox`` ``[x, y, w, h]`` from XYXY
    ``boxes (N, 4)`` in the image's pixels, ``score``, ``category_id`` (``category_ids[label]``), and
    with ``masks (N, 1, H, W)`` probabilities (torchvision's Mask R-CNN output) ``segmentation`` as
    compressed RLE of ``mask > mask_threshold`` (torchvision's references' threshold)."""
    boxes = boxes.detach().to("cpu", torch.float64)
    xywh = torch.cat([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], 1).tolist()
    scores_l, labels_l = scores.detach().cpu().tolist(), labels.detach().cpu().tolist()
    out = [{"image_id": int(image_id), "category_id": int(category_ids[lab]), "bbox": [round(v, 3) for v in box],
            "score": float(s)} for box, s, lab in zip(xywh, scores_l, labels_l)]
    if masks is not None and len(out):
        from pycocotools import mask as mask_utils  # optional dependency (pycocotools, the "coco" extra)

        binary = (masks.detach()[:, 0] > mask_threshold).cpu().numpy().astype(np.uint8)
        for r, m in zip(out, binary):
            rle = mask_utils.encode(np.asfortranarray(m))
            rle["counts"] = rle["counts"].decode("ascii")
            r["segmentation"] = rle
    return out


def batch_results(ds: Any, images: Sequence[Tensor], targets: Sequence[dict[str, Any]],
                  outputs: Sequence[dict[str, Tensor]], *, in_canvas: bool, clamp: bool) -> list[dict[str, Any]]:
    """A batch's predictions as COCO results in the files' pixels (host values): ``ds`` the val split
    (a :class:`dctnet.data.CocoDataset`), ``images[b]`` the model's input ``(3, h, w)``. ``in_canvas``:
    a prepared detector's predictions, in the input's canvas with masks unpasted, mapped to the file
    (:func:`dctnet.models.detection.detections_to_image`: masks pasted once, at the file's size, as
    torchvision's); ``clamp``: boxes kept to the file (a DCT detector's mosaic is its canvas rounded
    up to 8)."""
    from dctnet.models.detection import detections_to_image  # (torchvision: detection only)

    results: list[dict[str, Any]] = []
    for image, target, out in zip(images, targets, outputs):
        size = tuple(ds.coco.imgs[target["image_id"]][k] for k in ("height", "width"))
        if in_canvas:
            out = detections_to_image(out, tuple(image.shape[-2:]), size)
            if clamp:
                boxes = out["boxes"].clone()
                boxes[:, 0::2] = boxes[:, 0::2].clamp(0, size[1])
                boxes[:, 1::2] = boxes[:, 1::2].clamp(0, size[0])
                out["boxes"] = boxes
        results += coco_results(target["image_id"], out["boxes"], out["scores"], out["labels"], ds.category_ids,
                                out.get("masks"))
    return results


def gather_results(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every rank's results, in rank order (the list itself without a process group)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return results
    gathered: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, results)
    return [r for part in gathered for r in part]


def evaluate_coco(coco_gt: Any, results: list[dict[str, Any]], *, iou_types: Sequence[str] = ("bbox",),
                  image_ids: Sequence[int] | None = None, out: str | Path | None = None) -> dict[str, float]:
    """pycocotools' ``COCOeval`` of ``results`` against the ground truth ``coco_gt`` (a pycocotools
    ``COCO``, e.g. :attr:`dctnet.data.CocoDataset.coco`) on ``image_ids`` (default: every image of
    ``coco_gt``). Returns ``{"bbox_AP": …, "bbox_AP50": …, …, "segm_AP": …}`` (:data:`COCO_STATS`;
    fractions in [0, 1]; −1 where COCO has nothing to measure). ``out``: write ``results`` there as
    JSON (COCO's results format, what ``coco_gt.loadRes`` reads) first. No results at all: every
    number is 0 (pycocotools refuses an empty results list)."""
    from pycocotools.coco import COCO  # optional dependency (pycocotools, the "coco" extra)
    from pycocotools.cocoeval import COCOeval  # (as above)

    if out is not None:
        Path(out).write_text(json.dumps(results))
    ids = sorted(coco_gt.getImgIds()) if image_ids is None else sorted(int(i) for i in image_ids)
    metrics: dict[str, float] = {}
    if not results:
        return {f"{t}_{k}": 0.0 for t in iou_types for k in COCO_STATS}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress and the table
        dt: COCO = coco_gt.loadRes([dict(r) for r in results])  # loadRes adds fields: keep ours clean
        for iou_type in iou_types:
            ev = COCOeval(coco_gt, dt, iou_type)
            ev.params.imgIds = ids
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
            metrics.update({f"{iou_type}_{k}": float(v) for k, v in zip(COCO_STATS, ev.stats)})
    return metrics


def mean_iou(confusion: Tensor) -> float:
    """Mean intersection over union of a ``(K, K)`` confusion matrix (rows: truth, columns:
    prediction) over the classes present in either (torchvision's segmentation reference's
    ``ConfusionMatrix``, which averages over all K; classes absent from both are left out here)."""
    c = confusion.to(torch.float64)
    inter = c.diag()
    union = c.sum(0) + c.sum(1) - inter
    present = union > 0
    return float((inter[present] / union[present]).mean()) if bool(present.any()) else 0.0
