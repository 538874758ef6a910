"""The device step after the decode runs the same kernels on the same shapes for every batch of a
size (what CUDA graphs and torch.compile need), its launch count does not grow with the batch, and
its compiled form equals the eager one without recompiling.

Oracle for "the same kernels": the aten ops the step dispatches, recorded with a
``TorchDispatchMode`` (each op with its output shapes); a per-sample subset (``index_select`` of the
samples that drew an op) changes those shapes from batch to batch and fails the comparison."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dctnet import transforms as T
from dctnet.train.recipe import load_recipe
from dctnet.kernels.normalization import input_mean_std

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted([ROOT / "recipes" / "quickstart.yaml", *(ROOT / "recipes" / "imagenette").glob("*.yaml"),
                  *(ROOT / "recipes" / "reference").glob("*.yaml")])
DEVICE_RECIPES = [p for p in RECIPES if load_recipe(p).model.input != "rgb" and load_recipe(p).augment]


class OpRecorder(TorchDispatchMode):
    """Every aten op dispatched inside, with the shapes of its tensor outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, tuple]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat = out if isinstance(out, (tuple, list)) else (out,)
        self.ops.append((str(func), tuple(tuple(t.shape) for t in flat if isinstance(t, torch.Tensor))))
        return out


def recipe_step(path: Path, seed: int = 0) -> T.Compose:
    """A recipe's device augmentation and model input, as its pipeline builds them: the augment list
    on the pixel crops, then ToRGB with the model's normalisation (device-rgb) or ToCoefficients (dct)."""
    r = load_recipe(path)
    mean, std = input_mean_std(r.model.arch)
    ops = T.build_transform(r.augment, num_classes=10, seed=seed, mean=mean, std=std,
                            label_smoothing=r.optim.label_smoothing, interpolation=r.data.interpolation)
    last = T.ToRGB(mean, std) if r.model.input == "device-rgb" else T.ToCoefficients()
    return T.Compose([*ops.transforms, last], seed=seed)


def crops(batch: int, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Photo-like pixel crops ``(batch, 3, size, size)`` in [0, 1] and labels: what the decode hands over."""
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(batch, 3, 6, 6, generator=g)
    x = torch.nn.functional.interpolate(base, size=(size, size), mode="bicubic", align_corners=False).clamp(0, 1)
    return x, torch.randint(0, 10, (batch,), generator=g)


def executed_ops(step: T.Compose, x: torch.Tensor, labels: torch.Tensor, generator: torch.Generator):
    """The ops of the step's device half (drawing and planning are host work, done first)."""
    prepared = step.prepare(step.draw_params(x.shape, generator), x.shape, x.device)
    with OpRecorder() as rec:
        step.execute(x, labels, prepared)
    return rec.ops


def test_recorder_sees_a_subset():
    """The oracle can fail: a per-sample subset's shapes follow the draws."""
    x = torch.rand(8, 3, 4, 4)
    seqs = []
    for k in (2, 5):
        with OpRecorder() as rec:
            rows = torch.arange(k)
            x.index_copy(0, rows, x.index_select(0, rows) * 2)
        seqs.append(rec.ops)
    assert seqs[0] != seqs[1]


@pytest.mark.parametrize("path", DEVICE_RECIPES, ids=lambda p: p.stem)
def test_every_recipe_runs_the_same_ops_on_the_same_shapes_every_batch(path):
    step = recipe_step(path)
    seqs = []
    for b in range(4):  # batch 0 warms the constant caches (colour matrices, DCT bases: built once per device)
        x, labels = crops(8, 32, seed=b)
        seqs.append(executed_ops(step, x, labels, T.step_generator(0, 0, b)))
    assert len(seqs[1]) > 0
    assert seqs[1] == seqs[2] == seqs[3], path.stem


def _launches(ops) -> int:
    """The ops that run a kernel: not views (no data moves) and not bare allocations."""
    return sum(1 for name, _ in ops
               if not _is_view(name) and name.split(".")[1] not in ("empty", "empty_strided", "lift_fresh", "detach"))


def _is_view(name: str) -> bool:
    _, op, overload = name.split(".")
    return bool(getattr(getattr(torch.ops.aten, op), overload).is_view)


def _deit_launches() -> dict[int, int]:
    path = ROOT / "recipes" / "imagenette" / "vit_s16_dct_gpu.yaml"
    step = recipe_step(path)
    executed_ops(step, *crops(8, 32, seed=0), T.step_generator(0, 0, 0))  # warm the constant caches
    return {n: _launches(executed_ops(step, *crops(n, 32, seed=n), T.step_generator(0, 0, n))) for n in (32, 64)}


def test_deit_step_launches_do_not_grow_with_the_batch():
    """vit_s16_dct_gpu's device step after the decode (DeiT's list, ToCoefficients): the same
    kernel count at batch 32 and 64 (the fixed-size groups do not depend on what was drawn)."""
    counts = _deit_launches()
    assert counts[32] == counts[64], counts


def test_deit_step_launches_at_most_400_kernels():
    """The issue's budget: the PIL warp is one matmul, four gathers and a Horner evaluation, the noise
    hash one multiply per round, the sharpness smoothing two sums over unfold views (400 at the time of writing)."""
    assert max(_deit_launches().values()) <= 400


def deit_steps(synthetic_files, erase_p: float, **compile_kwargs):
    """A loader of mixed-layout JPEG crops (batches of 6) and two DeviceSteps with DeiT's list (16² bicubic
    crops, erasing at ``erase_p``): eager, and compiled with ``compile_kwargs``."""
    from dctnet import data as D

    def deit():
        return [T.RandomHorizontalFlip(), T.TimmAugment("rand-m9-mstd0.5-inc1"), T.RandomErasing(p=erase_p, mode="pixel"),
                T.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5, label_smoothing=0.1, num_classes=10)]

    files = [f for f in synthetic_files if "syn_00" in f or "syn_01" in f][:12]
    ds = D.ImageFolderDataset.from_files(files, crop=D.RandomResizedCrop(), seed=0)
    loader = D.ThreadLoader(ds, 6, threads=1, drop_last=True)
    eager = T.DeviceStep((16, 16), augment=deit(), interpolation="bicubic", seed=0)
    compiled = T.DeviceStep((16, 16), augment=deit(), interpolation="bicubic", seed=0).compile(**compile_kwargs)
    return loader, eager, compiled


