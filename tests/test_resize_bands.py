"""A CPU resamples from the bands of the resampling matrices (dctnet.resize.banded_resample: sparse
products, row selections for crops, pads and flips) where a GPU multiplies the dense matrices; both
must give the same pixels. Every geometry the detection step asks of dctnet.resize.resized_crop —
antialiased and torch's plain bilinear weights (and both in one batch), resize-then-crop offsets
with padding and fill, flips of either axis, a canvas read through selection maps, up- and
downscales, odd sizes, column-major images, one layout group written into its batch — on the band
path against the dense one (forced on the CPU by dctnet.resize.use_band), and the whole detection
step on a CPU: it takes the bands (the dense product is never called) and equals the dense step.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

import dctnet
from dctnet import resize as RS
from dctnet.data.collate import collate
from dctnet.data.crop import FullImage
from dctnet.data.dataset import sample_from_coefficients
from dctnet.transforms import detection as TD


@pytest.fixture
def dense(monkeypatch):
    """Force the dense matrices on the CPU (what a GPU multiplies) while the fixture is active."""
    def force() -> None:
        monkeypatch.setattr(RS, "use_band", lambda x: False)
    return force


def _geometry(g: torch.Generator, n: int, shape: tuple[int, int], size: tuple[int, int]):
    """Boxes inside ``shape``, each resized to between a third and 2.5× of itself (downscales and
    upscales), with a window at offsets from before the resized box to past it (padding)."""
    h, w = shape
    bh = torch.randint(1, h + 1, (n,), generator=g)
    bw = torch.randint(1, w + 1, (n,), generator=g)
    bh[0], bw[0] = h, w  # a whole image
    top = (torch.rand(n, generator=g, dtype=torch.float64) * (h - bh + 1)).long()
    left = (torch.rand(n, generator=g, dtype=torch.float64) * (w - bw + 1)).long()
    rh = (bh * (0.3 + 2.2 * torch.rand(n, generator=g, dtype=torch.float64))).long().clamp(min=1)
    rw = (bw * (0.3 + 2.2 * torch.rand(n, generator=g, dtype=torch.float64))).long().clamp(min=1)
    rh[1], rw[1] = bh[1], bw[1]  # a box kept at its size: a crop, a pad, no resampling
    oy = torch.randint(-5, 6, (n,), generator=g) + (rh - size[0]) // 2
    ox = torch.randint(-5, 6, (n,), generator=g) + (rw - size[1]) // 2
    return torch.stack([top, left, bh, bw], 1), torch.stack([rh, rw, oy, ox], 1)


@pytest.mark.parametrize("interpolation,antialias", [("bilinear", True), ("bicubic", True), ("bilinear", False),
                                                     ("bilinear", "mixed")])
@pytest.mark.parametrize("shape,size", [((37, 53), (24, 31)), ((20, 13), (33, 41)), ((64, 48), (64, 48))])
def test_bands_equal_the_dense_matrices(dense, interpolation, antialias, shape, size):
    """resized_crop's band path (a CPU's) against the dense matrices on the same geometry: resize
    then crop with offsets and padding (fill per channel), flips of each axis on part of the batch,
    row- and column-major images; equal up to float32 summation order."""
    g = torch.Generator().manual_seed(sum(shape) + sum(size) + len(str(antialias)))
    n = 7
    boxes, resize = _geometry(g, n, shape, size)
    img = torch.rand(n, 3, *shape, generator=g)
    cols = img.transpose(-1, -2).contiguous().transpose(-1, -2)  # the same values stored column by column
    aa = torch.rand(n, generator=g) < 0.5 if antialias == "mixed" else antialias
    if antialias == "mixed":
        aa[:2] = torch.tensor([True, False])
    flips = torch.rand(n, 2, generator=g) < 0.5
    canvas = torch.tensor([size] * n) - torch.randint(0, 3, (n, 2), generator=g)  # each sample's own canvas
    kw = dict(interpolation=interpolation, resize=resize, fill=(0.25, 0.5, 0.75), antialias=aa,
              flip=(flips, canvas))
    banded = RS.resized_crop(img, boxes, size, **kw)
    by_columns = RS.resized_crop(cols, boxes, size, **kw)
    dense()
    want = RS.resized_crop(img, boxes, size, **kw)
    assert banded.shape == want.shape == (n, 3, *size) and banded.is_contiguous()
    torch.testing.assert_close(banded, want, atol=2e-6, rtol=0)
    torch.testing.assert_close(by_columns, want, atol=2e-6, rtol=0)
    assert (want == 0.25).any()  # the padding was there to fill


@pytest.mark.parametrize("antialias", [True, False])
def test_a_canvas_read_through_selection_maps(dense, antialias):
    """``through``: the boxes are in a canvas selected from the images (a crop with padding and a
    flip, as a detection stage that only selects; and an arbitrary permutation, whose taps spread
    over the whole axis) — one resampling equal to materialising the canvas and resampling that,
    on the band and the dense path."""
    g = torch.Generator().manual_seed(3 + antialias)
    n, (h, w), (ch, cw), size = 5, (29, 41), (33, 37), (19, 45)
    img = torch.rand(n, 3, h, w, generator=g)
    top = torch.randint(-3, 4, (n, 1), generator=g)
    left = torch.randint(-3, 8, (n, 1), generator=g)
    rows = torch.arange(ch)[None, :] + top
    cols = torch.arange(cw)[None, :] + left
    cols[1] = cols[1].flip(0)  # a flipped sample
    cols[2] = torch.randperm(cw, generator=g)  # (not a selection a stage makes: the band's widest case)
    rows = torch.where((rows >= 0) & (rows < h), rows, -1)
    cols = torch.where((cols >= 0) & (cols < w), cols, -1)
    gathered = img[torch.arange(n)[:, None, None], :, rows.clamp(min=0)[:, :, None], cols.clamp(min=0)[:, None, :]]
    canvas = gathered.permute(0, 3, 1, 2) * ((rows >= 0)[:, None, :, None] & (cols >= 0)[:, None, None, :])
    boxes, resize = _geometry(g, n, (ch, cw), size)
    kw = dict(resize=resize, antialias=antialias)
    for use_dense in (False, True):
        if use_dense:
            dense()
        through = RS.resized_crop(img, boxes, size, through=(rows, cols), **kw)
        torch.testing.assert_close(through, RS.resized_crop(canvas.contiguous(), boxes, size, **kw), atol=2e-6, rtol=0)


def test_one_layout_group_into_its_batch_and_half_images():
    """``into`` on the band path: a column-major group's crops at its rows of the whole batch, zeros
    elsewhere (the product's empty rows), or the group alone where that is not free; half images
    are resampled in float32."""
    g = torch.Generator().manual_seed(0)
    img = torch.rand(3, 3, 30, 40, generator=g)
    cols = img.transpose(-1, -2).contiguous().transpose(-1, -2)
    boxes, resize = _geometry(g, 3, (30, 40), (16, 24))
    at = torch.tensor([1, 4, 5])
    crops = RS.resized_crop(img, boxes, (16, 24), resize=resize)
    whole = RS.resized_crop(cols, boxes, (16, 24), resize=resize, into=(at, 7))
    assert whole.shape == (7, 3, 16, 24)
    torch.testing.assert_close(whole, torch.zeros(7, 3, 16, 24).index_copy_(0, at, crops), atol=2e-6, rtol=0)
    alone = RS.resized_crop(img, boxes, (16, 24), resize=resize, into=(at, 7))  # row-major: the group alone
    assert torch.equal(alone, crops)
    half = RS.resized_crop(img.half(), boxes, (16, 24), resize=resize)
    assert half.dtype == torch.float16
    want = RS.resized_crop(img.half().float(), boxes, (16, 24), resize=resize).half()
    torch.testing.assert_close(half.float(), want.float())


def _jpegs(tmp_path) -> list[str]:
    """Odd-sized photos-like images in four layouts."""
    rng = np.random.default_rng(0)
    paths = []
    for i, (sub, size) in enumerate([(0, (221, 157)), (1, (160, 203)), (2, (199, 199)), (2, (96, 131))]):
        base = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
        img = Image.fromarray(base).resize(size, Image.BICUBIC)
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=90, subsampling=sub, progressive=i == 3)
        path = tmp_path / f"{i}.jpg"
        path.write_bytes(buf.getvalue())
        paths.append(str(path))
    return paths


def test_the_detection_step_on_a_cpu_takes_the_bands(tmp_path, dense, monkeypatch):
    """The detection step on a CPU — zoom-out with a fill, IoU crop, both flips, colour ops, a
    resize, then the detector's plain resize (stage 0 a selection for some draws, read through by
    the next stage; antialiased and plain samples in one stage) — never calls the dense product,
    and gives the dense step's pixels within float rounding."""
    paths = _jpegs(tmp_path)
    batch = collate([sample_from_coefficients(dctnet.read_coefficients(p), FullImage(), 0, i)
                     for i, p in enumerate(paths)], pin_memory=False)
    targets = []
    for i, p in enumerate(paths):
        with Image.open(p) as im:
            w, h = im.size
        targets.append({"boxes": torch.tensor([[w * 0.2, h * 0.3, w * 0.7, h * 0.9], [1.0, 2.0, w / 2, h / 3]]),
                        "labels": torch.tensor([1, 2]), "size": (h, w), "index": i})
    mean = (123.0, 117.0, 104.0)
    cases = [[TD.RandomHorizontalFlip(0.5), TD.RandomCrop(150, pad_if_needed=True), TD.DetectorResize((120, 140), 200)],
             [TD.RandomPhotometricDistort(p=0.5), TD.RandomZoomOut(mean, side_range=(1.0, 1.4), p=0.5),
              TD.RandomIoUCrop(), TD.RandomVerticalFlip(0.5), TD.RandomHorizontalFlip(0.5), TD.Resize(160),
              TD.DetectorResize((120, 140), 200)]]
    for ops in cases:
        step = TD.DetectionStep(ops, seed=5)
        plans = [step.plan(targets, epoch) for epoch in range(2)]

        def no_dense(*args, **kwargs):
            raise AssertionError("the dense product on a CPU")

        with monkeypatch.context() as m:
            m.setattr(RS, "apply_matrices", no_dense)
            banded = [step.apply(batch, targets, plan)[0] for plan in plans]
        with monkeypatch.context() as m:
            m.setattr(RS, "use_band", lambda x: False)
            want = [step.apply(batch, targets, plan)[0] for plan in plans]
        for got, ref in zip(banded, want):
            for a, b in zip(got, ref):
                assert a.shape == b.shape
                torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
