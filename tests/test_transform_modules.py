"""The transform objects as modules (issue #14 item 2): nn.Module state, the base class's
probability ``p``, parameter replay, seeded Compose per (seed, epoch, step, rank), soft targets
through Mixup / CutMix, and the recipe registry."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dctnet import transforms as T
from dctnet.transforms import augment as A
from dctnet.transforms import functional as TF


def coeffs(n: int = 8, hb: int = 4, wb: int = 4, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    """Random in-range-ish coefficient images (B, 3, Hb, Wb, 64) from random RGB."""
    rgb = torch.rand(n, 3, 8 * hb, 8 * wb, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return TF.from_rgb(rgb).to(dtype)


def changed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(B,) bool: samples that differ."""
    return (a != b).flatten(1).any(1)


def pipeline(seed: int = 0) -> A.Compose:
    return A.Compose([A.RandomHorizontalFlip(), A.ColorJitter(0.3, 0.3, 0.3, 0.2, p=0.8), A.RandomGrayscale(0.3),
                      A.RandomRequantize(), A.RandomErasing(0.5, value="random"), A.FrequencyDropout(0.1),
                      A.RandAugment(), A.CutMix(num_classes=5, p=0.5)], seed=seed)


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


@pytest.mark.parametrize("make", [
    lambda p: AddOne(p, seed=1),
    lambda p: A.RandomHorizontalFlip(p, seed=1),
    lambda p: A.ColorJitter(0.5, p=p, seed=1),
    lambda p: A.RandomRequantize((10, 20), p=p, seed=1),
    lambda p: A.RandomErasing(p, scale=(0.3, 0.5), seed=1),
    lambda p: A.RandAugment(3, 20, p=p, seed=1),
], ids=["subclass", "hflip", "jitter", "requantize", "erasing", "randaugment"])
def test_probability_p_is_per_sample_and_handled_by_the_base(make):
    x = coeffs(2000, 2, 2)
    assert torch.equal(make(0.0)(x), x)
    frac = {}
    for p in (1.0, 0.3):
        out, params = make(p)(x, return_params=True)
        frac[p] = changed(out, x).float().mean().item()
        if p < 1:
            mask = params["apply"]
            assert mask.shape == (2000,) and mask.dtype == torch.bool
            assert not changed(out, x)[~mask].any()  # kept where the coin said no
    # p = 1: every sample (RandAugment can draw "identity" twice, erasing always changes something)
    assert frac[1.0] > 0.9
    assert abs(frac[0.3] - 0.3 * frac[1.0]) < 0.04, frac


def test_p_is_validated_and_labels_pass_through_non_mixing_transforms():
    with pytest.raises(ValueError, match="p must be a probability"):
        A.RandomHorizontalFlip(1.5)
    x, y = coeffs(4), torch.arange(4)
    for t in (A.RandomHorizontalFlip(), A.ColorJitter(0.2), A.RandomErasing(), A.FrequencyDropout(), A.RandAugment()):
        out, labels = t(x, y)
        assert labels is y


# ---------------------------------------------------------------------- replay
def test_params_replay_bit_identical():
    x, y = coeffs(8), torch.arange(8) % 5
    for t in [pipeline(3), A.Mixup(0.4, num_classes=5, p=0.5, seed=2), A.RandomErasing(0.7, value="random", seed=4)]:
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
    torch.testing.assert_close(dev.cpu(), out, atol=1e-3, rtol=1e-5)
    torch.testing.assert_close(ldev.cpu(), labels)


