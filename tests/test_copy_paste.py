"""SimpleCopyPaste against torchvision's detection references' rule (their ``_copy_paste``, written
out below with torchvision's own ops: ``gaussian_blur`` of the boolean paste mask, ``masks_to_boxes``):
same selection → same pixels, masks, boxes, labels, areas and iscrowd, on real photos, with objects
fully covered, objects left one pixel wide (degenerate, dropped) and samples with nothing to paste;
the selection's law equals theirs; the step applies it after the LSJ geometry; recipes refuse it
where the references do."""

from __future__ import annotations

import glob

import numpy as np
import pytest
import torch

from dctnet.transforms import detection as TD

from conftest import IMAGENETTE

tv_ops = pytest.importorskip("torchvision.ops")
from torchvision.transforms import functional as TVF  # noqa: E402


def reference_copy_paste(image, target, paste_image, paste_target, selection, blending=True):
    """torchvision references/detection/transforms.py ``_copy_paste`` for images of one size, with
    the random selection given (theirs: ``unique(randint(0, n, (n,)))``)."""
    if len(paste_target["masks"]) < 1:
        return image, target
    paste_masks = paste_target["masks"][selection]
    paste_boxes = paste_target["boxes"][selection]
    paste_labels = paste_target["labels"][selection]
    masks = target["masks"]
    alpha = paste_masks.sum(dim=0) > 0
    if blending:
        alpha = TVF.gaussian_blur(alpha.unsqueeze(0), kernel_size=(5, 5), sigma=[2.0])
    image = (image * (~alpha)) + (paste_image * alpha)
    masks = masks * (~alpha)
    non_empty = masks.sum((-1, -2)) > 0
    masks = masks[non_empty]
    out = dict(target)
    out["masks"] = torch.cat([masks, paste_masks])
    out["boxes"] = torch.cat([tv_ops.masks_to_boxes(masks), paste_boxes])
    out["labels"] = torch.cat([target["labels"][non_empty], paste_labels])
    if "area" in target:
        out["area"] = out["masks"].sum((-1, -2)).to(torch.float32)
    if "iscrowd" in target and "iscrowd" in paste_target and len(target["iscrowd"]) == len(non_empty):
        out["iscrowd"] = torch.cat([target["iscrowd"][non_empty], paste_target["iscrowd"][selection]])
    boxes = out["boxes"]
    degenerate = boxes[:, 2:] <= boxes[:, :2]
    if degenerate.any():
        valid = ~degenerate.any(dim=1)
        for k in ("boxes", "masks", "labels", "area", "iscrowd"):
            if k in out:
                out[k] = out[k][valid]
    return image, out


def _photos(n, h, w):
    from PIL import Image

    files = sorted(glob.glob(str(IMAGENETTE / "val" / "*" / "*.JPEG")))[:n]
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        if i < len(files):
            rgb = np.asarray(Image.open(files[i]).convert("RGB").resize((w, h)), dtype=np.float32) / 255
            out.append(torch.from_numpy(rgb).permute(2, 0, 1).contiguous())
        else:
            out.append(torch.rand(3, h, w, generator=g))
    return out


def _target(rects, h, w, label0):
    masks = torch.zeros(len(rects), h, w, dtype=torch.uint8)
    for i, (y0, x0, y1, x1) in enumerate(rects):
        masks[i, y0:y1, x0:x1] = 1
    boxes = torch.tensor([[x0, y0, x1, y1] for y0, x0, y1, x1 in rects], dtype=torch.float32).reshape(-1, 4)
    n = len(rects)
    return {"boxes": boxes, "labels": torch.arange(label0, label0 + n), "masks": masks,
            "iscrowd": torch.zeros(n, dtype=torch.int64), "area": masks.flatten(1).sum(1).float(), "image_id": label0}


def _case():
    h, w = 72, 96
    images = _photos(3, h, w)
    targets = [
        _target([(10, 10, 40, 50), (45, 60, 70, 90)], h, w, 10),
        # sample 1 gets sample 0's objects: one of its own lies under the first (covered), one is left a
        # one-pixel column beside it by the blended (dilated) paste mask (degenerate), one is untouched
        _target([(15, 15, 30, 40), (10, 48, 40, 53), (50, 5, 65, 30)], h, w, 20),
        _target([], h, w, 30),  # nothing of its own; nothing of it to paste onto sample 0
    ]
    return images, targets


