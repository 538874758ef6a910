"""How well a stream is shuffled: distinct classes per batch and batch class entropy, against a
uniform shuffle of the same classes.

A folder dataset's sampler draws a uniform permutation: a batch of ``b`` from ``C`` balanced
classes holds ``C·(1 − (1 − 1/C)^b)`` distinct classes on average (ImageNet, b = 256: 226). A stream
(tar shards, a streamed Hugging Face dataset) is read shard by shard through a buffer; shards written
from an ImageFolder are class-sorted, so its batches can hold a handful of classes — which costs
accuracy and BatchNorm statistics, and nothing warns. :func:`stream_quality` measures the first
batches of an epoch as the loader will assemble them, from labels only (no image is decoded);
``dctnet verify``, ``dctnet bench`` and the start of ``dctnet train`` report it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np

from dctnet.data.tar import iter_labels

__all__ = ["ShuffleQuality", "batch_stats", "labels_of", "loader_batches", "shard_class_counts", "shards_quality",
           "stream_quality", "uniform_stats"]

#: below this fraction of a uniform shuffle's distinct classes per batch, ``dctnet train`` warns
WARN_BELOW = 0.5


@dataclass(frozen=True)
class ShuffleQuality:
    """Mean distinct classes per batch and mean batch class entropy (bits) of a stream's first
    ``batches`` batches, and the same for a uniform shuffle of its classes."""

    batch_size: int
    batches: int
    distinct: float
    entropy: float
    uniform_distinct: float
    uniform_entropy: float

    @property
    def ratio(self) -> float:
        """Distinct classes per batch as a fraction of a uniform shuffle's."""
        return self.distinct / max(self.uniform_distinct, 1e-12)

    @property
    def poor(self) -> bool:
        return self.ratio < WARN_BELOW

    def describe(self) -> str:
        return (f"shuffle quality: {self.distinct:.1f} distinct classes per batch of {self.batch_size} "
                f"({self.ratio:.2f}× a uniform shuffle's {self.uniform_distinct:.1f}), batch class entropy "
                f"{self.entropy:.2f} bits (uniform {self.uniform_entropy:.2f}), first {self.batches} batches")


def batch_stats(labels: Sequence[int] | np.ndarray, batch_size: int) -> tuple[float, float, int]:
    """``(mean distinct classes, mean class entropy in bits, full batches)`` over the consecutive
    full batches of ``labels``."""
    y = np.asarray(labels, dtype=np.int64)
    n = len(y) // batch_size
    if n == 0:
        return 0.0, 0.0, 0
    distinct, entropy = [], []
    for b in range(n):
        _, counts = np.unique(y[b * batch_size:(b + 1) * batch_size], return_counts=True)
        p = counts / batch_size
        distinct.append(len(counts))
        entropy.append(float(-(p * np.log2(p)).sum()))
    return float(np.mean(distinct)), float(np.mean(entropy)), n


def uniform_stats(class_counts: Sequence[int], batch_size: int, batches: int = 20, seed: int = 0) -> tuple[float, float]:
    """Distinct classes and entropy per batch of a uniform shuffle of a dataset with these class
    counts (batches drawn without replacement from one permutation, as a folder's sampler does)."""
    counts = np.asarray(class_counts, dtype=np.int64)
    labels = np.repeat(np.arange(len(counts)), counts)
    rng = np.random.default_rng(seed)
    take = min(len(labels), batches * batch_size)
    d, e, _ = batch_stats(rng.permutation(labels)[:take], batch_size)
    return d, e


