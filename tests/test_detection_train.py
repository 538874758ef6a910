"""`dctnet train` on COCO data: both arms train and evaluate a torchvision detector, the reported AP
is pycocotools' own on the saved predictions, --resume continues, Mask R-CNN reports segm AP on a
generated instance set, and detection recipes refuse what they cannot do, naming the key."""

from __future__ import annotations

import contextlib
import glob
import re
import io
import json

import pytest
import torch

from dctnet.train import RecipeError, load_recipe

from conftest import IMAGENETTE, SHARED, ROOT, segmentation_recipe

pytest.importorskip("pycocotools")
from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402

TREES = SHARED / "data" / "trees"
RECIPE = ROOT / "recipes" / "detection" / "trees_fasterrcnn_mnv3_320.yaml"


def _small(out, **over) -> list[str]:
    sets = {"data.root": str(TREES), "data.batch_size": 2, "data.workers": 0, "data.limit_train": 2,
            "data.limit_val": 2, "optim.epochs": 1, "train.max_steps": 1, "train.out": str(out), **over}
    return [f"{k}={v}" for k, v in sets.items()]


def _pycocotools_ap(gt_path, predictions, image_ids, iou_type="bbox") -> float:
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(gt_path))
        ev = COCOeval(gt, gt.loadRes(str(predictions)), iou_type)
        ev.params.imgIds = sorted(image_ids)
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return float(ev.stats[0]), float(ev.stats[1])


@pytest.mark.skipif(not (TREES / "train.json").exists(), reason="needs ../shared/data/trees")
@pytest.mark.parametrize("arm", ["device-rgb", "rgb"])
def test_both_arms_train_evaluate_and_resume(tmp_path, arm):
    from dctnet.train.trainer import Trainer

    recipe = load_recipe(RECIPE, _small(tmp_path, **{"model.input": arm}))
    trainer = Trainer(recipe, log=lambda m: None)
    record = trainer.fit()
    for key in ("train_loss", "train_loss_classifier", "bbox_AP", "bbox_AP50", "bbox_AP75", "bbox_APs",
                "data_cpu_us_per_sample", "lr", "epoch_seconds"):
        assert key in record, key
    assert record["data_cpu_us_per_sample"] > 0 and torch.isfinite(torch.tensor(record["train_loss"]))
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1]
    predictions = tmp_path / "predictions_val.json"
    results = json.loads(predictions.read_text())
    val_ids = trainer.task.val_set.ids
    assert results and {r["image_id"] for r in results} <= set(val_ids)
    assert all(len(r["bbox"]) == 4 and r["category_id"] == 1 for r in results)
    ap, ap50 = _pycocotools_ap(TREES / "val.json", predictions, val_ids)
    assert record["bbox_AP"] == pytest.approx(ap, abs=1e-12) and record["bbox_AP50"] == pytest.approx(ap50, abs=1e-12)
    # predictions are in the files' pixels: inside each image (up to the detector's own clipping)
    sizes = {i: (im["width"], im["height"]) for i, im in trainer.task.val_set.coco.imgs.items()}
    for r in results:
        x, y, w, h = r["bbox"]
        W, H = sizes[r["image_id"]]
        assert -0.01 <= x and -0.01 <= y and x + w <= W + 0.01 and y + h <= H + 0.01
    if arm == "rgb":
        return  # (resuming is the same code for both arms)
    # --resume: the second epoch continues from last.pt
    again = Trainer(load_recipe(RECIPE, _small(tmp_path, **{"model.input": arm, "optim.epochs": 2})),
                             resume=True, log=lambda m: None)
    assert again.start_epoch == 1
    again.fit()
    assert [r["epoch"] for r in [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]] == [1, 2]


def test_mask_rcnn_on_a_generated_instance_set_reports_segm_ap(tmp_path):
    from dctnet.synthetic import make_instance_set
    from dctnet.train.trainer import Trainer

    textures = sorted(glob.glob(str(IMAGENETTE / "val" / "*" / "*.JPEG")))[:40:5] or None
    paths = make_instance_set(str(tmp_path / "set"), textures=textures, train=2, val=2, size=(64, 96), seed=3)
    recipe = load_recipe(None, {
        "data": {"source": "coco", "root": str(tmp_path / "set"), "train": {"images": "train", "annotations": "train.json"},
                 "val": {"images": "val", "annotations": "val.json"}, "batch_size": 2, "workers": 0},
        "model": {"arch": "torchvision:maskrcnn_resnet50_fpn", "input": "device-rgb"},
        "detect": {"masks": True, "min_size": 64, "max_size": 96},
        "optim": {"epochs": 1, "lr": 0.01, "lr_batch": 16, "weight_decay": 0.0001},
        "train": {"max_steps": 1, "out": str(tmp_path / "run")}})
    record = Trainer(recipe, log=lambda m: None).fit()
    assert "segm_AP" in record and "bbox_AP" in record and "train_loss_mask" in record
    results = json.loads((tmp_path / "run" / "predictions_val.json").read_text())
    if results:  # an untrained model may find nothing: then there is nothing to recompute
        assert all("segmentation" in r for r in results)
        ap, _ = _pycocotools_ap(paths["val"], tmp_path / "run" / "predictions_val.json", [1, 2], "segm")
        assert record["segm_AP"] == pytest.approx(ap, abs=1e-12)


