#!/usr/bin/env python3
"""Shuffle quality of a streamed ImageNet-sized dataset, labels only: 1,000 classes × 1,281 images
in shards of 1,000, written class by class (what an ImageFolder gives) or by ``dctnet shards write``
(one global random order) — read by dctnet's own stream (``TarShardDataset.raw_split``: the seeded
shard order, ``interleave`` open shards per reader, a 1,000-sample buffer), batches of 256 assembled
as a loader does (one reader; 8 DataLoader workers, a batch each; 8 ThreadLoader threads,
round-robin). Prints distinct classes per batch and batch class entropy against a uniform shuffle
(mean over the first 10 batches of epoch 0).

    python benchmarks/shuffle_quality.py [--interleave 1 8 32 64]
"""

from __future__ import annotations

import argparse

import numpy as np

from dctnet.data.shards import TarShardDataset, global_order
from dctnet.data.shuffle_quality import labels_of, stream_quality

C, PER, SHARD, BATCH = 1000, 1281, 1000, 256
LOADERS = ((1, "round-robin", "1 reader"), (8, "per-reader", "8 DataLoader workers"),
           (8, "round-robin", "8 ThreadLoader threads"))


def stream(labels: np.ndarray, interleave: int):
    shards = {f"s{i:05d}": labels[i * SHARD:(i + 1) * SHARD] for i in range(-(-len(labels) // SHARD))}
    ds = TarShardDataset.__new__(TarShardDataset)  # the real order logic over in-memory shards
    ds.shards, ds.seed, ds.shuffle, ds.buffer, ds.epoch, ds.interleave = sorted(shards), 0, True, 1000, 0, interleave

    ds.sizes, ds._offsets = [len(shards[name]) for name in ds.shards], [None] * len(shards)

    def read(name, start, stop):  # samples start..stop of a shard, as a reader entering it there sees them
        return ({"__key__": f"{name}/{j}", "cls": str(int(shards[name][j])).encode()} for j in range(start, stop))
    return lambda me, total: labels_of(ds.raw_split(me, total, read))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interleave", type=int, nargs="+", default=[1, 8, 32, 64])
    args = ap.parse_args()
    sorted_labels = np.repeat(np.arange(C), PER)
    written = sorted_labels[global_order(len(sorted_labels), 0)]
    print("| shards | interleave | " + " | ".join(name for _, _, name in LOADERS) + " |")
    print("|---|---:|" + "---:|" * len(LOADERS))
    uniform = None
    for label, labels, ks in (("class-sorted", sorted_labels, args.interleave), ("dctnet shards write", written, [1, 32])):
        for k in ks:
            cells = []
            for readers, mode, _ in LOADERS:
                q = stream_quality(stream(labels, k), readers, BATCH, num_classes=C, mode=mode, batches=10)
                uniform = q
                cells.append(f"{q.distinct:.0f} ({q.entropy:.2f} bits)")
            print(f"| {label} | {k} | " + " | ".join(cells) + " |")
    print(f"\nuniform shuffle: {uniform.uniform_distinct:.0f} distinct classes per batch of {BATCH} "
          f"({uniform.uniform_entropy:.2f} bits); cells: distinct classes (batch class entropy)")


if __name__ == "__main__":
    main()
