"""COCO evaluation: the reported AP is pycocotools' own on the saved predictions (recomputed here
from the file, independently), perfect predictions score 1, perturbed ones less; masks go through
RLE and score 1 when they are the ground truth; mIoU against plain numpy."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest
import torch

from dctnet.train.coco_eval import COCO_STATS, coco_results, evaluate_coco, mean_iou

from conftest import SHARED

pycocotools = pytest.importorskip("pycocotools")
from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402

TREES = SHARED / "data" / "trees"


def _gt(path) -> COCO:
    with contextlib.redirect_stdout(io.StringIO()):
        return COCO(str(path))


def _results_from_gt(coco: COCO, jitter: float, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for image_id in coco.getImgIds():
        anns = coco.loadAnns(coco.getAnnIds(imgIds=image_id))
        if not anns:
            continue
        xywh = torch.tensor([a["bbox"] for a in anns], dtype=torch.float64)
        xyxy = torch.cat([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], 1)
        xyxy = xyxy + torch.from_numpy(rng.normal(0, jitter, xyxy.shape))
        scores = torch.from_numpy(rng.uniform(0.5, 1.0, len(anns)))
        labels = torch.ones(len(anns), dtype=torch.int64)
        out += coco_results(image_id, xyxy, scores, labels, [None, *sorted(coco.getCatIds())])
    return out


def _independent(coco: COCO, path) -> list[float]:
    with contextlib.redirect_stdout(io.StringIO()):
        dt = coco.loadRes(str(path))
        ev = COCOeval(coco, dt, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return list(ev.stats)


@pytest.mark.skipif(not (TREES / "val.json").exists(), reason="needs ../shared/data/trees")
@pytest.mark.parametrize("jitter", [0.0, 2.0])
def test_reported_ap_is_pycocotools_on_the_saved_predictions(tmp_path, jitter):
    coco = _gt(TREES / "val.json")
    results = _results_from_gt(coco, jitter)
    metrics = evaluate_coco(coco, results, out=tmp_path / "predictions_val.json")
    stats = _independent(coco, tmp_path / "predictions_val.json")
    assert [metrics[f"bbox_{k}"] for k in COCO_STATS] == pytest.approx(stats, abs=1e-12)
    if jitter == 0:
        assert metrics["bbox_AP"] == pytest.approx(1.0) and metrics["bbox_AP50"] == pytest.approx(1.0)
    else:
        assert 0.2 < metrics["bbox_AP"] < 0.95 and metrics["bbox_AP50"] > metrics["bbox_AP75"]


def test_masks_become_rle_and_score_one_when_they_are_the_truth(tmp_path):
    rng = np.random.default_rng(1)
    images, anns, k = [], [], 1
    for i in range(1, 4):
        images.append({"id": i, "file_name": f"{i}.jpg", "width": 64, "height": 48})
        for _ in range(3):
            x, y = rng.integers(0, 40), rng.integers(0, 30)
            w, h = rng.integers(6, 24), rng.integers(6, 18)
            poly = [x, y, x + w, y, x + w, y + h, x, y + h]
            anns.append({"id": k, "image_id": i, "category_id": 7, "bbox": [int(x), int(y), int(w), int(h)],
                         "area": int(w * h), "iscrowd": 0, "segmentation": [[int(v) for v in poly]]})
            k += 1
    path = tmp_path / "gt.json"
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": [{"id": 7, "name": "box"}]}))
    coco = _gt(path)
    results = []
    for i in range(1, 4):
        a = coco.loadAnns(coco.getAnnIds(imgIds=i))
        masks = torch.stack([torch.from_numpy(coco.annToMask(x)).float() for x in a])[:, None] * 0.9
        xywh = torch.tensor([x["bbox"] for x in a], dtype=torch.float64)
        boxes = torch.cat([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], 1)
        results += coco_results(i, boxes, torch.ones(len(a)), torch.ones(len(a), dtype=torch.int64), [None, 7], masks)
    assert all(isinstance(r["segmentation"]["counts"], str) for r in results)
    json.dumps(results)  # what predictions_val.json holds
    metrics = evaluate_coco(coco, results, iou_types=("bbox", "segm"))
    assert metrics["segm_AP"] == pytest.approx(1.0) and metrics["bbox_AP"] == pytest.approx(1.0)
    empty = evaluate_coco(coco, [], iou_types=("bbox",))
    assert empty["bbox_AP"] == 0.0


def test_mean_iou_against_numpy():
    rng = np.random.default_rng(2)
    truth, pred = rng.integers(0, 4, 5000), rng.integers(0, 4, 5000)
    pred[truth == 2] = 2  # class 2 perfect
    conf = np.zeros((5, 5), np.int64)  # class 4 absent from both: left out
    np.add.at(conf, (truth, pred), 1)
    ious = [((truth == k) & (pred == k)).sum() / ((truth == k) | (pred == k)).sum() for k in range(4)]
    assert mean_iou(torch.from_numpy(conf)) == pytest.approx(float(np.mean(ious)))