@pytest.mark.parametrize("over,says", [
    ({"model.input": "dct"}, "swaps the stem of a detector's ResNet backbone"),
    ({"model.input": "dct", "model.arch": "torchvision:fasterrcnn_resnet50_fpn", "model.stem": "dct8"},
     "takes idct or dct-up"),
    ({"model.arch": "torchvision:fasterrcnn_mobilenet_v3_large_320"}, "did you mean 'torchvision:fasterrcnn_mobilenet"),
    ({"model.arch": "resnet18"}, "torchvision:NAME"),
    ({"detect.masks": True}, "mask head"),
    ({"data.train": "train"}, "{images: DIR, annotations: FILE.json}"),
    ({"detect.preset": "ssdx"}, "not one of"),
    ({"model.arch": "torchvision:maskrcnn_resnet50_fpn"}, "set detect.masks: true"),
])
def test_detection_recipes_refuse_what_they_cannot_do(tmp_path, over, says):
    with pytest.raises(RecipeError, match=says.replace("{", "\\{").replace("}", "\\}").replace("(", "\\(")):
        load_recipe(RECIPE, _small(tmp_path, **over))
    with pytest.raises(RecipeError, match="detect.preset"):
        load_recipe(RECIPE, {"augment": [{"name": "RandomHorizontalFlip"}, {"name": "RandAugment"}]})


@pytest.mark.skipif(not (TREES / "train.json").exists(), reason="needs ../shared/data/trees")
def test_torchrun_gathers_every_ranks_predictions(tmp_path):
    """Two processes (gloo): each evaluates its share of the val images, rank 0 evaluates all of them."""
    import os
    import subprocess
    import sys

    sets = _small(tmp_path / "run", **{"data.limit_val": 5, "model.input": "device-rgb"})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--rdzv-backend=c10d",
           "--rdzv-endpoint=localhost:0", "-m", "dctnet", "train", str(RECIPE), *[a for s in sets for a in ("--set", s)]]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 1  # written once (rank 0)
    results = json.loads((tmp_path / "run" / "predictions_val.json").read_text())
    with contextlib.redirect_stdout(io.StringIO()):
        val_ids = sorted(COCO(str(TREES / "val.json")).getImgIds())[:5]
    assert {r["image_id"] for r in results} == set(val_ids)  # both ranks' images (rank 1 holds 2 of the 5)
    ap, ap50 = _pycocotools_ap(TREES / "val.json", tmp_path / "run" / "predictions_val.json", val_ids)
    assert records[0]["bbox_AP"] == pytest.approx(ap, abs=1e-12)
    assert "val bbox AP" in r.stdout


@pytest.mark.parametrize("arm", ["device-rgb", "rgb"])
def test_segmentation_models_train_and_report_miou(tmp_path, arm):
    """A torchvision segmentation model on class-index PNGs (the generated set's), the segmentation
    references' presets in both arms; mIoU and pixel accuracy each epoch."""
    from dctnet.train.trainer import Trainer

    record = Trainer(segmentation_recipe(tmp_path, arm, 2), log=lambda m: None).fit()
    split = {s: {"images": s, "annotations": f"{s}.json", "semantic": f"{s}_semantic"} for s in ("train", "val")}
    assert 0.0 <= record["mIoU"] <= 1.0 and 0.0 <= record["pixel_acc"] <= 1.0 and "train_loss_out" in record
    with pytest.raises(RecipeError, match="num_classes"):
        load_recipe(None, {"data": {"source": "coco", **split}, "model": {"arch": "torchvision:fcn_resnet50",
                                                                       "input": arm}})
    with pytest.raises(RecipeError, match="semantic: DIR"):
        load_recipe(None, {"data": {"source": "coco", "train": split["train"],
                                    "val": {"images": "val", "annotations": "val.json"}},
                           "model": {"arch": "torchvision:fcn_resnet50", "input": arm, "num_classes": 4}})


@pytest.mark.parametrize("classifier,detector", [("mobilenet_v3_large", "fasterrcnn_mobilenet_v3_large_320_fpn"),
                                                 ("resnet50", "fasterrcnn_resnet50_fpn")])
def test_a_classifiers_weights_start_the_detectors_backbone(classifier, detector):
    """model.init with a classifier's state_dict: every backbone tensor of the detector comes from it
    (ResNet conv1…layer4, MobileNetV3 features.N → backbone.body.*), the head is left out."""
    import torchvision

    from dctnet.models.detection import backbone_state, build_detector

    torch.manual_seed(0)
    clf = torchvision.models.get_model(classifier, weights=None)
    model = build_detector(detector, num_classes=3)
    state = backbone_state(clf.state_dict(), model)
    body = {k for k in model.state_dict() if k.startswith("backbone.body.") and "num_batches_tracked" not in k}
    assert body <= set(state) and not any(k.startswith(("fc.", "classifier.")) for k in state)
    model.load_state_dict(state, strict=False)
    name = next(iter(k for k in state if k.endswith("weight") and state[k].dim() == 4))
    assert torch.equal(model.state_dict()[name], state[name])


