#!/usr/bin/env python3
"""Loader benchmark: dctnet's training loader against torchvision's standard CPU pipeline, on
every layout users meet.

Sets (``benchmarks/layout_sets.py``; Imagenette train photos, re-encoded with Pillow at q92):
as stored (4:2:0, 224²), 4:4:4, 4:2:2, gray, CMYK, progressive, a realistic mix (70% as stored,
15% 4:4:4, 5% 4:2:2, 5% progressive, 5% gray) and 4:2:0 at 500×375 (ImageNet's typical size).
Per set, in one run:

- floor: single-core whole-image ``jpeg_read_coefficients`` of the same files in plain C
  (create, header, read, destroy; no dequantization, no Python) — the cost nobody can avoid;
- dctnet: read coefficients + RandomResizedCrop box + MCU-window slice of the native planes +
  collate by layout (everything else happens on the device) — ThreadLoader with 2 threads, and
  DataLoader with 2 workers;
- torchvision: ``decode_jpeg`` + v2 ``RandomResizedCrop(128)`` + ``RandomHorizontalFlip`` +
  ``ToDtype(float32, scale=True)`` + ``Normalize`` — DataLoader with 2 workers.

Per configuration: images/s (wall clock over the same samples) and CPU µs per sample (this
process and its worker processes). Ratios: dctnet's CPU against the floor (target ≤ 1.5×) and
against torchvision's (≤ 0.25×), images/s against torchvision's (≥ 3.5×). ``--repeats``
interleaved rounds, each with its own floor pass; every ratio is the median of the per-round
ratios (this VM's speed drifts by ±10% over minutes, which a ratio of figures measured moments
apart cancels).

    python benchmarks/loader.py [--images 1024] [--batch 64] [--sets stored,4:4:4,...] [--folder DIR]

The floor and the loader measurement (``dctnet.train.bench.floor_us``,
``dctnet.train.accounting.measure``) are the functions ``dctnet bench`` reports with: on the same
files (``--folder``) the two agree within run-to-run noise (``dctnet bench --threads 2``'s threaded
row is this script's ThreadLoader row).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

import dctnet  # noqa: E402
from dctnet import data as D  # noqa: E402
from dctnet import transforms as T  # noqa: E402
# the measurements `dctnet bench` reports, so the two agree on the same files
from dctnet.train.accounting import measure  # noqa: E402
from dctnet.train.bench import floor_us  # noqa: E402
from dctnet.train.bench_files import census, layout_facts  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIZE = 128


def _one_thread(_: int = 0) -> None:
    torch.set_num_threads(1)


class TorchvisionFolder(torch.utils.data.Dataset):
    """The standard pipeline: file bytes → decode_jpeg → v2 train transforms."""

    def __init__(self, samples: list[tuple[str, int]]) -> None:
        from torchvision.transforms import v2

        self.samples = samples
        self.tf = v2.Compose([v2.RandomResizedCrop(SIZE, antialias=True), v2.RandomHorizontalFlip(),
                              v2.ToDtype(torch.float32, scale=True),
                              v2.Normalize(mean=list(T.IMAGENET_MEAN), std=list(T.IMAGENET_STD))])

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        from torchvision.io import ImageReadMode, decode_jpeg, read_file

        path, label = self.samples[i]
        img = decode_jpeg(read_file(path), mode=ImageReadMode.RGB)
        return self.tf(img), label


def main() -> None:
    from layout_sets import SETS, build

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--folder", help="time this image folder (class folders of JPEGs) instead of the layout sets, "
                                     "e.g. to compare with `dctnet bench FOLDER` on the same files")
    ap.add_argument("--device-transforms", action="store_true", help="also time the device transforms on this CPU")
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    print(f"dctnet {dctnet.__version__}, {dctnet.libjpeg_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs; "
          f"{'every image of ' + args.folder if args.folder else f'{args.images} images per set'}, batch {args.batch}, "
          f"crop {SIZE}, medians of {args.repeats} rounds", flush=True)
    table = []
    sets = [args.folder] if args.folder else args.sets.split(",")
    for name in sets:
        folder = name if args.folder else build(name, args.images)
        ds = D.ImageFolderDataset(folder, crop=D.RandomResizedCrop(), seed=0, on_error="skip")
        left_out = ds.check()  # a user's folder: the files dctnet train (and dctnet bench) would leave out
        if left_out:
            print(f"{name}: left out {len(left_out)} unusable files: " + "; ".join(
                f"{os.path.relpath(p, folder)}: {why}" for p, why in left_out), flush=True)
        n = len(ds)
        tv = TorchvisionFolder(ds.samples)
        blobs = [Path(p).read_bytes() for p, _ in ds.samples]
        floor_us(blobs[:8])
        configs = [
            ("dctnet ThreadLoader 2 threads", lambda: D.ThreadLoader(ds, args.batch, threads=2, pin_memory=False)),
            ("dctnet DataLoader 2 workers", lambda: D.make_dataloader(ds, args.batch, num_workers=2, pin_memory=False,
                                                                      worker_init_fn=_one_thread,
                                                                      persistent_workers=True)),
            ("torchvision DataLoader 2 workers", lambda: torch.utils.data.DataLoader(
                tv, batch_size=args.batch, shuffle=True, num_workers=2, worker_init_fn=_one_thread,
                persistent_workers=True)),
        ]
        results: dict[str, list[tuple[float, float]]] = {c: [] for c, _ in configs}
        floors = []
        for _ in range(args.repeats):  # interleaved rounds; ratios are medians of per-round ratios
            floors.append(floor_us(blobs))
            for cname, make in configs:
                loader = make()
                results[cname].append(measure(loader, n))
                it = getattr(loader, "_iterator", None)
                if it is not None:  # stop persistent workers now, not whenever GC gets to them
                    it._shutdown_workers()
                del loader
        med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in results.items()}
        tl_r, tv_r = results["dctnet ThreadLoader 2 threads"], results["torchvision DataLoader 2 workers"]
        ratios = (statistics.median(t[1] / f for t, f in zip(tl_r, floors)),      # CPU vs floor
                  statistics.median(t[1] / v[1] for t, v in zip(tl_r, tv_r)),     # CPU vs torchvision
                  statistics.median(t[0] / v[0] for t, v in zip(tl_r, tv_r)))     # images/s vs torchvision
        floor = statistics.median(floors)
        layouts = list(census([layout_facts(dctnet.read_header(p)) for p, _ in ds.samples])["layouts"])
        table.append((name, floor, med, layouts, ratios))
        tl = med["dctnet ThreadLoader 2 threads"]
        print(f"{name}: floor {floor:.0f} µs; ThreadLoader {tl[1]:.0f} µs ({ratios[0]:.2f}× floor, "
              f"{ratios[1]:.3f}× torchvision CPU, {ratios[2]:.2f}× its images/s); layouts {layouts}", flush=True)
    print("\n| set | floor µs | ThreadLoader CPU µs (× floor) | DataLoader 2w CPU µs | torchvision CPU µs | "
          "CPU vs torchvision | ThreadLoader img/s | torchvision img/s | img/s vs torchvision |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, floor, med, _, (vs_floor, vs_tv, ips) in table:
        tl, dl, tvr = med["dctnet ThreadLoader 2 threads"], med["dctnet DataLoader 2 workers"], \
            med["torchvision DataLoader 2 workers"]
        print(f"| {name} | {floor:.0f} | {tl[1]:.0f} ({vs_floor:.2f}×) | {dl[1]:.0f} | {tvr[1]:.0f} | "
              f"**{vs_tv:.3f}×** | {tl[0]:.0f} | {tvr[0]:.0f} | **{ips:.2f}×** |")
    print(f"\nworst ThreadLoader CPU vs floor: {max(t[4][0] for t in table):.2f}× (target ≤ 1.5); worst CPU vs "
          f"torchvision: {max(t[4][1] for t in table):.3f}× (≤ 0.25); worst images/s vs torchvision: "
          f"{min(t[4][2] for t in table):.2f}× (≥ 3.5). Ratios are medians of per-round ratios.")
    if args.device_transforms:
        device_transforms(ds, args.batch)


def device_transforms(ds, batch_size: int) -> None:
    """Device transforms on the CPU, one batch of the last set."""
    batch = next(iter(D.ThreadLoader(ds, batch_size, threads=1, pin_memory=False)))
    aug = T.Compose([T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4)], seed=0)
    norm = T.Normalize(torch.zeros(3, 64), torch.full((3, 64), 100.0))
    to_rgb = T.ToRGB()
    steps = {
        "crop+resize to 128² coefficients": lambda: T.crops_to_coefficients(batch, (SIZE, SIZE)),
    }
    x = T.crops_to_coefficients(batch, (SIZE, SIZE))
    steps["flip + colour jitter"] = lambda: aug(x)
    steps["normalize (per c,u,v)"] = lambda: norm(x)
    steps["to RGB (plan A output)"] = lambda: to_rgb(x)
    print(f"\n| device transform on CPU (batch {len(batch)}, 1 thread) | ms / batch | µs / sample |\n|---|---:|---:|")
    for name, fn in steps.items():
        fn()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        ms = statistics.median(times) * 1e3
        print(f"| {name} | {ms:.1f} | {ms * 1e3 / len(batch):.0f} |")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
