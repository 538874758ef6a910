"""timm's Mixup, torchvision's MixUp / CutMix and both libraries' RandomErasing as batched dctnet
transforms (dctnet.transforms.mixing, dctnet.transforms.erasing):

(a) given the reference's own draws (captured from its RNG calls), our batched kernel gives the
    reference's pixels and targets;
(b) our sampler's law equals the reference sampler's (10⁵ draws: KS on λ, pasted / erased area and
    aspect, chi-square on applied / mixup / CutMix / box count);
(c) regressions: no sample mixed with itself (odd and even batches, every mode), CutMix's mean
    pasted area, switch_prob, prob (not halved);
(d) coefficient images: mixing / erasing ``from_rgb(x)`` equals ``from_rgb`` of mixing / erasing
    ``x`` with the same (block-aligned) parameters;
(e) replay, labels, argument errors.

Statistical tests draw parameters only (no images) from fixed seeds, so they are deterministic."""

from __future__ import annotations

import functools
import math
import random

import numpy as np
import pytest
import torch

from dctnet.kernels.boxes import box_mask

from dctnet.transforms import erasing as E
from dctnet.kernels import coefficients as TF
from dctnet.transforms import mixing as M
from dctnet.transforms.erasing import RandomErasing
from dctnet.transforms.mixing import CutMix, MixUp, Mixup
from dctnet.transforms.model_input import Normalize

timm_mixup = pytest.importorskip("timm.data.mixup")
timm_erasing = pytest.importorskip("timm.data.random_erasing")
v2 = pytest.importorskip("torchvision.transforms.v2")

MEAN = torch.tensor((0.485, 0.456, 0.406)).reshape(3, 1, 1)
STD = torch.tensor((0.229, 0.224, 0.225)).reshape(3, 1, 1)
N_DRAWS = 100_000
P_MIN = 1e-3  # reject "same law" below this p-value


# ---------------------------------------------------------------------- statistics (no scipy)
def ks_2samp(a, b) -> tuple[float, float]:
    """Two-sample Kolmogorov–Smirnov: (D, asymptotic p-value); conservative on discrete data."""
    a, b = np.sort(np.asarray(a, dtype=np.float64)), np.sort(np.asarray(b, dtype=np.float64))
    both = np.concatenate([a, b])
    d = float(np.max(np.abs(np.searchsorted(a, both, "right") / len(a) - np.searchsorted(b, both, "right") / len(b))))
    en = math.sqrt(len(a) * len(b) / (len(a) + len(b)))
    lam = (en + 0.12 + 0.11 / en) * d
    j = np.arange(1, 101)
    p = float(np.clip(2 * np.sum((-1.0) ** (j - 1) * np.exp(-2 * j**2 * lam**2)), 0, 1)) if lam > 0 else 1.0
    return d, p


def chi2_p(table) -> float:
    """p-value of the chi-square test of homogeneity of the rows of a contingency table."""
    t = np.asarray(table, dtype=np.float64)
    t = t[:, t.sum(0) > 0]
    if t.shape[1] < 2:
        return 1.0
    expected = t.sum(1, keepdims=True) * t.sum(0, keepdims=True) / t.sum()
    stat = float(((t - expected) ** 2 / expected).sum())
    df = (t.shape[0] - 1) * (t.shape[1] - 1)
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64)))


def images(b: int = 8, h: int = 32, w: int = 40, seed: int = 0) -> torch.Tensor:
    return torch.rand(b, 3, h, w, generator=torch.Generator().manual_seed(seed))


def normalise(x: torch.Tensor) -> torch.Tensor:
    return (x - MEAN) / STD


# ====================================================================== (a) same draws → same output
TIMM_CONFIGS = {
    "mixup": dict(mixup_alpha=0.8, cutmix_alpha=0.0),
    "cutmix": dict(mixup_alpha=0.0, cutmix_alpha=1.0),
    "both": dict(mixup_alpha=0.8, cutmix_alpha=1.0, prob=0.8, switch_prob=0.5),
    "minmax": dict(mixup_alpha=0.0, cutmix_alpha=0.0, cutmix_minmax=(0.2, 0.8)),
    "uncorrected": dict(mixup_alpha=0.5, cutmix_alpha=0.5, correct_lam=False),
    "no_smoothing": dict(mixup_alpha=1.0, cutmix_alpha=1.0, label_smoothing=0.0, prob=0.5),
}


@pytest.mark.parametrize("mode", ["batch", "pair", "elem"])
@pytest.mark.parametrize("config", list(TIMM_CONFIGS))
def test_timm_mixup_same_draws_same_pixels_and_targets(monkeypatch, mode, config):
    cfg = dict(TIMM_CONFIGS[config], mode=mode)
    ints_log: list = []
    orig_randint = np.random.randint

    def randint(*a, **k):  # timm's rand_bbox / rand_bbox_minmax integers, in call order
        v = orig_randint(*a, **k)
        ints_log.append(int(v))
        return v

    monkeypatch.setattr(np.random, "randint", randint)
    k = 7
    kinds = set()
    for seed in range(12):
        x, y = images(8, seed=seed), torch.arange(8) % k
        ref = timm_mixup.Mixup(num_classes=k, **cfg)
        drawn = {}
        per_elem, per_batch = ref._params_per_elem, ref._params_per_batch

        def record_elem(n):
            lam, cm = per_elem(n)
            drawn.update(lam=lam.copy(), cm=cm.copy())
            return lam, cm

        def record_batch():
            lam, cm = per_batch()
            drawn.update(lam=np.array([lam]), cm=np.array([cm]))
            return lam, cm

        ref._params_per_elem, ref._params_per_batch = record_elem, record_batch
        ints_log.clear()
        np.random.seed(100 + seed)
        x_ref, y_ref = ref(x.clone(), y)

        ours = Mixup(num_classes=k, seed=0, **cfg)
        n = len(drawn["lam"])
        assert n == ours._units(8)
        lam = torch.from_numpy(np.asarray(drawn["lam"], dtype=np.float64))
        cm = torch.from_numpy(np.asarray(drawn["cm"], dtype=bool))
        ints = torch.zeros(n, 4, dtype=torch.long)
        it = iter(ints_log)
        for u in range(n):  # timm draws box integers only for the units it cuts
            if lam[u] != 1 and cm[u]:
                m = 4 if cfg.get("cutmix_minmax") else 2
                ints[u, :m] = torch.tensor([next(it) for _ in range(m)])
        assert next(it, None) is None
        params = ours._params_from_draws(x.shape, cm, lam, torch.ones(n, dtype=torch.bool), ints)
        out, target = ours(x, y, params=params)
        assert torch.equal(out, x_ref), (config, mode, seed, (out - x_ref).abs().max())
        torch.testing.assert_close(target, y_ref, rtol=0, atol=1e-6)
        kinds |= {"cutmix" if c else "mixup" for c in params["cutmix"][params["mixed"]].tolist()}
    expected = {"mixup": {"mixup"}, "cutmix": {"cutmix"}, "minmax": {"cutmix"}}.get(config, {"mixup", "cutmix"})
    assert kinds == expected, kinds


