"""What a task supplies to the one :class:`~dctnet.train.trainer.Trainer`.

The trainer owns what every task shares: the process (device, rank, DDP), seeding, the model's
placement (channels_last), the optimizer over :func:`~dctnet.train.optim.optimizer_groups` (no weight
decay on norms and biases, a DCT stem at ``lr · optim.stem_lr_mult``), the per-step schedule, AMP and
the loss scaler, gradient clipping, the model EMA, ``torch.compile``, the progress bar, the epoch's
record in ``metrics.jsonl``, the skipped samples, checkpoints and exact resume.

A task supplies its data, its model, its loss and its metrics (:class:`Task`): ``classification``
(:class:`~dctnet.train.classification.ClassificationTask`), ``detection``
(:class:`~dctnet.train.detection.DetectionTask`) and ``segmentation``
(:class:`~dctnet.train.segmentation.SegmentationTask`). Which recipe fields act in which task is
declared once, in :mod:`dctnet.train.recipe_tasks`, and the recipe check refuses the others.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dctnet.train.process import RunProcess
from dctnet.train.recipe import Recipe

__all__ = ["Task"]


class Task:
    """One task's half of a run. Built with the recipe and the placed process; its ``__init__`` builds
    the data and ``model`` (on the CPU or the device: the trainer moves it to ``device``).

    Attributes the trainer reads: ``model``; ``channels_last`` (the model and its pixel batches in
    channels_last); ``fixed_shapes`` (one input shape per batch size, so cudnn may tune each once);
    ``steps`` (full training batches in an epoch on this rank); ``held`` (training samples this rank
    holds per epoch, for the note on what ``drop_last`` leaves out; 0: no note); ``nesterov`` (the
    momentum of ``optim.optimizer: sgd``)."""

    channels_last: bool = False
    fixed_shapes: bool = True
    held: int = 0
    #: SGD with Nesterov momentum (timm's and the classification recipes'); False: plain momentum, as
    #: torchvision's detection and segmentation references train
    nesterov: bool = True

    def __init__(self, recipe: Recipe, process: RunProcess) -> None:
        self.recipe = recipe
        self.rank, self.world_size, self.device, self.log, self.out = (process.rank, process.world_size,
                                                                        process.device, process.log, process.out)
        self.model: nn.Module
        self.steps: int = 0

    # ------------------------------------------------------------------ before training
    def describe(self) -> str:
        """``pipeline.txt``: the data and the device step, as a user checks them."""
        raise NotImplementedError

    def start_notes(self, fresh: bool, steps_per_epoch: int) -> None:
        """Rank 0, once the run is set up: what the user should know before a long run (files left out
        before training, appended to ``skipped.txt`` when ``fresh``; warnings; a summary)."""

    # ------------------------------------------------------------------ training
    def set_epoch(self, epoch: int) -> None:
        """The epoch's order and draws (samplers, loaders)."""
        raise NotImplementedError

    def train_batches(self, epoch: int) -> Iterator[Any]:
        """The epoch's training batches, on the device."""
        raise NotImplementedError

    def loss(self, net: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
        """``(loss, sums, n)`` for one batch, run under autocast: the loss to backpropagate; the batch's
        figures to sum over the epoch (detached float64 device scalars: read once, at the epoch's end);
        its sample count (a host int)."""
        raise NotImplementedError

    def counters(self) -> dict[str, float]:
        """The input pipeline's host figures so far, summed over the run (the trainer takes each epoch's
        difference and sums it over ranks): ``cpu`` (seconds of host CPU), ``wait`` (seconds the loop
        waited for data), and any task-specific counts."""
        return {"cpu": 0.0, "wait": 0.0}

    def progress(self, sums: dict[str, float], steps: int, seen: int) -> str:
        """The progress bar's postfix from the running sums."""
        return f"loss {sums['loss'] / max(steps, 1):.3f}"

    def train_record(self, sums: dict[str, float], steps: int, seen: int,
                     counts: dict[str, float]) -> dict[str, float]:
        """The epoch's task figures from the sums over steps and ranks (``steps``: this rank's steps;
        ``seen``: samples over ranks) and the epoch's ``counters()`` over ranks."""
        raise NotImplementedError

    # ------------------------------------------------------------------ evaluation and records
    def evaluate(self, model: nn.Module, suffix: str = "") -> dict[str, float]:
        """The val split's metrics for ``model``, keys with ``suffix`` (``_ema`` for the EMA)."""
        raise NotImplementedError

    def take_skipped(self) -> list[tuple[str, str, str]]:
        """This rank's ``(split, name, reason)`` of the samples skipped since the last call."""
        return []

    def epoch_line(self, record: dict[str, Any]) -> str:
        """The epoch's log line after ``epoch i/n: `` (the trainer appends the skipped note)."""
        raise NotImplementedError

    def plot(self, metrics: Path, out: Path, title: str) -> None:
        """The end-of-run figure from ``metrics.jsonl`` (none by default)."""

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict[str, Any]:
        """What the task adds to ``last.pt`` (what its model or data keep outside their state_dicts)."""
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state` from a checkpoint."""
