"""``dctnet bench``: what each input pipeline costs per sample on the user's own files, and how many
host cores it needs to feed a target rate.

On a folder (an image folder of class folders, or a flat folder of files; ``limit`` files spread
evenly over it) and a recipe's augmentation (or the default below), in one run, medians of
interleaved rounds:

* ``libjpeg_floor`` — the raw coefficient read in C (``jpeg_read_coefficients``, no Python): the
  cost nobody can avoid;
* ``dctnet_host`` — what dctnet's training loader does on the host: read the coefficients, draw
  the RandomResizedCrop box, slice the MCU window of the native planes, collate by layout
  (:class:`dctnet.data.ThreadLoader`, one thread);
* ``dctnet_device_step`` — :meth:`dctnet.train.pipeline.Pipeline.device_step` on the device present
  (CUDA when there is one): crop decode + resize, the recipe's augmentation list, then ToRGB
  (``device-rgb``) or the forward DCT (``dct``; a DCT ViT's per-(c,u,v) standardisation, a few
  µs, is left out: its statistics would need a pass over the data). Without a GPU it runs on the
  host CPU;
* ``dctnet_total_host`` — the host CPU dctnet takes in all: the host side plus the device step's
  host CPU (all of it without a GPU; launching its kernels with one);
* ``torchvision`` — torchvision v2 as ``model.input: rgb`` trains: Pillow decode, RandomResizedCrop,
  the recipe's list mapped one to one to torchvision's and timm's classes (the mapping the rgb arm
  uses), ToImage, ToDtype, Normalize, erasing;
* ``timm`` — ``timm.data.create_transform(is_training=True, ...)`` with the recipe's TimmAugment
  policy, flips, jitter and erasing, where the recipe has a TimmAugment/ThreeAugment entry;
  otherwise timm's transform is the torchvision mapping (``same_as: "torchvision"``).

Every figure is host CPU per sample on one core (torch limited to one thread; the floor is the wall
time of a single-threaded C loop, its CPU time on an idle core), so images/s per core is
``1e6 / µs`` and the cores a pipeline needs for ``rate`` images/s are ``rate · µs / 1e6``.
Batch mixing (Mixup, CutMix) is a batch op on the training device in both arms, so it is part of the
device step and not of the torchvision/timm host figures.

Bad files (not JPEG, empty, truncated, corrupt, unsupported, or that Pillow cannot decode) are
skipped, counted and named with the reason; every pipeline then runs on the same files. The
layout census comes from the headers of the files used.

:func:`run_bench` returns one JSON-ready dict (``dctnet bench --json`` prints it):

* ``version``: dctnet, libjpeg, torch, torchvision, timm versions; ``cpus``; ``device``;
* ``source``, ``files_found``, ``files_sampled``, ``files_used``; ``skipped``: list of
  ``{"file", "reason", "by"}`` (``by``: ``"dctnet"`` or ``"pillow"``); ``warnings``: files read
  with libjpeg warnings that lost nothing, ``{"file", "warnings"}``;
* ``census``: ``files``, ``process`` (baseline / extended / progressive / extended-arithmetic /
  progressive-arithmetic), ``color_space`` (YCbCr / RGB / gray / CMYK / YCCK / unknown),
  ``sampling`` (4:4:4 / 4:2:2 / 4:2:0 / 4:4:0 / 4:1:1 / other, over files with more than one
  component), ``layouts`` (``"colour sampling process"`` → count), ``megapixels_mean``;
* ``augment``: the list timed, ``augment_source`` (the recipe's path, or ``"default: ..."``),
  ``input`` (``device-rgb`` or ``dct``), ``crop_size``, ``scale``, ``interpolation``, ``rate``,
  ``rounds``, ``batch_size``, ``left_out`` (augment entries a library has no class for);
* ``pipelines``: ``name`` → ``{"label", "runs_on", "host_us_per_sample",
  "images_per_s_per_core", "cores_needed"}``, plus ``device_us_per_sample`` for the device step
  and ``same_as`` where a row repeats another's figures;
* ``threads``: ``{"threads", "images_per_s", "host_us_per_sample"}`` of dctnet's loader with that
  many threads (wall clock), or ``None``;
* ``notes``: the conclusions in words (what a missing GPU costs, which pipeline needs the fewest
  cores).

``measure`` and ``floor_us`` are also what ``benchmarks/loader.py`` times with, so the two agree.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch


__all__ = ["DEFAULT_AUGMENT", "census", "check_files", "floor_us", "layout_facts", "measure", "run_bench",
           "sample_files"]

#: the augmentation timed without a recipe: the per-sample part of DeiT's ImageNet recipe (timm's
#: defaults for ViTs), at 224 with bicubic crops; its Mixup is a batch op on the device
DEFAULT_AUGMENT: tuple[dict[str, Any], ...] = (
    {"name": "RandomHorizontalFlip", "p": 0.5},
    {"name": "TimmAugment", "policy": "rand-m9-mstd0.5-inc1"},
    {"name": "RandomErasing", "p": 0.25, "mode": "pixel"},
)
DEFAULT_DESCRIPTION = ("default: the per-sample part of DeiT's list (RandomHorizontalFlip 0.5, TimmAugment "
                       "rand-m9-mstd0.5-inc1, RandomErasing 0.25 pixel), RandomResizedCrop (0.08, 1) bicubic")

PROCESSES = ("baseline", "extended", "progressive", "extended-arithmetic", "progressive-arithmetic")
COLOR_SPACES = ("YCbCr", "RGB", "gray", "CMYK", "YCCK", "unknown")
SAMPLINGS = ("4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "other")


# ---------------------------------------------------------------------- measurement (shared with benchmarks/loader.py)
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


def _batch_len(batch) -> int:
    return len(batch) if not isinstance(batch, (list, tuple)) else len(batch[0])


def measure(loader, n_images: int | None = None, *, warmup: bool = True) -> tuple[float, float]:
    """``(images/s, CPU µs per image)`` for one epoch of ``loader``, after a warm-up epoch (worker
    start-up, imports and first-touch page faults are not per-sample costs). CPU time = this
    process + the persistent worker processes, read from /proc around the measured epoch.
    ``n_images``: the count the epoch must yield (checked), or ``None``."""
    if warmup:
        for _ in loader:  # warm-up epoch; starts persistent workers
            pass
    pids = worker_pids(loader)
    cpu0 = cpu_seconds() + sum(process_cpu(p) for p in pids)
    t0 = time.perf_counter()
    count = 0
    for batch in loader:
        count += _batch_len(batch)
    wall = time.perf_counter() - t0
    cpu = cpu_seconds() + sum(process_cpu(p) for p in pids) - cpu0
    if n_images is not None and count != n_images:
        raise RuntimeError(f"the loader yielded {count} images, expected {n_images}")
    return count / wall, cpu / max(count, 1) * 1e6


def floor_us(blobs: list[bytes]) -> float:
    """One pass of the raw libjpeg coefficient read over the files, mean µs per image (one core)."""
    from dctnet import _jpeg

    return sum(_jpeg.time_raw(b, 1)[0] for b in blobs) / len(blobs) / 1e3


# ---------------------------------------------------------------------- files, bad files, census
def sample_files(src: str | os.PathLike, limit: int) -> tuple[list[str], int]:
    """``(files, found)``: up to ``limit`` JPEG-named files under ``src`` (a file, a flat folder
    or a folder of class folders, searched recursively), spread evenly over the sorted list so
    every class is represented; ``found`` counts them all."""
    from dctnet.data.dataset import IMG_EXTENSIONS

    root = Path(src)
    if root.is_file():
        return [str(root)], 1
    files = sorted(str(p) for p in root.rglob("*") if p.name.lower().endswith(IMG_EXTENSIONS) and p.is_file())
    n = len(files)
    if n <= limit:
        return files, n
    return [files[int(i * n / limit)] for i in range(limit)], n


def layout_facts(h) -> dict[str, Any]:
    """What :func:`census` counts of one header (a :class:`dctnet.codec.JpegHeader`)."""
    sub = h.subsampling
    return {"process": h.process, "color_space": h.color_space, "components": h.num_components,
            "sampling": sub if sub in SAMPLINGS else "other", "factors": sub, "pixels": h.width * h.height}


def check_files(files: list[str], threads: int = 1) -> tuple[list[str], dict[str, dict], list[dict], list[dict]]:
    """Decide once which files every pipeline reads, by the rule ``dctnet train`` uses
    (:func:`dctnet.data.check_files`: a full decode under the readers' default policy, so a file
    that lost data is refused), then Pillow's decode as a guard (what the torchvision and timm
    pipelines open). Returns ``(usable, facts, skipped, warned)``: the usable paths, their header
    facts (:func:`layout_facts`), ``{"file", "reason", "by"}`` of each skipped file (``by``:
    ``"dctnet"`` or ``"pillow"``), ``{"file", "warnings"}`` of files read with warnings that lost
    nothing. Reads 8 files at a time (12-Mpixel photos: ~300 MB of planes)."""
    from PIL import Image

    from dctnet.codec import read_header
    from dctnet.data import check_files as checked

    found = checked(files, threads=threads, chunk=8)
    skipped = [{"file": f, "reason": why, "by": "dctnet"} for f, why in found.unusable.items()]
    warned = [{"file": f, "warnings": list(w)} for f, w in found.warned.items()]
    usable, facts = [], {}
    for path in files:
        if path in found.unusable:
            continue
        try:
            facts[path] = layout_facts(read_header(path))
        except (ValueError, OSError) as exc:  # changed since the check
            skipped.append({"file": path, "reason": str(getattr(exc, "reason", exc)), "by": "dctnet"})
            continue
        try:
            with Image.open(path) as im:
                im.convert("RGB")
        except Exception as exc:  # noqa: BLE001 — whatever Pillow raises for bad data, the file is skipped
            skipped.append({"file": path, "reason": f"Pillow cannot decode it ({type(exc).__name__}: {exc})",
                            "by": "pillow"})
            del facts[path]
            continue
        usable.append(path)
    return usable, facts, skipped, warned


def census(facts: list[dict[str, Any]]) -> dict[str, Any]:
    """Layout counts from header facts (:func:`check_files`): coding process, colour space,
    chroma sampling (files with more than one component) and the combined layout."""
    process = Counter(f["process"] for f in facts)
    color = Counter(f["color_space"] for f in facts)
    sampling = Counter(f["sampling"] for f in facts if f["components"] > 1)
    layouts = Counter(f"{f['color_space']} {f['factors'] if f['components'] > 1 else ''} {f['process']}".replace("  ", " ")
                      for f in facts)
    return {"files": len(facts),
            "process": {k: process.get(k, 0) for k in PROCESSES} | {k: v for k, v in process.items() if k not in PROCESSES},
            "color_space": {k: color.get(k, 0) for k in COLOR_SPACES} | {k: v for k, v in color.items()
                                                                        if k not in COLOR_SPACES},
            "sampling": {k: sampling.get(k, 0) for k in SAMPLINGS},
            "layouts": dict(layouts.most_common()),
            "megapixels_mean": round(sum(f["pixels"] for f in facts) / max(1, len(facts)) / 1e6, 3)}


# ---------------------------------------------------------------------- the pipelines
def bench_recipe(recipe: str | None, size: int | None = None):
    """The recipe timed: ``recipe`` with ``data.image_size = size`` when given, or the default
    augmentation at 224 (:data:`DEFAULT_AUGMENT`). dctnet's arm runs ``device-rgb`` for a recipe
    whose input is ``rgb`` (the torchvision arm is the same recipe's baseline)."""
    from dctnet.train.recipe import load_recipe

    over: dict[str, Any] = {}
    if recipe is None:
        over = {"augment": [dict(s) for s in DEFAULT_AUGMENT], "model": {"input": "device-rgb"},
                "data": {"image_size": 224, "interpolation": "bicubic", "scale": [0.08, 1.0]}}
    if size is not None:
        over.setdefault("data", {})["image_size"] = size
    r = load_recipe(recipe, over or None)
    if r.model.input == "rgb":
        r = dataclasses.replace(r, model=dataclasses.replace(r.model, input="device-rgb"))
    return r


def _mappable(r) -> tuple[list[dict], list[str]]:
    """The augment entries torchvision/timm have a class for (per-sample ones), and the names of
    those left out (dctnet-only transforms)."""
    from dctnet import transforms as T
    from dctnet.train.pipeline import _baseline_op

    kept, left = [], []
    for spec in r.augment:
        if spec["name"] in T.MIXERS:
            continue
        try:
            _baseline_op(spec, r, 0)
        except ValueError:
            left.append(spec["name"])
            continue
        kept.append(spec)
    return kept, left


def torchvision_transform(r):
    """The rgb arm's training transform for recipe ``r`` (crop and the recipe's list on the PIL
    image, then tensor, normalise, erase), built with the pipeline's own one-to-one mapping."""
    from torchvision.transforms import v2

    from dctnet.train.pipeline import _baseline_augment
    from dctnet.transforms.normalization import input_mean_std

    kept, _ = _mappable(r)
    before, after = _baseline_augment(dataclasses.replace(r, augment=kept))
    crop = v2.RandomResizedCrop(r.data.image_size, scale=tuple(r.data.scale),
                                interpolation=v2.InterpolationMode(r.data.interpolation), antialias=True)
    norm = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(*input_mean_std(r.model.arch))]
    return v2.Compose([crop, *before, *norm, *after])


