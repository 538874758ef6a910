"""Detection geometry against torchvision v2 with tv_tensors: the same draws (the sample's
generator and torch's global one seeded alike) give the same boxes (≤ 1e-4 px), the same labels,
the same nearest-neighbour masks (exactly) and the same pixels (float, up to rounding) — on real
photos of every JPEG layout, with boxes that leave the canvas, degenerate boxes and images with no
boxes. torchvision's references' ``FixedSizeCrop`` is not in the torchvision package: the oracle
here runs its code on torchvision's own crop and pad kernels.

Because every op consumes its generator exactly as torchvision's class consumes torch's, equal
parameters over many seeds are the presets' draw laws, checked in the strongest form.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TVF

import dctnet
from dctnet.data.collate import collate
from dctnet.data.crop import FullImage
from dctnet.data.dataset import sample_from_coefficients
from dctnet.transforms import detection as TD
from dctnet.transforms.detection.apply import selects

from conftest import SHARED, imagenette_files

TREES = SHARED / "data" / "trees"
BOX_TOL = 1e-4


# ---------------------------------------------------------------------------------------------- data
def _encode(img: Image.Image, layout: str) -> bytes:
    buf = io.BytesIO()
    if layout == "gray":
        img.convert("L").save(buf, "JPEG", quality=90)
    elif layout == "cmyk":
        img.convert("CMYK").save(buf, "JPEG", quality=90)
    elif layout == "progressive":
        img.save(buf, "JPEG", quality=90, progressive=True)
    else:
        img.save(buf, "JPEG", quality=90, subsampling={"444": 0, "422": 1, "420": 2}[layout])
    return buf.getvalue()


def _masks_for(boxes: np.ndarray, h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """An ellipse inside each box (some masks empty: degenerate boxes)."""
    out = np.zeros((len(boxes), h, w), np.uint8)
    for i, (x1, y1, x2, y2) in enumerate(boxes):
        m = Image.new("L", (w, h))
        ImageDraw.Draw(m).ellipse([x1, y1, max(x1, x2 - 1), max(y1, y2 - 1)], fill=1)
        out[i] = np.asarray(m)
    return out


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> list[dict]:
    """Real photos in every layout with boxes and masks: the trees tiles (their own boxes) and
    Imagenette photos re-encoded at non-square sizes with boxes drawn here, one of them touching
    every edge, one degenerate, and one image with no boxes."""
    rng = np.random.default_rng(0)
    d = tmp_path_factory.mktemp("det")
    out = []
    if (TREES / "val.json").exists():
        meta = json.loads((TREES / "val.json").read_text())
        by_image: dict[int, list] = {}
        for a in meta["annotations"]:
            by_image.setdefault(a["image_id"], []).append(a["bbox"])
        for im in meta["images"][:4]:
            xywh = np.array(by_image.get(im["id"], []), np.float64).reshape(-1, 4)
            boxes = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], 1)
            out.append({"path": str(TREES / "val" / im["file_name"]), "boxes": boxes})
    photos = imagenette_files("val", every=500)[:5]
    sources = [Image.open(p).convert("RGB") for p in photos] or [
        Image.fromarray(rng.integers(0, 256, (240, 320, 3), dtype=np.uint8)) for _ in range(5)]
    for i, (img, layout) in enumerate(zip(sources, ("444", "422", "gray", "cmyk", "progressive"))):
        img = img.resize((300 + 40 * i, 200 + 24 * i))
        w, h = img.size
        path = d / f"{layout}.jpg"
        path.write_bytes(_encode(img, layout))
        if i == 4:
            boxes = np.zeros((0, 4))
        else:
            xy = rng.uniform(0, [w * 0.7, h * 0.7], (6, 2))
            wh = rng.uniform(8, [w * 0.5, h * 0.5], (6, 2))
            boxes = np.concatenate([xy, np.minimum(xy + wh, [w, h])], 1)
            boxes[0] = (0, 0, w, h)                     # the whole image: every edge
            boxes[1] = (w / 3, h / 3, w / 3, h / 2)     # degenerate: zero width
        out.append({"path": str(path), "boxes": boxes})
    for s in out:
        with Image.open(s["path"]) as im:
            s["pixels"] = torch.from_numpy(np.asarray(im.convert("RGB")).copy()).permute(2, 0, 1).float() / 255
        h, w = s["pixels"].shape[-2:]
        s["masks"] = _masks_for(s["boxes"], h, w, rng)
        s["labels"] = torch.arange(1, len(s["boxes"]) + 1)
    return out


# ---------------------------------------------------------------------------------------------- oracle
class RefFixedSizeCrop(torch.nn.Module):
    """torchvision's detection references' FixedSizeCrop (references/detection/transforms.py), on
    v2 tv_tensors with torchvision's crop and pad kernels."""

    def __init__(self, size: int, fill) -> None:
        super().__init__()
        self.h = self.w = size
        self.fill = [f / 255 for f in fill]

    def forward(self, s: dict) -> dict:
        img = s["image"]
        h, w = img.shape[-2:]
        nh, nw = min(h, self.h), min(w, self.w)
        if (nh, nw) != (h, w):
            r = torch.rand(1)
            top, left = int(max(h - self.h, 0) * r), int(max(w - self.w, 0) * r)
            b = s["boxes"].as_subclass(torch.Tensor).clone()
            b[:, 0::2] -= left
            b[:, 1::2] -= top
            b[:, 0::2].clamp_(min=0, max=nw)
            b[:, 1::2].clamp_(min=0, max=nh)
            ok = (b[:, 0] < b[:, 2]) & (b[:, 1] < b[:, 3])
            s = {**s, "image": TVF.crop(img, top, left, nh, nw), "labels": s["labels"][ok],
                 "boxes": tv_tensors.BoundingBoxes(b[ok], format="XYXY", canvas_size=(nh, nw))}
            if "masks" in s:
                s["masks"] = TVF.crop(tv_tensors.Mask(s["masks"][ok]), top, left, nh, nw)
        pb, pr = max(self.h - nh, 0), max(self.w - nw, 0)
        if pb or pr:
            b = s["boxes"].as_subclass(torch.Tensor)
            s = {**s, "image": TVF.pad(s["image"], [0, 0, pr, pb], fill=self.fill),
                 "boxes": tv_tensors.BoundingBoxes(b, format="XYXY", canvas_size=(nh + pb, nw + pr))}
            if "masks" in s:
                s["masks"] = TVF.pad(s["masks"], [0, 0, pr, pb], fill=0)
        return s


