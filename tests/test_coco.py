"""COCO-format data (dctnet.data.CocoDataset, collate_detection): targets held to pycocotools' own
reading of the file, masks to pycocotools' decoder and to the arrays they were made from, and
malformed annotation files refused with a message that names the file, the record and the reason."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

import dctnet
from dctnet import data as D
from dctnet.data.coco import _rle_string_counts
from dctnet.synthetic import synthetic_image

from conftest import SHARED, imagenette_files

TREES = SHARED / "data" / "trees"

# pycocotools' mask decoder, built for numpy 1, warns under numpy 2 on every call (its own code)


def load_coco(path: Path) -> COCO:
    with contextlib.redirect_stdout(io.StringIO()):
        return COCO(str(path))


def xyxy(anns: list[dict]) -> np.ndarray:
    """COCO's [x, y, w, h] boxes → XYXY, written out independently of the module."""
    b = np.array([a["bbox"] for a in anns], np.float64).reshape(-1, 4)
    return np.stack([b[:, 0], b[:, 1], b[:, 0] + b[:, 2], b[:, 1] + b[:, 3]], axis=1)


# ---------------------------------------------------------------------------------------------- trees


@pytest.mark.parametrize("split, images, boxes", [("train", 30, 533), ("val", 7, 301)])
def test_trees_targets_equal_pycocotools(split, images, boxes):
    if not (TREES / f"{split}.json").is_file():
        pytest.skip(f"trees data not found at {TREES}")
    ds = D.CocoDataset(TREES / split, TREES / f"{split}.json")
    coco = load_coco(TREES / f"{split}.json")
    assert len(ds) == images and ds.ids == sorted(coco.getImgIds())
    assert ds.classes == ["tree"] and ds.category_ids == [None, 1]
    total, layouts = 0, set()
    for i, image_id in enumerate(ds.ids):
        sample, target = ds[i]
        anns = coco.loadAnns(coco.getAnnIds(imgIds=[image_id]))
        assert target["image_id"] == image_id and sample.index == i
        assert target["boxes"].dtype == torch.float64 and target["labels"].dtype == torch.int64
        assert np.array_equal(target["boxes"].numpy(), xyxy(anns))
        assert target["labels"].tolist() == [1] * len(anns)
        assert target["iscrowd"].tolist() == [a["iscrowd"] for a in anns]
        assert target["area"].tolist() == [float(a["area"]) for a in anns]
        path = TREES / split / coco.imgs[image_id]["file_name"]
        with Image.open(path) as im:
            width, height = im.size
        assert target["size"] == (height, width) and sample.valid == (height, width)
        assert sample.box == (0, 0, height, width)  # the whole image
        head = dctnet.read_header(path)
        layouts.add((head.subsampling, head.progressive))
        total += len(anns)
    assert total == boxes
    if split == "train":  # 4:2:0, 4:4:4, 4:2:2, progressive 4:2:0 (and 4:2:0 at two qualities)
        assert layouts == {("4:2:0", False), ("4:4:4", False), ("4:2:2", False), ("4:2:0", True)}
    batch, targets = D.collate_detection([ds[i] for i in range(len(ds))], pin_memory=False)
    assert batch.index.tolist() == list(range(len(ds))) and batch.skipped == ()
    assert [t["image_id"] for t in targets] == ds.ids
    assert ds.check() == []


# ------------------------------------------------------------------------------- generated masks set


def source_images(n: int) -> list[np.ndarray]:
    """RGB crops of Imagenette photos of different sizes; synthetic images when it is absent."""
    sizes = [(96, 128), (75, 101), (64, 64), (50, 90), (81, 67)]
    files = imagenette_files("val", every=300)[:n]
    out = []
    for k, (h, w) in enumerate(sizes[:n]):
        if k < len(files):
            with Image.open(files[k]) as im:
                out.append(np.asarray(im.convert("RGB"))[10:10 + h, 20:20 + w])
        else:
            out.append(synthetic_image(np.random.default_rng(k), h, w))
    return out