# ---------------------------------------------------------------------- seeded Compose
def test_compose_generator_per_seed_epoch_step_rank():
    x, y = coeffs(8), torch.arange(8) % 5
    a, b = pipeline(7), pipeline(7)
    a(x, y)  # consuming a's own generator does not matter: the step generator is fresh
    out_a = a(x, y, generator=a.generator_for(2, 10, 1))
    out_b = b(x, y, generator=b.generator_for(2, 10, 1))
    assert torch.equal(out_a[0], out_b[0]) and torch.equal(out_a[1], out_b[1])
    helper = b(x, y, generator=T.augment.step_generator(7, 2, 10, 1))
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
@pytest.mark.parametrize("cls", [A.Mixup, A.CutMix])
def test_mixup_cutmix_soft_targets(cls):
    n, k = 16, 4
    x, y = coeffs(n, 6, 6), torch.arange(n) % k
    t = cls(1.0, num_classes=k, seed=0)
    out, soft, params = t(x, y, return_params=True)
    assert soft.shape == (n, k) and soft.dtype == torch.float32
    torch.testing.assert_close(soft.sum(1), torch.ones(n))
    perm = params["perm"]
    if cls is A.Mixup:
        lam = params["lam"].float()
    else:
        boxes = params["boxes"]
        lam = 1 - (boxes[:, 2] * boxes[:, 3]).float() / 36
    onehot = torch.nn.functional.one_hot(y, k).float()
    torch.testing.assert_close(soft, lam[:, None] * onehot + (1 - lam[:, None]) * onehot[perm])
    assert ((lam > 0.01) & (lam < 0.99)).any()  # λ really mixes
    # soft targets stay soft (and keep their dtype); the same draws mix them the same way
    target = torch.softmax(torch.randn(n, k, dtype=torch.float64), 1)
    _, soft2 = t(x, target, params=params)
    assert soft2.dtype == torch.float64
    torch.testing.assert_close(soft2, lam.double()[:, None] * target + (1 - lam.double()[:, None]) * target[perm])
    # with p, unmixed samples keep their one-hot
    out3, soft3, p3 = cls(1.0, num_classes=k, seed=0, p=0.5)(x, y, return_params=True)
    keep = ~p3["apply"]
    assert keep.any() and torch.equal(soft3[keep], onehot[keep]) and torch.equal(out3[keep], x[keep])
    # λ is drawn from the seeded generator
    assert torch.equal(cls(1.0, num_classes=k, seed=0)(x, y)[1], soft)
    with pytest.raises(ValueError, match="num_classes"):
        cls(1.0, seed=0)(x, y)


# ---------------------------------------------------------------------- registry
def test_build_transform_and_describe():
    t = A.build_transform({"name": "RandAugment", "num_ops": 2, "magnitude": 9}, num_classes=None, seed=3)
    assert isinstance(t, A.RandAugment) and (t.num_ops, t.magnitude, t.seed) == (2, 9, 3)
    q = A.build_transform({"name": "RandomRequantize", "quality": [40, 60], "p": 1}, num_classes=None, seed=0)
    assert q.quality == (40, 60) and q.p == 1.0
    m = A.build_transform({"name": "Mixup", "alpha": 0.4}, num_classes=10, seed=0)
    assert m.num_classes == 10
    comp = A.build_transform([{"name": "RandomHorizontalFlip"}, {"name": "CutMix"}], num_classes=10, seed=5)
    assert isinstance(comp, A.Compose) and comp.seed == 5 and comp.transforms[1].num_classes == 10
    x, y = coeffs(4), torch.arange(4)
    assert comp(x, y)[1].shape == (4, 10)
    for name in A.TRANSFORMS:  # every registered transform builds from its defaults
        kw = {"zigzag": 6} if name == "SelectFrequencies" else {}
        assert isinstance(A.build_transform({"name": name, **kw}, num_classes=3, seed=0), A.TRANSFORMS[name])
    for must in ("RandomHorizontalFlip", "ColorJitter", "RandAugment", "Mixup", "CutMix", "RandomErasing",
                 "RandomRequantize"):
        assert must in A.TRANSFORMS
    with pytest.raises(ValueError, match=r"unknown transform 'RandAugmnet'; did you mean 'RandAugment'"):
        A.build_transform({"name": "RandAugmnet"}, num_classes=None, seed=0)
    with pytest.raises(ValueError, match=r"RandAugment: unknown argument 'num_op'; did you mean 'num_ops'"):
        A.build_transform({"name": "RandAugment", "num_op": 2}, num_classes=None, seed=0)
    with pytest.raises(ValueError, match=r"argument 'magnitude' must be int"):
        A.build_transform({"name": "RandAugment", "magnitude": "high"}, num_classes=None, seed=0)
    with pytest.raises(ValueError, match=r"argument 'quality'"):
        A.build_transform({"name": "RandomRequantize", "quality": [40]}, num_classes=None, seed=0)
    with pytest.raises(ValueError, match=r"argument 'p'"):
        A.build_transform({"name": "RandomHorizontalFlip", "p": True}, num_classes=None, seed=0)
    with pytest.raises(ValueError, match="'seed' comes from build_transform"):
        A.build_transform({"name": "RandomHorizontalFlip", "seed": 1}, num_classes=None, seed=0)
    with pytest.raises(ValueError, match="no 'name'"):
        A.build_transform({"p": 0.5}, num_classes=None, seed=0)
    desc = dict(A.describe_transforms())
    assert desc["RandAugment"] == [("num_ops", 2), ("magnitude", 9), ("num_magnitude_bins", 31), ("p", 1.0)]
    assert ("alpha", 0.2) in desc["Mixup"] and all(a not in ("seed", "num_classes") for a, _ in desc["Mixup"])
    assert set(desc) == set(A.TRANSFORMS)
