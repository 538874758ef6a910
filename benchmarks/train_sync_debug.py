#!/usr/bin/env python3
"""Train a recipe with the training loop under ``torch.cuda.set_sync_debug_mode("error")``.

Any host sync the loop makes (``.item()``, ``.tolist()``, a blocking copy, ``cudaStreamSynchronize``)
raises there instead of passing silently; the error's first line and the innermost dctnet frames
that made it are printed, and the exit status is 1. Setup (dataset, loaders, model, optimizer: the
``Trainer``) runs in the default mode first, since moving a model to the GPU is a blocking copy;
``--from-start`` sets the mode before it too. The mode is set globally, for the rest of the run:
the trainer's own documented sync points (its log points, the end of an epoch) are expected to
lower it around themselves.

    python benchmarks/train_sync_debug.py RECIPE [key=value ...] [--from-start] [--cpu]

``key=value`` overrides any recipe field (as ``dctnet train --set``), e.g.
``data.source=synthetic data.image_size=64 train.max_steps=3 train.compile=true``. ``--cpu`` runs
without CUDA and without the sync check (a smoke test of the driver and its overrides).
Prints one ``sync-debug train:`` line (tagged like device_step.py's rows) and the last epoch's record.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

import torch

from dctnet.train import RecipeError, Trainer, load_recipe


def _where(exc: BaseException) -> str:
    """The innermost frames of dctnet's own code in ``exc``'s traceback (what made the sync)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/dctnet/" in f.filename]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames[-3:])) or "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipe", metavar="RECIPE")
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="recipe overrides, e.g. train.max_steps=3")
    ap.add_argument("--from-start", action="store_true",
                    help="set the mode before the Trainer is built (setup's blocking copies then raise too)")
    ap.add_argument("--cpu", action="store_true", help="no CUDA: run without the sync check (a smoke test)")
    args = ap.parse_args()
    cuda = torch.cuda.is_available() and not args.cpu
    if not cuda and not args.cpu:
        print("sync-debug train: no CUDA device (torch.cuda.is_available() is False); pass --cpu for a smoke test "
              "without the check", flush=True)
        return 2
    overrides = list(args.overrides) + (["train.device=cpu"] if args.cpu else [])
    try:
        recipe = load_recipe(args.recipe, overrides)
    except RecipeError as exc:
        print(f"sync-debug train: error: {exc}", flush=True)
        return 2
    mode = "error" if cuda else "off (--cpu)"
    print(f"sync-debug train: {recipe.name}, {recipe.data.image_size}², batch {recipe.data.batch_size}, "
          f"max_steps {recipe.train.max_steps}, compile {recipe.train.compile}, sync debug mode {mode} "
          f"from {'the start' if args.from_start else 'the training loop (after setup)'}", flush=True)
    trainer = trainer_half = None
    try:
        if cuda and args.from_start:
            torch.cuda.set_sync_debug_mode("error")
        trainer = Trainer(recipe)
        if cuda:
            torch.cuda.set_sync_debug_mode("error")
        record = trainer.fit()
        step = trainer.pipe.step
        trainer_half = getattr(step, "_compiled", None) if step is not None else None
    except Exception as exc:  # noqa: BLE001 — one line naming what failed and where, then the traceback
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
        first = (str(exc).strip().splitlines() or ["?"])[0]
        what = "host sync" if "synchroniz" in first else type(exc).__name__
        print(f"sync-debug train: FAILED: {what}: {first} (at {_where(exc)})", flush=True)
        traceback.print_exc()
        return 1
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
        del trainer  # its loader threads end here (as dctnet.train.train does)
    half = trainer_half
    if recipe.train.compile and half is not None and sum(half.compiled_calls.values()) < 2:
        print(f"sync-debug train: FAILED: the compiled device step ran its graph {sum(half.compiled_calls.values())} "
              f"times ({half.eager_batches} batches eagerly): raise train.max_steps or the data", flush=True)
        return 1
    graphs = (f"; device step: {half.eager_batches} batches eager, {sum(half.compiled_calls.values())} compiled"
              if half is not None else "")
    print(f"sync-debug train: ok: no host sync raised{graphs}; last epoch {json.dumps(record, default=str)}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