def tv_sample(s: dict) -> dict:
    h, w = s["pixels"].shape[-2:]
    return {"image": tv_tensors.Image(s["pixels"]),
            "boxes": tv_tensors.BoundingBoxes(torch.as_tensor(s["boxes"], dtype=torch.float32), format="XYXY",
                                              canvas_size=(h, w)),
            "masks": tv_tensors.Mask(torch.from_numpy(s["masks"])), "labels": s["labels"]}


def ours(ops: list, samples: list[dict], seeds: list[int]):
    comp = TD.DetectionCompose(ops)
    geoms, targets = [], []
    for s, k in zip(samples, seeds):
        g, t = comp.draw_one(tuple(s["pixels"].shape[-2:]), {"boxes": s["boxes"], "labels": s["labels"]},
                             torch.Generator().manual_seed(k))
        geoms.append(g)
        targets.append(t)
    plan = TD.plan_of(geoms, targets)
    batch = collate([sample_from_coefficients(dctnet.read_coefficients(s["path"]), FullImage(), 0, i)
                     for i, s in enumerate(samples)], pin_memory=False)
    images, masks = TD.apply_plan(batch, plan, [torch.from_numpy(s["masks"]) for s in samples], exact=True)
    return plan, images, masks


def check(ops: list, tv_ops: list, samples: list[dict], seeds: list[int], *, pixel_tol: float = 5e-5) -> None:
    plan, images, masks = ours(ops, samples, seeds)
    for b, (s, k) in enumerate(zip(samples, seeds)):
        torch.manual_seed(k)
        want = v2.Compose(tv_ops)(tv_sample(s))
        t = plan.targets[b]
        wb = want["boxes"].as_subclass(torch.Tensor)
        where = f"{s['path']} seed {k}"
        assert t["boxes"].shape == wb.shape, where
        assert (t["boxes"] - wb).abs().max().item() <= BOX_TOL if len(wb) else True, where
        assert torch.equal(t["labels"], want["labels"]), where
        assert tuple(images[b].shape) == tuple(want["image"].shape), where
        assert (images[b] - want["image"].as_subclass(torch.Tensor)).abs().max().item() <= pixel_tol, where
        assert torch.equal(masks[b], want["masks"].as_subclass(torch.Tensor)), where


SEEDS = [0, 1, 2, 3, 5, 8]


def seeds_for(n: int, round_: int) -> list[int]:
    return [SEEDS[round_ % len(SEEDS)] * 1000 + i for i in range(n)]


# ---------------------------------------------------------------------------------------------- per op
@pytest.mark.parametrize("round_", range(3))
def test_horizontal_flip(samples, round_):
    check([TD.RandomHorizontalFlip(0.5)], [v2.RandomHorizontalFlip(0.5)], samples, seeds_for(len(samples), round_))


def test_random_crop_pads_if_needed(samples):
    """v2.RandomCrop(pad_if_needed=True): a short side padded by the shortfall on both ends, then the
    crop — on images both larger and smaller than it (the corpus's sizes vary)."""
    fill = [123.0, 117.0, 104.0]
    check([TD.RandomCrop((230, 360), pad_if_needed=True, fill=fill), TD.RandomHorizontalFlip(0.5)],
          [v2.RandomCrop((230, 360), pad_if_needed=True,
                         fill={tv_tensors.Image: [v / 255 for v in fill], tv_tensors.Mask: 0}),
           v2.RandomHorizontalFlip(0.5)], samples, seeds_for(len(samples), 0))


@pytest.mark.parametrize("round_", [0, 1])
def test_vertical_flip_with_the_other_ops(samples, round_):
    check([TD.RandomVerticalFlip(0.5), TD.RandomHorizontalFlip(0.5), TD.RandomResizedCrop((160, 192), scale=(0.3, 1.0)),
           TD.RandomVerticalFlip(0.5)],
          [v2.RandomVerticalFlip(0.5), v2.RandomHorizontalFlip(0.5), v2.RandomResizedCrop((160, 192), scale=(0.3, 1.0)),
           v2.RandomVerticalFlip(0.5)], samples, seeds_for(len(samples), round_))


@pytest.mark.parametrize("size,max_size", [(256, None), ([200, 330], None), (320, 400), (600, None)])
def test_resize(samples, size, max_size):
    check([TD.Resize(size, max_size)], [v2.Resize(size, max_size=max_size)], samples, seeds_for(len(samples), 0))


@pytest.mark.parametrize("round_", range(2))
def test_random_shortest_size_and_scale_jitter(samples, round_):
    seeds = seeds_for(len(samples), round_)
    check([TD.RandomShortestSize((160, 224, 288), max_size=400)],
          [v2.RandomShortestSize((160, 224, 288), max_size=400)], samples, seeds)
    check([TD.ScaleJitter((256, 256), (0.5, 1.5))], [v2.ScaleJitter((256, 256), (0.5, 1.5))], samples, seeds)


