"""`dctnet browse`: the PNGs are what the device step hands the model (the training step's own
tensors, denormalised, to the 8-bit level), targets.json is COCO that pycocotools reads with the
step's boxes and masks, and the contact sheet is written — for classification (every input) and
detection (boxes; masks) recipes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from dctnet import transforms as T
from dctnet.cli import main
from dctnet.synthetic import make_labelled_dataset
from dctnet.train import load_recipe
from dctnet.train.browse import browse
from dctnet.train.pipeline import build_pipeline
from dctnet.kernels.normalization import input_mean_std

from conftest import ROOT, SHARED, write_recipe

TREES = SHARED / "data" / "trees"


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    return make_labelled_dataset(str(root), classes=3, train_per_class=12, val_per_class=4, size=(40, 64), seed=2)


def _png(path) -> torch.Tensor:
    return torch.from_numpy(np.asarray(Image.open(path).convert("RGB")).copy()).permute(2, 0, 1).float()


@pytest.mark.parametrize("arm", ["device-rgb", "dct"])
def test_classification_samples_are_the_training_steps_own(tmp_path, shapes, arm):
    """The first training batch of the recipe's own pipeline (its step, its epoch-0 draws), its model
    input denormalised (device-rgb) or taken back to pixels (dct): the PNGs hold those values."""
    aug = [{"name": "RandomHorizontalFlip"}, {"name": "ColorJitter", "brightness": 0.4}, {"name": "Mixup",
                                                                                      "mixup_alpha": 0.8}]
    path = write_recipe(tmp_path, shapes, batch_size=8, model__input=arm, model__stem=None if arm == "device-rgb" else
                        "dct8", augment=aug)
    recipe = load_recipe(path)
    coco = browse(recipe, split="train", n=6, out=tmp_path / "b")
    pipe = build_pipeline(load_recipe(path), torch.device("cpu"))
    batch = next(iter(pipe.train_loader))
    x, target, labels = pipe.step.run(T.as_jpeg_batch(batch), pipe.step.train_transform,
                                      T.step_generator(recipe.train.seed, 0, 0, 0))
    if arm == "device-rgb":
        mean, std = (torch.tensor(v).reshape(1, 3, 1, 1) for v in input_mean_std(recipe.model.arch))
        pixels = x * std + mean
    else:
        pixels = T.ToRGB(None, None)(x)
    for k, entry in enumerate(coco["images"]):
        got = _png(tmp_path / "b" / entry["file_name"])
        want = (pixels[k].clamp(0, 1) * 255)
        assert (got - want).abs().max() <= 0.5 + 1e-3, k  # the same values, rounded to 8 bits
        assert entry["label"] == int(labels[k]) and entry["target"] == pytest.approx(target[k].tolist(), abs=1e-5)
    assert coco["annotations"] == [] and (tmp_path / "b" / "contact_sheet.png").exists()


def test_classification_eval_and_the_rgb_arm(tmp_path, shapes):
    path = write_recipe(tmp_path, shapes, batch_size=4, model__input="rgb", model__stem=None)
    with pytest.raises(SystemExit) as done:
        main(["browse", str(path), "--split", "val", "--n", "3", "--out", str(tmp_path / "v")])
    assert done.value.code == 0
    coco = json.loads((tmp_path / "v" / "targets.json").read_text())
    assert len(coco["images"]) == 3 and all(im["width"] == im["height"] == 32 for im in coco["images"])


@pytest.mark.skipif(not (TREES / "train.json").exists(), reason="needs ../shared/data/trees")
def test_detection_samples_and_their_boxes(tmp_path):
    from pycocotools.coco import COCO

    from dctnet.train.trainer import Trainer

    over = [f"data.root={TREES}", "data.workers=0", "detect.preset=ssdlite", f"train.out={tmp_path / 'run'}"]
    recipe = load_recipe(ROOT / "recipes" / "detection" / "trees_fasterrcnn_mnv3_320.yaml", over)
    coco = browse(recipe, split="train", n=4, out=tmp_path / "b")
    trainer = Trainer(load_recipe(ROOT / "recipes" / "detection" / "trees_fasterrcnn_mnv3_320.yaml", over),
                               log=lambda m: None)
    images, targets = next(trainer.task.batches(trainer.task.train_loader, trainer.task.step, 0, {"cpu": 0.0, "n": 0.0}))
    index = COCO()
    index.dataset = coco
    index.createIndex()
    for k, (image, target) in enumerate(zip(images, targets)):
        got = _png(tmp_path / "b" / f"{k:05d}.png")
        assert got.shape == image.shape and (got - image.clamp(0, 1) * 255).abs().max() <= 0.5 + 1e-3
        anns = index.loadAnns(index.getAnnIds(imgIds=k + 1))
        xywh = torch.tensor([a["bbox"] for a in anns], dtype=torch.float64).reshape(-1, 4)
        boxes = torch.cat([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], 1)
        assert torch.allclose(boxes, target["boxes"].double(), atol=1e-4)
        assert all(a["category_id"] == 1 for a in anns)
    sheet = Image.open(tmp_path / "b" / "contact_sheet.png")
    assert sheet.size[0] > 256


def test_detection_masks_are_rle_of_the_steps_masks(tmp_path):
    from pycocotools import mask as mask_utils

    from dctnet.synthetic import make_instance_set
    from dctnet.train.trainer import Trainer

    make_instance_set(str(tmp_path / "set"), train=3, val=1, size=(64, 96), seed=5)
    values = {"data": {"source": "coco", "root": str(tmp_path / "set"), "batch_size": 3, "workers": 0,
                       "train": {"images": "train", "annotations": "train.json"},
                       "val": {"images": "val", "annotations": "val.json"}},
              "model": {"arch": "torchvision:maskrcnn_resnet50_fpn", "input": "device-rgb"},
              "detect": {"masks": True, "preset": "hflip", "min_size": 64, "max_size": 96},
              "train": {"out": str(tmp_path / "run")}}
    coco = browse(load_recipe(None, values), n=3, out=tmp_path / "b")
    trainer = Trainer(load_recipe(None, values), log=lambda m: None)
    _, targets = next(trainer.task.batches(trainer.task.train_loader, trainer.task.step, 0, {"cpu": 0.0, "n": 0.0}))
    anns = coco["annotations"]
    assert len(anns) == sum(len(t["boxes"]) for t in targets) > 0
    j = 0
    for t in targets:
        for m in t["masks"]:
            assert np.array_equal(mask_utils.decode(anns[j]["segmentation"]), m.numpy())
            j += 1


def test_segmentation_samples_write_their_class_maps(tmp_path):
    from pycocotools import mask as mask_utils

    from dctnet.synthetic import make_instance_set
    from dctnet.train.trainer import Trainer

    make_instance_set(str(tmp_path / "set"), train=3, val=1, size=(64, 96), seed=6, semantic=True)
    split = {s: {"images": s, "annotations": f"{s}.json", "semantic": f"{s}_semantic"} for s in ("train", "val")}
    values = {"data": {"source": "coco", "root": str(tmp_path / "set"), **split, "batch_size": 3, "workers": 0},
              "model": {"arch": "torchvision:lraspp_mobilenet_v3_large", "input": "device-rgb", "num_classes": 4},
              "detect": {"base_size": 64, "crop_size": 56}, "train": {"out": str(tmp_path / "run")}}
    coco = browse(load_recipe(None, values), n=3, out=tmp_path / "b")
    trainer = Trainer(load_recipe(None, values), log=lambda m: None)
    _, targets = next(trainer.task.batches(trainer.task.train_loader, trainer.task.step, 0, {"cpu": 0.0, "n": 0.0}))
    for k, t in enumerate(targets):
        rebuilt = np.full(t["semantic"].shape, 255, np.uint8)
        for a in coco["annotations"]:
            if a["image_id"] == k + 1:
                rebuilt[mask_utils.decode(a["segmentation"]).astype(bool)] = a["category_id"]
        assert np.array_equal(rebuilt, t["semantic"].numpy())  # every class's pixels, and 255 where ignored


@pytest.mark.parametrize("background", ["own colour", "black", "white", "grey"])
def test_contact_sheet_boxes_show_on_any_background(tmp_path, background):
    """A box is visible on the object under it: boxes drawn on a region of their own palette
    colour (a red box on a red object), or on black, white or grey, still cross pixels that differ
    from the region by a clear margin on every side — measured on the written sheet."""
    from dctnet.train.browse import _PALETTE, _contact_sheet

    h, w = 128, 51  # 2 × 5 cells of 256 × 255: the thumbnail is the image itself (scale 1)
    image = np.zeros((256, 256, 3), np.uint8)
    anns, cells = [], []
    for j, colour in enumerate(_PALETTE):  # box j is drawn in palette colour j
        y0, x0 = (j // 5) * h, (j % 5) * w
        fill = {"own colour": colour, "black": (0, 0, 0), "white": (255, 255, 255), "grey": (128, 128, 128)}[background]
        image[y0:y0 + h, x0:x0 + w] = fill
        anns.append({"bbox": [x0 + 12, y0 + 20, w - 24, h - 40]})
        cells.append(np.array(fill, np.float64))
    Image.fromarray(image).save(tmp_path / "00000.png")
    _contact_sheet([tmp_path / "00000.png"], [anns], tmp_path / "sheet.png")
    sheet = np.asarray(Image.open(tmp_path / "sheet.png").convert("RGB")).astype(np.float64)[2:258, 2:258]
    for j, (a, fill) in enumerate(zip(anns, cells)):
        x, y, bw, bh = (int(v) for v in a["bbox"])
        cx, cy = x + bw // 2, y + bh // 2
        # 5 pixels either side of each edge, across it: all inside the box's own cell
        across = {"left": sheet[cy, x - 5:x + 6], "right": sheet[cy, x + bw - 5:x + bw + 6],
                  "top": sheet[y - 5:y + 6, cx], "bottom": sheet[y + bh - 5:y + bh + 6, cx]}
        for side, line in across.items():
            contrast = np.linalg.norm(line - fill, axis=1).max()
            assert contrast >= 100, (background, j, _PALETTE[j], side, contrast)
