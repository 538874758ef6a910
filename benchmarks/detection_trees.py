#!/usr/bin/env python3
"""Detection evidence on the tree-crown tiles: torchvision's reference pipeline (``rgb``) against
plan A (``device-rgb``) under the same recipe and preset, several seeds, in one run.

Runs ``python -m dctnet train RECIPE --set model.input=ARM --set train.seed=S`` for each arm and
seed, then prints a markdown table: final val bbox AP and AP50 (pycocotools' COCOeval on the saved
predictions), the best AP50 and its epoch, host CPU µs per sample of the input pipeline (DataLoader
workers, plus plan A's geometry draw and device step — all of it on a CPU-only machine — or the rgb
arm's model resize; median over epochs after the first), epochs and wall minutes — and the plan-A −
rgb difference of the mean AP.

    python benchmarks/detection_trees.py [--recipe recipes/detection/trees_fasterrcnn_mnv3_320.yaml]
        [--seeds 0 1] [--out runs/trees] [--set KEY=VALUE ...] [--reuse] [--jobs N]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(recipe: str, arm: str, seed: int, out: Path, sets: list[str], reuse: bool) -> dict:
    run_dir = out / f"{arm}-seed{seed}"
    metrics = run_dir / "metrics.jsonl"
    t0 = time.perf_counter()
    if not (reuse and metrics.exists()):
        cmd = [sys.executable, "-m", "dctnet", "train", recipe, "--set", f"model.input={arm}",
               "--set", f"train.seed={seed}", "--set", f"train.out={run_dir}"]
        for s in sets:
            cmd += ["--set", s]
        subprocess.run(cmd, check=True, cwd=ROOT)
    minutes = (time.perf_counter() - t0) / 60
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    last = records[-1]
    evaluated = [r for r in records if "bbox_AP50" in r]
    best = max(evaluated, key=lambda r: r["bbox_AP50"])
    cpu = [r["data_cpu_us_per_sample"] for r in records[1:]] or [records[0]["data_cpu_us_per_sample"]]
    return {"arm": arm, "seed": seed, "AP": last["bbox_AP"], "AP50": last["bbox_AP50"], "best_AP50": best["bbox_AP50"],
            "best_epoch": best["epoch"], "cpu_us": statistics.median(cpu), "epochs": last["epoch"],
            "minutes": minutes if not reuse else sum(r["epoch_seconds"] for r in records) / 60}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default=str(ROOT / "recipes" / "detection" / "trees_fasterrcnn_mnv3_320.yaml"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--arms", nargs="+", default=["rgb", "device-rgb"])
    ap.add_argument("--out", default=str(ROOT / "runs" / "trees"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--reuse", action="store_true", help="read finished runs instead of training again")
    ap.add_argument("--jobs", type=int, default=1,
                    help="runs at once (each with the recipe's train.torch_threads; the minutes column is then "
                         "wall time shared with the others)")
    args = ap.parse_args()
    grid = [(arm, seed) for arm in args.arms for seed in args.seeds]
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:  # each run is its own process
        rows = list(pool.map(lambda a: run(args.recipe, a[0], a[1], Path(args.out), args.set, args.reuse), grid))
    print("| arm | seed | val bbox AP | AP50 | best AP50 (epoch) | host CPU µs/sample | epochs | minutes |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['arm']} | {r['seed']} | {r['AP']:.3f} | {r['AP50']:.3f} | {r['best_AP50']:.3f} ({r['best_epoch']}) | "
              f"{r['cpu_us']:.0f} | {r['epochs']} | {r['minutes']:.1f} |")
    means = {arm: statistics.mean(r["AP"] for r in rows if r["arm"] == arm) for arm in args.arms}
    ap50 = {arm: statistics.mean(r["AP50"] for r in rows if r["arm"] == arm) for arm in args.arms}
    cpu = {arm: statistics.median(r["cpu_us"] for r in rows if r["arm"] == arm) for arm in args.arms}
    for arm in args.arms:
        print(f"{arm}: mean AP {means[arm]:.3f}, mean AP50 {ap50[arm]:.3f}, host CPU {cpu[arm]:.0f} µs/sample")
    if {"rgb", "device-rgb"} <= set(args.arms):
        print(f"plan A − rgb: {100 * (means['device-rgb'] - means['rgb']):+.1f} AP points; host CPU ratio "
              f"{cpu['device-rgb'] / cpu['rgb']:.2f}")


if __name__ == "__main__":
    main()