@pytest.mark.parametrize("round_", range(2))
def test_zoom_out_then_iou_crop_then_flip(samples, round_):
    """ssd's geometry: padding with the mean, a crop of the padded canvas, a flip, one stage."""
    mean = (123.0, 117.0, 104.0)
    fill = {tv_tensors.Image: [m / 255 for m in mean], tv_tensors.Mask: 0}
    check([TD.RandomZoomOut(mean, p=1.0), TD.RandomIoUCrop(), TD.RandomHorizontalFlip(0.5), TD.SanitizeBoundingBoxes()],
          [v2.RandomZoomOut(fill, p=1.0), v2.RandomIoUCrop(), v2.RandomHorizontalFlip(0.5), v2.SanitizeBoundingBoxes()],
          [s for s in samples if len(s["boxes"])], seeds_for(len(samples), round_))


@pytest.mark.parametrize("round_", range(2))
def test_fixed_size_crop_crops_and_pads(samples, round_):
    mean = (123.0, 117.0, 104.0)
    seeds = seeds_for(len(samples), round_)
    check([TD.ScaleJitter((320, 320), (0.5, 1.5)), TD.FixedSizeCrop(256, fill=mean), TD.RandomHorizontalFlip(0.5)],
          [v2.ScaleJitter((320, 320), (0.5, 1.5)), RefFixedSizeCrop(256, mean), v2.RandomHorizontalFlip(0.5)],
          samples, seeds)


@pytest.mark.parametrize("round_", range(2))
def test_random_resized_crop_carries_boxes_and_masks(samples, round_):
    """The crop read and resized in one resampling (torchvision's resized_crop), after a flip and
    before another: boxes clamped to the crop, then scaled."""
    check([TD.RandomHorizontalFlip(0.5), TD.RandomResizedCrop((160, 192), scale=(0.2, 1.0)), TD.RandomHorizontalFlip(0.5)],
          [v2.RandomHorizontalFlip(0.5), v2.RandomResizedCrop((160, 192), scale=(0.2, 1.0)), v2.RandomHorizontalFlip(0.5)],
          samples, seeds_for(len(samples), round_))
    check([TD.RandomResizedCrop(128, scale=(0.9, 1.0), ratio=(3.0, 4.0))],  # the fallback central crop
          [v2.RandomResizedCrop(128, scale=(0.9, 1.0), ratio=(3.0, 4.0))], samples, seeds_for(len(samples), round_ + 2))


def test_a_resize_after_a_crop_resamples_the_crop_again(samples):
    """Two stages: torchvision resamples the cropped, padded, flipped canvas once more."""
    mean = (123.0, 117.0, 104.0)
    check([TD.RandomZoomOut(mean, side_range=(1.0, 2.0), p=1.0), TD.RandomHorizontalFlip(1.0), TD.Resize(200),
           TD.RandomHorizontalFlip(0.5)],
          [v2.RandomZoomOut({tv_tensors.Image: [m / 255 for m in mean], tv_tensors.Mask: 0}, side_range=(1.0, 2.0), p=1.0),
           v2.RandomHorizontalFlip(1.0), v2.Resize(200), v2.RandomHorizontalFlip(0.5)],
          samples, seeds_for(len(samples), 1))


def test_crops_and_pads_after_a_flip_act_on_the_mirrored_canvas(samples):
    """A flip, then a crop and a pad of one side, in one stage: the window is kept unmirrored, so
    the crop's columns and the pad's sides are mirrored into it."""
    mean = (123.0, 117.0, 104.0)
    s = [x for x in samples if len(x["boxes"])]
    check([TD.RandomHorizontalFlip(1.0), TD.RandomIoUCrop(), TD.RandomZoomOut(mean, side_range=(1.2, 1.6), p=1.0),
           TD.FixedSizeCrop(288, fill=mean), TD.RandomHorizontalFlip(0.5)],
          [v2.RandomHorizontalFlip(1.0), v2.RandomIoUCrop(),
           v2.RandomZoomOut({tv_tensors.Image: [m / 255 for m in mean], tv_tensors.Mask: 0}, side_range=(1.2, 1.6),
                            p=1.0),
           RefFixedSizeCrop(288, mean), v2.RandomHorizontalFlip(0.5)], s, seeds_for(len(s), 3))


def test_sanitize_drops_degenerate_boxes_with_labels_and_masks(samples):
    s = [x for x in samples if len(x["boxes"]) > 1]
    check([TD.SanitizeBoundingBoxes()], [v2.SanitizeBoundingBoxes()], s, seeds_for(len(s), 0))
    plan, _, masks = ours([TD.SanitizeBoundingBoxes()], s, seeds_for(len(s), 0))
    synthetic = [b for b, x in enumerate(s) if "trees" not in x["path"]]
    assert synthetic and all(1 not in plan.targets[b]["_kept"].tolist() for b in synthetic)  # the zero-width box


# ---------------------------------------------------------------------------------------------- presets
#: odd sizes (the user's 200–420 px, and 81²) with boxes on every edge: the right and bottom ones are
#: where a float64 box times torchvision's float32 ratio lands past the canvas (81·float32(256/81) =
#: 256.0000019) while torchvision's float32 box lands on it
BORDER_SIZES = [(81, 81), (233, 419), (300, 211), (97, 355), (401, 203)]


def _border_boxes(h: int, w: int) -> np.ndarray:
    return np.array([[40, 40, w, h], [0, 0, w / 3, h / 4], [w - 9, 0, w, h / 2], [0, h - 7, w / 2, h],
                     [0, 0, w, h], [w / 5, h / 5, w / 2, h / 2], [w / 2, 3, w, h - 3]], np.float64)