def timm_transform(r) -> tuple[Any, list[str]] | None:
    """timm's ``create_transform(is_training=True, ...)`` for the recipe's list, and the entries
    it cannot express; ``None`` when the list has no timm policy (timm's transform is then the
    torchvision mapping)."""
    from dctnet.train.pipeline import _spec_args
    from dctnet.transforms.normalization import input_mean_std

    kept, _ = _mappable(r)
    if not any(s["name"] in ("TimmAugment", "ThreeAugment") for s in kept):
        return None
    from timm.data import create_transform

    from dctnet.train.pipeline import _with_pillow12_posterize

    kw: dict[str, Any] = {"hflip": 0.0, "vflip": 0.0, "color_jitter": None}
    missing = []
    for spec in kept:
        name, a = spec["name"], _spec_args(spec)
        if name == "RandomHorizontalFlip":
            kw["hflip"] = a["p"]
        elif name == "RandomVerticalFlip":
            kw["vflip"] = a["p"]
        elif name == "RandomGrayscale":
            kw["grayscale_prob"] = a["p"]
        elif name == "ColorJitter":
            kw["color_jitter"] = tuple(float(v) if not isinstance(v, tuple) else v[1] for v in
                                       (a["brightness"], a["contrast"], a["saturation"], a["hue"]))
            if a["p"] < 1:
                kw["color_jitter_prob"] = a["p"]
        elif name in ("TimmAugment", "ThreeAugment"):
            kw["auto_augment"] = a.get("policy", "3a")
        elif name == "RandomErasing" and a["mode"] is not None:
            kw.update(re_prob=a["p"], re_mode=a["mode"], re_count=a["max_count"] or a["min_count"])
        else:
            missing.append(name)
    mean, std = input_mean_std(r.model.arch)
    tf = create_transform(input_size=r.data.image_size, is_training=True, scale=tuple(r.data.scale),
                          interpolation=r.data.interpolation, mean=mean, std=std, **kw)
    for t in getattr(tf, "transforms", []):  # posterize with 0 bits as on Pillow < 13, as the training baseline
        _with_pillow12_posterize(t)
    return tf, missing