def test_detect_ops_name_torchvisions_classes_for_both_arms(tmp_path):
    """detect.ops: dctnet's ops for the device arms and torchvision v2's own classes of the same names
    and arguments for the rgb arm, both ending in SanitizeBoundingBoxes; a typo or an op the
    torchvision package lacks (for rgb) is refused when the recipe loads."""
    from torchvision.transforms import v2

    from dctnet.transforms import detection as TD

    specs = [{"name": "RandomCrop", "size": 256, "pad_if_needed": True, "fill": 0}, {"name": "RandomVerticalFlip"},
             {"name": "RandomPhotometricDistort", "p": 0.3}]
    ours = TD.build_detection_ops(specs)
    theirs = TD.torchvision_ops(specs).transforms
    assert [type(o).__name__ for o in ours] == [type(o).__name__ for o in theirs] == [
        "RandomCrop", "RandomVerticalFlip", "RandomPhotometricDistort", "SanitizeBoundingBoxes"]
    assert ours[0].size == (256, 256) and theirs[0].pad_if_needed and isinstance(theirs[-1], v2.SanitizeBoundingBoxes)
    with pytest.raises(RecipeError, match="unknown detection op 'RandomCrops'"):
        load_recipe(RECIPE, _small(tmp_path, **{"detect.ops": "[{name: RandomCrops, size: 3}]"}))
    with pytest.raises(RecipeError, match="references', not in the torchvision package"):
        load_recipe(RECIPE, _small(tmp_path, **{"detect.ops": "[{name: FixedSizeCrop, size: 64}]", "model.input": "rgb"}))
    with pytest.raises(RecipeError, match="replaces detect.preset"):
        load_recipe(RECIPE, _small(tmp_path, **{"detect.ops": "[{name: RandomVerticalFlip}]", "detect.preset": "ssd"}))


def test_build_detector_takes_another_resnet_its_stages_and_anchor_sizes():
    from dctnet.models.detection import build_detector

    m = build_detector("fasterrcnn_resnet50_fpn", 2, backbone="resnet18", returned_layers=[2, 3, 4],
                       anchor_sizes=[16, 32, 64, 128])
    assert m.backbone.body.layer4[0].conv1.in_channels == 256  # ResNet-18's, not ResNet-50's 1024
    assert m.rpn.anchor_generator.sizes == ((16,), (32,), (64,), (128,))
    m.eval()
    with torch.no_grad():
        features = m.backbone(torch.rand(1, 3, 128, 128))
    assert [tuple(f.shape[-2:]) for f in features.values()] == [(16, 16), (8, 8), (4, 4), (2, 2)]
    r = build_detector("retinanet_resnet50_fpn", 2, anchor_sizes=[16, 32, 64, 128, 256])
    assert r.anchor_generator.sizes[0] == (16, 20, 25)  # the octaves keep their ratios
    with pytest.raises(ValueError, match="5 feature maps"):
        build_detector("fasterrcnn_resnet50_fpn", 2, anchor_sizes=[16, 32])
    with pytest.raises(ValueError, match="keeps its own"):
        build_detector("fasterrcnn_mobilenet_v3_large_320_fpn", 2, backbone="resnet18")
    with pytest.raises(ValueError, match="not a torchvision ResNet"):
        build_detector("fasterrcnn_resnet50_fpn", 2, backbone="vgg16")


@pytest.mark.skipif(not (TREES / "train.json").exists(), reason="needs ../shared/data/trees")
@pytest.mark.parametrize("arm", ["device-rgb", "rgb"])
def test_without_the_detector_resize_the_model_takes_the_ops_sizes(tmp_path, arm):
    """detect.resize false: training crops and whole eval tiles reach the model at their own size,
    and the model's transform passes them through (both arms)."""
    from dctnet.train.trainer import Trainer

    recipe = load_recipe(RECIPE, _small(tmp_path, **{"model.input": arm, "detect.resize": False,
                                                     "detect.ops": "[{name: RandomCrop, size: 160, pad_if_needed: true}]"}))
    trainer = Trainer(recipe, log=lambda m: None)
    cost = {"cpu": 0.0, "n": 0.0}
    images, _ = next(trainer.task.batches(trainer.task.train_loader, trainer.task.step, 0, cost))
    assert [tuple(i.shape) for i in images] == [(3, 160, 160)] * 2
    val, _ = next(trainer.task.batches(trainer.task.val_loader, trainer.task.eval_step, 0, cost))
    sizes = [(im["height"], im["width"]) for im in trainer.task.val_set.coco.imgs.values()][:2]
    assert [tuple(i.shape[-2:]) for i in val] == sizes
    batched, _ = trainer.model.transform(images)
    assert [tuple(s) for s in batched.image_sizes] == [(160, 160)] * 2