def test_torchvision_mixup_cutmix_same_draws_same_pixels_and_targets(monkeypatch):
    k = 5
    for cls, ref_cls in ((MixUp, v2.MixUp), (CutMix, v2.CutMix)):
        for seed in range(8):
            x, y = images(6, seed=seed), torch.tensor([0, 3, 1, 4, 4, 2])
            ref = ref_cls(alpha=0.7, num_classes=k)
            lams, ints, made = [], [], {}
            dist = ref._dist

            class Recorded:
                def sample(self, *a):
                    v = dist.sample(*a)
                    lams.append(float(v))
                    return v

            ref._dist = Recorded()
            orig_randint = torch.randint

            def randint(*a, **kw):
                v = orig_randint(*a, **kw)
                ints.append(int(v))
                return v

            make = ref.make_params
            ref.make_params = lambda flat: made.update(make(flat)) or made
            torch.manual_seed(seed)
            with monkeypatch.context() as mp:
                mp.setattr(torch, "randint", randint)
                x_ref, y_ref = ref(x.clone(), y)
            params = cls(0.7, num_classes=k)._params_from_draws(x.shape, lams[0], *ints)
            if cls is CutMix:
                x1, y1, x2, y2 = made["box"]
                assert params["boxes"][0].tolist() == [y1, x1, y2 - y1, x2 - x1]
                assert params["lam"][0].item() == made["lam_adjusted"]
            out, target = cls(0.7, num_classes=k)(x, y, params=params)
            assert torch.equal(out, x_ref), (cls, seed)
            assert torch.equal(target, y_ref), (cls, seed)
            assert (params["perm"] != torch.arange(6)).all()


@pytest.mark.parametrize("value", [0.0, 1.5, (0.1, -0.2, 0.3), "random"], ids=["zero", "number", "per-channel", "random"])
def test_torchvision_erasing_same_box_same_pixels(monkeypatch, value):
    found = 0
    for seed in range(12):
        x = images(1, seed=seed)
        ref = v2.RandomErasing(p=1.0, scale=(0.05, 0.4), ratio=(0.3, 3.3), value=value)
        made = {}
        make = ref.make_params
        ref.make_params = lambda flat: made.update(make(flat)) or made
        torch.manual_seed(seed)
        x_ref = ref(normalise(x[0]).clone())
        ours = RandomErasing(p=1.0, scale=(0.05, 0.4), value=value, seed=seed)
        params = ours.draw_params(x.shape)
        i, j, h, w, v = (made[n] for n in "ijhwv")
        params["boxes"][0, 0] = torch.tensor([i, j, h, w])
        params["active"][0, 0] = v is not None
        found += v is not None
        if value == "random" and v is not None:
            def noise(keys, shape, dtype=torch.float32, _v=v, _i=i, _j=j):  # the reference's noise in its box
                z = torch.zeros(1, *shape, dtype=dtype)
                z[0, :, _i:_i + _v.shape[1], _j:_j + _v.shape[2]] = _v
                return z

            monkeypatch.setattr(E, "normal_noise", noise)
        out = ours(x, params=params)
        torch.testing.assert_close(normalise(out[0]), x_ref, rtol=0, atol=1e-6)
        if v is not None:
            assert (out != x).any()
    assert found >= 10


class _RandomLog:
    """Stands for timm's ``random`` module: the same draws, with the integers logged."""

    def __init__(self, seed: int, log: list) -> None:
        self.r, self.log = random.Random(seed), log

    def random(self):
        return self.r.random()

    def uniform(self, a, b):
        return self.r.uniform(a, b)

    def randint(self, a, b):
        v = self.r.randint(a, b)
        self.log.append(("randint", v))
        return v


@pytest.mark.parametrize("mode", ["const", "rand", "pixel"])
def test_timm_erasing_same_boxes_same_pixels(monkeypatch, mode):
    boxes_seen = 0
    get_pixels = timm_erasing._get_pixels
    for seed in range(10):
        x = images(1, seed=seed)
        log: list = []
        monkeypatch.setattr(timm_erasing, "random", _RandomLog(seed, log))

        def record(per_pixel, rand_color, patch_size, **kw):
            v = get_pixels(per_pixel, rand_color, patch_size, **kw)
            log.append(("patch", v.expand(patch_size).clone()))  # const / rand: (C, 1, 1) broadcast
            return v

        monkeypatch.setattr(timm_erasing, "_get_pixels", record)
        ref = timm_erasing.RandomErasing(probability=1.0, min_area=0.02, max_area=0.33, min_aspect=0.3,
                                         max_aspect=3.3, mode=mode, max_count=3, device="cpu")
        x_ref = ref(normalise(x[0]).clone())
        patches = []  # (top, left, patch) per box, in timm's order
        for n, (kind, v) in enumerate(log):
            if kind == "patch":
                patches.append((log[n - 2][1], log[n - 1][1], v))
        ours = RandomErasing(p=1.0, mode=mode, max_count=3, seed=seed)
        params = ours.draw_params(x.shape)
        params["active"][:] = False
        for kk, (top, left, patch) in enumerate(patches):
            params["boxes"][0, kk] = torch.tensor([top, left, patch.shape[1], patch.shape[2]])
            params["active"][0, kk] = True
            if mode == "rand":
                params["fill"][0, kk] = MEAN.flatten().double() + STD.flatten().double() * patch[:, 0, 0].double()
        boxes_seen += len(patches)

        def noise(keys, shape, dtype=torch.float32):  # timm's patches in one noise image, in its order
            z = torch.zeros(1, *shape, dtype=dtype)
            for top, left, patch in patches:
                z[0, :, top:top + patch.shape[1], left:left + patch.shape[2]] = patch
            return z

        monkeypatch.setattr(E, "normal_noise", noise)
        out = ours(x, params=params)
        torch.testing.assert_close(normalise(out[0]), x_ref, rtol=0, atol=1e-6)
    assert boxes_seen >= 15


