"""Cross-validation folds that compose with distributed training.

:func:`kfold` assigns every sample to one of ``k`` folds (stratified by label when asked), seeded,
and persists the assignment as JSON so every fold run — and every rank — uses the same split
without touching the data again. Fold index lists are *global* dataset indices; :class:`SubsetSampler`
shuffles and splits them by rank exactly like :class:`dctnet.data.EpochSampler` does for a whole
dataset, so fold selection and rank split compose. :func:`all_reduce_metric` gathers sums and
counts from all ranks before dividing, so a distributed validation metric equals the one a single
process would compute.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from dctnet.data.loader import EpochSampler

__all__ = ["Folds", "SubsetSampler", "all_reduce_metric", "kfold"]


class Folds:
    """A persisted fold assignment: ``fold_of[i]`` for each sample."""

    def __init__(self, fold_of: Sequence[int], k: int, seed: int, stratified: bool) -> None:
        self.fold_of = np.asarray(fold_of, dtype=np.int64)
        self.k, self.seed, self.stratified = k, seed, stratified

    def val(self, fold: int) -> list[int]:
        """Global indices of fold ``fold`` (the validation part)."""
        self._check(fold)
        return np.flatnonzero(self.fold_of == fold).tolist()

    def train(self, fold: int) -> list[int]:
        """Global indices of every other fold."""
        self._check(fold)
        return np.flatnonzero(self.fold_of != fold).tolist()

    def _check(self, fold: int) -> None:
        if not 0 <= fold < self.k:
            raise ValueError(f"fold must be in 0..{self.k - 1}, got {fold}")

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"k": self.k, "seed": self.seed, "stratified": self.stratified,
                                          "n": int(len(self.fold_of)), "fold_of": self.fold_of.tolist()}))

    @classmethod
    def load(cls, path: str | Path, n: int | None = None) -> "Folds":
        d = json.loads(Path(path).read_text())
        if n is not None and d["n"] != n:
            raise ValueError(f"{path}: folds for {d['n']} samples, the dataset has {n}")
        return cls(d["fold_of"], d["k"], d["seed"], d["stratified"])


def kfold(n: int, k: int, seed: int = 0, *, stratify: Sequence[int] | None = None,
          path: str | Path | None = None) -> Folds:
    """Assign ``n`` samples to ``k`` folds (sizes differ by at most one; with ``stratify`` labels,
    every class is spread over the folds as evenly as possible). With ``path``: load the
    assignment if the file exists (checking ``n``), else create and save it."""
    if path is not None and Path(path).exists():
        folds = Folds.load(path, n)
        if folds.k != k or folds.seed != seed or folds.stratified != (stratify is not None):
            raise ValueError(f"{path} holds k={folds.k}, seed={folds.seed}, stratified={folds.stratified}; "
                             f"asked for k={k}, seed={seed}, stratified={stratify is not None}")
        return folds
    if not 2 <= k <= max(n, 2):
        raise ValueError(f"k must be in 2..{n}, got {k}")
    g = torch.Generator().manual_seed(seed)
    fold_of = np.empty(n, np.int64)
    if stratify is None:
        order = torch.randperm(n, generator=g).numpy()
        fold_of[order] = np.arange(n) % k
    else:
        labels = np.asarray(stratify)
        if len(labels) != n:
            raise ValueError(f"{len(labels)} labels for {n} samples")
        offset = 0  # continue the round-robin across classes so fold sizes stay balanced
        for label in np.unique(labels):
            members = np.flatnonzero(labels == label)
            members = members[torch.randperm(len(members), generator=g).numpy()]
            fold_of[members] = (np.arange(len(members)) + offset) % k
            offset += len(members)
    folds = Folds(fold_of, k, seed, stratify is not None)
    if path is not None:
        folds.save(path)
    return folds


class SubsetSampler(torch.utils.data.Sampler):
    """:class:`dctnet.data.EpochSampler` over a list of global indices (e.g. one fold): seeded
    per-epoch shuffle, split by rank, yields ``(epoch, index)``."""

    def __init__(self, indices: Sequence[int], *, shuffle: bool = True, seed: int = 0, rank: int | None = None,
                 world_size: int | None = None, drop_last: bool = False) -> None:
        self.indices = list(indices)
        self._inner = EpochSampler(len(self.indices), shuffle=shuffle, seed=seed, rank=rank, world_size=world_size,
                                   drop_last=drop_last)

    def set_epoch(self, epoch: int) -> None:
        self._inner.set_epoch(epoch)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter([(e, self.indices[i]) for e, i in self._inner])

    def __len__(self) -> int:
        return len(self._inner)


def all_reduce_metric(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """``sum(total) / sum(count)`` over all ranks (plain division without torch.distributed).

    Sum numerators and denominators first: averaging per-rank means would weight ranks with
    fewer samples (an uneven split) too heavily."""
    total, count = total.detach().clone().double(), count.detach().clone().double()
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(total)
        dist.all_reduce(count)
    return total / count