def test_the_rgb_arms_sanitize_keeps_iscrowd_and_area_with_their_boxes():
    """v2.SanitizeBoundingBoxes' default getter drops labels only; the rgb arm's drops every
    per-box field with its box."""
    from torchvision import tv_tensors

    from dctnet.transforms import detection as TD

    boxes = tv_tensors.BoundingBoxes(torch.tensor([[0.0, 0, 10, 10], [5, 5, 5, 9], [2, 2, 8, 8]]), format="XYXY",
                                     canvas_size=(20, 20))
    sample = {"image": tv_tensors.Image(torch.zeros(3, 20, 20)), "boxes": boxes, "labels": torch.tensor([1, 2, 3]),
              "iscrowd": torch.tensor([0, 1, 0]), "area": torch.tensor([100.0, 0.0, 36.0])}
    out = TD.torchvision_sanitize()(sample)
    assert out["labels"].tolist() == [1, 3] and out["iscrowd"].tolist() == [0, 0] and out["area"].tolist() == [100, 36]
    import pickle

    assert pickle.loads(pickle.dumps(TD.torchvision_sanitize())) is not None  # DataLoader workers pickle it


@pytest.mark.parametrize("split", ["train", "val"])
def test_an_annotation_file_without_images_is_one_error_line(tmp_path, split, capsys):
    """COCO files with ``"images": []`` (either split): ``dctnet train`` prints one ``error:`` line naming the
    file and exits 1 — not a KeyError from the first epoch's record."""
    from dctnet import cli
    from dctnet.synthetic import make_instance_set

    make_instance_set(str(tmp_path / "set"), train=4, val=2, size=(96, 128), seed=4)
    path = tmp_path / "set" / f"{split}.json"
    meta = json.loads(path.read_text())
    path.write_text(json.dumps({**meta, "images": [], "annotations": []}))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", str(RECIPE), "--set", f"data.root={tmp_path / 'set'}", "--set", "model.init=null",
                  "--set", "data.train={images: train, annotations: train.json}",
                  "--set", "data.val={images: val, annotations: val.json}", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 1 and len(err) == 1, err
    assert err[0].startswith("error: data.") and f"{split}.json lists no usable image" in err[0], err


def test_skipped_images_are_named_and_counted(tmp_path):
    """data.on_error: skip in a detection run, as in a classification run: images the full decode refuses
    before training (a truncated JPEG, a PNG named .jpg, a missing file) are named with their reasons in
    ``skipped.txt`` (epoch 0) and in the log; an image that goes bad during the run is skipped, named with
    its epoch and counted in ``metrics.jsonl`` (``train_skipped``, ``val_skipped``)."""
    import io

    from PIL import Image

    from dctnet.synthetic import make_instance_set
    from dctnet.train.trainer import Trainer

    make_instance_set(str(tmp_path / "set"), train=8, val=3, size=(96, 128), seed=4)
    meta = {s: json.loads((tmp_path / "set" / f"{s}.json").read_text()) for s in ("train", "val")}
    train = [tmp_path / "set" / "train" / im["file_name"] for im in meta["train"]["images"]]
    val = [tmp_path / "set" / "val" / im["file_name"] for im in meta["val"]["images"]]
    train[0].write_bytes(train[0].read_bytes()[:300])                       # truncated
    png = io.BytesIO()
    Image.new("RGB", (128, 96)).save(png, "PNG")
    train[1].write_bytes(png.getvalue())                                     # a PNG under a .jpg name
    val[0].unlink()                                                          # missing
    split = {s: {"images": s, "annotations": f"{s}.json"} for s in ("train", "val")}
    recipe = load_recipe(None, {
        "data": {"source": "coco", "root": str(tmp_path / "set"), **split, "batch_size": 2, "workers": 0,
                 "on_error": "skip"},
        "model": {"arch": "torchvision:fasterrcnn_mobilenet_v3_large_320_fpn", "input": "device-rgb"},
        "detect": {"min_size": 64, "max_size": 96},
        "optim": {"epochs": 1, "lr": 0.01, "lr_batch": 16},
        "train": {"max_steps": 3, "out": str(tmp_path / "run"), "checkpoint": False}})
    logged: list[str] = []
    trainer = Trainer(recipe, log=logged.append)
    assert any("left out 3 unusable images" in m for m in logged), logged
    # the start summary, before any epoch: the usable images of each split, annotations, categories
    summary = next(m for m in logged if m.startswith("detection: "))
    assert re.match(r"detection: train 6 images, \d+ annotations \(\d+ images without any\); val 2 images, \d+ "
                    r"annotations \(\d+ images without any\); \d+ categories; model.input device-rgb, 3 steps", summary), summary
    rows = [line.split("\t") for line in (tmp_path / "run" / "skipped.txt").read_text().splitlines()]
    assert sorted((r[0], r[1], r[2]) for r in rows) == sorted(
        [("0", "train", str(train[0])), ("0", "train", str(train[1])), ("0", "val", str(val[0]))])
    assert all(r[3] for r in rows)  # each with its reason
    # a file that goes bad after the check: skipped where it is read, named with its epoch, counted
    late = next(p for p in train[2:] if str(p) in trainer.task.train_set.paths)
    late.write_bytes(late.read_bytes()[:200])
    record = trainer.fit()
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    assert record["train_skipped"] == metrics["train_skipped"] >= 1 and metrics["val_skipped"] == 0
    assert any(line.startswith(f"1\ttrain\t{late}\t") for line in (tmp_path / "run" / "skipped.txt").read_text().splitlines())
    assert any("skipped 1 train" in m or "skipped 2 train" in m for m in logged), logged


