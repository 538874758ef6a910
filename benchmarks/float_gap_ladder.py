#!/usr/bin/env python3
"""The float gap's ablation ladder: which part of plan A's float decode, if any, costs accuracy?

Plan A's two decodes (``data.decode: float`` and ``exact``) differ in four places on the way to the
model: the block IDCT (float32 matmul against libjpeg's integer ``islow``), the chroma upsampling
and colour conversion (float against libjpeg's fixed point), the rounding of the result (the
exact decode's pixels are 8-bit, the float decode's are not), and, on a CPU, the layout the
resize reads (the float decode hands it columns). Each rung here changes one of them, on the
ResNet-18 CPU evidence recipe (``recipes/imagenette/resnet18_exact_cpu.yaml``):

- ``exact``, ``float``: the two decodes as they ship;
- ``idct-float``: the float IDCT, its samples rounded to 8 bits as a decoder's are, then libjpeg's
  integer upsampling and colour (the exact decode with only its IDCT swapped);
- ``idct-exact``: libjpeg's integer IDCT, then the float upsampling and colour, unrounded (the
  float decode with only its IDCT swapped);
- ``float-rows``: the float decode laid out row by row (the resize's input as the exact decode
  hands it over).

Subcommands:

- ``inputs``: before any training, how far each rung's model inputs lie from the exact decode's on
  the same samples and draws (mean |Δ| in grey levels, training crops with the recipe's whole
  augmentation list, and the eval path), and the float decode of crop windows against the float
  decode of whole images (the window rung, decided without training if they agree);
- ``train --rung R --seed S --out DIR``: one training run of the recipe with the rung's decode
  (train and eval), the run folder as ``dctnet train`` writes it;
- ``swap RUN...``: each finished plan A run's model scored on val through both decodes (the eval
  path alone: train exact and evaluate float, and the reverse);
- ``table RUN...``: final val top-1 of finished runs (folders named ``RUNG-sSEED``) per rung and
  seed, with the gap to the RGB runs of the same seeds.

    python benchmarks/float_gap_ladder.py inputs [--samples 1024]
    python benchmarks/float_gap_ladder.py train --rung idct-float --seed 0 --out runs/ladder/idct-float-s0
    python benchmarks/float_gap_ladder.py swap runs/ladder/exact-s0 runs/ladder/float-s0
    python benchmarks/float_gap_ladder.py table runs/ladder/*-s[01]

The rungs are this benchmark's patches of :func:`dctnet.image.to_rgb` (the decode the device step
calls), not library options: the library keeps the two decodes it ships.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from torch import Tensor

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dctnet import image as IM  # noqa: E402
from dctnet.exact import block_idct_islow, components_to_rgb_exact, upsample_pixels_exact  # noqa: E402
from dctnet.kernels.color import CENTRED_COMPONENTS, unit_planes_to_rgb  # noqa: E402
from dctnet.kernels.dct import as_sizes, component_extent, unit_samples, upsample_pixels  # noqa: E402

RECIPE = ROOT / "recipes" / "imagenette" / "resnet18_exact_cpu.yaml"
#: the rungs, by the stage each changes (module docstring); :func:`rung_decode` applies one
RUNGS = ("exact", "float", "idct-float", "idct-exact", "float-rows")
_SHIPPED_TO_RGB = IM.to_rgb


def _components(planes: Sequence[Tensor], sampling: Sequence[tuple[int, int]], size, out_size, idct, upsample):
    """Each component's IDCT'd (``idct``) and upsampled (``upsample``) samples, cut to the output."""
    sizes = as_sizes(size, planes[0].shape[0], planes[0].device)
    hmax = max(h for h, _ in sampling)
    vmax = max(v for _, v in sampling)
    out_h, out_w = out_size if out_size is not None else (int(sizes[:, 0].max()), int(sizes[:, 1].max()))
    comps = []
    for i, (plane, (h, v)) in enumerate(zip(planes, sampling)):
        valid = component_extent(sizes, h, v, hmax, vmax)
        comps.append(upsample(idct(plane, i), hmax // h, vmax // v, valid)[:, :out_h, :out_w])
    return comps


def _idct_float(planes, sampling, size, *, color_space="YCbCr", upsampling="fancy", out_size=None, **_) -> Tensor:
    """Float IDCT rounded to 8-bit samples, then libjpeg's integer upsampling and colour."""
    def idct(plane: Tensor, _i: int) -> Tensor:
        return (unit_samples(plane.float(), centred=False, clamp=True) * 255.0).round().to(torch.int32)

    def up(pix, fh, fv, valid):
        return upsample_pixels_exact(pix, fh, fv, valid, mode=upsampling)

    comps = _components(planes, sampling, size, out_size, idct, up)
    return components_to_rgb_exact(torch.stack(comps, dim=1), color_space).float() / 255.0