def test_compiled_device_step_equals_eager_and_compiles_once(synthetic_files):
    """DeviceStep.compile on the CPU (inductor): decoded crops of mixed-layout JPEGs through DeiT's list
    into plan A's normalised RGB equal the eager step (≤ 1e-5) over 5 batches of one size — new crops,
    layouts and window sizes every batch — and dynamo compiles once (no graph after the first batch,
    no recompile). compile_step (a Compose alone) equals its eager Compose too."""
    from torch._dynamo.utils import counters

    loader, eager, compiled = deit_steps(synthetic_files, erase_p=0.25)
    torch._dynamo.reset()
    counters.clear()
    graphs = None
    n = 0
    for epoch in range(3):
        loader.set_epoch(epoch)
        for b, batch in enumerate(loader):
            gen = (0, epoch, b)
            want_x, want_y, _ = eager(batch, T.step_generator(*gen))
            got_x, got_y, _ = compiled(batch, T.step_generator(*gen))
            torch.testing.assert_close(got_x, want_x, atol=1e-5, rtol=0)
            torch.testing.assert_close(got_y, want_y, atol=1e-6, rtol=0)
            n += 1
            if n == 2:  # batch 0 ran eagerly (the warm-up that builds the constants), batch 1 compiled
                graphs = counters["stats"]["unique_graphs"]
    assert graphs == 1 and epoch == 2, dict(counters["stats"])  # one graph: no break
    assert counters["stats"]["unique_graphs"] == graphs, dict(counters["stats"])  # nothing compiled after batch 1
    assert not counters["recompiles"], dict(counters["recompiles"])

    step = T.Compose([T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4), T.ToRGB()], seed=0)
    fn = T.compile_step(step)
    for b in range(3):
        x, labels = crops(4, 16, seed=b)
        want = step(x, labels, generator=T.step_generator(0, 0, b))
        got = fn(x, labels, generator=T.step_generator(0, 0, b))
        torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(got[1], want[1], atol=1e-6, rtol=0)


#: every shipped and reference recipe whose device step has a compiled half (input device-rgb or dct)
STEP_RECIPES = [p for p in RECIPES if load_recipe(p).model.input != "rgb"]