# ====================================================================== (b) same law as the reference
H224 = (224, 224)
DIST_CFG = dict(mixup_alpha=0.8, cutmix_alpha=1.0, prob=0.8, switch_prob=0.5)


@functools.cache
def timm_reference(per: str, minmax: tuple | None) -> dict[str, np.ndarray]:
    """timm's sampler, 10⁵ draws: per batch (``_params_per_batch``) or per element
    (``_params_per_elem``), CutMix boxes from ``cutmix_bbox_and_lam`` on a 224² image."""
    np.random.seed(1234)
    ref = timm_mixup.Mixup(num_classes=10, cutmix_minmax=minmax, **DIST_CFG)
    if per == "batch":
        draws = [ref._params_per_batch() for _ in range(N_DRAWS)]
        lam = np.array([d[0] for d in draws])
        cm = np.array([d[1] for d in draws])
    else:
        lam, cm = ref._params_per_elem(N_DRAWS)
    mixed = lam != 1
    cut = np.nonzero(mixed & cm)[0]
    area = np.full(N_DRAWS, np.nan)
    area[cut] = timm_areas(lam[cut], minmax)
    return {"mixed": mixed, "cutmix": mixed & cm, "lam": lam.astype(np.float64), "area": area}


def timm_areas(lam: np.ndarray, minmax: tuple | None) -> np.ndarray:
    """Pasted area fractions of timm's CutMix boxes for the λ draws ``lam``, on 224². timm's box
    functions take one λ a call but draw ``count`` positions at once: the box depends on λ only
    through ``rand_bbox``'s side ``int(224·sqrt(1 − λ))`` (in λ's precision), so they are called once
    per distinct side, with ``count`` = the number of draws that have it (minmax: one call)."""
    def frac(box):
        yl, yh, xl, xh = box
        return (yh - yl) * (xh - xl) / (H224[0] * H224[1])

    if minmax is not None:
        return frac(timm_mixup.cutmix_bbox_and_lam((3, *H224), 0.5, ratio_minmax=minmax, count=len(lam))[0])
    side = np.array([int(H224[0] * np.sqrt(1 - v)) for v in lam])
    area = np.empty(len(lam))
    for s in np.unique(side):
        idx = np.nonzero(side == s)[0]
        area[idx] = frac(timm_mixup.rand_bbox((3, *H224), lam[idx[0]], count=len(idx)))
    return area


def ours_mixup_draws(mode: str, minmax: tuple | None) -> dict[str, np.ndarray]:
    """Our sampler, 10⁵ units: batch mode as its per-batch draw (``_draw_units``), elem and pair
    through ``draw_params`` of a batch of 10⁵ elements / pairs (shape only, no images)."""
    t = Mixup(num_classes=10, cutmix_minmax=minmax, mode=mode, seed=99, **DIST_CFG)
    gen = torch.Generator().manual_seed(7)
    if mode == "batch":
        u = t._unit_params(False, *H224, **t._draw_units(N_DRAWS, *H224, gen))
    else:
        batch = N_DRAWS if mode == "elem" else 2 * N_DRAWS
        u = t.draw_params((batch, 3, *H224), gen)
        u = {k: v[:N_DRAWS] for k, v in u.items()}  # pair: the first half holds every unit once
    area = (u["boxes"][:, 2] * u["boxes"][:, 3]).double() / (H224[0] * H224[1])
    return {"mixed": u["mixed"].numpy(), "cutmix": u["cutmix"].numpy(), "lam": u["lam"].numpy(),
            "area": area.numpy()}


def _categories(d) -> list[int]:
    mixed, cut = d["mixed"], d["cutmix"]
    return [int((~mixed).sum()), int((mixed & ~cut).sum()), int(cut.sum())]


@pytest.mark.parametrize("mode,minmax", [("batch", None), ("elem", None), ("pair", None), ("elem", (0.2, 0.8)),
                                         ("batch", (0.2, 0.8))])
def test_mixup_draws_have_timm_law(mode, minmax):
    ref = timm_reference("batch" if mode == "batch" else "elem", minmax)
    ours = ours_mixup_draws(mode, minmax)
    # not applied / mixup / CutMix
    assert chi2_p([_categories(ours), _categories(ref)]) > P_MIN, (_categories(ours), _categories(ref))
    # mixup's λ (the label weight = pixel weight)
    lam_o = ours["lam"][ours["mixed"] & ~ours["cutmix"]]
    lam_r = ref["lam"][ref["mixed"] & ~ref["cutmix"]]
    if minmax is None:
        assert ks_2samp(lam_o, lam_r)[1] > P_MIN
    # CutMix's pasted area fraction (= 1 − corrected λ)
    d, p = ks_2samp(ours["area"][ours["cutmix"]], ref["area"][ref["cutmix"]])
    assert p > P_MIN, (d, p)
    np.testing.assert_allclose(ours["lam"][ours["cutmix"]], 1 - ours["area"][ours["cutmix"]], atol=1e-6)


