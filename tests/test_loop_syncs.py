"""No host sync in the training loops: ``Trainer.fit`` of every task as a GPU would run
them, simulated on the CPU.

Each shipped recipe (classification in all three arms, detection, and a segmentation recipe) is built
at test size on the CPU, then switched to the simulated device of ``tests/test_host_syncs.py``'s
:class:`DeviceTracer`: the trainer's and the pipeline's device become ``cuda:0``, the model's parameters
and buffers (and the EMA's, the device step's) are marked as device memory, the prefetcher's CUDA
stream and events are stand-ins, and ``fit()`` runs 3 training steps and the evaluation under the
tracer. Every read of device values on the host (``.item()``, ``float(t)``, ``.tolist()``, a boolean
mask, ``torch.cuda.synchronize``) and every blocking host → device copy fails the test, unless it
happens inside :func:`dctnet.readback.log_point` (the documented reads: the end of an epoch,
the evaluation's result, a detector's predictions leaving the device) or inside torchvision's
detection models themselves (their anchor sampling and box suppression are data-dependent by design:
not the loop's to remove). The documented reads are counted too: a few per epoch, never per step.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest
import torch

from dctnet.train import load_recipe
from dctnet.readback import at_log_point

from conftest import ROOT, segmentation_recipe
from test_host_syncs import SIM_DEVICE, DeviceTracer

CLASSIFICATION = [ROOT / "recipes" / "quickstart.yaml", *sorted((ROOT / "recipes" / "imagenette").glob("*.yaml")),
                  *sorted((ROOT / "recipes" / "reference").glob("*.yaml"))]
DETECTION = sorted((ROOT / "recipes" / "detection").glob("*.yaml"))
STEPS = 3


class LoopTracer(DeviceTracer):
    """:class:`DeviceTracer` that lets the documented log points read (and counts them), and leaves
    torchvision's detectors their own data-dependent ops (counted apart)."""

    def __init__(self, *, detector: bool = False) -> None:
        super().__init__()
        self.log_reads: list[str] = []
        self.model_reads = 0
        #: a torchvision detector's backward replays the index tensors its forward sampled on the host
        self.detector = detector

    def fail(self, what: str) -> None:
        if at_log_point():
            self.log_reads.append(what)
            return
        files = [f.filename.replace("\\", "/") for f in traceback.extract_stack()]
        if any("torchvision/models/detection" in f for f in files) or (
                self.detector and any(f.endswith("torch/autograd/graph.py") for f in files)):
            self.model_reads += 1
            return
        super().fail(what)