def recipe_device_step(path: Path, size: int = 32) -> T.DeviceStep:
    """A recipe's :class:`DeviceStep` as its pipeline builds it (augment list, model input, native
    chroma, a per-(c,u,v) standardisation for coefficient models), at ``size``."""
    r = load_recipe(path)
    mean, std = input_mean_std(r.model.arch)
    ops = (T.build_transform(r.augment, num_classes=10, seed=0, mean=mean, std=std,
                             label_smoothing=r.optim.label_smoothing, interpolation=r.data.interpolation)
           if r.augment else None)
    coefficients = r.model.input == "dct"
    step = T.DeviceStep((size, size), input="coefficients" if coefficients else "rgb", augment=ops, mean=mean, std=std,
                        chroma=r.model.chroma, exact=r.data.decode == "exact", interpolation=r.data.interpolation,
                        pixels=r.data.pixels, seed=0)
    if coefficients:
        step.normalize = T.Normalize(torch.rand(3, 64), 1 + torch.rand(3, 64))
    return step


@pytest.mark.parametrize("path", STEP_RECIPES, ids=lambda p: p.stem)
def test_compiled_half_is_one_graph(path):
    """What ``train.compile: true`` compiles (:meth:`DeviceStep.compile`: the augment list, the model input,
    native chroma and the standardisation) is one graph with no break, once the eager warm-up batch has
    built the constants — and tracing it stores nothing in the constant cache (a graph's output kept
    across calls is overwritten under CUDA graphs)."""
    from dctnet.kernels import cache as kernel_cache

    step = recipe_device_step(path)
    transform = step.train_transform.set_fixed_shapes(True)
    half = lambda rgb, labels, prepared: step._tail(transform, rgb, labels, prepared)  # noqa: E731
    for b in range(2):  # the warm-up (batch 0), then the batch dynamo traces
        x, labels = crops(8, 32, seed=b)
        prepared = transform.prepare(transform.draw_params(x.shape, T.step_generator(0, 0, b)), x.shape, x.device)
        if b == 0:
            half(x, labels, prepared)
    kernel_cache.traced_misses.clear()
    torch._dynamo.reset()
    explained = torch._dynamo.explain(half)(x, labels, prepared)
    reasons = [str(r.reason).splitlines()[0] for r in explained.break_reasons]
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), reasons
    # every constant came from the cache the warm-up filled: none was built inside the graph (which would
    # also make dynamo guard on its key's absence, and recompile once an eager call stores it)
    assert not kernel_cache.traced_misses, kernel_cache.traced_misses


def test_the_packed_plan_is_unpacked_inside_one_graph():
    """On an accelerator the compiled half takes the plan as one byte buffer and its layout
    (:mod:`dctnet.transforms.transfer`) and unpacks it inside the graph (views: one graph input for CUDA
    graphs to copy, not one per tensor). The unpacked plan is the plan, bit for bit; the graph that unpacks
    it is still one graph with no break, equal to the eager step; and equal plans share one interned layout
    (what the compiled step's guards compare)."""
    from torch.utils._pytree import tree_leaves

    from dctnet.transforms.transfer import pack_plan, unpack_plan

    step = recipe_device_step(ROOT / "recipes" / "imagenette" / "vit_s16_dct_gpu.yaml")
    transform = step.train_transform.set_fixed_shapes(True)
    half = T.CompiledHalf(lambda rgb, labels, prepared: step._tail(transform, rgb, labels, prepared), backend="eager")
    layouts = []
    for b in range(2):
        x, labels = crops(8, 32, seed=b)
        plan = transform.prepare(transform.draw_params(x.shape, T.step_generator(0, 0, b)), x.shape, "cpu")
        packed = pack_plan(plan, "meta", intern=True)  # packed as for a device (the buffer stays on the host here)
        assert pack_plan(plan, "meta").layout == packed.layout
        layouts.append(packed.layout)
        assert not packed.resident and packed.buffer.dtype == torch.uint8
        for got, want in zip(tree_leaves(unpack_plan(packed.buffer, packed.layout)), tree_leaves(plan)):
            assert (torch.equal(got, want) and got.dtype == want.dtype) if isinstance(want, torch.Tensor) else got == want
    assert layouts[0] is layouts[1]
    from dctnet.transforms import transfer

    interned = len(transfer._INTERNED)
    for b in range(3):  # eager moves (exact groups: a layout nearly every batch) intern nothing: no growth
        transfer.move_plan(transform.prepare(transform.draw_params(x.shape, T.step_generator(1, 0, b)), x.shape, "cpu"),
                           "meta")
    assert len(transfer._INTERNED) == interned
    want = step._tail(transform, x, labels, plan)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(half.compiled_packed._torchdynamo_orig_callable)(
        x, labels, packed.buffer, packed.layout, packed.resident)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    got = half.compiled_packed(x, labels, packed.buffer, packed.layout, packed.resident)
    torch.testing.assert_close(got[0], want[0], atol=0, rtol=0)