class PilFolder(torch.utils.data.Dataset):
    """Files decoded as torchvision's ImageFolder does (Pillow, ``convert("RGB")``), then ``transform``."""

    def __init__(self, files: list[str], transform) -> None:
        self.files, self.transform = files, transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        from PIL import Image

        with open(self.files[i], "rb") as f:
            img = Image.open(f).convert("RGB")
        return self.transform(img), 0


def _device_step_timer(r, loader, device: torch.device, num_classes: int):
    """A function timing one pass of :meth:`Pipeline.device_step` over ``loader``'s batches:
    ``(device seconds, host CPU seconds to run or launch it, images)``. Each batch is moved to the
    device untimed (the prefetcher's job, overlapped in training), then the step alone is timed:
    CPU time of this thread (torch runs one intra-op thread here, so on the CPU that is all of the
    step; the loader thread preparing the next batch is not counted), and on CUDA the wall time
    between synchronisations, the CPU taken before the second one (the launches). Batches are not
    kept, so memory stays that of a training loop whatever the photos' size."""
    from dctnet.train.pipeline import Pipeline
    from dctnet.transforms import step_generator

    pipe = Pipeline(r, device, 0, 1, None, None, num_classes, [str(i) for i in range(num_classes)])
    cuda = device.type == "cuda"

    def one_pass() -> tuple[float, float, int]:
        wall = cpu = 0.0
        n = 0
        for step, batch in enumerate(loader):
            batch = batch.to(device, non_blocking=True)
            if cuda:
                torch.cuda.synchronize(device)
            cpu0, t0 = time.thread_time(), time.perf_counter()
            pipe.device_step(batch, pipe.augment, step_generator(r.train.seed, 0, step, 0))
            cpu += time.thread_time() - cpu0  # before the sync: on CUDA, the CPU the launches took
            if cuda:
                torch.cuda.synchronize(device)
            wall += time.perf_counter() - t0
            n += len(batch.labels)
        return wall, cpu, n

    return one_pass


