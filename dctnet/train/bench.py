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

``floor_us`` and :func:`dctnet.train.accounting.measure` are also what ``benchmarks/loader.py`` times
with, so the two agree; the files and the census come from :mod:`dctnet.train.bench_files`.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from pathlib import Path
from typing import Any

import torch

import dctnet
from dctnet.codec import libjpeg_floor_ns
from dctnet import data as D
from dctnet import transforms as T
from dctnet.train.accounting import measure
from dctnet.train.baseline import baseline_op, train_transform, with_pillow12_posterize
from dctnet.train.bench_files import census, check_files, sample_files
from dctnet.train.pipeline import Pipeline
from dctnet.train.recipe import load_recipe
from dctnet.kernels.normalization import input_mean_std

__all__ = ["DEFAULT_AUGMENT", "bench_recipe", "floor_us", "run_bench", "timm_transform", "torchvision_transform"]

#: the augmentation timed without a recipe: the per-sample part of DeiT's ImageNet recipe (timm's
#: defaults for ViTs), at 224 with bicubic crops; its Mixup is a batch op on the device
DEFAULT_AUGMENT: tuple[dict[str, Any], ...] = (
    {"name": "RandomHorizontalFlip", "p": 0.5},
    {"name": "TimmAugment", "policy": "rand-m9-mstd0.5-inc1"},
    {"name": "RandomErasing", "p": 0.25, "mode": "pixel"},
)
DEFAULT_DESCRIPTION = ("default: the per-sample part of DeiT's list (RandomHorizontalFlip 0.5, TimmAugment "
                       "rand-m9-mstd0.5-inc1, RandomErasing 0.25 pixel), RandomResizedCrop (0.08, 1) bicubic")


# ---------------------------------------------------------------------- the libjpeg floor (shared with benchmarks/loader.py)
def floor_us(blobs: list[bytes]) -> float:
    """One pass of the raw libjpeg coefficient read over the files, mean µs per image (one core)."""
    return sum(libjpeg_floor_ns(b, 1)[0] for b in blobs) / len(blobs) / 1e3


# ---------------------------------------------------------------------- the pipelines
def bench_recipe(recipe: str | None, size: int | None = None):
    """The recipe timed: ``recipe`` with ``data.image_size = size`` when given, or the default
    augmentation at 224 (:data:`DEFAULT_AUGMENT`). dctnet's arm runs ``device-rgb`` for a recipe
    whose input is ``rgb`` (the torchvision arm is the same recipe's baseline)."""
    over: dict[str, Any] = {}
    if recipe is None:
        over = {"augment": [dict(s) for s in DEFAULT_AUGMENT], "model": {"input": "device-rgb"},
                "data": {"image_size": 224, "interpolation": "bicubic", "scale": [0.08, 1.0]}}
    if size is not None:
        over.setdefault("data", {})["image_size"] = size
    r = load_recipe(recipe, over or None)
    if r.detection:  # its step is a whole-image geometric program, not the classification crop timed here
        raise ValueError(f"dctnet bench times classification pipelines; {recipe} is a detection recipe "
                         "(benchmarks/detection_trees.py reports its input pipeline's host CPU beside torchvision's)")
    if r.model.input == "rgb":
        r = dataclasses.replace(r, model=dataclasses.replace(r.model, input="device-rgb"))
    return r


def _mappable(r) -> tuple[list[dict], list[str]]:
    """The augment entries torchvision/timm have a class for (per-sample ones), and the names of
    those left out (dctnet-only transforms)."""
    kept, left = [], []
    for spec in r.augment:
        if T.is_mixer_spec(spec):
            continue
        try:
            baseline_op(spec, r, 0)
        except ValueError:
            left.append(spec["name"])
            continue
        kept.append(spec)
    return kept, left


def torchvision_transform(r):
    """The rgb arm's training transform for recipe ``r`` (crop and the recipe's list on the PIL
    image, then tensor, normalise, erase), built with the baseline's own one-to-one mapping
    (:func:`dctnet.train.baseline.train_transform`) of the entries torchvision and timm have."""
    kept, _ = _mappable(r)
    return train_transform(dataclasses.replace(r, augment=kept))


