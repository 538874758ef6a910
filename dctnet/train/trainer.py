"""The one training loop, for every task: one process per device, DDP under ``torchrun``.

A task (:class:`~dctnet.train.task.Task`: classification, detection, segmentation) supplies its data,
model, loss and metrics; the :class:`Trainer` does the rest, the same for each. Per step: the task's
next batch on the device (host waits and CPU timed by the task's pipeline), its loss under autocast,
backward through the loss scaler, clipping (``optim.grad_clip``), the optimizer over
:func:`~dctnet.train.optim.optimizer_groups` (no weight decay on norms and biases, the DCT stem at
``lr · optim.stem_lr_mult``) and the per-step schedule (linear warm-up, cosine to ``optim.min_lr``),
then the EMA (``train.ema``). Running sums stay on the device and sample counts on the host: nothing
in the loop waits for the device except the documented log points (:func:`dctnet.readback.log_point`:
the progress bar every ``log_every`` steps when it is shown, the end of an epoch, the evaluation's
result). After each epoch: the task's evaluation of the model (and of the EMA), one JSON line in
``metrics.jsonl``, and an atomic ``last.pt`` with everything ``--resume`` needs. Data order, crops
and augmentation draws are functions of ``(seed, epoch, index/rank)``, and the checkpoint holds the
main process's generators, so a resumed run continues exactly where it stopped.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dctnet.readback import log_point
from dctnet.train.checkpoint_file import check_room, read_checkpoint, state_bytes, write_checkpoint
from dctnet.train.ema import ModelEma, recipe_ema
from dctnet.train.optim import lr_at, optimizer_groups
from dctnet.train.precision import amp_dtype, autocast
from dctnet.train.process import start_process
from dctnet.train.recipe import Recipe
from dctnet.train.records import epoch_skipped, progress_bar, skip_note
from dctnet.train.rng import rng_state, seed_all, set_rng_state
from dctnet.train.tasks import build_task

__all__ = ["Trainer", "train"]


class Trainer:
    """Builds everything a recipe names and trains it, whatever its task: ``Trainer(recipe).fit()``.

    ``task``: the recipe's :class:`~dctnet.train.task.Task`; ``model``: its model; ``net``: what the
    step runs (the model, under DDP and ``torch.compile`` when the recipe asks); ``ema``: the model
    EMA or None; ``history``: the epochs' records so far."""

    def __init__(self, recipe: Recipe, *, resume: bool = False, log=None) -> None:
        self.recipe = r = recipe
        proc = start_process(r, log)
        self.rank, self.world_size, self.device, self.log, self.out = (proc.rank, proc.world_size, proc.device,
                                                                        proc.log, proc.out)
        seed_all(r.train.seed)
        self.task = task = build_task(r, proc)
        self.model = model = task.model.to(self.device)
        self.channels_last = task.channels_last
        if self.channels_last:
            model.to(memory_format=torch.channels_last)
            if task.fixed_shapes:
                torch.backends.cudnn.benchmark = True  # one input shape per batch size: each tried once
        self._build_optimizer(r)
        self.steps_per_epoch = self._steps_per_epoch(r)
        total = max(1, r.optim.epochs * self.steps_per_epoch)
        warm = r.optim.warmup_epochs * self.steps_per_epoch

        def factor(step: int) -> float:  # each group's lr (stem multipliers included) times this
            return lr_at(step, lr=self.lr, total=total, warmup=warm, min_lr=r.optim.min_lr,
                         warmup_lr=r.optim.warmup_lr) / self.lr

        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, factor)
        #: autocast's dtype (train.amp: bf16 on CUDA by default; None: off), loss scaling for fp16
        self.amp_dtype = amp_dtype(r, self.device)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.amp_dtype is torch.float16)
        #: model EMA (train.ema), averaged after optimizer updates, evaluated beside the model
        self.ema: ModelEma | None = recipe_ema(model, r, self.world_size)
        self.updates = 0  # optimizer updates so far (the EMA's clock)
        self.net: nn.Module = model
        if self.world_size > 1:
            self.net = nn.parallel.DistributedDataParallel(
                model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        if r.train.compile:  # (classification only: the recipe check refuses it elsewhere)
            self.net = torch.compile(self.net)
        self.start_epoch = 0
        self.history: list[dict[str, Any]] = []
        self.room_checked = False  # free space for the checkpoint (after the first step)
        if resume:
            self._load(self.out / "last.pt")
        if self.rank == 0:  # written once everything above succeeded: a refused resume keeps the old one
            r.dump(self.out / "recipe.yaml")
            (self.out / "pipeline.txt").write_text(task.describe() + "\n")
            self._rewrite_records()
            task.start_notes(not self.history, self.steps_per_epoch)

    def _build_optimizer(self, r: Recipe) -> None:
        """SGD (Nesterov momentum unless the task trains with plain momentum) or AdamW over the recipe's
        parameter groups, at ``optim.lr`` scaled by the global batch over ``optim.lr_batch``."""
        self.lr = r.optim.lr * r.data.batch_size * self.world_size / r.optim.lr_batch
        groups = optimizer_groups(self.model, r, self.lr)
        # fused kernels on CUDA: one launch for every parameter, and under fp16 the grad scaler hands them
        # its found-inf flag instead of reading it on the host each step (GradScaler._maybe_opt_step)
        fused = self.device.type == "cuda"
        if r.optim.optimizer == "sgd":
            self.opt = torch.optim.SGD(groups, lr=self.lr, momentum=r.optim.momentum, nesterov=self.task.nesterov,
                                       fused=fused)
        else:
            self.opt = torch.optim.AdamW(groups, lr=self.lr, fused=fused)

    def _steps_per_epoch(self, r: Recipe) -> int:
        """Full batches per epoch, the same on every rank (ranks' shares can differ by a sample), at most
        ``train.max_steps``; says what ``drop_last`` leaves out."""
        steps = self.task.steps
        if r.train.max_steps:
            steps = min(steps, r.train.max_steps)
        if self.world_size > 1:
            least = torch.tensor([steps], device=self.device)
            dist.all_reduce(least, op=dist.ReduceOp.MIN)
            steps = int(least.item())
        # drop_last keeps whole batches and every rank takes the smallest step count: each rank leaves
        # out at most one batch of its share per epoch; say how many samples that is
        held = int(self._all_reduce(torch.tensor([self.task.held], device=self.device)).item())
        used = steps * r.data.batch_size * self.world_size
        if self.rank == 0 and not r.train.max_steps and held > used:
            self.log(f"each epoch trains {used} of its {held} training samples: drop_last keeps whole batches of "
                     f"{r.data.batch_size}, {steps} on each of {self.world_size} ranks, and leaves out "
                     f"{held - used} (at most one batch per rank, others each epoch)")
        return steps

    # ------------------------------------------------------------------ helpers
    def _rewrite_records(self) -> None:
        """``metrics.jsonl`` holds exactly this run's epochs so far (the resumed history, or
        nothing); ``skipped.txt`` starts empty on a fresh run."""
        with open(self.out / "metrics.jsonl", "w") as f:
            for record in self.history:
                f.write(json.dumps(record) + "\n")
        if not self.history:
            (self.out / "skipped.txt").unlink(missing_ok=True)

    def _all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            dist.all_reduce(t)
        return t

    def _progress(self, total: int, desc: str):
        return progress_bar(self.rank, self.recipe.train.progress, total, desc)

    # ------------------------------------------------------------------ epochs
    def train_epoch(self, epoch: int) -> dict[str, float]:
        """One epoch of ``steps_per_epoch`` steps: the record's training figures (the task's, then
        ``images_per_s``, ``data_wait``, ``data_cpu_us_per_sample``, ``lr``, ``train_seconds``)."""
        r, task = self.recipe, self.task
        task.set_epoch(epoch)
        self.net.train()
        sums: dict[str, torch.Tensor] = {}  # the task's figures, summed on the device: read at the epoch's end
        bar = self._progress(self.steps_per_epoch, f"epoch {epoch + 1}/{r.optim.epochs}")
        before = task.counters()
        t0 = time.perf_counter()
        steps = seen = 0
        for batch in task.train_batches(epoch):
            # a compiled model's first two steps compile (and under CUDA graphs record): one-time waits
            compiling = log_point(self.device) if r.train.compile and self.updates < 2 else contextlib.nullcontext()
            with compiling:
                stats, n = self._train_step(batch)
            self.sched.step()
            self.updates += 1
            if not self.room_checked:  # the checkpoint's size is known after a step: a full disk stops the run now
                self._check_room()
            if self.ema is not None:
                self.ema.step(self.model, self.updates)
            for k, v in stats.items():
                sums[k] = sums[k] + v if k in sums else v
            steps += 1
            seen += n
            if bar is not None:
                bar.update(1)
                if steps % r.train.log_every == 0:
                    el = time.perf_counter() - t0
                    with log_point(self.device):  # the bar's postfix: once every log_every steps
                        running = dict(zip(sums, torch.stack(list(sums.values())).tolist()))
                    wait = task.counters()["wait"] - before["wait"]
                    bar.set_postfix_str(f"{task.progress(running, steps, seen)} "
                                        f"{seen * self.world_size / el:.0f} img/s wait {wait / el:.0%}")
            if steps >= self.steps_per_epoch:
                break
        return self._epoch_record(sums, steps, seen, before, t0, bar)

    def _epoch_record(self, sums: dict[str, torch.Tensor], steps: int, seen: int, before: dict[str, float],
                      t0: float, bar: Any) -> dict[str, float]:
        with log_point(self.device):  # the epoch's record: its time includes the queued work
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            elapsed = time.perf_counter() - t0
            if bar is not None:
                bar.close()
            after = self.task.counters()
            counts = {k: after[k] - before.get(k, 0.0) for k in after}
            # one all-reduce of the device sums and the host figures (NCCL reduces device tensors)
            host = torch.tensor([float(seen), elapsed, *counts.values()], dtype=torch.float64)
            device_sums = torch.stack(list(sums.values())) if sums else torch.zeros(0, dtype=torch.float64,
                                                                                   device=self.device)
            every = self._all_reduce(torch.cat([device_sums, host.to(self.device)])).tolist()
        k = len(sums)
        summed = dict(zip(sums, every[:k]))
        seen_all, elapsed_all = every[k], every[k + 1]
        counts = dict(zip(counts, every[k + 2:]))
        seconds = elapsed_all / self.world_size
        return {**self.task.train_record(summed, steps, int(seen_all), counts),
                "images_per_s": seen_all / max(seconds, 1e-9), "data_wait": counts["wait"] / max(elapsed_all, 1e-9),
                "data_cpu_us_per_sample": counts["cpu"] / max(seen_all, 1) * 1e6,
                "lr": self.opt.param_groups[0]["lr"], "train_seconds": seconds}

    def _train_step(self, batch: Any) -> tuple[dict[str, torch.Tensor], int]:
        """The task's loss under autocast, backward, clipping, the optimizer: the batch's ``(sums, n)``."""
        r = self.recipe
        with autocast(self.device, self.amp_dtype):
            loss, stats, n = self.task.loss(self.net, batch)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if r.optim.grad_clip > 0:
            self.scaler.unscale_(self.opt)
            nn.utils.clip_grad_norm_(self.model.parameters(), r.optim.grad_clip)
        self.scaler.step(self.opt)
        self.scaler.update()
        return stats, n

    def evaluate(self, model: nn.Module | None = None, suffix: str = "") -> dict[str, float]:
        """The task's metrics of ``model`` (default: the model) on the val split, keys with ``suffix``."""
        self.net.eval()
        return self.task.evaluate(self.model if model is None else model, suffix)

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
            record.update(epoch_skipped(self.task.take_skipped(), epoch, self.out / "skipped.txt", self.rank))
            record["epoch_seconds"] = time.perf_counter() - t
            self.history.append(record)
            if self.rank == 0:
                with open(self.out / "metrics.jsonl", "a") as f:
                    f.write(json.dumps(record) + "\n")
                skip = skip_note(record, self.out / "skipped.txt")
                self.log(f"epoch {epoch + 1}/{r.optim.epochs}: {self.task.epoch_line(record)}{skip}")
                if r.train.checkpoint:
                    self._save(self.out / "last.pt", epoch)
        if self.rank == 0 and self.history:
            self.task.plot(self.out / "metrics.jsonl", self.out / "plot.png", r.name)
        return record

    # ------------------------------------------------------------------ checkpoints
    def _save(self, path: Path, epoch: int) -> None:
        with log_point(self.device):  # the checkpoint, once an epoch: the state comes to the host
            state = {"model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
                     "scheduler": self.sched.state_dict(), "scaler": self.scaler.state_dict(), "epoch": epoch,
                     "history": self.history, "recipe": self.recipe.to_dict(), "rng": rng_state(),
                     "updates": self.updates, "ema": self.ema.state() if self.ema is not None else None,
                     **self.task.state()}
            write_checkpoint(state, path)  # atomic; a failed write leaves no partial file and names the path

    def _check_room(self) -> None:
        """Free space for ``last.pt`` (rank 0, with checkpoints on), checked once: after a run's
        first step, when the optimizer's state exists (tensor sizes only: no device read)."""
        self.room_checked = True
        if self.rank == 0 and self.recipe.train.checkpoint:
            check_room(self.out / "last.pt", state_bytes([self.model.state_dict(), self.opt.state_dict(),
                                                          self.ema.state() if self.ema is not None else None]))

    def _load(self, path: Path) -> None:
        if not path.is_file():
            if self.rank == 0:
                self.log(f"--resume: no checkpoint at {path}; starting from scratch")
            return
        state = read_checkpoint(path, self.device)
        if "opt" in state and "optimizer" not in state:  # the former detection trainer's keys
            raise ValueError(f"--resume: {path} was written by the detection trainer of an earlier dctnet, whose "
                             "checkpoints this one does not resume; start again with another --out")
        try:
            self.model.load_state_dict(state["model"])
            self.opt.load_state_dict(state["optimizer"])
            self.sched.load_state_dict(state["scheduler"])
        except (RuntimeError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0]
            raise ValueError(f"--resume: {path} was written by a different model or optimizer than this recipe's "
                             f"({first}); use another --out or the recipe it came from") from None
        self.scaler.load_state_dict(state["scaler"])
        self.updates = int(state.get("updates", 0))
        if self.ema is not None:
            if state.get("ema") is None:
                raise ValueError(f"--resume: {path} has no EMA (train.ema was off when it was written)")
            self.ema.load(state["ema"])
        try:
            self.task.load_state(state)
        except (TypeError, ValueError, KeyError) as exc:
            raise ValueError(f"--resume: {path}: {exc}") from None
        # the main process's generators (batch mixing, dropout, drop-path, the detectors' samplers)
        set_rng_state(state["rng"] if "rng" in state else {"torch": state["torch_rng"]})  # (older: torch's only)
        self.history = list(state.get("history", []))
        self.start_epoch = int(state["epoch"]) + 1
        if self.rank == 0:
            self.log(f"resumed from {path}: epoch {self.start_epoch} done")


def train(recipe: Recipe, *, resume: bool = False) -> dict[str, Any]:
    """Train ``recipe`` (one process, or one rank under torchrun); returns the last epoch's record."""
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
