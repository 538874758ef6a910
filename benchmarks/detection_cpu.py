#!/usr/bin/env python3
"""Host CPU per image of the detection input pipeline on a CPU, one thread: torchvision's ``rgb`` arm
against the device-rgb arm (plan A) whose device step runs on the same CPU, on the same trees
images with the same draws.

- ``rgb``: Pillow's decode, torchvision v2's ops of the recipe (its ``detect.ops``, or the preset's),
  then the model's own ``GeneralizedRCNNTransform.resize`` (when ``detect.resize``; the detector is
  built from the recipe, as :class:`dctnet.train.detection.DetectionTask` builds it) — what the
  trainer's rgb arm runs per image, less the normalisation both arms' models do.
- ``device-rgb``: the coefficient read (:class:`dctnet.data.CocoDataset`), the collate, the host
  plan (``DetectionStep.plan``) and the device step (``DetectionStep.apply``) on the CPU: decode,
  every resampling, flips, fills, colour ops — the recipe's ops then its ``DetectorResize``.
- ``device-rgb, dense matrices`` (``--dense``): the same step with the resamplings forced onto
  the dense matrices a GPU multiplies (:func:`dctnet.resize.use_band` off) — what a CPU ran before.

Each sample's draws come from :func:`dctnet.transforms.detection.sample_generator` ``(seed, epoch,
image_id)``; the rgb arm seeds torch's global generator with the same seed before each sample, so
torchvision's classes draw the same parameters (the geometry tests' oracle). CPU time is
``time.process_time`` (the whole process; one thread: ``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``)
summed over ``--epochs`` passes over the split after one warm-up pass, per image; arms alternate
within each pass. The host allocator keeps freed memory for reuse, as ``dctnet train`` runs on a CPU
(:func:`dctnet.hostmem.keep_freed_host_memory`; ``--host-allocator system``: the C library's
defaults, where every large temporary is faulted in afresh). Prints a markdown table per recipe
and the ratio device-rgb / rgb.

    OMP_NUM_THREADS=1 python benchmarks/detection_cpu.py [--recipe recipes/detection/trees_fasterrcnn_mnv3_320.yaml ...]
        [--root ../shared/data/trees] [--split train] [--epochs 3] [--dense] [--host-allocator keep|system]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported: its pools start with one thread

import torch  # noqa: E402

from dctnet import resize as RS  # noqa: E402
from dctnet.data.coco import CocoDataset, collate_detection  # noqa: E402
from dctnet.hostmem import keep_freed_host_memory  # noqa: E402
from dctnet.models.detection import build_detector  # noqa: E402
from dctnet.train.detection_inputs import PillowCoco  # noqa: E402
from dctnet.train.rng import SeededDraws  # noqa: E402
from dctnet.train.recipe import load_recipe  # noqa: E402
from dctnet.transforms import detection as TD  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RECIPES = [ROOT / "recipes" / "detection" / f"trees_{n}.yaml" for n in ("fasterrcnn_mnv3_320", "fasterrcnn_r18")]


class Arms:
    """One recipe's two arms over one split, built as the trainer builds them."""

    def __init__(self, recipe: Path, root: str, split: str) -> None:
        r = load_recipe(recipe, [f"data.root={root}"])
        self.name, self.seed, self.batch = r.name, r.train.seed, r.data.batch_size
        spec = getattr(r.data, split)
        self.coco = CocoDataset(Path(root) / spec["images"], Path(root) / spec["annotations"])
        d = r.detect
        kwargs = {k: v for k, v in (("min_size", d.min_size), ("max_size", d.max_size)) if v}
        model = build_detector(r.model.arch.split(":", 1)[1], len(self.coco.classes) + 1, backbone=d.backbone,
                               returned_layers=d.returned_layers, anchor_sizes=d.anchor_sizes, **kwargs, **d.model_args)
        ops = TD.build_detection_ops(d.ops) if d.ops else TD.detection_preset(d.preset, d.hflip_prob)
        resize = [TD.DetectorResize.from_model(model, train=True)] if d.resize else []
        self.step = TD.DetectionStep([*ops, *resize], seed=self.seed)
        tfm = TD.torchvision_ops(d.ops) if d.ops else TD.torchvision_detection_preset(d.preset, d.hflip_prob)
        self.pillow = SeededDraws(PillowCoco(self.coco, tfm), 0)  # (the trainer's seeded draws)
        #: the model's own resize (train mode: it draws its min_size from torch's generator, after the ops)
        self.transform = model.transform.train() if d.resize else None
        self.describe = f"{r.model.arch}, {'ops ' + str([o['name'] for o in d.ops]) if d.ops else 'preset ' + d.preset}" \
                        f"{', detector resize' if d.resize else ''}"

    def rgb(self, epoch: int, parts: dict[str, float]) -> int:
        """Every image through the rgb arm; CPU seconds into ``parts``; returns the images."""
        for i in range(len(self.coco)):
            torch.manual_seed(TD.sample_generator(self.seed, epoch, self.coco.ids[i]).initial_seed())
            t0 = time.process_time()
            image, target = self.pillow[(epoch, i)]
            t1 = time.process_time()
            if self.transform is not None:
                self.transform.resize(image, {"boxes": target["boxes"]})
            t2 = time.process_time()
            parts["Pillow + v2"] = parts.get("Pillow + v2", 0.0) + t1 - t0
            parts["model resize"] = parts.get("model resize", 0.0) + t2 - t1
        return len(self.coco)

    def device(self, epoch: int, parts: dict[str, float]) -> int:
        """Every image through the device-rgb arm, batches of the recipe's size (the last one short)."""
        for first in range(0, len(self.coco), self.batch):
            t0 = time.process_time()
            items = [self.coco[(epoch, i)] for i in range(first, min(first + self.batch, len(self.coco)))]
            t1 = time.process_time()
            batch, targets = collate_detection(items)
            t2 = time.process_time()
            plan = self.step.plan(targets, epoch)
            t3 = time.process_time()
            self.step.apply(batch, targets, plan)
            t4 = time.process_time()
            for k, v in (("read", t1 - t0), ("collate", t2 - t1), ("plan", t3 - t2), ("step", t4 - t3)):
                parts[k] = parts.get(k, 0.0) + v
        return len(self.coco)


