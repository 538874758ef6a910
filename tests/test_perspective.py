"""torchvision v2's ``RandomPerspective`` in both systems, against torchvision itself (the oracle:
float32 ``grid_sample`` on the same images with the same parameters).

- **The kernel** (:mod:`dctnet.kernels.geometry`): the coefficients are torchvision's
  ``_get_perspective_coeffs`` bit for bit (the same float64 least squares, rounded to float32); the
  grid is its ``_perspective_grid`` with the ``bmm`` replaced by elementwise sums, so the sampling
  points agree to the last bit of a float32 sum (measured: equal on these images). Bilinear pixels
  are held to 2e-5 (a few float32 ulps of the grid moving a [0, 1] blend), as the affine kernel's
  test holds them; nearest pixels exactly, but for the rare rounding tie that one ulp may flip
  (≤ 0.1 % of values).
- **Classification** (:class:`dctnet.transforms.RandomPerspective`): its draw is torchvision's
  ``make_params`` (the same ``randint`` calls in the same order: for one image, the same numbers from
  a generator seeded alike; for a batch, the same law per sample); pixels as above; a coefficient
  image is decoded, warped and encoded back: decoded again, it equals torchvision's warp of the
  decoded input within the DCT round trip's float32 rounding (≤ 1e-4).
- **Detection** (:class:`dctnet.transforms.detection.RandomPerspective`, ``tv_tensors``): with the
  sample's generator and torch's global one seeded alike, the same coin and points: boxes (corners
  mapped, enclosing box, clamped) within 1e-3 px (equal in practice), labels and nearest masks equal,
  pixels within 1e-4 (bilinear: a padded batch normalises each canvas by the batch's size, a few
  ulps of the grid) — also after a vertical flip that puts a nearest warp beside a bilinear one in
  one stage, and on canvases of different sizes.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw
from torch import Tensor
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.functional import _get_perspective_coeffs
from torchvision.transforms.v2 import functional as TVF

from dctnet.kernels import geometry as G
from dctnet.synthetic import synthetic_jpeg
from dctnet.transforms import detection as TD
from dctnet.transforms.augment import RandomPerspective, perspective_points
from dctnet.transforms.base import BaselineContext, to_coefficients, to_pixels
from dctnet.transforms.registry import build_transform, counterpart, op_table

from conftest import imagenette_files
from test_detection_geometry import ours, tv_sample  # (the detection oracle's harness)

#: the canvases the detection samples are cut to (different sizes: a padded batch)
SIZES = ((150, 200), (181, 163), (120, 256), (97, 130))


def _sources(n: int) -> list[Image.Image]:
    """``n`` real photos (Imagenette's), else generated JPEGs, as RGB PIL images."""
    files = imagenette_files("val", every=613)[:n]
    if len(files) == n:
        return [Image.open(p).convert("RGB") for p in files]
    return [Image.open(io.BytesIO(synthetic_jpeg(i, 256, 320))).convert("RGB") for i in range(n)]


@pytest.fixture(scope="module")
def photos() -> Tensor:
    """float32 ``(4, 3, 96, 120)`` in [0, 1] (multiples of 8: a coefficient image too)."""
    out = [torch.from_numpy(np.asarray(im.resize((120, 96)))).permute(2, 0, 1) for im in _sources(4)]
    return torch.stack(out).float() / 255


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> list[dict]:
    """JPEG files at the :data:`SIZES` with boxes (one the whole image, one degenerate, the rest random)
    and an ellipse mask per box; the last sample has no boxes."""
    d = tmp_path_factory.mktemp("perspective")
    rng = np.random.default_rng(3)
    out = []
    for i, (img, (h, w)) in enumerate(zip(_sources(len(SIZES)), SIZES)):
        path = d / f"{i}.jpg"
        img.resize((w, h)).save(path, "JPEG", quality=90)
        if i == len(SIZES) - 1:
            boxes = np.zeros((0, 4))
        else:
            xy = rng.uniform(0, [w * 0.7, h * 0.7], (7, 2))
            boxes = np.concatenate([xy, np.minimum(xy + rng.uniform(8, [w * 0.5, h * 0.5], (7, 2)), [w, h])], 1)
            boxes[0] = (0, 0, w, h)
            boxes[1] = (w / 3, h / 3, w / 3, h / 2)
        masks = np.zeros((len(boxes), h, w), np.uint8)
        for k, (x1, y1, x2, y2) in enumerate(boxes):
            m = Image.new("L", (w, h))
            ImageDraw.Draw(m).ellipse([x1, y1, max(x1, x2 - 1), max(y1, y2 - 1)], fill=1)
            masks[k] = np.asarray(m)
        with Image.open(path) as im:
            pixels = torch.from_numpy(np.asarray(im.convert("RGB")).copy()).permute(2, 0, 1).float() / 255
        out.append({"path": str(path), "boxes": boxes, "masks": masks, "pixels": pixels,
                    "labels": torch.arange(1, len(boxes) + 1)})
    return out


def _assert_warp_close(out: Tensor, ref: Tensor, interpolation: str, tol: float = 2e-5) -> None:
    diff = (out - ref).abs()
    if interpolation == "nearest":
        assert (diff > 1e-6).double().mean().item() <= 1e-3, float((diff > 1e-6).double().mean())
    else:
        assert diff.max().item() <= tol, float(diff.max())


def _endpoints(n: int, h: int, w: int, g: torch.Generator) -> Tensor:
    """End points as torchvision draws them at distortion 0.6."""
    return perspective_points(n, h, w, 0.6, g)[1]


# ---------------------------------------------------------------------------------------------- kernel
def test_coefficients_are_torchvisions_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    for h, w in ((96, 120), (7, 5), (480, 640)):
        start = torch.tensor([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]])
        end = _endpoints(16, h, w, g)
        ours = G.perspective_coefficients(start, end)
        ref = torch.tensor([_get_perspective_coeffs(start.tolist(), e.tolist()) for e in end])
        assert ours.dtype == torch.float32 and torch.equal(ours, ref)


