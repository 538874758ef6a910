"""Augmentation policies per sample: torchvision's RandAugment, TrivialAugmentWide, AutoAugment and
timm's policy strings.

Oracles: for every op, torchvision's own ``_apply_image_or_video_transform`` (its functional ops
with its argument conventions) on each sample with that sample's drawn magnitude, and timm's PIL op
functions on the 8-bit image; for every policy, the reference library's own sampler run 10⁵ times
with its ops replaced by recorders, against 10⁵ of our per-sample draws (chi-square and two-sample
Kolmogorov–Smirnov tests at α = 10⁻³)."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

from dctnet import data as D
from dctnet import transforms as T
from dctnet.transforms import auto_augment as AA
from dctnet.transforms import timm_augment as TMA

from test_layouts import LAYOUTS, encode, source_photos

N_DRAWS = 100_000
SIZE = (64, 72)


# ---------------------------------------------------------------------- photos of every layout
@pytest.fixture(scope="module")
def crops(tmp_path_factory) -> torch.Tensor:
    """Crops of real photos (Imagenette, else generated) in every layout Pillow writes (4:2:0, 4:4:4,
    4:2:2, gray, progressive, CMYK), through dctnet's device path (libjpeg-exact decode + resize):
    ``(14, 3, 64, 72)`` float32 in [0, 1]."""
    root = tmp_path_factory.mktemp("policy_layouts")
    (root / "all").mkdir()
    for k, rgb in enumerate(source_photos(2)):
        for name, kwargs, mode in LAYOUTS:
            (root / "all" / f"{k}-{name}.jpg").write_bytes(encode(rgb, kwargs, mode))
    ds = D.ImageFolderDataset(root, crop=D.RandomResizedCrop(scale=(0.3, 1.0)), seed=3)
    batch = D.collate(ds.load_batch([(0, i) for i in range(len(ds))]), pin_memory=False)
    return T.crops_to_rgb(batch, SIZE, exact=True)


def _per_sample_params(policy, names_bins, gen) -> dict[str, torch.Tensor]:
    """One slot: sample i runs op ``names_bins[i][0]`` at magnitude ``names_bins[i][1]`` (signed)."""
    op = torch.tensor([[policy.ops.index(n)] for n, _ in names_bins])
    magnitude = torch.tensor([[m] for _, m in names_bins], dtype=torch.float64)
    return {"op": op, "arg": AA._tv_argument(policy.ops, op, magnitude)}


def torchvision_space(tv_policy, bins: int, size: tuple[int, int]) -> dict[str, tuple[torch.Tensor | None, bool]]:
    """torchvision's own ``_AUGMENTATION_SPACE`` of a policy object, evaluated: op → (magnitudes over the
    bins as float64, or None; signed)."""
    out = {}
    for name, (fn, signed) in tv_policy._AUGMENTATION_SPACE.items():
        m = fn(bins, *size)
        out[name] = (None if m is None else torch.as_tensor(m).double(), bool(signed))
    return out


@pytest.mark.parametrize("policy_cls,tv_cls,bins", [(T.RandAugment, v2.RandAugment, 31), (T.RandAugment, v2.RandAugment, 11),
                                                     (T.TrivialAugmentWide, v2.TrivialAugmentWide, 31),
                                                     (T.AutoAugment, v2.AutoAugment, 10)])
@pytest.mark.parametrize("size", [(224, 224), (64, 72), (331, 160)])
def test_our_torchvision_spaces_are_torchvisions(policy_cls, tv_cls, bins, size):
    """dctnet's magnitude tables (ops, bins, signs, sizes from the image) equal torchvision's own
    ``_AUGMENTATION_SPACE`` for each policy, bin count and image size."""
    kind = policy_cls(seed=0).kind
    ours = AA._tv_space(kind, bins, *size)
    theirs = torchvision_space(tv_cls(), bins, size)
    assert list(ours) == list(theirs) or set(ours) == set(theirs), (sorted(ours), sorted(theirs))
    for name, (mags, signed) in theirs.items():
        assert ours[name][1] == signed, name
        if mags is None:
            assert ours[name][0] is None, name
        else:
            assert torch.equal(ours[name][0], mags), (name, ours[name][0], mags)


def test_our_autoaugment_policy_is_torchvisions():
    """The 25 ImageNet sub-policies (op, probability, bin) equal torchvision's own table."""
    theirs = [tuple((op, p, b) for op, p, b in sub) for sub in v2.AutoAugment(v2.AutoAugmentPolicy.IMAGENET)._policies]
    assert [tuple(sub) for sub in AA._IMAGENET_POLICY] == theirs


