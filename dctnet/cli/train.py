"""The model commands of the ``dctnet`` command line: ``train``, ``browse``, ``bench``, ``demo`` and
``convert``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from dctnet.cli.common import positive, os_error_line
from dctnet.codec import JpegError

# Each command imports the library it runs inside its function ("# lazy"): torch and the training
# stack take seconds to import, and each command pays only for what it runs.


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
              f"run directory {recipe.train.out} (metrics.jsonl, predictions_val.json, last.pt)")
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
    print_bench(report, generated=args.src is None)
    return 0


def print_bench(rep: dict, generated: bool) -> None:
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


def add_demo(sub) -> None:
    p = sub.add_parser("demo", help="coefficients -> device RGB on built-in data: fidelity and speed vs Pillow",
                       description="Decode generated JPEGs (and Imagenette if present) to coefficients, rebuild "
                                   "RGB with dctnet.image.to_rgb and compare with Pillow.")
    p.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    p.set_defaults(func=cmd_demo)


def add_convert(sub) -> None:
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


def add_bench(sub) -> None:
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
    p.add_argument("--limit", type=positive, default=200,
                   help="at most this many files, spread evenly over the folder (default 200)")
    p.add_argument("--rate", type=float, default=3000.0, help="target images/s for the cores-needed column (3000)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--threads", type=positive, default=os.cpu_count() or 1,
                   help="also time dctnet's loader with this many threads (wall clock); 1: skip")
    p.add_argument("--size", type=positive, help="crop side (default: the recipe's image_size, else 224)")
    p.add_argument("--repeat", type=positive, default=3, help="timed rounds (medians are reported)")
    p.add_argument("--batch", type=positive, default=64, help="batch size of the loaders and the device step")
    p.add_argument("--device", help="device for dctnet's device step (default: cuda if available, else cpu)")
    p.set_defaults(func=cmd_bench)


def add_train(sub) -> None:
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


def add_browse(sub) -> None:
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