@pytest.mark.parametrize("interpolation", ["bilinear", "nearest"])
@pytest.mark.parametrize("fill", [None, 0.0, (0.2, 0.5, 0.9)], ids=["none", "zero", "rgb"])
def test_kernel_matches_torchvision(photos, interpolation, fill):
    n, _, h, w = photos.shape
    start = torch.tensor([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]])
    end = _endpoints(n, h, w, torch.Generator().manual_seed(1))
    coefficients = G.perspective_coefficients(start, end)
    out = G.perspective(photos, coefficients, interpolation=interpolation, fill=fill)
    ref = torch.stack([TVF.perspective_image(photos[i], start.tolist(), end[i].tolist(), interpolation=interpolation,
                                             fill=None if fill is None else list(np.atleast_1d(fill)))
                       for i in range(n)])
    _assert_warp_close(out, ref, interpolation)
    assert (out - photos).abs().mean() > 0.02  # (it warped)


# ---------------------------------------------------------------------------------------------- draw law
def test_one_image_draws_torchvisions_points(monkeypatch):
    """Seeded alike, one image draws the points torchvision's ``make_params`` draws (captured where it
    hands them to ``_get_perspective_coeffs``), and the coefficients it returns."""
    import torchvision.transforms.v2._geometry as tv_geometry

    seen = []
    real = tv_geometry._get_perspective_coeffs
    monkeypatch.setattr(tv_geometry, "_get_perspective_coeffs", lambda s, e: seen.append((s, e)) or real(s, e))
    for k, (h, w, d) in enumerate([(96, 120, 0.5), (33, 17, 1.0), (224, 224, 0.2), (5, 9, 0.0)]):
        torch.manual_seed(k)
        want = v2.RandomPerspective(d).make_params([tv_tensors.Image(torch.zeros(3, h, w))])
        params = RandomPerspective(d, p=1.0).draw_params((1, 3, h, w), torch.Generator().manual_seed(k))
        assert params["startpoints"][0].tolist() == seen[-1][0] and params["endpoints"][0].tolist() == seen[-1][1]
        got = G.perspective_coefficients(params["startpoints"], params["endpoints"])[0].tolist()
        assert got == want["coefficients"]


