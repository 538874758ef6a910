"""Does the device arm feed a detector what torchvision's pipeline feeds it? Every training sample of
an epoch, both arms, the same draws.

For each training image of a detection recipe (its train split as the trainer reads it:
``detect.drop_unannotated``, ``data.limit_train``, the full-decode check):

- **device arm** (``model.input: device-rgb``, plan A): the trainer's own :class:`DetectionStep` —
  the file's coefficients decoded on the device (``data.decode``), the preset's geometry and the
  detector's resize (``DetectorResize``) drawn from ``sample_generator(seed, epoch, image_id)``;
- **rgb arm** (torchvision's reference pipeline): Pillow's decode, torchvision v2's ops of the same
  preset (the rgb arm's own objects), then the detector's own ``GeneralizedRCNNTransform.resize``
  in training mode, with torch's generator seeded from that same sample generator — dctnet's draws
  replayed into torchvision's ops, as the per-op tests replay them.

Compared per sample, before the detector's normalisation (the same in both arms): image sizes, grey
levels (mean and max of |Δ| · 255), boxes (max |Δ| in pixels), labels, masks, and how many boxes
each arm dropped (the geometry and ``SanitizeBoundingBoxes``). The rgb arm's training draws are
seeded per (seed, epoch, index) rather than per image id (:class:`dctnet.train.rng.SeededDraws`):
the laws are the same, the draws themselves differ; here both arms take the device arm's.

    python benchmarks/detection_equivalence.py                       # trees, the recipe's preset, epoch 0
    python benchmarks/detection_equivalence.py --epochs 0 1 2 --set detect.preset=ssd --set data.decode=exact

Prints one line per figure; exits 1 when a bound fails (``--bounds``: mean grey ≤ 0.5, boxes ≤ 1e-4
px, labels, masks and drops equal).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "detection" / "trees_fasterrcnn_mnv3_320.yaml"

#: what the issue asks of the two arms
BOUNDS = {"mean_grey": 0.5, "box_px": 1e-4}


def _tasks(recipe: str | Path | dict, overrides: list[str]) -> tuple[Any, Any]:
    """The device-rgb and rgb tasks of the recipe (a file, or a recipe's mapping), their data, steps and
    models built as the trainer builds them, in one process, no loader workers."""
    import tempfile

    from dctnet.train import load_recipe
    from dctnet.train.process import start_process
    from dctnet.train.tasks import build_task

    out = tempfile.mkdtemp(prefix="dctnet-equivalence-")
    common = [*overrides, "data.workers=0", "train.checkpoint=false", f"train.out={out}"]
    tasks = []
    for arm in ("device-rgb", "rgb"):
        over = [*common, f"model.input={arm}"]
        r = (load_recipe(None, _merged(recipe, over)) if isinstance(recipe, dict) else load_recipe(recipe, over))
        tasks.append(build_task(r, start_process(r, lambda msg: None)))
    return tasks[0], tasks[1]


def _merged(spec: dict, overrides: list[str]) -> dict:
    """A recipe mapping with ``KEY=VALUE`` overrides applied (as ``dctnet train --set`` does)."""
    from dctnet.train import parse_overrides

    def merge(a: dict, b: dict) -> dict:
        out = dict(a)
        for k, v in b.items():
            out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        return out

    return merge(spec, parse_overrides(overrides))


def compare(recipe: str | Path | dict = RECIPE, overrides: list[str] | None = None, epochs: tuple[int, ...] = (0,),
            limit: int | None = None, batch_size: int = 4) -> dict[str, Any]:
    """Both arms on every training sample of ``epochs`` (the first ``limit`` samples when given) of
    ``recipe`` (a file or a recipe's mapping): the figures the module docstring lists, and ``rows``
    (one per sample)."""
    from torchvision import tv_tensors

    from dctnet.data import collate_detection
    from dctnet.train.detection_inputs import PillowCoco
    from dctnet.transforms.detection import sample_generator

    device_task, rgb_task = _tasks(recipe, overrides or [])
    ds = device_task.train_set
    r = device_task.recipe
    pillow = PillowCoco(rgb_task.train_set, rgb_task.rgb_transform(rgb_task.recipe, True))
    resize = rgb_task.model.transform  # torchvision's GeneralizedRCNNTransform (its resize timed: same call)
    resize.train()
    n = len(ds) if limit is None else min(limit, len(ds))
    rows = []
    for epoch in epochs:
        for start in range(0, n, batch_size):
            indices = list(range(start, min(n, start + batch_size)))
            batch, targets = collate_detection([ds[i] for i in indices], pin_memory=False)
            plan = device_task.step.plan(targets, epoch)
            images, moved = device_task.step.apply(batch, targets, plan)
            for b, index in enumerate(indices):
                image_id = targets[b]["image_id"]
                torch.manual_seed(sample_generator(r.train.seed, epoch, image_id).initial_seed())
                image, target = pillow[index]
                boxes = tv_tensors.BoundingBoxes(target["boxes"], format="XYXY", canvas_size=image.shape[-2:])
                extra = {"masks": target["masks"]} if "masks" in target else {}
                want, want_target = resize.resize(image, {"boxes": boxes, **extra})
                rows.append(_row(epoch, image_id, images[b], moved[b], plan.targets[b], want, want_target, target))
    return _summary(rows)


def _row(epoch: int, image_id: int, got: torch.Tensor, moved: dict, drawn: dict, want: torch.Tensor,
         want_target: dict, target: dict) -> dict[str, Any]:
    """One sample's comparison."""
    same_size = tuple(got.shape) == tuple(want.shape)
    grey = (got.float() - want.float()).abs() * 255 if same_size else None
    got_boxes, want_boxes = moved["boxes"].float(), want_target["boxes"].as_subclass(torch.Tensor).float()
    same_count = got_boxes.shape == want_boxes.shape
    box_px = float((got_boxes - want_boxes).abs().max()) if same_count and len(got_boxes) else 0.0
    masks_equal = True
    if "masks" in moved or "masks" in want_target:
        masks_equal = ("masks" in moved and "masks" in want_target and moved["masks"].shape == want_target["masks"].shape
                       and torch.equal(moved["masks"].cpu(), want_target["masks"].to(moved["masks"].dtype)))
    total, dropped_rgb, _ = target["box_drops"]
    return {"epoch": epoch, "image_id": int(image_id), "size": same_size,
            "mean_grey": float(grey.mean()) if grey is not None else float("inf"),
            "max_grey": float(grey.max()) if grey is not None else float("inf"),
            "box_px": box_px if same_count else float("inf"),
            "labels": same_count and torch.equal(moved["labels"].cpu(), target["labels"]), "masks": masks_equal,
            "boxes": int(total), "dropped_device": int(total) - len(drawn["_kept"]), "dropped_rgb": int(dropped_rgb)}


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The epoch's figures over every sample."""
    finite = [r for r in rows if r["size"]]
    return {
        "images": len(rows), "size_mismatches": sum(not r["size"] for r in rows),
        "mean_grey": sum(r["mean_grey"] for r in finite) / max(len(finite), 1),
        "worst_mean_grey": max((r["mean_grey"] for r in rows), default=0.0),
        "max_grey": max((r["max_grey"] for r in rows), default=0.0),
        "box_px": max((r["box_px"] for r in rows), default=0.0),
        "label_mismatches": sum(not r["labels"] for r in rows), "mask_mismatches": sum(not r["masks"] for r in rows),
        "boxes": sum(r["boxes"] for r in rows),
        "dropped_device": sum(r["dropped_device"] for r in rows), "dropped_rgb": sum(r["dropped_rgb"] for r in rows),
        "drop_mismatches": sum(r["dropped_device"] != r["dropped_rgb"] for r in rows),
        "rows": rows,
    }


def within_bounds(s: dict[str, Any]) -> list[str]:
    """The bounds ``s`` fails (empty: all hold)."""
    fails = []
    if s["size_mismatches"]:
        fails.append(f"{s['size_mismatches']} images of another size")
    if s["worst_mean_grey"] > BOUNDS["mean_grey"]:
        fails.append(f"an image's mean grey difference {s['worst_mean_grey']:.3f} > {BOUNDS['mean_grey']}")
    if s["box_px"] > BOUNDS["box_px"]:
        fails.append(f"boxes differ by {s['box_px']:.2e} px > {BOUNDS['box_px']}")
    for key in ("label_mismatches", "mask_mismatches", "drop_mismatches"):
        if s[key]:
            fails.append(f"{s[key]} {key.replace('_', ' ')}")
    return fails


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe", nargs="?", default=str(RECIPE))
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe overrides")
    p.add_argument("--epochs", type=int, nargs="+", default=[0])
    p.add_argument("--limit", type=int, default=None, help="the first N training samples only")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    s = compare(args.recipe, args.set, tuple(args.epochs), args.limit)
    print(f"recipe {args.recipe} {' '.join(args.set)}, epochs {args.epochs}: {s['images']} training samples, "
          f"both arms, the device arm's draws ({time.perf_counter() - t0:.0f} s)")
    print(f"  image sizes differing:        {s['size_mismatches']}")
    print(f"  grey levels |Δ|:              mean {s['mean_grey']:.3f}, worst image's mean {s['worst_mean_grey']:.3f}, "
          f"max {s['max_grey']:.1f}  (bound: mean ≤ {BOUNDS['mean_grey']})")
    print(f"  boxes |Δ|:                    max {s['box_px']:.2e} px  (bound ≤ {BOUNDS['box_px']:.0e})")
    print(f"  labels / masks differing:     {s['label_mismatches']} / {s['mask_mismatches']}")
    print(f"  boxes dropped (device / rgb): {s['dropped_device']} / {s['dropped_rgb']} of {s['boxes']}; "
          f"samples where they differ: {s['drop_mismatches']}")
    fails = within_bounds(s)
    print("  within bounds" if not fails else "  OUT OF BOUNDS: " + "; ".join(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
