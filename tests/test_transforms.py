"""Every DCT-domain transform against its pixel-domain reference (torchvision, or plain torch
maths where torchvision has no such op), with identical parameters, on real photos.

Reference setup: ``x0`` is the coefficient image of an in-range RGB image (the decoded photo,
re-encoded exactly: ``from_rgb(to_rgb(x))``), ``rgb0 = to_rgb(x0)``. For a transform ``T`` with
pixel counterpart ``P``: ``to_rgb(T(x0))`` vs ``P(rgb0)``. Tolerances (on [0, 1]):
flips / transpose / crops / mixup / cutmix / erasing 1e-5 (float rounding only); brightness 1e-5;
contrast, saturation, grayscale 2e-3 (torchvision's grey is 0.2989 R, JFIF's Y 0.299 R).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms.v2 import functional as TVF

import dctnet
from dctnet.kernels import color as KC
from dctnet.kernels import dct as KD
import dctnet.image as IM
import dctnet.resize as RS
from dctnet import data as D
from dctnet import transforms as T
from dctnet.synthetic import synthetic_jpeg
from dctnet.kernels import coefficients as TF

from conftest import imagenette_files


def photos(n: int = 6) -> list[str]:
    files = imagenette_files("val", every=400)[:n]
    if files:
        return files
    import tempfile

    d = tempfile.mkdtemp()
    out = []
    for i in range(n):
        p = f"{d}/{i}.jpg"
        with open(p, "wb") as f:
            f.write(synthetic_jpeg(i, 224, 224))
        out.append(p)
    return out


@pytest.fixture(scope="module")
def x0() -> torch.Tensor:
    """(B, 3, 28, 28, 64) coefficient images of real 224² photos (in range, see module doc)."""
    imgs = []
    for path in photos():
        c = dctnet.read_coefficients(path)
        rgb = IM.coefficients_to_rgb(c)
        imgs.append(RS.resized_crop(rgb, torch.tensor([[0, 0, c.height, c.width]]), (224, 224)))
    rgb = torch.cat(imgs).double()
    return TF.coefficient_image_from_rgb(rgb)


def rgb(x: torch.Tensor) -> torch.Tensor:
    return TF.coefficient_image_to_rgb(x)


def close(a: torch.Tensor, b: torch.Tensor, tol: float) -> None:
    torch.testing.assert_close(a, b, atol=tol, rtol=0)


def test_reference_image_is_in_range(x0):
    r = KC.ycbcr_to_rgb(KD.block_idct(x0) + 128.0, dim=1) / 255
    assert r.min() >= -1e-9 and r.max() <= 1 + 1e-9


def test_flips_and_transpose_exact(x0):
    mask = torch.tensor([True, False, True, True, False, True])
    r = rgb(x0)
    close(rgb(TF.hflip(x0, mask)), torch.where(mask[:, None, None, None], TVF.horizontal_flip(r), r), 1e-5)
    close(rgb(TF.vflip(x0, mask)), torch.where(mask[:, None, None, None], TVF.vertical_flip(r), r), 1e-5)
    close(rgb(TF.transpose(x0)), r.transpose(-1, -2), 1e-5)
    # rot90 = transpose then flip
    close(rgb(TF.hflip(TF.transpose(x0))), torch.rot90(r, -1, dims=(-2, -1)), 1e-5)


def test_brightness_exact(x0):
    b = torch.tensor([0.6, 1.0, 1.4, 0.9, 1.2, 0.3], dtype=torch.float64)
    want = torch.stack([TVF.adjust_brightness(img, float(f)) for img, f in zip(rgb(x0), b)])
    close(rgb(TF.adjust_brightness(x0, b)), want, 1e-5)


def test_contrast_saturation_grayscale(x0):
    f = torch.tensor([0.5, 1.0, 1.5, 0.8, 1.3, 0.0], dtype=torch.float64)
    r = rgb(x0)
    close(rgb(TF.adjust_contrast(x0, f)), torch.stack([TVF.adjust_contrast(i, float(v)) for i, v in zip(r, f)]), 2e-3)
    close(rgb(TF.adjust_saturation(x0, f)),
          torch.stack([TVF.adjust_saturation(i, float(v)) for i, v in zip(r, f)]), 2e-3)
    close(rgb(TF.grayscale(x0)), TVF.rgb_to_grayscale(r, num_output_channels=3), 2e-3)


def test_chroma_rotation_is_a_rotation_of_the_chroma_plane(x0):
    """Reference: plain maths on the (Cb, Cr) samples (this is not torchvision's HSV hue)."""
    angle = torch.tensor([0.3, -1.0, 0.0, 2.0, 0.5, -0.2], dtype=torch.float64)
    ycc = KD.block_idct(x0)  # (B, 3, H, W) level-shifted samples
    cos, sin = torch.cos(angle)[:, None, None], torch.sin(angle)[:, None, None]
    want = torch.stack([ycc[:, 0], cos * ycc[:, 1] - sin * ycc[:, 2], sin * ycc[:, 1] + cos * ycc[:, 2]], 1)
    close(KD.block_idct(TF.rotate_chroma(x0, angle)), want, 1e-8)


def test_requantize_matches_numpy_and_ijg_tables(x0):
    q = torch.tensor([10, 50, 75, 90, 95, 100])
    tables = TF.ijg_tables(q)
    # IJG tables: libjpeg's own output for that quality (Pillow's encoder) is the oracle
    for quality, t in zip(q.tolist(), tables):
        hdr = dctnet.read_header(synthetic_jpeg(0, 16, 16, quality=quality, subsampling="4:4:4"))
        np.testing.assert_array_equal(t[0].numpy(), hdr.quant_tables[0].reshape(64))
        np.testing.assert_array_equal(t[1].numpy(), hdr.quant_tables[1].reshape(64))
    got = TF.requantize(x0, tables).numpy()
    tab = tables.numpy()[:, :, None, None, :]
    np.testing.assert_allclose(got, np.round(x0.numpy() / tab) * tab, atol=1e-9)


def test_frequency_ops(x0):
    keep = torch.rand(6, 64, generator=torch.Generator().manual_seed(1)) > 0.3
    got = TF.frequency_dropout(x0, keep)
    np.testing.assert_array_equal(got.numpy(), x0.numpy() * keep.numpy()[:, None, None, None, :])
    sel = T.SelectFrequencies(zigzag=10)(x0)
    np.testing.assert_array_equal(sel.numpy(), x0.numpy()[..., list(KD.ZIGZAG[:10])])
    sq = T.SelectFrequencies(square=3)(x0)
    assert sq.shape[-1] == 9 and torch.equal(sq[..., 4], x0[..., 9])
    with pytest.raises(ValueError):
        T.SelectFrequencies(index=[0, 64])


def test_normalize_and_stats_roundtrip(x0, tmp_path):
    norm = D.compute_stats([x0[:3], x0[3:]], save=tmp_path / "stats.pt")
    flat = x0.permute(1, 4, 0, 2, 3).reshape(3, 64, -1)
    np.testing.assert_allclose(norm.mean.numpy(), flat.mean(-1).numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(norm.std.numpy(), flat.std(-1, unbiased=False).clamp(min=1e-6).numpy(), rtol=1e-4)
    z = T.Normalize.load(tmp_path / "stats.pt")(x0.float())
    zf = z.permute(1, 4, 0, 2, 3).reshape(3, 64, -1)
    assert zf.mean(-1).abs().max() < 1e-3
    assert (zf.std(-1) - 1).abs()[flat.std(-1) > 1e-3].max() < 1e-3


def test_to_rgb_normalized_like_torchvision(x0):
    out = T.ToRGB()(x0)
    want = TVF.normalize(rgb(x0).float(), mean=list(T.IMAGENET_MEAN), std=list(T.IMAGENET_STD))
    close(out.float(), want, 1e-4)


def _torchvision_rrc(height, width, u, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's RandomResizedCrop.make_params, transcribed, with its random numbers replaced
    by the given uniforms (area, log-ratio, top, left per try) — the oracle for the algorithm."""
    import math

    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for t in range(10):
        target_area = area * (scale[0] + (scale[1] - scale[0]) * u[t, 0])
        aspect_ratio = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * u[t, 1])
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            return int(u[t, 2] * (height - h + 1)), int(u[t, 3] * (width - w + 1)), h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, int(round(height * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def test_crop_boxes_follow_torchvision_algorithm_and_distribution():
    crop = D.RandomResizedCrop()
    # the C sampler against torchvision's algorithm fed the numpy implementation of the same
    # counter-based stream (two independent implementations of the random numbers)
    sizes = [(333, 201), (224, 224), (20, 500), (500, 20), (17, 33), (1, 1)]
    for h, w in sizes:
        u = D.crop.uniforms(7, 3, np.arange(200), 40)
        got = crop.boxes(np.full(200, h), np.full(200, w), 7, 3, np.arange(200))
        want = [_torchvision_rrc(h, w, ui.reshape(10, 4)) for ui in u]
        assert [tuple(b) for b in got.tolist()] == want, (h, w)
    rng = np.random.default_rng(0)
    hs, ws = rng.integers(1, 600, 3000), rng.integers(1, 600, 3000)
    idx = np.arange(3000) * 7919 - 5000  # negative indices wrap like uint64 in both
    u = D.crop.uniforms(2**64 - 3, 2, idx, 40)
    want = [_torchvision_rrc(int(h), int(w), ui.reshape(10, 4), scale=(0.3, 0.9), ratio=(0.5, 2.0))
            for h, w, ui in zip(hs, ws, u)]
    wide = D.RandomResizedCrop(scale=(0.3, 0.9), ratio=(0.5, 2.0))
    assert [tuple(b) for b in wide.boxes(hs, ws, -3, 2, idx).tolist()] == want
    assert [wide.box(int(h), int(w), -3, 2, int(i)) for h, w, i in zip(hs[:50], ws[:50], idx[:50])] == want[:50]
    with pytest.raises(ValueError, match="positive"):
        crop.boxes(np.array([0]), np.array([5]), 0, 0, np.array([1]))
    center = D.CenterCrop()
    assert [tuple(b) for b in center.boxes(hs, ws).tolist()] == [center.box(int(h), int(w)) for h, w in zip(hs, ws)]
    # the draws are uniform and a pure function of (seed, epoch, index)
    u = D.crop.uniforms(1, 0, np.arange(20000), 4)
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005 and u.min() >= 0 and u.max() < 1
    assert np.array_equal(D.crop.uniforms(1, 0, [5, 9], 4), u[[5, 9]])
    assert not np.array_equal(D.crop.uniforms(1, 1, [5], 4), u[[5]])
    # area fraction of the boxes matches torchvision's sampler in distribution (same algorithm, other RNG)
    from torchvision.transforms import v2

    tv = v2.RandomResizedCrop(128)
    torch.manual_seed(0)
    img = torch.zeros(3, 224, 224)
    tv_area = np.array([(lambda p: p["height"] * p["width"])(tv.make_params([img])) for _ in range(3000)]) / 224**2
    ours = D.draw_boxes(crop, np.full(3000, 224), np.full(3000, 224), 0, 0, np.arange(3000))
    our_area = ours[:, 2] * ours[:, 3] / 224**2
    assert abs(np.median(tv_area) - np.median(our_area)) < 0.03 and abs(tv_area.mean() - our_area.mean()) < 0.02


@pytest.mark.parametrize("exact", [False, True])
def test_device_crop_matches_torchvision_resized_crop(exact):
    """The loader's window + device resize vs Pillow decode + torchvision resized_crop: within a
    few grey levels with the float decode, the same numbers (float rounding) with the exact one."""
    files = photos(8)
    ds_samples = []
    crop = D.RandomResizedCrop()
    for i, path in enumerate(files):
        c = dctnet.read_coefficients(path)
        ds_samples.append((path, D.sample_from_coefficients(c, crop, 0, i, seed=0, epoch=0)))
    batch = D.collate([s for _, s in ds_samples], pin_memory=False)
    ours = T.crops_to_rgb(batch, (128, 128), exact=exact).double()
    worst = []
    for k, (path, s) in enumerate(ds_samples):
        with Image.open(path) as im:
            ref = torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1).double() / 255
        c = dctnet.read_coefficients(path)
        box = tuple(int(v) for v in D.draw_boxes(crop, c.height, c.width, 0, 0, k)[0])
        want = TVF.resized_crop(ref, *box, [128, 128], antialias=True).clamp(0, 1)
        d = (ours[k] - want).abs() * 255
        worst.append((d.max().item(), d.mean().item()))
    if exact:
        assert max(w for w, _ in worst) < 0.01, worst
    else:
        assert max(w for w, _ in worst) <= 4 and max(m for _, m in worst) < 0.5, worst


def test_compose_is_seeded_and_randaugment_runs(x0):
    """A list mixing pixel ops (hue, RandAugment), exact "any" ops and coefficient ops is seeded, and
    gives back the representation it was given (no converter at the end)."""
    def pipeline(seed):
        return T.Compose([T.RandomHorizontalFlip(), T.ColorJitter(0.3, 0.3, 0.3, 0.2), T.RandomChromaRotation(30.0),
                          T.RandomGrayscale(0.3), T.RandAugment(), T.RandomErasing(0.5), T.RandomRequantize(),
                          T.FrequencyDropout(0.1)], seed=seed)

    x = x0[:, :, 8:16, 8:16].contiguous()  # 64² of each photo: quick
    a, b, c = pipeline(1)(x), pipeline(1)(x), pipeline(2)(x)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.shape == x.shape and torch.isfinite(a).all()
    r = rgb(x)
    assert pipeline(1)(r).shape == r.shape  # pixels in, pixels out
    labels = torch.arange(6) % 3
    for mixer in (T.Mixup(mixup_alpha=0.4, cutmix_alpha=1.0, num_classes=3, seed=0), T.MixUp(0.4, num_classes=3, seed=0),
                  T.CutMix(1.0, num_classes=3, seed=0)):
        xm, ym = mixer(x0, labels)
        assert xm.shape == x0.shape and ym.shape == (6, 3), type(mixer).__name__
        torch.testing.assert_close(ym.sum(1), torch.ones(6, dtype=ym.dtype))
        assert not torch.equal(xm, x0), type(mixer).__name__


def test_color_jitter_on_coefficients_is_the_dct_kernels_in_the_drawn_order(x0):
    """Without hue, ColorJitter stays on the coefficient image: each sample gets brightness,
    contrast and saturation (the exact DCT kernels) in its own drawn order (torchvision's
    randperm(4), hue's slot empty), factors in [1 - a, 1 + a]."""
    x0 = x0[:, :, 10:18, 10:18].contiguous()  # 64² of each photo: the per-sample reference is slow on 224²
    t = T.ColorJitter(0.4, 0.5, 0.6, seed=3)
    assert t.domain == "any"
    params = t.draw_params(x0.shape, torch.Generator().manual_seed(11))
    out = t(x0, params=params)
    kernels = {0: TF.adjust_brightness, 1: TF.adjust_contrast, 2: TF.adjust_saturation}
    orders = set()
    for i in range(x0.shape[0]):  # the reference, one sample at a time
        want = x0[i:i + 1]
        ops = [(k, f) for k, f in zip(params["op"][i].tolist(), params["arg"][i].tolist()) if k >= 0]
        assert sorted(k for k, _ in ops) == [0, 1, 2]  # hue (3) is absent: -1 in its position
        for k, f in ops:
            assert 1 - (0.4, 0.5, 0.6)[k] <= f <= 1 + (0.4, 0.5, 0.6)[k]
            want = kernels[k](want, torch.tensor([f], dtype=torch.float64))
        orders.add(tuple(params["op"][i].tolist()))
        torch.testing.assert_close(out[i:i + 1], want, atol=1e-9, rtol=1e-12)
    assert len(orders) > 1
    # with hue, the same draws run on the decoded pixels (HSV hue needs them) and come back as coefficients
    hue = T.ColorJitter(0.4, 0.5, 0.6, 0.1, seed=3)
    assert hue.domain == "pixel"
    hp = hue.draw_params(x0.shape, torch.Generator().manual_seed(11))
    assert (hp["op"] == 3).any(1).all()
    torch.testing.assert_close(hue(x0, params=hp), TF.coefficient_image_from_rgb(hue(rgb(x0), params=hp)), atol=1e-9, rtol=0)


def test_random_chroma_rotation_turns_by_at_most_its_degrees():
    """RandomChromaRotation(degrees=30) turns each sample's (Cb, Cr) plane by an angle in [-30°, 30°],
    measured on the output (regression: the angle was taken as radians, so 30 turned by up to ~1719°),
    luma untouched; the same angle on pixels and on coefficients."""
    import math

    g = torch.Generator().manual_seed(0)
    x = TF.coefficient_image_from_rgb(0.25 + 0.5 * torch.rand(400, 3, 8, 8, generator=g, dtype=torch.float64))
    t = T.RandomChromaRotation(degrees=30, seed=0)
    out, params = t(x, return_params=True)
    assert torch.equal(out[:, 0], x[:, 0])
    cb, cr, cb2, cr2 = x[:, 1], x[:, 2], out[:, 1], out[:, 2]
    turned = torch.rad2deg(torch.atan2((cb * cr2 - cr * cb2).sum((1, 2, 3)), (cb * cb2 + cr * cr2).sum((1, 2, 3))))
    assert turned.abs().max() <= 30 + 1e-6 and turned.abs().max() > 29, turned.abs().max()
    torch.testing.assert_close(turned, params["angle"], atol=1e-6, rtol=0)
    assert (turned > 0).any() and (turned < 0).any()
    # pixels (in range: no clamp): the same rotation of the YCbCr samples
    px = t(TF.coefficient_image_to_rgb(x[:8]), params={k: v[:8] for k, v in params.items()})
    torch.testing.assert_close(TF.coefficient_image_from_rgb(px), out[:8], atol=1e-3, rtol=0)  # JFIF's constants in float32 there
    for bad in (181, -1, math.nan, True):
        with pytest.raises(ValueError, match="degrees"):
            T.RandomChromaRotation(degrees=bad)


def test_no_per_sample_loop_in_device_transforms():
    """Operator count of the device path — crops decoded to pixels, the augmentation there, one
    forward DCT for the coefficient ops, ToRGB — does not grow with the batch size (a per-sample
    loop would multiply it 12×), on a batch mixing three layouts (4:2:0, 4:4:4, gray): one decode
    per layout group, whatever the group sizes. The large batch replays the small batch's draws
    tiled 12× (the policies group samples by the op they drew: the same groups in both); the draws
    themselves are counted apart (a handful of host-side parameter ops may differ). Counted: the
    top-level operators, what the Python code calls."""
    from torch.profiler import ProfilerActivity, profile

    def jpeg_batch(n: int) -> T.JpegBatch:
        g = torch.Generator().manual_seed(0)
        rows = torch.arange(3 * n).reshape(n, 3).T  # interleaved: sample i has layout i % 3
        layouts = (("YCbCr", T.SAMPLING_420, [(8, 8), (4, 4), (4, 4)]),
                   ("YCbCr", ((1, 1), (1, 1), (1, 1)), [(8, 8)] * 3), ("gray", ((1, 1),), [(8, 8)]))
        groups = tuple(T.PlaneGroup(cs, sampling, tuple(torch.randint(-50, 50, (n, h, w, 64), dtype=torch.int16,
                                                                      generator=g) for h, w in shapes), r.contiguous())
                       for (cs, sampling, shapes), r in zip(layouts, rows))
        b = 3 * n
        return T.JpegBatch(groups=groups, valid=torch.tensor([[64, 64]] * b), boxes=torch.tensor([[3, 5, 40, 50]] * b),
                           labels=torch.zeros(b, dtype=torch.long), index=torch.arange(b))

    aug = T.Compose([T.RandomHorizontalFlip(), T.ColorJitter(0.3, 0.3, 0.3, 0.1), T.RandomGrayscale(), T.RandAugment(),
                     T.RandomErasing(mode="pixel"), T.ToCoefficients(), T.RandomRequantize(), T.FrequencyDropout()],
                    seed=0)

    def top_level(prof) -> int:
        # the ops the Python code calls: ATen's internals split large tensors into more slices
        # (narrow/as_strided) as the batch grows, without any loop over samples
        return sum(1 for e in prof.events() if e.cpu_parent is None)

    def tiled(params, k: int):
        return {name: tiled(v, k) if isinstance(v, dict) else v.repeat(k, *([1] * (v.dim() - 1)))
                for name, v in params.items()}

    def count(k: int) -> int:
        batch = jpeg_batch(2 * k)
        params = tiled(aug.draw_params((6, 3, 32, 32), torch.Generator().manual_seed(1)), k)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            x = T.crops_to_rgb(batch, (32, 32))
            x, _ = aug(x, torch.nn.functional.one_hot(batch.labels, 10).float(), params=params)
            assert x.shape == (6 * k, 3, 32, 32)  # no converter at the end: pixels in, pixels out
            T.ToRGB()(x)
        return top_level(prof)

    def count_draws(b: int) -> int:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            aug.draw_params((b, 3, 32, 32), torch.Generator().manual_seed(1))
        return top_level(prof)

    count(1)
    small, large = count(1), count(12)
    assert abs(large - small) <= 0.01 * small, (small, large)
    small, large = count_draws(24), count_draws(288)
    assert abs(large - small) <= 0.02 * small, (small, large)


def test_torchvision_v2_dispatches_to_dct_kernels(x0):
    from torchvision.transforms import v2

    from dctnet.transforms.tv import DCTImage

    d = DCTImage(x0)
    flipped = v2.RandomHorizontalFlip(p=1.0)(d)
    assert isinstance(flipped, DCTImage)
    assert torch.equal(flipped.as_subclass(torch.Tensor), TF.hflip(x0))
    for kw, fn in (("brightness", TF.adjust_brightness), ("contrast", TF.adjust_contrast),
                   ("saturation", TF.adjust_saturation)):
        jit = v2.ColorJitter(**{kw: (1.3, 1.3)})(d)
        # v2 draws the factor as float32 (1.2999999523…): coefficients agree to that precision
        torch.testing.assert_close(jit.as_subclass(torch.Tensor), fn(x0, torch.full((6,), 1.3, dtype=torch.float64)),
                                   atol=1e-3, rtol=1e-6)
    q = v2.JPEG(quality=(40, 40))(d)
    torch.testing.assert_close(q.as_subclass(torch.Tensor), TF.requantize(x0, TF.ijg_tables(torch.full((6,), 40))))
    g = v2.Grayscale(num_output_channels=3)(d)
    assert not g[:, 1:].any()
    for t, word in ((v2.RandomRotation(10), "rotate"), (v2.Normalize([0.5] * 3, [0.2] * 3), "Normalize"),
                    (v2.ColorJitter(hue=0.1), "RandomChromaRotation")):
        with pytest.raises(TypeError, match=word):
            t(d)
    # torchvision's policies look for an image before any kernel: they name dctnet's own class
    for t, word in ((v2.RandAugment(), "dctnet.transforms.RandAugment"), (v2.AutoAugment(), "dctnet.transforms.AutoAugment"),
                    (v2.TrivialAugmentWide(), "dctnet.transforms.TrivialAugmentWide"), (v2.AugMix(), "no such policy")):
        with pytest.raises(TypeError, match=word):
            t(d)
    pixels = torch.randint(0, 256, (3, 16, 16), dtype=torch.uint8)  # other inputs: torchvision's own behaviour
    assert v2.RandAugment()(pixels).shape == pixels.shape
    with pytest.raises(ValueError, match="expects"):
        DCTImage(torch.zeros(2, 3, 8, 8))
