#!/usr/bin/env python3
"""Cache benchmark: CPU per sample delivered to a collated batch, cache size, and 5-fold reading.

One run on Imagenette train (from $DCTNET_DATA or ../shared/data/imagenette): a subset of
``--images`` images (symlinked into .bench-data/, caches built there). Rows:

- from JPEG: read coefficients + crop window + collate (the ImageFolder loader);
- dense cache: windows copied from the memory-mapped int16 planes into the zero-padded batch
  (one C call per layout group);
- dense cache, device padding (``device_expand=True``): the same windows packed without padding;
  the device pads them in ``expand_packed`` (host CPU only);
- sparse cache, host expansion: windows expanded from the compressed records in C;
- sparse cache, device expansion: the host only concatenates compressed records
  (host CPU only; the expansion runs on the device in ``expand_sparse``);
- each cache row again with checksums off (``checksums=False``): the rows above check each
  record's checksum as they read it (the default: hashed in the C gather, fused with the copy),
  these do not.

Then the checksum's read cost: the paired difference of each cache row with and without checksums
(median of the per-round differences) as a share of the unchecked row (the target: ≤ 5% of a
sparse read), and, apart, the CPU per sample of hashing every record alone — in C, as the gathers
do but with no copy after it (``record_checksums``, a batch of 64 records a call), and in Python
(``Cache._corrupt``, xxhash: ``dctnet verify`` and the per-sample path) — over the whole cache, one
batch at a time, median of 7 passes.

CPU = this process's user+system time per sample, single loader thread, page cache warm; the
rows run interleaved (one epoch each per round, 7 rounds after a warm-up) and each ratio is the
median of the per-round ratios. Then the wall time of reading the whole subset for 5 folds ×
1 epoch (2 threads) from JPEG vs each cache.

    python benchmarks/cache.py [--images 2560]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import resource  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from dctnet import data as D  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DCTNET_DATA", ROOT.parent / "shared" / "data" / "imagenette"))
WORK = ROOT / ".bench-data" / "cache"


def cpu() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    return s.ru_utime + s.ru_stime


def per_sample(runs: dict[str, object], n: int, rounds: int = 7
               ) -> tuple[dict[str, float], dict[str, float], dict[str, list[float]]]:
    """CPU µs per sample for each row, and each row's cost ratio to the first row.

    The rows are interleaved: every round runs one epoch of each, so a ratio compares epochs
    measured moments apart under the same machine state (this VM's speed drifts by ±10% over
    minutes). Returns the median µs per row, the median of the per-round ratios, and every
    round's µs per row."""
    for run in runs.values():
        run()  # warm-up: page cache, buffer pool
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            c0 = cpu()
            count = run()
            assert count == n, (count, n)
            times[name].append((cpu() - c0) / count * 1e6)
    base = times[next(iter(runs))]
    medians = {name: statistics.median(t) for name, t in times.items()}
    ratios = {name: statistics.median(b / x for b, x in zip(base, t)) for name, t in times.items()}
    return medians, ratios, times


