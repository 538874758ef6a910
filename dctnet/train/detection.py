"""The detection task: torchvision's detectors from a recipe (``data.source: coco``), trained by the
one :class:`~dctnet.train.trainer.Trainer`.

Two arms, as for classifiers:

- ``input: rgb`` — torchvision's detection reference pipeline, the baseline: Pillow decodes each
  image in DataLoader workers, torchvision v2's ops of the preset move image, boxes and masks
  there, and the detector resizes its input itself (``GeneralizedRCNNTransform``).
- ``input: dct`` — plan A's device step, then the images' block DCT as coefficient mosaics for a
  detector whose ResNet backbone has a DCT stem (:func:`dctnet.models.detection.dct_detector`:
  ``idct`` converted, ``dct-up`` learned); the geometry resamples pixels, so the coefficients are
  the resampled images', not the file's.
- ``input: device-rgb`` (plan A) — the workers only read coefficients (:class:`dctnet.data.CocoDataset`);
  the host draws each sample's geometry with torchvision's draw laws and moves its boxes
  (:class:`dctnet.transforms.detection.DetectionStep`), the device decodes and resamples the
  images and masks, including the detector's own resize
  (:class:`~dctnet.transforms.detection.DetectorResize`); the model's transform only normalises
  (:func:`dctnet.models.detection.prepare_detector`).

Each epoch: the summed detection losses, then COCO evaluation of the val split (pycocotools'
``COCOeval`` on the predictions of every rank, gathered): ``bbox_AP``, ``bbox_AP50``, …, ``segm_AP``
with masks in the epoch's record, ``predictions_val.json`` (COCO's results format, in the files'
pixels). Host CPU per sample of the input pipeline is recorded for both arms, the same ops in each:
the workers', and plan A's geometry draw and device step (all of it on a CPU-only run), or the rgb
arm's model resize.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dctnet.data import CocoDataset, EpochSampler, collate_detection
from dctnet.models.detection import (backbone_state, build_detector, dct_detector, prepare_detector,
                                     roi_pool_scales, set_roi_pool_scales)
from dctnet.readback import log_point
from dctnet.train.coco_eval import batch_results, evaluate_coco, gather_results
from dctnet.train.detection_inputs import (PillowCoco, StampedCollate, box_drops, list_collate, semantic_dir,
                                           split_paths, time_resize)
from dctnet.train.precision import use_channels_last
from dctnet.train.process import RunProcess
from dctnet.train.recipe import Recipe
from dctnet.train.records import append_skipped
from dctnet.train.rng import SeededDraws
from dctnet.train.task import Task
from dctnet.transforms import detection as TD

__all__ = ["DetectionTask"]


class DetectionTask(Task):
    """A torchvision detector over a COCO set: ``train_set``/``val_set``
    (:class:`~dctnet.data.CocoDataset`), their loaders, the device steps ``step``/``eval_step``
    (:class:`~dctnet.transforms.detection.DetectionStep`: plan A and dct; the rgb arm's geometry runs
    in the workers), ``model``."""

    #: image sizes follow each batch's images: cudnn would re-tune every size
    fixed_shapes = False
    #: the task's name in messages
    kind = "detection"
    #: plain momentum, as torchvision's detection and segmentation references' SGD
    nesterov = False

    def __init__(self, recipe: Recipe, process: RunProcess) -> None:
        super().__init__(recipe, process)
        r = recipe
        #: the device step (plan A and dct): coefficients read in the workers, geometry on the device
        self.plan_a = r.model.input in ("device-rgb", "dct")
        self.dct = r.model.input == "dct"
        self._worker_cpu: dict[int, dict[int, float]] = {}
        #: the input pipeline's host figures over the run (see :meth:`counters`)
        self.cost = {"cpu": 0.0, "wait": 0.0, "boxes": 0.0, "dropped": 0.0, "past": 0.0}
        self._build_data(r)
        self._build_model(r)
        train_ops, eval_ops = self._build_ops(r)
        self.channels_last = use_channels_last(r, self.model, self.device)  # (weights only: see fixed_shapes)
        self.sampler = EpochSampler(len(self.train_set), shuffle=True, seed=r.train.seed, drop_last=True)
        self.val_sampler = EpochSampler(len(self.val_set), shuffle=False)
        self.train_loader = self._loader(self.train_set, self.sampler, train=True)
        self.val_loader = self._loader(self.val_set, self.val_sampler, train=False)
        self.step = TD.DetectionStep(train_ops, seed=r.train.seed, exact=r.data.decode == "exact",
                                     copy_paste=TD.SimpleCopyPaste() if r.detect.copy_paste else None)
        self.eval_step = TD.DetectionStep(eval_ops, seed=r.train.seed, exact=r.data.decode == "exact")
        self.steps = len(self.train_loader)
        if not self.steps:
            raise ValueError(f"data.train: {len(self.train_set)} images make no full batch of data.batch_size "
                             f"{r.data.batch_size}; lower data.batch_size")

    def _build_data(self, r: Recipe) -> None:
        """The COCO splits: images without a usable box left out (detect.drop_unannotated), the first
        N kept (limits), every file checked once (on_error)."""
        masks = "instance" if r.detect.masks else "none"
        common = dict(seed=r.train.seed, on_error=r.data.on_error, warnings=r.data.warnings)
        self.train_set = CocoDataset(*split_paths(r, "train"), semantic=semantic_dir(r, "train"),
                                     masks="instance" if r.detect.copy_paste else masks, **common)
        self.val_set = CocoDataset(*split_paths(r, "val"), semantic=semantic_dir(r, "val"), masks=masks, **common)
        #: (split, path, reason) of the images data.on_error: skip left out before training (a full decode
        #: found them unusable) and of the samples skipped since the last epoch's record
        self.excluded: list[tuple[str, str, str]] = []
        self.skipped: list[tuple[str, str, str]] = []
        #: training images left out for having no usable box (detect.drop_unannotated)
        self.unannotated = 0
        if r.detect.drop_unannotated:
            keep = self.train_set.annotated_indices()
            self.unannotated = len(self.train_set) - len(keep)
            self.train_set.select(keep)
        for split, ds, limit in (("train", self.train_set, r.data.limit_train), ("val", self.val_set, r.data.limit_val)):
            if limit:  # the first N images (smoke tests): only those are checked and read
                ds.select(range(min(limit, len(ds))))
            refused = ds.check()
            self.excluded += [(split, str(path), str(reason)) for path, reason in refused]
            if not len(ds):  # (an empty "images" list, or every file unusable): nothing to train or evaluate on
                unannotated = (f", {self.unannotated} without a usable box (detect.drop_unannotated: false keeps "
                               "them)") if split == "train" and self.unannotated else ""
                raise ValueError(f"data.{split}: {split_paths(r, split)[1]} lists no usable image "
                                 f"({len(refused)} left out as unusable{unannotated})")

    def _build_model(self, r: Recipe) -> None:
        """The task's torchvision model, and model.init's weights."""
        num_classes = r.model.num_classes or len(self.train_set.classes) + 1
        torch.manual_seed(r.train.seed)
        name = r.model.arch.split(":", 1)[1]
        self.model = self._network(r, name, num_classes)
        self.num_classes = num_classes
        if r.model.init:  # a detector's own checkpoint, or a classifier's weights for its backbone
            if not Path(r.model.init).is_file():
                raise FileNotFoundError(f"model.init: {r.model.init} not found (a detector's checkpoint, or a "
                                        "classifier's whose weights start the backbone; set model.init: null to "
                                        "start from scratch)")
            state = torch.load(r.model.init, map_location="cpu", weights_only=True)
            state = state.get("model", state)
            if self.dct and any(k.startswith("backbone.body.conv1.1.") for k in state):
                # a DCT detector's own checkpoint: its stem's keys exist only once the model is converted
                dct_detector(self.model, r.model.stem or "idct", r.model.keep)
            state = backbone_state(state, self.model)
            if not state:
                raise ValueError(f"model.init {r.model.init}: no weights fit {r.model.arch} (neither its own keys nor "
                                 "a ResNet / MobileNetV3 classifier's backbone)")
            missing, _ = self.model.load_state_dict(state, strict=False)
            self.log(f"model.init {r.model.init}: {len(state)} tensors loaded, {len(missing)} left at their init")

    def _network(self, r: Recipe, name: str, num_classes: int) -> nn.Module:
        """torchvision's detector ``name`` with the recipe's detect.* settings."""
        d = r.detect
        kwargs = {k: v for k, v in (("min_size", d.min_size), ("max_size", d.max_size)) if v}
        return build_detector(name, num_classes, backbone=d.backbone, returned_layers=d.returned_layers,
                              anchor_sizes=d.anchor_sizes, **kwargs, **d.model_args)

    def _build_ops(self, r: Recipe) -> tuple[list, list]:
        """The train and eval geometry, and the model prepared for it (its resize off where the
        device step resizes; the DCT stem for input dct)."""
        ops = (TD.build_detection_ops(r.detect.ops) if r.detect.ops else
               TD.detection_preset(r.detect.preset, r.detect.hflip_prob))
        resize = [TD.DetectorResize.from_model(self.model, train=True)] if r.detect.resize else []
        train_ops = [*ops, *resize]
        eval_ops = [TD.DetectorResize.from_model(self.model, train=False)] if r.detect.resize else []
        if self.dct and getattr(self.model, "dctnet_stem", None) is None:  # after model.init: RGB weights
            dct_detector(self.model, r.model.stem or "idct", r.model.keep)  # carry into the converted stem
        elif self.plan_a or not r.detect.resize:  # (resize false: the rgb arm's model must not resize either)
            prepare_detector(self.model)
        #: the model's transform neither resizes nor pastes masks: predictions come in the input's canvas
        self.prepared = self.plan_a or not r.detect.resize
        #: host CPU seconds of the rgb arm's model resize (its transform's), counted with the input pipeline
        self.model_resize_cpu = [0.0]
        if not self.prepared:
            time_resize(self.model.transform, self.model_resize_cpu)
        return train_ops, eval_ops

    def describe(self) -> str:
        arm = ("device-rgb (plan A): coefficients read in DataLoader workers; geometry drawn on the host, decode, "
               "resampling and the detector's resize on the device" if self.plan_a else
               "rgb (torchvision's reference pipeline): Pillow decode and torchvision v2 in DataLoader workers; "
               "the detector resizes")
        if not self.recipe.detect.resize:
            arm += " (detect.resize false: no detector resize, the model takes the ops' sizes)"
        if self.dct:
            arm = (f"dct: plan A's device step, then the images' block DCT as coefficient mosaics; the backbone's "
                   f"{self.model.dctnet_stem} stem takes them")
        return (f"{self.kind}: {self.recipe.model.arch}, input {arm}\ntrain geometry: {self.step!r}\n"
                f"eval geometry: {self.eval_step!r}\n")

    # ------------------------------------------------------------------ data
    def rgb_transform(self, r: Recipe, train: bool) -> Any:
        """The rgb arm's torchvision v2 transform of a split (eval: none, the detector resizes)."""
        if not train:
            return None
        return (TD.torchvision_ops(r.detect.ops) if r.detect.ops else
                TD.torchvision_detection_preset(r.detect.preset, r.detect.hflip_prob))

    def _loader(self, ds: CocoDataset, sampler: EpochSampler, *, train: bool) -> torch.utils.data.DataLoader:
        r = self.recipe
        pin = self.device.type == "cuda"  # host batches in pinned memory: copied to the device without blocking
        if self.plan_a:
            dataset, collate = ds, lambda items: collate_detection(items, pin_memory=pin)
        else:
            dataset, collate = PillowCoco(ds, self.rgb_transform(r, train)), list_collate
        if not self.plan_a:  # torchvision's draws seeded per (seed, epoch, index): any workers, and --resume
            dataset = SeededDraws(dataset, r.train.seed)
        return torch.utils.data.DataLoader(
            dataset, batch_size=r.data.batch_size, sampler=sampler, num_workers=r.data.workers,
            collate_fn=StampedCollate(collate), persistent_workers=r.data.workers > 0, drop_last=False,
            generator=torch.Generator().manual_seed(r.train.seed),  # (workers' base seed: not the main stream)
            pin_memory=pin and not self.plan_a)  # (plan A's collate pins its own)

    def summary(self, steps_per_epoch: int) -> str:
        """One line before training: each split's images, annotations and images without any, the
        categories, the arm and the steps per epoch — what a user checks before a long run."""
        parts = []
        for split, ds in (("train", self.train_set), ("val", self.val_set)):
            anns = sum(len(ds.coco.imgToAnns.get(i, ())) for i in ds.ids)
            empty = sum(not ds.coco.imgToAnns.get(i) for i in ds.ids)
            parts.append(f"{split} {len(ds)} images, {anns} annotations ({empty} images without any)")
        if self.unannotated:  # (left out before: the train part counts the images it trains on)
            parts[0] += f", {self.unannotated} more left out without a usable box (detect.drop_unannotated)"
        return (f"{self.kind}: {'; '.join(parts)}; {len(self.train_set.classes)} categories; model.input "
                f"{self.recipe.model.input}, {steps_per_epoch} steps an epoch of batch {self.recipe.data.batch_size}")

    def start_notes(self, fresh: bool, steps_per_epoch: int) -> None:
        """``skipped.txt`` (epoch 0: before training) and a log line for the images the full decode left
        out before training, the split's summary, and the annotations' warnings."""
        path = self.out / "skipped.txt"
        if fresh:
            append_skipped(path, 0, self.excluded)
        if self.excluded:
            self.log(f"left out {len(self.excluded)} unusable images before training (names and reasons in {path})")
        self.log(self.summary(steps_per_epoch))
        for ds in (self.train_set, self.val_set):
            for line in ds.box_warnings():
                self.log(f"warning: {line}")

    def batches(self, loader, step: TD.DetectionStep, epoch: int, cost: dict[str, float], split: str = "train"):
        """``(images, targets)`` on the device; adds to ``cost`` the seconds waited for the loader
        (``wait``), the images (``n``) and the input pipeline's host CPU (``cpu``): the workers', the
        host's geometry draw and the device step's (on a GPU its kernel launches; on a CPU-only run the
        whole step, which runs on the host). The rgb arm's model resizes in its forward: the caller adds
        that (:meth:`_forward`), so both arms count the same ops."""
        seen = self._worker_cpu.setdefault(id(loader), {})  # persistent workers: CPU so far, per worker
        it = iter(loader)
        while True:
            t0, w0 = time.thread_time(), time.perf_counter()
            try:
                payload, (wid, cpu) = next(it)
            except StopIteration:
                break
            cost["wait"] = cost.get("wait", 0.0) + time.perf_counter() - w0
            main = time.thread_time() - t0 if wid < 0 else 0.0  # no workers: the main thread did it
            if wid >= 0:
                cost["cpu"] += cpu - seen.get(wid, 0.0)
                seen[wid] = cpu
            if self.plan_a:
                batch, targets = payload
                self.skipped += [(split, str(path), str(reason)) for _, path, reason in (batch.skipped or ())]
                t0 = time.thread_time()
                plan = step.plan(targets, epoch)  # host work: each sample's draws and boxes
                drops = [box_drops(t["boxes"], t["size"], m["_kept"]) for t, m in zip(targets, plan.targets if plan else ())]
                images, targets = step.apply(batch.to(self.device, non_blocking=True), targets, plan)
                main += time.thread_time() - t0
            else:
                images, targets = payload
                drops = [t.pop("box_drops") for t in targets if "box_drops" in t]
                images = [i.to(self.device, non_blocking=True) for i in images]
                targets = [{k: (v.to(self.device, non_blocking=True) if isinstance(v, torch.Tensor) else v)
                            for k, v in t.items()} for t in targets]
            cost["cpu"] += main
            cost["n"] = cost.get("n", 0.0) + len(images)
            for key, value in zip(("boxes", "dropped", "past"), np.sum(drops, axis=0) if drops else (0, 0, 0)):
                cost[key] = cost.get(key, 0) + int(value)
            yield images, targets


    # ------------------------------------------------------------------ training
    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def train_batches(self, epoch: int) -> Iterator[Any]:
        return self.batches(self.train_loader, self.step, epoch, self.cost)

    def _model_input(self, images: list[torch.Tensor]) -> list[torch.Tensor]:
        """What the detector takes: the step's images, or (input dct) their coefficient mosaics."""
        return TD.coefficient_mosaics(images) if self.dct else images

    def _forward(self, cost: dict[str, float], model: nn.Module, *args: Any) -> Any:
        """``model(*args)``, adding to ``cost["cpu"]`` the host CPU of the rgb arm's model resize in it
        (the input pipeline's work there, done by the detector's transform)."""
        clock = self.model_resize_cpu[0]
        out = model(*args)
        cost["cpu"] += self.model_resize_cpu[0] - clock
        return out

    def loss(self, net: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
        images, targets = batch
        losses = self._losses(net, images, targets)
        losses = {k: v.float() for k, v in losses.items()}
        loss = sum(losses.values())
        return loss, {k: v.detach().double() for k, v in (*losses.items(), ("loss", loss))}, len(images)

    def _losses(self, net: nn.Module, images: list[torch.Tensor], targets: list[dict]) -> dict[str, torch.Tensor]:
        """torchvision's detection losses (the detector computes them in train mode)."""
        keys = ("boxes", "labels", "masks") if self.recipe.detect.masks else ("boxes", "labels")
        return self._forward(self.cost, net, self._model_input(images),
                             [{k: v for k, v in t.items() if k in keys} for t in targets])

    def counters(self) -> dict[str, float]:
        return dict(self.cost)

    def train_record(self, sums: dict[str, float], steps: int, seen: int,
                     counts: dict[str, float]) -> dict[str, float]:
        # each loss: the mean over the epoch's steps on every rank; the boxes: in the epoch's files, dropped
        # by the geometry and sanitizing, and of those the ones that ran past their image in the file (bad
        # annotations, dropped each step)
        record = {f"train_{k}": v / max(steps * self.world_size, 1) for k, v in sums.items()}
        record.update(train_boxes=int(counts.get("boxes", 0)), train_boxes_dropped=int(counts.get("dropped", 0)),
                      train_boxes_dropped_past_image=int(counts.get("past", 0)))
        return record

    # ------------------------------------------------------------------ evaluation and records
    @torch.no_grad()
    def evaluate(self, model: nn.Module, suffix: str = "") -> dict[str, float]:
        """COCO metrics of ``model`` on the val split (the EMA's with suffix ``_ema``: keys
        ``bbox_AP_ema`` …, predictions in ``predictions_val_ema.json``)."""
        model.eval()
        if model is not self.model:  # (the EMA pools at the scales the model inferred from its first batch)
            set_roi_pool_scales(model, roi_pool_scales(self.model))
        ds, results, cost = self.val_set, [], {"cpu": 0.0, "n": 0.0}
        iou_types = ("bbox", "segm") if self.recipe.detect.masks else ("bbox",)
        for images, targets in self.batches(self.val_loader, self.eval_step, 0, cost, "val"):
            outputs = self._forward(cost, model, self._model_input(images))
            with log_point(self.device):  # predictions leave the device per batch (COCO evaluation runs on the host)
                results += batch_results(self.val_set, images, targets, outputs, in_canvas=self.prepared,
                                         clamp=self.dct)
        results = gather_results(results)
        metrics: dict[str, float] = {}
        if self.rank == 0:
            metrics = evaluate_coco(ds.coco, results, iou_types=iou_types, image_ids=ds.ids,
                                    out=self.out / f"predictions_val{suffix}.json")
            metrics["val_data_cpu_us_per_sample"] = cost["cpu"] / max(cost["n"], 1) * 1e6
        return {f"{k}{suffix}": v for k, v in metrics.items()}

    def take_skipped(self) -> list[tuple[str, str, str]]:
        mine, self.skipped = self.skipped, []
        return mine

    def epoch_line(self, record: dict[str, Any]) -> str:
        ap = f", val bbox AP {record['bbox_AP']:.3f} AP50 {record['bbox_AP50']:.3f}" if "bbox_AP" in record else ""
        ap += f" (EMA {record['bbox_AP_ema']:.3f})" if "bbox_AP_ema" in record else ""
        past = record.get("train_boxes_dropped_past_image", 0)
        note = f"; {past} boxes dropped for running past their image in the annotations" if past else ""
        return (f"loss {record['train_loss']:.3f}{ap} | {record['images_per_s']:.1f} img/s, "
                f"data CPU {record['data_cpu_us_per_sample']:.0f} µs/sample{note}")

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict[str, Any]:
        # the RoI poolers' scales, inferred from the first batch (not in the state_dict)
        return {"roi_pool_scales": roi_pool_scales(self.model)}

    def load_state(self, state: dict[str, Any]) -> None:
        set_roi_pool_scales(self.model, state.get("roi_pool_scales", {}))