def test_a_detection_run_shows_a_progress_bar_on_a_terminal(tmp_path, monkeypatch):
    """On a terminal a detection run shows each epoch's bar with its running loss (every train.log_every
    steps); in logs and pipes it shows none (the epoch's line is printed anyway)."""
    import io

    from dctnet.train.trainer import Trainer

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    recipe = segmentation_recipe(tmp_path, "device-rgb", 2)
    recipe.train.log_every = 1
    screen = Terminal()
    monkeypatch.setattr("sys.stderr", screen)
    Trainer(recipe, log=lambda m: None).fit()
    assert "epoch 1/1" in screen.getvalue() and "loss " in screen.getvalue()
    pipe = io.StringIO()
    monkeypatch.setattr("sys.stderr", pipe)
    assert Trainer(segmentation_recipe(tmp_path / "again", "device-rgb", 1), log=lambda m: None)._progress(
        1, "epoch") is None


def test_a_detection_recipe_without_input_is_plan_a():
    """A detection recipe that names no ``model.input`` runs the unchanged detector on the device's decode
    (``device-rgb``), not the classification default ``dct`` (a swapped backbone stem the user did not ask
    for); a classification recipe keeps ``dct``; an explicit input is kept."""
    split = {s: {"images": s, "annotations": f"{s}.json"} for s in ("train", "val")}
    coco = {"data": {"source": "coco", **split}, "model": {"arch": "torchvision:fasterrcnn_resnet50_fpn"}}
    assert load_recipe(None, coco).model.input == "device-rgb"
    assert load_recipe(None, {**coco, "model": {**coco["model"], "input": "dct"}}).model.input == "dct"
    assert load_recipe(None, {"model": {"arch": "resnet18"}}).model.input == "dct"


def test_a_missing_model_init_names_the_field(tmp_path, capsys):
    """trees_fasterrcnn_r18 starts from a classifier's checkpoint (model.init): when it is absent, one error
    line names model.init and the way out, not a bare [Errno 2]."""
    from dctnet import cli
    from dctnet.synthetic import make_instance_set

    make_instance_set(str(tmp_path / "set"), train=4, val=2, size=(96, 128), seed=4)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", str(ROOT / "recipes" / "detection" / "trees_fasterrcnn_r18.yaml"),
                  "--set", f"data.root={tmp_path / 'set'}", "--set", f"model.init={tmp_path / 'absent.pt'}",
                  "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 1 and len(err) == 1 and err[0].startswith("error: model.init:"), err
    assert "model.init: null" in err[0]


def test_annotations_that_train_silently_wrong_are_warned_about(tmp_path):
    """Boxes written as corners ([x0, y0, x1, y1]) where COCO wants [x, y, w, h] mostly run past their
    image: the dataset says how many, and that they fit as corners; an annotation list that is empty says
    the detector would learn background only; a clean file says nothing. The trainer logs them at start."""
    from dctnet.data import CocoDataset
    from dctnet.synthetic import make_instance_set

    make_instance_set(str(tmp_path / "set"), train=4, val=2, size=(96, 128), seed=4)
    root = tmp_path / "set"
    assert CocoDataset(root / "train", root / "train.json").box_warnings() == []
    meta = json.loads((root / "train.json").read_text())
    corners = [{**a, "bbox": [a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3]]}
               for a in meta["annotations"]]
    for a in corners:  # boxes away from the origin: as [x, y, w, h] their corners run past the image
        x, y = max(a["bbox"][0], 40), max(a["bbox"][1], 30)
        a["bbox"] = [x, y, min(x + 20, 127), min(y + 20, 95)]
    (root / "xyxy.json").write_text(json.dumps({**meta, "annotations": corners}))
    said = CocoDataset(root / "train", root / "xyxy.json").box_warnings()
    assert len(said) == 2 and "run past their image" in said[0] and "[x, y, width, height]" in said[1], said
    (root / "empty.json").write_text(json.dumps({**meta, "annotations": []}))
    said = CocoDataset(root / "train", root / "empty.json").box_warnings()
    assert len(said) == 1 and "learns background only" in said[0]


class _TruthDetector(torch.nn.Module):
    """A Mask R-CNN that knows the answer on a set whose masks are their boxes: the val images'
    ground truth (in loader order) through the real detector's ``transform`` (its resize, or none
    once prepared) and ``postprocess``. Boxes are the truth scaled to the model's input, masks what a
    perfect mask head gives for a box-shaped object: ``M × M`` ones (boxes a pixel short at the right
    and bottom: torchvision's pasting adds one)."""

    def __init__(self, transform, truth: list[dict], m: int = 28) -> None:
        super().__init__()
        self.transform, self.truth, self.m = transform, list(truth), m

    def forward(self, images, targets=None):
        original = [tuple(i.shape[-2:]) for i in images]
        batch, _ = self.transform(images)
        out = []
        for h, w in batch.image_sizes:
            t = self.truth.pop(0)
            H, W = t["masks"].shape[-2:]
            scale = torch.tensor([w / W, h / H, w / W, h / H], dtype=torch.float32)
            n = len(t["boxes"])
            boxes = t["boxes"].float() - torch.tensor([0.0, 0.0, 1.0, 1.0])
            out.append({"boxes": boxes * scale, "labels": t["labels"], "scores": torch.ones(n),
                        "masks": torch.ones(n, 1, self.m, self.m)})
        return self.transform.postprocess(out, batch.image_sizes, original)