def checksum_cost(ds, batch: int, rounds: int = 7, in_c: bool = True) -> float:
    """CPU µs per sample of hashing every record and comparing its checksum, ``batch`` records per
    call as a read does (median of ``rounds`` passes over the cache): in C (``record_checksums``,
    what the gathers compute) or in Python (``Cache._corrupt``)."""
    from dctnet.data.cache.read import record_checksums
    from dctnet.data.plan import GATHER_ITEM

    cache = ds.cache
    n = len(cache)
    times = []
    for _ in range(rounds + 1):  # the first pass warms the page cache
        c0 = cpu()
        for lo in range(0, n, batch):
            idx = np.arange(lo, min(lo + batch, n), dtype=np.int64)
            rec = np.asarray(cache.index[idx])
            if in_c:
                items = np.zeros(len(idx), GATHER_ITEM)
                items["part"], items["offset"], items["nbytes"], items["table"] = rec["part"], rec["offset"], \
                    rec["nbytes"], idx
                assert np.array_equal(record_checksums(cache._parts, cache.tables, items), rec["checksum"])
            else:
                assert not len(cache._corrupt(idx, rec))
        times.append((cpu() - c0) / n * 1e6)
    return statistics.median(times[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=2560)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--set", help="a set of benchmarks/layout_sets.py (e.g. 4:4:4, mix) instead of the photos as stored")
    args = ap.parse_args()
    torch.set_num_threads(1)
    train = DATA / "train"
    if not train.is_dir():
        sys.exit(f"Imagenette not found at {DATA} (set DCTNET_DATA)")
    src = WORK / f"src-{args.images}"
    if args.set:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from layout_sets import build

        src = build(args.set, args.images)
        WORK.mkdir(parents=True, exist_ok=True)
    if not src.exists():
        full = D.ImageFolderDataset(train)
        step = max(1, len(full) // args.images)
        for path, label in full.samples[::step][: args.images]:
            d = src / full.classes[label]
            d.mkdir(parents=True, exist_ok=True)
            os.symlink(path, d / os.path.basename(path))
    caches = {}
    for fmt in ("dense", "sparse"):
        out = WORK / f"{fmt}-{args.set.replace(':', '') + '-' if args.set else ''}{args.images}"
        if out.exists():
            try:
                D.open_cache(out, source=src, verify="hash")  # touched sources with unchanged content are fine
            except D.CacheError:
                shutil.rmtree(out)
        if not out.exists():
            t0 = time.perf_counter()
            D.build_cache(src, out, format=fmt, workers=2, progress=False)
            print(f"built {fmt} cache in {time.perf_counter() - t0:.1f}s (2 processes)", flush=True)
        caches[fmt] = out
    crop = D.RandomResizedCrop()
    folder = D.ImageFolderDataset(src, crop=crop)
    n = len(folder)
    dense = D.CacheDataset(caches["dense"], crop=crop, verify="hash")
    dense_packed = D.CacheDataset(caches["dense"], crop=crop, verify="hash", device_expand=True)
    sparse = D.CacheDataset(caches["sparse"], crop=crop, verify="hash")

    def loop(ds):
        return lambda: sum(len(b) for b in D.ThreadLoader(ds, args.batch, threads=1, pin_memory=False))

    sparse_device = D.CacheDataset(caches["sparse"], crop=crop, verify="hash", device_expand=True)

    def unchecked(fmt, **kw):
        return D.CacheDataset(caches[fmt], crop=crop, verify="hash", checksums=False, **kw)

    jpeg_row, dense_row, sparse_row = ("from JPEG (decode + crop + collate)", "dense cache (C window copy)",
                                       "sparse cache, host expansion (C)")
    packed_row = "dense cache, device padding (host cost only)"
    device_row = "sparse cache, device expansion (host cost only)"
    off = ", checksums off"
    unchecked_row = sparse_row + off
    rows, ratios, rounds = per_sample({
        jpeg_row: loop(folder), dense_row: loop(dense), dense_row + off: loop(unchecked("dense")),
        packed_row: loop(dense_packed), packed_row + off: loop(unchecked("dense", device_expand=True)),
        sparse_row: loop(sparse), unchecked_row: loop(unchecked("sparse")),
        device_row: loop(sparse_device), device_row + off: loop(unchecked("sparse", device_expand=True))}, n)
    jpeg_bytes = dense.cache.meta["source_bytes"]
    print(f"\n{n} Imagenette train images ({args.set or 'as stored'}), batch {args.batch}, RandomResizedCrop windows, "
          "1 loader thread\n")
    print("| delivered to a collated batch | CPU µs / sample (median) | cheaper than JPEG (median of per-round ratios) |")
    print("|---|---:|---:|")
    for name, us in rows.items():
        print(f"| {name} | {us:.1f} | {ratios[name]:.1f}× |")
    paired = {row: statistics.median(a - b for a, b in zip(rounds[row], rounds[row + off]))
              for row in (dense_row, packed_row, sparse_row, device_row)}
    print("\n| checksum check (XXH3-64 of each record read + its tables row) | µs / sample "
          "| share of the unchecked row |")
    print("|---|---:|---:|")
    for row, us in paired.items():
        print(f"| {row}: checked − unchecked (median of per-round differences) | {us:.2f} | "
              f"{100 * us / rows[row + off]:.1f}% |")
    alone = {(fmt, lang): checksum_cost(ds, args.batch, in_c=lang == "C")
             for fmt, ds in (("dense", dense), ("sparse", sparse)) for lang in ("C", "Python")}
    for (fmt, lang), us in alone.items():
        row = dense_row if fmt == "dense" else sparse_row
        print(f"| the hash alone, {fmt} records, in {lang} ({'record_checksums' if lang == 'C' else 'xxhash'}) "
              f"| {us:.2f} | {100 * us / rows[row + off]:.1f}% of the {fmt} host row |")
    print("\n| storage | MiB | × JPEG bytes |\n|---|---:|---:|")
    print(f"| JPEG files | {jpeg_bytes / 2**20:.1f} | 1.00 |")
    for fmt, ds in (("dense cache", dense), ("sparse cache", sparse)):
        b = ds.cache.meta["data_bytes"]
        print(f"| {fmt} | {b / 2**20:.1f} | {b / jpeg_bytes:.2f} |")
    folds = D.kfold(n, 5, seed=0, stratify=folder.targets)
    print("\n| 5 folds × 1 epoch over the training part (2 threads) | wall s |\n|---|---:|")
    for name, ds in (("from JPEG", folder), ("dense cache", dense), ("sparse cache", sparse)):
        t0 = time.perf_counter()
        for f in range(5):
            sampler = D.SubsetSampler(folds.train(f), seed=f)
            for _ in D.ThreadLoader(ds, args.batch, sampler=sampler, threads=2, pin_memory=False):
                pass
        print(f"| {name} | {time.perf_counter() - t0:.2f} |")
    print(f"\n- dense cache ≥ 8× cheaper than JPEG: {ratios[dense_row]:.1f}× padded on the host, "
          f"{ratios[packed_row]:.1f}× padded on the device; "
          f"sparse host expansion ≥ 3×: {ratios[sparse_row]:.1f}×; "
          f"sparse ≤ 3× JPEG bytes: {sparse.cache.meta['data_bytes'] / jpeg_bytes:.2f}×; "
          f"checksums ≤ 5% of a sparse read: {100 * paired[sparse_row] / rows[unchecked_row]:.1f}% "
          f"(paired; the C hash alone {100 * alone['sparse', 'C'] / rows[unchecked_row]:.1f}%)")


if __name__ == "__main__":
    main()
