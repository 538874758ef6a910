"""The transform objects as modules: nn.Module state, the base class's
probability ``p`` (and the classes that take none: the policies and the mixers, which have their
own probabilities), parameter replay, seeded Compose per (seed, epoch, step, rank), soft targets
through timm's Mixup and torchvision's MixUp / CutMix, and the recipe registry
(:mod:`dctnet.transforms.registry`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from dctnet import transforms as T
from dctnet import transforms as A
from dctnet.kernels import coefficients as TF
from dctnet.transforms import registry as R


def coeffs(n: int = 8, hb: int = 4, wb: int = 4, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    """Random in-range-ish coefficient images (B, 3, Hb, Wb, 64) from random RGB."""
    rgb = torch.rand(n, 3, 8 * hb, 8 * wb, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return TF.coefficient_image_from_rgb(rgb).to(dtype)


def changed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(B,) bool: samples that differ."""
    return (a != b).flatten(1).any(1)


def pipeline(seed: int = 0) -> A.Compose:
    """A full list: pixel ops (hue, RandAugment), exact ops, erasing, coefficient ops, timm's Mixup last."""
    return A.Compose([A.RandomHorizontalFlip(), A.ColorJitter(0.3, 0.3, 0.3, 0.2, p=0.8), A.RandomChromaRotation(20, p=0.5),
                      A.RandomGrayscale(0.3), T.RandAugment(), T.RandomErasing(0.5, value="random"),
                      A.RandomRequantize(), A.FrequencyDropout(0.1),
                      T.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, prob=0.5, mode="elem", num_classes=5)], seed=seed)


# ---------------------------------------------------------------------- nn.Module
def test_transforms_are_modules_and_normalize_stats_are_buffers(tmp_path):
    mean, std = torch.randn(3, 64), torch.rand(3, 64) + 0.5
    norm = A.Normalize(mean, std)
    assert isinstance(norm, nn.Module) and isinstance(A.RandomHorizontalFlip(), nn.Module)
    assert set(norm.state_dict()) == {"mean", "std"}
    d = norm.to(torch.float64)
    assert d is norm and norm.mean.dtype == torch.float64 and norm.std.dtype == torch.float64
    x = coeffs(2, dtype=torch.float64)
    torch.testing.assert_close(norm(x), (x - mean.double()[None, :, None, None]) / std.double()[None, :, None, None])
    comp = A.Compose([A.RandomHorizontalFlip(), norm], seed=0)
    assert isinstance(comp.transforms, nn.ModuleList) and comp.transforms[1] is norm
    assert set(comp.state_dict()) == {"transforms.1.mean", "transforms.1.std"}
    other = A.Normalize(torch.zeros(3, 64), torch.ones(3, 64))
    other.load_state_dict(norm.state_dict())
    assert torch.equal(other.mean, mean) and other.mean.dtype == torch.float32
    norm.save(tmp_path / "s.pt")
    loaded = A.Normalize.load(tmp_path / "s.pt")
    assert torch.equal(loaded.mean, mean) and torch.equal(loaded.std, std)
    assert "ToRGB" in repr(A.Compose([A.ToRGB()])) and "p=0.5" in repr(A.RandomHorizontalFlip())


# ---------------------------------------------------------------------- p in the base class
class AddOne(A.Transform):
    """A subclass that knows nothing of p: the base class must supply the coin."""

    def __init__(self, p: float = 0.5, seed: int | None = None) -> None:
        super().__init__(seed, p=p)

    def apply_transform(self, x, labels, params):
        return x + 1, labels