@pytest.mark.parametrize("name", ["v0", "v0r", "original", "originalr", "3a"])
def test_our_timm_policy_tables_are_timms(name):
    """timm's AutoAugment sub-policies (op, probability, magnitude) from timm's own
    ``auto_augment_policy``, against dctnet's table."""
    TA = pytest.importorskip("timm.data.auto_augment")
    theirs = [tuple((op.name, op.prob, op.magnitude) for op in sub) for sub in TA.auto_augment_policy(name, {})]
    assert [tuple(sub) for sub in TMA._TIMM_POLICIES[name]] == theirs


def test_our_timm_level_functions_are_timms(monkeypatch):
    """dctnet's magnitude → argument table for timm's ops against timm's own ``LEVEL_TO_ARG`` (the sign
    coin left out: timm's ``_randomly_negate`` made the identity; our table flags the signed ops), over
    magnitudes 0..15 (past 10: ``mmax``), converted to our kernels' units where timm's op body does so:
    thresholds and additions /255, the increasing enhancements ``1 + a``, Desaturate's factor ``1 − f``."""
    TA = pytest.importorskip("timm.data.auto_augment")
    monkeypatch.setattr(TA, "_randomly_negate", lambda v: v)
    hparams = {"translate_pct": 0.45, "translate_const": 100}
    ours = TMA._timm_levels(0.45, 100.0)
    units = {"Solarize": lambda a: a / 255, "SolarizeIncreasing": lambda a: a / 255,
             "SolarizeAdd": lambda a: a / 255, "Desaturate": lambda a: min(1.0, max(0.0, 1.0 - a))}
    units.update({f"{e}Increasing": (lambda a: a - 1.0) for e in ("Color", "Contrast", "Brightness", "Sharpness")})
    m = torch.linspace(0.0, 15.0, 61, dtype=torch.float64)
    assert set(TA.LEVEL_TO_ARG) <= set(ours), set(TA.LEVEL_TO_ARG) - set(ours)
    for name, level_fn in TA.LEVEL_TO_ARG.items():
        want = []
        for v in m.tolist():
            args = level_fn(v, hparams) if level_fn is not None else ()  # None: an op without magnitude
            want.append(units.get(name, lambda a: a)(float(args[0])) if args else 0.0)
        got = ours[name][1](m)
        assert torch.allclose(got, torch.tensor(want, dtype=torch.float64), atol=1e-12), \
            (name, got.tolist()[:8], want[:8])
        signed = name in ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY", "TranslateXRel", "TranslateYRel") \
            or name.endswith("Increasing") and not name.startswith(("Posterize", "Solarize"))
        assert ours[name][2] == signed, name


def _tv_reference(cls, interpolation, fill):
    """A torchvision policy object whose ``_apply_image_or_video_transform`` is the oracle."""
    return cls(interpolation=interpolation, fill=fill)


@pytest.mark.parametrize("policy_cls,tv_cls", [(T.RandAugment, v2.RandAugment),
                                                (T.TrivialAugmentWide, v2.TrivialAugmentWide),
                                                (T.AutoAugment, v2.AutoAugment)])
@pytest.mark.parametrize("interpolation,fill", [("nearest", None), ("bilinear", (0.2, 0.5, 0.8))])
def test_every_torchvision_op_equals_torchvision_per_sample(crops, policy_cls, tv_cls, interpolation, fill):
    """Each op of the policy's space, every sample at its own bin and sign, equals torchvision's
    op on that sample. Tolerance: 1e-5 on the [0, 1] scale for all but a handful of pixels (≤ 0.2%)
    where float rounding flips a nearest-neighbour tie, a posterize/equalize bin or a solarize
    threshold."""
    policy = policy_cls(interpolation=interpolation, fill=fill, seed=0)
    ref = _tv_reference(tv_cls, interpolation, None if fill is None else list(fill))
    n = crops.shape[0]
    bins = policy.num_magnitude_bins
    space = torchvision_space(ref, bins, SIZE)  # torchvision's magnitudes, not our table
    assert set(space) == set(policy.ops)
    g = torch.Generator().manual_seed(1)
    for name in policy.ops:
        mags, signed = space[name]
        picks = []
        for i in range(n):  # a test-side loop: the oracle runs one image at a time
            m = 0.0 if mags is None else float(mags[int(torch.randint(bins, (), generator=g))])
            if signed and torch.rand((), generator=g) < 0.5:
                m = -m
            picks.append((name, m))
        out = policy(crops, params=_per_sample_params(policy, picks, g))
        want = torch.stack([ref._apply_image_or_video_transform(crops[i], name, m, interpolation=interpolation,
                                                                fill=ref._fill) for i, (_, m) in enumerate(picks)])
        diff = (out - want).abs()
        assert (diff > 1e-5).float().mean() <= 0.002, (name, float(diff.max()), float((diff > 1e-5).float().mean()))


