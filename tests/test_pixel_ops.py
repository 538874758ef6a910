"""The batched pixel kernels (:mod:`dctnet.kernels.pixel`) against their references, on real photos.

Oracle: ``torchvision.transforms.v2.functional``'s ``*_image`` kernels, one sample at a time, each
with its own (seeded, random) parameter. Photos: Imagenette (skipped when ``../shared`` is
absent) and the generated JPEGs of ``conftest.synthetic_files`` (always there), re-encoded with
Pillow as 4:4:4, 4:2:2, grey and progressive 4:2:0, cropped to odd / non-square sizes.

Tolerances against torchvision (absolute, [0, 1] scale; float64 / float32):

======================================  ==============================================================
invert, posterize, solarize, grayscale,  exact (same arithmetic)
brightness, autocontrast, equalize
sharpness, contrast, saturation, blur    1e-12 / 1e-6 (summation order: shifted adds, separable blur)
hue                                      1e-6 / 1e-6 (torchvision computes hue in float32 always)
affine / rotate, bilinear                1e-12 / 2e-5 (the grid is formed elementwise; torchvision's
                                         bmm rounds differently by ≤ 1 ulp of the normalised
                                         coordinate, ≈ W/2 · 1.2e-7 px in float32)
affine / rotate, nearest                 ≤ 0.1 % of values differ (by ≥ 1e-3), the rest exact: a
                                         1-ulp grid difference can flip a round-half-to-even tie
                                         (none seen on these photos)
======================================  ==============================================================

Against timm's PIL ops (uint8 images, the ``auto_augment`` functions): see ``TIMM_BOUNDS``, in grey
levels (mean |Δ| and the fraction of values more than 2 levels apart).
"""

from __future__ import annotations

import io
import zlib
from functools import lru_cache

import numpy as np
import pytest
import torch
from PIL import Image
from torch import Tensor
from torchvision.transforms.v2 import functional as TVF

from dctnet.kernels import geometry as G
from dctnet.kernels import pixel as P

from conftest import imagenette_files

# re-encodings (Pillow) and the crop each layout is tested at (odd and non-square sizes)
LAYOUTS = {
    "444": (dict(subsampling="4:4:4"), (64, 64)),
    "422": (dict(subsampling="4:2:2"), (61, 67)),
    "gray": (dict(gray=True), (48, 56)),
    "progressive": (dict(subsampling="4:2:0", progressive=True), (67, 61)),
}
SOURCES = ("imagenette", "synthetic")
N = 4  # photos per batch


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """The images here are tiny: intra-op threads only add contention (5× slower on a busy 2-core
    machine), so this module runs single-threaded and restores the setting afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _paths(source: str, synthetic_files: list[str]) -> tuple[str, ...]:
    """``N`` photos: Imagenette's (skips when ``../shared`` is absent) or generated ones ≥ 96 px."""
    if source == "imagenette":
        files = imagenette_files("val", every=997)[:N]
        if len(files) < N:
            pytest.skip("Imagenette not found under ../shared")
        return tuple(files)
    return tuple([p for p in synthetic_files if min(Image.open(p).size) >= 96][::2][:N])


@lru_cache(maxsize=None)
def _reencoded(paths: tuple[str, ...], layout: str) -> Tensor:
    """``float64 (N, 3, h, w)`` on [0, 1]: each photo re-encoded in ``layout`` by Pillow, decoded
    by Pillow, centre-cropped to the layout's size."""
    opts, (h, w) = LAYOUTS[layout]
    out = []
    for p in paths:
        im = Image.open(p).convert("RGB")
        opts = dict(opts)
        if opts.pop("gray", False):
            im = im.convert("L")
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=90, **opts)
        rgb = np.array(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
        top, left = (rgb.shape[0] - h) // 2, (rgb.shape[1] - w) // 2
        out.append(torch.from_numpy(rgb[top:top + h, left:left + w].copy()).permute(2, 0, 1))
    return torch.stack(out).double() / 255.0


def _ids(p) -> str:
    return f"{p[0]}-{p[1]}"


@pytest.fixture(scope="module", params=[(s, lay) for s in SOURCES for lay in LAYOUTS], ids=_ids)
def batch(request, synthetic_files) -> Tensor:
    """A small batch of real photos in each layout (tests must not modify it in place)."""
    source, layout = request.param
    return _reencoded(_paths(source, synthetic_files), layout)


@pytest.fixture(scope="module", params=[(s, lay) for s in SOURCES for lay in ("444", "progressive")], ids=_ids)
def photos(request, synthetic_files) -> Tensor:
    """The same, in two layouts (64×64 and 67×61): for the edge cases and the timm comparisons."""
    source, layout = request.param
    return _reencoded(_paths(source, synthetic_files), layout)


def _gen(name: str) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(name.encode()))


