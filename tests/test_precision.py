"""How a run computes on its device (``dctnet.train.precision``): ``train.amp``'s autocast dtype and
``train.channels_last``, one rule for every task; a detection recipe trains under autocast."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from dctnet.train import load_recipe
from dctnet.train.precision import amp_dtype, use_channels_last

CUDA, CPU = torch.device("cuda", 0), torch.device("cpu")


@pytest.mark.parametrize("amp,device,want", [("auto", CUDA, torch.bfloat16), ("auto", CPU, None),
                                             ("bf16", CPU, torch.bfloat16), ("fp16", CUDA, torch.float16),
                                             ("off", CUDA, None)])
def test_amp_dtype(amp, device, want):
    assert amp_dtype(load_recipe(None, [f"train.amp={amp}"]), device) is want


def test_channels_last_acts_on_cuda_convolutional_models_only():
    """On by default; on CUDA for a model with 2-D convolutions; never on a CPU, never for a model without
    convolutions or with a ViT's one patch convolution, never when the recipe switches it off."""
    conv = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 2))
    patchify = nn.Sequential(nn.Conv2d(3, 8, 4, stride=4), nn.Flatten(), nn.LazyLinear(2))  # a ViT's one patch conv
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(12, 2))
    on, off = load_recipe(None), load_recipe(None, ["train.channels_last=false"])
    assert on.train.channels_last
    assert use_channels_last(on, conv, CUDA)
    assert not use_channels_last(on, conv, CPU)
    assert not use_channels_last(on, mlp, CUDA) and not use_channels_last(on, patchify, CUDA)
    assert not use_channels_last(off, conv, CUDA)


def test_detection_trains_under_bf16_autocast(tmp_path):
    """train.amp acts in a detection run: bf16 autocast around the detector's forward (on the CPU
    here), finite float32 losses summed on the device and read at the end of the epoch."""
    pytest.importorskip("pycocotools")
    from dctnet.synthetic import make_instance_set
    from dctnet.train.trainer import Trainer

    make_instance_set(str(tmp_path / "set"), train=4, val=2, size=(96, 128), seed=4)
    split = {s: {"images": s, "annotations": f"{s}.json"} for s in ("train", "val")}
    recipe = load_recipe(None, {
        "data": {"source": "coco", "root": str(tmp_path / "set"), **split, "batch_size": 2, "workers": 0},
        "model": {"arch": "torchvision:fasterrcnn_mobilenet_v3_large_320_fpn", "input": "device-rgb"},
        "detect": {"min_size": 64, "max_size": 96},
        "optim": {"epochs": 1, "lr": 0.01, "lr_batch": 16},
        "train": {"max_steps": 1, "amp": "bf16", "out": str(tmp_path / "run"), "checkpoint": False}})
    trainer = Trainer(recipe, log=lambda m: None)
    assert trainer.amp_dtype is torch.bfloat16
    assert not trainer.opt.param_groups[0]["nesterov"]  # plain momentum, as torchvision's detection references
    seen = []
    forward = trainer.net.forward

    def spy(*args, **kwargs):
        seen.append(torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") is torch.bfloat16)
        return forward(*args, **kwargs)

    trainer.net.forward = spy
    record = trainer.fit()
    assert seen and seen[0]  # the training step ran under bf16 autocast
    assert math.isfinite(record["train_loss"])