def _row(label: str, us: float, rate: float, runs_on: str = "host", **extra) -> dict[str, Any]:
    return {"label": label, "runs_on": runs_on, "host_us_per_sample": round(us, 1),
            "images_per_s_per_core": round(1e6 / us, 1) if us > 0 else None,
            "cores_needed": round(rate * us / 1e6, 2), **extra}


def run_bench(src: str | os.PathLike, *, recipe: str | None = None, limit: int = 200, rate: float = 3000.0,
              rounds: int = 3, size: int | None = None, threads: int = 1, batch_size: int = 64,
              device: str | None = None, progress=None) -> dict[str, Any]:
    """Time every pipeline on the files under ``src`` (see the module docstring for the report's
    keys). ``threads`` > 1 also times dctnet's loader with that many threads (wall clock).
    ``progress``: an optional callable taking a line of text. Raises ``FileNotFoundError`` when
    ``src`` holds no JPEG-named file, ``ValueError`` when none of them is usable."""
    import dctnet
    from dctnet import data as D
    from dctnet import transforms as T

    say = progress or (lambda text: None)
    found_files, found = sample_files(src, limit)
    if not found_files:
        raise FileNotFoundError(f"no JPEG files (.jpg, .jpeg, .jpe, .jfif) under {src}")
    r = bench_recipe(recipe, size)
    try:
        dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError as exc:
        raise ValueError(f"device {device!r}: {exc}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: no CUDA device here (leave --device out to use the CPU)")
    say(f"checking {len(found_files)} files")
    files, facts, skipped, warned = check_files(found_files, threads=max(1, threads))
    root = Path(src) if Path(src).is_dir() else Path(src).parent

    def rel(p: str) -> str:
        try:
            return str(Path(p).relative_to(root))
        except ValueError:
            return p

    for item in skipped + warned:
        item["file"] = rel(item["file"])
    if not files:
        raise ValueError(f"none of the {len(found_files)} files under {src} is usable "
                         f"({len(skipped)} skipped; first: {skipped[0]['file']}: {skipped[0]['reason']})")
    import timm
    import torchvision

    report: dict[str, Any] = {
        "version": {"dctnet": dctnet.__version__, "libjpeg": dctnet.libjpeg_version(), "torch": torch.__version__,
                    "torchvision": torchvision.__version__, "timm": timm.__version__},
        "cpus": os.cpu_count(), "device": str(dev) + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else ""),
        "source": str(src), "files_found": found, "files_sampled": len(found_files), "files_used": len(files),
        "skipped": skipped, "warnings": warned, "census": census([facts[f] for f in files]),
        "augment": [dict(s) for s in r.augment], "augment_source": recipe or DEFAULT_DESCRIPTION,
        "input": r.model.input, "crop_size": r.data.image_size, "scale": list(r.data.scale),
        "interpolation": r.data.interpolation, "rate": rate, "rounds": rounds, "batch_size": None, "left_out": {},
        "pipelines": {}, "threads": None, "notes": []}
    batch = max(1, min(batch_size, len(files)))
    if any(s["name"] in T.MIXERS for s in r.augment) and batch % 2:
        batch = max(2, batch - 1)  # timm's Mixup mixes each sample with its mirror: even batches
    report["batch_size"] = batch
    _, left = _mappable(r)
    if left:
        report["left_out"]["torchvision"] = left
    timm_tf = timm_transform(r)
    if timm_tf is not None and timm_tf[1]:
        report["left_out"]["timm"] = timm_tf[1]

    threads_before = torch.get_num_threads()
    torch.set_num_threads(1)  # per-core figures
    try:
        blobs = [Path(f).read_bytes() for f in files]
        ds = D.ImageFolderDataset.from_files(files, crop=D.RandomResizedCrop(scale=tuple(r.data.scale)),
                                             seed=r.train.seed, on_error="skip")
        pin = dev.type == "cuda"
        host = D.ThreadLoader(ds, batch, threads=1, pin_memory=pin)
        tv_loader = torch.utils.data.DataLoader(PilFolder(files, torchvision_transform(r)), batch_size=batch,
                                                num_workers=0)
        timm_loader = None if timm_tf is None else torch.utils.data.DataLoader(
            PilFolder(files, timm_tf[0]), batch_size=batch, num_workers=0)
        # the device step's input: the host side's batches (full ones only under a mixer: even sizes)
        drop = any(s["name"] in T.MIXERS for s in r.augment) and len(files) >= batch
        step_loader = D.ThreadLoader(ds, batch, threads=1, pin_memory=pin, drop_last=drop)
        n_classes = max(2, r.model.num_classes or sum(1 for p in Path(root).iterdir() if p.is_dir()) or 2)
        step = _device_step_timer(r, step_loader, dev, n_classes)
        say("warm-up pass")
        floor_us(blobs)
        for loader in (host, tv_loader, timm_loader):
            if loader is not None:
                for _ in loader:
                    pass
        step()
        times: dict[str, list] = {k: [] for k in ("floor", "host", "device", "torchvision", "timm")}
        for i in range(rounds):  # interleaved rounds: drift over minutes hits every pipeline alike
            say(f"round {i + 1}/{rounds}")
            times["floor"].append(floor_us(blobs))
            times["host"].append(measure(host, None, warmup=False)[1])
            times["device"].append(step())
            times["torchvision"].append(measure(tv_loader, None, warmup=False)[1])
            if timm_loader is not None:
                times["timm"].append(measure(timm_loader, None, warmup=False)[1])
        if threads > 1:
            say(f"dctnet loader, {threads} threads")
            many = D.ThreadLoader(ds, batch, threads=threads, pin_memory=pin)
            runs = [measure(many, None, warmup=(i == 0)) for i in range(rounds)]
            report["threads"] = {"threads": threads, "images_per_s": round(statistics.median(x[0] for x in runs), 1),
                                 "host_us_per_sample": round(statistics.median(x[1] for x in runs), 1)}
    finally:
        torch.set_num_threads(threads_before)

    med = {k: statistics.median(v) for k, v in times.items() if k != "device" and v}
    dev_wall = statistics.median(w / n * 1e6 for w, _, n in times["device"])
    dev_cpu = statistics.median(c / n * 1e6 for _, c, n in times["device"])
    last = "ToRGB" if r.model.input == "device-rgb" else "forward DCT"
    rows = report["pipelines"]
    rows["libjpeg_floor"] = _row("raw libjpeg floor (coefficient read only, in C)", med["floor"], rate)
    rows["dctnet_host"] = _row("dctnet host: read + crop window + collate", med["host"], rate)
    on_cpu = dev.type != "cuda"
    if on_cpu:
        rows["dctnet_device_step"] = _row(f"dctnet device step on CPU: resize + augment + {last}",
                                          dev_cpu, rate, device_us_per_sample=round(dev_cpu, 1))
        rows["dctnet_total_host"] = _row("dctnet in all without a GPU: host side + device step",
                                         med["host"] + dev_cpu, rate)
    else:
        rows["dctnet_device_step"] = _row(f"dctnet device step on {dev.type}: host CPU of its launches", dev_cpu, rate,
                                          runs_on=str(dev),
                                          device_us_per_sample=round(dev_wall, 1),
                                          images_per_s_on_device=round(1e6 / dev_wall, 1) if dev_wall > 0 else None)
        rows["dctnet_total_host"] = _row("dctnet host CPU in all: host side + launches",
                                         med["host"] + dev_cpu, rate)
    rows["torchvision"] = _row("torchvision v2: Pillow + RandomResizedCrop + the list",
                               med["torchvision"], rate)
    if timm_loader is not None:
        rows["timm"] = _row("timm: Pillow + create_transform(is_training=True)",
                            med["timm"], rate)
    else:
        rows["timm"] = dict(rows["torchvision"], label="timm: the torchvision mapping (no timm policy in the list)",
                            same_as="torchvision")
    report["notes"] = _notes(report, on_cpu)
    return report