def _u(n: int, g: torch.Generator, lo: float, hi: float, *shape: int) -> Tensor:
    return lo + (hi - lo) * torch.rand(n, *shape, generator=g, dtype=torch.float64)


def _per_sample(ref, x: Tensor, *params: Tensor) -> Tensor:
    """torchvision, one sample at a time, with that sample's parameters as Python values."""
    def py(p: Tensor):
        return p.tolist() if p.dim() else (int(p) if not p.is_floating_point() else float(p))
    return torch.stack([ref(x[i], *[py(p[i]) for p in params]) for i in range(x.shape[0])])


# name: (draw parameters (n, generator), batched kernel, torchvision per sample, atol float64, atol float32)
OPS = {
    "invert": (lambda n, g: (), P.invert, TVF.invert_image, 0.0, 0.0),
    "posterize": (lambda n, g: (torch.randint(0, 9, (n,), generator=g),), P.posterize, TVF.posterize_image, 0.0, 0.0),
    "solarize": (lambda n, g: (_u(n, g, 0, 1),), P.solarize, TVF.solarize_image, 0.0, 0.0),
    "autocontrast": (lambda n, g: (), P.autocontrast, TVF.autocontrast_image, 0.0, 0.0),
    "equalize": (lambda n, g: (), P.equalize, TVF.equalize_image, 0.0, 0.0),
    "grayscale": (lambda n, g: (), P.rgb_to_grayscale, lambda x: TVF.rgb_to_grayscale_image(x, 3), 0.0, 0.0),
    "brightness": (lambda n, g: (_u(n, g, 0, 2),), P.adjust_brightness, TVF.adjust_brightness_image, 0.0, 0.0),
    "contrast": (lambda n, g: (_u(n, g, 0, 2),), P.adjust_contrast, TVF.adjust_contrast_image, 1e-12, 1e-6),
    "saturation": (lambda n, g: (_u(n, g, 0, 2),), P.adjust_saturation, TVF.adjust_saturation_image, 1e-12, 1e-6),
    "sharpness": (lambda n, g: (_u(n, g, 0, 2),), P.adjust_sharpness, TVF.adjust_sharpness_image, 1e-12, 1e-6),
    "hue": (lambda n, g: (_u(n, g, -0.5, 0.5),), P.adjust_hue, TVF.adjust_hue_image, 1e-6, 1e-6),
    "blur": (lambda n, g: (_u(n, g, 0.2, 3.0, 2),), lambda x, s: P.gaussian_blur(x, (7, 5), s),
             lambda x, s: TVF.gaussian_blur_image(x, [7, 5], s), 1e-12, 1e-6),
}


@pytest.mark.parametrize("op", list(OPS))
def test_matches_torchvision(op: str, batch: Tensor):
    draw, ours, ref, tol64, tol32 = OPS[op]
    # float64 on 64×64 and 48×56 crops, float32 on 61×67 and 67×61 (each dtype on both sources)
    dtype = torch.float64 if batch.shape[-1] % 2 == 0 else torch.float32
    x = batch.to(dtype)
    params = draw(x.shape[0], _gen(op))
    out = ours(x, *params)
    assert out.dtype == dtype and out.shape == x.shape
    torch.testing.assert_close(out, _per_sample(ref, x, *params), atol=tol64 if dtype == torch.float64 else tol32, rtol=0)


def test_posterize_every_bit_count(photos: Tensor):
    x = photos[torch.arange(9) % photos.shape[0]]
    bits = torch.arange(9)  # 0..8, one per sample
    torch.testing.assert_close(P.posterize(x, bits), _per_sample(TVF.posterize_image, x, bits), atol=0, rtol=0)


def test_hue_extremes(photos: Tensor):
    x = photos[torch.arange(6) % photos.shape[0]]
    hue = torch.tensor([0.5, -0.5, 0.0, 0.25, -0.25, 0.5], dtype=torch.float64)
    torch.testing.assert_close(P.adjust_hue(x, hue), _per_sample(TVF.adjust_hue_image, x, hue), atol=1e-6, rtol=0)


