"""Helper for tests/test_cache.py, run under torchrun: build a cache (optionally dying mid-way on
one rank, to simulate a crash) or read it with the rank split and record what each rank saw."""

from __future__ import annotations

import argparse
import json
import os

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["build", "read"])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--format", default="sparse")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--die-after", type=int, default=0, help="rank 1 exits hard after encoding this many samples")
    ap.add_argument("--record")
    args = ap.parse_args()
    import dctnet.data.cache as C
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
    torch.distributed.init_process_group("gloo")
    ds = D.CacheDataset(args.out, crop=D.RandomResizedCrop(), seed=1)
    sampler = D.EpochSampler(len(ds), seed=1)
    seen, label_sum = [], 0
    for batch in D.ThreadLoader(ds, 8, sampler=sampler, threads=2, pin_memory=False):
        seen += batch.index.tolist()
        label_sum += int(batch.labels.sum())
    # a "metric" over the distributed set: mean label, reduced from per-rank sums and counts
    mean_label = D.all_reduce_metric(torch.tensor(float(label_sum)), torch.tensor(float(len(seen)))).item()
    gathered = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, seen)
    if rank == 0:
        with open(args.record, "w") as f:
            json.dump({"seen": gathered, "mean_label": mean_label}, f)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
