#!/usr/bin/env python3
"""Evidence on Imagenette: RGB vs DCT training at equal budget, and checkpoint conversion.

Runs the CPU-sized recipes (recipes/imagenette/*_cpu.yaml) one after another with
``python -m dctnet train``, then converts the trained RGB ViT with ``dctnet convert`` and evaluates
it on Imagenette val straight from coefficients. Prints a markdown table and, with ``--doc``
(``--readme``, its old name, is the same flag: ``make evidence`` passes it), writes it into
docs/evidence.md between the ``evidence`` markers (its section on the ``make evidence`` table; the
README keeps only the headline figures).

Columns: final val top-1 (centre crop), train images/s (median over epochs after the first),
data wait (fraction of step time blocked on the loader, mean over epochs) and host data CPU µs per
sample (decode/crop/collate: dctnet loader threads, or torchvision's worker processes; median).
On a CPU-only machine the "device" transforms (IDCT, resize, augmentation) run on the same cores
as the model and are part of the step, not of the data CPU column.

    python benchmarks/train_imagenette.py [--out runs/evidence] [--doc] [--reuse]
    python benchmarks/train_imagenette.py --seed 1 --out runs/evidence-seed1 --recipes vit_s16_rgb_cpu vit_s16_dct_cpu
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: where ``--doc`` writes the table, and the markers it goes between (whatever lies between them is replaced)
EVIDENCE_DOC = ROOT / "docs" / "evidence.md"
MARKERS = ("<!-- evidence:start -->", "<!-- evidence:end -->")
RECIPES = ["resnet18_rgb_cpu", "resnet18_exact_cpu", "resnet18_dct_cpu", "vit_s16_rgb_cpu", "vit_s16_dct_cpu"]
LABELS = {"resnet18_rgb_cpu": "ResNet-18, RGB (torchvision pipeline)",
          "resnet18_exact_cpu": "ResNet-18, plan A: device decode, unchanged model",
          "resnet18_dct_cpu": "ResNet-18, learned DCT stem (dct8)",
          "vit_s16_rgb_cpu": "ViT-S/16, RGB (torchvision pipeline)",
          "vit_s16_dct_cpu": "ViT-S/16, DCT patch embedding"}


def run_recipe(name: str, out: Path, reuse: bool, seed: int = 0) -> dict:
    run = out / name
    metrics = run / "metrics.jsonl"
    if not (reuse and metrics.is_file()):
        if metrics.exists():
            metrics.unlink()
        t = time.perf_counter()
        cmd = [sys.executable, "-m", "dctnet", "train", str(ROOT / "recipes" / "imagenette" / f"{name}.yaml"),
               "--out", str(run), "--set", "train.progress=false", "--set", f"train.seed={seed}"]
        print("$", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True)
        (run / "wall_seconds").write_text(f"{time.perf_counter() - t:.1f}")
    rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
    later = rows[1:] or rows
    return {"top1": rows[-1]["val_top1"], "images_per_s": statistics.median(r["images_per_s"] for r in later),
            "data_wait": statistics.mean(r["data_wait"] for r in rows),
            "data_cpu_us": statistics.median(r["data_cpu_us_per_sample"] for r in later),
            "epochs": len(rows), "wall_s": float((run / "wall_seconds").read_text()) if (run / "wall_seconds").exists() else None}


def conversion_check(out: Path) -> dict:
    """Convert the trained RGB ViT and compare predictions on Imagenette val."""
    import torch

    from dctnet import data as D
    from dctnet import transforms as T
    from dctnet.models import build_model, input_mean_std, load_state_dict, swap_stem
    from dctnet.train import load_recipe
    from dctnet.train.baseline import torchvision_loaders
    from dctnet.train.inputs import data_root, eval_config

    run = out / "vit_s16_rgb_cpu"
    recipe = load_recipe(run / "recipe.yaml", ["data.limit_val=0"])  # all of val
    arch, size = recipe.model.arch, recipe.data.image_size
    dst = run / "converted_dct.pt"
    cmd = [sys.executable, "-m", "dctnet", "convert", str(run / "last.pt"), str(dst), "--arch", arch, "--image-size", str(size)]
    print("$", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True)
    state = load_state_dict(run / "last.pt")
    n_classes = state["head.weight"].shape[0]
    rgb_model = build_model(arch, image_size=size, num_classes=n_classes)
    rgb_model.load_state_dict(state)
    dct_model = swap_stem(build_model(arch, image_size=size, num_classes=n_classes))
    dct_model.load_state_dict(torch.load(dst, map_location="cpu", weights_only=True))
    rgb_model.eval()
    dct_model.eval()
    root = data_root(recipe)
    # the RGB original through its own (torchvision) evaluation pipeline
    _, val_tv, _ = torchvision_loaders(recipe, root, 0, 1)
    paths = [p for p, _ in val_tv.loader.dataset.samples]
    rgb_pred, labels = {}, {}
    pos = 0
    with torch.no_grad():
        for x, y, _ in val_tv:
            p = rgb_model(x).argmax(1)
            for j in range(len(y)):
                rgb_pred[paths[pos + j]] = int(p[j])
                labels[paths[pos + j]] = int(y[j])
            pos += len(y)
        # the converted model straight from coefficients; and the original on the same device crops
        cfg = eval_config(recipe)
        ds = D.ImageFolderDataset(root / recipe.data.val, crop=D.ResizeCenterCrop.from_config(cfg))
        interp, fill = cfg["interpolation"], D.ResizeCenterCrop.from_config(cfg).fill(cfg["mean"])
        mean, std = (torch.tensor(v).reshape(1, 3, 1, 1) for v in input_mean_std(arch))
        # exact: libjpeg's integer decode on the device, i.e. Pillow's very pixels; float: dctnet's default
        dct_pred, float_pred, same_crop_pred = {}, {}, {}
        for batch in D.ThreadLoader(ds, 128, sampler=D.EpochSampler(len(ds), shuffle=False), pin_memory=False):
            kw = dict(interpolation=interp, fill=fill)
            p = dct_model(T.crops_to_coefficients(batch, (size, size), exact=True, **kw)).argmax(1)
            f = dct_model(T.crops_to_coefficients(batch, (size, size), **kw)).argmax(1)
            q = rgb_model((T.crops_to_rgb(batch, (size, size), **kw) - mean) / std).argmax(1)
            for j, i in enumerate(batch.index.tolist()):
                path = ds.samples[i][0]
                dct_pred[path], float_pred[path], same_crop_pred[path] = int(p[j]), int(f[j]), int(q[j])
    keys = sorted(labels)
    assert set(keys) == set(dct_pred), "the two pipelines saw different files"
    n = len(keys)
    return {"images": n, "rgb_top1": sum(rgb_pred[k] == labels[k] for k in keys) / n,
            "dct_top1": sum(dct_pred[k] == labels[k] for k in keys) / n,
            "agree": sum(rgb_pred[k] == dct_pred[k] for k in keys) / n,
            "float_top1": sum(float_pred[k] == labels[k] for k in keys) / n,
            "agree_float": sum(rgb_pred[k] == float_pred[k] for k in keys) / n,
            "agree_same_crops": sum(same_crop_pred[k] == float_pred[k] for k in keys) / n}


def table(results: dict, conv: dict | None) -> str:
    lines = ["| recipe (CPU-sized: 64×64 crops) | epochs | val top-1 | train img/s | data wait | data CPU µs/sample | wall min |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        wall = f"{r['wall_s'] / 60:.1f}" if r["wall_s"] else "–"
        lines.append(f"| {LABELS.get(name, name)} | {r['epochs']} | {100 * r['top1']:.1f}% | {r['images_per_s']:.0f} | "
                     f"{100 * r['data_wait']:.0f}% | {r['data_cpu_us']:.0f} | {wall} |")
    if "vit_s16_rgb_cpu" in results and "vit_s16_dct_cpu" in results:
        gap = 100 * (results["vit_s16_dct_cpu"]["top1"] - results["vit_s16_rgb_cpu"]["top1"])
        lines.append(f"\nDCT ViT − RGB ViT at equal budget: **{gap:+.1f} top-1 points**.")
    if conv:
        lines.append(f"\nConversion (`dctnet convert` of the trained RGB ViT-S/16, all {conv['images']} Imagenette val "
                     f"images): RGB original through its torchvision evaluation pipeline (Pillow decode) "
                     f"{100 * conv['rgb_top1']:.2f}% top-1; converted model straight from coefficients with "
                     f"`decode: exact` (libjpeg's integer decode on the device) {100 * conv['dct_top1']:.2f}%; "
                     f"predictions agree on **{100 * conv['agree']:.2f}%** of images. With the default float decode "
                     f"(within a few grey levels of Pillow): {100 * conv['float_top1']:.2f}% top-1, "
                     f"{100 * conv['agree_float']:.2f}% agreement, and {100 * conv['agree_same_crops']:.2f}% when the "
                     "original sees the same float-decoded crops (the conversion alone).")
    return "\n".join(lines)


def marked_text(path: Path) -> str:
    """``path``'s text, checked to hold exactly one pair of evidence markers, in order (checked before
    the runs too, so a missing marker does not surface after hours of training)."""
    text = path.read_text(encoding="utf-8")
    start, end = MARKERS
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise SystemExit(f"{path}: needs one {start} followed by one {end}")
    return text


def write_between_markers(path: Path, md: str) -> None:
    """Replace what lies between the evidence markers of ``path`` with ``md``; the rest of the file is
    kept byte for byte."""
    text, (start, end) = marked_text(path), MARKERS
    path.write_text(text[:text.index(start) + len(start)] + "\n" + md + "\n" + text[text.index(end):], encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "runs" / "evidence"))
    ap.add_argument("--recipes", nargs="*", default=RECIPES)
    ap.add_argument("--reuse", action="store_true", help="reuse finished runs in --out")
    ap.add_argument("--doc", "--readme", dest="doc", action="store_true",
                    help=f"write the table into {EVIDENCE_DOC.relative_to(ROOT)} between the evidence markers "
                         "(--readme: the old name)")
    ap.add_argument("--seed", type=int, default=0, help="train.seed of every run (use another --out per seed)")
    args = ap.parse_args()
    if args.doc:
        marked_text(EVIDENCE_DOC)
    out = Path(args.out)
    results = {name: run_recipe(name, out, args.reuse, args.seed) for name in args.recipes}
    t0 = time.perf_counter()
    conv = conversion_check(out) if (out / "vit_s16_rgb_cpu" / "last.pt").exists() else None
    total = time.perf_counter() - t0 + sum(r["wall_s"] or 0.0 for r in results.values())
    md = table(results, conv)
    md += (f"\n\nReproduce: `make evidence` (`python benchmarks/train_imagenette.py --doc`; {os.cpu_count()} CPU cores; "
           f"{total / 60:.0f} min of training and evaluation in all; per recipe: "
           "`dctnet train recipes/imagenette/NAME.yaml`).")
    print(md)
    (out / "evidence.json").write_text(json.dumps({"results": results, "conversion": conv, "seconds": total}, indent=1))
    if args.doc:
        write_between_markers(EVIDENCE_DOC, md)
        print(f"{EVIDENCE_DOC.relative_to(ROOT)} updated")


if __name__ == "__main__":
    main()
