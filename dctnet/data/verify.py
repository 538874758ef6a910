"""Dataset checks: decode everything once and report what would hurt training.

:func:`verify_dataset` takes an image folder (``root/<class>/...``) or a folder of splits
(``root/<split>/<class>/...``, e.g. Imagenette's train/val) and reports, per split: unreadable
files (with libjpeg's reason), files libjpeg warned about, exact duplicates (same bytes: blake2b),
class balance, files that are not JPEGs (not read by dctnet's datasets) and class folders without
a JPEG, and across splits: leakage (the same bytes in two splits).
"""

from __future__ import annotations

import collections
import hashlib
import os
import warnings
from pathlib import Path
from typing import Any

from dctnet.codec import read_coefficients_batch, read_regular_file
from dctnet.data.dataset import ImageFolderDataset, UnusedFilesWarning

__all__ = ["format_report", "verify_dataset"]


def _splits(root: Path) -> dict[str, Path]:
    """``{split: folder}``: subfolders that are themselves class folders of images, else the root."""
    subs = sorted(d for d in root.iterdir() if d.is_dir())
    nested = [d for d in subs if any(c.is_dir() for c in d.iterdir())]
    if subs and len(nested) == len(subs):
        return {d.name: d for d in subs}
    return {root.name: root}


def verify_dataset(root: str | os.PathLike, *, threads: int | None = None, chunk: int = 512) -> dict[str, Any]:
    """Decode every JPEG under ``root`` once; returns a JSON-ready report (see module docs)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"dataset folder not found: {root}")
    report: dict[str, Any] = {"root": str(root), "splits": {}, "leakage": []}
    owners: dict[str, list[str]] = collections.defaultdict(list)
    for split, folder in _splits(root).items():
        with warnings.catch_warnings():  # reported below instead
            warnings.simplefilter("ignore", UnusedFilesWarning)
            ds = ImageFolderDataset(folder)
        unreadable, warned, hashes = [], [], {}
        for start in range(0, len(ds.samples), chunk):
            part = ds.samples[start:start + chunk]
            blobs: list[bytes | str] = []
            for path, _ in part:
                try:
                    data = read_regular_file(path)
                except OSError:
                    blobs.append(path)  # the reader reports why (e.g. not a regular file)
                    continue
                blobs.append(data)
                digest = hashlib.blake2b(data, digest_size=16).hexdigest()
                hashes[path] = digest
                owners[digest].append(f"{split}/{os.path.relpath(path, folder)}")
            for (path, _), res in zip(part, read_coefficients_batch(blobs, threads=threads, errors="return")):
                rel = os.path.relpath(path, folder)
                if isinstance(res, BaseException):
                    unreadable.append({"path": rel, "reason": getattr(res, "reason", str(res))})
                elif res.warnings:
                    warned.append({"path": rel, "warnings": list(res.warnings)})
        by_hash: dict[str, list[str]] = collections.defaultdict(list)
        for path, digest in hashes.items():
            by_hash[digest].append(os.path.relpath(path, folder))
        counts = collections.Counter(ds.classes[label] for _, label in ds.samples)
        report["splits"][split] = {
            "files": len(ds.samples), "classes": dict(sorted(counts.items())),
            "class_balance": round(min(counts.values()) / max(counts.values()), 4),
            "unreadable": unreadable, "warnings": warned,
            "non_jpeg": [os.path.relpath(p, folder) for p in ds.non_jpeg], "empty_classes": list(ds.empty_classes),
            "duplicates": sorted(sorted(v) for v in by_hash.values() if len(v) > 1),
        }
    for names in owners.values():
        if len({n.split("/", 1)[0] for n in names}) > 1:
            report["leakage"].append(sorted(names))
    report["leakage"].sort()
    return report


def format_report(report: dict[str, Any]) -> str:
    """The report as a readable table."""
    lines = [f"dataset {report['root']}", "",
             f"{'split':10s} {'files':>7s} {'classes':>7s} {'balance':>8s} {'unreadable':>10s} {'warnings':>8s} "
             f"{'dup groups':>10s} {'not JPEG':>8s}"]
    for split, s in report["splits"].items():
        lines.append(f"{split:10s} {s['files']:7d} {len(s['classes']):7d} {s['class_balance']:8.3f} "
                     f"{len(s['unreadable']):10d} {len(s['warnings']):8d} {len(s['duplicates']):10d} "
                     f"{len(s['non_jpeg']):8d}")
    lines.append(f"\nleakage across splits: {len(report['leakage'])} groups of identical files")
    for split, s in report["splits"].items():
        for u in s["unreadable"][:10]:
            lines.append(f"  unreadable {split}/{u['path']}: {u['reason']}")
        for w in s["warnings"][:10]:
            lines.append(f"  warning    {split}/{w['path']}: {'; '.join(w['warnings'])}")
        for d in s["duplicates"][:5]:
            lines.append(f"  duplicate  {split}: {', '.join(d)}")
        for p in s["non_jpeg"][:10]:
            lines.append(f"  not JPEG   {split}/{p} (not read: dctnet reads JPEG only)")
        if len(s["non_jpeg"]) > 10:
            lines.append(f"  not JPEG   … {len(s['non_jpeg']) - 10} more in {split}")
        for c in s["empty_classes"]:
            lines.append(f"  no JPEG    {split}/{c}/ (a class folder without any JPEG)")
    for group in report["leakage"][:10]:
        lines.append(f"  leaked     {', '.join(group)}")
    return "\n".join(lines)