def _resizing_ops() -> dict[str, tuple[list, list]]:
    mean = (123.0, 117.0, 104.0)
    fill = {tv_tensors.Image: [m / 255 for m in mean], tv_tensors.Mask: 0}
    ops = {"Resize(256)": ([TD.Resize(256)], [v2.Resize(256)]),
           "Resize(333)": ([TD.Resize(333)], [v2.Resize(333)]),
           "RandomShortestSize": ([TD.RandomShortestSize((160, 224, 288), max_size=400)],
                                  [v2.RandomShortestSize((160, 224, 288), max_size=400)]),
           "ScaleJitter": ([TD.ScaleJitter((256, 256), (0.5, 1.5))], [v2.ScaleJitter((256, 256), (0.5, 1.5))]),
           "RandomResize": ([TD.RandomResize(200, 400)], [v2.RandomResize(200, 400)]),
           "RandomResizedCrop(256)": ([TD.RandomResizedCrop(256)], [v2.RandomResizedCrop(256)])}
    presets = {"multiscale": [v2.RandomShortestSize((480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800), 1333),
                              v2.RandomHorizontalFlip(0.5)],
               "lsj": [v2.ScaleJitter((1024, 1024)), RefFixedSizeCrop(1024, mean), v2.RandomHorizontalFlip(0.5)],
               "ssd": [v2.RandomPhotometricDistort(), v2.RandomZoomOut(fill), v2.RandomIoUCrop(),
                       v2.RandomHorizontalFlip(0.5)],
               "ssdlite": [v2.RandomIoUCrop(), v2.RandomHorizontalFlip(0.5)]}
    ops.update({f"preset {k}": (TD.detection_preset(k), tv) for k, tv in presets.items()})
    return ops


@pytest.mark.parametrize("name", sorted(_resizing_ops()))
def test_border_boxes_are_kept_as_torchvision_keeps_them(name):
    """Every resizing op and preset, then SanitizeBoundingBoxes, on odd sizes whose boxes touch every edge,
    over 12 seeds each: the kept boxes are torchvision's (the same labels, in order) — the kept sets, not
    only the boxes both keep — and their coordinates agree. Boxes are float32 on both sides, as
    torchvision's references and the rgb arm carry them."""
    ours_ops, tv_ops = _resizing_ops()[name]
    comp = TD.DetectionCompose([*ours_ops, TD.SanitizeBoundingBoxes()])
    tv = v2.Compose([*tv_ops, v2.SanitizeBoundingBoxes()])
    kept = 0
    for h, w in BORDER_SIZES:
        boxes = _border_boxes(h, w)
        labels = torch.arange(1, len(boxes) + 1)
        for k in range(12):
            _, t = comp.draw_one((h, w), {"boxes": boxes, "labels": labels}, torch.Generator().manual_seed(k))
            torch.manual_seed(k)
            want = tv({"image": tv_tensors.Image(torch.zeros(3, h, w)), "labels": labels,
                       "boxes": tv_tensors.BoundingBoxes(torch.as_tensor(boxes, dtype=torch.float32), format="XYXY",
                                                         canvas_size=(h, w))})
            assert torch.equal(t["labels"], want["labels"]), (name, (h, w), k)
            assert torch.allclose(t["boxes"], want["boxes"].as_subclass(torch.Tensor), atol=BOX_TOL, rtol=0)
            kept += len(t["labels"])
    assert kept > 0


def test_a_box_on_the_border_stays_after_a_resize():
    """The user's case: an 81×81 image, a box [40, 40, 81, 81], Resize(256) and sanitize: torchvision keeps
    [126.4, 126.4, 256, 256]; so does the device arm."""
    comp = TD.DetectionCompose([TD.Resize(256), TD.SanitizeBoundingBoxes()])
    _, t = comp.draw_one((81, 81), {"boxes": np.array([[40.0, 40.0, 81.0, 81.0]]), "labels": torch.tensor([1])},
                         torch.Generator().manual_seed(0))
    assert t["boxes"].dtype == torch.float32 and t["labels"].tolist() == [1]
    torch.testing.assert_close(t["boxes"], torch.tensor([[40 * 256 / 81, 40 * 256 / 81, 256.0, 256.0]]))


@pytest.mark.parametrize("name", ["hflip", "multiscale", "ssdlite", "lsj", "ssd"])
def test_presets_follow_torchvisions_references(samples, name):
    mean = (123.0, 117.0, 104.0)
    fill = {tv_tensors.Image: [m / 255 for m in mean], tv_tensors.Mask: 0}
    tv = {"ssd": [v2.RandomPhotometricDistort(), v2.RandomZoomOut(fill), v2.RandomIoUCrop(), v2.RandomHorizontalFlip(0.5)],
          "hflip": [v2.RandomHorizontalFlip(0.5)],
          "multiscale": [v2.RandomShortestSize((480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800), 1333),
                         v2.RandomHorizontalFlip(0.5)],
          "ssdlite": [v2.RandomIoUCrop(), v2.RandomHorizontalFlip(0.5)],
          "lsj": [v2.ScaleJitter((1024, 1024)), RefFixedSizeCrop(1024, mean), v2.RandomHorizontalFlip(0.5)]}[name]
    chosen = [s for s in samples if len(s["boxes"])] if name in ("ssdlite", "ssd") else samples
    if name == "ssd":  # its colour distortion: on the uint8 images of the references' pipeline
        tv[1] = v2.RandomZoomOut({tv_tensors.Image: list(mean), tv_tensors.Mask: 0})
        check_uint8(TD.detection_preset(name), [*tv, v2.SanitizeBoundingBoxes()], chosen[:6], seeds_for(6, 2))
        return
    check(TD.detection_preset(name), [*tv, v2.SanitizeBoundingBoxes()], chosen[:6], seeds_for(6, 2))