# timm's op functions (PIL, 8 bits) for each kernel our timm policies run, with our argument → theirs
def _timm_call(kernel: str, arg: float, pil: Image.Image, fill, resample):
    from timm.data import auto_augment as TA

    kw = dict(fillcolor=fill, resample=resample)
    calls = {
        "PilRotate": lambda: TA.rotate(pil, arg, **kw), "PilShearX": lambda: TA.shear_x(pil, arg, **kw),
        "PilShearY": lambda: TA.shear_y(pil, arg, **kw), "PilTranslateX": lambda: TA.translate_x_abs(pil, arg, **kw),
        "PilTranslateY": lambda: TA.translate_y_abs(pil, arg, **kw), "PilPosterize": lambda: TA.posterize(pil, int(arg)),
        "Solarize": lambda: TA.solarize(pil, round(arg * 255)), "SolarizeAdd": lambda: TA.solarize_add(pil, round(arg * 255)),
        "Color": lambda: TA.color(pil, arg), "Contrast": lambda: TA.contrast(pil, arg),
        "Brightness": lambda: TA.brightness(pil, arg), "Sharpness": lambda: TA.sharpness(pil, arg),
        "AutoContrast": lambda: TA.auto_contrast(pil), "Equalize": lambda: TA.equalize(pil),
        "Invert": lambda: TA.invert(pil), "GaussianBlur": lambda: TA.gaussian_blur(pil, arg),
    }
    return calls[kernel]()


#: per kernel: (max mean |difference| in grey levels, max fraction of pixels more than 3 grey levels
#: apart) against timm's PIL op on the 8-bit image. PIL works in 8 bits (contrast rounds its mean,
#: every op rounds: ≤ 1 level, ~0.5 on average) and its Gaussian blur is three box passes; timm's
#: bicubic geometry is PIL's own a = −1 cubic with its border rule (``_pil_bicubic_affine``).
TIMM_TOLERANCE = {
    "PilRotate": (0.6, 0.0), "PilShearX": (0.6, 0.0), "PilShearY": (0.6, 0.0), "PilTranslateX": (0.6, 0.0),
    "PilTranslateY": (0.6, 0.0), "PilPosterize": (0.0, 0.0), "Solarize": (0.6, 0.01), "SolarizeAdd": (0.6, 0.01),
    "Color": (0.8, 0.01), "Contrast": (0.8, 0.01), "Brightness": (0.8, 0.01), "Sharpness": (0.8, 0.01),
    "AutoContrast": (0.8, 0.01), "Equalize": (2.0, 0.1), "Invert": (0.6, 0.0), "GaussianBlur": (1.5, 0.05),
}


