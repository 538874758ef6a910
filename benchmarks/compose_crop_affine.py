#!/usr/bin/env python3
"""Does composing the crop resize with the affine op into one resampling pay?

torchvision's training transform resizes the RandomResizedCrop box to the output size
(antialiased) and *then* warps the result (rotate / shear / translate, nearest or bilinear,
RandAugment's geometry). dctnet's device step does the same in two stages: the resize as two
batched matmuls per sample, then one batched ``grid_sample``. The alternative is one resampling
per sample straight from the decoded window, with the crop's scale folded into the affine matrix.
``grid_sample`` has no antialiasing, so the composed warp aliases wherever the crop is downscaled.

For a batch of RandomResizedCrop crops with a random rotation each (RandAugment's ±30°), this
prints, against torchvision's own two steps on each sample (``resized_crop`` then ``rotate``):
mean and 99th-percentile |difference| in grey levels for the staged and the composed path, and the
median time of each (a ratio: timings on a shared machine are noisy).

    python benchmarks/compose_crop_affine.py [--device cuda] [--batch 64] [--size 224]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torchvision.transforms.v2.functional as TVF

from dctnet import image as IM
from dctnet import resize as RS
from dctnet import transforms as T
from dctnet.kernels import geometry as G

from device_transforms import load_batch


def composed(full: torch.Tensor, boxes: torch.Tensor, angle: torch.Tensor, size: int, interpolation: str) -> torch.Tensor:
    """One ``grid_sample`` per sample from the whole decoded window: output pixel → rotated
    coordinates in the output frame → the box's source pixels (the resize as a scale)."""
    n = full.shape[0]
    # rotate(angle) is affine(-angle) in torchvision's convention
    inv = G.affine_matrix(-angle, torch.zeros(n, 2, dtype=angle.dtype), torch.ones_like(angle),
                          torch.zeros(n, 2, dtype=angle.dtype), None, size=(size, size))       # output → rotated output
    # pixel-centre coordinates of the output frame (torchvision's affine grid convention)
    ys, xs = torch.meshgrid(torch.arange(size, dtype=torch.float64) + 0.5 - size / 2,
                            torch.arange(size, dtype=torch.float64) + 0.5 - size / 2, indexing="ij")
    pts = torch.stack([xs, ys, torch.ones_like(xs)], -1).reshape(-1, 3)                         # (P, 3)
    src = torch.einsum("nij,pj->npi", inv.double(), pts) + size / 2                              # output pixels, rotated
    top, left, h, w = (boxes[:, k].double()[:, None] for k in range(4))
    sx = left + src[..., 0] * (w / size)                                                         # source pixels
    sy = top + src[..., 1] * (h / size)
    hh, ww = full.shape[-2:]
    grid = torch.stack([sx / ww * 2 - 1, sy / hh * 2 - 1], -1).reshape(n, size, size, 2).to(full)
    out = torch.nn.functional.grid_sample(full, grid, mode=interpolation, padding_mode="zeros", align_corners=False)
    # torchvision fills what the warp uncovers: points outside the crop box take the fill (0), not the photo
    inside = (src[..., 0] >= 0) & (src[..., 0] < size) & (src[..., 1] >= 0) & (src[..., 1] < size)
    return out * inside.reshape(n, 1, size, size).to(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    device = torch.device(args.device)
    batch = T.as_jpeg_batch(load_batch(args.batch)[0].to(device))
    size = args.size
    g = batch.groups[0]
    full = IM.to_rgb(list(g.planes), g.sampling, batch.valid[g.rows], color_space=g.color_space).clamp(0, 1)
    boxes = batch.boxes[g.rows].to(device)
    angle = (torch.rand(len(g.rows), dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 60 - 30)

    def staged(interpolation: str) -> torch.Tensor:
        return G.rotate(RS.resized_crop(full, boxes, (size, size)).clamp(0, 1), angle.to(device), interpolation=interpolation)

    def one_step(interpolation: str) -> torch.Tensor:
        return composed(full, boxes, angle.to(device), size, interpolation).clamp(0, 1)

    def timed(fn) -> float:
        fn()
        times = []
        for _ in range(args.repeats):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    print(f"{len(g.rows)} RandomResizedCrop crops → {size}², rotation uniform in ±30°, device {device}")
    for interp in ("nearest", "bilinear"):
        mode = TVF.InterpolationMode(interp)
        ref = torch.stack([TVF.rotate(TVF.resized_crop(full[i].cpu(), *boxes[i].tolist(), [size, size], antialias=True)
                                      .clamp(0, 1), float(angle[i]), interpolation=mode) for i in range(len(g.rows))])
        rows = {}
        for name, fn in (("staged (resize, then warp)", lambda: staged(interp)),
                         ("composed (one grid_sample)", lambda: one_step(interp))):
            d = (fn().cpu() - ref).abs() * 255
            rows[name] = timed(fn)
            p99 = float(d.quantile(0.99)) if d.numel() < 2**24 else math.nan
            print(f"  {interp:8s} {name:28s} mean |Δ| {float(d.mean()):6.3f}  p99 {p99:7.3f} "
                  f"grey levels vs torchvision   {rows[name] * 1e3:8.2f} ms/batch")
        s, c = rows.values()
        print(f"  {interp:8s} composed / staged time: {c / s:.2f}x")


if __name__ == "__main__":
    main()
