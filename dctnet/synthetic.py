"""Photo-like synthetic JPEGs, generated locally (no downloads).

Used by the tests when ``../shared`` is absent and by ``make demo`` as its built-in data. The
images have what real photos have and flat test patterns lack: smooth gradients, hard edges,
saturated colours and fine texture, so every DCT frequency and the chroma path get exercised.
Encoding uses Pillow (libjpeg-turbo), so the files are ordinary JPEGs.
"""

from __future__ import annotations

import io
import json
import os

import numpy as np
from PIL import Image

__all__ = ["INSTANCE_CLASSES", "SHAPE_CLASSES", "encode_jpeg", "labelled_image", "make_instance_set",
           "make_labelled_dataset", "synthetic_image", "synthetic_jpeg"]


def synthetic_image(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """``uint8 (height, width, 3)`` RGB: gradient background, random shapes, texture, noise."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    scale = float(max(height, width, 1))
    corners = rng.uniform(0, 255, size=(3, 3)).astype(np.float32)
    img = corners[0] + (corners[1] - corners[0]) * (xx / scale)[..., None] + (corners[2] - corners[0]) * (yy / scale)[..., None]
    for _ in range(int(rng.integers(2, 6))):
        cy, cx = rng.uniform(0, height), rng.uniform(0, width)
        ry, rx = rng.uniform(0.05, 0.4) * scale, rng.uniform(0.05, 0.4) * scale
        colour = rng.uniform(0, 255, size=3).astype(np.float32)
        if rng.random() < 0.5:
            mask = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0
        else:
            mask = (np.abs(yy - cy) <= ry / 2) & (np.abs(xx - cx) <= rx / 2)
        img[mask] = colour
    fy, fx = rng.uniform(0.05, 0.6, size=2)
    texture = np.sin(yy * fy + rng.uniform(0, 6)) * np.cos(xx * fx + rng.uniform(0, 6))
    img += (rng.uniform(5, 30) * texture)[..., None]
    img += rng.normal(0, rng.uniform(1, 6), size=img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def encode_jpeg(img: np.ndarray, *, quality: int = 75, subsampling: str = "4:2:0", progressive: bool = False,
                gray: bool = False, optimize: bool = False) -> bytes:
    """Encode ``uint8 (H, W, 3)`` RGB with Pillow. ``subsampling``: "4:4:4", "4:2:2" or "4:2:0"."""
    im = Image.fromarray(img, "RGB")
    if gray:
        im = im.convert("L")
    buf = io.BytesIO()
    kwargs = {"quality": quality, "progressive": progressive, "optimize": optimize}
    if not gray:
        kwargs["subsampling"] = subsampling
    im.save(buf, "JPEG", **kwargs)
    return buf.getvalue()


def synthetic_jpeg(seed: int, height: int = 96, width: int = 128, **encode_kwargs: object) -> bytes:
    """One synthetic photo encoded as JPEG; the same seed always gives the same bytes."""
    return encode_jpeg(synthetic_image(np.random.default_rng(seed), height, width), **encode_kwargs)  # type: ignore[arg-type]


#: Classes of :func:`labelled_image`: what distinguishes them is shape or texture, never colour.
SHAPE_CLASSES = ("disks", "boxes", "h-stripes", "v-stripes", "checkers", "rings", "diagonals", "blobs")


def labelled_image(rng: np.random.Generator, label: int, height: int, width: int) -> np.ndarray:
    """``uint8 (height, width, 3)`` photo-like image whose content is class ``label`` of
    :data:`SHAPE_CLASSES`: random colours, sizes, phases, positions, background and noise, so
    that a model must learn shapes and textures (colour carries no label information)."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    scale = float(max(height, width))
    corners = rng.uniform(0, 255, size=(3, 3)).astype(np.float32)
    img = corners[0] + (corners[1] - corners[0]) * (xx / scale)[..., None] + (corners[2] - corners[0]) * (yy / scale)[..., None]
    colour = rng.uniform(0, 255, size=3).astype(np.float32)
    name = SHAPE_CLASSES[label % len(SHAPE_CLASSES)]
    period = rng.uniform(5, 14)
    phase = rng.uniform(0, 2 * np.pi)
    if name in ("disks", "boxes", "rings"):
        mask = np.zeros((height, width), bool)
        for _ in range(int(rng.integers(1, 4))):
            cy, cx = rng.uniform(0.2, 0.8) * height, rng.uniform(0.2, 0.8) * width
            r = rng.uniform(0.12, 0.3) * min(height, width)
            if name == "disks":
                mask |= (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
            elif name == "rings":
                d = np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2)
                mask |= np.abs(d - r) <= max(2.0, 0.25 * r)
            else:
                mask |= (np.abs(yy - cy) <= r) & (np.abs(xx - cx) <= r * rng.uniform(0.7, 1.3))
    elif name == "h-stripes":
        mask = np.sin(2 * np.pi * yy / period + phase) > 0
    elif name == "v-stripes":
        mask = np.sin(2 * np.pi * xx / period + phase) > 0
    elif name == "checkers":
        mask = (np.sin(2 * np.pi * yy / period + phase) > 0) ^ (np.sin(2 * np.pi * xx / period + phase) > 0)
    elif name == "diagonals":
        sign = 1.0 if rng.random() < 0.5 else -1.0
        mask = np.sin(2 * np.pi * (xx + sign * yy) / (1.4 * period) + phase) > 0
    else:  # blobs: smooth, edge-free colour fields
        mask = np.zeros((height, width), bool)
        for _ in range(int(rng.integers(2, 5))):
            cy, cx = rng.uniform(0, height), rng.uniform(0, width)
            s = rng.uniform(0.1, 0.3) * scale
            w = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))[..., None]
            img = img * (1 - w) + rng.uniform(0, 255, size=3).astype(np.float32) * w
    img[mask] = colour * rng.uniform(0.85, 1.0) + img[mask] * rng.uniform(0.0, 0.15)
    img += rng.normal(0, rng.uniform(2, 10), size=img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def make_labelled_dataset(root: str, *, classes: int = 6, train_per_class: int = 400, val_per_class: int = 100,
                          size: tuple[int, int] = (64, 112), seed: int = 0) -> str:
    """Write a small labelled JPEG dataset in ImageFolder layout, ``root/{train,val}/<class>/*.jpg``.

    Mixed JPEG settings, as real collections have: qualities 40–95, 4:2:0 (most), 4:2:2, 4:4:4,
    some grayscale and progressive files, sides drawn from ``size``. Deterministic in ``seed``;
    an existing dataset written with the same parameters is reused. Returns ``root``."""
    if not 1 <= classes <= len(SHAPE_CLASSES):
        raise ValueError(f"classes must be 1..{len(SHAPE_CLASSES)}, got {classes}")
    params = {"classes": classes, "train_per_class": train_per_class, "val_per_class": val_per_class,
              "size": list(size), "seed": seed, "version": 1}
    marker = os.path.join(root, "dataset.json")
    if os.path.isfile(marker):
        with open(marker) as f:
            if json.load(f) == params:
                return root
    rng = np.random.default_rng(seed)
    for split, per_class in (("train", train_per_class), ("val", val_per_class)):
        for label in range(classes):
            folder = os.path.join(root, split, f"{label}-{SHAPE_CLASSES[label]}")
            os.makedirs(folder, exist_ok=True)
            for i in range(per_class):
                h, w = (int(v) for v in rng.integers(size[0], size[1] + 1, size=2))
                img = labelled_image(rng, label, h, w)
                kind = rng.random()
                data = encode_jpeg(img, quality=int(rng.integers(40, 96)),
                                   subsampling="4:2:0" if kind < 0.6 else "4:2:2" if kind < 0.75 else "4:4:4",
                                   gray=bool(rng.random() < 0.1), progressive=bool(rng.random() < 0.2))
                with open(os.path.join(folder, f"{i:05d}.jpg"), "wb") as f:
                    f.write(data)
    with open(marker, "w") as f:
        json.dump(params, f)
    return root


#: the categories of :func:`make_instance_set`: what tells them apart is the outline
INSTANCE_CLASSES = ("disk", "square", "triangle")

#: the JPEG layouts :func:`make_instance_set` cycles through
_INSTANCE_LAYOUTS = ({"subsampling": "4:2:0"}, {"subsampling": "4:4:4"}, {"subsampling": "4:2:2"},
                     {"subsampling": "4:2:0", "progressive": True}, {"gray": True})


def _outline(kind: str, cx: float, cy: float, r: float, angle: float) -> list[float]:
    """A polygon ``[x0, y0, x1, y1, …]`` of ``kind`` centred at (cx, cy), radius ``r``."""
    n = {"disk": 24, "square": 4, "triangle": 3}[kind]
    t = angle + 2 * np.pi * np.arange(n) / n
    return [round(float(v), 2) for xy in zip(cx + r * np.cos(t), cy + r * np.sin(t)) for v in xy]


def make_instance_set(root: str, *, textures: list[str] | None = None, train: int = 24, val: int = 8,
                      size: tuple[int, int] = (160, 224), objects: tuple[int, int] = (2, 6), seed: int = 0,
                      semantic: bool = False) -> dict:
    """A small COCO instance-segmentation set with exactly known masks: photo-textured objects
    (disks, squares, triangles; :data:`INSTANCE_CLASSES`) pasted without overlap on photo
    backgrounds, written as JPEGs in five layouts under ``root/{train,val}/`` with
    ``root/{train,val}.json`` (polygon segmentations; a pasted object covers exactly the pixels
    pycocotools rasterises from its polygon). ``textures``: JPEG paths to cut backgrounds and
    textures from (real photos); ``None``: :func:`synthetic_image`. ``semantic``: also class-index
    PNGs under ``root/{train,val}_semantic/`` (0 background, ``k`` the ``k``-th class; torchvision's
    segmentation references' layout). Returns the annotation paths."""
    from pycocotools import mask as mask_utils  # optional dependency (pycocotools, the "coco" extra)

    rng = np.random.default_rng(seed)
    h, w = size

    def patch() -> np.ndarray:
        if textures:
            with Image.open(textures[int(rng.integers(len(textures)))]) as im:
                im = im.convert("RGB")
                x0 = int(rng.integers(0, max(1, im.width - w)))
                y0 = int(rng.integers(0, max(1, im.height - h)))
                crop = np.asarray(im.crop((x0, y0, x0 + w, y0 + h)).resize((w, h)))
            return crop
        return synthetic_image(rng, h, w)

    out = {}
    categories = [{"id": k + 1, "name": name} for k, name in enumerate(INSTANCE_CLASSES)]
    ann_id = 1
    for split, n in (("train", train), ("val", val)):
        os.makedirs(os.path.join(root, split), exist_ok=True)
        if semantic:
            os.makedirs(os.path.join(root, f"{split}_semantic"), exist_ok=True)
        images, annotations = [], []
        for i in range(n):
            img = patch().copy()
            taken = np.zeros((h, w), bool)
            classes = np.zeros((h, w), np.uint8)
            for _ in range(int(rng.integers(objects[0], objects[1] + 1))):
                for _attempt in range(20):  # rejection: objects do not overlap, so each mask stays whole
                    kind = int(rng.integers(len(INSTANCE_CLASSES)))
                    r = float(rng.uniform(0.08, 0.22) * min(h, w))
                    cx, cy = float(rng.uniform(r, w - r)), float(rng.uniform(r, h - r))
                    poly = _outline(INSTANCE_CLASSES[kind], cx, cy, r, float(rng.uniform(0, 2 * np.pi)))
                    m = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects([poly], h, w))).astype(bool)
                    if m.any() and not (m & taken).any():
                        break
                else:
                    continue
                taken |= m
                classes[m] = kind + 1
                img[m] = patch()[m]
                x, y, bw, bh = (float(v) for v in mask_utils.toBbox(mask_utils.encode(np.asfortranarray(m.astype(np.uint8)))))
                annotations.append({"id": ann_id, "image_id": i + 1, "category_id": kind + 1, "segmentation": [poly],
                                    "bbox": [x, y, bw, bh], "area": float(m.sum()), "iscrowd": 0})
                ann_id += 1
            name = f"{i:04d}.jpg"
            if semantic:
                Image.fromarray(classes, "L").save(os.path.join(root, f"{split}_semantic", f"{i:04d}.png"))
            with open(os.path.join(root, split, name), "wb") as f:
                f.write(encode_jpeg(img, quality=90, **_INSTANCE_LAYOUTS[i % len(_INSTANCE_LAYOUTS)]))
            images.append({"id": i + 1, "file_name": name, "width": w, "height": h})
        path = os.path.join(root, f"{split}.json")
        with open(path, "w") as f:
            json.dump({"images": images, "annotations": annotations, "categories": categories}, f)
        out[split] = path
    return out
