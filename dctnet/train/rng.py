"""The random state a run draws from, so that ``--resume`` continues exactly.

The device arms draw every crop and augmentation from ``(seed, epoch, index)``. The ``rgb`` arm runs
torchvision's and timm's own transforms, which draw from the process-wide generators (torch's,
Python's ``random``, numpy's) of whichever process runs them: a DataLoader worker, seeded from a
base seed each time workers start, or the main process with ``workers: 0``. Resumed, those streams
start elsewhere, so the same epoch draws other crops. :class:`SeededDraws` gives each sample its own
generators' state, seeded from ``(seed, epoch, index)`` and restored afterwards, so a sample's draws
depend on nothing else: not the worker count, not the worker a sample lands on, not a restart.
(The draws follow the same laws; they are torchvision's and timm's own calls.)

What the main process draws (batch mixing, dropout, drop-path) comes from its generators, whose
state the checkpoint carries: :func:`rng_state` and :func:`set_rng_state`.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

__all__ = ["EpochKeys", "SeededDraws", "rng_state", "sample_seed", "seed_all", "seeded_draws", "set_rng_state"]


def seed_all(seed: int) -> None:
    """Python's ``random``, numpy's global generator and torch's seeded from ``seed``: a run's start, and
    its initial weights (the same on every rank, whatever the data pipeline drew before)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """A 63-bit seed for one sample's draws: numpy's ``SeedSequence`` of ``(seed, epoch, index)``
    (well mixed: neighbouring indices or epochs get unrelated streams)."""
    words = np.random.SeedSequence([int(seed) % 2**63, int(epoch) % 2**63, int(index) % 2**63]).generate_state(2)
    return (int(words[0]) << 31 ^ int(words[1])) & (2**63 - 1)


@contextlib.contextmanager
def seeded_draws(seed: int, epoch: int, index: int) -> Iterator[None]:
    """Inside: torch's CPU generator, Python's ``random`` and numpy's global generator seeded for
    the sample ``(seed, epoch, index)``; after: each back where it was (so the main process's own
    streams are untouched when it runs the transforms itself)."""
    s = sample_seed(seed, epoch, index)
    saved = torch.get_rng_state(), random.getstate(), np.random.get_state()
    torch.manual_seed(s)
    random.seed(s)
    np.random.seed(s % 2**32)
    try:
        yield
    finally:
        torch.set_rng_state(saved[0])
        random.setstate(saved[1])
        np.random.set_state(saved[2])


class SeededDraws(torch.utils.data.Dataset):
    """``dataset[index]`` for the key ``(epoch, index)`` (:class:`EpochKeys`; a plain index is epoch
    0) under :func:`seeded_draws`: a transform's random draws are a function of the sample."""

    def __init__(self, dataset: Any, seed: int) -> None:
        self.dataset, self.seed = dataset, int(seed)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: int | tuple[int, int]) -> Any:
        epoch, index = key if isinstance(key, tuple) else (0, key)
        with seeded_draws(self.seed, epoch, index):
            return self.dataset[index]

    def __getattr__(self, name: str) -> Any:  # the wrapped dataset's own attributes (classes, samples, …)
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)


class EpochKeys(torch.utils.data.Sampler):
    """``sampler``'s indices as ``(epoch, index)`` keys for :class:`SeededDraws`; ``set_epoch`` is passed on."""

    def __init__(self, sampler: torch.utils.data.Sampler) -> None:
        self.sampler, self.epoch = sampler, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __iter__(self):
        return ((self.epoch, int(i)) for i in self.sampler)

    def __len__(self) -> int:
        return len(self.sampler)


def rng_state() -> dict[str, Any]:
    """The main process's generators for a checkpoint: torch's CPU (and CUDA, when initialised),
    Python's ``random``, numpy's global — as tensors, ints and lists (``torch.load(weights_only=True)``
    reads them)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate(),
                             "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss),
                                       float(gauss)]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back what :func:`rng_state` saved (a key it lacks leaves that generator as it is)."""
    if "torch" in state:
        torch.set_rng_state(state["torch"].cpu())
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in state:
        kind, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
