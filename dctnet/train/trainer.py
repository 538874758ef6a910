"""The training loop: one process per device, DDP under ``torchrun``.

Per step: wait for the next host batch (timed: the *data wait*, the device step excluded), device
transforms, forward and backward under autocast, optimizer and per-step schedule (linear warm-up,
cosine to zero). Running sums stay on the device and sample counts on the host: nothing in the
loop waits for the device except the documented log points (:func:`dctnet.readback.log_point`:
the progress bar every ``log_every`` steps when it is shown, the end of an epoch, the evaluation's
result). After each epoch: evaluation (sums
all-reduced across ranks, so the validation set counts once in total), one JSON line in
``metrics.jsonl``, and an atomic ``last.pt`` with everything ``--resume`` needs. Data order,
crops and augmentation draws are functions of ``(seed, epoch, index/rank)``, so a resumed run
continues exactly where it stopped.
"""

from __future__ import annotations

import contextlib
import json
import random
import tarfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from dctnet.data.shards import TarShardDataset
from dctnet.data.shuffle_quality import shards_quality
from dctnet.train.recipe_model import build_recipe_model
from dctnet.train.checkpoint_file import check_room, read_checkpoint, state_bytes, write_checkpoint
from dctnet.train.ema import ModelEma, recipe_ema
from dctnet.train.optim import lr_at, optimizer_groups
from dctnet.train.pipeline import Pipeline, build_pipeline
from dctnet.train.plot import plot_metrics
from dctnet.train.precision import amp_dtype, autocast, use_channels_last
from dctnet.train.process import start_process
from dctnet.train.records import append_skipped, epoch_skipped, progress_bar, skip_note
from dctnet.readback import log_point
from dctnet.train.recipe import Recipe
from dctnet.train.rng import rng_state, set_rng_state

__all__ = ["Trainer", "train"]