def test_preset_draw_laws_equal_torchvisions_over_many_seeds(samples):
    """ssdlite's sampler (the preset with the most draws) over 120 seeds: every crop equals
    torchvision's, so the distributions are the same; the crops vary."""
    s = next(x for x in samples if len(x["boxes"]) > 3)
    comp = TD.DetectionCompose(TD.detection_preset("ssdlite"))
    tv = v2.Compose([v2.RandomIoUCrop(), v2.RandomHorizontalFlip(0.5), v2.SanitizeBoundingBoxes()])
    sizes = set()
    h, w = s["pixels"].shape[-2:]
    for k in range(120):
        g, t = comp.draw_one((h, w), {"boxes": s["boxes"], "labels": s["labels"]}, torch.Generator().manual_seed(k))
        torch.manual_seed(k)
        boxes = tv_tensors.BoundingBoxes(torch.as_tensor(s["boxes"], dtype=torch.float32), format="XYXY",
                                         canvas_size=(h, w))
        want = tv({"image": tv_tensors.Image(torch.zeros(1, h, w)), "boxes": boxes, "labels": s["labels"]})
        assert g.canvas == tuple(want["image"].shape[-2:])
        assert torch.allclose(t["boxes"], want["boxes"].as_subclass(torch.Tensor), atol=BOX_TOL, rtol=0)
        sizes.add(g.canvas)
    assert len(sizes) > 50


def check_uint8(ops: list, tv_ops: list, samples: list[dict], seeds: list[int]) -> None:
    """As :func:`check`, against torchvision's ops on the uint8 images its reference pipeline gives them
    (Pillow's decode; ``ToDtype(float32, scale=True)`` at the end): the same levels, but for a rare
    float tie that truncates the other way (a level, two once a later op scales it; under 0.5% of the
    values)."""
    plan, images, masks = ours(ops, samples, seeds)
    for b, (s, k) in enumerate(zip(samples, seeds)):
        torch.manual_seed(k)
        want = v2.Compose(tv_ops)({**tv_sample(s), "image": tv_tensors.Image((s["pixels"] * 255).round().to(torch.uint8))})
        where = f"{s['path']} seed {k}"
        got, ref = images[b] * 255, want["image"].as_subclass(torch.Tensor).float()
        assert got.shape == ref.shape, where
        diff = (got - ref).abs()
        assert diff.max().item() <= 2.0 + 1e-3 and (diff > 0.5).float().mean().item() < 5e-3, where
        assert (got - got.round()).abs().max().item() < 1e-3, where  # whole levels, as uint8
        assert torch.equal(plan.targets[b]["labels"], want["labels"]) and torch.equal(masks[b], want["masks"]), where


@pytest.mark.parametrize("round_", range(2))
def test_photometric_distort_draws_and_applies_as_torchvisions(samples, round_):
    """Each op drawn or not per sample, contrast before or after, a channel permutation: the
    contrast mean over each sample's own canvas (the batch is padded to the largest); each op on the
    image's 8-bit levels, truncated after each op, as torchvision's uint8 kernels in its references."""
    check_uint8([TD.RandomPhotometricDistort(p=0.5), TD.RandomHorizontalFlip(0.5)],
                [v2.RandomPhotometricDistort(p=0.5), v2.RandomHorizontalFlip(0.5)], samples,
                seeds_for(len(samples), round_))
    # after geometry too: the distortion sees the padded canvas, as torchvision's does
    mean = (123.0, 117.0, 104.0)
    check_uint8([TD.RandomZoomOut(mean, side_range=(1.0, 1.5), p=1.0), TD.RandomPhotometricDistort(p=1.0)],
                [v2.RandomZoomOut({tv_tensors.Image: list(mean), tv_tensors.Mask: 0}, side_range=(1.0, 1.5), p=1.0),
                 v2.RandomPhotometricDistort(p=1.0)], samples, seeds_for(len(samples), round_ + 3))


def test_unknown_presets_say_so():
    with pytest.raises(ValueError, match="known: hflip"):
        TD.detection_preset("nope")


# ---------------------------------------------------------------------------------------------- the step
@pytest.mark.skipif(not (TREES / "val.json").exists(), reason="needs ../shared/data/trees")
@pytest.mark.parametrize("preset", ["hflip", "lsj"])
def test_detection_step_on_the_coco_trees_set_matches_torchvision(preset):
    """CocoDataset → collate_detection → DetectionStep: each sample's draws are
    sample_generator(seed, epoch, image_id), so torchvision replays them from that seed; boxes,
    labels and pixels equal its on every tile (five JPEG layouts in the set)."""
    from dctnet.data import CocoDataset, collate_detection

    ds = CocoDataset(TREES / "val", TREES / "val.json")
    batch, targets = collate_detection([ds[i] for i in range(len(ds))], pin_memory=False)
    step = TD.DetectionStep(TD.detection_preset(preset), seed=7, exact=True)
    images, out = step(batch, targets, epoch=3)
    mean = (123.0, 117.0, 104.0)
    tv_ops = {"hflip": [v2.RandomHorizontalFlip(0.5)],
              "lsj": [v2.ScaleJitter((1024, 1024)), RefFixedSizeCrop(1024, mean), v2.RandomHorizontalFlip(0.5)]}[preset]
    tv = v2.Compose([*tv_ops, v2.SanitizeBoundingBoxes()])
    for b, t in enumerate(targets):
        path = ds.paths[int(batch.index[b])]
        with Image.open(path) as im:
            pixels = torch.from_numpy(np.asarray(im.convert("RGB")).copy()).permute(2, 0, 1).float() / 255
        torch.manual_seed(TD.sample_generator(7, 3, t["image_id"]).initial_seed())
        want = tv({"image": tv_tensors.Image(pixels), "labels": t["labels"],
                   "boxes": tv_tensors.BoundingBoxes(t["boxes"].float(), format="XYXY", canvas_size=t["size"])})
        assert images[b].shape == want["image"].shape, path
        assert (images[b] - want["image"].as_subclass(torch.Tensor)).abs().max() <= 5e-5, path
        assert torch.allclose(out[b]["boxes"], want["boxes"].as_subclass(torch.Tensor), atol=BOX_TOL), path
        assert torch.equal(out[b]["labels"], want["labels"]) and out[b]["boxes"].dtype == torch.float32
        assert out[b]["image_id"] == t["image_id"] and len(out[b]["iscrowd"]) == len(out[b]["boxes"])