def runs_of(mask: np.ndarray) -> list[int]:
    """COCO's uncompressed RLE counts of a binary mask (column-major, starting with zeros)."""
    flat = mask.flatten(order="F")
    change = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(bounds).tolist()
    return ([0] + runs) if flat[0] else runs


@pytest.fixture(scope="module")
def masks_set(tmp_path_factory):
    """Five JPEG layouts (4:4:4, 4:2:2, gray, progressive, CMYK), out-of-order image ids and
    category ids, polygon / uncompressed-RLE crowd / compressed-RLE annotations, an image without
    annotations, and semantic PNGs (palette and gray)."""
    root = tmp_path_factory.mktemp("coco")
    (root / "images" / "sub").mkdir(parents=True)
    (root / "semantic" / "sub").mkdir(parents=True)
    rng = np.random.default_rng(0)
    saves = [("a.jpg", "RGB", dict(subsampling=0)), ("b.jpg", "RGB", dict(subsampling=1)), ("c.jpg", "L", {}),
             ("sub/d.jpg", "RGB", dict(progressive=True)), ("e.jpg", "CMYK", {})]
    ids = [5, 2, 9, 1, 3]
    images, annotations, semantic, rle_masks = [], [], {}, {}
    for (name, mode, kw), image_id, pixels in zip(saves, ids, source_images(len(saves))):
        Image.fromarray(pixels).convert(mode).save(root / "images" / name, quality=90, **kw)
        h, w = pixels.shape[:2]
        images.append({"id": image_id, "file_name": name, "width": w, "height": h})
        sem = rng.integers(0, 6, (h, w)).astype(np.uint8)
        sem[:3] = 255  # the ignore index
        png = Image.fromarray(sem)
        if image_id != 9:  # palette PNGs (VOC's layout) but for one gray one
            png = png.convert("P")
            png.putpalette(list(rng.integers(0, 256, 768)))
        png.save(root / "semantic" / Path(name).with_suffix(".png"))
        semantic[image_id] = sem
    ann_id = iter(range(100, 200))

    def ann(image_id, category_id, segmentation, bbox, iscrowd=0):
        annotations.append({"id": next(ann_id), "image_id": image_id, "category_id": category_id, "bbox": bbox,
                            "area": float(bbox[2] * bbox[3]) / 2, "iscrowd": iscrowd, "segmentation": segmentation})

    ann(5, 7, [[10, 10, 60.5, 12, 40, 50.25]], [10, 10, 50.5, 40.25])
    ann(5, 3, [[70, 5, 120, 5, 120, 40, 70, 40], [80, 60, 100, 60, 90, 90]], [70, 5, 50, 85])
    ann(5, 3, [[1, 1, 5, 5], [2, 2, 30, 2, 2, 30]], [2, 2, 28, 28])  # a 2-point polygon: no inside
    crowd = np.zeros((75, 101), np.uint8)
    crowd[20:50, 30:80] = 1
    crowd[0, 0] = 1  # a run of ones first: counts start with a zero-length run
    ann(2, 7, {"size": [75, 101], "counts": runs_of(crowd)}, [0, 0, 80, 50], iscrowd=1)
    rle_masks[2] = crowd
    # image 9 (gray) has no annotations
    blob = (rng.random((64, 101)) < 0.3).astype(np.uint8)[:, :90][:50]  # many short runs
    blob[:, 40:] = 0
    blob[10:45, 45:88] = 1  # and long ones: multi-character numbers and negative differences
    enc = mask_utils.encode(np.asfortranarray(blob))
    ann(1, 11, {"size": [50, 90], "counts": enc["counts"].decode("ascii")}, [0, 0, 88, 45])
    rle_masks[1] = blob
    ann(3, 11, [[3, 3, 60, 10, 30, 70]], [3, 3, 57, 67])
    categories = [{"id": 11, "name": "c11"}, {"id": 3, "name": "c3"}, {"id": 7, "name": "c7"}]
    js = root / "instances.json"
    js.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return root, js, semantic, rle_masks