@functools.cache
def torchvision_reference() -> dict[str, np.ndarray]:
    """torchvision's sampler: MixUp's λ (its Beta), CutMix's ``make_params`` on a 224² batch, 10⁵ draws."""
    torch.manual_seed(4321)
    lam = v2.MixUp(alpha=1.0, num_classes=10)._dist.sample((N_DRAWS,)).flatten().double().numpy()
    cut = v2.CutMix(alpha=1.0, num_classes=10)
    # CutMix's own Beta, sampled for all draws at once (a Beta sample per call costs ~40 µs), then
    # handed out one per make_params call: the same law, the box arithmetic and integers its own
    lams = iter(cut._dist.sample((N_DRAWS,)).flatten())

    class Presampled:
        def sample(self, shape=()):
            return next(lams)

    cut._dist = Presampled()
    img = torch.empty(2, 3, *H224)
    area = np.empty(N_DRAWS)
    for i in range(N_DRAWS):
        x1, y1, x2, y2 = cut.make_params([img])["box"]
        area[i] = (x2 - x1) * (y2 - y1) / (H224[0] * H224[1])
    return {"lam": lam, "area": area}


def ours_torchvision_draws() -> dict[str, np.ndarray]:
    gen = torch.Generator().manual_seed(3)
    lam = M._beta(torch.full((N_DRAWS,), 1.0, dtype=torch.float64), gen)
    # CutMix.draw's three draws, for 10⁵ batches at once (CutMix._box is its arithmetic)
    lam_c = M._beta(torch.full((N_DRAWS,), 1.0, dtype=torch.float64), gen)
    r_x = torch.randint(0, H224[1], (N_DRAWS,), generator=gen)
    r_y = torch.randint(0, H224[0], (N_DRAWS,), generator=gen)
    boxes, lam_adj = CutMix._box(False, *H224, lam_c, r_x, r_y)
    area = (boxes[:, 2] * boxes[:, 3]).double() / (H224[0] * H224[1])
    np.testing.assert_allclose(lam_adj.numpy(), 1 - area.numpy(), atol=1e-12)
    return {"lam": lam.numpy(), "area": area.numpy()}


def test_torchvision_mixup_cutmix_draws_have_torchvision_law():
    ref, ours = torchvision_reference(), ours_torchvision_draws()
    assert ks_2samp(ours["lam"], ref["lam"])[1] > P_MIN
    assert ks_2samp(ours["area"], ref["area"])[1] > P_MIN
    # the per-batch draw is that arithmetic
    t = CutMix(1.0, num_classes=3, seed=5)
    g1, g2 = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    p = t.draw_params((4, 3, *H224), g1)
    lam = M._beta(torch.full((1,), 1.0, dtype=torch.float64), g2)
    r_x, r_y = torch.randint(0, 224, (1,), generator=g2), torch.randint(0, 224, (1,), generator=g2)
    assert torch.equal(p["boxes"][0], CutMix._box(False, *H224, lam, r_x, r_y)[0][0])


ERASE_HW = (32, 40)