def test_the_detection_step_makes_no_host_sync(samples):
    """The device half reads nothing back: the batch, its masks and everything made from them are
    device memory (the tracer of the device-step tests); sizes and boxes are host values."""
    from test_host_syncs import DeviceTracer

    chosen = [s for s in samples if len(s["boxes"])][:3]
    batch = collate([sample_from_coefficients(dctnet.read_coefficients(s["path"]), FullImage(), 0, i)
                     for i, s in enumerate(chosen)], pin_memory=False)
    targets = [{"boxes": torch.as_tensor(s["boxes"]), "labels": s["labels"], "masks": torch.from_numpy(s["masks"]),
                "size": tuple(s["pixels"].shape[-2:]), "index": i} for i, s in enumerate(chosen)]
    for preset in ("lsj", "ssd"):  # (the others' ops are in these two: crops, pads, resizes, colour, a warp)
        tracer = DeviceTracer()
        tracer.mark(batch)
        tracer.mark([t["masks"] for t in targets])
        # warps: an affine one; a perspective after a vertical flip (two kinds, two interpolations in a stage)
        warp = ([TD.RandomAffine(10, translate=(0.1, 0.1), interpolation="bilinear")] if preset == "ssd"
                else [TD.RandomVerticalFlip(0.5), TD.RandomPerspective(0.4, p=0.7)])
        step = TD.DetectionStep([*warp, *TD.detection_preset(preset), TD.DetectorResize((288, 320), 480)], seed=1)
        with tracer:
            images, out = step(batch, targets)
        assert len(images) == len(chosen) and all(o["masks"].shape[1:] == i.shape[1:] for o, i in zip(out, images))


# ---------------------------------------------------------------------------------------------- the model's resize
@pytest.mark.parametrize("arch,train", [("fasterrcnn_mobilenet_v3_large_320_fpn", False),
                                        ("fasterrcnn_mobilenet_v3_large_320_fpn", True),
                                        ("ssdlite320_mobilenet_v3_large", True)])  # (SSD's: a fixed size)
def test_detector_resize_is_the_models_own_and_leaves_its_transform_nothing_to_resample(samples, arch, train):
    """DetectorResize equals a torchvision detector's GeneralizedRCNNTransform resize (boxes, masks,
    pixels after its normalisation, sizes; in training with its torch_choice of min_size); after
    prepare_detector the model's transform only normalises: its input size is its output size."""
    from dctnet.models.detection import build_detector, prepare_detector

    kwargs = {"min_size": (288, 320, 352), "max_size": 448} if arch.startswith("faster") else {}
    model = build_detector(arch, num_classes=3, **kwargs)
    model.train(train)
    ref = model.transform
    chosen = samples[:6]
    seeds = seeds_for(len(chosen), 4)
    plan, images, masks = ours([TD.DetectorResize.from_model(model, train=train)], chosen, seeds)
    want_images, want_targets = [], []
    for s, k in zip(chosen, seeds):
        torch.manual_seed(k)
        t = {"boxes": torch.as_tensor(s["boxes"], dtype=torch.float32), "labels": s["labels"],
             "masks": torch.from_numpy(s["masks"])}
        il, tt = ref([s["pixels"]], [t])
        want_images.append(il.tensors[0, :, :il.image_sizes[0][0], :il.image_sizes[0][1]])
        want_targets.append(tt[0])
    prepare_detector(model)
    got, _ = model.transform(images)
    for b, s in enumerate(chosen):
        h, w = got.image_sizes[b]
        assert (h, w) == tuple(images[b].shape[-2:]) == tuple(want_images[b].shape[-2:]), s["path"]
        normalised = (images[b] - torch.tensor(ref.image_mean)[:, None, None]) / torch.tensor(ref.image_std)[:, None, None]
        assert torch.equal(got.tensors[b, :, :h, :w], normalised), s["path"]  # nothing resampled again
        assert (normalised - want_images[b]).abs().max() <= 2e-4, s["path"]  # (its std divides by ~0.225)
        assert torch.allclose(plan.targets[b]["boxes"], want_targets[b]["boxes"], atol=BOX_TOL, rtol=0)
        assert torch.equal(masks[b], want_targets[b]["masks"]), s["path"]


def test_the_detectors_resize_reads_through_a_stage_that_only_selects(samples):
    """A crop padded with 0 and flips (stage 0 only selects pixels), then the detector's plain resize:
    the step resamples the decoded images once, through stage 0's index maps, and equals
    torchvision's crop, pad and flips followed by the model's transform; a vertical flip (a warp)
    folded into the resampling's rows likewise."""
    from dctnet.models.detection import build_detector

    model = build_detector("fasterrcnn_mobilenet_v3_large_320_fpn", num_classes=3, min_size=180, max_size=300).eval()
    chosen = samples[:6]
    seeds = seeds_for(len(chosen), 11)
    ops = [TD.RandomCrop(250, pad_if_needed=True), TD.RandomHorizontalFlip(0.5), TD.RandomVerticalFlip(0.5)]
    tv_ops = [v2.RandomCrop(250, pad_if_needed=True), v2.RandomHorizontalFlip(0.5), v2.RandomVerticalFlip(0.5)]
    for n in (2, 3):  # flips alone; a vertical flip too
        plan, images, masks = ours([*ops[:n], TD.DetectorResize.from_model(model, train=False)], chosen, seeds)
        assert n == 3 or selects(plan, 0)
        tv = v2.Compose(tv_ops[:n])
        for b, (s, k) in enumerate(zip(chosen, seeds)):
            torch.manual_seed(k)
            mid = tv(tv_sample(s))
            il, tt = model.transform([mid["image"].as_subclass(torch.Tensor)],
                                     [{"boxes": mid["boxes"].as_subclass(torch.Tensor).float(), "labels": mid["labels"],
                                       "masks": mid["masks"].as_subclass(torch.Tensor)}])
            h, w = il.image_sizes[0]
            std = torch.tensor(model.transform.image_std)[:, None, None]
            want = il.tensors[0, :, :h, :w] * std + torch.tensor(model.transform.image_mean)[:, None, None]
            assert images[b].shape == want.shape and (images[b] - want).abs().max() <= 5e-5, s["path"]
            assert torch.allclose(plan.targets[b]["boxes"], tt[0]["boxes"], atol=BOX_TOL, rtol=0), s["path"]
            assert torch.equal(masks[b], tt[0]["masks"]), s["path"]