def test_a_batch_draws_each_sample_by_torchvisions_law():
    """Per sample and corner coordinate, the draw is uniform over torchvision's range
    ``[0, int(d·⌊side/2⌋)]`` from the corner inward: every value is reached and the counts are
    within 5 σ of uniform; the coin of ``p`` comes after the points."""
    h, w, d, n = 40, 50, 0.5, 20000
    params = RandomPerspective(d, p=0.3).draw_params((n, 3, h, w), torch.Generator().manual_seed(7))
    inward = params["endpoints"].clone()
    inward[:, 1:3, 0] = w - 1 - inward[:, 1:3, 0]
    inward[:, 2:4, 1] = h - 1 - inward[:, 2:4, 1]
    for axis, side in ((0, w), (1, h)):
        bound = int(d * (side // 2)) + 1
        counts = torch.stack([torch.bincount(inward[:, c, axis], minlength=bound) for c in range(4)])
        assert counts.shape == (4, bound)
        expected = n / bound
        assert (counts - expected).abs().max() <= 5 * (expected * (1 - 1 / bound)) ** 0.5
    assert abs(params["apply"].double().mean().item() - 0.3) < 0.02
    assert torch.equal(params["startpoints"][0], torch.tensor([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]))


# ---------------------------------------------------------------------------------------------- classification
@pytest.mark.parametrize("interpolation,fill", [("bilinear", 0.0), ("nearest", (0.1, 0.6, 0.3)), ("bilinear", None)])
def test_classification_pixels_match_torchvision(photos, interpolation, fill):
    x = torch.cat([photos, photos.flip(-1)])
    t = RandomPerspective(0.6, p=0.5, interpolation=interpolation, fill=fill, seed=3)
    out, params = t(x, return_params=True)
    on = params["apply"]
    assert on.any() and not on.all()
    assert torch.equal(out[~on], x[~on])
    for i in on.nonzero()[:, 0].tolist():
        ref = TVF.perspective(x[i], params["startpoints"][i].tolist(), params["endpoints"][i].tolist(),
                              interpolation=TVF.InterpolationMode(interpolation),
                              fill=None if fill is None else list(np.atleast_1d(fill)))
        _assert_warp_close(out[i], ref, interpolation)


def test_classification_warps_only_the_samples_that_drew_it_at_fixed_shapes(photos):
    """With ``p < 1`` the device warps the rows that drew the op, in groups of a fixed size (the same
    plan shapes whatever the coins: one compiled graph), with exactly the values of exact groups and of
    the whole batch warped then selected."""
    from dctnet.transforms.base import plan_signature

    x = torch.cat([photos, photos.flip(-2), photos.flip(-1)])
    t = RandomPerspective(0.5, p=0.4, seed=9)
    signatures = set()
    for k in range(3):
        params = t.draw_params(x.shape, torch.Generator().manual_seed(k))
        fixed = t(x, params=params)
        signatures.add(plan_signature(x, None, t.prepare(params, x.shape, "cpu")))
        exact = t.set_fixed_shapes(False)(x, params=params)
        t.set_fixed_shapes(True)
        whole = G.perspective(x, G.perspective_coefficients(params["startpoints"], params["endpoints"]), fill=0.0)
        on = params["apply"][:, None, None, None]
        assert torch.equal(fixed, exact) and torch.equal(fixed, torch.where(on, whole, x))
    assert len(signatures) == 1


def test_classification_on_coefficients_decodes_to_torchvisions_warp(photos):
    x = to_coefficients(photos)
    t = RandomPerspective(0.5, p=1.0, seed=4)
    out, params = t(x, return_params=True)
    assert out.shape == x.shape
    decoded, given = to_pixels(out.as_subclass(Tensor)), to_pixels(x)
    ref = torch.stack([TVF.perspective(given[i], params["startpoints"][i].tolist(), params["endpoints"][i].tolist(),
                                       fill=0) for i in range(x.shape[0])])
    _assert_warp_close(decoded, ref, "bilinear", tol=1e-4)
    assert (decoded - given).abs().mean() > 0.02


def test_classification_op_is_declared_for_recipes_and_the_rgb_arm(photos):
    spec = {"name": "RandomPerspective", "distortion_scale": 0.3, "fill": [0.5, 0.25, 1.0]}
    op = build_transform(spec, num_classes=None, seed=0)
    assert isinstance(op, RandomPerspective) and op.fill == (0.5, 0.25, 1.0) and op.domain == "pixel"
    ctx = BaselineContext(mean=(0.5,) * 3, std=(0.5,) * 3, image_size=96, interpolation="bicubic")
    tv = counterpart(spec, ctx)
    assert isinstance(tv, v2.RandomPerspective) and (tv.distortion_scale, tv.p) == (0.3, 0.5)
    assert tv.interpolation == v2.InterpolationMode.BILINEAR and tv.fill == [128, 64, 255]  # PIL's 8-bit fill
    pil = Image.fromarray((photos[0].permute(1, 2, 0) * 255).byte().numpy())
    assert tv(pil).size == pil.size
    assert "| `RandomPerspective` |" in op_table()
    with pytest.raises(ValueError, match="distortion_scale"):
        RandomPerspective(1.5)


# ---------------------------------------------------------------------------------------------- detection
MEAN = (123.0, 117.0, 104.0)
CASES = {  # name: (dctnet's ops, torchvision's), each ending in a sanitize
    "bilinear": ([TD.RandomPerspective(0.6, p=0.8, fill=MEAN)],
                 [v2.RandomPerspective(0.6, p=0.8, fill={tv_tensors.Image: [m / 255 for m in MEAN], tv_tensors.Mask: 0})]),
    # after a vertical flip: the flip's nearest warp and the perspective in one stage, one pass
    "nearest": ([TD.RandomVerticalFlip(0.5), TD.RandomPerspective(0.8, p=0.8, interpolation="nearest")],
                [v2.RandomVerticalFlip(0.5), v2.RandomPerspective(0.8, p=0.8, interpolation="nearest")]),
    # a resize and flips first: a vertical flip's nearest warp and the bilinear perspective in one stage (two passes)
    "after flips": ([TD.RandomShortestSize((100, 140), max_size=200), TD.RandomHorizontalFlip(0.5),
                     TD.RandomVerticalFlip(0.5), TD.RandomPerspective(0.5, p=0.7)],
                    [v2.RandomShortestSize((100, 140), max_size=200), v2.RandomHorizontalFlip(0.5),
                     v2.RandomVerticalFlip(0.5), v2.RandomPerspective(0.5, p=0.7)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_detection_matches_torchvision_with_tv_tensors(samples, case):
    ours_ops, tv_ops = CASES[case]
    mode = "nearest" if case == "nearest" else "bilinear"
    warped = 0
    for round_ in range(3):
        seeds = [100 * round_ + i for i in range(len(samples))]
        plan, images, masks = ours([*ours_ops, TD.SanitizeBoundingBoxes()], samples, seeds)
        for b, (s, k) in enumerate(zip(samples, seeds)):
            torch.manual_seed(k)
            want = v2.Compose([*tv_ops, v2.SanitizeBoundingBoxes()])(tv_sample(s))
            where = f"{s['path']} seed {k}"
            wi, wb = want["image"].as_subclass(Tensor), want["boxes"].as_subclass(Tensor)
            assert images[b].shape == wi.shape, where
            _assert_warp_close(images[b], wi, mode, tol=1e-4)
            t = plan.targets[b]
            assert t["boxes"].shape == wb.shape and (len(wb) == 0 or (t["boxes"] - wb).abs().max() <= 1e-3), where
            assert torch.equal(t["labels"], want["labels"]), where
            assert torch.equal(masks[b], want["masks"].as_subclass(Tensor)), where
        warped += sum(int((w.on & w.perspective).sum()) for ws in plan.warps if ws for w in ws)
    assert warped >= 4  # the coin came up


def test_detection_op_is_registered_and_bridged():
    """Declared once in ``ops.py``: an op list names it in both arms (``fill`` in 8-bit levels for
    images, 0 for masks on the rgb arm); declaring a detection op registers it."""
    spec = [{"name": "RandomPerspective", "distortion_scale": 0.4, "fill": [1, 2, 3]}]
    ours = TD.build_detection_ops(spec)
    assert isinstance(ours[0], TD.RandomPerspective) and ours[0].distortion_scale == 0.4
    assert isinstance(ours[-1], TD.SanitizeBoundingBoxes)
    tv = TD.torchvision_ops(spec).transforms[0]
    assert isinstance(tv, v2.RandomPerspective) and tv.fill == {tv_tensors.Image: [1, 2, 3], tv_tensors.Mask: 0}
    from dctnet.transforms.detection.bridge import RECIPE_OPS

    class NewDetectionOp(TD.DetectionOp):
        def __call__(self, geom, target, gen):
            pass

    try:
        assert RECIPE_OPS["NewDetectionOp"] is NewDetectionOp
        assert isinstance(TD.build_detection_ops([{"name": "NewDetectionOp"}], sanitize=False)[0], NewDetectionOp)
    finally:
        del RECIPE_OPS["NewDetectionOp"]
    assert "DetectorResize" not in RECIPE_OPS and "RandomPerspective" in RECIPE_OPS
    with pytest.raises(ValueError, match="unknown detection op 'RandomPerspectiv'"):
        TD.build_detection_ops([{"name": "RandomPerspectiv"}])