def _box_mask_set(root) -> None:
    """The generated instance set (objects 40–130 px on 301 × 389 images) with every mask its box (a
    rectangle polygon): what a perfect mask head's ``M × M`` ones give once pasted. (torchvision's
    ``paste_masks_in_image`` makes each mask a pixel wider and taller than its box — its ``+ 1``
    convention — so objects are large enough for that to keep IoU above 0.95.)"""
    from dctnet.synthetic import make_instance_set

    make_instance_set(str(root), train=2, val=3, size=(301, 389), objects=(3, 5), seed=5)
    for split in ("train", "val"):
        path = root / f"{split}.json"
        data = json.loads(path.read_text())
        for a in data["annotations"]:
            x, y, w, h = a["bbox"]
            a["segmentation"], a["area"] = [[x, y, x + w, y, x + w, y + h, x, y + h]], w * h
        path.write_text(json.dumps(data))


def test_a_ground_truth_mask_rcnn_scores_segm_ap_one_in_both_arms(tmp_path):
    """Masks are pasted once, at the file's size, in both arms (torchvision's postprocess): a model
    whose predictions are the truth scores segm AP 1.0 in both, with the same masks — the device arm
    used to paste in the resized canvas and resample to the file, losing edge pixels."""
    from dctnet.train.trainer import Trainer

    _box_mask_set(tmp_path / "set")
    predictions = {}
    for arm in ("rgb", "device-rgb"):
        recipe = load_recipe(None, {
            "data": {"source": "coco", "root": str(tmp_path / "set"), "batch_size": 2, "workers": 0,
                     "train": {"images": "train", "annotations": "train.json"},
                     "val": {"images": "val", "annotations": "val.json"}},
            "model": {"arch": "torchvision:maskrcnn_resnet50_fpn", "input": arm},
            "detect": {"masks": True, "min_size": 480, "max_size": 800},  # the detector upscales 301 → 480
            "optim": {"epochs": 1, "lr": 0.01, "lr_batch": 16},
            "train": {"out": str(tmp_path / arm)}})
        trainer = Trainer(recipe, log=lambda m: None)
        ds = trainer.task.val_set
        sizes = [(ds.coco.imgs[i]["height"], ds.coco.imgs[i]["width"]) for i in ds.ids]
        truth = [ds._target(i, h, w, None) for i, (h, w) in enumerate(sizes)]
        trainer.model = trainer.net = _TruthDetector(trainer.model.transform, truth)
        metrics = trainer.evaluate()
        assert metrics["segm_AP"] == 1.0 and metrics["bbox_AP"] == 1.0, arm
        predictions[arm] = json.loads((tmp_path / arm / "predictions_val.json").read_text())
    assert [r["segmentation"] for r in predictions["rgb"]] == [r["segmentation"] for r in predictions["device-rgb"]]


@pytest.mark.parametrize("drop", [True, False])
def test_training_images_without_a_usable_box_are_left_out_as_the_references_do(tmp_path, drop):
    """detect.drop_unannotated (default true): the training split keeps the images torchvision's
    references keep (``_coco_remove_images_without_annotations``: an annotation, and not every box at
    most 1 px wide or tall), the summary counts the others; the val split stays whole. false keeps all."""
    from dctnet.synthetic import make_instance_set
    from dctnet.train.trainer import Trainer

    make_instance_set(str(tmp_path / "set"), train=6, val=2, size=(64, 80), seed=4)
    for split in ("train", "val"):
        path = tmp_path / "set" / f"{split}.json"
        data = json.loads(path.read_text())
        ids = [im["id"] for im in data["images"]]
        data["annotations"] = [a for a in data["annotations"] if a["image_id"] != ids[0]]  # no annotation
        for a in data["annotations"]:
            if a["image_id"] == ids[1]:  # only degenerate boxes
                a["bbox"][2] = 1.0
        path.write_text(json.dumps(data))
    gt = json.loads((tmp_path / "set" / "train.json").read_text())
    kept = sorted(im["id"] for im in gt["images"]
                  if any(a["bbox"][2] > 1 and a["bbox"][3] > 1 for a in gt["annotations"] if a["image_id"] == im["id"]))
    split = {s: {"images": s, "annotations": f"{s}.json"} for s in ("train", "val")}
    recipe = load_recipe(None, {
        "data": {"source": "coco", "root": str(tmp_path / "set"), **split, "batch_size": 2, "workers": 0},
        "model": {"arch": "torchvision:fasterrcnn_mobilenet_v3_large_320_fpn", "input": "device-rgb"},
        "detect": {"drop_unannotated": drop},
        "optim": {"epochs": 1, "lr": 0.01, "lr_batch": 16}, "train": {"out": str(tmp_path / "run")}})
    logged: list[str] = []
    trainer = Trainer(recipe, log=logged.append)
    assert len(kept) == 4 and len(trainer.task.val_set) == 2
    assert trainer.task.train_set.ids == (kept if drop else sorted(im["id"] for im in gt["images"]))
    summary = next(m for m in logged if m.startswith("detection: "))
    assert ("2 more left out without a usable box" in summary) == drop, summary