def test_the_detectors_resize_reads_the_crop_a_sealed_stage_made(samples):
    """Colour ops seal stage 0, a crop opens stage 1 and the detector's plain resize reads that crop
    (its box starts away from the origin): equal to torchvision's crop then the model's transform."""
    from dctnet.models.detection import build_detector

    model = build_detector("fasterrcnn_mobilenet_v3_large_320_fpn", num_classes=3, min_size=200, max_size=400).eval()
    chosen = samples[:6]
    seeds = seeds_for(len(chosen), 9)
    plan, images, _ = ours([TD.RandomPhotometricDistort(p=0.0), TD.RandomCrop(100),
                            TD.DetectorResize.from_model(model, train=False)], chosen, seeds)
    tv = v2.Compose([v2.RandomPhotometricDistort(p=0.0), v2.RandomCrop(100)])
    for b, (s, k) in enumerate(zip(chosen, seeds)):
        torch.manual_seed(k)
        mid = tv(tv_sample(s))
        il, tt = model.transform([mid["image"].as_subclass(torch.Tensor)],
                                 [{"boxes": mid["boxes"].as_subclass(torch.Tensor).float(), "labels": mid["labels"]}])
        h, w = il.image_sizes[0]
        std = torch.tensor(model.transform.image_std)[:, None, None]
        want = il.tensors[0, :, :h, :w] * std + torch.tensor(model.transform.image_mean)[:, None, None]
        assert images[b].shape == want.shape and (images[b] - want).abs().max() <= 5e-5, s["path"]
        assert torch.allclose(plan.targets[b]["boxes"], tt[0]["boxes"], atol=BOX_TOL, rtol=0), s["path"]


def test_samples_of_one_batch_may_pad_one_stage_with_different_fills(samples):
    """A zoom-out (the mean) drawn for some samples, then the references' PadIfSmaller (0): which
    pad lands in stage 0 depends on each sample's draws; each keeps its own fill."""
    mean = (123.0, 117.0, 104.0)
    check([TD.RandomZoomOut(mean, side_range=(1.0, 1.3), p=0.5), TD.PadIfSmaller(400), TD.RandomCrop(400)],
          [v2.RandomZoomOut({tv_tensors.Image: [m / 255 for m in mean], tv_tensors.Mask: 0}, side_range=(1.0, 1.3),
                            p=0.5), RefPadIfSmaller(400, mask_fill=0), v2.RandomCrop(400)], samples,
          seeds_for(len(samples), 10))


def test_a_preset_then_the_detectors_resize_in_stages_of_both_kinds(samples):
    """A zoom-out drawn for some samples and not others, torchvision's Resize, then the detector's
    own resize: stage 1 is antialiased for some samples and plain for others (each keeps its own
    weights); the result equals torchvision's ops followed by the model's transform."""
    from dctnet.models.detection import build_detector

    model = build_detector("fasterrcnn_mobilenet_v3_large_320_fpn", num_classes=3).eval()
    mean = (123.0, 117.0, 104.0)
    chosen = samples[:6]
    seeds = seeds_for(len(chosen), 5)
    ops = [TD.RandomZoomOut(mean, side_range=(1.0, 1.5)), TD.Resize(300), TD.DetectorResize.from_model(model, train=False)]
    plan, images, masks = ours(ops, chosen, seeds)
    assert not plan.antialias[1].all() and plan.antialias[1].any()  # both kinds in stage 1
    tv = v2.Compose([v2.RandomZoomOut({tv_tensors.Image: [m / 255 for m in mean], tv_tensors.Mask: 0},
                                      side_range=(1.0, 1.5)), v2.Resize(300)])
    for b, (s, k) in enumerate(zip(chosen, seeds)):
        torch.manual_seed(k)
        mid = tv(tv_sample(s))
        t = {"boxes": mid["boxes"].as_subclass(torch.Tensor).float(), "labels": mid["labels"],
             "masks": mid["masks"].as_subclass(torch.Tensor)}
        il, tt = model.transform([mid["image"].as_subclass(torch.Tensor)], [t])
        h, w = il.image_sizes[0]
        assert (h, w) == tuple(images[b].shape[-2:]), s["path"]
        std = torch.tensor(model.transform.image_std)[:, None, None]
        want = il.tensors[0, :, :h, :w] * std + torch.tensor(model.transform.image_mean)[:, None, None]
        assert (images[b] - want).abs().max() <= 5e-5, s["path"]
        assert torch.allclose(plan.targets[b]["boxes"], tt[0]["boxes"], atol=BOX_TOL, rtol=0), s["path"]
        assert torch.equal(masks[b], tt[0]["masks"]), s["path"]


# ---------------------------------------------------------------------------------------------- segmentation
class RefPadIfSmaller(v2.Transform):
    """torchvision's segmentation references' PadIfSmaller (their v2_extras): bottom/right padding
    to ``size``, images 0 and masks 255, on torchvision's pad kernel."""

    def __init__(self, size: int, mask_fill: int = 255) -> None:
        super().__init__()
        self.size, self.mask_fill = size, mask_fill  # (0 for instance masks, as dctnet pads them)

    def make_params(self, flat_inputs):
        h, w = TVF.get_size(next(i for i in flat_inputs if isinstance(i, tv_tensors.Image)))
        return {"padding": [0, 0, max(self.size - w, 0), max(self.size - h, 0)]}

    def transform(self, inpt, params):
        if not any(params["padding"]) or not isinstance(inpt, (tv_tensors.Image, tv_tensors.Mask,
                                                               tv_tensors.BoundingBoxes)):
            return inpt
        return TVF.pad(inpt, padding=params["padding"], fill=self.mask_fill if isinstance(inpt, tv_tensors.Mask) else 0)