def test_equalize_flat_channels(photos: Tensor):
    """Channels with one or two grey levels (PIL's ``step = 0``: returned as they are, through uint8)."""
    x = photos.clone()
    x[0, 1] = 0.5                 # one flat channel
    x[1] = 0.2                    # a flat image
    x[2, 0, : x.shape[2] // 2] = 0.1
    x[2, 0, x.shape[2] // 2:] = 0.9  # two levels
    x[3, 2] = 1.0
    torch.testing.assert_close(P.equalize(x), _per_sample(TVF.equalize_image, x), atol=0, rtol=0)
    torch.testing.assert_close(P.autocontrast(x), _per_sample(TVF.autocontrast_image, x), atol=0, rtol=0)


@pytest.mark.parametrize("sigma_shape", ["n", "n2"])
@pytest.mark.parametrize("kernel", [3, (5, 9)])
def test_blur_per_sample_sigma(photos: Tensor, kernel, sigma_shape: str):
    g = _gen(f"blur{kernel}{sigma_shape}")
    n = photos.shape[0]
    sigma = _u(n, g, 0.1, 4.0) if sigma_shape == "n" else _u(n, g, 0.1, 4.0, 2)
    k = [kernel, kernel] if isinstance(kernel, int) else list(kernel)
    ref = _per_sample(lambda x, s: TVF.gaussian_blur_image(x, k, s), photos, sigma)
    torch.testing.assert_close(P.gaussian_blur(photos, kernel, sigma), ref, atol=1e-12, rtol=0)


# -- geometry -------------------------------------------------------------------------------------------------------

def _fill(kind: str, n: int):
    """(fill for geometry.affine, fill per sample for torchvision): "none", "float", "channels" (a
    length-3 list) or "per-sample" (an ``(n, 3)`` tensor)."""
    if kind == "none":
        return None, [None] * n
    if kind == "float":
        return 0.3, [0.3] * n
    if kind == "channels":
        return [0.1, 0.5, 0.9], [[0.1, 0.5, 0.9]] * n
    f = _u(n, _gen("fill"), 0, 1, 3)
    return f, f.tolist()


def _assert_warp_close(out: Tensor, ref: Tensor, interpolation: str):
    if interpolation == "nearest":
        # a 1-ulp grid difference can flip a rounding tie: allow 0.1 % of values, the rest exact
        frac = ((out - ref).abs() >= 1e-3).double().mean().item()
        assert frac <= 1e-3, frac
        torch.testing.assert_close(torch.where((out - ref).abs() >= 1e-3, ref, out), ref, atol=0, rtol=0)
    else:
        tol = 1e-12 if out.dtype == torch.float64 else 2e-5
        torch.testing.assert_close(out, ref, atol=tol, rtol=0)


# every interpolation × centre × fill × dtype value, in 8 combinations (each on every batch)
AFFINE_CASES = [
    ("nearest", None, "none", torch.float64), ("nearest", [0.0, 0.0], "float", torch.float32),
    ("nearest", None, "channels", torch.float32), ("nearest", [0.0, 0.0], "per-sample", torch.float64),
    ("bilinear", None, "none", torch.float32), ("bilinear", [0.0, 0.0], "float", torch.float64),
    ("bilinear", None, "channels", torch.float64), ("bilinear", [0.0, 0.0], "per-sample", torch.float32),
]


def _case_id(case) -> str:
    interpolation, center, fill, dtype = case
    return f"{interpolation}-{'centre' if center is None else center}-{fill}-{str(dtype)[-2:]}"


@pytest.mark.parametrize("case", AFFINE_CASES, ids=_case_id)
def test_affine_matches_torchvision(batch: Tensor, case):
    interpolation, center, fill_kind, dtype = case
    x = batch.to(dtype)
    n, _, h, w = x.shape
    g = _gen(f"affine{interpolation}{center}{fill_kind}")
    angle, translate, scale, shear = _u(n, g, -45, 45), _u(n, g, -8, 8, 2), _u(n, g, 0.7, 1.3), _u(n, g, -20, 20, 2)
    fill, fills = _fill(fill_kind, n)
    inverse = G.affine_matrix(angle, translate, scale, shear, center, size=(h, w))
    out = G.affine(x, inverse, interpolation=interpolation, fill=fill)
    ref = torch.stack([
        TVF.affine_image(x[i], float(angle[i]), translate[i].tolist(), float(scale[i]), shear[i].tolist(),
                         interpolation=TVF.InterpolationMode(interpolation), fill=fills[i], center=center)
        for i in range(n)])
    assert out.dtype == dtype
    _assert_warp_close(out, ref, interpolation)


ROTATE_CASES = [
    ("nearest", None, "none", torch.float64), ("nearest", [0.0, 0.0], "channels", torch.float32),
    ("nearest", [20.5, 7.0], "per-sample", torch.float64), ("bilinear", None, "float", torch.float32),
    ("bilinear", [0.0, 0.0], "per-sample", torch.float64), ("bilinear", [20.5, 7.0], "none", torch.float32),
]


@pytest.mark.parametrize("case", ROTATE_CASES, ids=_case_id)
def test_rotate_matches_torchvision(batch: Tensor, case):
    interpolation, center, fill_kind, dtype = case
    x = batch.to(dtype)
    n = x.shape[0]
    angle = _u(n, _gen(f"rotate{center}{fill_kind}"), -180, 180)
    fill, fills = _fill(fill_kind, n)
    out = G.rotate(x, angle, interpolation=interpolation, fill=fill, center=center)
    ref = torch.stack([TVF.rotate_image(x[i], float(angle[i]), interpolation=TVF.InterpolationMode(interpolation),
                                        fill=fills[i], center=center) for i in range(n)])
    _assert_warp_close(out, ref, interpolation)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_rotate_right_angles(photos: Tensor, interpolation: str, dtype: torch.dtype):
    """torchvision copies / ``rot90``s at 0°, 180° (and 90°, 270° on square images); the warp
    lands on the same pixel centres."""
    angle = torch.tensor([0.0, 90.0, 180.0, 270.0, -90.0, 360.0, 450.0, -180.0], dtype=torch.float64)
    x = photos.to(dtype)[torch.arange(8) % photos.shape[0]]
    for sq in (x, x[..., : min(x.shape[-2:]), : min(x.shape[-2:])]):
        ref = _per_sample(lambda im, a: TVF.rotate_image(im, a, interpolation=TVF.InterpolationMode(interpolation)), sq, angle)
        _assert_warp_close(G.rotate(sq, angle, interpolation=interpolation), ref, interpolation)


def test_affine_bicubic(photos: Tensor):
    """No torchvision reference (it refuses bicubic for tensors): grid_sample's bicubic, clamped;
    identity at an identity matrix, and close to bilinear on a smooth warp."""
    n, _, h, w = photos.shape
    identity = torch.tensor([[1.0, 0, 0], [0, 1, 0]], dtype=torch.float64).expand(n, 2, 3)
    torch.testing.assert_close(G.affine(photos, identity, interpolation="bicubic", fill=0.5), photos, atol=1e-6, rtol=0)
    m = G.affine_matrix(_u(n, _gen("bicubic"), -20, 20), torch.zeros(n, 2), torch.ones(n), torch.zeros(n, 2), size=(h, w))
    cubic = G.affine(photos, m, interpolation="bicubic", fill=0.5)
    assert cubic.min() >= 0 and cubic.max() <= 1
    assert (cubic - G.affine(photos, m, interpolation="bilinear", fill=0.5)).abs().mean() < 0.03


def test_affine_fill_zero_is_not_none(photos: Tensor):
    """As in torchvision: ``fill=None`` keeps grid_sample's zero padding (edges fade to black),
    ``fill=0`` blends with the warped mask — they differ on bilinear edges, agree for nearest."""
    n, _, h, w = photos.shape
    m = G.affine_matrix(torch.full((n,), 30.0), torch.zeros(n, 2), torch.ones(n), torch.zeros(n, 2), size=(h, w))
    assert torch.equal(G.affine(photos, m, fill=None), G.affine(photos, m, fill=0.0))
    assert not torch.equal(G.affine(photos, m, interpolation="bilinear", fill=None),
                           G.affine(photos, m, interpolation="bilinear", fill=0.0))


# -- batching, dtypes ----------------------------------------------------------------------------------------------

def _kernels(n: int, h: int, w: int) -> dict:
    g = _gen(f"kernels{n}")
    fill = _u(n, g, 0, 1, 3)
    m = G.affine_matrix(_u(n, g, -30, 30), _u(n, g, -5, 5, 2), _u(n, g, 0.8, 1.2), _u(n, g, -10, 10, 2), size=(h, w))
    return {
        "invert": (P.invert, ()), "posterize": (P.posterize, (torch.randint(0, 9, (n,), generator=g),)),
        "solarize": (P.solarize, (_u(n, g, 0, 1),)), "solarize_add": (P.solarize_add, (_u(n, g, 0, 0.4), _u(n, g, 0, 1))),
        "autocontrast": (P.autocontrast, ()), "equalize": (P.equalize, ()), "grayscale": (P.rgb_to_grayscale, ()),
        "brightness": (P.adjust_brightness, (_u(n, g, 0, 2),)), "contrast": (P.adjust_contrast, (_u(n, g, 0, 2),)),
        "saturation": (P.adjust_saturation, (_u(n, g, 0, 2),)), "sharpness": (P.adjust_sharpness, (_u(n, g, 0, 2),)),
        "hue": (P.adjust_hue, (_u(n, g, -0.5, 0.5),)), "blur": (lambda x, s: P.gaussian_blur(x, 5, s), (_u(n, g, 0.2, 2),)),
        "affine": (lambda x, m, f: G.affine(x, m, interpolation="bilinear", fill=f), (m, fill)),
        "rotate": (lambda x, a: G.rotate(x, a, fill=0.5, center=[3.0, 4.0]), (_u(n, g, -30, 30),)),
    }


def test_aten_op_count_does_not_grow_with_the_batch():
    """No Python loop over samples: the same aten ops, as many times, for 4 samples and for 64."""
    from torch.profiler import ProfilerActivity, profile

    def counts(n: int) -> dict[str, dict[str, int]]:
        x = torch.rand(n, 3, 24, 20, generator=_gen("prof"), dtype=torch.float32)
        out = {}
        for name, (fn, params) in _kernels(n, 24, 20).items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                fn(x, *params)
            # top-level ops (what the kernel calls): their internals may switch paths with size
            # (zero_ memsets small tensors and fill_s large ones) without looping over samples
            top = [e.name for e in prof.events() if e.cpu_parent is None and e.name.startswith("aten::")]
            out[name] = {k: top.count(k) for k in sorted(set(top))}
        return out

    small, large = counts(4), counts(64)
    for name in small:
        assert small[name] and small[name] == large[name], name


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_half_precision_inputs(dtype: torch.dtype):
    """Half types are computed in float32 and returned in their own dtype."""
    x = torch.rand(4, 3, 24, 20, generator=_gen("half")).to(dtype)
    for name, (fn, params) in _kernels(4, 24, 20).items():
        out = fn(x, *params)
        assert out.dtype == dtype, name
        ref = fn(x.float(), *params)
        # equalize / posterize / solarize thresholds can tip one grey level at a half-precision rounding
        bad = ((out.float() - ref).abs() > (2e-3 if dtype == torch.float16 else 1e-2)).double().mean().item()
        assert bad <= 0.01, (name, bad)


def test_autocast_does_not_change_results():
    x = torch.rand(4, 3, 24, 20, generator=_gen("amp"))
    for name, (fn, params) in _kernels(4, 24, 20).items():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = fn(x, *params)
        assert out.dtype == torch.float32, name
        torch.testing.assert_close(out, fn(x, *params), atol=0, rtol=0, msg=name)


def test_shared_scalar_parameters(photos: Tensor):
    """A Python number is shared by the batch (and kept in float64: 0.3 is not float32's 0.3)."""
    ref = _per_sample(TVF.adjust_contrast_image, photos, torch.full((photos.shape[0],), 0.3, dtype=torch.float64))
    torch.testing.assert_close(P.adjust_contrast(photos, 0.3), ref, atol=1e-12, rtol=0)


# -- timm (PIL, uint8) ------------------------------------------------------------------------------------------------

FILL = (128, 128, 128)
RESAMPLE = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}


def _pil(x: Tensor) -> list[Image.Image]:
    u8 = (x * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    return [Image.fromarray(np.ascontiguousarray(a)) for a in u8]


def _levels(out: Tensor, pils: list[Image.Image]) -> tuple[float, float, float]:
    """(mean |Δ|, fraction of values > 2 apart, max |Δ|), in grey levels."""
    ref = torch.stack([torch.from_numpy(np.array(p)).permute(2, 0, 1) for p in pils]).double()
    d = (out.double() * 255 - ref).abs()
    return d.mean().item(), (d > 2).double().mean().item(), d.max().item()


def _timm_cases(n: int, h: int, w: int):
    """name → (our output from x, timm's op on PIL image i), parameters drawn per sample as timm's
    RandAugment would (magnitudes up to 10 / 10, random sign)."""
    from timm.data import auto_augment as AA

    rng = np.random.default_rng(0)
    sign = rng.choice([-1.0, 1.0], n)
    deg, shear = 30 * rng.uniform(0, 1, n) * sign, 0.3 * rng.uniform(0, 1, n) * sign
    pixels = 0.45 * w * rng.uniform(0, 1, n) * sign  # translate_x_rel's range, in pixels
    bits, thresh, add = rng.integers(1, 9, n), rng.integers(0, 257, n), rng.integers(0, 111, n)
    factor = rng.uniform(0.1, 1.9, n)
    fill = torch.tensor(FILL, dtype=torch.float64) / 255
    t = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731

    def warp(data, interp):
        return lambda x: G.affine(x, G.pil_affine_inverse(t(data), size=(h, w)), interpolation=interp, fill=fill)

    cases = {}
    for interp, resample in RESAMPLE.items():
        kw = dict(resample=resample, fillcolor=FILL)
        cases[f"rotate-{interp}"] = (lambda x, i=interp: G.rotate(x, t(deg), interpolation=i, fill=fill),
                                     lambda im, i, kw=kw: AA.rotate(im, deg[i], **kw))
        cases[f"shear_x-{interp}"] = (warp([[1, s, 0, 0, 1, 0] for s in shear], interp),
                                      lambda im, i, kw=kw: AA.shear_x(im, shear[i], **kw))
        cases[f"shear_y-{interp}"] = (warp([[1, 0, 0, s, 1, 0] for s in shear], interp),
                                      lambda im, i, kw=kw: AA.shear_y(im, shear[i], **kw))
        cases[f"translate_x-{interp}"] = (warp([[1, 0, p, 0, 1, 0] for p in pixels], interp),
                                          lambda im, i, kw=kw: AA.translate_x_abs(im, pixels[i], **kw))
        cases[f"translate_y-{interp}"] = (warp([[1, 0, 0, 0, 1, round(p)] for p in pixels], interp),
                                          lambda im, i, kw=kw: AA.translate_y_abs(im, round(pixels[i]), **kw))
    cases.update({
        "posterize": (lambda x: P.posterize(x, torch.as_tensor(bits)), lambda im, i: AA.posterize(im, int(bits[i]))),
        # the uint8 threshold t is t/255, computed in the image's dtype like the image's own values
        "solarize": (lambda x: P.solarize(x, t(thresh) / 255), lambda im, i: AA.solarize(im, int(thresh[i]))),
        "solarize_add": (lambda x: P.solarize_add(x, t(add) / 255, t(128.0) / 255),
                         lambda im, i: AA.solarize_add(im, int(add[i]), 128)),
        "equalize": (P.equalize, lambda im, i: AA.equalize(im)),
        "autocontrast": (P.autocontrast, lambda im, i: AA.auto_contrast(im)),
        "invert": (P.invert, lambda im, i: AA.invert(im)),
        "sharpness": (lambda x: P.adjust_sharpness(x, t(factor)), lambda im, i: AA.sharpness(im, factor[i])),
        "contrast": (lambda x: P.adjust_contrast(x, t(factor)), lambda im, i: AA.contrast(im, factor[i])),
        "brightness": (lambda x: P.adjust_brightness(x, t(factor)), lambda im, i: AA.brightness(im, factor[i])),
        "color": (lambda x: P.adjust_saturation(x, t(factor)), lambda im, i: AA.color(im, factor[i])),
    })
    return cases


# Bounds in grey levels: (mean |Δ|, fraction of values > 2 apart, max |Δ| or None). Measured on
# these batches (4 photos, 64×64 and 67×61, Imagenette and synthetic), worst batch:
#
# - nearest geometry: ≤ 0.002 mean, ≤ 0.02 %: PIL floors the sample point where grid_sample rounds
#   half to even, and its 16.16 fixed-point nearest path drifts by ~1e-3 px;
# - bilinear: ≤ 1.2 mean, ≤ 2.8 %: PIL truncates to uint8 (−0.5 on average); on the border PIL
#   clamps to the edge pixel inside the image box and takes the fill outside it, where torchvision
#   blends with the fill over half a pixel (whole-pixel translations are identical);
# - bicubic: ≤ 1.9 mean, ≤ 20 %: PIL's cubic has a = −0.5, grid_sample's a = −0.75;
# - brightness, sharpness, contrast, color: ≤ 0.47 mean, ≤ 1.4 max (PIL truncates its blends, its
#   grey is integer 299/587/114 and contrast's mean is rounded); posterize ≤ 1 (torchvision's float
#   rule: levels k/2^b, PIL's k·2^(8−b)/255); autocontrast ≤ 1 (PIL truncates its LUT);
# - solarize, solarize_add, equalize, invert: identical.
TIMM_BOUNDS = {
    "nearest": (0.1, 0.003, None), "bilinear": (1.6, 0.04, None), "bicubic": (2.5, 0.30, None),
    "translate_y-bilinear": (1e-9, 0.0, 1e-6), "translate_y-bicubic": (1e-9, 0.0, 1e-6),  # whole pixels
    "posterize": (0.6, 0.0, 1.0 + 1e-6), "autocontrast": (0.6, 0.0, 1.0 + 1e-6), "sharpness": (0.6, 0.0, 1.5),
    "contrast": (0.6, 0.0, 1.5), "brightness": (0.6, 0.0, 1.5), "color": (0.6, 0.0, 1.5),
    "solarize": (1e-9, 0.0, 1e-6), "solarize_add": (1e-9, 0.0, 1e-6), "equalize": (1e-9, 0.0, 1e-6), "invert": (1e-9, 0.0, 1e-6),
}


def _bound(case: str) -> tuple[float, float, float | None]:
    return TIMM_BOUNDS.get(case) or TIMM_BOUNDS[case.rsplit("-", 1)[-1]]


@pytest.fixture(scope="module", params=[("imagenette", "444"), ("synthetic", "progressive")], ids=_ids)
def timm_photos(request, synthetic_files) -> Tensor:
    source, layout = request.param
    return _reencoded(_paths(source, synthetic_files), layout)


@pytest.mark.parametrize("case", list(_timm_cases(N, 8, 8)))
def test_close_to_timm(timm_photos: Tensor, case: str):
    photos = timm_photos
    n, _, h, w = photos.shape
    ours, theirs = _timm_cases(n, h, w)[case]
    pils = _pil(photos)
    mean, frac, worst = _levels(ours(photos), [theirs(pils[i], i) for i in range(n)])
    max_mean, max_frac, max_abs = _bound(case)
    assert mean <= max_mean and frac <= max_frac, (case, mean, frac)
    assert max_abs is None or worst <= max_abs, (case, worst)


def test_whole_pixel_translation_equals_pil(photos: Tensor):
    """Whole-pixel translations sample pixel centres: every interpolation equals PIL's copy."""
    n, _, h, w = photos.shape
    data = torch.tensor([[1, 0, 5, 0, 1, -3]] * n, dtype=torch.float64)
    pils = _pil(photos)
    for interp, resample in RESAMPLE.items():
        out = G.affine(photos, G.pil_affine_inverse(data, size=(h, w)), interpolation=interp, fill=128 / 255)
        ref = [im.transform((w, h), Image.AFFINE, tuple(data[0].tolist()), resample, fillcolor=(128,) * 3) for im in pils]
        u8 = torch.stack([torch.from_numpy(np.array(p)).permute(2, 0, 1) for p in ref]).double()
        assert torch.equal((out * 255).round(), u8), interp


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_pil_affine_inverse_reproduces_pil(photos: Tensor, interpolation: str):
    """General affine data on real photos. Where PIL's sample point is at least a pixel inside the
    image, NEAREST agrees except on ≤ 0.1 % of values (floor vs round-half-even ties, PIL's
    fixed-point path) and BILINEAR agrees after ``floor(255·x)`` (PIL truncates) except on
    ≤ 0.1 % of values, by one level (PIL's ``a + (b − a)·d`` in double lands just under an
    integer); the border band differs as described at ``TIMM_BOUNDS``."""
    n, _, h, w = photos.shape
    rng = np.random.default_rng(1)
    lin = np.eye(2)[None] + rng.uniform(-0.3, 0.3, (n, 2, 2))
    shift = rng.uniform(-10, 10, (n, 2))
    data = np.concatenate([lin[:, 0], shift[:, :1], lin[:, 1], shift[:, 1:]], axis=1)  # (a, b, c, d, e, f)
    fill = (128, 128, 128)
    out = G.affine(photos, G.pil_affine_inverse(torch.from_numpy(data), size=(h, w)), interpolation=interpolation,
                   fill=torch.tensor(fill) / 255.0)
    pils = [im.transform((w, h), Image.AFFINE, tuple(data[i]), RESAMPLE[interpolation], fillcolor=fill)
            for i, im in enumerate(_pil(photos))]
    ref = torch.stack([torch.from_numpy(np.array(p)).permute(2, 0, 1) for p in pils]).double()
    xx, yy = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    px = data[:, 0, None, None] * xx + data[:, 1, None, None] * yy + data[:, 2, None, None]
    py = data[:, 3, None, None] * xx + data[:, 4, None, None] * yy + data[:, 5, None, None]
    inside = torch.from_numpy((px >= 1) & (px < w - 1) & (py >= 1) & (py < h - 1))[:, None].expand_as(ref)
    diff = ((out * 255 + 1e-6).floor() - ref).abs()[inside]
    assert inside.double().mean() > 0.4
    if interpolation == "nearest":
        assert (diff > 0).double().mean() <= 1e-3
        assert ((out * 255).round() != ref).double().mean() <= 1e-3  # border included
    else:
        assert diff.max() <= 1 and (diff > 0).double().mean() <= 1e-3


def test_timm_geometry_as_affine_matrix():
    """timm's PIL matrices in torchvision's parameters (what a RandAugment policy can call):

    - ``shear_x(f)``: ``affine_matrix(shear=(atan f in degrees, 0), center=[0, 0])``;
    - ``shear_y(f)``: ``affine_matrix(shear=(0, atan f in degrees), center=[0, 0])``;
    - ``translate_x_abs(t)`` / ``translate_y_abs(t)``: ``translate=(−t, 0)`` / ``(0, −t)``;
    - ``rotate(d)`` (PIL's ``Image.rotate``): ``rotate(img, d)``, i.e. ``affine_matrix(angle=−d)``."""
    h, w = 37, 52
    f = torch.tensor([-0.3, -0.1, 0.05, 0.3], dtype=torch.float64)
    z, one = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    deg = torch.rad2deg(torch.atan(f))

    def pil(rows):
        data = torch.stack([torch.as_tensor(r, dtype=torch.float64).expand(4) for r in rows], -1)
        return G.pil_affine_inverse(data, size=(h, w))

    def tv(angle=z, tx=z, ty=z, sx=z, sy=z, center=None):
        return G.affine_matrix(angle, torch.stack([tx, ty], -1), one, torch.stack([sx, sy], -1), center, size=(h, w))

    torch.testing.assert_close(pil([1, f, 0, 0, 1, 0]), tv(sx=deg, center=[0.0, 0.0]))
    torch.testing.assert_close(pil([1, 0, 0, f, 1, 0]), tv(sy=deg, center=[0.0, 0.0]))
    t = 40 * f
    torch.testing.assert_close(pil([1, 0, t, 0, 1, 0]), tv(tx=-t))
    torch.testing.assert_close(pil([1, 0, 0, 0, 1, t]), tv(ty=-t))
    # PIL.Image.rotate's own matrix (as timm's pre-5.2 fallback spells it out)
    d = 100 * f
    a = -torch.deg2rad(d)
    cx, cy = w / 2, h / 2
    m = [torch.cos(a), torch.sin(a), 0 * a, -torch.sin(a), torch.cos(a), 0 * a]
    m[2] = m[0] * -cx + m[1] * -cy + cx
    m[5] = m[3] * -cx + m[4] * -cy + cy
    torch.testing.assert_close(pil(m), tv(angle=-d))


# -- CUDA -------------------------------------------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu_without_host_sync():
    x = torch.rand(8, 3, 40, 36, generator=_gen("cuda"))
    kernels = _kernels(8, 40, 36)
    cpu = {name: fn(x, *params) for name, (fn, params) in kernels.items()}
    xc = x.cuda()
    dev = {name: (fn, tuple(p.cuda() for p in params)) for name, (fn, params) in kernels.items()}
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = {name: fn(xc, *params) for name, (fn, params) in dev.items()}
    finally:
        torch.cuda.set_sync_debug_mode(0)
    for name in cpu:
        bad = ((out[name].cpu() - cpu[name]).abs() > 1e-4).double().mean().item()
        assert bad <= 1e-3, (name, bad)  # equalize / posterize / nearest may tip one level at a rounding tie
    with torch.autocast("cuda", dtype=torch.bfloat16):
        amp = {name: fn(xc, *params) for name, (fn, params) in dev.items()}
    for name in cpu:
        assert amp[name].dtype == torch.float32
        assert ((amp[name].cpu() - cpu[name]).abs() > 1e-4).double().mean().item() <= 1e-3, name