def test_boxes_dropped_for_running_past_their_image_are_counted_each_epoch(tmp_path):
    """Boxes past their image in the file are dropped by SanitizeBoundingBoxes at every step: each epoch's
    record counts the boxes seen, those dropped and, of those, the ones past their image, the same in
    both arms (torchvision's own sanitize in the rgb arm), and the epoch's line says so."""
    from dctnet.synthetic import make_instance_set
    from dctnet.train.trainer import Trainer

    make_instance_set(str(tmp_path / "set"), train=4, val=1, size=(64, 80), seed=4)
    path = tmp_path / "set" / "train.json"
    data = json.loads(path.read_text())
    for a in data["annotations"][:3:2]:  # two boxes made to run past the right edge
        a["bbox"][2] = 80 - a["bbox"][0] + 5
    path.write_text(json.dumps(data))
    split = {s: {"images": s, "annotations": f"{s}.json"} for s in ("train", "val")}
    records = {}
    for arm in ("rgb", "device-rgb"):
        logged: list[str] = []
        recipe = load_recipe(None, {
            "data": {"source": "coco", "root": str(tmp_path / "set"), **split, "batch_size": 2, "workers": 0},
            "model": {"arch": "torchvision:fasterrcnn_mobilenet_v3_large_320_fpn", "input": arm},
            "detect": {"min_size": 64, "max_size": 80},
            "optim": {"epochs": 1, "lr": 0.01, "lr_batch": 16},
            "train": {"out": str(tmp_path / arm), "checkpoint": False, "eval_every": 5}})
        records[arm] = Trainer(recipe, log=logged.append).fit()
        assert any("2 boxes dropped for running past their image" in m for m in logged), logged
    for arm, r in records.items():
        assert (r["train_boxes"], r["train_boxes_dropped_past_image"]) == (len(data["annotations"]), 2), arm
        assert r["train_boxes_dropped"] == 2, arm  # (the flip preset drops nothing else)


@pytest.mark.parametrize("arm", ["rgb", "device-rgb"])
def test_the_reported_input_cpu_counts_the_device_step_and_the_models_resize(tmp_path, arm, monkeypatch):
    """data_cpu_us_per_sample counts the same ops in both arms: plan A's device step (on a CPU-only run
    it runs on the host) and the rgb arm's model resize (in its forward). Each is made to burn a known
    CPU time; the record holds at least that much."""
    import time

    from torchvision.models.detection.transform import GeneralizedRCNNTransform

    from dctnet.synthetic import make_instance_set
    from dctnet.train.trainer import Trainer
    from dctnet.transforms.detection import DetectionStep

    def burn(seconds: float) -> None:
        t0 = time.thread_time()
        while time.thread_time() - t0 < seconds:
            pass

    def slow(own):
        def wrapped(*args, **kwargs):
            burn(0.05)
            return own(*args, **kwargs)
        return wrapped

    if arm == "rgb":
        monkeypatch.setattr(GeneralizedRCNNTransform, "resize", slow(GeneralizedRCNNTransform.resize))
    else:
        monkeypatch.setattr(DetectionStep, "apply", slow(DetectionStep.apply))
    make_instance_set(str(tmp_path / "set"), train=2, val=1, size=(64, 80), seed=4)
    split = {s: {"images": s, "annotations": f"{s}.json"} for s in ("train", "val")}
    recipe = load_recipe(None, {
        "data": {"source": "coco", "root": str(tmp_path / "set"), **split, "batch_size": 2, "workers": 0},
        "model": {"arch": "torchvision:fasterrcnn_mobilenet_v3_large_320_fpn", "input": arm},
        "detect": {"min_size": 64, "max_size": 80},
        "optim": {"epochs": 1, "lr": 0.01, "lr_batch": 16}, "train": {"out": str(tmp_path / "run")}})
    record = Trainer(recipe, log=lambda m: None).train_epoch(0)
    per_sample = 0.05e6 if arm == "rgb" else 0.025e6  # (rgb: a resize per image; plan A: a step per batch of 2)
    assert record["data_cpu_us_per_sample"] >= per_sample


