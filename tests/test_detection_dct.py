"""Detectors that take DCT coefficients (``model.input: dct``): the converted ``idct`` stem is the RGB
detector (the unconverted model is the oracle), the learned ``dct-up`` stem keeps every feature map's
stride and trains, the step's coefficient mosaics are the images' block DCT (plain numpy maths), and
what has no ResNet stem is refused by name."""

from __future__ import annotations

import glob
import json
import math

import numpy as np
import pytest
import torch

from dctnet.models.detection import build_detector, dct_detector, prepare_detector
from dctnet.transforms.detection import coefficient_mosaics

from conftest import IMAGENETTE

pytest.importorskip("torchvision")


def _photos(sizes: list[tuple[int, int]]) -> list[torch.Tensor]:
    """Real photos (Imagenette) cropped to ``sizes`` when present, else smooth random images."""
    from PIL import Image

    files = sorted(glob.glob(str(IMAGENETTE / "val" / "*" / "*.JPEG")))[:len(sizes)]
    out = []
    g = torch.Generator().manual_seed(0)
    for i, (h, w) in enumerate(sizes):
        if i < len(files):
            rgb = np.asarray(Image.open(files[i]).convert("RGB").resize((w, h)), dtype=np.float32) / 255
            out.append(torch.from_numpy(rgb).permute(2, 0, 1).contiguous())
        else:
            low = torch.rand(1, 3, h // 8, w // 8, generator=g)
            out.append(torch.nn.functional.interpolate(low, size=(h, w), mode="bilinear")[0])
    return out


def _numpy_mosaic(image: np.ndarray) -> np.ndarray:
    """(3, h, w) RGB in [0, 1] → (3, H, W) mosaic: edge padding to 8k, JFIF YCbCr − 128, orthonormal
    8×8 DCT-II per block, coefficient (v, u) of block (i, j) at (8i + v, 8j + u)."""
    _, h, w = image.shape
    H, W = 8 * math.ceil(h / 8), 8 * math.ceil(w / 8)
    x = np.pad(image.astype(np.float64) * 255, ((0, 0), (0, H - h), (0, W - w)), mode="edge")
    r, g, b = x
    ycc = np.stack([0.299 * r + 0.587 * g + 0.114 * b,
                    -0.168736 * r - 0.331264 * g + 0.5 * b + 128,
                    0.5 * r - 0.418688 * g - 0.081312 * b + 128]) - 128
    c = np.array([[math.sqrt((1 if u == 0 else 2) / 8) * math.cos((2 * k + 1) * u * math.pi / 16) for k in range(8)]
                  for u in range(8)])
    blocks = ycc.reshape(3, H // 8, 8, W // 8, 8).transpose(0, 1, 3, 2, 4)      # (3, Hb, Wb, 8, 8)
    coef = np.einsum("vy,cijyx,ux->cijvu", c, blocks, c)
    return coef.transpose(0, 1, 3, 2, 4).reshape(3, H, W)


def test_coefficient_mosaics_are_the_images_block_dct():
    images = _photos([(61, 83), (48, 40)])
    mosaics = coefficient_mosaics(images)
    assert [tuple(m.shape) for m in mosaics] == [(3, 64, 88), (3, 48, 40)]
    for image, mosaic in zip(images, mosaics):
        want = _numpy_mosaic(image.numpy())
        assert np.abs(mosaic.double().numpy() - want).max() < 2e-3 * np.abs(want).max()
    assert coefficient_mosaics([]) == []


def _detector(name: str = "fasterrcnn_resnet50_fpn") -> torch.nn.Module:
    torch.manual_seed(0)
    return build_detector(name, 3, min_size=128, max_size=192)


def test_the_idct_detector_is_the_rgb_detector():
    rgb = prepare_detector(_detector()).eval()
    images = _photos([(128, 192), (128, 192)])  # one size: the batch is not padded
    with torch.no_grad():
        want_features = rgb.backbone(rgb.transform(images)[0].tensors)
        want = rgb(images)
        dct = dct_detector(_detector(), "idct").eval()
        mosaics = coefficient_mosaics(images)
        got_features = dct.backbone(dct.transform(mosaics)[0].tensors)
        got = dct(mosaics)
    assert dct.dctnet_stem == "idct"
    for key, w in want_features.items():
        assert (got_features[key] - w).abs().max() <= 1e-4 * w.abs().max(), key
    for w, g in zip(want, got):
        n = min(len(w["scores"]), len(g["scores"]), 20)
        assert n > 0
        assert torch.allclose(g["scores"][:n], w["scores"][:n], atol=1e-4)
        assert torch.allclose(g["boxes"][:n], w["boxes"][:n], atol=0.05)


def test_the_learned_dct_up_stem_keeps_the_strides_and_trains():
    rgb = prepare_detector(_detector("retinanet_resnet50_fpn"))
    dct = dct_detector(_detector("retinanet_resnet50_fpn"), "dct-up")
    images = _photos([(128, 192), (96, 128)])
    with torch.no_grad():
        shapes = [f.shape for f in rgb.eval().backbone(rgb.transform(images)[0].tensors).values()]
        got = [f.shape for f in dct.eval().backbone(dct.transform(coefficient_mosaics(images))[0].tensors).values()]
    assert got == shapes
    targets = [{"boxes": torch.tensor([[10.0, 20.0, 60.0, 90.0]]), "labels": torch.tensor([1])},
               {"boxes": torch.tensor([[5.0, 5.0, 40.0, 30.0]]), "labels": torch.tensor([2])}]
    dct.train()
    losses = dct(coefficient_mosaics(images), targets)
    loss = sum(losses.values())
    assert torch.isfinite(loss)
    loss.backward()
    proj = dct.backbone.body.conv1[1].proj.weight
    assert proj.grad is not None and proj.grad.abs().sum() > 0


def test_detectors_without_a_resnet_stem_are_refused_by_name():
    mobile = build_detector("fasterrcnn_mobilenet_v3_large_320_fpn", 2)
    with pytest.raises(ValueError, match="not a ResNet body.*device-rgb"):
        dct_detector(mobile)
    with pytest.raises(ValueError, match="idct, dct-up"):
        dct_detector(_detector(), "dct8")
    once = dct_detector(_detector())
    with pytest.raises(ValueError, match="already takes coefficients"):
        dct_detector(once)


def test_dctnet_train_runs_the_dct_arm_and_resumes(tmp_path):
    pytest.importorskip("pycocotools")
    from dctnet.synthetic import make_instance_set
    from dctnet.train import load_recipe
    from dctnet.train.trainer import Trainer

    make_instance_set(str(tmp_path / "set"), train=2, val=2, size=(64, 96), seed=3)
    spec = {"data": {"source": "coco", "root": str(tmp_path / "set"), "batch_size": 2, "workers": 0,
                     "train": {"images": "train", "annotations": "train.json"},
                     "val": {"images": "val", "annotations": "val.json"}},
            "model": {"arch": "torchvision:fasterrcnn_resnet50_fpn", "input": "dct", "stem": "dct-up"},
            "detect": {"min_size": 64, "max_size": 96},
            "optim": {"epochs": 1, "lr": 0.01, "lr_batch": 16},
            "train": {"max_steps": 1, "out": str(tmp_path / "run")}}
    trainer = Trainer(load_recipe(None, spec), log=lambda m: None)
    assert "dct-up stem" in trainer.task.describe()
    record = trainer.fit()
    assert "bbox_AP" in record and math.isfinite(record["train_loss"])
    # a DCT detector's checkpoint starts another run with its learned stem (model.init)
    stem = trainer.model.backbone.body.conv1[1].proj.weight.detach().clone()
    init = Trainer(load_recipe(None, {**spec, "model": {**spec["model"], "init": str(tmp_path / "run" / "last.pt")},
                                               "train": {**spec["train"], "out": str(tmp_path / "init")}}),
                            log=lambda m: None)
    assert torch.equal(init.model.backbone.body.conv1[1].proj.weight, stem)
    spec["optim"]["epochs"] = 2
    again = Trainer(load_recipe(None, spec), resume=True, log=lambda m: None)
    assert again.start_epoch == 1 and again.model.dctnet_stem == "dct-up"
    again.fit()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2]