@pytest.mark.parametrize("policy", ["rand-m9-mstd0.5-inc1", "rand-m7-n3-mstd1", "original-mstd0.5", "v0", "3a"])
def test_timm_policies_equal_timms_ops_per_sample(crops, policy):
    """Every sample's drawn ops (our kernels on float pixels) against timm's PIL op functions with the
    same arguments on the same crop in 8 bits, op by op (each op's input is the 8-bit image so the
    comparison isolates the op)."""
    aug = T.TimmAugment(policy, seed=4)
    params = aug.draw_params((crops.shape[0] * 6, *crops.shape[1:]), torch.Generator().manual_seed(2))
    x = crops.repeat(6, 1, 1, 1)
    x8 = (x * 255).round() / 255  # timm's input: the 8-bit image
    fill = tuple(round(255 * m) for m in T.IMAGENET_MEAN)
    seen = Counter()
    for s in range(params["op"].shape[1]):
        one = {"op": params["op"][:, s:s + 1], "arg": params["arg"][:, s:s + 1]}
        out = aug(x8, params=one)
        for i in range(x.shape[0]):
            k = int(one["op"][i, 0])
            if k < 0:
                continue
            kernel, arg = aug.ops[k], float(one["arg"][i, 0])
            if kernel == "PilPosterize" and arg < 1:
                continue  # timm hands 0 bits to ImageOps.posterize, which Pillow ≥ 10 refuses (ours: black, as torchvision)
            pil = Image.fromarray((x8[i] * 255).round().byte().permute(1, 2, 0).numpy())
            want = torch.from_numpy(np.asarray(_timm_call(kernel, arg, pil, fill, Image.BICUBIC))).permute(2, 0, 1)
            diff = ((out[i] * 255).round() - want.float()).abs()
            mean_tol, frac_tol = TIMM_TOLERANCE[kernel]
            assert diff.mean() <= mean_tol and (diff > 3).float().mean() <= frac_tol, \
                (kernel, arg, float(diff.mean()), float((diff > 3).float().mean()))
            seen[kernel] += 1
    assert len(seen) >= (3 if policy == "3a" else 8), seen


def test_policies_draw_per_sample_and_replay(crops):
    aug = T.RandAugment(num_ops=2, magnitude=9, seed=0)
    x, params = aug(crops, return_params=True)
    ops = aug.op_names(params)
    assert len({tuple(o) for o in ops}) > 4  # samples drew their own op lists (torchvision: one per call)
    assert torch.equal(aug(crops, params=params), x)
    # a coefficient image goes through pixels and back
    coef = T.ToCoefficients()(crops)
    again = aug(coef, params=params)
    assert again.shape == coef.shape
    torch.testing.assert_close(T.ToRGB(None, None)(again), x.clamp(0, 1), atol=2e-4, rtol=0)


def test_policy_kernel_launches_do_not_grow_with_the_batch():
    """One batched kernel per (slot, group of ops) present: the operator count is the same for 256
    samples as for 1024 (every op is drawn in both), where a per-sample loop would quadruple it."""
    from torch.profiler import ProfilerActivity, profile

    def count(n: int, aug) -> int:
        x = torch.rand(n, 3, 16, 16, generator=torch.Generator().manual_seed(0))
        params = aug.draw_params(x.shape, torch.Generator().manual_seed(1))
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            aug(x, params=params)
        return sum(e.count for e in prof.key_averages())

    for aug in (T.RandAugment(seed=0), T.TrivialAugmentWide(seed=0), T.AutoAugment(seed=0),
                T.TimmAugment("rand-m9-mstd0.5-inc1", seed=0), T.ThreeAugment(seed=0)):
        count(256, aug)
        small, large = count(256, aug), count(1024, aug)
        assert abs(large - small) <= 0.02 * small, (type(aug).__name__, small, large)


def test_timm_strings_parse_as_timm_does():
    c = TMA.TimmConfig.parse("rand-m9-mstd0.5-inc1")
    assert (c.magnitude, c.magnitude_std, c.increasing, c.num_layers, c.prob) == (9, 0.5, True, 2, 0.5)
    assert TMA.TimmConfig.parse("rand-m9-n3-mstd101-p0.7").magnitude_std == math.inf
    assert TMA.TimmConfig.parse("original-mstd0.5").kind == "original"
    for bad, match in (("rnd-m9", "unknown timm augmentation"), ("rand-x9", "unknown section"), ("rand-m9-p1.5", "p must"),
                       ("v0-m9", "only 'mstd'"), ("augmix-m5", "not provided"), ("", "timm augmentation string")):
        with pytest.raises(ValueError, match=match):
            TMA.TimmConfig.parse(bad)
    with pytest.raises(ValueError, match="without replacement"):
        T.TimmAugment("rand-n16-tweights")
    none = T.TimmAugment("rand-n0", seed=0)  # timm accepts n0: no op
    assert none.draw_params((4, 3, 8, 8))["op"].shape == (4, 0)
    with pytest.raises(ValueError, match="interpolation"):
        T.RandAugment(interpolation="lanczos")
    with pytest.raises(ValueError, match="magnitude"):
        T.RandAugment(magnitude=31)
    with pytest.raises(ValueError, match="fill"):
        T.RandAugment(fill=(255, 0, 0))