def timm_transform(r) -> tuple[Any, list[str]] | None:
    """timm's ``create_transform(is_training=True, ...)`` for the recipe's list, and the entries
    it cannot express; ``None`` when the list has no timm policy (timm's transform is then the
    torchvision mapping)."""
    kept, _ = _mappable(r)
    if not any(s["name"] in ("TimmAugment", "ThreeAugment") for s in kept):
        return None
    from timm.data import create_transform  # slow to import: only this row needs it

    kw: dict[str, Any] = {"hflip": 0.0, "vflip": 0.0, "color_jitter": None}
    missing = []
    for spec in kept:  # each op's declared translation (Transform.timm_kwargs)
        stated = T.timm_kwargs(spec)
        if stated is None:
            missing.append(spec["name"])
        else:
            kw.update(stated)
    mean, std = input_mean_std(r.model.arch)
    tf = create_transform(input_size=r.data.image_size, is_training=True, scale=tuple(r.data.scale),
                          interpolation=r.data.interpolation, mean=mean, std=std, **kw)
    for t in getattr(tf, "transforms", []):  # posterize with 0 bits as on Pillow < 13, as the training baseline
        with_pillow12_posterize(t)
    return tf, missing


class PilFolder(torch.utils.data.Dataset):
    """Files decoded as torchvision's ImageFolder does (Pillow, ``convert("RGB")``), then ``transform``."""

    def __init__(self, files: list[str], transform) -> None:
        self.files, self.transform = files, transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        from PIL import Image  # optional dependency (the test extras), as for the torchvision arm

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
            pipe.device_step(batch, pipe.augment, T.step_generator(r.train.seed, 0, step, 0))
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
    say = progress or (lambda text: None)
    found_files, found = sample_files(src, limit)
    if not found_files:
        raise FileNotFoundError(f"no JPEG files (.jpg, .jpeg, .jpe, .jfif) under {src}")
    r = bench_recipe(recipe, size)
    dev = _bench_device(device)
    say(f"checking {len(found_files)} files")
    files, facts, skipped, warned = check_files(found_files, threads=max(1, threads))
    root = Path(src) if Path(src).is_dir() else Path(src).parent
    for item in skipped + warned:
        item["file"] = _relative(item["file"], root)
    if not files:
        raise ValueError(f"none of the {len(found_files)} files under {src} is usable "
                         f"({len(skipped)} skipped; first: {skipped[0]['file']}: {skipped[0]['reason']})")
    report = _report_head(src, recipe, r, dev, rate, rounds, {
        "files_found": found, "files_sampled": len(found_files), "files_used": len(files), "skipped": skipped,
        "warnings": warned, "census": census([facts[f] for f in files])})
    batch = max(1, min(batch_size, len(files)))
    if any(T.is_mixer_spec(s) for s in r.augment) and batch % 2:
        batch = max(2, batch - 1)  # timm's Mixup mixes each sample with its mirror: even batches
    report["batch_size"] = batch
    _, left = _mappable(r)
    if left:
        report["left_out"]["torchvision"] = left
    timm_tf = timm_transform(r)
    if timm_tf is not None and timm_tf[1]:
        report["left_out"]["timm"] = timm_tf[1]
    times, report["threads"] = _time_pipelines(r, files, root, batch, dev, rounds, threads,
                                               None if timm_tf is None else timm_tf[0], say)
    report["pipelines"].update(_rows(times, r, dev, rate, timm_tf is not None))
    report["notes"] = _notes(report, dev.type != "cuda")
    shuffle = _stream_mixing(r)
    if shuffle is not None:
        report["shuffle_quality"] = shuffle
        report["notes"].append(f"The recipe's training stream ({r.data.threads} loader threads): "
                               f"{shuffle['describe']}" + ("; far from a uniform shuffle — rewrite the shards with "
                                                           "`dctnet shards write` or raise data.interleave"
                                                           if shuffle["poor"] else ""))
    return report


def _bench_device(device: str | None) -> torch.device:
    """``device``, or CUDA where there is one, else the CPU; ``ValueError`` for one that is not here."""
    try:
        dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError as exc:
        raise ValueError(f"device {device!r}: {exc}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: no CUDA device here (leave --device out to use the CPU)")
    return dev


def _relative(path: str, root: Path) -> str:
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return path


