"""Where do plan A's float and exact decodes differ in what the model is fed? (The float decode trains
about a point below the exact one and RGB; this probe runs before any training.)

Both arms of the ResNet-18 CPU evidence recipe (``recipes/imagenette/resnet18_exact_cpu.yaml``,
``data.decode: exact`` and ``float``) read the same training samples with the same seed, so every
crop, flip and augmentation draw is the same; the probe compares the model inputs of each batch in
grey levels (the normalisation undone, ×255):

- per RGB channel: the mean and standard deviation of each arm's inputs, the mean difference
  (a bias) and the mean |difference|;
- the histogram of |difference|;
- where it sits: by distance (output pixels) to the crop's border, where the resize reads the
  window's edge rows and columns, against the interior;
- with the recipe's augmentation list and without it (crop and resize only), and the eval path
  (resize, centre crop).

    python benchmarks/float_gap_probe.py [--samples 2048]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "imagenette" / "resnet18_exact_cpu.yaml"
EDGES = (0, 1, 2, 4, 8)  # distance-to-border bands: [0,1), [1,2), [2,4), [4,8), [8, ...)
HIST = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, float("inf"))


def _pipelines(samples: int, augment: bool):
    from dctnet.kernels.normalization import input_mean_std
    from dctnet.train import load_recipe
    from dctnet.train.pipeline import build_pipeline

    pipes = []
    for decode in ("exact", "float"):
        over = [f"data.decode={decode}", f"data.limit_train={samples}", f"data.limit_val={samples}", "train.seed=0",
                "data.threads=1"]
        if not augment:
            over.append("augment=[]")
        r = load_recipe(RECIPE, over)
        pipes.append(build_pipeline(r, torch.device("cpu")))
    mean, std = input_mean_std(load_recipe(RECIPE).model.arch)
    return pipes, torch.tensor(mean).view(1, 3, 1, 1), torch.tensor(std).view(1, 3, 1, 1)


def _grey(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    return (x.float() * std + mean) * 255


def probe(samples: int, augment: bool, train: bool) -> dict:
    """The figures of the module docstring for one setting."""
    (exact, flt), mean, std = _pipelines(samples, augment)
    for p in (exact, flt):
        p.set_epoch(0)
    sums = {"n": 0, "mean_e": torch.zeros(3, dtype=torch.float64), "mean_f": torch.zeros(3, dtype=torch.float64),
            "sq_e": torch.zeros(3, dtype=torch.float64), "sq_f": torch.zeros(3, dtype=torch.float64),
            "bias": torch.zeros(3, dtype=torch.float64), "abs": torch.zeros(3, dtype=torch.float64),
            "hist": torch.zeros(len(HIST) - 1, dtype=torch.float64),
            "band_abs": torch.zeros(len(EDGES), dtype=torch.float64), "band_n": torch.zeros(len(EDGES), dtype=torch.float64)}
    for (xe, _, le), (xf, _, lf) in zip(exact.batches(train=train), flt.batches(train=train)):
        assert torch.equal(le, lf), "the two arms read different samples"
        ge, gf = _grey(xe, mean, std), _grey(xf, mean, std)
        d = gf - ge
        n_pix = d.shape[0] * d.shape[2] * d.shape[3]
        sums["n"] += n_pix
        for key, t in (("mean_e", ge), ("mean_f", gf), ("bias", d), ("abs", d.abs())):
            sums[key] += t.double().sum(dim=(0, 2, 3))
        sums["sq_e"] += (ge.double() ** 2).sum(dim=(0, 2, 3))
        sums["sq_f"] += (gf.double() ** 2).sum(dim=(0, 2, 3))
        a = d.abs().flatten()
        for i in range(len(HIST) - 1):
            sums["hist"][i] += ((a >= HIST[i]) & (a < HIST[i + 1])).sum()
        h, w = d.shape[-2:]
        rows = torch.arange(h).view(h, 1)
        cols = torch.arange(w).view(1, w)
        dist = torch.minimum(torch.minimum(rows, h - 1 - rows), torch.minimum(cols, w - 1 - cols))  # (h, w)
        per_pixel = d.abs().mean(dim=(0, 1)).double() * d.shape[0]  # summed over the batch
        for i, lo in enumerate(EDGES):
            hi = EDGES[i + 1] if i + 1 < len(EDGES) else 10**9
            band = (dist >= lo) & (dist < hi)
            sums["band_abs"][i] += per_pixel[band].sum()
            sums["band_n"][i] += band.sum() * d.shape[0]
    n = sums["n"]
    out = {k: (sums[k] / n).tolist() for k in ("mean_e", "mean_f", "bias", "abs")}
    out["std_e"] = (sums["sq_e"] / n - (sums["mean_e"] / n) ** 2).sqrt().tolist()
    out["std_f"] = (sums["sq_f"] / n - (sums["mean_f"] / n) ** 2).sqrt().tolist()
    out["hist"] = (sums["hist"] / sums["hist"].sum()).tolist()
    out["bands"] = (sums["band_abs"] / sums["band_n"].clamp(min=1)).tolist()
    out["pixels"] = n
    return out


def _print(title: str, s: dict) -> None:
    f = lambda v: " ".join(f"{x:7.3f}" for x in v)  # noqa: E731
    print(f"\n{title} ({s['pixels']} pixel positions)")
    print(f"  mean  exact  R G B: {f(s['mean_e'])}   float: {f(s['mean_f'])}")
    print(f"  std   exact  R G B: {f(s['std_e'])}   float: {f(s['std_f'])}")
    print(f"  float − exact, mean (bias) R G B: {f(s['bias'])};  mean |Δ|: {f(s['abs'])}")
    labels = [f"[{HIST[i]:g},{HIST[i + 1]:g})" for i in range(len(HIST) - 1)]
    print("  |Δ| histogram: " + ", ".join(f"{lab} {p:.1%}" for lab, p in zip(labels, s["hist"])))
    bands = [f"{EDGES[i]}–{EDGES[i + 1] - 1}" if i + 1 < len(EDGES) else f"≥{EDGES[i]}" for i in range(len(EDGES))]
    print("  mean |Δ| by distance to the crop's border (px): " + ", ".join(
        f"{b}: {v:.3f}" for b, v in zip(bands, s["bands"])))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=2048, help="training (and val) samples read")
    args = p.parse_args(argv)
    _print("training inputs, crop + resize only (augment: [])", probe(args.samples, augment=False, train=True))
    _print("training inputs, the recipe's augmentation list", probe(args.samples, augment=True, train=True))
    _print("eval inputs (resize, centre crop)", probe(args.samples, augment=False, train=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