def test_masks_set_targets(masks_set):
    root, js, semantic, rle_masks = masks_set
    ds = D.CocoDataset(root / "images", js, masks="instance", semantic=root / "semantic")
    coco = load_coco(js)
    assert ds.ids == [1, 2, 3, 5, 9]
    assert ds.classes == ["c3", "c7", "c11"] and ds.category_ids == [None, 3, 7, 11]
    label = {3: 1, 7: 2, 11: 3}
    spaces = set()
    for i, image_id in enumerate(ds.ids):
        sample, target = ds[i]
        img = coco.imgs[image_id]
        h, w = img["height"], img["width"]
        with Image.open(root / "images" / img["file_name"]) as im:
            assert im.size == (w, h)
        spaces.add(sample.color_space)
        anns = coco.loadAnns(coco.getAnnIds(imgIds=[image_id]))
        assert target["size"] == (h, w) and target["image_id"] == image_id
        assert np.array_equal(target["boxes"].numpy(), xyxy(anns))
        assert target["labels"].tolist() == [label[a["category_id"]] for a in anns]
        assert target["iscrowd"].tolist() == [a["iscrowd"] for a in anns]
        masks = target["masks"]
        assert masks.dtype == torch.uint8 and masks.shape == (len(anns), h, w)
        for m, a in zip(masks.numpy(), anns):
            seg = a["segmentation"]
            if isinstance(seg, list):  # polygons, merged; fewer than 3 points enclose nothing
                polys = [p for p in seg if len(p) >= 6]
                want = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(polys, h, w)))
                assert want.any()
            elif isinstance(seg["counts"], list):
                want = mask_utils.decode(mask_utils.frPyObjects(seg, h, w))
            else:
                want = mask_utils.decode(seg)
            assert np.array_equal(m, want)
        if image_id in rle_masks:  # and the arrays the RLEs were made from
            assert np.array_equal(masks[0].numpy(), rle_masks[image_id])
        assert target["semantic"].dtype == torch.uint8
        assert np.array_equal(target["semantic"].numpy(), semantic[image_id])
    assert spaces == {"YCbCr", "gray", "CMYK"}
    assert len(ds[4][1]["boxes"]) == 0 and ds[4][1]["masks"].shape == (0, 64, 64)  # no annotations: kept
    assert ds.check() == []

    loader = torch.utils.data.DataLoader(ds, batch_size=3, collate_fn=D.collate_detection)
    seen = []
    for batch, targets in loader:
        assert batch.index.tolist() == [ds.ids.index(t["image_id"]) for t in targets]
        assert all(tuple(v) == t["size"] for v, t in zip(batch.valid.tolist(), targets))
        seen += [t["image_id"] for t in targets]
    assert seen == ds.ids