def loader_batches(readers: Sequence[Iterable[int]], batch_size: int, mode: str) -> Iterator[list[int]]:
    """Batches of labels as a loader assembles them from per-reader label streams: ``"round-robin"``
    (dctnet's :class:`~dctnet.data.ThreadLoader`: the batch takes the readers' samples in turn) or
    ``"per-reader"`` (a torch DataLoader's workers: each batch is one worker's consecutive samples,
    workers in turn)."""
    its = [iter(r) for r in readers]
    if mode == "round-robin":
        batch: list[int] = []
        while its:
            for it in list(its):
                y = next(it, None)
                if y is None:
                    its.remove(it)
                    continue
                batch.append(y)
                if len(batch) == batch_size:
                    yield batch
                    batch = []
        return
    if mode != "per-reader":
        raise ValueError(f"mode must be 'round-robin' or 'per-reader', got {mode!r}")
    while its:
        for it in list(its):
            batch = list(islice(it, batch_size))
            if len(batch) < batch_size:
                its.remove(it)
                continue
            yield batch


def stream_quality(reader_labels: Callable[[int, int], Iterable[int]], readers: int, batch_size: int,
                   class_counts: Sequence[int] | None = None, num_classes: int | None = None, *,
                   mode: str = "round-robin", batches: int = 20, seed: int = 0) -> ShuffleQuality:
    """The shuffle quality of a stream's first ``batches`` batches: ``reader_labels(me, total)``
    yields reader ``me``'s labels in its order (e.g. from ``TarShardDataset.raw_split`` with
    :func:`dctnet.data.tar.iter_labels`), ``readers`` readers combined as ``mode``
    (:func:`loader_batches`). The uniform baseline takes ``class_counts`` when known, else
    ``num_classes`` balanced classes (the classes seen in the batches when neither is given)."""
    streams = [islice(reader_labels(me, readers), batches * batch_size) for me in range(readers)]
    got = list(islice(loader_batches(streams, batch_size, mode), batches))
    flat = [y for b in got for y in b]
    d, e, n = batch_stats(flat, batch_size)
    if class_counts is None:
        c = num_classes or len(set(flat)) or 1
        # balanced classes, many samples each: the distinct-class expectation has a closed form
        class_counts = [max(1, 4 * batch_size)] * c
        ud = c * (1 - (1 - 1 / c) ** batch_size)
        _, ue = uniform_stats(class_counts, batch_size, max(n, 1), seed)
    else:
        ud, ue = uniform_stats(class_counts, batch_size, max(n, 1), seed)
    return ShuffleQuality(batch_size, n, d, e, ud, ue)


def labels_of(samples: Iterable[dict[str, Any]], label_key: str = "cls") -> Iterator[int]:
    """Labels of raw shard samples (``{"cls": b"7", ...}``); samples without one count as -1."""
    for s in samples:
        v = s.get(label_key)
        yield int(v) if v is not None else -1


def shard_class_counts(dataset: Any) -> list[int]:
    """Samples per class over all of a :class:`~dctnet.data.TarShardDataset`'s shards, read from
    their label members only (the uniform baseline needs every class, not the ones a badly mixed
    stream happens to show first)."""
    key = dataset.decode.label_key
    counts: dict[int, int] = {}
    for path in dataset.shards:
        for y in labels_of(iter_labels(path, key), key):
            counts[y] = counts.get(y, 0) + 1
    return [counts[c] for c in sorted(counts) if c >= 0]


def shards_quality(dataset: Any, batch_size: int, readers: int, *, mode: str = "round-robin",
                   num_classes: int | None = None, class_counts: Sequence[int] | None = None,
                   batches: int = 20) -> ShuffleQuality:
    """:func:`stream_quality` of a :class:`dctnet.data.TarShardDataset` as its loader will read it
    (its epoch, seed, interleave and buffer; ``readers`` readers over all ranks), from the shards'
    label members only (:func:`dctnet.data.tar.iter_labels`)."""
    key = dataset.decode.label_key

    def labels(path: str, start: int, stop: int):  # samples start..stop of a shard: a reader's run may cut it
        return iter_labels(path, key, start, stop)

    return stream_quality(lambda me, total: labels_of(dataset.raw_split(me, total, labels), key),
                          readers, batch_size, class_counts=class_counts, num_classes=num_classes, mode=mode,
                          batches=batches,
                          seed=dataset.seed)