class _Stream:
    """What the prefetcher uses of a CUDA stream or event, on a machine without CUDA."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record(self, *args: Any) -> None:
        pass

    def wait_event(self, *args: Any) -> None:
        pass

    def __enter__(self) -> "_Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


@pytest.fixture
def simulated_cuda(monkeypatch):
    """``torch.cuda``'s streams, events and synchronize as stand-ins; ``synchronize`` is a host wait, allowed
    only at a log point (it fails the test elsewhere)."""
    waits: list[bool] = []

    def synchronize(*args: Any) -> None:
        waits.append(at_log_point())
        assert at_log_point(), "torch.cuda.synchronize outside a log point"

    monkeypatch.setattr(torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(torch.cuda, "Event", _Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: _Stream())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: _Stream())
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, stream: None)
    # torch groups tensors by their real device in C++ (gradient clipping, optimizers): in a simulated run
    # every gradient lives on the simulated device, so the groups are keyed by it, as on a GPU
    from torch.nn.utils import clip_grad

    grouped = clip_grad._group_tensors_by_device_and_dtype
    monkeypatch.setattr(clip_grad, "_group_tensors_by_device_and_dtype", lambda *a, **k: {
        (SIM_DEVICE if device.type == "cpu" else device, dtype): v for (device, dtype), v in grouped(*a, **k).items()})
    return waits


def _on_simulated_device(tracer: DeviceTracer, trainer: Any, *modules: Any) -> None:
    trainer.device = trainer.task.device = SIM_DEVICE
    tracer.mark(*(m for m in modules if m is not None))


def _classification_trainer(path: Path, root: str, tmp_path: Path):
    from dctnet.train.trainer import Trainer

    over = [f"data.root={root}", "data.image_size=32", "data.batch_size=4", "data.threads=1", "data.workers=0",
            "data.limit_val=8", "model.stats_batches=1", "train.torch_threads=1", f"train.max_steps={STEPS}",
            "optim.epochs=1", "train.compile=false", "train.checkpoint=true", f"train.out={tmp_path / 'run'}"]
    r = load_recipe(path)
    if r.data.source == "synthetic":
        over = [f"data.root={tmp_path / 'synthetic'}", "data.synthetic_classes=3", "data.synthetic_train_per_class=6",
                "data.synthetic_val_per_class=3", "data.synthetic_size=[40, 64]", *over[1:]]
    return Trainer(load_recipe(path, over), log=lambda m: None)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> str:
    """A tiny generated dataset: 3 classes, mixed JPEG settings (4:2:0, 4:2:2, 4:4:4, gray, progressive)."""
    from dctnet.synthetic import make_labelled_dataset

    root = tmp_path_factory.mktemp("loop_shapes")
    return make_labelled_dataset(str(root), classes=3, train_per_class=6, val_per_class=3, size=(40, 64), seed=1)


@pytest.mark.parametrize("path", CLASSIFICATION, ids=[p.stem for p in CLASSIFICATION])
def test_training_loop_makes_no_host_sync(shapes, tmp_path, path, simulated_cuda):
    """``Trainer.fit`` (3 steps, evaluation, the EMA's evaluation where the recipe keeps one, the
    checkpoint): every host read happens at a log point, a handful per epoch."""
    trainer = _classification_trainer(path, shapes, tmp_path)
    pipe = trainer.task.pipe
    tracer = LoopTracer()
    _on_simulated_device(tracer, trainer, trainer.model, trainer.ema, pipe.step, pipe.normalize)
    pipe.device = SIM_DEVICE
    with tracer:
        record = trainer.fit()
    assert record["epoch"] == 1 and "val_top1" in record
    # the end of the epoch (its sums, synchronize), the evaluation (and the EMA's), the checkpoint: not per step
    assert 0 < len(tracer.log_reads) <= 12, tracer.log_reads
    assert all(simulated_cuda)


def _detection_trainer(arch_recipe: Path | None, tmp_path: Path, arm: str | None = None):
    from dctnet.synthetic import make_instance_set
    from dctnet.train.trainer import Trainer

    if arch_recipe is None:  # segmentation: the generated set's class maps, torchvision's LR-ASPP
        return Trainer(segmentation_recipe(tmp_path, arm, STEPS), log=lambda m: None)
    make_instance_set(str(tmp_path / "set"), train=8, val=2, size=(96, 128), seed=4)
    split = {s: {"images": s, "annotations": f"{s}.json"} for s in ("train", "val")}
    over = {"data.root": str(tmp_path / "set"), "data.train": split["train"], "data.val": split["val"],
            "data.batch_size": 2, "data.workers": 0, "optim.epochs": 1, "train.max_steps": STEPS,
            "detect.min_size": 64, "detect.max_size": 96, "train.out": str(tmp_path / "run"), "model.init": "null"}
    if arm is not None:
        over["model.input"] = arm
    recipe = load_recipe(arch_recipe, [f"{k}={v}" for k, v in over.items()])
    return Trainer(recipe, log=lambda m: None)


DETECTION_CASES = [pytest.param(p, arm, id=f"{p.stem}-{arm or load_recipe(p).model.input}")
                   for p in DETECTION for arm in (None, "rgb")] + \
                  [pytest.param(None, arm, id=f"segmentation-{arm}") for arm in ("device-rgb", "rgb")]


@pytest.mark.parametrize("path,arm", DETECTION_CASES)
def test_detection_loop_makes_no_host_sync(tmp_path, path, arm, simulated_cuda):
    """``Trainer.fit`` (3 steps and the evaluation) of each shipped detection recipe, in its own arm and
    torchvision's, and of a segmentation recipe: no host read outside the log points and the detector's
    own ops; the losses are summed on the device and read once, at the end of the epoch."""
    trainer = _detection_trainer(path, tmp_path, arm)
    tracer = LoopTracer(detector=not trainer.task.kind == "segmentation")
    _on_simulated_device(tracer, trainer, trainer.model, trainer.task.step, trainer.task.eval_step)

    def on_device(p: torch.Tensor) -> None:  # a device parameter's gradient is device memory, however the
        tracer.mark(p.grad)                   # detector's own host-sampled indices made it (not followed here)

    for p in trainer.model.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(on_device)
    with tracer:
        record = trainer.fit()
    assert record["epoch"] == 1 and "train_loss" in record
    assert 0 < len(tracer.log_reads), "the epoch's record reads its sums once"
    assert all(simulated_cuda)


def test_the_loop_tracer_fires_on_a_per_step_read(shapes, tmp_path, simulated_cuda, monkeypatch):
    """The test can fail: the loop's old per-step count (``torch.tensor(float(n), device=...)``, a blocking copy
    from pageable memory) put back into the loss is caught."""
    from test_host_syncs import HostSyncError

    trainer = _classification_trainer(ROOT / "recipes" / "quickstart.yaml", shapes, tmp_path)
    criterion = trainer.task.criterion

    def counted(out, target):
        n = torch.tensor(float(target.shape[0]), dtype=torch.float64, device=trainer.device)
        return criterion(out, target) * (n / n).float()

    trainer.task.criterion = counted
    tracer = LoopTracer()
    _on_simulated_device(tracer, trainer, trainer.model, trainer.task.pipe.step, trainer.task.pipe.normalize)
    trainer.task.pipe.device = SIM_DEVICE
    with pytest.raises(HostSyncError, match="blocking host"):
        with tracer:
            trainer.fit()