@pytest.mark.parametrize("blending", [True, False])
def test_copy_paste_equals_the_references_rule(blending):
    images, targets = _case()
    paste = [torch.zeros(0, dtype=torch.int64), torch.tensor([0, 1]), torch.tensor([1, 2])]
    got_images, got = TD.SimpleCopyPaste(blending).apply(images, targets, paste)
    rolled = [2, 0, 1]
    for b in range(3):
        want_image, want = reference_copy_paste(images[b], targets[b], images[rolled[b]], targets[rolled[b]], paste[b],
                                                blending)
        assert torch.equal(got_images[b], want_image), b
        for k in ("boxes", "labels", "masks", "area", "iscrowd"):
            assert torch.equal(got[b][k].to(want[k].dtype), want[k]), (b, k)
        assert got[b]["boxes"].dtype == torch.float32 and got[b]["image_id"] == targets[b]["image_id"]
    # the case holds what it is named for: the covered object of sample 1 is gone, and with blending the
    # one-pixel column too (without, three columns of it stay)
    assert got[1]["labels"].tolist() == ([22, 10, 11] if blending else [21, 22, 10, 11])
    assert len(got[0]["labels"]) == 2  # sample 2 had nothing to paste


def test_the_selection_law_is_the_references():
    """Theirs: ``unique(randint(0, n, (n,)))`` from the global generator; ours per sample from its
    own: the distribution of the pasted subsets' sizes agrees (chi-square, 4,000 draws each)."""
    n, draws = 5, 4000
    ours = TD.SimpleCopyPaste().draw([n] * draws, list(range(draws)), seed=3, epoch=0)
    torch.manual_seed(0)
    theirs = [torch.unique(torch.randint(0, n, (n,))) for _ in range(draws)]
    a = np.bincount([len(s) for s in ours], minlength=n + 1)[1:]
    b = np.bincount([len(s) for s in theirs], minlength=n + 1)[1:]
    keep = (a + b) > 0
    stat = (((a - b) ** 2) / (a + b))[keep].sum()
    assert stat < 20.5  # chi-square, 4 dof, p ≈ 4e-4
    assert all(torch.equal(s, torch.unique(s)) and (s < n).all() for s in ours)
    # the paste source is the previous sample: its count bounds each draw
    mixed = TD.SimpleCopyPaste().draw([0, 3, 1], [7, 8, 9], seed=0, epoch=0)
    assert len(mixed[1]) == 0 and (mixed[2] < 3).all() and (mixed[0] < 1).all() and len(mixed[0]) == 1


def test_the_step_pastes_after_the_lsj_geometry(tmp_path):
    """DetectionStep(copy_paste=...) = the step without it, then the references' rule with the
    plan's selections, on a generated instance set (real photo textures where present)."""
    pytest.importorskip("pycocotools")
    from dctnet.data import CocoDataset, collate_detection
    from dctnet.synthetic import make_instance_set

    textures = sorted(glob.glob(str(IMAGENETTE / "val" / "*" / "*.JPEG")))[:40:5] or None
    paths = make_instance_set(str(tmp_path / "set"), textures=textures, train=4, val=1, size=(64, 96), seed=5)
    ds = CocoDataset(tmp_path / "set" / "train", paths["train"], masks="instance")
    batch, targets = collate_detection([ds[i] for i in range(len(ds))], pin_memory=False)
    ops = [TD.ScaleJitter((96, 96)), TD.FixedSizeCrop((96, 96), fill=[123.0, 117.0, 104.0]),
           TD.RandomHorizontalFlip(0.5), TD.SanitizeBoundingBoxes()]
    step = TD.DetectionStep(ops, seed=4, copy_paste=TD.SimpleCopyPaste())
    plain = TD.DetectionStep(ops, seed=4)
    plan = step.plan(targets, epoch=2)
    assert plan.paste is not None and sum(len(p) for p in plan.paste) > 0
    images, out = step.apply(batch, targets, plan)
    base_images, base = plain(batch, targets, epoch=2)
    B = len(images)
    for b in range(B):
        want_image, want = reference_copy_paste(base_images[b], base[b], base_images[b - 1], base[b - 1], plan.paste[b])
        assert torch.equal(images[b], want_image)
        for k in ("boxes", "labels", "masks"):
            assert torch.equal(out[b][k].to(want[k].dtype), want[k]), (b, k)


