#!/usr/bin/env python3
"""The device step with DeiT's augmentation list: eager vs torch.compile'd, its kernel count, its host
syncs, and its share of a ViT-S training step.

The batch: RandomResizedCrop samples of Imagenette train photos (or generated ones), as in
benchmarks/device_transforms.py. The device step = ``crops_to_rgb(batch, size, interpolation="bicubic")``
(decode + crop + resize) → DeiT's list (flip, ``TimmAugment("rand-m9-mstd0.5-inc1")``, pixel erasing at
0.25, Mixup/CutMix with label smoothing) → ``ToRGB``; draws from ``T.step_generator`` per step. Lines
(each also a row of ``--json``), tagged at their start:

- ``eager:`` ms/batch of the whole step and of the augmentation alone (median of ``--repeats`` after
  warm-up; CUDA events on a GPU, perf_counter on the CPU);
- ``compiled[MODE]:`` the same with ``T.compile_step`` (reduce-overhead = CUDA graphs, then inductor's
  default mode while the run is under ``--budget-s``; on the CPU default only), the first two calls
  apart (the eager warm-up that builds the constants, then the compile), the max abs difference to
  eager for the same generator (should be ~1e-5 or less), and the new graphs and recompiles over 5
  further batches (should be 0: fixed shapes) — a difference above 1e-3 or any new graph makes the run
  exit 1;
- ``kernels:`` per step under torch.profiler — CUDA kernel (and memcpy/memset) events on a GPU; on the
  CPU the leaf aten ops that are not views or allocations (inductor's C++ kernels are no aten ops, so the
  compiled CPU count is only what stays outside them) — at batch B and B/2: equal counts mean the launch
  count does not grow with the batch;
- ``sync-debug:`` the eager step under ``torch.cuda.set_sync_debug_mode("error")`` (CUDA only);
- ``share:`` device step / (device step + model step) for timm's ``vit_small_patch16_224`` with the DCT
  stem (``M.swap_stem``; the list ends in ``ToCoefficients``), bf16 autocast forward + backward + AdamW;
- ``bytes[DECODE, GROUPS]:`` bytes the eager step (crop + DeiT list) writes, by dtype, at
  ``--bytes-batch`` (64), summed over the outputs of every op that is not a view, for the float and the
  exact decode, with exact groups (what an eager step runs, on any device) and fixed-size ones (what a
  compiled step runs; inductor fuses its elementwise chains, so the graph writes less than this), mean
  of 2 draws. On the
  CPU the step takes its CPU kernels; ``--simulate-gpu`` (with ``tests/`` beside it) runs it under the
  tests' device tracer, so it takes the kernels a GPU runs. Only the bytes rows with ``--bytes-only``.

    python benchmarks/device_step.py [--device cuda] [--batch 256] [--size 224] [--repeats 10] [--json rows.json]
    python benchmarks/device_step.py --bytes-only --simulate-gpu    # the bytes rows alone, a GPU's kernels
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch._dynamo.utils import counters
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_transforms import deit_list, load_batch  # noqa: E402

from dctnet import transforms as T  # noqa: E402

_ALLOC = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::resize_", "aten::set_"}


def _is_view(name: str) -> bool:
    """An aten op whose outputs alias its inputs without writing (view, reshape, to a no-op, ...)."""
    op = getattr(torch.ops.aten, name.split("::", 1)[-1], None)
    try:
        schemas = [getattr(op, o)._schema for o in op.overloads()]
    except Exception:
        return False
    return any(r.alias_info is not None and not r.alias_info.is_write for s in schemas for r in s.returns)


class _BytesWritten(TorchDispatchMode):
    """Bytes of every tensor an op writes (its outputs, in-place ones included; views write nothing),
    by dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.by_dtype: dict[torch.dtype, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self.by_dtype[t.dtype] = self.by_dtype.get(t.dtype, 0) + t.numel() * t.element_size()
        return out


def bytes_rows(b: "Bench", n: int, size: tuple[int, int], simulate: bool) -> None:
    """The ``bytes[...]`` rows (module docstring)."""
    import contextlib

    host, _, _ = load_batch(n)
    if simulate:  # the tests' device tracer: marked tensors report a CUDA device, so the GPU kernels run
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from test_host_syncs import SIM_DEVICE, DeviceTracer
    where = "simulated GPU kernels" if simulate else f"{b.device} kernels"
    for exact in (False, True):
        for fixed in (False, True):
            deit = deit_list(b.device).set_fixed_shapes(fixed)
            # a tracer per configuration: it keeps what it marked alive (its taint is keyed by address)
            tracer = DeviceTracer() if simulate else None
            if tracer is not None:
                tracer.mark(deit)
                with tracer:
                    batch = host.to(SIM_DEVICE, non_blocking=True)
            else:
                batch = host.to(b.device, non_blocking=True)
            totals = []
            with tracer if tracer is not None else contextlib.nullcontext():
                deit(T.crops_to_rgb(batch, size, interpolation="bicubic", exact=exact), batch.labels,
                     generator=T.step_generator(9, 0, 0))  # constants built once, not counted
                for step in range(2):
                    with _BytesWritten() as counted:
                        deit(T.crops_to_rgb(batch, size, interpolation="bicubic", exact=exact), batch.labels,
                             generator=T.step_generator(9, 0, 1 + step))
                    totals.append(counted.by_dtype)
            del tracer, batch
            mean = {str(d).replace("torch.", ""): sum(t.get(d, 0) for t in totals) / len(totals) / 1e9
                    for d in {d for t in totals for d in t}}
            wide = mean.get("int64", 0.0) + mean.get("float64", 0.0)
            decode, groups = "exact" if exact else "float", "fixed (compiled)" if fixed else "exact (eager)"
            listed = ", ".join(f"{d} {v:.3f}" for d, v in sorted(mean.items(), key=lambda kv: -kv[1]))
            b.row(f"bytes[{decode}, {groups.split()[0]}]",
                  f"decode {decode}, groups {groups}, B={n}, {where}: GB written per step (mean of 2 draws) "
                  f"{listed}; int64 + float64 = {wide:.3f} GB", decode=decode, fixed_groups=fixed, batch=n,
                  simulated=simulate, gb_by_dtype=mean, int64_float64_gb=wide)


class Bench:
    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        self.args, self.device, self.rows, self.meta = args, device, [], {}
        self.cuda = device.type == "cuda"
        self.steps = itertools.count()
        self.failed: list[str] = []  # checks that make the run exit 1 (the compiled arms' diff and recompiles)

    def gen(self) -> torch.Generator:  # a fresh step's draws, as training does
        return T.step_generator(0, 0, next(self.steps))

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def time(self, fn, warmup: int = 2) -> float:
        """Median ms of ``fn`` over --repeats after ``warmup`` calls."""
        for _ in range(warmup):
            fn()
        self.sync()
        ms = []
        for _ in range(self.args.repeats):
            if self.cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                ms.append(a.elapsed_time(b))
            else:
                t0 = time.perf_counter()
                fn()
                ms.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ms)

    def kernels(self, fn) -> dict:
        """Kernels of one call of ``fn`` (after one warm-up call)."""
        fn()
        self.sync()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        with profile(activities=acts) as prof:
            fn()
            self.sync()
        if self.cuda:
            ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            copies = sum(e.name.startswith(("Memcpy", "Memset")) for e in ev)
            return {"kernels": len(ev) - copies, "memcpy_memset": copies}
        ev = [e for e in prof.events() if e.name.startswith("aten::") and e.name not in _ALLOC
              and not any(c.name.startswith("aten::") for c in e.cpu_children) and not _is_view(e.name)]
        return {"kernels": len(ev), "memcpy_memset": 0}

    def row(self, tag: str, text: str, **fields) -> None:
        print(f"{tag}: {text}", flush=True)
        self.rows.append({"tag": tag, **fields})
        if self.args.json is not None:  # rewritten after every row, atomically: a run killed (a timeout)
            path = self.args.json           # keeps every row measured before it, in a whole file
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            with open(tmp, "w") as f:
                f.write(json.dumps({**self.meta, "rows": self.rows}, indent=1))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=None, help="default: 256 on CUDA, 8 on the CPU")
    ap.add_argument("--size", type=int, default=224, help="output side (a multiple of 16; e.g. 64 on the CPU)")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs a row (median); default 10 CUDA, 3 CPU")
    ap.add_argument("--json", type=Path, default=None, help="write the rows here (rewritten, atomically, after each row)")
    ap.add_argument("--skip-compile", action="store_true", help="no torch.compile arm")
    ap.add_argument("--skip-train", action="store_true", help="no ViT-S training-step share")
    ap.add_argument("--bytes-batch", type=int, default=64, help="batch of the bytes rows")
    ap.add_argument("--bytes-only", action="store_true", help="only the bytes rows")
    ap.add_argument("--simulate-gpu", action="store_true",
                    help="bytes rows under the tests' device tracer: the kernels a GPU runs, on this CPU")
    ap.add_argument("--budget-s", type=float, default=90.0,
                    help="run the inductor default-mode arm (CUDA, last) only if the run is still under this")
    args = ap.parse_args()
    t_start = time.perf_counter()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    n = args.batch or (256 if cuda else 8)
    args.repeats = args.repeats or (10 if cuda else 3)
    if n < 2 or args.repeats < 1 or args.size % 16:
        ap.error("--batch must be >= 2, --repeats positive, --size a multiple of 16")
    b = Bench(args, device)
    size = (args.size, args.size)
    if args.bytes_only:
        bytes_rows(b, args.bytes_batch, size, args.simulate_gpu)
        return
    batch, _, source = load_batch(n)
    batch = batch.to(device, non_blocking=True)
    half, _, _ = load_batch(n // 2)
    half = half.to(device, non_blocking=True)
    labels = batch.labels
    name = torch.cuda.get_device_name(device) if cuda else f"CPU, {torch.get_num_threads()} threads"
    b.meta = {"device": str(device), "device_name": name, "batch": n, "size": args.size, "repeats": args.repeats,
              "source": source, "torch": torch.__version__}
    print(f"device-step: {device} ({name}), batch {n}, {args.size}², median of {args.repeats}; {source}", flush=True)

    def crop(jb=batch):
        return T.crops_to_rgb(jb, size, interpolation="bicubic")

    deit = deit_list(device)
    x = crop()
    step_ms = b.time(lambda: deit(crop(), labels, generator=b.gen()))
    aug_ms = b.time(lambda: deit(x, labels, generator=b.gen()))
    b.row("eager", f"crop+DeiT list {step_ms:8.2f} ms/batch ({n / step_ms * 1e3:8.0f} images/s); augmentation alone "
          f"{aug_ms:8.2f} ms/batch = {aug_ms / step_ms:.0%} of the step", step_ms=step_ms, aug_ms=aug_ms)

    # kernels per step, params drawn outside the profile (on the CPU the draws would be aten ops too)
    p_full = deit.draw_params(x.shape, b.gen())
    p_half = deit.draw_params((n // 2, *x.shape[1:]), b.gen())
    k_full = b.kernels(lambda: deit(crop(), labels, params=p_full))
    k_half = b.kernels(lambda: deit(crop(half), half.labels, params=p_half))
    what = "CUDA kernels" if cuda else "leaf aten ops (not views/allocations)"
    b.row("kernels", f"eager step {what}: {k_full['kernels']} at B={n}, {k_half['kernels']} at B={n // 2} "
          f"(ratio {k_full['kernels'] / max(1, k_half['kernels']):.2f}); memcpy/memset {k_full['memcpy_memset']} / "
          f"{k_half['memcpy_memset']}", eager_full=k_full, eager_half=k_half)

    if cuda:
        try:
            torch.cuda.set_sync_debug_mode("error")
            deit(crop(), labels, generator=b.gen())
            msg = "no host sync"
        except RuntimeError as e:
            msg = "host sync: " + (str(e).strip().splitlines() or ["?"])[0]
        finally:
            torch.cuda.set_sync_debug_mode(0)
        torch.cuda.synchronize(device)
        b.row("sync-debug", msg, ok=msg == "no host sync")
    else:
        b.row("sync-debug", "the check needs CUDA (torch.cuda.set_sync_debug_mode); skipped", ok=None)

    def compiled_arm(mode: str) -> None:
        torch._dynamo.reset()
        kw = {"mode": mode} if mode != "default" else {}
        step = T.compile_step(deit, **kw)
        t0 = time.perf_counter()
        step(x, labels, generator=b.gen())  # the first batch of a size runs eagerly (it builds the constants)
        step(x, labels, generator=b.gen())  # the second compiles (under CUDA graphs: warms up)
        b.sync()
        compile_s = time.perf_counter() - t0
        ref_x, ref_y = deit(x, labels, generator=T.step_generator(1, 0, 0))
        got_x, got_y = (t.clone() for t in step(x, labels, generator=T.step_generator(1, 0, 0)))
        diff = max((ref_x - got_x).abs().max().item(), (ref_y - got_y).abs().max().item())
        c_aug = b.time(lambda: step(x, labels, generator=b.gen()), warmup=3)
        c_step = b.time(lambda: step(crop(), labels, generator=b.gen()), warmup=3)
        graphs0, recomp0 = counters["stats"]["unique_graphs"], sum(counters["recompiles"].values())
        for _ in range(5):
            step(crop(), labels, generator=b.gen())
        b.sync()
        graphs = counters["stats"]["unique_graphs"] - graphs0
        recomp = sum(counters["recompiles"].values())
        k = b.kernels(lambda: step(crop(), labels, params=p_full))
        b.row(f"compiled[{mode}]", f"crop+DeiT list {c_step:8.2f} ms/batch ({c_step / step_ms:.2f}x eager); "
              f"augmentation {c_aug:8.2f} ms/batch ({c_aug / aug_ms:.2f}x eager); compile (the first two calls: "
              f"the eager warm-up, then compiling) {compile_s:.1f} s; max abs diff to eager {diff:.2e}; "
              f"new graphs over 5 batches {graphs}, "
              f"recompiles {recomp - recomp0} (total {recomp}); {what} {k['kernels']} "
              f"({k['kernels'] / max(1, k_full['kernels']):.2f}x eager)",
              mode=mode, step_ms=c_step, aug_ms=c_aug, compile_s=compile_s, max_abs_diff=diff,
              new_graphs=graphs, recompiles=recomp - recomp0, kernels=k)
        if diff > 1e-3 or recomp - recomp0 or graphs:  # a wrong graph, or one that does not stay compiled
            b.failed.append(f"compiled[{mode}]: max abs diff {diff:.2e}, {graphs} new graphs, {recomp - recomp0} "
                            "recompiles over 5 batches")

    modes = ["reduce-overhead", "default"] if cuda else ["default"]
    if not args.skip_compile:
        compiled_arm(modes[0])

    if not args.skip_train:
        import timm

        from dctnet import models as M

        model = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=1000, img_size=args.size)
        M.swap_stem(model)
        model.to(device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if cuda else {}))
        coef = T.Compose([*list(deit_list(device).transforms)[:-1], T.ToCoefficients()], seed=0).to(device)
        dev_ms = b.time(lambda: coef(crop(), labels, generator=b.gen()))
        xc, yc = coef(crop(), labels, generator=b.gen())

        def model_step() -> None:
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(xc), yc)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        model_ms = b.time(model_step)
        share = dev_ms / (dev_ms + model_ms)
        b.row("share", f"device step (crop+DeiT list→coefficients, eager) {dev_ms:8.2f} ms/batch, ViT-S/16 DCT stem "
              f"bf16 fwd+bwd+AdamW {model_ms:8.2f} ms/batch ({tuple(xc.shape)}): device step = {share:.1%} of the "
              f"training step", device_ms=dev_ms, model_ms=model_ms, share=share, input_shape=list(xc.shape))

    bytes_rows(b, args.bytes_batch, size, args.simulate_gpu)

    if not args.skip_compile and len(modes) > 1:
        if time.perf_counter() - t_start < args.budget_s:
            compiled_arm(modes[1])
        else:
            print(f"compiled[{modes[1]}]: skipped (run past --budget-s {args.budget_s:.0f} s)")
    print(f"device-step: done in {time.perf_counter() - t_start:.0f} s", flush=True)
    if b.failed:
        print("device-step: FAILED: " + "; ".join(b.failed), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
