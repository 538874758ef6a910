"""The classification task: image folders, tar shards, coefficient caches and Hugging Face data
(:func:`~dctnet.train.pipeline.build_pipeline`: loaders and the device step), a timm or torchvision
classifier (:func:`~dctnet.train.recipe_model.build_recipe_model`), cross-entropy (smoothed by
``optim.label_smoothing`` unless timm's Mixup already folded it into the targets), top-1/top-5."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dctnet.data.shards import TarShardDataset
from dctnet.data.shuffle_quality import shards_quality
from dctnet.readback import log_point
from dctnet.train.pipeline import Pipeline, build_pipeline
from dctnet.train.plot import plot_metrics
from dctnet.train.precision import amp_dtype, autocast, use_channels_last
from dctnet.train.process import RunProcess
from dctnet.train.recipe import Recipe
from dctnet.train.recipe_model import build_recipe_model
from dctnet.train.records import append_skipped
from dctnet.train.rng import seed_all
from dctnet.train.task import Task

__all__ = ["ClassificationTask"]


class ClassificationTask(Task):
    """A classifier over the recipe's pipeline: ``pipe`` (:class:`~dctnet.train.pipeline.Pipeline`),
    ``model``, ``criterion``."""

    def __init__(self, recipe: Recipe, process: RunProcess) -> None:
        super().__init__(recipe, process)
        r = recipe
        self.pipe: Pipeline = build_pipeline(r, self.device, self.rank, self.world_size)
        seed_all(r.train.seed)  # the same initial weights on every rank, whatever the pipeline drew
        self.model = build_recipe_model(r, self.pipe.num_classes)
        #: convolutional models on CUDA in channels_last, cudnn picking its fastest kernels (train.channels_last)
        self.channels_last = use_channels_last(r, self.model, self.device)
        self.steps = len(self.pipe.train_loader)
        self.held = int(getattr(self.pipe.train_loader, "samples", 0))
        # timm's Mixup puts optim.label_smoothing into its targets: the loss must not smooth them again
        smoothing = 0.0 if self.pipe.targets_smoothed else r.optim.label_smoothing
        self.criterion = nn.CrossEntropyLoss(label_smoothing=smoothing)
        self.amp_dtype = amp_dtype(r, self.device)

    def describe(self) -> str:
        return self.pipe.describe()

    def start_notes(self, fresh: bool, steps_per_epoch: int) -> None:
        self._check_stream_mixing()
        pipe = self.pipe
        if fresh:
            append_skipped(self.out / "skipped.txt", 0, pipe.excluded)
        if pipe.excluded:
            self.log(f"left out {len(pipe.excluded)} unusable files before training "
                     f"(names and reasons in {self.out / 'skipped.txt'})")
        if pipe.warned:
            (self.out / "warnings.txt").write_text("".join(f"{s}\t{n}\t{w}\n" for s, n, w in pipe.warned))
            self.log(f"{len(pipe.warned)} files read with libjpeg warnings that lost nothing, used "
                     f"(names in {self.out / 'warnings.txt'})")

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

    # ------------------------------------------------------------------ training
    def set_epoch(self, epoch: int) -> None:
        self.pipe.set_epoch(epoch)

    def train_batches(self, epoch: int) -> Iterator[Any]:
        return self.pipe.batches(train=True)

    def _memory_format(self, x: Any) -> Any:
        """A pixel batch in the model's memory format (channels_last: :attr:`channels_last`)."""
        if self.channels_last and isinstance(x, torch.Tensor) and x.dim() == 4:
            return x.contiguous(memory_format=torch.channels_last)
        return x

    def loss(self, net: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
        x, target, labels = batch
        out = net(self._memory_format(x))
        loss = self.criterion(out.float(), target)
        n = labels.shape[0]
        # device scalars only: a count made on the device from the host (torch.tensor(n, device=...))
        # would be a blocking copy from pageable memory every step
        return loss, {"loss": loss.detach().double() * n, "correct": (out.argmax(1) == labels.long()).sum().double()}, n

    def counters(self) -> dict[str, float]:
        return {"cpu": self.pipe.data_cpu_seconds(), "wait": self.pipe.data_wait_seconds()}

    def progress(self, sums: dict[str, float], steps: int, seen: int) -> str:
        return f"loss {sums['loss'] / max(seen, 1):.3f} acc {sums['correct'] / max(seen, 1):.3f}"

    def train_record(self, sums: dict[str, float], steps: int, seen: int,
                     counts: dict[str, float]) -> dict[str, float]:
        return {"train_loss": sums.get("loss", 0.0) / max(seen, 1), "train_acc": sums.get("correct", 0.0) / max(seen, 1)}

    # ------------------------------------------------------------------ evaluation and records
    @torch.no_grad()
    def evaluate(self, model: nn.Module, suffix: str = "") -> dict[str, float]:
        """Top-1/top-5 and loss of ``model`` on the val split (sums all-reduced across ranks, so the
        validation set counts once in total), keys with ``suffix``."""
        model.eval()
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss·n, top1, top5 (the count: host)
        count = 0
        for x, target, labels in self.pipe.batches(train=False):
            with autocast(self.device, self.amp_dtype):
                out = model(self._memory_format(x)).float()
            k = min(5, out.shape[1])
            top = out.topk(k, dim=1).indices
            hit = top == target[:, None]
            sums += torch.stack([nn.functional.cross_entropy(out, target, reduction="sum").double(),
                                 hit[:, 0].sum().double(), hit.any(1).sum().double()])
            count += target.shape[0]
        with log_point(self.device):  # the evaluation's result
            s = torch.cat([sums, torch.tensor([float(count)], dtype=torch.float64).to(self.device)])
            if self.world_size > 1:
                dist.all_reduce(s)
            s = s.tolist()
        n = max(s[3], 1)
        out = {"val_loss": s[0] / n, "val_top1": s[1] / n, "val_top5": s[2] / n, "val_images": int(s[3])}
        return {f"{k}{suffix}": v for k, v in out.items() if not (suffix and k == "val_images")}

    def take_skipped(self) -> list[tuple[str, str, str]]:
        return self.pipe.take_skipped()

    def epoch_line(self, record: dict[str, Any]) -> str:
        val = f" val top-1 {record['val_top1']:.3f}" if "val_top1" in record else ""
        return (f"loss {record['train_loss']:.3f} train acc {record['train_acc']:.3f}{val} | "
                f"{record['images_per_s']:.0f} img/s, data wait {record['data_wait']:.0%}, "
                f"data CPU {record['data_cpu_us_per_sample']:.0f} µs/sample")

    def plot(self, metrics: Path, out: Path, title: str) -> None:
        plot_metrics(metrics, out, title=title)

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict[str, Any]:
        norm = self.pipe.normalize
        return {"classes": self.pipe.classes,
                "normalize": {"mean": norm.mean.cpu(), "std": norm.std.cpu()} if norm is not None else None}

    def load_state(self, state: dict[str, Any]) -> None:
        norm = self.pipe.normalize
        if state.get("normalize") is not None and norm is not None:
            dev = norm.mean.device  # the statistics live on the device (no per-step copies)
            norm.mean = state["normalize"]["mean"].to(dev)
            norm.std = state["normalize"]["std"].to(dev)
