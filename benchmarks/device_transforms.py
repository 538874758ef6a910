#!/usr/bin/env python3
"""Device-transform throughput: ms per batch and images/s of dctnet's device step, and (``--ops``)
of every augmentation op and policy, beside the per-sample CPU cost of timm's and torchvision's
own implementation of the same policy.

The batch: RandomResizedCrop samples of Imagenette train photos (``$DCTNET_DATA`` or
``../shared/data/imagenette``; generated photos where it is absent, or with ``--layouts mix`` a
realistic mix of layouts, decoded one group per layout), read by the ThreadLoader. Default batch:
256 at 224² on CUDA, 32 on the CPU (so that a CPU run takes minutes; the batch is printed).

Rows (always), the device step as :meth:`dctnet.train.pipeline.Pipeline.device_step` runs it —
``crops_to_rgb(batch, size, interpolation=...)`` → an augmentation ``Compose`` on the pixels →
``ToRGB`` (plan A) or ``ToCoefficients`` + ``Normalize`` (plan B):

- the decode + crop + resize to RGB (bilinear, bicubic, and libjpeg's integer ``exact`` decode);
- plan A / plan B with flip, ``ColorJitter(0.4, 0.4, 0.4, 0.1)`` and ``RandomRequantize``.

``--ops`` adds, on the bicubic crops of the same batch:

- one row per op kernel of the policies (every name of ``dctnet.transforms.policy_base.KERNELS``
  but Identity), applied to the whole batch at a representative mid-range argument (torchvision's
  ops with nearest interpolation and black fill, timm's PIL ops with bicubic and the mean fill);
- ``ColorJitter``, ``RandomErasing(p=1, mode="pixel")``, timm's ``Mixup(0.8, 1.0)``;
- the policies as drawn per sample (host draws included): ``RandAugment(2, 9)``,
  ``TrivialAugmentWide``, ``AutoAugment``, ``TimmAugment("rand-m9-mstd0.5-inc1")``, ``ThreeAugment``;
- DeiT's training list (flip, ``rand-m9-mstd0.5-inc1``, pixel erasing at 0.25, Mixup/CutMix with
  label smoothing) → ``ToRGB``, alone and as the whole device step with the bicubic crop;
- the reference: µs per sample on one core (``torch.set_num_threads(1)``, thread CPU time) of
  timm's DeiT train transform (``create_transform``) and of torchvision v2's RandomResizedCrop +
  flip + RandAugment / TrivialAugmentWide / AutoAugment on PIL + ToImage/ToDtype/Normalize +
  RandomErasing, both from the same files (decode included; batch-level Mixup is not a per-sample
  cost and is left out), against dctnet's host side for the same samples (the ThreadLoader read
  of the windows, one thread), as a ratio.

The host allocator keeps freed memory for reuse by default, as ``dctnet train`` runs
(:func:`dctnet.hostmem.keep_freed_host_memory`; ``--host-allocator system`` for the C library's
defaults, under which the CPU rows pay a page fault for every page of every large temporary).

Medians of ``--repeats`` (CUDA-synchronised on a GPU); on a shared machine read the ratios.
``--json PATH`` writes every row (with the fastest run too, ``min_ms_per_batch``: on a loaded CPU the
median of a few runs can be several times the unloaded cost).

    python benchmarks/device_transforms.py [--device cuda] [--batch 256] [--size 224] [--layouts mix] [--ops]
                                           [--repeats 10] [--paired-rounds 21] [--json rows.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from dctnet import data as D
from dctnet import transforms as T
from dctnet.hostmem import keep_freed_host_memory
from dctnet.train.baseline import with_pillow12_posterize
from dctnet.transforms import policy_base as AA

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DCTNET_DATA", ROOT.parent / "shared" / "data" / "imagenette"))
DEIT_POLICY = "rand-m9-mstd0.5-inc1"


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


def load_batch(n: int, layouts: str = "420") -> tuple[T.JpegBatch, list[str], str]:
    """``n`` RandomResizedCrop samples: Imagenette train photos (``layouts="420"``, as stored) or
    generated photos — 4:2:0, or the realistic mix of layouts (``"mix"``) in one batch. Returns
    the batch, its files in batch order and where they came from."""
    train = DATA / "train"
    source = f"Imagenette train ({train})"
    if layouts == "mix" or not train.is_dir():
        train = _synthetic_folder(n, layouts)
        source = "generated photos, " + ("a realistic mix of layouts" if layouts == "mix" else "4:2:0")
    ds = D.ImageFolderDataset(train, crop=D.RandomResizedCrop(), seed=0)
    batch = next(iter(D.ThreadLoader(ds, n, threads=2)))
    return batch, [ds.samples[i][0] for i in batch.index.tolist()], source


# ---------------------------------------------------------------------- timing
class Table:
    """Timed rows: median ms per batch (CUDA-synchronised), images/s; kept for --json."""

    def __init__(self, device: torch.device, n: int, repeats: int) -> None:
        self.device, self.n, self.repeats = device, n, repeats
        self.rows: list[dict] = []

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def time(self, section: str, name: str, fn: Callable[[], object], warmup: int = 1) -> float:
        for _ in range(warmup):
            fn()
        self.sync()
        times = []
        for _ in range(self.repeats):
            t0 = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - t0)
        dt = statistics.median(times)
        self.rows.append({"section": section, "name": name, "ms_per_batch": dt * 1e3, "images_per_s": self.n / dt,
                          "min_ms_per_batch": min(times) * 1e3, "batch": self.n})
        print(f"  {name:60s} {dt * 1e3:9.2f} ms/batch {self.n / dt:10.0f} images/s", flush=True)
        return dt


def one_core_us(fn: Callable[[], int], repeats: int) -> float:
    """Median over ``repeats`` of the calling thread's CPU µs per sample of ``fn`` (which returns
    how many samples it processed)."""
    per = []
    for _ in range(repeats):
        t0 = time.thread_time()
        n = fn()
        per.append((time.thread_time() - t0) / n * 1e6)
    return statistics.median(per)


# ---------------------------------------------------------------------- the op table
def _op_argument(name: str, size: int) -> tuple[float, str]:
    """A representative mid-range argument of each kernel (in its units) and how it reads."""
    tv_translate = float(int(150.0 / 331.0 * size / 2))     # RandAugment's range at mid bin, int pixels
    pil_translate = 0.45 / 2 * size                            # timm's TranslateXRel at level 0.5 (fractional)
    table = {
        "ShearX": (0.15, "shear 0.15"), "ShearY": (0.15, "shear 0.15"),
        "TranslateX": (tv_translate, f"{tv_translate:.0f} px"), "TranslateY": (tv_translate, f"{tv_translate:.0f} px"),
        "Rotate": (15.0, "15 deg"),
        "PilShearX": (0.15, "shear 0.15"), "PilShearY": (0.15, "shear 0.15"),
        "PilTranslateX": (pil_translate, f"{pil_translate:.1f} px"),
        "PilTranslateY": (pil_translate, f"{pil_translate:.1f} px"),
        "PilRotate": (15.0, "15 deg"),
        "Brightness": (1.45, "x1.45"), "Color": (1.45, "x1.45"), "Contrast": (1.45, "x1.45"),
        "Sharpness": (1.45, "x1.45"),
        "Posterize": (6.0, "6 bits"), "Solarize": (0.5, "threshold 0.5"), "SolarizeAdd": (55.0 / 255.0, "+55/255"),
        "GaussianBlur": (1.0, "sigma 1"),
    }
    return table.get(name, (0.0, "-"))


def op_rows(tab: Table, x: torch.Tensor, labels: torch.Tensor, size: int) -> None:
    device, n = x.device, x.shape[0]
    timm_fill = torch.tensor(T.TimmAugment(DEIT_POLICY).fill, dtype=x.dtype, device=device)
    tv_ctx, pil_ctx = AA.Context("nearest", None), AA.Context("bicubic", timm_fill)
    print("op kernels on the whole batch (torchvision's: nearest, black fill; timm's Pil*: bicubic, mean fill):")
    for name, kernel in AA.KERNELS.items():
        if kernel is None:
            continue
        value, reads = _op_argument(name, size)
        ctx = pil_ctx if name.startswith("Pil") else tv_ctx
        arg = torch.full((n,), value, dtype=torch.float64, device=device)
        tab.time("op", f"{name} ({reads})", lambda k=kernel, a=arg, c=ctx: k(x, a, c))

    print("transforms (drawn per sample on the host, applied batched):")
    for name, t in (("ColorJitter(0.4, 0.4, 0.4, 0.1)", T.ColorJitter(0.4, 0.4, 0.4, 0.1, seed=0)),
                    ("RandomErasing(p=1, mode='pixel')", T.RandomErasing(p=1.0, mode="pixel", seed=0))):
        t = t.to(device).set_fixed_shapes(device.type != "cpu")
        tab.time("transform", name, lambda t=t: t(x))
    mix = T.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=1000, seed=0).to(device)
    tab.time("transform", "Mixup(0.8, 1.0)", lambda: mix(x, labels))

    print("policies as drawn (per-sample ops; host draws included; fixed-size groups on an accelerator, exact "
          "groups on the CPU, as dctnet train runs them):")
    for name, t in (("RandAugment(2, 9)", T.RandAugment(2, 9, seed=0)),
                    ("TrivialAugmentWide()", T.TrivialAugmentWide(seed=0)),
                    ("AutoAugment(imagenet)", T.AutoAugment(seed=0)),
                    (f"TimmAugment('{DEIT_POLICY}')", T.TimmAugment(DEIT_POLICY, seed=0)),
                    ("ThreeAugment()", T.ThreeAugment(seed=0))):
        t = t.to(device).set_fixed_shapes(device.type != "cpu")
        tab.time("policy", name, lambda t=t: t(x))


def deit_list(device: torch.device) -> T.Compose:
    """DeiT's training augmentation (timm's train.py defaults for DeiT) → normalised RGB."""
    compose = T.Compose([T.RandomHorizontalFlip(), T.TimmAugment(DEIT_POLICY), T.RandomErasing(p=0.25, mode="pixel"),
                         T.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5, label_smoothing=0.1,
                                 num_classes=1000),
                         T.ToRGB()], seed=0).to(device)
    # as dctnet train's eager step runs it, on any device: exact groups (fixed-size ones when compiled)
    return compose.set_fixed_shapes(False)


def crops_to_rgb_bicubic(batch: T.JpegBatch, size: int) -> torch.Tensor:
    return T.crops_to_rgb(batch, (size, size), interpolation="bicubic")


# ---------------------------------------------------------------------- the CPU references
def reference_rows(files: list[str], size: int, repeats: int, deit_device_s: float | None, n_device: int,
                   device: torch.device, rounds: int = 21) -> list[dict]:
    """µs per sample on one core: timm's and torchvision's per-sample transforms from the files
    (PIL decode included), and dctnet's host read of the same samples."""
    import timm.data
    from PIL import Image
    from torchvision.transforms import v2

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        random.seed(0)  # timm's and torchvision's PIL policies draw from Python's random

        def per_sample(tf) -> Callable[[], int]:
            def run() -> int:
                for f in files:
                    with Image.open(f) as im:
                        tf(im.convert("RGB"))
                return len(files)
            return run

        norm = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(T.IMAGENET_MEAN),
                                                                                   list(T.IMAGENET_STD))]

        def tv(policy) -> v2.Compose:
            return v2.Compose([v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip(), policy, *norm,
                               v2.RandomErasing(p=0.25)])

        deit_tf = timm.data.create_transform(size, is_training=True, auto_augment=DEIT_POLICY, interpolation="bicubic",
                                             re_prob=0.25, re_mode="pixel")
        for t in deit_tf.transforms:  # Pillow 13 refuses the 0 posterize bits that -inc1 draws (~1 in 500)
            with_pillow12_posterize(t)
        refs = [
            (f"timm create_transform DeiT ({DEIT_POLICY}, RE 0.25 pixel)", deit_tf),
            ("torchvision v2 RRC+flip+RandAugment(2, 9)+norm+RE(0.25)", tv(v2.RandAugment(2, 9))),
            ("torchvision v2 RRC+flip+TrivialAugmentWide+norm+RE(0.25)", tv(v2.TrivialAugmentWide())),
            ("torchvision v2 RRC+flip+AutoAugment(imagenet)+norm+RE(0.25)",
             tv(v2.AutoAugment(v2.AutoAugmentPolicy.IMAGENET))),
        ]
        # dctnet's host side for the same files: the ThreadLoader's read of the crop windows (one thread)
        ds = D.ImageFolderDataset.from_files(files, crop=D.RandomResizedCrop(), seed=0)
        loader = D.ThreadLoader(ds, len(files), threads=1, sampler=D.EpochSampler(len(files), shuffle=False))
        epoch = iter(range(1 << 30))

        def dctnet_host() -> float:
            """CPU seconds of the loader thread for one batch of the files (new crops each call)."""
            loader.set_epoch(next(epoch))
            before = loader.cpu_seconds
            next(iter(loader))
            return loader.cpu_seconds - before

        host = [dctnet_host() / len(files) * 1e6 for _ in range(repeats + 1)]
        host_us = statistics.median(host[1:])  # the first read warms the page cache and the allocator
        results = []
        print(f"per-sample CPU cost on one core (torch.set_num_threads(1), thread CPU time; {len(files)} of the "
              f"batch's files, median of {repeats}):")
        print(f"  {'dctnet host: ThreadLoader read of the windows (1 thread)':60s} {host_us:9.1f} us/sample "
              f"{1.0:8.2f}x dctnet host")
        results.append({"section": "reference", "name": "dctnet host (ThreadLoader, 1 thread)", "us_per_sample": host_us,
                        "ratio_to_dctnet_host": 1.0, "samples": len(files)})
        for name, tf in refs:
            run = per_sample(tf)
            run()  # warm-up (imports, page cache)
            us = one_core_us(run, repeats)
            print(f"  {name:60s} {us:9.1f} us/sample {us / host_us:8.2f}x dctnet host", flush=True)
            results.append({"section": "reference", "name": name, "us_per_sample": us,
                            "ratio_to_dctnet_host": us / host_us, "samples": len(files)})
        # the comparison, one core each, the same files, the same run: timm's DeiT transform
        # (PIL decode included) + timm's Mixup on the batch, against dctnet's whole device step on the
        # CPU (bicubic crop + DeiT's list + ToRGB; exact groups, as dctnet train runs it on a CPU)
        import timm.data

        timm_tf_us = results[1]["us_per_sample"]
        mix = timm.data.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5, label_smoothing=0.1,
                              num_classes=1000)
        xb = torch.randn(len(files) - len(files) % 2, 3, size, size)
        yb = torch.randint(0, 1000, (xb.shape[0],))
        mix_us = one_core_us(lambda: (mix(xb.clone(), yb), xb.shape[0])[1], repeats)
        loader.set_epoch(next(epoch))
        batch = next(iter(loader))
        deit = deit_list(torch.device("cpu"))  # exact groups, as on every CPU
        gens = iter(range(1 << 30))

        def dctnet_step() -> int:
            deit(crops_to_rgb_bicubic(batch, size), batch.labels, generator=T.step_generator(0, 0, next(gens)))
            return len(batch)

        dctnet_step()
        step_us = one_core_us(dctnet_step, repeats)
        timm_total = timm_tf_us + mix_us
        for name, us in (("timm Mixup(0.8, 1.0, ls 0.1) on the batch", mix_us),
                         ("timm DeiT transform + Mixup (PIL decode included)", timm_total),
                         ("dctnet DeiT device step on the CPU (crop + list + ToRGB)", step_us)):
            print(f"  {name:60s} {us:9.1f} us/sample {us / host_us:8.2f}x dctnet host", flush=True)
            results.append({"section": "reference", "name": name, "us_per_sample": us,
                            "ratio_to_dctnet_host": us / host_us, "samples": len(files)})
        print(f"  dctnet's device step costs {step_us / timm_total:.2f}x timm's transform + Mixup per sample on one core "
              f"(host read {host_us:.0f} us/sample apart; dctnet total {(step_us + host_us) / timm_total:.2f}x)")
        results[-1]["ratio_to_timm_transform_and_mixup"] = step_us / timm_total
        # the same comparison paired: timm's and dctnet's rounds interleaved, one ratio per round. On a
        # shared machine the load drifts between the separate medians above; a round's two halves see
        # the same load, so the median of the rounds' ratios is the figure to read
        timm_run = per_sample(deit_tf)
        ratios = []
        for _ in range(rounds):
            t0 = time.thread_time()
            n_timm = timm_run()
            mix(xb.clone(), yb)
            timm_round = (time.thread_time() - t0) / n_timm  # the transform per file, Mixup per sample (same count)
            t0 = time.thread_time()
            n_step = dctnet_step()
            ratios.append((time.thread_time() - t0) / n_step / timm_round)
        paired = statistics.median(ratios)
        print(f"  paired over {rounds} interleaved rounds: dctnet's device step / timm's transform + Mixup = "
              f"{paired:.2f}x (median; rounds {min(ratios):.2f}-{max(ratios):.2f}x)", flush=True)
        results[-1]["paired_ratio_to_timm_transform_and_mixup"] = paired
        results[-1]["paired_ratio_range"] = [min(ratios), max(ratios)]
        if deit_device_s is not None:
            # not a one-core CPU figure: the device's wall time for the batch, per sample (timm runs the
            # same policy per sample on a core; the sum of both dctnet figures is dctnet's per-sample cost)
            us = deit_device_s / n_device * 1e6
            timm_us = results[1]["us_per_sample"]
            where = "the GPU" if device.type == "cuda" else f"the CPU, {threads} threads"
            print(f"  {'dctnet DeiT device step (above), wall, on ' + where:60s} {us:9.1f} us/sample "
                  f"{us / host_us:8.2f}x dctnet host ({us / timm_us:.3f}x timm's one-core cost)")
            results.append({"section": "reference", "name": f"dctnet DeiT device step on {device.type} (wall)",
                            "us_per_sample": us, "ratio_to_dctnet_host": us / host_us,
                            "ratio_to_timm": us / timm_us, "samples": n_device})
        return results
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=None, help="default: 256 on CUDA, 32 on the CPU")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per row (median); default 10 on CUDA, 5 on "
                    "the CPU")
    ap.add_argument("--layouts", choices=["420", "mix"], default="420",
                    help="one layout (4:2:0), or the realistic mix (one decode per layout group)")
    ap.add_argument("--ops", action="store_true", help="add the per-op / per-policy table and the CPU references")
    ap.add_argument("--ref-samples", type=int, default=64,
                    help="files of the batch the one-core references run over (default 64)")
    ap.add_argument("--no-reference", action="store_true", help="with --ops: skip the one-core CPU references")
    ap.add_argument("--paired-rounds", type=int, default=21,
                    help="interleaved timm / dctnet rounds of the paired ratio (a round's ratio on a shared machine "
                         "spreads over ±30%%: the median of a few is not a figure)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows to this file")
    ap.add_argument("--host-allocator", choices=["keep", "system"], default="keep",
                    help="keep (default): freed host memory is reused, as dctnet train and dctnet bench run "
                         "(dctnet.hostmem.keep_freed_host_memory); system: the C library's defaults, every large "
                         "temporary mapped and faulted in afresh")
    args = ap.parse_args()
    kept = args.host_allocator == "keep" and keep_freed_host_memory()
    device = torch.device(args.device)
    n = args.batch or (256 if device.type == "cuda" else 32)
    repeats = args.repeats or (10 if device.type == "cuda" else 5)
    if n < 1 or repeats < 1 or args.paired_rounds < 1 or args.size < 8 or args.size % 8:
        ap.error("--batch, --repeats and --paired-rounds must be positive, --size a multiple of 8")
    batch, files, source = load_batch(n, args.layouts)
    batch = batch.to(device, non_blocking=True)
    labels = batch.labels
    s = args.size
    size = (s, s)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    default = "256 on CUDA" if device.type == "cuda" else "32 on the CPU"
    print(f"device {device} ({name}), batch {len(batch)} (default {default}), output {s}², {repeats} timed runs a row "
          f"(median); {source}; layouts: "
          + ", ".join(f"{g.color_space} {g.sampling} x{len(g)}" for g in batch.groups)
          + f"; host allocator: {'freed memory kept for reuse' if kept else 'the C library defaults'}", flush=True)
    tab = Table(device, len(batch), repeats)

    # the device step (Pipeline.device_step): crop to pixels, augment there, then what the model takes
    aug = [T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomRequantize()]
    plan_a = T.Compose([*aug, T.ToRGB()], seed=0).to(device)
    plan_b = T.Compose([*aug, T.ToCoefficients()], seed=0).to(device)
    norm = T.Normalize(torch.zeros(3, 64), torch.full((3, 64), 100.0)).to(device)
    print("device step (crops_to_rgb → Compose on pixels → ToRGB | ToCoefficients + Normalize):")
    bilinear = tab.time("step", "crop+resize to RGB (bilinear)", lambda: T.crops_to_rgb(batch, size))
    exact = tab.time("step", "crop+resize to RGB, exact decode",
                     lambda: T.crops_to_rgb(batch, size, exact=True))
    tab.time("step", "crop+resize to RGB (bicubic)", lambda: T.crops_to_rgb(batch, size, interpolation="bicubic"))
    tab.time("step", "plan B: crop + flip/jitter/requant + coefficients + norm",
             lambda: norm(plan_b(T.crops_to_rgb(batch, size), labels)[0]))
    tab.time("step", "plan A: crop + flip/jitter/requant + normalized RGB",
             lambda: plan_a(T.crops_to_rgb(batch, size), labels))
    print(f"  exact decode costs {exact / bilinear:.2f}x the float decode", flush=True)

    reference: list[dict] = []
    if args.ops:
        x = T.crops_to_rgb(batch, size, interpolation="bicubic")
        op_rows(tab, x, labels, s)
        deit = deit_list(device)
        print("DeiT's list (flip, TimmAugment, RandomErasing(0.25, pixel), Mixup(0.8, 1.0, ls 0.1)) → ToRGB:")
        tab.time("deit", "DeiT list on the bicubic crops", lambda: deit(x, labels))
        deit_s = tab.time("deit", "DeiT device step: bicubic crop + list + ToRGB",
                          lambda: deit(T.crops_to_rgb(batch, size, interpolation="bicubic"), labels))
        if not args.no_reference:
            reference = reference_rows(files[:max(1, args.ref_samples)], s, min(repeats, 5), deit_s, len(batch),
                                       device, args.paired_rounds)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "device": str(device), "device_name": name, "batch": len(batch), "size": s, "repeats": repeats,
            "layouts": args.layouts, "source": source, "host_allocator": "keep" if kept else "system",
            "rows": tab.rows, "reference": reference,
        }, indent=1))
        print(f"rows written to {args.json}")


if __name__ == "__main__":
    main()
