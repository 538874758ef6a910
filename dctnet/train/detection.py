"""Training and evaluating torchvision's detectors from a recipe (``data.source: coco``).

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
``COCOeval`` on the predictions of every rank, gathered), ``metrics.json`` (one record per epoch:
``bbox_AP``, ``bbox_AP50``, …, ``segm_AP`` with masks), ``predictions_val.json`` (COCO's results
format, in the files' pixels) and ``last.pt`` for ``--resume``. Host CPU per sample of the input
pipeline is recorded for both arms, the same ops in each: the workers', and plan A's geometry draw
and device step (all of it on a CPU-only run), or the rgb arm's model resize.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from dctnet.data import CocoDataset, EpochSampler, collate_detection
from dctnet.models.detection import (backbone_state, build_detector, build_segmenter, dct_detector, prepare_detector,
                                     roi_pool_scales, set_roi_pool_scales)
from dctnet.train.checkpoint_file import check_room, read_checkpoint, state_bytes, write_checkpoint
from dctnet.train.coco_eval import batch_results, evaluate_coco, gather_results
from dctnet.train.ema import ModelEma, recipe_ema
from dctnet.train.optim import lr_at, optimizer_groups
from dctnet.train.precision import amp_dtype, autocast, use_channels_last
from dctnet.train.process import start_process
from dctnet.train.records import append_skipped, epoch_skipped, progress_bar, skip_note
from dctnet.readback import log_point
from dctnet.train.recipe import Recipe
from dctnet.train.detection_inputs import (PillowCoco, StampedCollate, box_drops, list_collate, semantic_dir,
                                           split_paths, time_resize)
from dctnet.train.rng import SeededDraws, rng_state, set_rng_state
from dctnet.train.segmentation import SegmentationTask
from dctnet.transforms import detection as TD

__all__ = ["DetectionTrainer", "train_detection"]


class DetectionTrainer(SegmentationTask):
    """Builds what a detection recipe names and trains it: ``DetectionTrainer(recipe).fit()``."""

    def __init__(self, recipe: Recipe, *, resume: bool = False, log=None) -> None:
        self.recipe = r = recipe
        proc = start_process(r, log)
        self.rank, self.world_size, self.device, self.log, self.out = (proc.rank, proc.world_size, proc.device,
                                                                        proc.log, proc.out)
        #: the device step (plan A and dct): coefficients read in the workers, geometry on the device
        self.plan_a = r.model.input in ("device-rgb", "dct")
        self.dct = r.model.input == "dct"
        self._worker_cpu: dict[int, dict[int, float]] = {}
        #: a semantic segmentation recipe (torchvision's segmentation models, class-index PNGs)
        self.segmentation = r.segmentation
        self._build_data(r)
        self._build_model(r)
        train_ops, eval_ops = self._build_ops(r)
        self._place_model(r)
        self.sampler = EpochSampler(len(self.train_set), shuffle=True, seed=r.train.seed, drop_last=True)
        self.val_sampler = EpochSampler(len(self.val_set), shuffle=False)
        self.train_loader = self._loader(self.train_set, self.sampler, train=True)
        self.val_loader = self._loader(self.val_set, self.val_sampler, train=False)
        self.step = TD.DetectionStep(train_ops, seed=r.train.seed, exact=r.data.decode == "exact",
                                     copy_paste=TD.SimpleCopyPaste() if r.detect.copy_paste else None)
        self.eval_step = TD.DetectionStep(eval_ops, seed=r.train.seed, exact=r.data.decode == "exact")
        self._build_optimizer(r)
        self.steps_per_epoch = len(self.train_loader)
        if not self.steps_per_epoch:
            raise ValueError(f"data.train: {len(self.train_set)} images make no full batch of data.batch_size "
                             f"{r.data.batch_size}; lower data.batch_size")
        if r.train.max_steps:
            self.steps_per_epoch = min(self.steps_per_epoch, r.train.max_steps)
        self.total_steps = max(1, r.optim.epochs * self.steps_per_epoch)
        self.start_epoch, self.records = 0, []
        self.room_checked = False  # free space for the checkpoint (after the first step)
        if resume and (self.out / "last.pt").exists():
            self._load(self.out / "last.pt")
        if self.rank == 0:
            r.dump(self.out / "recipe.yaml")
            (self.out / "pipeline.txt").write_text(self.describe() + "\n")
            self._note_excluded()
            self.log(self.summary())
            for ds in (self.train_set, self.val_set):
                for line in ds.box_warnings():
                    self.log(f"warning: {line}")

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
        """torchvision's detector or segmenter, and model.init's weights."""
        num_classes = r.model.num_classes or len(self.train_set.classes) + 1
        torch.manual_seed(r.train.seed)
        name = r.model.arch.split(":", 1)[1]
        if self.segmentation:
            self.model = build_segmenter(name, num_classes)
        else:
            d = r.detect
            kwargs = {k: v for k, v in (("min_size", d.min_size), ("max_size", d.max_size)) if v}
            self.model = build_detector(name, num_classes, backbone=d.backbone, returned_layers=d.returned_layers,
                                        anchor_sizes=d.anchor_sizes, **kwargs, **d.model_args)
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

    def _build_ops(self, r: Recipe) -> tuple[list, list]:
        """The train and eval geometry, and the model prepared for it (its resize off where the
        device step resizes; the DCT stem for input dct)."""
        if self.segmentation:  # the segmentation references' presets; the model takes the batch as it is
            train_ops = TD.segmentation_preset(r.detect.base_size, r.detect.crop_size, r.detect.hflip_prob)
            eval_ops = TD.segmentation_preset(r.detect.base_size, train=False)
        else:
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
        self.prepared = not self.segmentation and (self.plan_a or not r.detect.resize)
        #: host CPU seconds of the rgb arm's model resize (its transform's), counted with the input pipeline
        self.model_resize_cpu = [0.0]
        if not self.prepared and not self.segmentation:
            time_resize(self.model.transform, self.model_resize_cpu)
        return train_ops, eval_ops

    def _place_model(self, r: Recipe) -> None:
        """The model on its device (channels_last, autocast's dtype, the loss scaler, DDP)."""
        self.model.to(self.device)
        if use_channels_last(r, self.model, self.device):  # weights only: cudnn.benchmark would re-tune every image size
            self.model.to(memory_format=torch.channels_last)
        #: autocast's dtype (train.amp: bf16 on CUDA by default), loss scaling for fp16
        self.amp_dtype = amp_dtype(r, self.device)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.amp_dtype is torch.float16)
        #: model EMA (train.ema), averaged after each optimizer update, evaluated beside the model
        self.ema: ModelEma | None = recipe_ema(self.model, r, self.world_size)
        self.updates = 0  # optimizer updates so far (the EMA's clock)
        self.net: nn.Module = self.model
        if self.world_size > 1:
            self.net = nn.parallel.DistributedDataParallel(self.model, device_ids=[self.device] if
                                                           self.device.type == "cuda" else None)

    def _build_optimizer(self, r: Recipe) -> None:
        """SGD or AdamW over the classification trainer's parameter groups."""
        # as the classification trainer's: no weight decay on norms and biases, a DCT stem at lr · stem_lr_mult
        # (each group's scale of the scheduled rate kept in the group: the schedule sets lr · lr_scale)
        params = optimizer_groups(self.model, r, 1.0)
        for g in params:
            g["lr_scale"] = g["lr"]
        global_batch = r.data.batch_size * self.world_size
        self.lr = r.optim.lr * global_batch / r.optim.lr_batch
        fused = self.device.type == "cuda"  # (as the classification trainer: no host read of fp16's found-inf)
        if r.optim.optimizer == "sgd":
            self.opt = torch.optim.SGD(params, lr=self.lr, momentum=r.optim.momentum, weight_decay=r.optim.weight_decay,
                                       fused=fused)
        else:
            self.opt = torch.optim.AdamW(params, lr=self.lr, weight_decay=r.optim.weight_decay, fused=fused)

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
        return (f"detection: {self.recipe.model.arch}, input {arm}\ntrain geometry: {self.step!r}\n"
                f"eval geometry: {self.eval_step!r}\n")

    # ------------------------------------------------------------------ data
    def _loader(self, ds: CocoDataset, sampler: EpochSampler, *, train: bool) -> torch.utils.data.DataLoader:
        r = self.recipe
        pin = self.device.type == "cuda"  # host batches in pinned memory: copied to the device without blocking
        if self.plan_a:
            dataset, collate = ds, lambda items: collate_detection(items, pin_memory=pin)
        elif self.segmentation:
            tfm = TD.torchvision_segmentation_preset(r.detect.base_size, r.detect.crop_size, r.detect.hflip_prob,
                                                     train=train)
            dataset, collate = PillowCoco(ds, tfm), list_collate
        else:
            tfm = None
            if train:
                tfm = (TD.torchvision_ops(r.detect.ops) if r.detect.ops else
                       TD.torchvision_detection_preset(r.detect.preset, r.detect.hflip_prob))
            dataset, collate = PillowCoco(ds, tfm), list_collate
        if not self.plan_a:  # torchvision's draws seeded per (seed, epoch, index): any workers, and --resume
            dataset = SeededDraws(dataset, r.train.seed)
        return torch.utils.data.DataLoader(
            dataset, batch_size=r.data.batch_size, sampler=sampler, num_workers=r.data.workers,
            collate_fn=StampedCollate(collate), persistent_workers=r.data.workers > 0, drop_last=False,
            generator=torch.Generator().manual_seed(r.train.seed),  # (workers' base seed: not the main stream)
            pin_memory=pin and not self.plan_a)  # (plan A's collate pins its own)

    def summary(self) -> str:
        """One line before training: each split's images, annotations and images without any, the
        categories, the arm and the steps per epoch — what a user checks before a long run."""
        parts = []
        for split, ds in (("train", self.train_set), ("val", self.val_set)):
            anns = sum(len(ds.coco.imgToAnns.get(i, ())) for i in ds.ids)
            empty = sum(not ds.coco.imgToAnns.get(i) for i in ds.ids)
            parts.append(f"{split} {len(ds)} images, {anns} annotations ({empty} images without any)")
        if self.unannotated:  # (left out before: the train part counts the images it trains on)
            parts[0] += f", {self.unannotated} more left out without a usable box (detect.drop_unannotated)"
        kind = "segmentation" if self.segmentation else "detection"
        return (f"{kind}: {'; '.join(parts)}; {len(self.train_set.classes)} categories; model.input "
                f"{self.recipe.model.input}, {self.steps_per_epoch} steps an epoch of batch {self.recipe.data.batch_size}")

    def _progress(self, total: int, desc: str):
        return progress_bar(self.rank, self.recipe.train.progress, total, desc)

    def _note_excluded(self) -> None:
        """``skipped.txt`` (epoch 0: before training) and a log line for the images left out by the full
        decode before training, as the classification trainer writes them; a fresh run starts it empty."""
        path = self.out / "skipped.txt"
        if not self.records:
            path.unlink(missing_ok=True)
            append_skipped(path, 0, self.excluded)
        if self.excluded:
            self.log(f"left out {len(self.excluded)} unusable images before training (names and reasons in {path})")

    def _batches(self, loader, step: TD.DetectionStep, epoch: int, cost: dict[str, float], split: str = "train"):
        """``(images, targets)`` on the device; adds the input pipeline's host CPU to ``cost["cpu"]``
        and the images to ``cost["n"]``: the workers', the host's geometry draw and the device step's
        (on a GPU its kernel launches; on a CPU-only run the whole step, which runs on the host) — and
        in the rgb arm the model's own resize, timed in its forward, so both arms count the same ops."""
        seen = self._worker_cpu.setdefault(id(loader), {})  # persistent workers: CPU so far, per worker
        it = iter(loader)
        while True:
            t0 = time.thread_time()
            try:
                payload, (wid, cpu) = next(it)
            except StopIteration:
                break
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
            cost["n"] += len(images)
            for key, value in zip(("boxes", "dropped", "past"), np.sum(drops, axis=0) if drops else (0, 0, 0)):
                cost[key] = cost.get(key, 0) + int(value)
            clock = self.model_resize_cpu[0]
            yield images, targets
            cost["cpu"] += self.model_resize_cpu[0] - clock  # (rgb arm) the model resized this batch in its forward

    # ------------------------------------------------------------------ train / eval
    def train_epoch(self, epoch: int) -> dict[str, float]:
        r = self.recipe
        self.net.train()
        self.sampler.set_epoch(epoch)
        cost = {"cpu": 0.0, "n": 0.0}
        sums: dict[str, torch.Tensor] = {}  # per loss, on the device: read once, at the end of the epoch
        steps, t0 = 0, time.perf_counter()
        warm = r.optim.warmup_epochs * self.steps_per_epoch
        bar = self._progress(self.steps_per_epoch, f"epoch {epoch + 1}/{r.optim.epochs}")
        for images, targets in self._batches(self.train_loader, self.step, epoch, cost):
            if steps >= self.steps_per_epoch:
                break
            step = epoch * self.steps_per_epoch + steps
            lr = lr_at(step, lr=self.lr, total=self.total_steps, warmup=warm, min_lr=r.optim.min_lr,
                       warmup_lr=r.optim.warmup_lr)
            for g in self.opt.param_groups:
                g["lr"] = lr * g.get("lr_scale", 1.0)
            with autocast(self.device, self.amp_dtype):
                if self.segmentation:
                    losses = self._segmentation_losses(images, targets)
                else:
                    keys = ("boxes", "labels", "masks") if r.detect.masks else ("boxes", "labels")
                    losses = self.net(self._model_input(images),
                                      [{k: v for k, v in t.items() if k in keys} for t in targets])
                losses = {k: v.float() for k, v in losses.items()}
                loss = sum(losses.values())
            self.opt.zero_grad(set_to_none=True)
            self.scaler.scale(loss).backward()
            if r.optim.grad_clip:
                self.scaler.unscale_(self.opt)
                nn.utils.clip_grad_norm_(self.model.parameters(), r.optim.grad_clip)
            self.scaler.step(self.opt)
            self.scaler.update()
            self.updates += 1
            if self.ema is not None:
                self.ema.step(self.model, self.updates)
            if not self.room_checked:  # the checkpoint's size is known after a step: a full disk stops the run now
                self.room_checked = True
                if self.rank == 0 and r.train.checkpoint:
                    check_room(self.out / "last.pt", state_bytes([self.model.state_dict(), self.opt.state_dict(),
                                                                  self.ema.state() if self.ema else None]))
            for k, v in (*losses.items(), ("loss", loss)):
                sums[k] = sums[k] + v.detach().double() if k in sums else v.detach().double()
            steps += 1
            if bar is not None:
                bar.update(1)
                if steps % r.train.log_every == 0:
                    with log_point(self.device):  # the bar's postfix: once every log_every steps, when shown
                        bar.set_postfix_str(f"loss {float(sums['loss']) / steps:.3f}")
        if bar is not None:
            bar.close()
        with log_point(self.device):  # the epoch's record
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            seconds = time.perf_counter() - t0
            values = torch.stack(list(sums.values())).tolist() if sums else []
        record = {f"train_{k}": v / max(steps, 1) for k, v in zip(sums, values)}
        record.update(lr=lr if steps else 0.0, train_seconds=seconds, images_per_s=cost["n"] / max(seconds, 1e-9),
                      data_cpu_us_per_sample=cost["cpu"] / max(cost["n"], 1) * 1e6,
                      # this rank's boxes: in the epoch's files, dropped by the geometry and sanitizing, and of
                      # those the ones that ran past their image in the file (bad annotations, dropped each step)
                      train_boxes=cost.get("boxes", 0), train_boxes_dropped=cost.get("dropped", 0),
                      train_boxes_dropped_past_image=cost.get("past", 0))
        return record

    def _model_input(self, images: list[torch.Tensor]) -> list[torch.Tensor]:
        """What the detector takes: the step's images, or (input dct) their coefficient mosaics."""
        return TD.coefficient_mosaics(images) if self.dct else images

    @torch.no_grad()
    def evaluate(self, model: nn.Module | None = None, suffix: str = "") -> dict[str, float]:
        """The val split's metrics for ``model`` (default: the trained model; the EMA's with suffix
        ``_ema``: keys ``bbox_AP_ema`` …, predictions in ``predictions_val_ema.json``)."""
        self.net.eval()
        model = self.model if model is None else model
        if self.segmentation:
            return {f"{k}{suffix}": v for k, v in self._evaluate_segmentation(model).items()}
        ds, results, cost = self.val_set, [], {"cpu": 0.0, "n": 0.0}
        iou_types = ("bbox", "segm") if self.recipe.detect.masks else ("bbox",)
        for images, targets in self._batches(self.val_loader, self.eval_step, 0, cost, "val"):
            outputs = model(self._model_input(images))
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

    def fit(self) -> dict[str, Any]:
        r = self.recipe
        record: dict[str, Any] = {}
        for epoch in range(self.start_epoch, r.optim.epochs):
            t0 = time.perf_counter()
            record = {"epoch": epoch + 1, **self.train_epoch(epoch)}
            if (epoch + 1) % r.train.eval_every == 0 or epoch + 1 == r.optim.epochs:
                record.update(self.evaluate())
                if self.ema is not None:  # (the EMA pools at the scales the model inferred from its first batch)
                    set_roi_pool_scales(self.ema.module, roi_pool_scales(self.model))
                    record.update(self.evaluate(self.ema.module, "_ema"))
            mine, self.skipped = self.skipped, []
            record.update(epoch_skipped(mine, epoch, self.out / "skipped.txt", self.rank))
            record["epoch_seconds"] = time.perf_counter() - t0
            if self.rank == 0:
                self.records.append(record)
                (self.out / "metrics.json").write_text(json.dumps(self.records, indent=1))
                if r.train.checkpoint:
                    self._save(self.out / "last.pt", epoch)
                ap = f", val bbox AP {record['bbox_AP']:.3f} AP50 {record['bbox_AP50']:.3f}" if "bbox_AP" in record else ""
                ap += f", val mIoU {record['mIoU']:.3f}" if "mIoU" in record else ""
                ap += f" (EMA {record['bbox_AP_ema']:.3f})" if "bbox_AP_ema" in record else ""
                ap += f" (EMA {record['mIoU_ema']:.3f})" if "mIoU_ema" in record else ""
                skip = skip_note(record, self.out / "skipped.txt")
                if record["train_boxes_dropped_past_image"]:
                    skip += (f"; {record['train_boxes_dropped_past_image']} boxes dropped for running past their "
                             "image in the annotations")
                self.log(f"epoch {epoch + 1}/{r.optim.epochs}: loss {record['train_loss']:.3f}{ap} | "
                         f"{record['images_per_s']:.1f} img/s, data CPU {record['data_cpu_us_per_sample']:.0f} µs/sample"
                         f"{skip}")
        return record

    def _save(self, path: Path, epoch: int) -> None:
        with log_point(self.device):  # the checkpoint, once an epoch: the state comes to the host
            write_checkpoint({"model": self.model.state_dict(), "opt": self.opt.state_dict(), "epoch": epoch,
                              "scaler": self.scaler.state_dict(), "records": self.records, "rng": rng_state(),
                              "roi_pool_scales": roi_pool_scales(self.model), "updates": self.updates,
                              "ema": self.ema.state() if self.ema is not None else None,
                              "recipe": self.recipe.to_dict()}, path)  # (atomic; a failed write names the path)

    def _load(self, path: Path) -> None:
        state = read_checkpoint(path, "cpu")
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        if state.get("scaler"):  # fp16's loss scale (a checkpoint from before AMP here has none)
            self.scaler.load_state_dict(state["scaler"])
        if "rng" in state:  # the main process's generators (the detectors' samplers draw from torch's)
            set_rng_state(state["rng"])
        # the RoI poolers' scales, inferred from the stopped run's first batch (not in the state_dict)
        set_roi_pool_scales(self.model, state.get("roi_pool_scales", {}))
        self.updates = int(state.get("updates", 0))
        if self.ema is not None:
            if state.get("ema") is None:
                raise ValueError(f"--resume: {path} has no EMA (train.ema was off when it was written)")
            self.ema.load(state["ema"])
        self.start_epoch = int(state["epoch"]) + 1
        self.records = list(state.get("records", []))
        self.log(f"resumed from {path} at epoch {self.start_epoch + 1}")


def train_detection(recipe: Recipe, *, resume: bool = False) -> dict[str, Any]:
    """Train a detection recipe (one process, or one rank under torchrun); the last epoch's record."""
    trainer = None
    try:
        trainer = DetectionTrainer(recipe, resume=resume)
        record = trainer.fit()
        if dist.is_initialized():
            dist.barrier()
        return record
    finally:
        del trainer
        if dist.is_initialized():
            dist.destroy_process_group()
