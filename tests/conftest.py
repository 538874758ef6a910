"""Shared fixtures. Data under ../shared is read in place and skipped cleanly when absent.

The libjpeg oracle is jpeglib pinned to libjpeg-turbo 2.1 (its default, 6b, cannot read
arithmetic-coded files); the pin must happen before jpeglib loads any libjpeg.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import jpeglib
import numpy as np
import pytest

jpeglib.version.set("turbo210")

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DCTNET_SHARED", ROOT.parent / "shared"))
CORPUS = SHARED / "jpeg-corpus"
IMAGENETTE = Path(os.environ.get("DCTNET_DATA", SHARED / "data" / "imagenette"))


def corpus_rows() -> list[dict[str, str]]:
    catalog = CORPUS / "catalog.tsv"
    if not catalog.is_file():
        return []
    with open(catalog, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def corpus_params(predicate=lambda row: True) -> list:
    """pytest params over corpus rows (one skipped placeholder when the corpus is absent)."""
    rows = [r for r in corpus_rows() if predicate(r)]
    if not rows:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"corpus not found at {CORPUS}"))]
    return [pytest.param(r, id=r["file"]) for r in rows]


def corpus_file(row: dict[str, str]) -> str:
    return str(CORPUS / "files" / row["file"])


def imagenette_files(split: str = "val", every: int = 1) -> list[str]:
    d = IMAGENETTE / split
    if not d.is_dir():
        return []
    return [str(p) for p in sorted(d.glob("*/*.JPEG"))[::every]]


@pytest.fixture(scope="session")
def imagenette_sample() -> list[str]:
    files = imagenette_files("val", every=40)
    if not files:
        pytest.skip(f"Imagenette not found at {IMAGENETTE}")
    return files


@pytest.fixture(scope="session")
def synthetic_files(tmp_path_factory) -> list[str]:
    """Generated JPEGs covering the layouts Pillow writes; always available."""
    from dctnet.synthetic import synthetic_jpeg

    out = tmp_path_factory.mktemp("synthetic")
    paths = []
    variants = [
        dict(subsampling="4:2:0"), dict(subsampling="4:2:2"), dict(subsampling="4:4:4"),
        dict(subsampling="4:2:0", progressive=True), dict(gray=True), dict(subsampling="4:2:0", quality=95),
        dict(subsampling="4:2:0", quality=10, optimize=True),
    ]
    sizes = [(96, 128), (17, 33), (1, 1), (61, 67), (224, 224), (8, 8), (203, 157)]
    i = 0
    for v in variants:
        for h, w in sizes:
            p = out / f"syn_{i:03d}.jpg"
            p.write_bytes(synthetic_jpeg(i, h, w, **v))
            paths.append(str(p))
            i += 1
    return paths


def jpeglib_components(path: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """libjpeg's quantized coefficients per component ``(hb, wb, 64)`` (coded blocks only) and
    the quantization table each component uses, via jpeglib (the independent oracle)."""
    d = jpeglib.read_dct(path)
    comps = [d.Y, d.Cb, d.Cr, d.K][: d.num_components]
    coefs = [np.asarray(c).reshape(c.shape[0], c.shape[1], 64) for c in comps]
    qt = np.asarray(d.qt)
    tables = [qt[int(i)].reshape(64) for i in d.quant_tbl_no[: d.num_components]]
    return coefs, tables


def write_recipe(tmp_path: Path, root: str, *, name: str = "t", batch_size: int = 16, **over) -> Path:
    """A small CPU recipe over ``root`` written to ``tmp_path/recipe.yaml`` (run directory
    ``tmp_path/run``); ``section__field=value`` overrides any field, ``augment=[...]`` the list."""
    import yaml

    base = {"name": name, "data": {"source": "folder", "root": str(root), "image_size": 32, "batch_size": batch_size,
                                   "threads": 1, "workers": 0, "scale": [0.5, 1.0]},
            "model": {"arch": "resnet18", "input": "dct", "stem": "dct8"},
            "optim": {"lr": 0.1, "lr_batch": batch_size, "epochs": 1, "warmup_epochs": 0.5},
            "train": {"out": str(tmp_path / "run"), "progress": False, "torch_threads": 1}}
    for key, value in over.items():
        if "__" not in key:  # a top-level key (augment, name)
            base[key] = value
            continue
        section, field = key.split("__")
        base.setdefault(section, {})[field] = value
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(base))
    return path


def segmentation_recipe(tmp_path: Path, arm: str, steps: int):
    """A torchvision segmentation recipe (LR-ASPP, MobileNetV3) on a generated set's class maps (4 train,
    2 val images of 96×128, 4 classes) in ``arm``, ``steps`` training steps: what the segmentation tests
    train."""
    from dctnet.synthetic import make_instance_set
    from dctnet.train import load_recipe

    make_instance_set(str(tmp_path / "set"), train=4, val=2, size=(96, 128), seed=4, semantic=True)
    split = {s: {"images": s, "annotations": f"{s}.json", "semantic": f"{s}_semantic"} for s in ("train", "val")}
    return load_recipe(None, {
        "data": {"source": "coco", "root": str(tmp_path / "set"), **split, "batch_size": 2, "workers": 0},
        "model": {"arch": "torchvision:lraspp_mobilenet_v3_large", "input": arm, "num_classes": 4},
        "detect": {"base_size": 96, "crop_size": 80},
        "optim": {"epochs": 1, "lr": 0.01, "lr_batch": 16},
        "train": {"max_steps": steps, "out": str(tmp_path / "run")}})