def dense(on: bool):
    """Force the dense resampling matrices on the CPU (``on``) or leave the default."""
    RS.use_band = (lambda x: False) if on else _use_band


_use_band = getattr(RS, "use_band", None)  # (absent before the banded detection resamplings: no --dense there)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", action="append", help="a detection recipe (repeatable; default: both trees recipes)")
    ap.add_argument("--root", default=os.environ.get("DCTNET_TREES", str(ROOT.parent / "shared" / "data" / "trees")))
    ap.add_argument("--split", default="train", choices=("train", "val"))
    ap.add_argument("--epochs", type=int, default=3, help="timed passes over the split (after one warm-up pass)")
    ap.add_argument("--dense", action="store_true", help="also time the device step on dense matrices")
    ap.add_argument("--host-allocator", choices=["keep", "system"], default="keep",
                    help="keep: freed memory kept for reuse, as dctnet train runs on a CPU "
                         "(dctnet.hostmem.keep_freed_host_memory); system: the C library's defaults")
    args = ap.parse_args()
    torch.set_num_threads(1)
    kept = args.host_allocator == "keep" and keep_freed_host_memory()
    for recipe in args.recipe or RECIPES:
        arms = Arms(Path(recipe), args.root, args.split)
        runs = {"rgb": (arms.rgb, False), "device-rgb": (arms.device, False)}
        if args.dense:
            runs["device-rgb, dense matrices"] = (arms.device, True)
        parts: dict[str, dict[str, float]] = {k: {} for k in runs}
        images = dict.fromkeys(runs, 0)
        for epoch in range(args.epochs + 1):
            for name, (fn, forced) in runs.items():
                dense(forced)
                spent: dict[str, float] = {}
                n = fn(epoch, spent)
                dense(False)
                if epoch:  # the first pass warms up (allocator, lazy imports, libjpeg's tables)
                    images[name] += n
                    for k, v in spent.items():
                        parts[name][k] = parts[name].get(k, 0.0) + v
        print(f"\n{arms.name} ({arms.describe}): {len(arms.coco)} {args.split} images × {args.epochs} epochs, "
              f"batch {arms.batch}, one thread, host allocator {'keep' if kept else 'system'}")
        print("| arm | host CPU ms/image | parts (ms/image) |")
        print("|---|---|---|")
        total = {}
        for name in runs:
            ms = {k: v / images[name] * 1e3 for k, v in parts[name].items()}
            total[name] = sum(ms.values())
            print(f"| {name} | {total[name]:.2f} | {', '.join(f'{k} {v:.2f}' for k, v in ms.items())} |")
        for name in runs:
            if name != "rgb":
                print(f"{name} / rgb: {total[name] / total['rgb']:.2f}")


if __name__ == "__main__":
    main()
