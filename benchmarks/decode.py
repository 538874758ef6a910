#!/usr/bin/env python3
"""Decode benchmark: dctnet's coefficient read against the raw libjpeg floor and RGB decoders.

One run, same machine state, methods interleaved pass by pass; per method the median over
passes of the mean µs/image, and ratios. Two sets:

- ``imagenette``: Imagenette val photos (224×224, mostly 4:2:0) from $DCTNET_DATA or
  ../shared/data/imagenette (skipped if absent);
- ``512q90``: 512×512 4:2:0 quality-90 JPEGs this script makes (Imagenette photos resized, or
  synthetic photos when Imagenette is absent), cached in .bench-data/.

Methods (all from memory, one thread unless stated):
- ``raw libjpeg floor``: jpeg_create/read_header/jpeg_read_coefficients/destroy timed inside C
  (no Python, no dequantization, no copy) — the cost any coefficient reader must pay — with the
  libjpeg vendored in the extension (libjpeg-turbo 2.1.5, third_party/);
- ``system libjpeg floor``: the same calls against the system's libjpeg (``benchmarks/system_floor.c``,
  built here when the system has libjpeg's header; absent otherwise) — both libraries side by side;
- ``dctnet.read_coefficients``: Python call → ready int16 numpy planes, dequantized;
- ``Pillow``, ``torchvision.io.decode_jpeg`` (CPU), ``simplejpeg``: full RGB decodes;
- ``jpeglib.read_dct``: another coefficient reader (reads from a path).
Threads: images/s with 1 and 2 threads (dctnet: read_coefficients_batch; others: a thread pool).

    python benchmarks/decode.py [--images 600] [--passes 7]
"""

from __future__ import annotations

import argparse
import io
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # idle BLAS threads spin and steal a core
os.environ.setdefault("OMP_NUM_THREADS", "1")

import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import dctnet  # noqa: E402
from dctnet import _jpeg  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DCTNET_DATA", ROOT.parent / "shared" / "data" / "imagenette"))
CACHE = ROOT / ".bench-data"


def load_imagenette(n: int) -> list[Path]:
    files = sorted((DATA / "val").glob("*/*.JPEG"))
    if not files:
        return []
    step = max(1, len(files) // n)
    return files[::step][:n]


def make_512_set(n: int, sources: list[Path]) -> list[Path]:
    from PIL import Image

    from dctnet.synthetic import synthetic_image

    out = CACHE / "512q90"
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    rng = np.random.default_rng(0)
    for i in range(n):
        p = out / f"{i:04d}.jpg"
        if not p.exists():
            if sources:
                im = Image.open(sources[i % len(sources)]).convert("RGB").resize((512, 512), Image.BICUBIC)
            else:
                im = Image.fromarray(synthetic_image(rng, 512, 512))
            im.save(p, "JPEG", quality=90, subsampling="4:2:0")
        paths.append(p)
    return paths


def decoders() -> dict[str, object]:
    """name -> function(bytes, path) doing one decode; unavailable libraries are left out."""
    import torch

    torch.set_num_threads(1)
    # decode_jpeg only reads its input: wrapping read-only bytes is safe, so skip the warning
    warnings.filterwarnings("ignore", message="The given buffer is not writable")
    fns: dict[str, object] = {}

    def dct_read(data, path):
        return dctnet.read_coefficients(data).planes

    fns["dctnet.read_coefficients"] = dct_read

    from PIL import Image

    def pil(data, path):
        im = Image.open(io.BytesIO(data))
        im.load()
        return im if im.mode == "RGB" else im.convert("RGB")

    fns["Pillow (RGB)"] = pil
    try:
        from torchvision.io import ImageReadMode, decode_jpeg

        def tv(data, path):
            return decode_jpeg(torch.frombuffer(data, dtype=torch.uint8), mode=ImageReadMode.RGB)

        fns["torchvision decode_jpeg (RGB)"] = tv
    except ImportError:
        pass
    try:
        import simplejpeg

        fns["simplejpeg (RGB)"] = lambda data, path: simplejpeg.decode_jpeg(data, colorspace="RGB")
    except ImportError:
        pass
    try:
        import jpeglib

        jpeglib.version.set("turbo210")
        fns["jpeglib.read_dct (path)"] = lambda data, path: jpeglib.read_dct(str(path)).Y
    except ImportError:
        pass
    return fns


RAW = "raw libjpeg floor (C)"
SYSTEM = "system libjpeg floor (C)"


def system_floor():
    """ctypes function timing one read with the system's libjpeg, or None where it cannot be built."""
    import ctypes
    import shutil
    import subprocess
    import tempfile

    if shutil.which("gcc") is None:
        return None
    so = Path(tempfile.mkdtemp(prefix="dctnet-floor-")) / "system_floor.so"
    src = Path(__file__).with_name("system_floor.c")
    built = subprocess.run(["gcc", "-O3", "-shared", "-fPIC", str(src), "-ljpeg", "-o", str(so)], capture_output=True)
    if built.returncode != 0:
        return None
    lib = ctypes.CDLL(str(so))
    lib.system_floor_ns.restype = ctypes.c_int64
    lib.system_floor_ns.argtypes = [ctypes.c_char_p, ctypes.c_ulong]
    v = lib.system_floor_version()
    print(f"system libjpeg: {'libjpeg-turbo %d.%d.%d' % (v // 1000000, v // 1000 % 1000, v % 1000) if v else 'libjpeg'}; "
          f"vendored: {dctnet.codec.libjpeg_version()}")
    return lambda data, path: lib.system_floor_ns(data, len(data))
RGB_DECODERS = ("Pillow (RGB)", "torchvision decode_jpeg (RGB)", "simplejpeg (RGB)")


def time_pass(name: str, fn, blobs: list[bytes], paths: list[Path]) -> float:
    """Mean µs/image over one pass."""
    if name == RAW:
        return sum(_jpeg.time_raw(b, 1)[0] for b in blobs) / len(blobs) / 1e3
    if name == SYSTEM:
        return sum(fn(b, None) for b in blobs) / len(blobs) / 1e3
    t0 = time.perf_counter()
    for b, p in zip(blobs, paths):
        fn(b, p)
    return (time.perf_counter() - t0) / len(blobs) * 1e6


def throughput(name: str, fn, blobs: list[bytes], paths: list[Path], threads: int) -> float:
    """Images/s with ``threads`` threads (wall clock)."""
    t0 = time.perf_counter()
    if name == "dctnet.read_coefficients":
        dctnet.read_coefficients_batch(blobs, threads=threads)
    elif name == RAW:
        chunks = [blobs[i::threads] for i in range(threads)]
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda c: [_jpeg.time_raw(b, 1) for b in c], chunks))
    else:  # each thread loops over its own share: no per-image future overhead
        def share(i: int) -> None:
            for b, p in zip(blobs[i::threads], paths[i::threads]):
                fn(b, p)

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(share, range(threads)))
    return len(blobs) / (time.perf_counter() - t0)