def _notes(report: dict[str, Any], on_cpu: bool) -> list[str]:
    rows, rate = report["pipelines"], report["rate"]
    host, step, total = rows["dctnet_host"], rows["dctnet_device_step"], rows["dctnet_total_host"]
    tv, tm = rows["torchvision"], rows["timm"]
    best = min((tv, tm), key=lambda x: x["host_us_per_sample"])
    best_name = "torchvision" if best is tv else "timm"
    notes = []
    if on_cpu:
        verdict = ("more host CPU than it saves" if total["host_us_per_sample"] > best["host_us_per_sample"]
                   else "still less host CPU than the baseline")
        notes.append(f"No GPU here: dctnet's device step runs on the host CPU and costs "
                     f"{step['host_us_per_sample']:.0f} µs/sample of it, so dctnet needs "
                     f"{total['host_us_per_sample']:.0f} µs/sample of host CPU in all ({total['cores_needed']:.1f} "
                     f"cores for {rate:g} img/s) against {best['host_us_per_sample']:.0f} for {best_name} "
                     f"({best['cores_needed']:.1f} cores): without a GPU dctnet costs {verdict}.")
        notes.append(f"With a GPU the host keeps only the read: {host['host_us_per_sample']:.0f} µs/sample "
                     f"({host['cores_needed']:.1f} cores for {rate:g} img/s) plus the launches.")
    else:
        notes.append(f"The device step runs on {step['runs_on']}: {step['device_us_per_sample']:.0f} µs/sample of "
                     f"device time ({step['images_per_s_on_device']:.0f} img/s on it); launching it costs the host "
                     f"{step['host_us_per_sample']:.0f} µs/sample.")
        notes.append(f"Host cores for {rate:g} img/s: dctnet {total['cores_needed']:.1f} (read + launches), "
                     f"torchvision {tv['cores_needed']:.1f}, timm {tm['cores_needed']:.1f}.")
    if report["left_out"]:
        notes.append("Left out where a library has no class for it: " +
                     "; ".join(f"{k}: {', '.join(v)}" for k, v in report["left_out"].items()) + ".")
    return notes