def _idct_exact(planes, sampling, size, *, color_space="YCbCr", upsampling="fancy", out_size=None, **_) -> Tensor:
    """libjpeg's integer IDCT, then the float upsampling and colour (unrounded)."""
    centred = CENTRED_COMPONENTS.get(color_space, ())

    def idct(plane: Tensor, i: int) -> Tensor:
        return (block_idct_islow(plane).float() - (128.0 if i in centred else 0.0)) / 255.0

    def up(pix, fh, fv, valid):
        return upsample_pixels(pix, fh, fv, valid, mode=upsampling)

    with torch.autocast(device_type=planes[0].device.type, enabled=False):
        return unit_planes_to_rgb(_components(planes, sampling, size, out_size, idct, up), color_space, True)


def _patched(rung: str):
    def to_rgb(planes, sampling, size, *, exact=False, column_major=False, **kw):
        if rung == "idct-float":  # the exact decode's layout: rows
            return _idct_float(planes, sampling, size, **kw)
        if rung == "idct-exact":  # the float decode's layout: columns where the CPU's resize asks for them
            rgb = _idct_exact(planes, sampling, size, **kw)
            return rgb.transpose(-1, -2).contiguous().transpose(-1, -2) if column_major else rgb
        return _SHIPPED_TO_RGB(planes, sampling, size, exact=exact, column_major=column_major and rung != "float-rows",
                               **kw)
    return to_rgb


@contextlib.contextmanager
def rung_decode(rung: str) -> Iterator[str]:
    """Patch the device step's decode for ``rung``; yields the recipe's ``data.decode`` to run it under."""
    if rung not in RUNGS:
        raise SystemExit(f"unknown rung {rung!r}; one of {', '.join(RUNGS)}")
    if rung in ("exact", "float"):
        yield rung
        return
    IM.to_rgb = _patched(rung)
    try:
        yield "float"  # the exact flag is not read by the patches; float keeps the CPU's band resize
    finally:
        IM.to_rgb = _SHIPPED_TO_RGB


def _stepwise(batches: Iterator, rung: str) -> Iterator:
    """``batches`` with the rung's patch on only while each batch is made (two arms interleave)."""
    while True:
        with rung_decode(rung):
            try:
                item = next(batches)
            except StopIteration:
                return
        yield item


def _pipeline(decode: str, samples: int, seed: int = 0):
    from dctnet.train.pipeline import build_pipeline  # noqa: PLC0415  (after the patch point is importable)
    from dctnet.train.recipe import load_recipe  # noqa: PLC0415

    r = load_recipe(RECIPE, [f"data.decode={decode}", f"data.limit_train={samples}", f"data.limit_val={samples}",
                             f"train.seed={seed}", "data.threads=1"])
    pipe = build_pipeline(r, torch.device("cpu"))
    pipe.set_epoch(0)
    return pipe


def cmd_inputs(args: argparse.Namespace) -> None:
    from dctnet.kernels.normalization import input_mean_std  # noqa: PLC0415
    from dctnet.train.recipe import load_recipe  # noqa: PLC0415

    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in input_mean_std(load_recipe(RECIPE).model.arch))
    grey = lambda x: (x.float() * std + mean) * 255  # noqa: E731
    print(f"model inputs against the exact decode's, {args.samples} samples, the same draws (grey levels)")
    print("| rung | train: mean |Δ| | train: max |Δ| | eval: mean |Δ| | eval: max |Δ| |")
    print("|---|---:|---:|---:|---:|")
    for rung in RUNGS[1:]:
        row = []
        for train in (True, False):
            ref = _pipeline("exact", args.samples)
            with rung_decode(rung) as decode:
                mine = _pipeline(decode, args.samples)
            total, n, worst = 0.0, 0, 0.0
            for (xe, _, le), (xr, _, lr) in zip(ref.batches(train=train), _stepwise(mine.batches(train=train), rung)):
                assert torch.equal(le, lr), "the two arms read different samples"
                d = (grey(xr) - grey(xe)).abs()
                total, n, worst = total + d.double().sum().item(), n + d.numel(), max(worst, d.max().item())
            row += [total / n, worst]
        print(f"| {rung} | {row[0]:.3f} | {row[1]:.1f} | {row[2]:.3f} | {row[3]:.1f} |", flush=True)
    _window_vs_whole(args.samples)