def test_constants_are_not_stored_while_tracing():
    """A cold constant cache under dynamo: the constant is built in the graph, the cache stays empty (and
    the traced step is still one graph); eagerly it is stored."""
    from dctnet.kernels import cache as kernel_cache
    from dctnet.kernels import dct as KD

    kernel_cache._cache.clear()
    kernel_cache.traced_misses.clear()
    fn = lambda x: KD.block_idct(x) + 1  # noqa: E731
    x = torch.randn(2, 3, 4, 4, 64)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    assert not kernel_cache._cache and "basis" in kernel_cache.traced_misses  # built in the graph, and said so
    torch.testing.assert_close(fn(x), torch.compile(fn, backend="eager")(x))
    assert kernel_cache._cache


def test_compiled_step_never_recompiles_even_when_a_group_overflows(synthetic_files, monkeypatch):
    """DeviceStep.compile over 5 batches of one size, DeiT's list: batch 0 runs eagerly (the warm-up),
    batch 1 compiles, and batch 3 — whose erasing group overflows its capacity (forced: capacity 1), so
    its plan has a second chunk — runs eagerly instead of recompiling: one graph, 0 recompiles, and every
    batch equals the eager step's."""
    from torch._dynamo.utils import counters

    from dctnet.transforms import erasing

    loader, eager, compiled = deit_steps(synthetic_files, erase_p=0.9, backend="eager")
    torch._dynamo.reset()
    counters.clear()
    capacity = erasing.group_capacity
    b = 0
    for epoch in range(3):
        loader.set_epoch(epoch)
        for batch in loader:
            if b == 3:
                monkeypatch.setattr(erasing, "group_capacity", lambda batch, p, tail=0: 1)
            gen = (0, epoch, b)
            want_x, want_y, _ = eager(batch, T.step_generator(*gen))
            got_x, got_y, _ = compiled(batch, T.step_generator(*gen))
            torch.testing.assert_close(got_x, want_x, atol=1e-5, rtol=0)
            torch.testing.assert_close(got_y, want_y, atol=1e-6, rtol=0)
            monkeypatch.setattr(erasing, "group_capacity", capacity)
            b += 1
            if b == 5:
                break
        if b == 5:
            break
    assert compiled._compiled.eager_batches == 2  # the warm-up and the overflow
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    assert not counters["recompiles"], dict(counters["recompiles"])


@pytest.mark.parametrize("path", [ROOT / "recipes" / "imagenette" / "vit_s16_dct_gpu.yaml",
                                  ROOT / "recipes" / "imagenette" / "resnet18_exact_cpu.yaml"], ids=lambda p: p.stem)
def test_fixed_and_exact_groups_compute_the_same(path):
    """Padding the groups to a fixed size changes the shapes, not the values: the same draws with
    set_fixed_shapes(False) (exact groups) give the same output bit for bit."""
    step = recipe_step(path)
    x, labels = crops(16, 32, seed=7)
    params = step.draw_params(x.shape, T.step_generator(0, 0, 7))
    fixed = step(x, labels, params=params)
    exact = step.set_fixed_shapes(False)(x, labels, params=params)
    step.set_fixed_shapes(True)
    torch.testing.assert_close(exact, fixed, atol=0, rtol=0)


def test_an_empty_batch_passes_through():
    """A batch whose samples were all skipped (on_error: skip) still runs, fixed shapes or exact groups."""
    step = recipe_step(ROOT / "recipes" / "imagenette" / "vit_s16_dct_gpu.yaml")
    x, labels = crops(0, 32, seed=0)
    for fixed in (True, False):
        out, target = step.set_fixed_shapes(fixed)(x, labels, generator=T.step_generator(0, 0, 0))
        assert out.shape == (0, 3, 4, 4, 64) and target.shape[0] == 0