def test_copy_paste_refuses_what_it_cannot_do(tmp_path):
    from dctnet.train import RecipeError, load_recipe

    images, targets = _case()
    with pytest.raises(ValueError, match="one size"):
        TD.SimpleCopyPaste().apply([images[0], images[1][:, :40]], targets[:2], [torch.tensor([0]), torch.tensor([0])])
    base = {"data": {"source": "coco", "root": str(tmp_path), "train": {"images": "t", "annotations": "t.json"},
                     "val": {"images": "v", "annotations": "v.json"}},
            "model": {"arch": "torchvision:maskrcnn_resnet50_fpn", "input": "device-rgb"}}
    for detect, model in (({"preset": "hflip", "copy_paste": True}, {}),
                          ({"preset": "lsj", "copy_paste": True}, {"input": "rgb"})):
        spec = {**base, "detect": detect, "model": {**base["model"], **model}}
        with pytest.raises(RecipeError, match="SimpleCopyPaste runs with the lsj preset"):
            load_recipe(None, spec)
    load_recipe(None, {**base, "detect": {"preset": "lsj", "copy_paste": True, "masks": True}})
    with pytest.raises(RecipeError, match="Mask R-CNN.*detect.masks: true"):  # its targets need the masks
        load_recipe(None, {**base, "detect": {"preset": "lsj", "copy_paste": True}})


def test_a_step_with_copy_paste_reads_the_device_once():
    """Everything but the survivors' flags stays on the device: every host read the tracer (device
    memory simulated on the CPU) records is the one line that copies the flags back."""
    from test_host_syncs import DeviceTracer

    images, targets = _case()
    tracer = DeviceTracer(collect=True)
    tracer.mark(images)
    tracer.mark([t["masks"] for t in targets])
    tracer.mark([t["boxes"] for t in targets])
    tracer.mark([t[k] for t in targets for k in ("labels", "iscrowd", "area")])
    paste = [torch.zeros(0, dtype=torch.int64), torch.tensor([0, 1]), torch.tensor([1, 2])]
    with tracer:
        TD.SimpleCopyPaste().apply(images, targets, paste)
    # (the tracer names the read twice: the copy, then numpy() of what it still takes for device memory)
    assert tracer.syncs and all(s.strip().splitlines()[-1].strip().startswith("flags = ") for s in tracer.syncs), \
        tracer.syncs


def test_dctnet_train_with_copy_paste(tmp_path):
    """detect.copy_paste on a box detector: the train split's masks are read for it, the model gets
    boxes and labels, one step trains."""
    pytest.importorskip("pycocotools")
    from dctnet.synthetic import make_instance_set
    from dctnet.train import load_recipe
    from dctnet.train.trainer import Trainer

    make_instance_set(str(tmp_path / "set"), train=2, val=1, size=(64, 96), seed=3)
    spec = {"data": {"source": "coco", "root": str(tmp_path / "set"), "batch_size": 2, "workers": 0,
                     "train": {"images": "train", "annotations": "train.json"},
                     "val": {"images": "val", "annotations": "val.json"}},
            "model": {"arch": "torchvision:fasterrcnn_mobilenet_v3_large_320_fpn", "input": "device-rgb"},
            "detect": {"preset": "lsj", "copy_paste": True},
            "optim": {"epochs": 1, "lr": 0.01, "lr_batch": 16},
            "train": {"max_steps": 1, "out": str(tmp_path / "run")}}
    trainer = Trainer(load_recipe(None, spec), log=lambda m: None)
    assert "SimpleCopyPaste" in trainer.task.describe() and trainer.task.val_set.masks == "none"
    record = trainer.fit()
    assert np.isfinite(record["train_loss"]) and "bbox_AP" in record