def _window_vs_whole(samples: int) -> None:
    """The float decode of each training crop's MCU window against the float decode of the whole
    image then torchvision's ``resized_crop`` of the same box (no augmentation): the window rung."""
    import torchvision.transforms.v2.functional as TVF  # noqa: PLC0415

    from dctnet import data as D  # noqa: PLC0415
    from dctnet import read_coefficients  # noqa: PLC0415
    from dctnet.transforms import crops_to_rgb  # noqa: PLC0415

    from dctnet.train.recipe import load_recipe  # noqa: PLC0415

    data = load_recipe(RECIPE).data
    every = sorted((Path(data.root) / "train").rglob("*.JPEG"))
    files = every[:: max(1, len(every) // samples)][:samples]  # spread over the classes' folders
    crop = D.RandomResizedCrop(scale=tuple(data.scale))
    ds = D.ImageFolderDataset.from_files(files, crop=crop)
    worst, total, n = 0.0, 0.0, 0
    for start in range(0, len(files), 64):
        idx = range(start, min(start + 64, len(files)))
        batch = D.collate([ds[i] for i in idx], pin_memory=False)
        ours = crops_to_rgb(batch, (64, 64))
        for k, i in enumerate(idx):
            c = read_coefficients(str(files[i]))
            whole = IM.coefficients_to_rgb(c)[0]
            box = crop.box(c.height, c.width, 0, 0, i)
            want = TVF.resized_crop(whole, *box, [64, 64], antialias=True).clamp(0, 1)
            d = ((ours[k] - want).abs() * 255).double()
            worst, total, n = max(worst, d.max().item()), total + d.sum().item(), n + d.numel()
    print(f"\nfloat decode, MCU window vs whole image then resized_crop ({len(files)} training crops): "
          f"mean |Δ| {total / n:.2e}, max {worst:.2e} grey levels")


def cmd_train(args: argparse.Namespace) -> None:
    from dctnet.cli import main as cli  # noqa: PLC0415

    torch.set_num_threads(2)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "rung").write_text(args.rung)  # the recipe.yaml says decode: float for every patched rung
    with rung_decode(args.rung) as decode:
        cli(["train", str(RECIPE), "--out", str(args.out), "--set", "train.progress=false",
             "--set", f"train.seed={args.seed}", "--set", f"data.decode={decode}"])  # exits the process


def cmd_swap(args: argparse.Namespace) -> None:
    from dctnet.models.checkpoint import load_state_dict, num_classes_of  # noqa: PLC0415
    from dctnet.train.pipeline import build_pipeline  # noqa: PLC0415
    from dctnet.train.recipe import load_recipe  # noqa: PLC0415
    from dctnet.train.recipe_model import build_recipe_model  # noqa: PLC0415

    torch.set_num_threads(2)
    print("| run (trained with) | val top-1, exact decode | val top-1, float decode | predictions agree |")
    print("|---|---:|---:|---:|")
    for run in map(Path, args.runs):
        if not (run / "last.pt").is_file() or not (run / "recipe.yaml").is_file():
            raise SystemExit(f"{run}: not a finished run (it needs last.pt and recipe.yaml)")
        state = load_state_dict(run / "last.pt")
        preds = {}
        for decode in ("exact", "float"):
            r = load_recipe(run / "recipe.yaml", [f"data.decode={decode}"])
            model = build_recipe_model(r, num_classes_of(state) or 0)
            model.load_state_dict(state)
            model.eval()
            pipe = build_pipeline(r, torch.device("cpu"))
            got, want = [], []
            with torch.no_grad():
                for x, target, _ in pipe.batches(train=False):
                    got.append(model(x).argmax(1))
                    want.append(target)
            preds[decode] = (torch.cat(got), torch.cat(want))
        top1 = {k: (p == t).double().mean().item() for k, (p, t) in preds.items()}
        agree = (preds["exact"][0] == preds["float"][0]).double().mean().item()
        trained = (run / "rung").read_text().strip() if (run / "rung").is_file() else run.name
        print(f"| {trained} ({run}) | {top1['exact']:.2%} | {top1['float']:.2%} | {agree:.2%} |", flush=True)


def cmd_table(args: argparse.Namespace) -> None:
    from dctnet.train.recipe import load_recipe  # noqa: PLC0415

    runs: dict[str, dict[int, float]] = {}
    for run in (r for r in map(Path, args.runs) if r.is_dir()):
        metrics = run / "metrics.jsonl"
        rung, _, seed = run.name.rpartition("-s")
        if not metrics.is_file() or not rung or not seed.isdigit():
            print(f"(left out: {run}, not a RUNG-sSEED run folder)", file=sys.stderr)
            continue
        rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
        if len(rows) < load_recipe(run / "recipe.yaml").optim.epochs:
            print(f"(left out: {run}, unfinished at epoch {len(rows)})", file=sys.stderr)
            continue
        runs.setdefault(rung, {})[int(seed)] = rows[-1]["val_top1"] * 100
    seeds = sorted({s for v in runs.values() for s in v})
    rgb = runs.get("rgb", {})
    print("| rung | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | gap to RGB (mean of the same seeds) |")
    print("|---|" + "---:|" * (len(seeds) + 2))
    for rung, by_seed in runs.items():
        cells = [f"{by_seed[s]:.1f}%" if s in by_seed else "" for s in seeds]
        mean = sum(by_seed.values()) / len(by_seed)
        both = [s for s in by_seed if s in rgb]
        gap = (sum(by_seed[s] - rgb[s] for s in both) / len(both)) if both else float("nan")
        print(f"| {rung} | " + " | ".join(cells) + f" | {mean:.2f}% | {gap:+.2f} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("inputs")
    q.add_argument("--samples", type=int, default=1024)
    q = sub.add_parser("train")
    q.add_argument("--rung", required=True, choices=RUNGS)
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--out", type=Path, required=True)
    q = sub.add_parser("swap")
    q.add_argument("runs", nargs="+")
    q = sub.add_parser("table")
    q.add_argument("runs", nargs="+")
    args = p.parse_args(argv)
    {"inputs": cmd_inputs, "train": cmd_train, "swap": cmd_swap, "table": cmd_table}[args.cmd](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
