"""The image sets the loader and cache benchmarks measure: Imagenette train photos as stored and
re-encoded with Pillow in every layout users meet, a realistic mix, and ImageNet-sized files.

Sets are written once under ``.bench-data/layouts/<name>/<class>/`` (ImageFolder layout, the
photos' own classes) and reused; the photos are read in place from ``$DCTNET_DATA`` or
``../shared/data/imagenette``. Re-encoding uses quality 92 (a high-quality export)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DCTNET_DATA", ROOT.parent / "shared" / "data" / "imagenette"))
OUT = ROOT / ".bench-data" / "layouts"

#: name → (Pillow mode, save arguments); "stored" links the original files
ENCODINGS = {
    "stored": None,
    "4:4:4": ("RGB", {"subsampling": "4:4:4"}),
    "4:2:2": ("RGB", {"subsampling": "4:2:2"}),
    "gray": ("L", {}),
    "cmyk": ("CMYK", {}),
    "progressive": ("RGB", {"subsampling": "4:2:0", "progressive": True}),
}
#: the realistic mix: share of each encoding
MIX = {"stored": 0.70, "4:4:4": 0.15, "4:2:2": 0.05, "progressive": 0.05, "gray": 0.05}
SETS = ["stored", "4:4:4", "4:2:2", "gray", "cmyk", "progressive", "mix", "500x375"]


def photos(n: int) -> list[tuple[str, str]]:
    """(path, class) of ``n`` Imagenette train photos spread over the classes."""
    train = DATA / "train"
    if not train.is_dir():
        raise SystemExit(f"Imagenette not found at {DATA} (set DCTNET_DATA)")
    files = sorted(train.glob("*/*.JPEG"))
    step = max(1, len(files) // n)
    return [(str(f), f.parent.name) for f in files[::step][:n]]


def _encode(src: str, mode: str, kwargs: dict, size: tuple[int, int] | None = None) -> bytes:
    with Image.open(src) as im:
        img = im.convert("RGB")
    if size is not None:
        img = img.resize(size, Image.BICUBIC)
    buf = io.BytesIO()
    img.convert(mode).save(buf, "JPEG", quality=92, **kwargs)
    return buf.getvalue()


def build(name: str, n: int) -> Path:
    """The folder of set ``name`` with ``n`` images (written on first use)."""
    if name not in SETS:
        raise SystemExit(f"unknown set {name!r}; the sets are {', '.join(SETS)}")
    root = OUT / f"{name}-{n}"
    marker = root / ".complete"
    if marker.exists():
        return root
    rng = np.random.default_rng(0)
    kinds = list(MIX)
    for i, (src, cls) in enumerate(photos(n)):
        d = root / cls
        d.mkdir(parents=True, exist_ok=True)
        stem = Path(src).stem
        if name == "mix":
            kind = kinds[int(rng.choice(len(kinds), p=list(MIX.values())))]
        else:
            kind = name
        dst = d / f"{stem}.jpg"
        if kind == "stored":
            if not dst.exists():
                os.symlink(src, dst)
        elif kind == "500x375":
            dst.write_bytes(_encode(src, "RGB", {"subsampling": "4:2:0"}, (500, 375)))
        else:
            mode, kwargs = ENCODINGS[kind]
            dst.write_bytes(_encode(src, mode, kwargs))
    marker.write_text("")
    return root