@pytest.mark.parametrize("arm,workers", [("rgb", 2)])
def test_a_resumed_detection_run_ends_where_an_uninterrupted_one_does(tmp_path, arm, workers):
    """Stopped after epoch 1 and resumed, a detection run's final checkpoint equals an uninterrupted
    run's, tensor for tensor — the rgb arm's torchvision ops draw from generators seeded per sample,
    whatever the DataLoader workers, and the RoI poolers keep the scales they inferred from the stopped
    run's first batch (not in the state_dict: resumed without them, 284 of 330 tensors differed)."""
    from dctnet.synthetic import make_instance_set
    from dctnet.train.trainer import Trainer

    make_instance_set(str(tmp_path / "set"), train=4, val=1, size=(64, 80), seed=4)
    split = {s: {"images": s, "annotations": f"{s}.json"} for s in ("train", "val")}

    def recipe(name, epochs):
        return load_recipe(None, {
            "data": {"source": "coco", "root": str(tmp_path / "set"), **split, "batch_size": 2, "workers": workers},
            "model": {"arch": "torchvision:fasterrcnn_mobilenet_v3_large_320_fpn", "input": arm},
            "detect": {"min_size": 64, "max_size": 80, "preset": "ssdlite"},  # (random crops: draws that matter)
            "optim": {"epochs": epochs, "lr": 0.01, "lr_batch": 16},
            "train": {"out": str(tmp_path / name), "eval_every": 5}})

    Trainer(recipe("a", 2), log=lambda m: None).fit()
    stopped = Trainer(recipe("c", 2), log=lambda m: None)  # the same run, killed after its first epoch
    stopped.history.append({"epoch": 1, **stopped.train_epoch(0)})
    stopped._save(stopped.out / "last.pt", 0)
    del stopped
    Trainer(recipe("c", 2), resume=True, log=lambda m: None).fit()
    sa = torch.load(tmp_path / "a" / "last.pt", weights_only=True)["model"]
    sc = torch.load(tmp_path / "c" / "last.pt", weights_only=True)["model"]
    differ = [k for k in sa if not torch.equal(sa[k], sc[k])]
    assert not differ, f"{len(differ)} of {len(sa)} tensors differ: {differ[:5]}"


@pytest.mark.parametrize("arm", ["rgb", "device-rgb"])
def test_a_detection_recipe_with_train_ema_reports_ema_metrics_and_resumes_it(tmp_path, arm):
    """train.ema acts in detection as in classification: the EMA is averaged after each update, evaluated
    beside the model (bbox_AP_ema …, predictions_val_ema.json, pycocotools' own AP on them) and carried
    by last.pt; with decay 0 it would be the model itself, with 0.5 it differs from it."""
    from dctnet.synthetic import make_instance_set
    from dctnet.train.trainer import Trainer

    make_instance_set(str(tmp_path / "set"), train=4, val=2, size=(64, 80), seed=4)
    split = {s: {"images": s, "annotations": f"{s}.json"} for s in ("train", "val")}

    def recipe(epochs):
        return load_recipe(None, {
            "data": {"source": "coco", "root": str(tmp_path / "set"), **split, "batch_size": 2, "workers": 0},
            "model": {"arch": "torchvision:fasterrcnn_mobilenet_v3_large_320_fpn", "input": arm},
            "detect": {"min_size": 64, "max_size": 80},
            "optim": {"epochs": epochs, "lr": 0.01, "lr_batch": 16},
            "train": {"out": str(tmp_path / "run"), "ema": {"decay": 0.5}}})

    trainer = Trainer(recipe(1), log=lambda m: None)
    record = trainer.fit()
    assert {"bbox_AP_ema", "bbox_AP50_ema", "bbox_AP"} <= set(record)
    assert trainer.updates == 2 and trainer.ema is not None
    ema, model = trainer.ema.module.state_dict(), trainer.model.state_dict()
    assert any(not torch.equal(ema[k], model[k]) for k in model if ema[k].is_floating_point())
    predictions = tmp_path / "run" / "predictions_val_ema.json"
    if json.loads(predictions.read_text()):  # (an untrained model may find nothing)
        ap, _ = _pycocotools_ap(tmp_path / "set" / "val.json", predictions, trainer.task.val_set.ids)
        assert record["bbox_AP_ema"] == pytest.approx(ap, abs=1e-12)
    resumed = Trainer(recipe(2), resume=True, log=lambda m: None)
    assert resumed.updates == 2
    assert all(torch.equal(v, resumed.ema.module.state_dict()[k]) for k, v in ema.items())


@pytest.mark.parametrize("scales,says", [({"roi_heads.box_roi_pool": [-0.25]}, "powers of two"),
                                         ({"roi_heads.box_roi_pool": ["x"]}, "must be numbers"),
                                         ([0.25], "must be a dict")])
def test_tampered_roi_pool_scales_in_a_checkpoint_are_refused_by_name(scales, says):
    """A checkpoint's RoI pooler scales are untrusted: anything but powers of two in (0, 1] is a
    ``ValueError`` saying what is wrong (it was ``math domain error``), and a good set is put back."""
    from dctnet.models.detection import build_detector, roi_pool_scales, set_roi_pool_scales

    model = build_detector("fasterrcnn_mobilenet_v3_large_320_fpn", 3)
    with pytest.raises(ValueError, match=says):
        set_roi_pool_scales(model, scales)
    set_roi_pool_scales(model, {"roi_heads.box_roi_pool": [0.25, 0.125]})
    assert roi_pool_scales(model) == {"roi_heads.box_roi_pool": [0.25, 0.125]}
