"""The device arm feeds a detector what torchvision's pipeline feeds it (benchmarks/detection_equivalence.py
on a few batches): with the same draws, Pillow + torchvision v2 + the detector's own resize against
dctnet's device step — grey levels, boxes, labels, masks and the boxes each arm drops."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from conftest import ROOT, SHARED

pytest.importorskip("pycocotools")

TREES = SHARED / "data" / "trees"


@pytest.fixture(scope="module")
def equivalence():
    spec = importlib.util.spec_from_file_location("detection_equivalence",
                                                  ROOT / "benchmarks" / "detection_equivalence.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not (TREES / "train.json").exists(), reason="needs ../shared/data/trees")
@pytest.mark.parametrize("decode,grey", [("float", 0.5), ("exact", 0.02)])
def test_the_trees_recipe_feeds_both_arms_the_same_inputs(equivalence, decode, grey):
    """The shipped trees recipe, 8 training tiles of epoch 1: within the bounds (float decode: mean
    grey difference ≤ 0.5; exact decode: Pillow's pixels, so all but resampling rounding)."""
    s = equivalence.compare(equivalence.RECIPE, [f"data.decode={decode}", "train.seed=3"], epochs=(1,), limit=8)
    assert s["images"] == 8 and not equivalence.within_bounds(s), equivalence.within_bounds(s)
    assert s["worst_mean_grey"] <= grey and s["boxes"] > 0


def test_masks_crops_and_drops_agree_on_a_generated_set(equivalence, tmp_path):
    """Mask R-CNN's inputs under the ssd preset (colour distortion, zoom-out, IoU crops that drop
    boxes): the same masks, boxes, labels and drops in both arms, on five JPEG layouts."""
    from dctnet.synthetic import make_instance_set

    make_instance_set(str(tmp_path / "set"), train=8, val=1, size=(96, 128), seed=5)
    split = {s: {"images": s, "annotations": f"{s}.json"} for s in ("train", "val")}
    recipe = {"data": {"source": "coco", "root": str(tmp_path / "set"), **split, "batch_size": 4, "decode": "exact"},
              "model": {"arch": "torchvision:maskrcnn_resnet50_fpn"},
              "detect": {"masks": True, "preset": "ssd", "min_size": 96, "max_size": 128}}
    s = equivalence.compare(recipe, [], epochs=(0, 1))
    assert s["images"] == 16 and not equivalence.within_bounds(s), equivalence.within_bounds(s)
    assert s["dropped_device"] == s["dropped_rgb"] > 0  # (the crops drop boxes: the counts are compared, not 0 = 0)


def test_the_comparison_sees_a_difference(equivalence):
    """The bounds can fail: a shifted image, a moved box, another mask or another drop is reported."""
    image = torch.rand(3, 8, 8)
    boxes = torch.tensor([[1.0, 1.0, 5.0, 5.0]])
    masks = torch.zeros(1, 8, 8, dtype=torch.uint8)
    from torchvision import tv_tensors

    target = {"labels": torch.tensor([1]), "box_drops": (2, 1, 0)}
    want_target = {"boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=(8, 8)), "masks": masks}
    moved = {"boxes": boxes, "labels": torch.tensor([1]), "masks": masks}
    same = equivalence._row(0, 1, image, moved, {"_kept": [0]}, image, want_target, target)
    assert not equivalence.within_bounds(equivalence._summary([same]))
    for bad in ({**moved, "boxes": boxes + 1e-3}, {**moved, "labels": torch.tensor([2])}, {**moved, "masks": masks + 1}):
        row = equivalence._row(0, 1, image, bad, {"_kept": [0]}, image, want_target, target)
        assert equivalence.within_bounds(equivalence._summary([row]))
    assert equivalence.within_bounds(equivalence._summary([equivalence._row(0, 1, (image + 0.01).clamp(0, 1), moved,
                                                                           {"_kept": [0]}, image, want_target,
                                                                           target)]))
    dropped = equivalence._row(0, 1, image, moved, {"_kept": [0, 1]}, image, want_target, target)
    assert equivalence.within_bounds(equivalence._summary([dropped]))