class Trainer:
    """Builds everything a recipe names and trains it: ``Trainer(recipe).fit()``."""

    def __init__(self, recipe: Recipe, *, resume: bool = False, log=None) -> None:
        self.recipe = r = recipe
        proc = start_process(r, log)
        self.rank, self.world_size, self.device, self.log, self.out = (proc.rank, proc.world_size, proc.device,
                                                                        proc.log, proc.out)
        self._seed(r.train.seed)
        self.pipe: Pipeline = build_pipeline(r, self.device, self.rank, self.world_size)
        self._seed(r.train.seed)  # the same initial weights on every rank, whatever the pipeline drew
        if self.rank == 0:
            self._check_stream_mixing()
        model = build_recipe_model(r, self.pipe.num_classes).to(self.device)
        #: convolutional models on CUDA in channels_last, cudnn picking its fastest kernels (train.channels_last)
        self.channels_last = use_channels_last(r, model, self.device)
        if self.channels_last:
            model.to(memory_format=torch.channels_last)
            torch.backends.cudnn.benchmark = True  # one input shape per batch size: each tried once
        self.model = model
        global_batch = r.data.batch_size * self.world_size
        self.lr = r.optim.lr * global_batch / r.optim.lr_batch
        groups = optimizer_groups(model, r, self.lr)
        # fused kernels on CUDA: one launch for every parameter, and under fp16 the grad scaler hands them
        # its found-inf flag instead of reading it on the host each step (GradScaler._maybe_opt_step)
        fused = self.device.type == "cuda"
        if r.optim.optimizer == "sgd":
            self.opt = torch.optim.SGD(groups, lr=self.lr, momentum=r.optim.momentum, nesterov=True, fused=fused)
        else:
            self.opt = torch.optim.AdamW(groups, lr=self.lr, fused=fused)
        self.steps_per_epoch = len(self.pipe.train_loader)
        if r.train.max_steps:
            self.steps_per_epoch = min(self.steps_per_epoch, r.train.max_steps)
        if self.world_size > 1:  # every rank takes as many steps (ranks' shares can differ by a sample)
            steps = torch.tensor([self.steps_per_epoch], device=self.device)
            dist.all_reduce(steps, op=dist.ReduceOp.MIN)
            self.steps_per_epoch = int(steps.item())
        # drop_last keeps whole batches and every rank takes the smallest step count: each rank leaves
        # out at most one batch of its share per epoch; say how many samples that is
        held = int(self._all_reduce(torch.tensor([getattr(self.pipe.train_loader, "samples", 0)], device=self.device)).item())
        used = self.steps_per_epoch * r.data.batch_size * self.world_size
        if self.rank == 0 and not r.train.max_steps and held > used:
            self.log(f"each epoch trains {used} of its {held} training samples: drop_last keeps whole batches of "
                     f"{r.data.batch_size}, {self.steps_per_epoch} on each of {self.world_size} ranks, and leaves out "
                     f"{held - used} (at most one batch per rank, others each epoch)")
        total = max(1, r.optim.epochs * self.steps_per_epoch)
        warm = r.optim.warmup_epochs * self.steps_per_epoch

        def factor(step: int) -> float:  # each group's lr (stem multipliers included) times this
            return lr_at(step, lr=self.lr, total=total, warmup=warm, min_lr=r.optim.min_lr,
                         warmup_lr=r.optim.warmup_lr) / self.lr

        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, factor)
        self.amp_dtype = amp_dtype(r, self.device)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.amp_dtype is torch.float16)
        # timm's Mixup puts optim.label_smoothing into its targets: the loss must not smooth them again
        smoothing = 0.0 if self.pipe.targets_smoothed else r.optim.label_smoothing
        self.criterion = nn.CrossEntropyLoss(label_smoothing=smoothing)
        #: model EMA (train.ema), averaged after optimizer updates, evaluated beside the model
        self.ema: ModelEma | None = recipe_ema(model, r, self.world_size)
        self.updates = 0  # optimizer updates so far (the EMA's clock)
        self.train_model: nn.Module = model
        if self.world_size > 1:
            self.train_model = nn.parallel.DistributedDataParallel(
                model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        if r.train.compile:
            self.train_model = torch.compile(self.train_model)
        self.start_epoch = 0
        self.history: list[dict[str, Any]] = []
        self.room_checked = False  # free space for the checkpoint (after the first step)
        if resume:
            self._load(self.out / "last.pt")
        if self.rank == 0:  # written once everything above succeeded: a refused resume keeps the old one
            r.dump(self.out / "recipe.yaml")
            (self.out / "pipeline.txt").write_text(self.pipe.describe())
            # a fresh run starts its records afresh; a resumed one keeps those of the epochs it kept
            self._rewrite_records()
            self._note_checked_files()

    # ------------------------------------------------------------------ helpers
    def _check_stream_mixing(self) -> None:
        """A streamed training set (tar shards) whose first batches hold far fewer classes than a
        uniform shuffle's (class-sorted shards): say so before a long run, naming the fix. Reads
        the label members of the first batches only."""
        loader = self.pipe.train_loader
        ds = getattr(loader, "dataset", None) or getattr(getattr(loader, "loader", None), "dataset", None)
        if not isinstance(ds, TarShardDataset) or self.recipe.model.num_classes < 2:
            return
        try:
            q = shards_quality(ds, self.recipe.data.batch_size, max(1, self.recipe.data.threads),
                               num_classes=self.recipe.model.num_classes, batches=8)
        except (OSError, ValueError, tarfile.TarError) as exc:  # the reader itself names bad shards when it meets them
            self.log(f"warning: could not measure the training stream's shuffle quality: {exc}")
            return
        if q.poor:
            self.log(f"warning: the training stream is far from shuffled — {q.describe()}. Rewrite the shards in "
                     "one global random order (`dctnet shards write SRC DIR`) or raise data.interleave "
                     f"(now {ds.interleave}).")

    def _rewrite_records(self) -> None:
        """``metrics.jsonl`` holds exactly this run's epochs so far (the resumed history, or
        nothing); ``skipped.txt`` starts empty on a fresh run."""
        with open(self.out / "metrics.jsonl", "w") as f:
            for record in self.history:
                f.write(json.dumps(record) + "\n")
        if not self.history:
            (self.out / "skipped.txt").unlink(missing_ok=True)

    def _note_checked_files(self) -> None:
        """Files the pipeline's one full decode left out (``skipped.txt``, epoch 0: before
        training) or found with harmless libjpeg warnings (``warnings.txt``)."""
        pipe = self.pipe
        if not self.history:
            append_skipped(self.out / "skipped.txt", 0, pipe.excluded)
        if pipe.excluded:
            self.log(f"left out {len(pipe.excluded)} unusable files before training "
                     f"(names and reasons in {self.out / 'skipped.txt'})")
        if pipe.warned:
            (self.out / "warnings.txt").write_text("".join(f"{s}\t{n}\t{w}\n" for s, n, w in pipe.warned))
            self.log(f"{len(pipe.warned)} files read with libjpeg warnings that lost nothing, used "
                     f"(names in {self.out / 'warnings.txt'})")

    def _skipped(self, epoch: int) -> dict[str, int]:
        """This epoch's skipped samples, summed over ranks, and their names appended to
        ``skipped.txt`` (rank 0 writes every rank's)."""
        return epoch_skipped(self.pipe.take_skipped(), epoch, self.out / "skipped.txt", self.rank)

    @staticmethod
    def _seed(seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    def _memory_format(self, x: Any) -> Any:
        """A pixel batch in the model's memory format (channels_last: :attr:`channels_last`)."""
        if self.channels_last and isinstance(x, torch.Tensor) and x.dim() == 4:
            return x.contiguous(memory_format=torch.channels_last)
        return x

    def _autocast(self):
        return autocast(self.device, self.amp_dtype)

    def _all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            dist.all_reduce(t)
        return t

    def _progress(self, total: int, desc: str):
        return progress_bar(self.rank, self.recipe.train.progress, total, desc)

    # ------------------------------------------------------------------ epochs
    def train_epoch(self, epoch: int) -> dict[str, float]:
        r = self.recipe
        self.pipe.set_epoch(epoch)
        self.train_model.train()
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss·n, correct (the count: seen, host)
        bar = self._progress(self.steps_per_epoch, f"epoch {epoch + 1}/{r.optim.epochs}")
        cpu0, wait0 = self.pipe.data_cpu_seconds(), self.pipe.data_wait_seconds()
        t0 = time.perf_counter()
        steps = 0
        seen = 0
        for x, target, labels in self.pipe.batches(train=True):
            # a compiled model's first two steps compile (and under CUDA graphs record): one-time waits
            compiling = log_point(self.device) if r.train.compile and self.updates < 2 else contextlib.nullcontext()
            with compiling:
                out, loss = self._train_step(x, target)
            self.sched.step()
            self.updates += 1
            if not self.room_checked:  # the checkpoint's size is known after a step: a full disk stops the run now
                self._check_room()
            if self.ema is not None:
                self.ema.step(self.model, self.updates)
            n = labels.shape[0]
            # device scalars only: a count made on the device from the host (torch.tensor(n, device=...))
            # would be a blocking copy from pageable memory every step
            sums += torch.stack([loss.detach().double() * n, (out.argmax(1) == labels.long()).sum().double()])
            steps += 1
            seen += n
            if bar is not None:
                bar.update(1)
                if steps % r.train.log_every == 0:
                    el = time.perf_counter() - t0
                    with log_point(self.device):  # the bar's postfix: once every log_every steps
                        s = sums.tolist()
                    wait = self.pipe.data_wait_seconds() - wait0
                    bar.set_postfix_str(f"loss {s[0] / seen:.3f} acc {s[1] / seen:.3f} "
                                        f"{seen * self.world_size / el:.0f} img/s wait {wait / el:.0%}")
            if steps >= self.steps_per_epoch:
                break
        with log_point(self.device):  # the epoch's record: its time includes the queued work
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            elapsed = time.perf_counter() - t0
            if bar is not None:
                bar.close()
            cpu, wait = self.pipe.data_cpu_seconds() - cpu0, self.pipe.data_wait_seconds() - wait0
            # one all-reduce of the device sums and the host figures (NCCL reduces device tensors)
            host = torch.tensor([float(seen), wait, elapsed, cpu], dtype=torch.float64)
            every = self._all_reduce(torch.cat([sums, host.to(self.device)])).tolist()
        s, stats = every[:3], every[3:] + every[2:3]  # (loss·n, correct, n), (wait, elapsed, cpu, n)
        return {"train_loss": s[0] / max(s[2], 1), "train_acc": s[1] / max(s[2], 1),
                "images_per_s": stats[3] / max(stats[1] / self.world_size, 1e-9),
                "data_wait": stats[0] / max(stats[1], 1e-9), "data_cpu_us_per_sample": stats[2] / max(stats[3], 1) * 1e6,
                "lr": self.opt.param_groups[0]["lr"], "train_seconds": stats[1] / self.world_size}

    def _train_step(self, x: Any, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward under autocast, backward, clipping, the optimizer and the schedule: ``(logits, loss)``."""
        r = self.recipe
        with self._autocast():
            out = self.train_model(self._memory_format(x))
            loss = self.criterion(out.float(), target)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if r.optim.grad_clip > 0:
            self.scaler.unscale_(self.opt)
            nn.utils.clip_grad_norm_(self.model.parameters(), r.optim.grad_clip)
        self.scaler.step(self.opt)
        self.scaler.update()
        return out, loss

    @torch.no_grad()
    def evaluate(self, model: nn.Module | None = None, suffix: str = "") -> dict[str, float]:
        """Top-1/top-5 and loss of ``model`` (default: the model) on the val split, keys with ``suffix``."""
        model = self.model if model is None else model
        model.eval()
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss·n, top1, top5 (the count: host)
        count = 0
        for x, target, labels in self.pipe.batches(train=False):
            with self._autocast():
                out = model(self._memory_format(x)).float()
            k = min(5, out.shape[1])
            top = out.topk(k, dim=1).indices
            hit = top == target[:, None]
            sums += torch.stack([nn.functional.cross_entropy(out, target, reduction="sum").double(),
                                 hit[:, 0].sum().double(), hit.any(1).sum().double()])
            count += target.shape[0]
        with log_point(self.device):  # the evaluation's result
            s = self._all_reduce(torch.cat([sums, torch.tensor([float(count)], dtype=torch.float64).to(self.device)])).tolist()
        n = max(s[3], 1)
        out = {"val_loss": s[0] / n, "val_top1": s[1] / n, "val_top5": s[2] / n, "val_images": int(s[3])}
        return {f"{k}{suffix}": v for k, v in out.items() if not (suffix and k == "val_images")}

    def fit(self) -> dict[str, Any]:
        """Train from ``start_epoch`` to the recipe's epochs; returns the last epoch's record."""
        r = self.recipe
        record: dict[str, Any] = self.history[-1] if self.history else {}
        for epoch in range(self.start_epoch, r.optim.epochs):
            t = time.perf_counter()
            record = {"epoch": epoch + 1, **self.train_epoch(epoch)}
            if (epoch + 1) % r.train.eval_every == 0 or epoch + 1 == r.optim.epochs:
                record.update(self.evaluate())
                if self.ema is not None:
                    record.update(self.evaluate(self.ema.module, "_ema"))
            record.update(self._skipped(epoch))
            record["epoch_seconds"] = time.perf_counter() - t
            self.history.append(record)
            if self.rank == 0:
                with open(self.out / "metrics.jsonl", "a") as f:
                    f.write(json.dumps(record) + "\n")
                val = f" val top-1 {record['val_top1']:.3f}" if "val_top1" in record else ""
                skip = skip_note(record, self.out / "skipped.txt")
                self.log(f"epoch {epoch + 1}/{r.optim.epochs}: loss {record['train_loss']:.3f} "
                         f"train acc {record['train_acc']:.3f}{val} | {record['images_per_s']:.0f} img/s, "
                         f"data wait {record['data_wait']:.0%}, data CPU {record['data_cpu_us_per_sample']:.0f} µs/sample"
                         f"{skip}")
                if r.train.checkpoint:
                    self._save(self.out / "last.pt", epoch)
        if self.rank == 0 and self.history:
            plot_metrics(self.out / "metrics.jsonl", self.out / "plot.png", title=r.name)
        return record

    # ------------------------------------------------------------------ checkpoints
    def _save(self, path: Path, epoch: int) -> None:
        with log_point(self.device):  # the checkpoint, once an epoch: the state comes to the host
            self._write_checkpoint(path, epoch)

    def _check_room(self) -> None:
        """Free space for ``last.pt`` (rank 0, with checkpoints on), checked once: after a run's
        first step, when the optimizer's state exists (tensor sizes only: no device read)."""
        self.room_checked = True
        if self.rank == 0 and self.recipe.train.checkpoint:
            check_room(self.out / "last.pt", state_bytes([self.model.state_dict(), self.opt.state_dict(),
                                                          self.ema.state() if self.ema is not None else None]))

    def _write_checkpoint(self, path: Path, epoch: int) -> None:
        norm = self.pipe.normalize
        state = {"model": self.model.state_dict(), "optimizer": self.opt.state_dict(), "scheduler": self.sched.state_dict(),
                 "scaler": self.scaler.state_dict(), "epoch": epoch, "history": self.history,
                 "recipe": self.recipe.to_dict(), "classes": self.pipe.classes,
                 "normalize": {"mean": norm.mean.cpu(), "std": norm.std.cpu()} if norm is not None else None,
                 "rng": rng_state(), "updates": self.updates,
                 "ema": self.ema.state() if self.ema is not None else None}
        write_checkpoint(state, path)  # atomic; a failed write leaves no partial file and names the path

    def _load(self, path: Path) -> None:
        if not path.is_file():
            if self.rank == 0:
                self.log(f"--resume: no checkpoint at {path}; starting from scratch")
            return
        state = read_checkpoint(path, self.device)
        try:
            self.model.load_state_dict(state["model"])
            self.opt.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0]
            raise ValueError(f"--resume: {path} was written by a different model or optimizer than this recipe's "
                             f"({first}); use another --out or the recipe it came from") from None
        self.sched.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.updates = int(state.get("updates", 0))
        if self.ema is not None:
            if state.get("ema") is None:
                raise ValueError(f"--resume: {path} has no EMA (train.ema was off when it was written)")
            self.ema.load(state["ema"])
        if state.get("normalize") is not None and self.pipe.normalize is not None:
            dev = self.pipe.normalize.mean.device  # the statistics live on the device (no per-step copies)
            self.pipe.normalize.mean = state["normalize"]["mean"].to(dev)
            self.pipe.normalize.std = state["normalize"]["std"].to(dev)
        # the main process's generators (batch mixing, dropout, drop-path): where the stopped run left them
        set_rng_state(state["rng"] if "rng" in state else {"torch": state["torch_rng"]})  # (older: torch's only)
        self.history = list(state.get("history", []))
        self.start_epoch = int(state["epoch"]) + 1
        if self.rank == 0:
            self.log(f"resumed from {path}: epoch {self.start_epoch} done")


def train(recipe: Recipe, *, resume: bool = False) -> dict[str, Any]:
    """Train ``recipe`` (one process, or one rank under torchrun); returns the last epoch's record."""
    if recipe.detection:
        from dctnet.train.detection import train_detection  # (torchvision's detectors, pycocotools: detection only)

        return train_detection(recipe, resume=resume)
    trainer = None
    try:
        trainer = Trainer(recipe, resume=resume)
        record = trainer.fit()
        if dist.is_initialized():
            dist.barrier()  # no rank tears the group down while another still talks to it
        return record
    finally:
        # loader threads and process-group threads end here, not at interpreter exit (a thread
        # still alive then is what aborts with "terminate called without an active exception")
        del trainer
        if dist.is_initialized():
            dist.destroy_process_group()
