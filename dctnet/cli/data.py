"""The data commands of the ``dctnet`` command line: ``cache build|info|verify``, ``verify`` (a
dataset, tar shards' shuffle quality, a cache's checksums), ``stats`` and ``shards write``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import time
from pathlib import Path

from dctnet.cli.common import positive
from dctnet.codec import JpegError

# Each command imports the library it runs inside its function ("# lazy"): torch and the training
# stack take seconds to import, and each command pays only for what it runs.


def cmd_cache(args: argparse.Namespace) -> int:
    from dctnet.data.cache import CacheError, build_cache, open_cache  # lazy
    from dctnet.data.cache.check import compare_with_sources  # lazy
    from dctnet.distributed import placement  # lazy

    try:
        if args.cache_command == "build":
            t0 = time.perf_counter()
            out = build_cache(args.src, args.out, format=args.format, workers=args.workers, resume=args.resume,
                              on_error=args.on_error, progress=not args.quiet, warnings=args.warnings)
            cache = open_cache(out, verify="none")
            n = len(cache)
            dt = time.perf_counter() - t0
            if placement().rank == 0:
                m = cache.meta
                print(f"built {out}: {n} samples in {dt:.1f}s ({n / dt:.0f}/s), {len(m['bad'])} unreadable, "
                      f"{m['data_bytes'] / 2**20:.1f} MiB = {m['data_bytes'] / max(m['source_bytes'], 1):.2f}x the JPEG bytes")
            return 0
        cache = open_cache(args.cache, verify="hash" if args.cache_command == "verify" else "stat")
        if args.cache_command == "info":
            m = cache.meta
            print(json.dumps({k: m[k] for k in ("format", "dctnet", "libjpeg", "root", "num_samples", "source_bytes",
                                                "data_bytes", "parts", "classes")} | {"bad": m["bad"]}, indent=1))
            return 0
        checked, mismatched = compare_with_sources(cache, args.samples, args.seed)
        print(f"verified {checked} of {len(cache)} samples against a fresh decode: "
              f"{checked - len(mismatched)} identical, {len(mismatched)} different")
        for p in mismatched[:10]:
            print(f"  different: {p}")
        return 1 if mismatched else 0
    except (CacheError, OSError, ValueError, JpegError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def cmd_verify(args: argparse.Namespace) -> int:
    from dctnet.data.verify import format_report, verify_dataset  # lazy

    if os.path.isfile(os.path.join(args.src, "meta.json")):  # a coefficient cache
        return verify_cache(args)
    if not os.path.isdir(args.src):  # tar shards (a glob): how mixed their stream's batches are
        return verify_shards(args)
    try:
        report = verify_dataset(args.src, threads=args.threads, warnings=args.warnings)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(format_report(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
        print(f"\nJSON report: {args.json}")
    # files the loaders would refuse: unreadable (incl. lost data), and non-JPEG data under JPEG names
    bad = sum(len(s["unreadable"]) + len(s["not_jpeg_data"]) for s in report["splits"].values())
    return 1 if (bad or report["leakage"]) and args.strict else 0


def verify_cache(args: argparse.Namespace) -> int:
    """``dctnet verify CACHE``: every record against its checksum (the index's is checked when the
    cache opens); exit 1 when any is corrupt. The sources are not read (``dctnet cache verify``
    compares with them)."""
    from dctnet.data.cache import CacheError, open_cache  # lazy
    from dctnet.data.cache.check import check_records  # lazy

    t0 = time.perf_counter()
    try:
        cache = open_cache(args.src, verify="none")
        report = check_records(cache)
    except (CacheError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    n, corrupt, unreadable = report["records"], report["corrupt"], report["unreadable_at_build"]
    print(f"{args.src}: {n} records checked against their checksums ({report['bytes'] / 2**20:.1f} MiB in "
          f"{time.perf_counter() - t0:.1f}s): {n - len(corrupt) - unreadable} good, {len(corrupt)} corrupt, "
          f"{unreadable} unreadable when it was built")
    for c in corrupt[:20]:
        print(f"  corrupt: record {c['record']} ({c['source']}) in {c['where']}")
    if len(corrupt) > 20:
        print(f"  ... and {len(corrupt) - 20} more")
    if corrupt:
        print("  rebuild the cache (dctnet cache build SRC CACHE); until then, data.on_error: skip leaves these "
              "records out of training")
    if args.json:
        Path(args.json).write_text(json.dumps({"cache": str(args.src), **report}, indent=1))
    return 1 if corrupt else 0


def verify_shards(args: argparse.Namespace) -> int:
    from dctnet.data.shards import TarShardDataset  # lazy
    from dctnet.data.shuffle_quality import shard_class_counts, shards_quality  # lazy

    try:
        ds = TarShardDataset(args.src, rank=0, world_size=1, interleave=args.interleave, buffer=args.buffer)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    report = {"shards": len(ds.shards), "interleave": ds.interleave, "batch_size": args.batch_size, "loaders": {}}
    print(f"{len(ds.shards)} shards, interleave {ds.interleave}, buffer {ds.buffer}:")
    try:
        counts = shard_class_counts(ds)  # every class of the shards: the uniform baseline's
    except (OSError, ValueError, tarfile.TarError) as exc:
        print(f"error: {args.src}: not readable tar shards ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 1
    print(f"  {sum(counts)} labelled samples in {len(counts)} classes")
    worst = 1.0
    for readers, mode, what in ((1, "round-robin", "1 reader"),
                                (args.readers, "round-robin", f"dctnet ThreadLoader, {args.readers} threads"),
                                (args.readers, "per-reader", f"torch DataLoader, {args.readers} workers")):
        q = shards_quality(ds, args.batch_size, readers, mode=mode, class_counts=counts)
        worst = min(worst, q.ratio)
        report["loaders"][what] = {"distinct": q.distinct, "uniform_distinct": q.uniform_distinct, "entropy": q.entropy,
                                   "uniform_entropy": q.uniform_entropy, "batches": q.batches}
        print(f"  {what}: {q.describe()}")
    if worst < 0.5:
        print("  far from a uniform shuffle: rewrite them with `dctnet shards write SRC DIR` (one global random order), "
              "or raise data.interleave")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 1 if args.strict and worst < 0.5 else 0


def cmd_stats(args: argparse.Namespace) -> int:
    from dctnet import data as D  # lazy
    from dctnet import transforms as T  # lazy
    from dctnet.kernels.dct import zigzag_indices  # lazy

    try:
        ds = D.ImageFolderDataset(args.src, crop=D.CenterCrop(args.crop_fraction), on_error="skip")
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    size = (args.size, args.size)
    sampler = D.EpochSampler(len(ds), seed=args.seed)
    loader = D.ThreadLoader(ds, args.batch_size, sampler=sampler, pin_memory=False)
    norm = D.compute_stats(loader, lambda b: T.crops_to_coefficients(b, size), max_batches=args.batches, save=args.out)
    print(f"per-(channel, frequency) statistics of {min(len(ds), args.batches * args.batch_size)} centre crops "
          f"({args.size}x{args.size}) of {args.src} -> {args.out}")
    print("channel  DC mean  DC std  std (zigzag 1-5)  std (zigzag 6-20)  std (zigzag 21-63)")
    zz = zigzag_indices()
    for c, name in enumerate(("Y", "Cb", "Cr")):
        sd = norm.std[c][zz]
        print(f"{name:<7}  {norm.mean[c, 0]:7.1f}  {norm.std[c, 0]:6.1f}  {sd[1:6].mean():16.2f}  {sd[6:21].mean():17.2f}  "
              f"{sd[21:].mean():18.2f}")
    print("load with dctnet.transforms.Normalize.load(OUT)")
    return 0


def cmd_shards_write(args: argparse.Namespace) -> int:
    from dctnet.data.shards import write_shards  # lazy

    try:
        info = write_shards(args.src, args.out, shard_size=args.shard_size, seed=args.seed, prefix=args.prefix)
    except (OSError, ValueError, tarfile.TarError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{info['samples']} samples in {len(info['shards'])} shards under {args.out} (seed {args.seed}, global "
          f"random order; order.json maps each key to its source)" +
          (f"; {len(info['classes'])} classes in classes.txt" if info["classes"] else ""))
    return 0


def add_cache(sub) -> None:
    p = sub.add_parser("cache", help="build, inspect and verify coefficient caches",
                       description="Decode a dataset once into a memory-mapped coefficient cache.")
    csub = p.add_subparsers(dest="cache_command", required=True)
    b = csub.add_parser("build", help="build a cache from an image folder, tar shards or a Hugging Face dataset",
                        description="SRC: an image folder (SRC/<class>/<image>), uncompressed WebDataset tar shards "
                                    "(a glob such as 'shards/*.tar', or a folder of .tar files), or a Hugging Face "
                                    "dataset (a save_to_disk directory, or parquet files: a file, a glob, or a folder "
                                    "of them; columns image and label, pip install dctnet[hf]). Run under torchrun to "
                                    "split the build across ranks (gloo), or use --workers.")
    b.add_argument("src", metavar="SRC")
    b.add_argument("out", metavar="OUT")
    b.add_argument("--format", choices=["sparse", "dense"], default="sparse",
                   help="sparse: ~2x the JPEG bytes, expanded in C; dense: int16 planes, ~13x, no work on read")
    b.add_argument("--workers", type=int, default=1, help="local build processes (ignored under torchrun)")
    b.add_argument("--resume", action="store_true", help="continue an interrupted build of OUT")
    b.add_argument("--on-error", choices=["skip", "raise"], default="raise",
                   help="unreadable source files: stop with the file and the reason (default), or skip and record "
                        "them in the cache")
    b.add_argument("--warnings", choices=["raise", "accept", "strict"], default="raise",
                   help="raise (default): a file that lost data (truncated, corrupt) is unreadable; accept: cache "
                        "what libjpeg fills in; strict: any libjpeg warning makes a file unreadable")
    b.add_argument("--quiet", action="store_true", help="no progress line")
    for name, hlp in (("info", "print the sidecar summary"), ("verify", "re-decode a sample and compare bit for bit")):
        v = csub.add_parser(name, help=hlp, description=hlp)
        v.add_argument("cache", metavar="CACHE")
        if name == "verify":
            v.add_argument("--samples", type=int, default=64, help="how many samples to re-decode")
            v.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_cache)


def add_shards(sub) -> None:
    p = sub.add_parser("shards", help="write WebDataset shards in a seeded global random order",
                       description="Shards written from an ImageFolder are class-sorted; streamed shard by shard "
                                   "their batches hold a handful of classes. These shards hold the samples in one "
                                   "global random order, so a stream reads batches as mixed as a folder's.")
    ssub = p.add_subparsers(dest="shards_command", required=True)
    w = ssub.add_parser("write", help="SRC (an image folder, a folder of .tar shards, tar shards as a glob, or a saved "
                                      "Hugging Face dataset / parquet files) -> DIR/PREFIX-NNNNNN.tar",
                        description="Write the samples of SRC into DIR/PREFIX-NNNNNN.tar in one seeded global random "
                                    "order (DIR/order.json maps each key to its source, DIR/classes.txt names the "
                                    "labels). Tar shards are re-sharded: every sample copied as it is.")
    w.add_argument("src", metavar="SRC",
                   help="a folder of class folders (SRC/<class>/*.jpg); a folder of .tar shards (no subfolders; its "
                        "classes.txt is copied along); tar shards as a quoted glob ('shards/train-*.tar') or one .tar "
                        "file; or a Hugging Face dataset: a save_to_disk folder, or parquet files (a file, a glob or a "
                        "folder of them; pip install dctnet[hf])")
    w.add_argument("out", metavar="DIR", help="the folder to write into (created if missing): one without "
                                              "PREFIX-*.tar shards, not the source shards' own")
    w.add_argument("--shard-size", type=positive, default=1000, help="samples per shard (default 1000)")
    w.add_argument("--seed", type=int, default=0, help="seed of the global order (default 0)")
    w.add_argument("--prefix", default="shard", help="shard file prefix (default 'shard')")
    w.set_defaults(func=cmd_shards_write)


def add_verify(sub) -> None:
    p = sub.add_parser("verify", help="decode a dataset once: unreadable files, warnings, duplicates, leakage, balance",
                       description="SRC is an image folder (SRC/<class>/...) or a folder of splits (SRC/<split>/<class>/...); "
                                   "or tar shards (a glob): then the shuffle quality of their stream — distinct classes "
                                   "and class entropy per batch against a uniform shuffle, from the label members only; "
                                   "or a coefficient cache (a folder with meta.json): then every record against its "
                                   "checksum, exit 1 when any is corrupt.")
    p.add_argument("src", metavar="SRC")
    p.add_argument("--batch-size", type=positive, default=256, help="shards: the batch size to measure (default 256)")
    p.add_argument("--readers", type=positive, default=8, help="shards: loader threads or workers (default 8)")
    p.add_argument("--interleave", type=positive, default=32, help="shards: open shards per reader (data.interleave)")
    p.add_argument("--buffer", type=positive, default=1000, help="shards: shuffle buffer per reader (data.buffer)")
    p.add_argument("--json", help="also write the report as JSON to this file")
    p.add_argument("--threads", type=int, help="decode threads (default: all CPUs)")
    p.add_argument("--warnings", choices=["raise", "accept", "strict"], default="raise",
                   help="which libjpeg warnings make a file unreadable, as data.warnings in a recipe: raise (default) "
                        "those that mean lost data (truncated, corrupt entropy-coded data); accept none; strict all")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when files are unreadable (incl. lost data), hold non-JPEG data, or leak across splits")
    p.set_defaults(func=cmd_verify)


def add_stats(sub) -> None:
    p = sub.add_parser("stats", help="per-(channel, frequency) coefficient statistics for Normalize",
                       description="Mean and std of every (Y/Cb/Cr, frequency) over centre crops of an image folder, "
                                   "resized on the device exactly as in training; written for "
                                   "dctnet.transforms.Normalize.load.")
    p.add_argument("src", metavar="SRC", help="image folder (SRC/<class>/<image>)")
    p.add_argument("out", metavar="OUT", help="statistics file to write (.pt)")
    p.add_argument("--size", type=int, default=224, help="crop side in pixels (multiple of 8)")
    p.add_argument("--crop-fraction", type=float, default=0.875)
    p.add_argument("--batches", type=int, default=50, help="batches to average over")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_stats)
