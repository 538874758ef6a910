"""The ``dctnet`` command line.

    dctnet info FILE...      header, layout, tables, estimated quality of JPEG files
    dctnet demo              decode built-in JPEGs to coefficients, rebuild RGB on the device,
                             and print fidelity and speed against Pillow
    dctnet convert IN OUT    convert an RGB checkpoint to its DCT-stem model (verified)
    dctnet cache build|info|verify   coefficient caches
    dctnet verify SRC        dataset checks: unreadable, warnings, duplicates, leakage, balance;
                             a cache: every record against its checksum
    dctnet stats SRC OUT     per-(channel, frequency) statistics of a dataset's crops (for Normalize)
    dctnet bench [FOLDER]    per-sample host cost and cores needed: dctnet vs torchvision vs timm
    dctnet train RECIPE      train from a recipe (recipes/*.yaml); also under torchrun
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from dctnet.codec import JpegError, JpegHeader, libjpeg_version, read_coefficients, read_header

# Each command imports the library it runs inside its function ("# lazy"): torch and the training
# stack take seconds to import, and each command pays only for what it runs.


def _describe(path: str, hdr: JpegHeader) -> str:
    from dctnet.quality import estimate_quality  # lazy

    lines = [f"{path}",
             f"  size        {hdr.width}x{hdr.height}, {hdr.num_components} components, {hdr.color_space}"
             f" ({hdr.subsampling}), {hdr.process} (SOF{hdr.sof}), {hdr.precision}-bit",
             "  sampling    " + ", ".join(f"{n} {h}x{v}" for n, (h, v) in zip(hdr.channels, hdr.sampling)),
             "  blocks      " + ", ".join(f"{n} {bh}x{bw} (coded {ch}x{cw})" for n, (bh, bw), (ch, cw)
                                           in zip(hdr.channels, hdr.blocks, hdr.coded_blocks)),
             f"  MCU grid    {hdr.mcu[0]} rows x {hdr.mcu[1]} cols; restart interval {hdr.restart_interval or 'none'}",
             f"  markers     JFIF {'yes' if hdr.jfif else 'no'}, Adobe transform "
             f"{hdr.adobe_transform if hdr.adobe_transform is not None else 'none'}, EXIF orientation "
             f"{hdr.exif_orientation or 'none'}",
             f"  coeff bytes {hdr.nbytes} (int16 planes)"]
    seen = set()
    for n, idx, table in zip(hdr.channels, hdr.quant_index, hdr.quant_tables):
        if idx in seen:
            continue
        seen.add(idx)
        q = estimate_quality(table, chroma=idx != hdr.quant_index[0]) if table.any() else float("nan")
        lines.append(f"  table {idx}     used by {n}: max {int(table.max())}, DC {int(table[0, 0])}, "
                     f"estimated IJG quality ~{q:.0f}")
    return "\n".join(lines)


def cmd_info(args: argparse.Namespace) -> int:
    if not args.files:  # the build: what reads the files
        from dctnet import __version__  # (the package's own version)

        print(f"dctnet {__version__}: coefficients read by the libjpeg it carries, {libjpeg_version()} "
              "(third_party/libjpeg-turbo, linked into the extension)")
        return 0
    status = 0
    for path in args.files:
        try:
            hdr = read_coefficients(path) if args.decode else read_header(path)
        except (JpegError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 1
            continue
        print(_describe(path, hdr))
        if args.decode:
            print(f"  decode      {hdr.num_warnings} warnings{': ' + '; '.join(hdr.warnings) if hdr.warnings else ''}"
                  f"{', saturated' if hdr.saturated else ''}")
    return status


def cmd_demo(args: argparse.Namespace) -> int:
    from dctnet.train.demo import demo  # lazy

    for line in demo(args.device):
        print(line)
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from dctnet.models import convert  # lazy

    if (args.mean is None) != (args.std is None):
        print("error: --mean and --std go together (3 floats each)", file=sys.stderr)
        return 2
    try:
        keep = int(args.keep) if args.keep and args.keep.isdigit() else args.keep
        r = convert(args.src, args.dst, args.arch, stem=args.stem, image_size=args.image_size, image=args.image,
                    keep=keep, mean=tuple(args.mean) if args.mean else None, std=tuple(args.std) if args.std else None)
    except (OSError, ValueError, RuntimeError, TypeError, JpegError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    def fmt(values: tuple[float, ...]) -> str:
        return "(" + ", ".join(f"{v:g}" for v in values) + ")"

    source = "--mean/--std" if r.source == "argument" else r.source
    print(f"normalisation: mean {fmt(r.mean)} std {fmt(r.std)} (from {source})")
    stem = "DCT patch embedding (converted conv)" if r.stem == "dct-patch" else "IDCT stem (device IDCT + original conv)"
    print(f"stem: {r.stem}, {stem}")
    print(f"{args.arch}: max |logit difference| vs the RGB model {r.diff:.3g} ({r.rel:.2g} relative)"
          + (" — frequency truncation, not exact" if args.keep else ""))
    print(f"wrote {args.dst} (load with {r.hint})")
    return 0


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
        return _verify_cache(args)
    if not os.path.isdir(args.src):  # tar shards (a glob): how mixed their stream's batches are
        return _verify_shards(args)
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


def _verify_cache(args: argparse.Namespace) -> int:
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


def _verify_shards(args: argparse.Namespace) -> int:
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


def cmd_train(args: argparse.Namespace) -> int:
    from dctnet.distributed import placement  # lazy
    from dctnet.train import RecipeError, load_recipe, train  # lazy

    overrides = list(args.set or [])
    if args.out:
        overrides.append(f"train.out={args.out}")
    try:
        recipe = load_recipe(args.recipe, overrides)
    except RecipeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        record = train(recipe, resume=args.resume)
    except (OSError, ValueError, JpegError) as exc:  # (a full disk, an unwritable --out: OSError)
        print(f"error: {os_error_line(exc) if isinstance(exc, OSError) else exc}", file=sys.stderr)
        return 1
    if placement().rank == 0 and record and recipe.detection:
        ap = f"val bbox AP {record['bbox_AP']:.3f} (AP50 {record['bbox_AP50']:.3f}), " if "bbox_AP" in record else ""
        print(f"{recipe.name}: {ap}train loss {record['train_loss']:.3f}, {record['images_per_s']:.1f} img/s; "
              f"run directory {recipe.train.out} (metrics.json, predictions_val.json, last.pt)")
    elif placement().rank == 0 and record:
        top1 = f"val top-1 {record['val_top1']:.3f}, " if "val_top1" in record else ""
        print(f"{recipe.name}: {top1}train loss {record['train_loss']:.3f}, {record['images_per_s']:.0f} img/s; "
              f"run directory {recipe.train.out} (metrics.jsonl, plot.png, last.pt)")
    return 0


def cmd_browse(args: argparse.Namespace) -> int:
    from dctnet.train import RecipeError, load_recipe  # lazy
    from dctnet.train.browse import browse  # lazy

    try:
        recipe = load_recipe(args.recipe, list(args.set or []))
    except RecipeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        coco = browse(recipe, split=args.split, n=args.n, out=args.out)
    except (FileNotFoundError, ValueError, JpegError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{len(coco['images'])} {args.split} samples of {recipe.name} in {args.out}: PNGs, targets.json "
          f"({len(coco['annotations'])} annotations), contact_sheet.png")
    return 0


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


def cmd_bench(args: argparse.Namespace) -> int:
    from dctnet.hostmem import keep_freed_host_memory  # lazy
    from dctnet.train import RecipeError  # lazy
    from dctnet.train.bench import run_bench  # lazy
    from dctnet.train.demo import demo_files  # lazy

    keep_freed_host_memory()  # as dctnet train runs a CPU device step: its temporaries reuse freed blocks
    say = None if args.json else (lambda text: print(f"  ... {text}", file=sys.stderr, flush=True))
    with tempfile.TemporaryDirectory(prefix="dctnet-bench-") as tmp:
        src = args.src
        if src is None:
            demo_files(Path(tmp))
            src = tmp
        try:
            report = run_bench(src, recipe=args.recipe, limit=args.limit, rate=args.rate, rounds=args.repeat,
                               size=args.size, threads=args.threads, batch_size=args.batch, device=args.device,
                               progress=say)
        except (FileNotFoundError, ValueError, RecipeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
        return 0
    _print_bench(report, generated=args.src is None)
    return 0


def _print_bench(rep: dict, generated: bool) -> None:
    c = rep["census"]

    def counts(d: dict) -> str:
        return ", ".join(f"{k} {v}" for k, v in d.items() if v) or "none"

    where = "generated photos" if generated else rep["source"]
    print(f"{rep['files_found']} JPEG-named files in {where}; {rep['files_sampled']} sampled, {rep['files_used']} used, "
          f"{len(rep['skipped'])} skipped")
    if rep["skipped"]:
        print("skipped (not timed, not in the census):")
        for s in rep["skipped"]:
            print(f"  {s['file']}: {s['reason']}")
    if rep["warnings"]:
        print(f"read with libjpeg warnings that lost nothing (used): {len(rep['warnings'])}")
        for w in rep["warnings"][:10]:
            print(f"  {w['file']}: {'; '.join(w['warnings'])}")
    print(f"layouts of the {c['files']} files used ({c['megapixels_mean']:.2f} Mpixel average):")
    print(f"  coding    {counts(c['process'])}")
    print(f"  colour    {counts(c['color_space'])}")
    print(f"  sampling  {counts(c['sampling'])}" + ("  (files with colour; gray has one component)"
                                                     if c["color_space"].get("gray") else ""))
    print(f"augmentation: {rep['augment_source']}")
    print("  " + ", ".join(s["name"] for s in rep["augment"]) +
          f"; crop {rep['crop_size']}x{rep['crop_size']}, scale {tuple(rep['scale'])}, {rep['interpolation']}; "
          f"dctnet input {rep['input']}")
    print(f"host CPU per sample on one core (torch 1 thread), median of {rep['rounds']} interleaved rounds, "
          f"batch {rep['batch_size']}, {rep['cpus']} CPUs, device {rep['device']}")
    rate = rep["rate"]
    print(f"\n  {'pipeline':<58} {'µs/sample':>9} {'img/s/core':>10} {f'cores @ {rate:g}/s':>15}")
    for name, row in rep["pipelines"].items():
        per_core = f"{row['images_per_s_per_core']:.0f}" if row["images_per_s_per_core"] else "-"
        print(f"  {row['label']:<58} {row['host_us_per_sample']:9.0f} {per_core:>10} {row['cores_needed']:15.2f}")
    step = rep["pipelines"]["dctnet_device_step"]
    if step["runs_on"] != "host":
        print(f"  (device step on {step['runs_on']}: {step['device_us_per_sample']:.0f} µs/sample of device time, "
              f"{step['images_per_s_on_device']:.0f} img/s)")
    if rep["threads"]:
        t = rep["threads"]
        print(f"  dctnet host with {t['threads']} threads: {t['images_per_s']:.0f} img/s wall clock, "
              f"{t['host_us_per_sample']:.0f} µs/sample CPU")
    print()
    for note in rep["notes"]:
        print(note)


def _positive(text: str) -> int:
    """argparse type: an integer >= 1 (a clear usage error instead of a traceback later)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The ``dctnet`` argument parser: one sub-command each, its function in ``func``."""
    parser = argparse.ArgumentParser(prog="dctnet", description="Train image models on JPEG DCT coefficients.")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_info, _add_demo, _add_convert, _add_cache, _add_shards, _add_verify, _add_stats, _add_bench, _add_train,
                _add_browse):
        add(sub)
    return parser


def _add_info(sub) -> None:
    p = sub.add_parser("info", help="print header facts of JPEG files (none: the libjpeg dctnet carries)",
                       description="Header, sampling, block grid, quantization tables and estimated quality; "
                                   "without files, the libjpeg the extension carries.")
    p.add_argument("files", nargs="*", metavar="FILE")
    p.add_argument("--decode", action="store_true", help="also decode the coefficients and report warnings")
    p.set_defaults(func=cmd_info)


def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="coefficients -> device RGB on built-in data: fidelity and speed vs Pillow",
                       description="Decode generated JPEGs (and Imagenette if present) to coefficients, rebuild "
                                   "RGB with dctnet.image.to_rgb and compare with Pillow.")
    p.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    p.set_defaults(func=cmd_demo)


def _add_convert(sub) -> None:
    p = sub.add_parser("convert", help="convert an RGB checkpoint to its DCT-stem model",
                       description="Load IN (torchvision or timm state_dict) into ARCH, swap and convert its stem "
                                   "(dct-patch: a patch embedding for ViT/Swin/ConvNeXt-style patchify stems; idct: "
                                   "device IDCT + the original conv, any model), check the logits against the RGB "
                                   "model on a sample image with the same normalisation, and write OUT.")
    p.add_argument("src", metavar="IN")
    p.add_argument("dst", metavar="OUT")
    p.add_argument("--arch", required=True, help="torchvision name (vit_b_16, resnet50, ...) or timm:NAME")
    p.add_argument("--stem", metavar="NAME",
                   help="the converted stem, named as in swap_stem and recipes: dct-patch (block-aligned patchify "
                        "first conv: ViT, Swin, ConvNeXt) or idct (any first conv); default: dct-patch where the "
                        "model takes it, else idct. The learned stems have nothing to convert")
    p.add_argument("--image-size", type=int, help="input size the model was built for")
    p.add_argument("--image", help="JPEG to check equivalence on (default: a generated photo)")
    p.add_argument("--keep", help="keep only these frequencies: K (zigzag), square:K, zigzag:K")
    p.add_argument("--mean", type=float, nargs=3, metavar=("R", "G", "B"),
                   help="RGB mean the model was trained with (rgb in [0, 1]); default: the checkpoint's metadata, "
                        "else timm's pretrained_cfg, else ImageNet's")
    p.add_argument("--std", type=float, nargs=3, metavar=("R", "G", "B"), help="RGB std, with --mean")
    p.set_defaults(func=cmd_convert)


def _add_cache(sub) -> None:
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


def _add_shards(sub) -> None:
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
    w.add_argument("--shard-size", type=_positive, default=1000, help="samples per shard (default 1000)")
    w.add_argument("--seed", type=int, default=0, help="seed of the global order (default 0)")
    w.add_argument("--prefix", default="shard", help="shard file prefix (default 'shard')")
    w.set_defaults(func=cmd_shards_write)


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


def _add_verify(sub) -> None:
    p = sub.add_parser("verify", help="decode a dataset once: unreadable files, warnings, duplicates, leakage, balance",
                       description="SRC is an image folder (SRC/<class>/...) or a folder of splits (SRC/<split>/<class>/...); "
                                   "or tar shards (a glob): then the shuffle quality of their stream — distinct classes "
                                   "and class entropy per batch against a uniform shuffle, from the label members only; "
                                   "or a coefficient cache (a folder with meta.json): then every record against its "
                                   "checksum, exit 1 when any is corrupt.")
    p.add_argument("src", metavar="SRC")
    p.add_argument("--batch-size", type=_positive, default=256, help="shards: the batch size to measure (default 256)")
    p.add_argument("--readers", type=_positive, default=8, help="shards: loader threads or workers (default 8)")
    p.add_argument("--interleave", type=_positive, default=32, help="shards: open shards per reader (data.interleave)")
    p.add_argument("--buffer", type=_positive, default=1000, help="shards: shuffle buffer per reader (data.buffer)")
    p.add_argument("--json", help="also write the report as JSON to this file")
    p.add_argument("--threads", type=int, help="decode threads (default: all CPUs)")
    p.add_argument("--warnings", choices=["raise", "accept", "strict"], default="raise",
                   help="which libjpeg warnings make a file unreadable, as data.warnings in a recipe: raise (default) "
                        "those that mean lost data (truncated, corrupt entropy-coded data); accept none; strict all")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when files are unreadable (incl. lost data), hold non-JPEG data, or leak across splits")
    p.set_defaults(func=cmd_verify)


def _add_stats(sub) -> None:
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


def _add_bench(sub) -> None:
    p = sub.add_parser("bench", help="per-sample host cost and cores needed on your files: dctnet vs torchvision vs timm",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Time every input pipeline on the same files in the same run, with a recipe's "
                                   "augmentation (or DeiT's per-sample list at 224) on every side: the raw libjpeg "
                                   "floor; dctnet's host side (read + crop window + collate); dctnet's device step "
                                   "(crop resize + augmentation + ToRGB) on the device present — on the host CPU when "
                                   "there is no GPU; torchvision v2 (Pillow decode, RandomResizedCrop, the list mapped "
                                   "one to one); timm's create_transform(is_training=True). For each: host µs/sample "
                                   "on one core, images/s per core and host cores needed for --rate images/s. Bad "
                                   "files are skipped and named with the reason; the layout census counts coding "
                                   "process, colour space and chroma sampling. Full suites: `make bench`.",
                       epilog="--json prints one object (see dctnet.train.bench for every key): version, cpus, "
                              "device, source, files_found, files_sampled, files_used, skipped [{file, reason, by}], "
                              "warnings [{file, warnings}], census {files, process, color_space, sampling, layouts, "
                              "megapixels_mean}, augment, augment_source, input, crop_size, scale, interpolation, "
                              "rate, rounds, batch_size, left_out, pipelines {libjpeg_floor, dctnet_host, "
                              "dctnet_device_step, dctnet_total_host, torchvision, timm: {label, runs_on, "
                              "host_us_per_sample, images_per_s_per_core, cores_needed, [device_us_per_sample, "
                              "images_per_s_on_device, same_as]}}, threads, notes.")
    p.add_argument("src", metavar="FOLDER", nargs="?",
                   help="an image folder (class folders) or a flat folder of JPEGs, or one file (default: generated "
                        "photos)")
    p.add_argument("--recipe", help="time this recipe's augmentation list, crop size, scale and interpolation")
    p.add_argument("--limit", type=_positive, default=200,
                   help="at most this many files, spread evenly over the folder (default 200)")
    p.add_argument("--rate", type=float, default=3000.0, help="target images/s for the cores-needed column (3000)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--threads", type=_positive, default=os.cpu_count() or 1,
                   help="also time dctnet's loader with this many threads (wall clock); 1: skip")
    p.add_argument("--size", type=_positive, help="crop side (default: the recipe's image_size, else 224)")
    p.add_argument("--repeat", type=_positive, default=3, help="timed rounds (medians are reported)")
    p.add_argument("--batch", type=_positive, default=64, help="batch size of the loaders and the device step")
    p.add_argument("--device", help="device for dctnet's device step (default: cuda if available, else cpu)")
    p.set_defaults(func=cmd_bench)


def _add_train(sub) -> None:
    p = sub.add_parser("train", help="train a model from a recipe (recipes/*.yaml)",
                       description="Build dataset, loader, device transforms and model from RECIPE and train: "
                                   "AMP on CUDA, warm-up + cosine, label smoothing, eval every epoch, checkpoint "
                                   "and --resume. Multi-process: torchrun --nproc-per-node N -m dctnet train RECIPE. "
                                   "Fields: recipes/README.md.")
    p.add_argument("recipe", metavar="RECIPE")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a recipe field, e.g. --set optim.lr=0.1 --set data.batch_size=128 (repeatable)")
    p.add_argument("--out", help="run directory (same as --set train.out=DIR)")
    p.add_argument("--resume", action="store_true", help="continue from RUN/last.pt")
    p.set_defaults(func=cmd_train)


def _add_browse(sub) -> None:
    p = sub.add_parser("browse", help="write a recipe's samples as the device step hands them to the model",
                       description="Write N samples of a recipe's split exactly as its device step hands them to the "
                                   "model (before the model's normalisation) as lossless 8-bit PNGs, targets.json "
                                   "(COCO format in those pixels; masks as RLE) and contact_sheet.png with the boxes "
                                   "and masks drawn. Classification recipes too (no annotations then).")
    p.add_argument("recipe", metavar="RECIPE")
    p.add_argument("--split", choices=("train", "val"), default="train")
    p.add_argument("--n", type=int, default=16, help="samples to write (default 16)")
    p.add_argument("--out", default="browse", help="output directory (default ./browse)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a recipe field (repeatable)")
    p.set_defaults(func=cmd_browse)


def os_error_line(exc: OSError) -> str:
    """``PATH: reason`` for an ``OSError`` (the file it names, its errno's message), else its text."""
    if exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
    except OSError as exc:  # every command: a file system's refusal is one line, not a traceback
        print(f"error: {os_error_line(exc)}", file=sys.stderr)
        code = 1
    sys.exit(code)