def bench_set(label: str, paths: list[Path], passes: int) -> dict[str, dict[str, float]]:
    blobs = [p.read_bytes() for p in paths]
    floor = system_floor()
    fns = {RAW: None, **({SYSTEM: floor} if floor else {}), **decoders()}
    for name, fn in fns.items():  # warm-up (pools, caches, lazy imports)
        time_pass(name, fn, blobs[:20], paths[:20])
    per_pass: dict[str, list[float]] = {n: [] for n in fns}
    for _ in range(passes):
        for name, fn in fns.items():
            per_pass[name].append(time_pass(name, fn, blobs, paths))
    thr: dict[str, dict[int, list[float]]] = {n: {1: [], 2: []} for n in fns}
    for name, fn in fns.items():  # warm-up: the first batch page-faults in its output memory
        throughput(name, fn, blobs, paths, 2)
    for _ in range(max(3, passes // 2)):
        for name, fn in fns.items():
            for t in (1, 2):
                thr[name][t].append(throughput(name, fn, blobs, paths, t))
    res = {}
    for name in fns:
        res[name] = {"us": statistics.median(per_pass[name]),
                     "ips1": statistics.median(thr[name][1]), "ips2": statistics.median(thr[name][2])}
    return res


def report(label: str, n: int, res: dict[str, dict[str, float]]) -> list[str]:
    raw = res[RAW]["us"]
    ours = res["dctnet.read_coefficients"]["us"]
    lines = [f"### {label} ({n} images)", "",
             "| method | µs/image (1 thread) | × raw floor | img/s 1 thread | img/s 2 threads | 2-thread scaling |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, r in sorted(res.items(), key=lambda kv: kv[1]["us"]):
        lines.append(f"| {name} | {r['us']:.1f} | {r['us'] / raw:.2f} | {r['ips1']:.0f} | {r['ips2']:.0f} | "
                     f"{r['ips2'] / r['ips1']:.2f}× |")
    rgb = [(res[n]["us"], n) for n in RGB_DECODERS if n in res]
    lines.append("")
    lines.append(f"- dctnet.read_coefficients / raw libjpeg floor = **{ours / raw:.3f}** (target ≤ 1.10)")
    if rgb:
        fastest_us, fastest = min(rgb)
        lines.append(f"- fastest RGB decoder here: {fastest}, {fastest_us:.1f} µs → dctnet is "
                     f"**{fastest_us / ours:.2f}×** faster (target ≥ 1.4)")
    r = res["dctnet.read_coefficients"]
    lines.append(f"- read_coefficients_batch, 2 threads vs 1: **{r['ips2'] / r['ips1']:.2f}×** (target ≥ 1.8)")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=600, help="Imagenette val images (spread over classes)")
    ap.add_argument("--images-512", type=int, default=120)
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "decode.md"))
    args = ap.parse_args()

    print(f"dctnet {dctnet.__version__}, {dctnet.libjpeg_version()}, Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs", flush=True)
    lines = [f"dctnet {dctnet.__version__}, {dctnet.libjpeg_version()}, {os.cpu_count()} CPUs, "
             f"{args.passes} passes, medians", ""]
    imagenette = load_imagenette(args.images)
    sets = []
    if imagenette:
        sets.append((f"Imagenette val 224² ({DATA})", imagenette))
    else:
        print(f"Imagenette not found at {DATA}: skipping that set", flush=True)
    sets.append(("512×512 q90 4:2:0 (generated)", make_512_set(args.images_512, imagenette)))
    for label, paths in sets:
        print(f"\n{label}: {len(paths)} images ...", flush=True)
        res = bench_set(label, paths, args.passes)
        block = report(label, len(paths), res)
        print("\n".join(block), flush=True)
        lines += block + [""]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
