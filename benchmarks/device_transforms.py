#!/usr/bin/env python3
"""Device-transform throughput: images/s of dctnet's device pipeline for one batch.

A batch of Imagenette train crops (RandomResizedCrop boxes, from the ThreadLoader; synthetic
photos when Imagenette is absent, or with ``--layouts mix`` a realistic mix of layouts, decoded
one group per layout) goes through: crop + resize to SIZE² coefficients, flip, colour
jitter, requantization, normalization, and (plan A) back to normalized RGB; and the decode with
``exact=True`` (libjpeg's integer arithmetic, Pillow's very pixels), with its cost relative to the
float decode. Timed with CUDA synchronisation on a GPU, median of repeats.

    python benchmarks/device_transforms.py [--device cuda] [--batch 256] [--size 224] [--layouts mix]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from dctnet import data as D
from dctnet import transforms as T

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DCTNET_DATA", ROOT.parent / "shared" / "data" / "imagenette"))


#: the realistic mix of layouts (as in benchmarks/loader.py), for generated photos
MIX = [("4:2:0", 0.70), ("4:4:4", 0.15), ("4:2:2", 0.05), ("progressive", 0.05), ("gray", 0.03), ("cmyk", 0.02)]


def _synthetic_folder(n: int, layouts: str) -> Path:
    import io

    import numpy as np
    from PIL import Image

    from dctnet.synthetic import synthetic_image

    root = Path(tempfile.mkdtemp()) / "syn"
    (root / "a").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        kind = "4:2:0" if layouts == "420" else MIX[int(rng.choice(len(MIX), p=[p for _, p in MIX]))][0]
        img = Image.fromarray(synthetic_image(rng, 224, 224))
        buf = io.BytesIO()
        if kind in ("gray", "cmyk"):
            img.convert("L" if kind == "gray" else "CMYK").save(buf, "JPEG", quality=92)
        else:
            img.save(buf, "JPEG", quality=92, subsampling="4:2:0" if kind == "progressive" else kind,
                     progressive=kind == "progressive")
        (root / "a" / f"{i}.jpg").write_bytes(buf.getvalue())
    return root


def load_batch(n: int, layouts: str = "420") -> T.JpegBatch:
    """``n`` RandomResizedCrop samples: Imagenette train photos (``layouts="420"``, as stored) or
    generated photos — 4:2:0, or the realistic mix of layouts (``"mix"``) in one batch."""
    train = DATA / "train"
    if layouts == "mix" or not train.is_dir():
        train = _synthetic_folder(n, layouts)
    ds = D.ImageFolderDataset(train, crop=D.RandomResizedCrop(), seed=0)
    return next(iter(D.ThreadLoader(ds, n, threads=2)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--layouts", choices=["420", "mix"], default="420",
                    help="one layout (4:2:0), or the realistic mix (one decode per layout group)")
    args = ap.parse_args()
    device = torch.device(args.device)
    batch = load_batch(args.batch, args.layouts).to(device, non_blocking=True)
    size = (args.size, args.size)
    aug = T.Compose([T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomRequantize()], seed=0)
    norm = T.Normalize(torch.zeros(3, 64), torch.full((3, 64), 100.0))
    to_rgb = T.ToRGB()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def plan_b() -> torch.Tensor:
        return norm(aug(T.crops_to_coefficients(batch, size)))

    def plan_a() -> torch.Tensor:
        return to_rgb(aug(T.crops_to_coefficients(batch, size)))

    def decode_only() -> torch.Tensor:
        return T.crops_to_rgb(batch, size)

    def decode_exact() -> torch.Tensor:
        return T.crops_to_rgb(batch, size, exact=True)

    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), "
          f"batch {len(batch)}, output {args.size}², layouts: "
          + ", ".join(f"{g.color_space} {g.sampling} x{len(g)}" for g in batch.groups))
    medians = {}
    for name, fn in (("crop+resize to RGB", decode_only), ("crop+resize to RGB, exact decode", decode_exact),
                     ("plan B: coefficients + aug + normalize", plan_b), ("plan A: + aug + normalized RGB", plan_a)):
        fn()
        sync()
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - t0)
        dt = medians[name] = statistics.median(times)
        print(f"  {name:40s} {dt * 1e3:8.2f} ms/batch  {len(batch) / dt:10.0f} images/s")
    print(f"  exact decode costs {medians['crop+resize to RGB, exact decode'] / medians['crop+resize to RGB']:.2f}x "
          "the float decode")


if __name__ == "__main__":
    main()