@pytest.mark.parametrize("train", [True, False])
def test_segmentation_preset_moves_semantic_masks_as_torchvisions(samples, train):
    """The segmentation references' presets (RandomResize 0.5–2×base, flip, PadIfSmaller with 255 for
    masks, RandomCrop; eval Resize(base)): pixels and class maps equal torchvision's."""
    rng = np.random.default_rng(7)
    chosen = samples[:6]
    seeds = seeds_for(len(chosen), 6 if train else 7)
    ops = TD.segmentation_preset(base_size=200, crop_size=224, train=train)
    tv = v2.Compose([v2.RandomResize(100, 400), v2.RandomHorizontalFlip(0.5), RefPadIfSmaller(224),
                     v2.RandomCrop(224)] if train else [v2.Resize(200)])
    comp = TD.DetectionCompose(ops)
    geoms, targets, semantic = [], [], []
    for s, k in zip(chosen, seeds):
        h, w = s["pixels"].shape[-2:]
        sem = torch.from_numpy(rng.integers(0, 21, (h // 16 + 1, w // 16 + 1)).astype(np.uint8))
        sem = sem.repeat_interleave(16, 0).repeat_interleave(16, 1)[:h, :w].contiguous()  # class blobs
        semantic.append(sem)
        g, t = comp.draw_one((h, w), {"boxes": s["boxes"], "labels": s["labels"]}, torch.Generator().manual_seed(k))
        geoms.append(g)
        targets.append(t)
    plan = TD.plan_of(geoms, targets)
    batch = collate([sample_from_coefficients(dctnet.read_coefficients(s["path"]), FullImage(), 0, i)
                     for i, s in enumerate(chosen)], pin_memory=False)
    images, _ = TD.apply_plan(batch, plan, exact=True)
    maps = TD.semantic_maps(plan, semantic)
    for b, (s, k) in enumerate(zip(chosen, seeds)):
        torch.manual_seed(k)
        want = tv({"image": tv_tensors.Image(s["pixels"]), "mask": tv_tensors.Mask(semantic[b])})
        assert images[b].shape == want["image"].shape, s["path"]
        assert (images[b] - want["image"].as_subclass(torch.Tensor)).abs().max() <= 5e-5, s["path"]
        assert torch.equal(maps[b], want["mask"].as_subclass(torch.Tensor)), s["path"]
        if train:
            assert images[b].shape[-2:] == (224, 224)


# ---------------------------------------------------------------------------------------------- warps
@pytest.mark.parametrize("interpolation,expand", [("bilinear", False), ("nearest", False), ("bilinear", True)])
def test_random_affine_and_rotation_warp_images_boxes_and_masks(samples, interpolation, expand):
    """torchvision v2's RandomAffine (rotation, translation, scale, shear) and RandomRotation after a
    resize and a flip, on a batch of different canvases: boxes (corners, then clamped) ≤ 1e-4 px,
    masks equal, pixels within float rounding of the grid (nearest: the rare exact tie may round the
    other way)."""
    mean = (123.0, 117.0, 104.0)
    fill = {tv_tensors.Image: [m / 255 for m in mean], tv_tensors.Mask: 0}
    ours_ops = [TD.RandomShortestSize((160, 200), max_size=300), TD.RandomHorizontalFlip(0.5),
                TD.RandomAffine(20, translate=(0.1, 0.1), scale=(0.8, 1.2), shear=(-8, 8, -4, 4),
                                interpolation=interpolation, fill=mean),
                TD.RandomRotation(15, interpolation=interpolation, fill=mean, expand=expand), TD.SanitizeBoundingBoxes()]
    tv_ops = [v2.RandomShortestSize((160, 200), max_size=300), v2.RandomHorizontalFlip(0.5),
              v2.RandomAffine(20, translate=(0.1, 0.1), scale=(0.8, 1.2), shear=(-8, 8, -4, 4),
                              interpolation=interpolation, fill=fill),
              v2.RandomRotation(15, interpolation=interpolation, fill=fill, expand=expand), v2.SanitizeBoundingBoxes()]
    chosen = samples[:3] + samples[-3:]  # (the last has no boxes: no masks to warp)
    seeds = seeds_for(len(chosen), 8)
    plan, images, masks = ours(ours_ops, chosen, seeds)
    for b, (s, k) in enumerate(zip(chosen, seeds)):
        torch.manual_seed(k)
        want = v2.Compose(tv_ops)(tv_sample(s))
        wi = want["image"].as_subclass(torch.Tensor)
        assert images[b].shape == wi.shape, s["path"]
        diff = (images[b] - wi).abs()
        if interpolation == "bilinear":
            assert diff.max() <= 1e-4, (s["path"], float(diff.max()))
        else:
            assert (diff > 1e-4).float().mean() <= 1e-3, (s["path"], float((diff > 1e-4).float().mean()))
        wb = want["boxes"].as_subclass(torch.Tensor)
        assert plan.targets[b]["boxes"].shape == wb.shape and torch.allclose(plan.targets[b]["boxes"], wb,
                                                                             atol=BOX_TOL, rtol=0), s["path"]
        assert torch.equal(plan.targets[b]["labels"], want["labels"])
        assert torch.equal(masks[b], want["masks"].as_subclass(torch.Tensor)), s["path"]
    assert sum(len(t["boxes"]) for t in plan.targets) > 20 and sum(int(m.sum()) for m in masks) > 0


def test_an_empty_batch_gives_empty_lists():
    """Every sample of a batch skipped (on_error="skip"): no plan, nothing to apply."""
    step = TD.DetectionStep(TD.detection_preset("ssd"), seed=0)
    assert step.plan([]) is None and step.apply(None, [], None) == ([], [])
