"""The files a benchmark reads and what they are: up to ``limit`` JPEG-named files spread evenly
over a folder, the ones every pipeline can read (dctnet's rule, then Pillow's), and the layout
census of their headers (coding process, colour space, chroma sampling). ``dctnet bench`` and
``benchmarks/loader.py`` report with them.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from dctnet.codec import read_header
from dctnet.data import check_files as checked
from dctnet.data.dataset import IMG_EXTENSIONS

__all__ = ["COLOR_SPACES", "PROCESSES", "SAMPLINGS", "census", "check_files", "layout_facts", "sample_files"]

PROCESSES = ("baseline", "extended", "progressive", "extended-arithmetic", "progressive-arithmetic")
COLOR_SPACES = ("YCbCr", "RGB", "gray", "CMYK", "YCCK", "unknown")
SAMPLINGS = ("4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "other")

def sample_files(src: str | os.PathLike, limit: int) -> tuple[list[str], int]:
    """``(files, found)``: up to ``limit`` JPEG-named files under ``src`` (a file, a flat folder
    or a folder of class folders, searched recursively), spread evenly over the sorted list so
    every class is represented; ``found`` counts them all."""
    root = Path(src)
    if root.is_file():
        return [str(root)], 1
    files = sorted(str(p) for p in root.rglob("*") if p.name.lower().endswith(IMG_EXTENSIONS) and p.is_file())
    n = len(files)
    if n <= limit:
        return files, n
    return [files[int(i * n / limit)] for i in range(limit)], n


def layout_facts(h) -> dict[str, Any]:
    """What :func:`census` counts of one header (a :class:`dctnet.codec.JpegHeader`)."""
    sub = h.subsampling
    return {"process": h.process, "color_space": h.color_space, "components": h.num_components,
            "sampling": sub if sub in SAMPLINGS else "other", "factors": sub, "pixels": h.width * h.height}


def check_files(files: list[str], threads: int = 1) -> tuple[list[str], dict[str, dict], list[dict], list[dict]]:
    """Decide once which files every pipeline reads, by the rule ``dctnet train`` uses
    (:func:`dctnet.data.check_files`: a full decode under the readers' default policy, so a file
    that lost data is refused), then Pillow's decode as a guard (what the torchvision and timm
    pipelines open). Returns ``(usable, facts, skipped, warned)``: the usable paths, their header
    facts (:func:`layout_facts`), ``{"file", "reason", "by"}`` of each skipped file (``by``:
    ``"dctnet"`` or ``"pillow"``), ``{"file", "warnings"}`` of files read with warnings that lost
    nothing. Reads 8 files at a time (12-Mpixel photos: ~300 MB of planes)."""
    from PIL import Image  # optional dependency (the test extras), as the torchvision arm it guards

    found = checked(files, threads=threads, chunk=8)
    skipped = [{"file": f, "reason": why, "by": "dctnet"} for f, why in found.unusable.items()]
    warned = [{"file": f, "warnings": list(w)} for f, w in found.warned.items()]
    usable, facts = [], {}
    for path in files:
        if path in found.unusable:
            continue
        try:
            facts[path] = layout_facts(read_header(path))
        except (ValueError, OSError) as exc:  # changed since the check
            skipped.append({"file": path, "reason": str(getattr(exc, "reason", exc)), "by": "dctnet"})
            continue
        try:
            with Image.open(path) as im:
                im.convert("RGB")
        except Exception as exc:  # noqa: BLE001 — whatever Pillow raises for bad data, the file is skipped
            skipped.append({"file": path, "reason": f"Pillow cannot decode it ({type(exc).__name__}: {exc})",
                            "by": "pillow"})
            del facts[path]
            continue
        usable.append(path)
    return usable, facts, skipped, warned


def census(facts: list[dict[str, Any]]) -> dict[str, Any]:
    """Layout counts from header facts (:func:`check_files`): coding process, colour space,
    chroma sampling (files with more than one component) and the combined layout."""
    process = Counter(f["process"] for f in facts)
    color = Counter(f["color_space"] for f in facts)
    sampling = Counter(f["sampling"] for f in facts if f["components"] > 1)
    layouts = Counter(f"{f['color_space']} {f['factors'] if f['components'] > 1 else ''} {f['process']}".replace("  ", " ")
                      for f in facts)
    return {"files": len(facts),
            "process": {k: process.get(k, 0) for k in PROCESSES} | {k: v for k, v in process.items() if k not in PROCESSES},
            "color_space": {k: color.get(k, 0) for k in COLOR_SPACES} | {k: v for k, v in color.items()
                                                                        if k not in COLOR_SPACES},
            "sampling": {k: sampling.get(k, 0) for k in SAMPLINGS},
            "layouts": dict(layouts.most_common()),
            "megapixels_mean": round(sum(f["pixels"] for f in facts) / max(1, len(facts)) / 1e6, 3)}