# ---------------------------------------------------------------------- distributions of draws
def _chi2_crit(dof: int, z: float = 3.09) -> float:
    """The chi-square quantile at 1 − α (α = 10⁻³: z = 3.09), Wilson–Hilferty."""
    return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


def assert_same_categorical(a: list, b: list, what: str) -> None:
    """Chi-square test of homogeneity of two samples of categories (rare categories pooled)."""
    ca, cb = Counter(a), Counter(b)
    na, nb = len(a), len(b)
    if len(ca) == 1 and set(ca) == set(cb):  # one category on both sides (e.g. always 2 ops): the same
        return
    cats = sorted(set(ca) | set(cb), key=repr)
    pooled_a = pooled_b = 0
    stat, dof = 0.0, -1
    for c in cats:
        x, y = ca.get(c, 0), cb.get(c, 0)
        if x + y < 20:
            pooled_a, pooled_b = pooled_a + x, pooled_b + y
            continue
        e_a, e_b = (x + y) * na / (na + nb), (x + y) * nb / (na + nb)
        stat += (x - e_a) ** 2 / e_a + (y - e_b) ** 2 / e_b
        dof += 1
    if pooled_a + pooled_b:
        e_a, e_b = (pooled_a + pooled_b) * na / (na + nb), (pooled_a + pooled_b) * nb / (na + nb)
        stat += (pooled_a - e_a) ** 2 / e_a + (pooled_b - e_b) ** 2 / e_b
        dof += 1
    assert dof >= 1 and stat < _chi2_crit(dof), (what, stat, dof, ca.most_common(4), cb.most_common(4))


def assert_same_continuous(a, b, what: str) -> None:
    """Two-sample Kolmogorov–Smirnov at α = 10⁻³."""
    a, b = np.sort(np.asarray(a, float)), np.sort(np.asarray(b, float))
    grid = np.concatenate([a, b])
    d = np.abs(np.searchsorted(a, grid, side="right") / len(a) - np.searchsorted(b, grid, side="right") / len(b)).max()
    crit = 1.949 * math.sqrt((len(a) + len(b)) / (len(a) * len(b)))
    assert d < crit, (what, d, crit)


def _torchvision_draws(tv_cls, n: int) -> list[tuple]:
    """``n`` calls of torchvision's own sampler; each call's (op, magnitude) sequence."""
    torch.manual_seed(0)
    ref = tv_cls()
    calls, current = [], []
    img = torch.zeros(1, 64, 72, dtype=torch.uint8)
    def record(im, tid, mag, interpolation, fill):  # the argument its op then uses (translate: int(magnitude))
        current.append((tid, round(float(int(mag)) if tid in ("TranslateX", "TranslateY") else mag, 4)))
        return im

    ref._apply_image_or_video_transform = record
    ref._flatten_and_extract_image_or_video = lambda inputs: (None, img)  # skip the pytree walk: 2x faster
    ref._unflatten_and_insert_image_or_video = lambda spec, im: im
    for _ in range(n):
        ref.forward(img)
        calls.append(tuple(current))
        current.clear()
    return calls


def _our_tv_calls(policy, params) -> list[tuple]:
    """Our draws in torchvision's convention: the (op, magnitude) each sample's slots passed to
    ``_apply_image_or_video_transform`` (Identity included, as torchvision calls it)."""
    out = []
    for ops, args in zip(params["op"].tolist(), params["arg"].tolist()):
        seq = []
        for k, a in zip(ops, args):
            if k < 0:
                continue
            name = policy.ops[k]
            m = a - 1.0 if name in ("Brightness", "Color", "Contrast", "Sharpness") else a
            seq.append((name, round(m, 4)))
        out.append(tuple(seq))
    return out


@pytest.mark.parametrize("policy_cls,tv_cls", [(T.RandAugment, v2.RandAugment),
                                                (T.TrivialAugmentWide, v2.TrivialAugmentWide),
                                                (T.AutoAugment, v2.AutoAugment)])