def _box_stats(boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(area fraction, aspect h/w) of boxes (n, 4) = (top, left, h, w)."""
    return boxes[:, 2] * boxes[:, 3] / (ERASE_HW[0] * ERASE_HW[1]), boxes[:, 2] / boxes[:, 3]


@functools.cache
def torchvision_erasing_reference() -> dict[str, np.ndarray]:
    torch.manual_seed(99)
    ref = v2.RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3))
    img = torch.empty(3, *ERASE_HW)
    coin = (torch.rand(N_DRAWS) < 0.5).numpy()  # _RandomApplyTransform: applied unless rand >= p
    boxes, found = np.zeros((N_DRAWS, 4), dtype=np.int64), np.zeros(N_DRAWS, dtype=bool)
    for i in np.nonzero(coin)[0]:  # its forward draws the box only where the coin applies
        m = ref.make_params([img])
        boxes[i] = (m["i"], m["j"], m["h"], m["w"])
        found[i] = m["v"] is not None
    return {"applied": coin & found, "boxes": boxes}


def test_torchvision_erasing_draws_have_torchvision_law():
    ref = torchvision_erasing_reference()
    p = RandomErasing(p=0.5, seed=1).draw_params((N_DRAWS, 3, *ERASE_HW), torch.Generator().manual_seed(2))
    applied = (p["apply"] & p["active"][:, 0]).numpy()
    assert chi2_p([np.bincount(applied, minlength=2), np.bincount(ref["applied"], minlength=2)]) > P_MIN
    ours_b, ref_b = p["boxes"][:, 0].numpy()[applied], ref["boxes"][ref["applied"]]
    for a, b in zip(_box_stats(ours_b), _box_stats(ref_b)):
        assert ks_2samp(a, b)[1] > P_MIN
    # positions: uniform over 0..H − h (the top edge relative to its range)
    rel_o = ours_b[:, 0] / np.maximum(ERASE_HW[0] - ours_b[:, 2], 1)
    rel_r = ref_b[:, 0] / np.maximum(ERASE_HW[0] - ref_b[:, 2], 1)
    assert ks_2samp(rel_o, rel_r)[1] > P_MIN


class _FakeImage:
    """Records timm's ``img[:, top:top + h, left:left + w] = …`` writes."""

    def __init__(self) -> None:
        self.boxes: list = []

    def __setitem__(self, key, value):
        _, ys, xs = key
        self.boxes.append((ys.start, xs.start, ys.stop - ys.start, xs.stop - xs.start))


@functools.cache
def timm_erasing_reference() -> dict[str, np.ndarray]:
    ref = timm_erasing.RandomErasing(probability=0.6, min_area=0.02, min_aspect=0.3,  # timm's max_area 1/3, max_aspect 1/0.3
                                     mode="const", min_count=1, max_count=3, device="cpu")
    random.seed(5)
    orig = timm_erasing._get_pixels
    timm_erasing._get_pixels = lambda *a, **k: None
    try:
        counts, boxes = np.zeros(N_DRAWS, dtype=np.int64), []
        for i in range(N_DRAWS):
            img = _FakeImage()
            ref._erase(img, 3, *ERASE_HW, torch.float32)
            counts[i] = len(img.boxes)
            boxes += img.boxes
    finally:
        timm_erasing._get_pixels = orig
    return {"counts": counts, "boxes": np.array(boxes)}


def test_timm_erasing_draws_have_timm_law():
    ref = timm_erasing_reference()
    p = RandomErasing(p=0.6, mode="const", max_count=3, seed=1).draw_params((N_DRAWS, 3, *ERASE_HW),
                                                                             torch.Generator().manual_seed(4))
    active = p["active"] & p["apply"][:, None]
    counts = active.sum(1).numpy()
    assert chi2_p([np.bincount(counts, minlength=4), np.bincount(ref["counts"], minlength=4)]) > P_MIN
    ours_b = p["boxes"][active].numpy()
    for a, b in zip(_box_stats(ours_b), _box_stats(ref["boxes"])):
        assert ks_2samp(a, b)[1] > P_MIN


def test_noise_is_standard_normal_per_pixel_and_per_key():
    keys = torch.tensor([1, 2, 2**61 + 12345])
    z = E.normal_noise(keys, (3, 50, 70))
    assert z.shape == (3, 3, 50, 70) and z.dtype == torch.float32
    ref = torch.randn(N_DRAWS, generator=torch.Generator().manual_seed(0))
    assert ks_2samp(z.flatten()[:N_DRAWS].numpy(), ref.numpy())[1] > P_MIN
    flat = z.reshape(3, -1)
    c = torch.corrcoef(torch.stack([flat[0, :-1], flat[0, 1:], flat[1, :-1], flat[2, :-1]]))
    assert (c - torch.eye(4)).abs().max() < 0.03  # neighbours and keys uncorrelated
    assert torch.equal(E.normal_noise(keys, (3, 50, 70)), z)  # a pure function of the key
    assert torch.equal(E.normal_noise(keys[1:2], (3, 50, 70))[0], z[1])  # of each key alone


# ====================================================================== (c) regressions
@pytest.mark.parametrize("batch", [1, 2, 3, 5, 8, 9])
def test_no_sample_is_mixed_with_itself(batch):
    x = torch.arange(batch, dtype=torch.float32).reshape(batch, 1, 1, 1).expand(batch, 3, 16, 24).clone() + 1
    y = torch.arange(batch) % 3
    makers = [lambda s, m=m: Mixup(mixup_alpha=1.0, cutmix_alpha=1.0, mode=m, num_classes=3, seed=s)
              for m in ("batch", "pair", "elem")]
    makers += [lambda s: MixUp(1.0, num_classes=3, seed=s), lambda s: CutMix(1.0, num_classes=3, seed=s)]
    for make in makers:
        for seed in range(5):
            t = make(seed)
            out, target, p = t(x, y, return_params=True)
            perm, mixed = p["perm"], p["mixed"]
            if batch == 1:
                assert not mixed.any() and torch.equal(out, x)
                continue
            assert (perm != torch.arange(batch)).all(), (t, perm)
            # a mixed sample's new content comes from its partner only
            for i in torch.nonzero(mixed).flatten().tolist():
                vals = set(torch.unique(out[i]).tolist())
                lam = p["lam"][i].item()
                mixed_val = (i + 1) * lam + (perm[i].item() + 1) * (1 - lam)
                assert vals <= {float(i + 1), float(perm[i] + 1)} or all(abs(v - mixed_val) < 1e-5 for v in vals)
    # timm partners: the mirror, the odd batch's middle sample with its neighbour
    assert M.timm_partners(8).tolist() == [7, 6, 5, 4, 3, 2, 1, 0]
    assert M.timm_partners(5).tolist() == [4, 3, 1, 1, 0]
    assert M.torchvision_partners(4).tolist() == [3, 0, 1, 2]


def test_minmax_range_empty_at_the_image_size():
    # int(8·0.5) == int(8·0.55): numpy's randint would raise; the side is int(lo·side)
    t = Mixup(mixup_alpha=0.0, cutmix_minmax=(0.5, 0.55), mode="elem", num_classes=2, seed=0)
    p = t.draw_params((6, 3, 8, 8))
    assert (p["boxes"][:, 2:] == 4).all() and torch.allclose(p["lam"], torch.full((6,), 0.75, dtype=torch.float64))


def test_pair_mode_shares_draws_within_a_pair():
    for batch in (8, 9):
        p = Mixup(mixup_alpha=1.0, cutmix_alpha=1.0, mode="pair", num_classes=3, seed=1).draw_params((batch, 3, 32, 40))
        for i in range(batch // 2):
            j = batch - 1 - i
            assert p["perm"][i] == j and p["perm"][j] == i
            for k in ("lam", "mixed", "cutmix", "boxes"):
                assert torch.equal(p[k][i], p[k][j]), k
    # the middle sample of an odd batch has its own draw (a unit of its own)
    draws = [Mixup(mixup_alpha=1.0, mode="pair", num_classes=3, seed=s).draw_params((9, 3, 8, 8))["lam"]
             for s in range(20)]
    assert any(d[4] != d[3] for d in draws)


def test_cutmix_mean_pasted_area_matches_timm_and_torchvision(capsys):
    """At cutmix_alpha = 1 on 224²: the CutMix draws of the law tests (timm: its batch and elem
    samplers, ~2·4·10⁴ boxes; torchvision: 10⁵ boxes)."""
    def mean_area(draws):
        return np.concatenate([d["area"][d["cutmix"]] for d in draws]).mean()

    a_timm = mean_area([timm_reference("batch", None), timm_reference("elem", None)])
    a_ours_timm = mean_area([ours_mixup_draws("batch", None), ours_mixup_draws("elem", None)])
    a_tv, a_ours_tv = torchvision_reference()["area"].mean(), ours_torchvision_draws()["area"].mean()
    with capsys.disabled():
        print(f"\nCutMix mean pasted area (alpha=1, 224²): dctnet Mixup {a_ours_timm:.4f}, timm {a_timm:.4f}; "
              f"dctnet CutMix {a_ours_tv:.4f}, torchvision {a_tv:.4f}")
    for a in (a_ours_timm, a_timm, a_ours_tv, a_tv):
        assert 0.30 < a < 0.33, a
    assert abs(a_ours_timm - a_timm) < 0.005 and abs(a_ours_tv - a_tv) < 0.005


@pytest.mark.parametrize("mode", ["batch", "pair", "elem"])
def test_prob_and_switch_prob_are_respected(mode):
    for prob, switch in ((0.6, 0.0), (0.6, 0.3), (1.0, 1.0), (0.25, 0.5)):
        t = Mixup(mixup_alpha=1.0, cutmix_alpha=1.0, prob=prob, switch_prob=switch, mode=mode, seed=3)
        u = t._unit_params(False, 64, 64, **t._draw_units(50_000, 64, 64, torch.Generator().manual_seed(1)))
        mixed, cut = u["mixed"].double().mean().item(), u["cutmix"][u["mixed"]].double().mean().item()
        assert abs(mixed - prob) < 0.01, (mixed, prob)  # the coin is drawn once (not prob², not prob/2)
        assert abs(cut - switch) < 0.01, (cut, switch)
    # only one of the two active: always that one
    only_cut = Mixup(mixup_alpha=0.0, cutmix_alpha=1.0, mode=mode, seed=3).draw_params((64, 3, 32, 32))
    assert only_cut["cutmix"][only_cut["mixed"]].all()
    only_mix = Mixup(mixup_alpha=1.0, cutmix_alpha=0.0, mode=mode, seed=3).draw_params((64, 3, 32, 32))
    assert not only_mix["cutmix"].any()
    # the batch mode decides once per batch
    if mode == "batch":
        p = Mixup(mixup_alpha=1.0, cutmix_alpha=1.0, prob=0.5, seed=4).draw_params((16, 3, 32, 32))
        for k in ("lam", "mixed", "cutmix", "boxes"):
            assert (p[k] == p[k][0]).all()


# ====================================================================== (d) coefficient images
MIXERS = {
    "timm-mixup": lambda mode: Mixup(mixup_alpha=1.0, mode=mode, num_classes=4, seed=1),
    "timm-cutmix": lambda mode: Mixup(mixup_alpha=0.0, cutmix_alpha=1.0, mode=mode, num_classes=4, seed=2),
    "timm-minmax": lambda mode: Mixup(mixup_alpha=0.8, cutmix_minmax=(0.3, 0.9), switch_prob=0.7, mode=mode,
                                      num_classes=4, seed=3),
    "tv-mixup": lambda mode: MixUp(0.5, num_classes=4, seed=4),
    "tv-cutmix": lambda mode: CutMix(1.0, num_classes=4, seed=5),
}


@pytest.mark.parametrize("name,mode", [(n, m) for n in MIXERS for m in (("batch", "pair", "elem") if n.startswith("timm")
                                                                      else ("batch",))])
def test_mixing_coefficients_equals_from_rgb_of_mixing_pixels(name, mode):
    x, y = images(7, 32, 40, seed=3), torch.tensor([0, 1, 2, 3, 0, 1, 2])
    c = TF.coefficient_image_from_rgb(x)
    cut_seen = 0
    for seed in range(4):
        t = MIXERS[name](mode)
        out_c, y_c, p = t(c, y, return_params=True, generator=torch.Generator().manual_seed(seed))
        assert (p["perm"] != torch.arange(7)).all()
        if "boxes" in p:
            assert (p["boxes"] % 8 == 0).all()  # block-aligned in pixels
            cut = p["cutmix"]
            cut_seen += int(cut.sum())
            area = (p["boxes"][:, 2] * p["boxes"][:, 3]).double() / (32 * 40)
            torch.testing.assert_close(p["lam"][cut], (1 - area[cut]).float().double() if mode != "batch"
                                       and name.startswith("timm") else 1 - area[cut])
        out_x, y_x = t(x, y, params=p)  # the same (aligned) parameters on the pixels
        torch.testing.assert_close(TF.coefficient_image_from_rgb(out_x), out_c, rtol=1e-5, atol=2e-3)
        assert torch.equal(y_x, y_c)
        assert not torch.equal(out_c, c)
    if "cutmix" in name or "minmax" in name:
        assert cut_seen > 0


ERASERS = {
    "tv-zero": lambda: RandomErasing(p=0.8, seed=1),
    "tv-value": lambda: RandomErasing(p=1.0, value=(0.5, -1.0, 2.0), seed=2),
    "tv-random": lambda: RandomErasing(p=1.0, value="random", seed=3),
    "timm-const": lambda: RandomErasing(p=1.0, mode="const", max_count=3, seed=4),
    "timm-rand": lambda: RandomErasing(p=1.0, mode="rand", max_count=3, seed=5),
    "timm-pixel": lambda: RandomErasing(p=1.0, mode="pixel", min_count=2, max_count=3, seed=6),
    "no-normalisation": lambda: RandomErasing(p=1.0, value=0.25, mean=None, std=None, seed=7),
    "timm-pixel-in-coefficients": lambda: RandomErasing(p=1.0, mode="pixel", max_count=2, seed=8).noise_in(_spectrum()),
}


def _spectrum() -> Normalize:
    """Standardisation statistics shaped like photos': spread falling with frequency, chroma narrower."""
    uv = torch.arange(64)
    std = 400.0 / (1.0 + (uv // 8 + uv % 8).float()) ** 2 * torch.tensor([1.0, 0.3, 0.3])[:, None]
    mean = torch.zeros(3, 64)
    mean[:, 0] = torch.tensor([-30.0, 5.0, -5.0])
    return Normalize(mean, std)


def test_noise_in_a_coefficient_model_is_unit_normal_per_standardised_coefficient():
    """timm's pixel noise is N(0, 1) in the model's normalised input; for a model fed standardised
    coefficients (noise_in) that is N(0, 1) per (c, u, v) in every block the box covers, drawn on
    pixels. Per-pixel RGB noise, standardised the same way, is far wider in the high chroma
    frequencies (the failure it replaces)."""
    norm = _spectrum()
    x = images(24, 64, 64, seed=3)

    def erased_blocks(t):
        out, p = t(x, return_params=True)
        s = (TF.coefficient_image_from_rgb(out) - norm.mean[None, :, None, None]) / norm.std[None, :, None, None]
        top, left, h, w = (p["boxes"][:, 0, i] for i in range(4))
        rows, cols = torch.arange(8) * 8, torch.arange(8) * 8
        inside = (((rows[None] >= top[:, None]) & (rows[None] + 8 <= (top + h)[:, None]))[:, :, None]
                  & ((cols[None] >= left[:, None]) & (cols[None] + 8 <= (left + w)[:, None]))[:, None, :])
        outside = ~box_mask(x, p["boxes"][:, 0], coefficients=False)
        assert torch.equal(out[outside.expand_as(out)], x[outside.expand_as(x)])
        return s.permute(0, 2, 3, 1, 4)[inside]  # (blocks, 3, 64)

    blocks = erased_blocks(RandomErasing(p=1.0, mode="pixel", scale=(0.3, 0.33), seed=9).noise_in(norm))
    assert blocks.shape[0] > 300
    assert blocks.mean(0).abs().max() < 0.3 and abs(float(blocks.std()) - 1.0) < 0.05
    assert ((blocks.std(0) - 1.0).abs() < 0.25).all()
    rgb = erased_blocks(RandomErasing(p=1.0, mode="pixel", scale=(0.3, 0.33), seed=9))
    assert float(rgb[:, 1:, 63].std()) > 10.0


@pytest.mark.parametrize("name", list(ERASERS))
def test_erasing_coefficients_equals_from_rgb_of_erasing_pixels(name):
    x = images(6, 32, 40, seed=1)
    c = TF.coefficient_image_from_rgb(x)
    t = ERASERS[name]()
    out_c, p = t(c, return_params=True)
    assert (p["boxes"] % 8 == 0).all()
    out_x = t(x, params=p)
    torch.testing.assert_close(TF.coefficient_image_from_rgb(out_x), out_c, rtol=1e-5, atol=2e-3)
    assert not torch.equal(out_c, c)
    if name in ("tv-zero", "timm-const", "tv-value", "timm-rand", "no-normalisation"):
        # constant fills are DC only in the erased blocks
        erased = (out_c != c).any(-1)
        assert (out_c[..., 1:][erased] == 0).all()


# ====================================================================== (e) replay, labels, errors
ALL = {
    **{f"timm-{m}": (lambda m=m: Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, prob=0.8, mode=m, num_classes=5, seed=2))
       for m in ("batch", "pair", "elem")},
    "tv-mixup": lambda: MixUp(0.4, num_classes=5, seed=3),
    "tv-cutmix": lambda: CutMix(1.0, num_classes=5, seed=4),
    "erase-random": lambda: RandomErasing(p=0.7, value="random", seed=5),
    "erase-timm-pixel": lambda: RandomErasing(p=0.7, mode="pixel", max_count=2, seed=6),
}


@pytest.mark.parametrize("name", list(ALL))
@pytest.mark.parametrize("rep", ["pixel", "coefficient"])
def test_replay_is_bit_identical(name, rep):
    x, y = images(8, 32, 40, seed=2), torch.arange(8) % 5
    if rep == "coefficient":
        x = TF.coefficient_image_from_rgb(x)
    t = ALL[name]()
    out, labels, params = t(x, y, return_params=True)
    again, labels2 = t(x, y, params=params)
    assert torch.equal(again, out) and torch.equal(labels2, labels)
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    a, la = t(x, y, params=t.draw_params(x.shape, g1))
    b, lb = t(x, y, generator=g2)
    assert torch.equal(a, b) and torch.equal(la, lb)
    fresh, _ = t(x, y)
    assert not torch.equal(fresh, out)
    assert all(v.shape[0] == 8 for v in params.values())


def test_labels_int_and_soft():
    x = images(6, 16, 16)
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    onehot = torch.nn.functional.one_hot(y, 5).float()
    for t in (Mixup(mixup_alpha=1.0, cutmix_alpha=1.0, num_classes=5, seed=1, label_smoothing=0.1),
              MixUp(1.0, num_classes=5, seed=1), CutMix(1.0, num_classes=5, seed=1)):
        _, soft, p = t(x, y, return_params=True)
        assert soft.shape == (6, 5) and soft.dtype == torch.float32
        torch.testing.assert_close(soft.sum(1), torch.ones(6))
        _, soft2 = t(x, onehot, params=p)  # soft one-hot in: the same targets
        torch.testing.assert_close(soft2, soft, rtol=0, atol=1e-6)
        target = torch.softmax(torch.randn(6, 5, dtype=torch.float64), 1)
        _, soft3 = t(x, target, params=p)
        assert soft3.dtype == torch.float64
        s = getattr(t, "label_smoothing", 0.0)
        sm = target * (1 - s) + s / 5
        lam = p["lam"][:, None]
        torch.testing.assert_close(soft3, lam * sm + (1 - lam) * sm[p["perm"]])
        with pytest.raises(ValueError, match="needs labels"):
            t(x)
        with pytest.raises(ValueError, match="classes"):
            t(x, torch.rand(6, 4))
        with pytest.raises(ValueError, match="0..4"):
            t(x, torch.tensor([0, 1, 2, 3, 4, 5]))
        with pytest.raises(ValueError, match="labels for a batch"):
            t(x, y[:4])
        with pytest.raises(ValueError, match="shape"):
            t(x, torch.zeros(6, 5, 1))
    # timm's smoothing of integer labels: off = s/K, on = 1 − s + off
    t = Mixup(mixup_alpha=1.0, prob=0.0, num_classes=5, label_smoothing=0.1, seed=0)
    _, soft = t(x, y)
    assert torch.equal(soft, timm_mixup.one_hot(y, 5, on_value=1 - 0.1 + 0.02, off_value=0.02))
    with pytest.raises(ValueError, match="num_classes"):
        Mixup(seed=0)(x, y)


def test_erasing_only_where_applied_and_inside_the_box():
    x = images(200, 24, 32, seed=4)
    for t in (RandomErasing(p=0.5, seed=1), RandomErasing(p=0.5, value="random", seed=2),
              RandomErasing(p=0.5, mode="pixel", max_count=2, seed=3)):
        out, p = t(x, return_params=True)
        changed = out != x
        applied = p["apply"] & p["active"].any(1)
        assert not changed[~applied].any()
        assert changed.flatten(1).any(1)[applied].all()
        inside = torch.zeros(200, 1, 24, 32, dtype=torch.bool)
        for k in range(p["boxes"].shape[1]):
            inside |= box_mask(x, p["boxes"][:, k], coefficients=False) & p["active"][:, k].reshape(-1, 1, 1, 1)
        assert not (changed & ~inside).any()
        assert 0.38 < applied.double().mean() < 0.62


def test_random_value_is_per_pixel_noise_not_a_tile():
    x = torch.full((4, 3, 64, 64), 0.5)
    t = RandomErasing(p=1.0, scale=(0.3, 0.33), ratio=(1.0, 1.0), value="random", seed=0)
    out, p = t(x, return_params=True)
    z = normalise(out)
    seen = []
    for i in range(4):
        top, left, h, w = p["boxes"][i, 0].tolist()
        patch = z[i, :, top:top + h, left:left + w]
        assert 0.8 < patch.std() < 1.2 and abs(patch.mean()) < 0.2  # N(0, 1) in normalised units
        assert not torch.equal(patch[:, 0], patch[:, 1]) and not torch.equal(patch[:, :, 0], patch[:, :, 1])
        assert not torch.equal(patch[0], patch[1])  # channels independent
        assert torch.unique(patch).numel() > 0.99 * patch.numel()  # every pixel its own draw
        seen.append(patch[:, :8, :8])
    assert not torch.equal(seen[0], seen[1])  # samples independent
    # per-channel value and timm's "rand": one colour a box
    out, p = RandomErasing(p=1.0, mode="rand", seed=1)(x, return_params=True)
    top, left, h, w = p["boxes"][0, 0].tolist()
    assert torch.unique(out[0, 0, top:top + h, left:left + w]).numel() == 1


def test_erasing_gives_up_after_ten_attempts():
    x = images(50, 16, 16)
    t = RandomErasing(p=1.0, scale=(0.9, 1.0), ratio=(8.0, 10.0), seed=0)  # never fits in 16×16
    out, p = t(x, return_params=True)
    assert not p["active"].any() and torch.equal(out, x)
    # torchvision gives up too
    ref = v2.RandomErasing(p=1.0, scale=(0.9, 1.0), ratio=(8.0, 10.0))
    assert torch.equal(ref(x[0]), x[0])


def test_bad_arguments_raise_clear_value_errors():
    bad_mixup = [
        dict(mixup_alpha=0.0, cutmix_alpha=0.0), dict(mixup_alpha=-1.0), dict(cutmix_alpha=-0.5),
        dict(mode="batches"), dict(cutmix_minmax=(0.5,)), dict(cutmix_minmax=(0.0, 0.5)),
        dict(cutmix_minmax=(0.5, 1.2)), dict(cutmix_minmax=(0.6, 0.4)), dict(cutmix_minmax="ab"),
        dict(prob=1.5), dict(switch_prob=-0.1), dict(label_smoothing=1.0), dict(num_classes=0),
        dict(correct_lam="yes"),
    ]
    for kw in bad_mixup:
        with pytest.raises(ValueError, match="Mixup"):
            Mixup(**kw)
    for cls in (MixUp, CutMix):
        for kw in (dict(alpha=0.0), dict(alpha=-1.0), dict(num_classes=-3)):
            with pytest.raises(ValueError, match=cls.__name__):
                cls(**kw)
    bad_erasing = [
        dict(scale=(0.5, 0.2)), dict(scale=(-0.1, 0.5)), dict(scale=(0.1, 1.5)), dict(ratio=(0.0, 1.0)),
        dict(ratio=(3.0, 1.0)), dict(value="noise"), dict(value=[]), dict(mode="zeros"), dict(mode="const", min_count=0),
        dict(mode="const", min_count=3, max_count=2), dict(max_count=2), dict(mode="rand", value=0.5),
        dict(mean=(0.5, 0.5, 0.5), std=None), dict(std=(0.2, 0.0, 0.2)), dict(p=2.0),
    ]
    for kw in bad_erasing:
        with pytest.raises(ValueError, match="RandomErasing|p must be"):
            RandomErasing(**kw)
    with pytest.raises(ValueError, match="takes pixels"):
        Mixup(num_classes=3)(torch.zeros(2, 3, 4, 4, 32), torch.tensor([0, 1]))
    # noise in a coefficient model's input: its statistics, and an image the 8x8 blocks tile
    with pytest.raises(TypeError, match="noise_in takes a dctnet.transforms.Normalize"):
        RandomErasing(mode="pixel").noise_in(torch.zeros(3, 64))
    with pytest.raises(ValueError, match="multiple of 8, got 20x24"):
        RandomErasing(p=1.0, mode="pixel").noise_in(_spectrum())(images(2, 20, 24))
    with pytest.raises(ValueError, match="value has 2 entries"):
        RandomErasing(value=(0.1, 0.2))(images(2))
    with pytest.raises(ValueError, match="channels"):
        RandomErasing()(torch.rand(2, 1, 16, 16))


def test_noise_hash_is_lowbias32_in_plain_integers():
    """The device hash against Wellons' lowbias32 written with Python's unbounded integers (the int64
    multiply wraps past 2⁶³; the low 32 bits must still be exact), on inputs that make it wrap."""

    def lowbias32(v: int) -> int:
        v ^= v >> 16
        v = (v * 0x7FEB352D) & 0xFFFFFFFF
        v ^= v >> 15
        v = (v * 0x846CA68B) & 0xFFFFFFFF
        return v ^ (v >> 16)

    values = [0, 1, 2, 0x7FFFFFFF, 0x80000000, 0xDEADBEEF, 0xFFFFFFFE, 0xFFFFFFFF,
              *torch.randint(0, 2**32, (200,), generator=torch.Generator().manual_seed(0)).tolist()]
    got = E._mix32(torch.tensor(values, dtype=torch.long)).tolist()
    assert got == [lowbias32(v) for v in values]
