#!/usr/bin/env python3
"""Swap test for the Imagenette evidence: is a gap between two arms in their training inputs or
in how the models learned from them?

Loads the trained models of two arms of one evidence run (``runs/evidence-…/NAME/last.pt``, as
``benchmarks/train_imagenette.py`` leaves them) and scores each of them, in eval mode, on each
arm's *training* inputs: the arm's own pipeline (``build_pipeline`` of its recipe — torchvision /
timm in DataLoader workers for ``input: rgb``, dctnet's device step otherwise) over the same
``--images`` training photos, with a prefix of the recipe's augmentation list (``--stage``):

- ``crop``: RandomResizedCrop only;  ``policy``: + flip and the RandAugment entry;
- ``erasing``: + RandomErasing;  ``mixing``: the whole list (Mixup/CutMix too; the loss is then
  against the images' own labels, as a measure of how far the mixed inputs are from them).

Printed per (inputs, model): cross-entropy against the labels and top-1, plus what the inputs
look like to a network's first layer: per-channel mean, the mean squared difference of
neighbouring pixels (high-frequency energy) and the variance of each model's ``conv1`` output.

If the two input pipelines draw from the same distribution, each model scores the same on both
(up to the sampling noise of ``--images`` random crops, ~0.03 in loss at 2048) and the input
statistics agree; a gap that comes from the inputs shows as an interaction (each model better on
its own arm's inputs). Models with a ``conv1`` (ResNets) only.

    python benchmarks/evidence_swap.py runs/evidence-i20-seed0 [--arms resnet18_rgb_cpu resnet18_exact_cpu]
        [--stage policy] [--images 2048] [--epoch 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dctnet.models.checkpoint import load_state_dict, num_classes_of  # noqa: E402
from dctnet.train.pipeline import build_pipeline  # noqa: E402
from dctnet.train.recipe import load_recipe  # noqa: E402
from dctnet.train.recipe_model import build_recipe_model  # noqa: E402

#: the names of the augmentation entries each stage keeps (None: all of them)
STAGES = {"crop": set(), "policy": {"RandomHorizontalFlip", "TimmAugment", "RandAugment", "TrivialAugmentWide",
                                    "AutoAugment", "ThreeAugment"},
          "erasing": {"RandomHorizontalFlip", "TimmAugment", "RandAugment", "TrivialAugmentWide", "AutoAugment",
                      "ThreeAugment", "RandomErasing"}, "mixing": None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="an evidence run directory holding one folder per recipe")
    ap.add_argument("--arms", nargs=2, default=["resnet18_rgb_cpu", "resnet18_exact_cpu"])
    ap.add_argument("--stage", choices=list(STAGES), default="policy")
    ap.add_argument("--images", type=int, default=2048, help="training photos scored (data.limit_train)")
    ap.add_argument("--epoch", type=int, default=3, help="the epoch whose crops and draws are used")
    ap.add_argument("--seed", type=int, default=7, help="train.seed of the scoring pipelines (not the runs')")
    args = ap.parse_args()
    torch.set_num_threads(2)

    recipes, models = {}, {}
    for arm in args.arms:
        folder = args.run / arm
        if not (folder / "recipe.yaml").is_file() or not (folder / "last.pt").is_file():
            ap.error(f"{folder}: not a finished run of recipe {arm} (recipe.yaml and last.pt)")
        r = load_recipe(folder / "recipe.yaml", {"data": {"limit_train": args.images, "limit_val": 64},
                                                 "train": {"seed": args.seed}})
        keep = STAGES[args.stage]
        r.augment = [e for e in r.augment if keep is None or e["name"] in keep]
        recipes[arm] = r
        state = load_state_dict(folder / "last.pt")
        model = build_recipe_model(r, num_classes_of(state) or 0)
        model.load_state_dict(state)
        if not isinstance(getattr(model, "conv1", None), torch.nn.Conv2d):
            ap.error(f"{arm}: {r.model.arch} has no conv1 (the swap test reads a ResNet's first layer)")
        models[arm] = model.eval()
    print(f"{args.run}, stage {args.stage} ({[e['name'] for e in recipes[args.arms[0]].augment]}), "
          f"{args.images} training photos, epoch {args.epoch}")
    print("| inputs | model | loss | top-1 | channel means | neighbour diff² | conv1 var |")
    print("|---|---|---:|---:|---|---:|---:|")
    for arm, r in recipes.items():
        pipe = build_pipeline(r, torch.device("cpu"))
        pipe.set_epoch(args.epoch)
        loss = {k: 0.0 for k in models}
        correct = {k: 0.0 for k in models}
        conv = {k: 0.0 for k in models}
        means, diff2, n, batches = torch.zeros(3), 0.0, 0, 0
        with torch.no_grad():
            for x, _, labels in pipe.batches(train=True):
                means += x.mean((0, 2, 3))
                diff2 += 0.5 * ((x[..., 1:, :] - x[..., :-1, :]).pow(2).mean() + (x[..., 1:] - x[..., :-1]).pow(2).mean()).item()
                batches += 1
                n += len(labels)
                for k, m in models.items():
                    out = m(x)
                    loss[k] += torch.nn.functional.cross_entropy(out, labels, reduction="sum").item()
                    correct[k] += (out.argmax(1) == labels).sum().item()
                    conv[k] += m.conv1(x).var((0, 2, 3)).mean().item()
        for k in models:
            print(f"| {arm} | {k} | {loss[k] / n:.4f} | {correct[k] / n:.4f} | "
                  f"{[round(v, 3) for v in (means / batches).tolist()]} | {diff2 / batches:.4f} | {conv[k] / batches:.3f} |")


if __name__ == "__main__":
    main()