def test_torchvision_policy_draws_match_torchvision(policy_cls, tv_cls):
    """10⁵ per-sample draws against 10⁵ calls of torchvision's sampler: the same distribution of
    (op, magnitude, sign) in each slot and of the number of ops applied."""
    want = _torchvision_draws(tv_cls, N_DRAWS)
    policy = policy_cls(seed=0)
    got = _our_tv_calls(policy, policy.draw_params((N_DRAWS, 3, 64, 72), torch.Generator().manual_seed(0)))
    assert_same_categorical([len(c) for c in got], [len(c) for c in want], "ops applied")
    for s in range(max(len(c) for c in want)):
        assert_same_categorical([c[s] for c in got if len(c) > s], [c[s] for c in want if len(c) > s], f"slot {s}")
    if policy_cls is T.AutoAugment:  # the pair of a sub-policy is drawn jointly
        assert_same_categorical([tuple(n for n, _ in c) for c in got], [tuple(n for n, _ in c) for c in want], "pairs")


# timm's function name (its NAME_TO_OP entry) → our kernel, and its argument → ours
_TIMM_FN_TO_KERNEL = {"rotate": "PilRotate", "shear_x": "PilShearX", "shear_y": "PilShearY",
                      "translate_x_rel": "PilTranslateX", "translate_y_rel": "PilTranslateY", "posterize": "PilPosterize",
                      "solarize": "Solarize", "solarize_add": "SolarizeAdd", "color": "Color", "contrast": "Contrast",
                      "brightness": "Brightness", "sharpness": "Sharpness", "auto_contrast": "AutoContrast",
                      "equalize": "Equalize", "invert": "Invert", "gaussian_blur": "GaussianBlur",
                      "gaussian_blur_rand": "GaussianBlur", "desaturate": "Color"}


def _timm_draws(policy: str, n: int, h: int, w: int) -> list[tuple]:
    """``n`` calls of timm's sampler (its ``AugmentOp`` s with recording op functions)."""
    from timm.data import auto_augment as TA

    random.seed(0)
    np.random.seed(0)
    hp = dict(translate_const=int(min(h, w) * 0.45), img_mean=(124, 116, 104))
    aug = (TA.rand_augment_transform if policy.startswith("rand") else TA.auto_augment_transform)(policy, hp)
    ops = aug.ops if hasattr(aug, "ops") else [op for sp in aug.policy for op in sp]
    current = []

    def recorder(fn_name):
        def record(img, *args, **kw):
            a = args[0] if args else 0.0
            if fn_name in ("translate_x_rel",):
                a = a * w
            elif fn_name == "translate_y_rel":
                a = a * h
            elif fn_name in ("solarize", "solarize_add"):
                a = a / 255.0
            elif fn_name == "desaturate":
                a = min(1.0, max(0.0, 1.0 - a))
            elif fn_name == "gaussian_blur_rand":  # timm draws the radius inside the op
                a = random.uniform(0.1, 2.0 * a)
            current.append((_TIMM_FN_TO_KERNEL[fn_name], round(float(a), 6)))
            return img
        return record

    for op in ops:
        op.aug_fn = recorder(op.aug_fn.__name__)
    calls = []
    for _ in range(n):
        aug(None)
        calls.append(tuple(current))
        current.clear()
    return calls


@pytest.mark.parametrize("policy", ["rand-m9-mstd0.5-inc1", "rand-m6-n1-p1.0-mstd101", "rand-m9-tweights",
                                    "original", "3a"])
def test_timm_policy_draws_match_timm(policy):
    """10⁵ per-sample draws against 10⁵ calls of timm's sampler: the number of ops applied and the
    (op, sign) of each applied position (chi-square), and each op's argument (KS)."""
    h, w = 64, 72
    want = _timm_draws(policy, N_DRAWS, h, w)
    aug = T.TimmAugment(policy, seed=0)
    params = aug.draw_params((N_DRAWS, 3, h, w), torch.Generator().manual_seed(0))
    got = [tuple((aug.ops[k], round(a, 6)) for k, a in zip(ops, args) if k >= 0)
           for ops, args in zip(params["op"].tolist(), params["arg"].tolist())]
    assert_same_categorical([len(c) for c in got], [len(c) for c in want], "ops applied")
    sign = lambda a: (a > 0) - (a < 0)  # noqa: E731
    for s in range(max(len(c) for c in want)):
        assert_same_categorical([(c[s][0], sign(c[s][1])) for c in got if len(c) > s],
                                [(c[s][0], sign(c[s][1])) for c in want if len(c) > s], f"position {s}")
    for kernel in {k for c in want for k, _ in c}:
        a = [v for c in got for k, v in c if k == kernel]
        b = [v for c in want for k, v in c if k == kernel]
        if len(set(b)) > 1:
            assert_same_continuous(a, b, kernel)
