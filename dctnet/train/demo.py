"""``dctnet demo``: decode JPEGs to coefficients, rebuild RGB on the device with
:func:`dctnet.image.to_rgb`, and report the fidelity and the speed against Pillow — on
generated photos of every layout (:func:`demo_files`, also ``dctnet bench``'s default folder) and
on Imagenette val photos when they are present.

Pillow is an optional dependency (the test extras): it is imported inside the functions that use it.
"""

from __future__ import annotations

import collections
import io
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from dctnet.codec import libjpeg_version, read_coefficients, read_coefficients_batch
from dctnet.image import to_rgb
from dctnet.synthetic import synthetic_jpeg

__all__ = ["demo", "demo_files", "fidelity_and_speed", "imagenette_sample"]


def demo_files(out: Path) -> list[str]:
    """60 generated 224×224 photo-like JPEGs under ``out``: 4:2:0, 4:2:2, 4:4:4, progressive 4:2:0
    and gray in turn, quality 50–95."""
    variants = [dict(subsampling="4:2:0"), dict(subsampling="4:2:2"), dict(subsampling="4:4:4"),
                dict(subsampling="4:2:0", progressive=True), dict(gray=True)]
    files = []
    for i in range(60):
        v = variants[i % len(variants)]
        p = out / f"demo_{i:02d}.jpg"
        p.write_bytes(synthetic_jpeg(i, 224, 224, quality=int(50 + (i * 7) % 46), **v))
        files.append(str(p))
    return files


def imagenette_sample() -> tuple[Path, list[Path]]:
    """``(folder, photos)``: about 256 Imagenette val photos spread over ``$DCTNET_DATA`` (default:
    ``shared/data/imagenette`` beside the checkout); none when it has no ``val`` folder."""
    data = Path(os.environ.get("DCTNET_DATA", Path(__file__).resolve().parents[3] / "shared" / "data" / "imagenette"))
    real = sorted((data / "val").glob("*/*.JPEG"))[:: max(1, len(list((data / "val").glob("*/*.JPEG"))) // 256)] \
        if (data / "val").is_dir() else []
    return data, real


def demo(device: str | None = None) -> Iterator[str]:
    """The lines ``dctnet demo`` prints, each as soon as it is measured; ``device``: a torch
    device (default: cuda if available, else cpu)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    yield f"dctnet demo — {libjpeg_version()}, device: {device}"
    with tempfile.TemporaryDirectory() as tmp:
        files = demo_files(Path(tmp))
        yield (f"\nBuilt-in data: {len(files)} generated 224x224 photos-like JPEGs "
               f"(4:2:0, 4:2:2, 4:4:4, progressive, gray; quality 50-95)")
        yield from fidelity_and_speed(files, device)
    data, real = imagenette_sample()
    if real:
        yield f"\nReal photos: {len(real)} Imagenette val images from {data}"
        yield from fidelity_and_speed([str(p) for p in real], device)
    else:
        yield f"\n(Imagenette not found at {data}; set DCTNET_DATA to add real photos to the demo)"


def fidelity_and_speed(files: list[str], device: str) -> Iterator[str]:
    """Per layout, the error of :func:`dctnet.image.to_rgb` against Pillow's decode (and how
    many pixels ``exact=True`` gets wrong), then the CPU per image of the coefficient read against
    Pillow's decode and the device's to_rgb throughput: as lines of text."""
    coeffs = read_coefficients_batch(files, threads=1)
    groups: dict[tuple, list[int]] = collections.defaultdict(list)
    for i, c in enumerate(coeffs):
        groups[(c.subsampling, c.sampling, c.color_space, c.size)].append(i)
    yield from _fidelity(files, coeffs, groups, device)
    yield from _speed(files, coeffs, groups, device)


def _fidelity(files: list[str], coeffs, groups: dict[tuple, list[int]], device: str) -> Iterator[str]:
    from PIL import Image  # optional dependency (see the module docstring)

    yield (f"  {'layout':8s} {'images':>6s} {'max |err|':>10s} {'mean |err|':>11s} {'exact: pixels ≠':>16s}"
           "   (grey levels vs Pillow, RGB 0..255; exact = to_rgb(exact=True))")
    for (label, sampling, space, size), idx in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        planes = [torch.from_numpy(np.stack([coeffs[i].planes[c] for i in idx])).to(device)
                  for c in range(len(sampling))]
        rgb = to_rgb(planes, sampling, size, color_space=space)
        ours = np.round(rgb.permute(0, 2, 3, 1).cpu().double().numpy() * 255)
        exact = np.round(to_rgb(planes, sampling, size, color_space=space, exact=True).permute(0, 2, 3, 1).cpu()
                         .double().numpy() * 255)
        errs, differing = [], 0
        for k, i in enumerate(idx):
            with Image.open(files[i]) as im:
                ref = np.asarray(im.convert("RGB"), dtype=np.float64)
            errs.append(np.abs(ours[k] - ref))
            differing += int((exact[k] != ref).sum())
        err = np.stack(errs)
        yield f"  {label:8s} {len(idx):6d} {err.max():10.0f} {err.mean():11.3f} {differing:16d}"


def _speed(files: list[str], coeffs, groups: dict[tuple, list[int]], device: str) -> Iterator[str]:
    from PIL import Image  # optional dependency (see the module docstring)

    blobs = [Path(f).read_bytes() for f in files]

    def per_image(fn, passes: int = 5) -> float:
        times = []
        for _ in range(passes):
            t0 = time.perf_counter()
            for b in blobs:
                fn(b)
            times.append((time.perf_counter() - t0) / len(blobs) * 1e6)
        return statistics.median(times)

    def pil(b: bytes) -> object:
        with Image.open(io.BytesIO(b)) as im:
            return im.convert("RGB")

    ours_us = per_image(lambda b: read_coefficients(b).planes)
    pil_us = per_image(pil)
    yield (f"  CPU per image: dctnet read_coefficients {ours_us:.0f} µs vs Pillow decode to RGB {pil_us:.0f} µs "
           f"({pil_us / ours_us:.2f}x less CPU)")
    label, sampling, space, size = max(groups, key=lambda k: len(groups[k]))
    idx = groups[(label, sampling, space, size)]
    batch = [torch.from_numpy(np.stack([coeffs[i].planes[c] for i in (idx * 64)[:64]])).to(device)
             for c in range(len(sampling))]
    to_rgb(batch, sampling, size, color_space=space)
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    reps = 5
    for _ in range(reps):
        to_rgb(batch, sampling, size, color_space=space)
    if device == "cuda":
        torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / reps
    yield f"  device to_rgb ({device}, batch 64, {label} {size[1]}x{size[0]}): {64 / dt:.0f} images/s"