def test_exact_groups_split_pil_warps_by_axis_bit_for_bit():
    """Exact groups (a CPU's) run PIL's shears and translations as a 4-tap filter along their axis
    and one shift per row (column) instead of the general warp's 16 taps, and run blends and point
    ops one chunk per op (a blend chunk that holds no sharpness skips its filter): the same values,
    bit for bit, as the fixed-size groups, which run the general kernels on every row. The draw holds
    every warp axis and both kinds of blend chunk, or the test would prove nothing."""
    from dctnet.kernels import pil as KP
    from dctnet.kernels import policy as KPol
    from dctnet.transforms import slots as PB

    policy = T.TimmAugment("rand-m9-mstd0.5-inc1")
    step = T.Compose([policy], seed=0)
    x, labels = crops(64, 40, seed=3)
    params = step.draw_params(x.shape, T.step_generator(0, 0, 11))
    drawn = {policy.ops[k] for k in params["0"]["op"].flatten().tolist() if k >= 0}
    assert {"PilShearX", "PilShearY", "PilTranslateX", "PilTranslateY", "PilRotate", "Sharpness"} <= drawn
    plans = PB.plan_slots(policy.ops, params["0"]["op"], params["0"]["arg"], (40, 40))
    assert {ch["axes"] for plan in plans for ch in plan["warp"]} == {"x", "y", "xy"}
    assert {ch["terms"][2] for plan in plans for ch in plan["blend"]} == {True, False}
    # blends and point ops: one exact chunk per op (its own degenerate image or value map alone)
    for plan in plans:
        for g in ("blend", "point"):
            for ch in plan.get(g, []):
                rows = ch["rows"].tolist()
                assert len({int(params["0"]["op"][r, plans.index(plan)]) for r in rows}) == 1
    fixed = step(x, labels, params=params)
    exact = step.set_fixed_shapes(False)(x, labels, params=params)
    torch.testing.assert_close(exact, fixed, atol=0, rtol=0)
    # the 1-D kernels against the 16-tap one on the same rows, not only through the policy: every axis,
    # a non-square image, shears and translations that push rows partly or wholly outside
    g = torch.Generator().manual_seed(5)
    for size in ((40, 40), (37, 53)):
        img = torch.rand(16, 3, *size, generator=g)
        for name, axes in (("PilShearX", "x"), ("PilShearY", "y"), ("PilTranslateX", "x"), ("PilTranslateY", "y")):
            span = 0.7 if "Shear" in name else 1.3 * size[1 if axes == "x" else 0]
            arg = (torch.rand(16, generator=g, dtype=torch.float64) - 0.5) * span
            arg[:3] = torch.tensor([0.0, 0.5, -0.25], dtype=torch.float64)  # identity, half and quarter pixels
            data = KPol.pil_warp_data([name], torch.zeros(16, dtype=torch.long), arg, size)
            fill = torch.tensor([0.5, 0.4, 0.3])
            one_axis = KP.pil_bicubic_affine(img, data, fill, axes)
            torch.testing.assert_close(one_axis, KP.pil_bicubic_affine(img, data, fill), atol=0, rtol=0)
            assert (one_axis == fill.view(1, 3, 1, 1)).any() and (one_axis != fill.view(1, 3, 1, 1)).any()
        # rotations: exact groups gather the 16 taps one by one, fixed groups a row of four at a time
        data = KPol.pil_warp_data(["PilRotate"], torch.zeros(16, dtype=torch.long),
                                  torch.linspace(-30.0, 30.0, 16, dtype=torch.float64), size)
        torch.testing.assert_close(KP.pil_bicubic_affine(img, data, fill, one_by_one=True),
                                   KP.pil_bicubic_affine(img, data, fill), atol=0, rtol=0)