def test_rle_string_decoder_matches_pycocotools():
    """The bounds-checked decoder of COCO's compressed RLE reads what pycocotools writes."""
    rng = np.random.default_rng(1)
    for k in range(20):
        h, w = rng.integers(1, 70, 2)
        m = (rng.random((h, w)) < rng.uniform(0.01, 0.99)).astype(np.uint8)
        if k % 3 == 0:
            m[: h // 2] = k % 2
        counts = mask_utils.encode(np.asfortranarray(m))["counts"].decode("ascii")
        assert _rle_string_counts(counts).tolist() == runs_of(m)


# -------------------------------------------------------------------------------------- bad input


def small_set(root: Path, n: int = 3) -> dict:
    (root / "images").mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    for i in range(n):
        Image.fromarray(synthetic_image(np.random.default_rng(i), 40, 56)).save(root / "images" / f"{i}.jpg")
        images.append({"id": i + 1, "file_name": f"{i}.jpg", "width": 56, "height": 40})
        annotations.append({"id": 10 + i, "image_id": i + 1, "category_id": 1, "bbox": [1, 2, 10, 20], "area": 200,
                            "iscrowd": 0, "segmentation": [[1, 2, 11, 2, 11, 22]]})
    return {"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "thing"}]}


def set_(path: str, value):
    """A mutation of the small set: the record at ``path`` ("annotations.0.bbox") set to ``value``."""
    def apply(d):
        *keys, last = path.split(".")
        for k in keys:
            d = d[int(k)] if k.isdigit() else d[k]
        d[int(last) if last.isdigit() else last] = value
    return apply


def drop(path: str):
    def apply(d):
        *keys, last = path.split(".")
        for k in keys:
            d = d[int(k)] if k.isdigit() else d[k]
        del d[last]
    return apply


BAD_JSON = [
    ("not-json", None, "not a JSON file"),
    ("list", lambda d: [d], "not a COCO annotation file (the top level is a list"),
    ("no-images", drop("images"), "missing key 'images'"),
    ("no-bbox", drop("annotations.0.bbox"), "annotation id 10: 'bbox' must be 4 finite numbers"),
    ("bbox-nan", set_("annotations.1.bbox", [1, 2, float("nan"), 3]), "annotation id 11: 'bbox' must be 4 finite"),
    ("bbox-inf", set_("annotations.1.bbox", [float("inf"), 2, 3, 3]), "annotation id 11: 'bbox' must be 4 finite"),
    ("bbox-short", set_("annotations.1.bbox", [1, 2, 3]), "annotation id 11: 'bbox' must be 4 finite"),
    ("bbox-negative", set_("annotations.2.bbox", [1, 2, -3, 4]), "annotation id 12: 'bbox' has a negative width"),
    ("bbox-string", set_("annotations.2.bbox", [1, 2, "3", 4]), "annotation id 12: 'bbox' must be 4 finite"),
    ("unknown-category", set_("annotations.0.category_id", 99), "annotation id 10: category id 99 is not among"),
    ("unknown-image", set_("annotations.0.image_id", 42), "annotation id 10: image id 42 is not among the images"),
    ("dotdot", set_("images.1.file_name", "../1.jpg"), "image id 2: 'file_name' '../1.jpg' leaves the images folder"),
    ("dotdot-inside", set_("images.1.file_name", "a/../../1.jpg"), "image id 2: 'file_name' 'a/../../1.jpg' leaves"),
    ("absolute", set_("images.0.file_name", "/etc/passwd"), "image id 1: 'file_name' '/etc/passwd' leaves"),
    ("no-file-name", drop("images.0.file_name"), "image id 1: 'file_name' must be a non-empty string"),
    ("width", set_("images.0.width", 56.5), "image id 1: 'width' must be a positive integer"),
    ("height", set_("images.0.height", 0), "image id 1: 'height' must be a positive integer"),
    ("image-id", set_("images.0.id", "1"), "images[0]: image id must be an integer"),
    ("twin-images", set_("images.1.id", 1), "image id 1: two images share this id"),
    ("twin-annotations", set_("annotations.1.id", 10), "annotation id 10: two annotations share this id"),
    ("no-annotation-id", drop("annotations.2.id"), "annotations[2]: annotation without an 'id'"),
    ("category-name", set_("categories.0.name", None), "category id 1: 'name' must be a string"),
    ("annotations-dict", set_("annotations", {}), "annotations: must be a list"),
    ("iscrowd", set_("annotations.0.iscrowd", 2), "annotation id 10: 'iscrowd' must be 0 or 1"),
    ("area", set_("annotations.0.area", -1), "annotation id 10: 'area' must be a finite non-negative number"),
]

BAD_MASKS = [
    ("no-segmentation", drop("annotations.0.segmentation"), "annotation id 10: 'segmentation' must be polygons or"),
    ("odd-polygon", set_("annotations.0.segmentation", [[1, 2, 3, 4, 5, 6, 7]]), "annotation id 10: a segmentation "
     "polygon has an odd number of coordinates"),
    ("nan-polygon", set_("annotations.0.segmentation", [[1, 2, 3, float("nan"), 5, 6]]), "annotation id 10: a "
     "segmentation polygon must be a list of finite numbers"),
    ("string-polygon", set_("annotations.0.segmentation", [[1, 2, 3, "4", 5, 6]]), "a segmentation polygon must be"),
    ("far-polygon", set_("annotations.0.segmentation", [[1, 2, 3, 4, 1e9, 6]]), "annotation id 10: a segmentation "
     "polygon reaches more than one image size outside"),
    ("rle-size", set_("annotations.1.segmentation", {"size": [41, 56], "counts": [2240]}), "annotation id 11: RLE "
     "'size' [41, 56] is not the image's [height, width] [40, 56]"),
    ("rle-sum", set_("annotations.1.segmentation", {"size": [40, 56], "counts": [2000, 5000]}), "annotation id 11: "
     "RLE runs cover 7000 pixels, not the image's 40x56 = 2240"),
    ("rle-negative", set_("annotations.1.segmentation", {"size": [40, 56], "counts": [2241, -1]}), "annotation id 11:"
     " RLE 'counts' holds a negative or oversized run"),
    ("rle-huge", set_("annotations.1.segmentation", {"size": [40, 56], "counts": [2 ** 32 + 2240, -2 ** 32]}),
     "RLE 'counts' holds a negative or oversized run"),
    ("rle-chars", set_("annotations.1.segmentation", {"size": [40, 56], "counts": "0~1"}), "annotation id 11: RLE "
     "counts string holds characters outside"),
    ("rle-cut", set_("annotations.1.segmentation", {"size": [40, 56], "counts": "0P"}), "annotation id 11: RLE "
     "counts string ends inside a number"),
    ("rle-long", set_("annotations.1.segmentation", {"size": [40, 56], "counts": "PPPPPPPP0"}), "a number longer"),
    ("rle-string-sum", set_("annotations.1.segmentation", {"size": [40, 56], "counts": "15"}), "annotation id 11: RLE "
     "runs cover 6 pixels"),
    ("rle-no-counts", set_("annotations.1.segmentation", {"size": [40, 56]}), "annotation id 11: 'segmentation' must"),
]


@pytest.mark.parametrize("mutate, reason, masks", [pytest.param(m, r, "none", id=k) for k, m, r in BAD_JSON]
                         + [pytest.param(m, r, "instance", id=k) for k, m, r in BAD_MASKS])
def test_malformed_annotation_files_are_refused(tmp_path, mutate, reason, masks):
    d = small_set(tmp_path)
    js = tmp_path / "bad.json"
    if mutate is None:
        js.write_text(json.dumps(d)[:-5])
    else:
        replaced = mutate(d)  # in place, or a replacement
        js.write_text(json.dumps(d if replaced is None else replaced))
    with pytest.raises(ValueError) as info:
        D.CocoDataset(tmp_path / "images", js, masks=masks)
    assert str(js) in str(info.value) and reason in str(info.value)


def test_the_small_set_itself_is_fine(tmp_path):
    """The base of the malformed cases loads (so each case fails for its own reason), and the RLE
    cases' good twins decode."""
    d = small_set(tmp_path)
    d["annotations"][1]["segmentation"] = {"size": [40, 56], "counts": [100, 40, 2100]}
    d["annotations"][2]["segmentation"] = mask_utils.encode(np.asfortranarray(np.eye(40, 56, dtype=np.uint8)))
    d["annotations"][2]["segmentation"]["counts"] = d["annotations"][2]["segmentation"]["counts"].decode()
    js = tmp_path / "good.json"
    js.write_text(json.dumps(d))
    ds = D.CocoDataset(tmp_path / "images", js, masks="instance")
    assert [int(t["masks"].sum()) for _, t in ds] == [int(mask_utils.decode(mask_utils.frPyObjects(
        [[1, 2, 11, 2, 11, 22]], 40, 56)).sum()), 40, 40]


def test_bad_images_follow_on_error(tmp_path):
    """A truncated JPEG, a missing file and a size that disagrees with the annotation file: raised
    under on_error='raise' naming the file; under 'skip' collate_detection drops them with their
    targets, and check() finds them up front."""
    d = small_set(tmp_path, n=5)
    d["images"][3]["width"] = 57
    js = tmp_path / "set.json"
    js.write_text(json.dumps(d))
    images = tmp_path / "images"
    data = (images / "1.jpg").read_bytes()
    (images / "1.jpg").write_bytes(data[: len(data) // 2])
    (images / "4.jpg").unlink()

    strict = D.CocoDataset(images, js)
    with pytest.raises(dctnet.JpegError, match="1.jpg"):
        strict[1]
    with pytest.raises(dctnet.JpegError, match=r"3\.jpg: the image is 56x40 pixels but .*set\.json says 57x40 "
                       r"\(image id 4\)"):
        strict[3]
    with pytest.raises(FileNotFoundError):
        strict[4]
    with pytest.raises(dctnet.JpegError, match="1.jpg") as info:
        strict.check()
    assert "3.jpg" in str(info.value) and "4.jpg" in str(info.value)

    lenient = D.CocoDataset(images, js, on_error="skip", masks="instance")
    items = [lenient[i] for i in range(5)]
    assert [len(it) for it in items] == [2, 3, 2, 3, 3]
    batch, targets = D.collate_detection(items + [None], pin_memory=False)
    assert batch.index.tolist() == [0, 2] and [t["image_id"] for t in targets] == [1, 3]
    assert [s[0] for s in batch.skipped] == [1, 3, 4] and "57x40" in batch.skipped[1][2]
    assert targets[1]["masks"].shape == (1, 40, 56)

    bad = lenient.check()
    assert [Path(p).name for p, _ in bad] == ["1.jpg", "3.jpg", "4.jpg"]
    assert len(lenient) == 2 and lenient.ids == [1, 3]
    assert [lenient[i][1]["image_id"] for i in range(2)] == [1, 3]


def test_bad_semantic_masks_follow_on_error(tmp_path):
    d = small_set(tmp_path, n=3)
    js = tmp_path / "set.json"
    js.write_text(json.dumps(d))
    sem = tmp_path / "semantic"
    sem.mkdir()
    Image.fromarray(np.zeros((40, 56), np.uint8)).save(sem / "0.png")
    Image.fromarray(np.zeros((40, 55), np.uint8)).save(sem / "1.png")  # 2.png missing
    strict = D.CocoDataset(tmp_path / "images", js, semantic=sem)
    assert strict[0][1]["semantic"].shape == (40, 56)
    with pytest.raises(ValueError, match=r"1\.png: the mask is 55x40, the image 56x40"):
        strict[1]
    with pytest.raises(FileNotFoundError):
        strict[2]
    lenient = D.CocoDataset(tmp_path / "images", js, semantic=sem, on_error="skip")
    batch, targets = D.collate_detection([lenient[i] for i in range(3)], pin_memory=False)
    assert batch.index.tolist() == [0] and [s[0] for s in batch.skipped] == [1, 2]


def test_arguments_are_checked(tmp_path):
    d = small_set(tmp_path, n=1)
    js = tmp_path / "set.json"
    js.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="masks must be"):
        D.CocoDataset(tmp_path / "images", js, masks="semantic")
    with pytest.raises(FileNotFoundError, match="images folder"):
        D.CocoDataset(tmp_path / "nope", js)
    with pytest.raises(FileNotFoundError, match="semantic mask folder"):
        D.CocoDataset(tmp_path / "images", js, semantic=tmp_path / "nope")
    with pytest.raises(ValueError, match="on_error"):
        D.CocoDataset(tmp_path / "images", js, on_error="ignore")
