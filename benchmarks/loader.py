#!/usr/bin/env python3
"""Loader benchmark: dctnet's training loader against torchvision's standard CPU pipeline.

One run on Imagenette train (from $DCTNET_DATA or ../shared/data/imagenette):

- dctnet: read coefficients + RandomResizedCrop box + MCU-window slice + collate (everything
  else happens on the device) — DataLoader with 1 and 2 workers, and the ThreadLoader;
- torchvision: ``decode_jpeg`` + v2 ``RandomResizedCrop(128)`` + ``RandomHorizontalFlip`` +
  ``ToDtype(float32, scale=True)`` + ``Normalize`` — DataLoader with 1 and 2 workers.

Per configuration: images/s (wall clock over the same samples) and CPU µs per sample (this
process and its worker processes, from getrusage). Then the device-transform cost per batch on
the CPU (crop/resize to 128² coefficients, flip, colour jitter, normalize, to RGB).

    python benchmarks/loader.py [--images 2560] [--batch 64]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

import dctnet  # noqa: E402
from dctnet import data as D  # noqa: E402
from dctnet import transforms as T  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DCTNET_DATA", ROOT.parent / "shared" / "data" / "imagenette"))
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


def cpu_seconds() -> float:
    """This process only: worker processes are read from /proc (RUSAGE_CHILDREN would also book
    the CPU of an earlier configuration's workers, reaped while a later one is measured)."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    return s.ru_utime + s.ru_stime


def process_cpu(pid: int) -> float:
    """utime + stime of a live process, seconds (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker_pids(loader) -> list[int]:
    it = getattr(loader, "_iterator", None)
    return [w.pid for w in getattr(it, "_workers", [])] if it is not None else []


def measure(loader, n_images: int) -> tuple[float, float]:
    """(images/s, CPU µs per image) for one epoch, after a warm-up epoch (worker start-up, imports
    and first-touch page faults are not per-sample costs). CPU time = this process + the
    persistent worker processes, read from /proc around the measured epoch."""
    for _ in loader:  # warm-up epoch; starts persistent workers
        pass
    pids = worker_pids(loader)
    cpu0 = cpu_seconds() + sum(process_cpu(p) for p in pids)
    t0 = time.perf_counter()
    count = 0
    for batch in loader:
        count += len(batch) if not isinstance(batch, (list, tuple)) else len(batch[0])
    wall = time.perf_counter() - t0
    cpu = cpu_seconds() + sum(process_cpu(p) for p in pids) - cpu0
    assert count == n_images, (count, n_images)
    return count / wall, cpu / count * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=2560)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    train = DATA / "train"
    if not train.is_dir():
        sys.exit(f"Imagenette not found at {DATA} (set DCTNET_DATA)")
    full = D.ImageFolderDataset(train, crop=D.RandomResizedCrop(), seed=0)
    step = max(1, len(full) // args.images)
    subset = full.samples[::step][: args.images]
    full.samples = subset
    full.targets = [t for _, t in subset]
    n = len(subset)
    tv = TorchvisionFolder(subset)
    print(f"dctnet {dctnet.__version__}, {dctnet.libjpeg_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs; "
          f"{n} Imagenette train images, batch {args.batch}, crop {SIZE}", flush=True)

    def dct_dataloader(workers):
        return lambda: D.make_dataloader(full, args.batch, num_workers=workers, pin_memory=False,
                                         worker_init_fn=_one_thread, persistent_workers=True)

    def tv_dataloader(workers):
        return lambda: torch.utils.data.DataLoader(tv, batch_size=args.batch, shuffle=True, num_workers=workers,
                                                   worker_init_fn=_one_thread, persistent_workers=True)

    configs = [
        ("dctnet DataLoader, 1 worker", dct_dataloader(1)),
        ("dctnet DataLoader, 2 workers", dct_dataloader(2)),
        ("dctnet ThreadLoader, 2 threads", lambda: D.ThreadLoader(full, args.batch, threads=2, pin_memory=False)),
        ("torchvision DataLoader, 1 worker", tv_dataloader(1)),
        ("torchvision DataLoader, 2 workers", tv_dataloader(2)),
    ]
    results: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in configs}
    for _ in range(args.repeats):  # interleaved, medians
        for name, make in configs:
            loader = make()
            results[name].append(measure(loader, n))
            it = getattr(loader, "_iterator", None)
            if it is not None:  # stop persistent workers now, not whenever GC gets to them
                it._shutdown_workers()
            del loader
    med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in results.items()}
    print("\n| loader | images/s | CPU µs / sample |\n|---|---:|---:|")
    for name, (ips, us) in med.items():
        print(f"| {name} | {ips:.0f} | {us:.0f} |")
    tv_us = min(med["torchvision DataLoader, 1 worker"][1], med["torchvision DataLoader, 2 workers"][1])
    tv_ips = med["torchvision DataLoader, 2 workers"][0]
    print("\nAgainst torchvision's pipeline (CPU: its cheaper configuration; images/s: its 2 workers):")
    for name in ("dctnet ThreadLoader, 2 threads", "dctnet DataLoader, 2 workers", "dctnet DataLoader, 1 worker"):
        ips, us = med[name]
        print(f"- {name}: CPU per sample **{us / tv_us:.3f}×** (target ≤ 0.25), "
              f"images/s **{ips / tv_ips:.2f}×** (target ≥ 3.5)")

    # Device transforms on the CPU, one batch.
    batch = next(iter(D.ThreadLoader(full, args.batch, threads=1, pin_memory=False)))
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
    main()
