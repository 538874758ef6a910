"""Helper for the cache tests, run in a child process (a crash shows as a signal exit code):

- ``build`` / ``read`` under torchrun: build a cache (optionally dying mid-way on one rank, to
  simulate a crash) or read it with the rank split for several epochs with two loader threads,
  and record what each rank saw;
- ``threads``: read a cache with ThreadLoader at 2, 3 and 4 threads, each time from a freshly
  opened (cold) cache for several epochs, and check every batch against a one-thread read."""

from __future__ import annotations

import argparse
import json
import os

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["build", "read", "threads"])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--format", default="sparse")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--die-after", type=int, default=0, help="rank 1 exits hard after encoding this many samples")
    ap.add_argument("--record")
    ap.add_argument("--epochs", type=int, default=1)
    args = ap.parse_args()
    import dctnet.data.cache.build as C
    from dctnet import data as D

    rank = int(os.environ.get("RANK", 0))
    if args.mode == "build":
        if args.die_after and rank == 1:
            real, count = C._encode_sample, [0]

            def dying(coeffs, fmt):
                count[0] += 1
                if count[0] > args.die_after:
                    os._exit(17)  # a crash: no cleanup, files half written
                return real(coeffs, fmt)

            C._encode_sample = dying
        C.build_cache(args.src, args.out, format=args.format, resume=args.resume, progress=False)
        return
    if args.mode == "threads":
        read_with_threads(args.out, args.epochs)
        return
    torch.distributed.init_process_group("gloo")
    ds = D.CacheDataset(args.out, crop=D.RandomResizedCrop(), seed=1)
    sampler = D.EpochSampler(len(ds), seed=1)
    loader = D.ThreadLoader(ds, 8, sampler=sampler, threads=2, pin_memory=False)
    seen, label_sum = [], 0
    for epoch in range(args.epochs):  # the first epoch starts cold: both threads map and read at once
        loader.set_epoch(epoch)
        got = [i for batch in loader for i in batch.index.tolist()]
        if epoch == 0:
            seen = got
            label_sum = int(ds.targets[got].sum())
        assert len(got) == len(seen), (epoch, len(got), len(seen))
    # a "metric" over the distributed set: mean label, reduced from per-rank sums and counts
    mean_label = D.all_reduce_metric(torch.tensor(float(label_sum)), torch.tensor(float(len(seen)))).item()
    gathered = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, seen)
    if rank == 0:
        with open(args.record, "w") as f:
            json.dump({"seen": gathered, "mean_label": mean_label}, f)
    torch.distributed.destroy_process_group()


def read_with_threads(path: str, epochs: int) -> None:
    from dctnet import data as D

    def batches(threads: int, epochs: int) -> list[list[torch.Tensor]]:
        ds = D.CacheDataset(path, crop=D.RandomResizedCrop(), seed=3, verify="none")  # opened afresh: cold
        loader = D.ThreadLoader(ds, 16, threads=threads, pin_memory=False)
        out = []
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            out += [[t.clone() for t in b.tensors()] for b in loader]
        return out

    reference = batches(1, epochs)
    for threads in (2, 3, 4):
        got = batches(threads, epochs)
        assert len(got) == len(reference), threads
        for k, (a, b) in enumerate(zip(reference, got)):
            assert all(torch.equal(x, y) for x, y in zip(a, b)), f"batch {k} differs with {threads} threads"
    # the race was at first use: many cold starts, each reading one epoch
    first = reference[: len(reference) // epochs]
    for trial in range(30):
        got = batches(2 + trial % 3, 1)
        assert all(all(torch.equal(x, y) for x, y in zip(a, b)) for a, b in zip(first, got)), f"cold start {trial}"
    print(f"threads ok: {len(reference)} batches x 3 thread counts, 30 cold starts")


if __name__ == "__main__":
    main()