@pytest.mark.parametrize("make,want", [
    (lambda: T.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=10), {(True, False), (False, True), "one box"}),
    (lambda: T.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, mode="elem", prob=0.7, num_classes=10), {(True, True)}),
    (lambda: T.MixUp(alpha=1.0, num_classes=10), {(True, False)}),
    (lambda: T.CutMix(alpha=1.0, num_classes=10), {(False, True), "one box"}),
], ids=["timm-batch", "timm-elem", "tv-mixup", "tv-cutmix"])
def test_exact_mixers_skip_the_half_nobody_uses_bit_for_bit(make, want):
    """With exact groups the mixers skip the blend when every mixed sample pastes a box and the paste
    when none does (timm's batch mode is one or the other), and copy the box as a slice when every
    sample pastes the same one ("one box": timm's batch CutMix, torchvision's CutMix): the same pixels
    and targets, bit for bit, as the fixed-shape kernel that computes both, over draws that include
    each case."""
    step = T.Compose([make()], seed=0)
    x, labels = crops(8, 24, seed=5)
    cases = set()
    for s in range(12):
        params = step.draw_params(x.shape, T.step_generator(0, 0, s))
        p = next(iter(params.values()))
        cut = p.get("cutmix", torch.zeros_like(p["mixed"]))
        cases.add((bool((p["mixed"] & ~cut).any()), bool((p["mixed"] & cut).any())))
        if bool((p["mixed"] & cut).all()) and bool((p["boxes"] == p["boxes"][:1]).all()) and p["boxes"][0, 2] > 0:
            cases.add("one box")
        fixed = step.set_fixed_shapes(True)(x, labels, params=params)
        exact = step.set_fixed_shapes(False)(x, labels, params=params)
        for a, b in zip(exact, fixed):
            torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert want <= cases, cases  # (some sample blends, some sample pastes): the draws hold each case


def test_a_compose_writes_only_into_its_own_intermediates(monkeypatch):
    """Exact groups write a policy's and erasing's rows into the batch in place, and Mixup and ToRGB
    compute in place, when the Compose made that batch (dctnet.transforms.groups.may_overwrite) instead
    of copying it: never into the caller's input, nor into the input of a transform nested in a
    RandomChoice, whose caller still reads it. The outputs and targets are those of each transform
    run alone on a copy, over mixup and CutMix batches."""
    from dctnet.transforms import base as TB

    flags = []
    run_groups = TB.run_groups

    def recording(x, groups, kernel, *, overwrite=False):
        flags.append(overwrite)
        return run_groups(x, groups, kernel, overwrite=overwrite)

    for module in ("dctnet.transforms.slots", "dctnet.transforms.erasing"):
        monkeypatch.setattr(f"{module}.run_groups", recording)
    x, labels = crops(12, 32, seed=9)
    step = T.Compose([T.RandomHorizontalFlip(), T.TimmAugment("rand-m9-mstd0.5-inc1"),
                      T.RandomChoice([T.TimmAugment("rand-m9-mstd0.5-inc1"), T.RandomErasing(p=1.0, mode="pixel")]),
                      T.RandomErasing(p=0.5, mode="pixel"),
                      T.RandomChoice([T.MixUp(alpha=1.0, num_classes=10), T.CutMix(alpha=1.0, num_classes=10)]),
                      T.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=10), T.ToRGB()], seed=0).set_fixed_shapes(False)
    for s in range(4):  # Mixup's draws: mixup and CutMix batches
        params = step.draw_params(x.shape, T.step_generator(0, 0, s))
        given = x.clone()
        out, target = step(x, labels, params=params)
        assert torch.equal(x, given)  # the caller's batch is untouched
        ref, ref_target = x, labels
        for i, t in enumerate(step.transforms):  # each alone: its input is the caller's, so it copies
            ref, ref_target = T.Compose([t], seed=0).set_fixed_shapes(False)(ref.clone(), ref_target,
                                                                             params={"0": params[str(i)]})
        torch.testing.assert_close(out, ref, atol=0, rtol=0)
        torch.testing.assert_close(target, ref_target, atol=0, rtol=0)
    assert True in flags and False in flags  # written in place (the list's own), and copied (nested)


def test_noise_hashed_in_32_bit_lanes_is_the_same_noise():
    """Exact groups hand erasing's noise its key halves as int32 (split_keys(lanes=int32)): the same
    hash in 32-bit lanes, bit for bit the int64 noise the fixed-size groups compute — keys with the
    top bit of either half set, odd element counts, and the int64 fallback past int32's counters."""
    from dctnet.transforms import erasing as E

    keys = torch.tensor([0, 1, 2**31, 2**32 - 1, 2**32, 2**62 + 12345, 2**63 - 1, -(2**63), -12345])
    lanes = E.split_keys(keys, torch.int32)
    assert lanes.dtype == torch.int32
    for shape in ((3, 37, 53), (1, 5, 7)):
        torch.testing.assert_close(E.normal_noise(lanes, shape), E.normal_noise(E.split_keys(keys), shape), atol=0, rtol=0)
    torch.testing.assert_close(E.normal_noise(lanes, (3, 37, 53)), E.normal_noise(keys, (3, 37, 53)), atol=0, rtol=0)