@pytest.mark.parametrize("make,rep", [
    (lambda p: AddOne(p, seed=1), "coefficient"),
    (lambda p: A.RandomHorizontalFlip(p, seed=1), "coefficient"),
    (lambda p: A.ColorJitter(0.5, p=p, seed=1), "coefficient"),
    (lambda p: A.ColorJitter(0.5, 0.5, 0.5, 0.3, p=p, seed=1), "pixel"),
    (lambda p: A.RandomChromaRotation(90, p=p, seed=1), "coefficient"),
    (lambda p: A.RandomGrayscale(p, seed=1), "pixel"),
    (lambda p: A.RandomRequantize((10, 20), p=p, seed=1), "coefficient"),
    (lambda p: T.RandomErasing(p, scale=(0.3, 0.5), seed=1), "coefficient"),
    (lambda p: T.RandomErasing(p, scale=(0.3, 0.5), mode="pixel", seed=1), "pixel"),
], ids=["subclass", "hflip", "jitter", "jitter-hue", "chroma-rotation", "grayscale", "requantize", "erasing",
        "erasing-timm"])
def test_probability_p_is_per_sample_and_handled_by_the_base(make, rep):
    x = coeffs(2000, 2, 2)
    if rep == "pixel":  # each transform in its own representation (no conversion around the coin)
        x = torch.rand(2000, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    assert torch.equal(make(0.0)(x), x)
    frac = {}
    for p in (1.0, 0.3):
        out, params = make(p)(x, return_params=True)
        frac[p] = changed(out, x).float().mean().item()
        if p < 1:
            mask = params["apply"]
            assert mask.shape == (2000,) and mask.dtype == torch.bool
            assert not changed(out, x)[~mask].any()  # kept where the coin said no
    # p = 1: (nearly) every sample (a box can snap to nothing on the block grid, a rotation be tiny)
    assert frac[1.0] > 0.9
    assert abs(frac[0.3] - 0.3 * frac[1.0]) < 0.04, frac


def test_p_is_validated_and_labels_pass_through_non_mixing_transforms():
    with pytest.raises(ValueError, match="p must be a probability"):
        A.RandomHorizontalFlip(1.5)
    x, y = coeffs(4), torch.arange(4)
    for t in (A.RandomHorizontalFlip(), A.ColorJitter(0.2, hue=0.1), A.RandomChromaRotation(), T.RandomErasing(),
              A.FrequencyDropout(), T.RandAugment(), T.TrivialAugmentWide(), T.AutoAugment(), T.TimmAugment(),
              T.ThreeAugment()):
        out, labels = t(x, y)
        assert labels is y and out.shape == x.shape, type(t).__name__


@pytest.mark.parametrize("cls", [T.RandAugment, T.TrivialAugmentWide, T.AutoAugment, T.TimmAugment, T.ThreeAugment,
                                 T.Mixup, T.MixUp, T.CutMix])
def test_policies_and_mixers_take_no_p(cls):
    """torchvision's policies and mixers have no probability, timm's Mixup has its own (``prob``):
    the base class's coin is off (``p=None``), and ``p`` is not an argument, nor in a recipe."""
    t = cls(num_classes=3) if cls in (T.Mixup, T.MixUp, T.CutMix) else cls()
    assert t.p is None
    with pytest.raises(TypeError, match="'p'"):
        cls(p=0.5)
    with pytest.raises(ValueError, match=rf"{cls.__name__}: unknown argument 'p'"):
        T.build_transform({"name": cls.__name__, "p": 0.5}, num_classes=3, seed=0)


# ---------------------------------------------------------------------- replay
def test_params_replay_bit_identical():
    x, y = coeffs(8), torch.arange(8) % 5
    for t in [pipeline(3), T.Mixup(0.4, 1.0, prob=0.5, mode="elem", num_classes=5, seed=2),
              T.RandomErasing(0.7, value="random", seed=4), T.RandAugment(seed=6)]:
        out, labels, params = t(x, y, return_params=True)
        again, labels2 = t(x, y, params=params)  # draws nothing: the generator has moved on
        assert torch.equal(again, out) and torch.equal(labels2, labels)
        fresh, _ = t(x, y)
        assert not torch.equal(fresh, out)
        # draw_params then replay == one call with that generator
        g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
        p = t.draw_params(x.shape, g1)
        a, la = t(x, y, params=p)
        b, lb = t(x, y, generator=g2)
        assert torch.equal(a, b) and torch.equal(la, lb)
    # the same draws on a second view: flips of x and of 2·x agree
    flip = A.RandomHorizontalFlip(seed=0)
    out, params = flip(x, return_params=True)
    assert torch.equal(flip(2 * x, params=params), 2 * out)
    with pytest.raises(ValueError, match="keys"):
        pipeline(0)(x, y, params={"0": {}})


@pytest.mark.cuda
def test_params_replay_on_the_device_view():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    x, y = coeffs(8), torch.arange(8) % 5
    t = pipeline(5)
    out, labels, params = t(x, y, return_params=True)
    xc, yc = x.cuda(), y.cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # apply makes no host sync (parameters copied asynchronously)
    try:
        dev, ldev = t(xc, yc, params=params)
        fresh = t(xc, yc)  # drawing on the host, applying on the device: no sync either
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert fresh[0].is_cuda and fresh[1].shape == (8, 5)
    # posterize / solarize / equalize are step functions of the pixels: CPU and CUDA rounding may
    # put a few pixels on the other side of a step (a coefficient off by a grey level's worth)
    close = (dev.cpu() - out).abs() <= 1e-3 + 1e-5 * out.abs()
    assert close.float().mean() > 0.99, close.float().mean()
    torch.testing.assert_close(ldev.cpu(), labels)


# ---------------------------------------------------------------------- seeded Compose
def test_compose_generator_per_seed_epoch_step_rank():
    x, y = coeffs(8), torch.arange(8) % 5
    a, b = pipeline(7), pipeline(7)
    a(x, y)  # consuming a's own generator does not matter: the step generator is fresh
    out_a = a(x, y, generator=a.generator_for(2, 10, 1))
    out_b = b(x, y, generator=b.generator_for(2, 10, 1))
    assert torch.equal(out_a[0], out_b[0]) and torch.equal(out_a[1], out_b[1])
    helper = b(x, y, generator=T.step_generator(7, 2, 10, 1))
    assert torch.equal(helper[0], out_a[0])
    for other in ((2, 11, 1), (3, 10, 1), (2, 10, 0)):
        assert not torch.equal(b(x, y, generator=b.generator_for(*other))[0], out_a[0]), other
    assert not torch.equal(pipeline(8)(x, y, generator=pipeline(8).generator_for(2, 10, 1))[0], out_a[0])
    # a pure function of the four integers (stable: not Python's hash)
    s = torch.rand(4, generator=A.step_generator(0, 1, 2, 3))
    assert torch.equal(s, torch.rand(4, generator=A.step_generator(0, 1, 2, 3)))
    with pytest.raises(TypeError, match="step"):
        A.step_generator(0, 1, 2.5, 0)


# ---------------------------------------------------------------------- soft targets
@pytest.mark.parametrize("make", [
    lambda: T.Mixup(mixup_alpha=1.0, cutmix_alpha=1.0, mode="elem", label_smoothing=0.1, num_classes=4, seed=0),
    lambda: T.Mixup(mixup_alpha=0.0, cutmix_alpha=1.0, mode="batch", label_smoothing=0.0, num_classes=4, seed=0),
    lambda: T.MixUp(1.0, num_classes=4, seed=0),
    lambda: T.CutMix(1.0, num_classes=4, seed=0),
], ids=["timm-elem", "timm-cutmix-batch", "torchvision-mixup", "torchvision-cutmix"])
def test_mixers_soft_targets(make):
    """Labels come out as λ·y + (1 − λ)·y[perm] over timm's smoothed one-hot (torchvision: plain
    one-hot), λ the area actually pasted for CutMix (block-aligned boxes on a coefficient image), the
    coefficient image mixed exactly so: λ·x + (1 − λ)·x[perm] or the partner's box."""
    n, k = 16, 4
    x, y = coeffs(n, 6, 6), torch.arange(n) % k
    t = make()
    out, soft, params = t(x, y, return_params=True)
    assert soft.shape == (n, k) and soft.dtype == torch.float32
    torch.testing.assert_close(soft.sum(1), torch.ones(n))
    perm, lam, mixed = params["perm"], params["lam"], params["mixed"]
    assert not (perm == torch.arange(n)).any()  # nobody is its own partner
    smoothing = getattr(t, "label_smoothing", 0.0)
    onehot = torch.nn.functional.one_hot(y, k).float() * (1 - smoothing) + smoothing / k
    lam32 = lam.float()
    torch.testing.assert_close(soft, lam32[:, None] * onehot + (1 - lam32[:, None]) * onehot[perm])
    assert mixed.any() and ((lam > 0.01) & (lam < 0.99)).any()  # λ really mixes
    cut = params.get("cutmix", torch.zeros(n, dtype=torch.bool))
    if cut.any():  # the box: block-aligned, λ its exact area, the partner's blocks inside and ours outside
        boxes = params["boxes"]
        assert (boxes[cut] % 8 == 0).all()
        area = (boxes[:, 2] * boxes[:, 3]).double() / 48 ** 2
        torch.testing.assert_close(lam[cut], 1 - area[cut])
        i = int(cut.nonzero()[0])
        top, left, h, w = (int(v) // 8 for v in boxes[i])
        inside = torch.zeros(6, 6, dtype=torch.bool)
        inside[top:top + h, left:left + w] = True
        assert torch.equal(out[i][:, inside], x[perm[i]][:, inside]) and torch.equal(out[i][:, ~inside], x[i][:, ~inside])
    blend = mixed & ~cut
    if blend.any():
        lb = lam[blend].float()[:, None, None, None, None]
        torch.testing.assert_close(out[blend], lb * x[blend] + (1 - lb) * x[perm[blend]])
    torch.testing.assert_close(out[~mixed], x[~mixed])
    # soft targets stay soft (and keep their dtype); the same draws mix them the same way
    target = torch.softmax(torch.randn(n, k, dtype=torch.float64), 1)
    _, soft2 = t(x, target, params=params)
    assert soft2.dtype == torch.float64
    smoothed = target * (1 - smoothing) + smoothing / k
    torch.testing.assert_close(soft2, lam[:, None] * smoothed + (1 - lam[:, None]) * smoothed[perm])
    # λ is drawn from the seeded generator
    assert torch.equal(make()(x, y)[1], soft)
    with pytest.raises(ValueError, match="num_classes"):
        type(t)(seed=0)(x, y)


def test_timm_mixup_prob_leaves_samples_unmixed():
    """timm's ``prob`` (per sample in mode elem) replaces the old per-sample ``p``: unmixed samples
    keep their (smoothed) one-hot and their pixels."""
    n, k = 64, 4
    x, y = coeffs(n, 2, 2), torch.arange(n) % k
    t = T.Mixup(mixup_alpha=1.0, cutmix_alpha=1.0, prob=0.5, mode="elem", label_smoothing=0.1, num_classes=k, seed=1)
    out, soft, params = t(x, y, return_params=True)
    keep = ~params["mixed"]
    assert 0.3 < keep.float().mean() < 0.7
    onehot = torch.nn.functional.one_hot(y, k).float() * 0.9 + 0.1 / k
    torch.testing.assert_close(soft[keep], onehot[keep])
    assert torch.equal(out[keep], x[keep])
    assert params["cutmix"].any() and (params["mixed"] & ~params["cutmix"]).any()  # switch_prob 0.5: both kinds


# ---------------------------------------------------------------------- registry
def test_build_transform_and_describe():
    assert R.build_transform is T.build_transform and R.TRANSFORMS is T.TRANSFORMS  # re-exported
    from dctnet.transforms import augment, base

    assert not any(hasattr(m, "build_transform") or hasattr(m, "TRANSFORMS") for m in (augment, base))  # one home
    t = T.build_transform({"name": "RandAugment", "num_ops": 2, "magnitude": 9}, num_classes=None, seed=3)
    assert isinstance(t, T.RandAugment) and (t.num_ops, t.magnitude, t.seed) == (2, 9, 3)
    q = T.build_transform({"name": "RandomRequantize", "quality": [40, 60], "p": 1}, num_classes=None, seed=0)
    assert q.quality == (40, 60) and q.p == 1.0
    m = T.build_transform({"name": "Mixup", "mixup_alpha": 0.8, "cutmix_alpha": 1.0, "switch_prob": 0.5},
                          num_classes=10, seed=0, label_smoothing=0.1)
    assert isinstance(m, T.Mixup) and m.num_classes == 10 and m.label_smoothing == 0.1
    assert (m.mixup_alpha, m.cutmix_alpha, m.switch_prob, m.prob, m.mode) == (0.8, 1.0, 0.5, 1.0, "batch")
    # the model's normalisation is the default of the fills (erasing in normalised units, timm's fill colour)
    e = T.build_transform({"name": "RandomErasing", "mode": "pixel"}, num_classes=None, seed=0, mean=(0.5,) * 3,
                          std=(0.5,) * 3)
    assert e.mean == (0.5,) * 3 and e.std == (0.5,) * 3
    # a spec does not set them: the recipe's two arms must erase in the same (the model's) units
    with pytest.raises(ValueError, match="model's normalisation"):
        T.build_transform({"name": "RandomErasing", "mean": [0.1, 0.2, 0.3], "std": [1, 1, 1]}, num_classes=None,
                          seed=0, mean=(0.5,) * 3, std=(0.5,) * 3)
    # timm's policies follow the training crop's interpolation unless the spec names one
    assert T.build_transform({"name": "TimmAugment"}, num_classes=None, seed=0, interpolation="bilinear").interpolation \
        == "bilinear"
    assert T.build_transform({"name": "TimmAugment", "interpolation": "bicubic"}, num_classes=None, seed=0,
                             interpolation="bilinear").interpolation == "bicubic"
    assert T.build_transform({"name": "RandAugment"}, num_classes=None, seed=0, interpolation="bilinear").interpolation \
        == "nearest"  # torchvision's default stays
    ta = T.build_transform({"name": "TimmAugment", "policy": "rand-m9-mstd0.5-inc1"}, num_classes=None, seed=0,
                           mean=(0.5,) * 3, std=(0.5,) * 3)
    assert ta.fill == (128 / 255,) * 3  # round(255 · 0.5) in 8 bits, as timm's img_mean
    cj = T.build_transform({"name": "ColorJitter", "brightness": 0.4, "hue": [-0.1, 0.05]}, num_classes=None, seed=0)
    assert cj.brightness == (0.6, 1.4) and cj.hue == (-0.1, 0.05) and cj.contrast is None
    comp = T.build_transform([{"name": "RandomHorizontalFlip"}, {"name": "CutMix"}], num_classes=10, seed=5)
    assert isinstance(comp, T.Compose) and comp.seed == 5 and comp.transforms[1].num_classes == 10
    x, y = coeffs(4), torch.arange(4)
    assert comp(x, y)[1].shape == (4, 10)
    for name in T.TRANSFORMS:  # every registered transform builds from its defaults
        kw = {"zigzag": 6} if name == "SelectFrequencies" else {}
        if T.TRANSFORMS[name].takes_transforms:  # containers: their transforms are required
            kw = {"transforms": [{"name": "RandomHorizontalFlip"}, {"name": "RandomGrayscale"}]}
        assert isinstance(T.build_transform({"name": name, **kw}, num_classes=3, seed=0), T.TRANSFORMS[name])
    for must in ("RandomHorizontalFlip", "ColorJitter", "RandomChromaRotation", "RandAugment", "TrivialAugmentWide",
                 "AutoAugment", "TimmAugment", "ThreeAugment", "Mixup", "MixUp", "CutMix", "RandomErasing",
                 "RandomRequantize"):
        assert must in T.TRANSFORMS
    assert T.MIXERS == ("Mixup", "MixUp", "CutMix")
    with pytest.raises(ValueError, match=r"unknown transform 'RandAugmnet'; did you mean 'RandAugment'"):
        T.build_transform({"name": "RandAugmnet"}, num_classes=None, seed=0)
    with pytest.raises(ValueError, match=r"unknown transform 'RandomErasng'; did you mean 'RandomErasing'"):
        T.build_transform({"name": "RandomErasng"}, num_classes=None, seed=0)
    with pytest.raises(ValueError, match=r"RandAugment: unknown argument 'num_op'; did you mean 'num_ops'"):
        T.build_transform({"name": "RandAugment", "num_op": 2}, num_classes=None, seed=0)
    # the old forms: Mixup(alpha, p), ColorJitter's chroma_rotation
    with pytest.raises(ValueError, match=r"Mixup: unknown argument 'alpha'; did you mean 'mixup_alpha'"):
        T.build_transform({"name": "Mixup", "alpha": 0.8}, num_classes=10, seed=0)
    with pytest.raises(ValueError, match=r"ColorJitter: unknown argument 'chroma_rotation'"):
        T.build_transform({"name": "ColorJitter", "chroma_rotation": 0.2}, num_classes=None, seed=0)
    with pytest.raises(ValueError, match=r"RandAugment argument 'magnitude': expected an integer, got 'high'"):
        T.build_transform({"name": "RandAugment", "magnitude": "high"}, num_classes=None, seed=0)
    with pytest.raises(ValueError, match=r"argument 'quality'"):
        T.build_transform({"name": "RandomRequantize", "quality": [40]}, num_classes=None, seed=0)
    with pytest.raises(ValueError, match=r"argument 'p'"):
        T.build_transform({"name": "RandomHorizontalFlip", "p": True}, num_classes=None, seed=0)
    with pytest.raises(ValueError, match="'seed' comes from build_transform"):
        T.build_transform({"name": "RandomHorizontalFlip", "seed": 1}, num_classes=None, seed=0)
    with pytest.raises(ValueError, match="'label_smoothing' comes from optim.label_smoothing"):
        T.build_transform({"name": "Mixup", "label_smoothing": 0.1}, num_classes=10, seed=0)
    with pytest.raises(ValueError, match="no 'name'"):
        T.build_transform({"p": 0.5}, num_classes=None, seed=0)
    desc = dict(T.describe_transforms())
    assert desc["RandAugment"] == [("num_ops", 2), ("magnitude", 9), ("num_magnitude_bins", 31),
                                   ("interpolation", "nearest"), ("fill", None)]
    assert desc["RandomChromaRotation"] == [("degrees", 30.0), ("p", 1.0)]
    assert [a for a, _ in desc["ColorJitter"]] == ["brightness", "contrast", "saturation", "hue", "p"]
    assert ("mixup_alpha", 1.0) in desc["Mixup"] and ("switch_prob", 0.5) in desc["Mixup"]
    assert all(a not in ("seed", "num_classes", "label_smoothing") for _, args in desc.items() for a, _ in args)
    assert desc["MixUp"] == [("alpha", 1.0)] and desc["CutMix"] == [("alpha", 1.0)]
    assert set(desc) == set(T.TRANSFORMS)


def test_recipes_op_table_is_generated_from_the_declarations():
    """recipes/README.md's op table is what the transforms declare (signature defaults, summary, where
    it runs): a new op, argument or default that is not regenerated into the README fails here."""
    from dctnet.transforms.registry import OP_TABLE_MARKERS, op_table

    text = (Path(__file__).resolve().parents[1] / "recipes" / "README.md").read_text(encoding="utf-8")
    begin, end = OP_TABLE_MARKERS
    assert text.count(begin) == 1 and text.count(end) == 1
    table = text.split(begin)[1].split(end)[0].strip("\n") + "\n"
    assert table == op_table(), ("regenerate: python -c \"from dctnet.transforms.registry import write_op_table; "
                                 "write_op_table('recipes/README.md')\"")
    for name in T.TRANSFORMS:  # every op has its row, with a summary
        row = next(line for line in table.splitlines() if line.startswith(f"| `{name}` |"))
        assert row.split(" | ")[2].strip(), name


def test_every_op_declares_its_counterpart_or_has_none():
    """Each recipe op's declared counterpart is torchvision's/timm's class of the same name (or refuses
    with the DCT-domain message), and bench's timm arguments come from the same declarations."""
    pytest.importorskip("torchvision")
    pytest.importorskip("timm")
    from torchvision.transforms import v2

    ctx = T.BaselineContext(mean=(0.5,) * 3, std=(0.5,) * 3, image_size=224, interpolation="bicubic",
                            label_smoothing=0.1, num_classes=10)
    dct_only = {"RandomTranspose", "RandomChromaRotation", "FrequencyDropout", "SelectFrequencies", "ToRGB"}
    expected = {"RandomHorizontalFlip": v2.RandomHorizontalFlip, "RandomVerticalFlip": v2.RandomVerticalFlip,
                "RandomGrayscale": v2.RandomGrayscale, "ColorJitter": v2.ColorJitter, "RandAugment": v2.RandAugment,
                "TrivialAugmentWide": v2.TrivialAugmentWide, "AutoAugment": v2.AutoAugment,
                "RandomErasing": v2.RandomErasing, "MixUp": v2.MixUp, "CutMix": v2.CutMix,
                "RandomRequantize": v2.RandomApply, "RandomPerspective": v2.RandomPerspective}
    expected.update({"RandomChoice": v2.RandomChoice, "RandomApply": v2.RandomApply, "RandomOrder": v2.RandomOrder})
    for name in T.TRANSFORMS:
        spec = {"name": name}
        if T.TRANSFORMS[name].takes_transforms:
            spec["transforms"] = [{"name": "RandomHorizontalFlip"}, {"name": "ColorJitter", "brightness": 0.2}]
        if name in dct_only:
            with pytest.raises(ValueError, match="no torchvision or timm counterpart"):
                T.counterpart(spec, ctx)
            continue
        op = T.counterpart(spec, ctx)
        if name in expected:
            assert isinstance(op, expected[name]), (name, op)
        else:  # timm's: its policies, Mixup
            assert type(op).__module__.startswith("timm."), (name, op)
    mix = T.counterpart({"name": "Mixup", "mixup_alpha": 0.8, "cutmix_alpha": 1.0}, ctx)
    assert (mix.mixup_alpha, mix.cutmix_alpha, mix.label_smoothing, mix.num_classes) == (0.8, 1.0, 0.1, 10)
    erase = T.counterpart({"name": "RandomErasing", "p": 0.25, "mode": "pixel"}, ctx)
    assert (type(erase).__module__, erase.probability, erase.mode) == ("timm.data.random_erasing", 0.25, "pixel")
    # the timm policy takes the crop's interpolation unless the spec sets one, as build_transform does
    from PIL import Image

    assert T.counterpart({"name": "TimmAugment"}, ctx).ops[0].hparams["interpolation"] == Image.BICUBIC
    assert T.timm_kwargs({"name": "RandomErasing", "p": 0.25, "mode": "pixel"}) == {
        "re_prob": 0.25, "re_mode": "pixel", "re_count": 1}
    assert T.timm_kwargs({"name": "RandomErasing"}) is None  # torchvision's: create_transform has no such mode
    assert T.timm_kwargs({"name": "ColorJitter", "brightness": [0.6, 1.4], "p": 0.8}) == {
        "color_jitter": (1.4, 0.0, 0.0, 0.0), "color_jitter_prob": 0.8}


# ---------------------------------------------------------------------- kernels per representation
def test_kernels_are_registered_per_representation():
    """An op that runs on both representations registers one kernel for each (base.kernel, as
    torchvision v2 registers a functional's kernel per tensor type); its domain follows from them, a
    subclass inherits them and overrides one by name, and a stage it lacks is a clear error."""
    from dctnet.transforms.base import kernel

    class Twice(T.Transform):
        @kernel("pixel")
        def _pixels(self, x, labels, params):
            return x * 2, labels

        @kernel("coefficient")
        def _coefficients(self, x, labels, params):
            return x * 3, labels

        @kernel("coefficient", "prepare")
        def _plan(self, params, shape, device):
            return {"planned": torch.ones(1)}

    class Thrice(Twice):
        def _pixels(self, x, labels, params):  # overridden by name: still the pixel kernel
            return x * 5, labels

    class PixelOnly(T.Transform):
        @kernel("pixel")
        def _pixels(self, x, labels, params):
            return x, labels

    class Stated(Twice):  # a domain a class states is kept, and so is its subclasses'
        domain = "pixel"

    class StatedChild(Stated):
        pass

    class Jitter(T.ColorJitter):  # ColorJitter's domain is a property of hue: inherited, not derived
        pass

    px, cf = torch.ones(1, 3, 8, 8), torch.ones(1, 3, 1, 1, 64)
    assert Twice.domain == "any" and PixelOnly.domain == "pixel" and Thrice.domain == "any"
    assert Stated.domain == StatedChild.domain == "pixel"
    assert Jitter(hue=0.2).domain == "pixel" and Jitter().domain == "any"
    assert Twice.kernels == {("apply", "pixel"): "_pixels", ("apply", "coefficient"): "_coefficients",
                             ("prepare", "coefficient"): "_plan"}
    assert torch.equal(Twice().apply_transform(px, None, {})[0], px * 2)
    assert torch.equal(Twice().apply_transform(cf, None, {})[0], cf * 3)
    assert torch.equal(Thrice().apply_transform(px, None, {})[0], px * 5)
    assert "planned" in Twice().prepare({}, cf.shape, "cpu") and Twice().prepare({}, px.shape, "cpu") == {}
    with pytest.raises(NotImplementedError, match="PixelOnly has no apply kernel for coefficients"):
        PixelOnly().apply_transform(cf, None, {})
    for bad in ({"representation": "rgb"}, {"representation": "pixel", "stage": "execute"}):
        with pytest.raises(ValueError, match="kernel:"):
            kernel(**bad)


@pytest.mark.parametrize("name", sorted(T.TRANSFORMS) + ["ToCoefficients"])
def test_every_op_on_both_representations_has_a_kernel_for_each(name):
    """Every recipe op (and the converters) whose domain is "any" has an apply kernel registered for
    pixels and one for coefficients — or is a container of other ops, or a policy with its own plan."""
    cls = getattr(T, name)
    if cls.takes_transforms:
        return
    kwargs = {"Mixup": {"num_classes": 10}, "MixUp": {"num_classes": 10}, "CutMix": {"num_classes": 10},
              "SelectFrequencies": {"zigzag": 8}}
    op = cls(**kwargs.get(name, {}))
    applies = {rep for stage, rep in cls.kernels if stage == "apply"}
    if op.domain == "any":
        assert applies == {"pixel", "coefficient"}, (name, cls.kernels)
    elif applies:
        assert applies == {op.domain}, (name, cls.kernels)
    else:  # one representation, and the class's own kernel or device half (a policy's plan)
        assert op.domain in ("pixel", "coefficient"), name
        assert (cls.apply_transform is not T.Transform.apply_transform
                or cls.execute is not T.Transform.execute), name


def test_kernels_do_not_tell_representations_apart_by_shape():
    """The transform modules tell a batch's representation apart in one place
    (representation.representation, representation.shape_representation); kernels are chosen by
    registration, not by ``x.dim() == 4/5`` in their code (the public converters to_pixels /
    to_coefficients, which take either, aside)."""
    import re

    root = Path(__file__).resolve().parents[1] / "dctnet" / "transforms"
    pattern = re.compile(r"\.dim\(\)\s*[=!]=\s*[45]\b|len\((?:x\.)?shape\)\s*[=!]=\s*[45]\b")
    allowed = {("representation.py", "to_pixels"), ("representation.py", "to_coefficients"),
               ("transform.py", "_as_public"), ("transform.py", "check_input"), ("representation.py", "image_size"),
               ("representation.py", "pixel_shape"), ("representation.py", "coefficient_shape"),
               ("representation.py", "shape_representation")}
    found = []
    for path in sorted(root.glob("*.py")):
        if path.name in ("tv.py", "detection.py"):  # torchvision's types; boxes and targets
            continue
        function = None
        for line in path.read_text(encoding="utf-8").splitlines():
            m = re.match(r"\s*def (\w+)", line)
            if m and not line.startswith("        "):
                function = m.group(1)
            if pattern.search(line) and (path.name, function) not in allowed:
                found.append(f"{path.name}:{function}: {line.strip()}")
    assert not found, found