def _report_head(src, recipe: str | None, r, dev: torch.device, rate: float, rounds: int,
                 files: dict[str, Any]) -> dict[str, Any]:
    """The report's keys in order, with what is known before anything is timed (``files``: the
    keys from ``files_found`` to ``census``)."""
    import timm  # slow to import: only the report's versions need it here
    import torchvision  # optional dependency (the test extras), as for the torchvision arm

    return {
        "version": {"dctnet": dctnet.__version__, "libjpeg": dctnet.libjpeg_version(), "torch": torch.__version__,
                    "torchvision": torchvision.__version__, "timm": timm.__version__},
        "cpus": os.cpu_count(), "device": str(dev) + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else ""),
        "source": str(src), **files,
        "augment": [dict(s) for s in r.augment], "augment_source": recipe or DEFAULT_DESCRIPTION,
        "input": r.model.input, "crop_size": r.data.image_size, "scale": list(r.data.scale),
        "interpolation": r.data.interpolation, "rate": rate, "rounds": rounds, "batch_size": None, "left_out": {},
        "pipelines": {}, "threads": None, "notes": []}


def _time_pipelines(r, files: list[str], root: Path, batch: int, dev: torch.device, rounds: int, threads: int,
                    timm_tf, say) -> tuple[dict[str, list], dict[str, Any] | None]:
    """Per-image times of every pipeline over ``rounds`` interleaved rounds after a warm-up pass,
    torch on one thread (per-core figures); and dctnet's loader with ``threads`` threads (wall
    clock) when ``threads`` > 1, else ``None``."""
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
            PilFolder(files, timm_tf), batch_size=batch, num_workers=0)
        # the device step's input: the host side's batches (full ones only under a mixer: even sizes)
        drop = any(T.is_mixer_spec(s) for s in r.augment) and len(files) >= batch
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
        multi = None
        if threads > 1:
            say(f"dctnet loader, {threads} threads")
            many = D.ThreadLoader(ds, batch, threads=threads, pin_memory=pin)
            runs = [measure(many, None, warmup=(i == 0)) for i in range(rounds)]
            multi = {"threads": threads, "images_per_s": round(statistics.median(x[0] for x in runs), 1),
                     "host_us_per_sample": round(statistics.median(x[1] for x in runs), 1)}
    finally:
        torch.set_num_threads(threads_before)
    return times, multi


def _rows(times: dict[str, list], r, dev: torch.device, rate: float, timm_timed: bool) -> dict[str, dict[str, Any]]:
    """The report's ``pipelines`` from the timed rounds (medians)."""
    med = {k: statistics.median(v) for k, v in times.items() if k != "device" and v}
    dev_wall = statistics.median(w / n * 1e6 for w, _, n in times["device"])
    dev_cpu = statistics.median(c / n * 1e6 for _, c, n in times["device"])
    last = "ToRGB" if r.model.input == "device-rgb" else "forward DCT"
    rows = {}
    rows["libjpeg_floor"] = _row("raw libjpeg floor (coefficient read only, in C)", med["floor"], rate)
    rows["dctnet_host"] = _row("dctnet host: read + crop window + collate", med["host"], rate)
    if dev.type != "cuda":
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
    if timm_timed:
        rows["timm"] = _row("timm: Pillow + create_transform(is_training=True)",
                            med["timm"], rate)
    else:
        rows["timm"] = dict(rows["torchvision"], label="timm: the torchvision mapping (no timm policy in the list)",
                            same_as="torchvision")
    return rows


def _stream_mixing(r) -> dict[str, Any] | None:
    """The shuffle quality of a recipe's streamed training set (``data.source: shards``) as its
    loader reads it, from the label members only; ``None`` for other sources."""
    if r.data.source != "shards":
        return None
    from dctnet.data.shards import TarShardDataset  # lazy: shards only
    from dctnet.data.shuffle_quality import shards_quality  # (as above)

    root = Path(r.data.root)
    ds = TarShardDataset(str(root / r.data.train), rank=0, world_size=1, interleave=r.data.interleave,
                         buffer=r.data.buffer, seed=r.train.seed)
    q = shards_quality(ds, r.data.batch_size, max(1, r.data.threads), num_classes=r.model.num_classes or None)
    return {"distinct": q.distinct, "uniform_distinct": q.uniform_distinct, "entropy": q.entropy,
            "uniform_entropy": q.uniform_entropy, "batches": q.batches, "poor": q.poor, "describe": q.describe()}


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
