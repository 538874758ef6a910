"""Dataset checks: decode everything once and report what would hurt training.

:func:`verify_dataset` takes an image folder (``root/<class>/...``) or a folder of splits
(``root/<split>/<class>/...``, e.g. Imagenette's train/val) and reports, per split: unreadable
files (with libjpeg's reason; under the default ``warnings="raise"`` that includes files that
lost data: truncated, corrupt entropy-coded data), files libjpeg warned about without losing
anything, exact duplicates (same bytes: blake2b), class balance, files that are not JPEGs (by
name: not read by dctnet's datasets; or by content, e.g. PNG data named ``.jpg``: a bad sample)
and class folders without a JPEG, and across splits: leakage (the same bytes in two splits).

:func:`dctnet.data.usable.check_files` is the same full decode for a list of files: which ones dctnet's readers
refuse, and why. ``dctnet train`` runs it once before training, so that every epoch, every rank
and the torchvision baseline use the same files.
"""

from __future__ import annotations

import collections
import hashlib
import os
import warnings as pywarnings
from pathlib import Path
from typing import Any

from dctnet.codec import read_coefficients_batch, read_regular_file, warn_mode
from dctnet.data.dataset import ImageFolderDataset, UnusedFilesWarning
from dctnet.data.usable import data_kind

__all__ = ["format_report", "verify_dataset"]

def _splits(root: Path) -> dict[str, Path]:
    """``{split: folder}``: subfolders that are themselves class folders of images, else the root."""
    subs = sorted(d for d in root.iterdir() if d.is_dir())
    nested = [d for d in subs if any(c.is_dir() for c in d.iterdir())]
    if subs and len(nested) == len(subs):
        return {d.name: d for d in subs}
    return {root.name: root}


def verify_dataset(root: str | os.PathLike, *, threads: int | None = None, chunk: int = 512,
                   warnings: str = "raise") -> dict[str, Any]:
    """Decode every JPEG under ``root`` once, under the ``warnings`` policy; returns a JSON-ready
    report (see module docs)."""
    warn_mode(warnings)
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"dataset folder not found: {root}")
    report: dict[str, Any] = {"root": str(root), "splits": {}, "leakage": []}
    owners: dict[str, list[str]] = collections.defaultdict(list)
    for split, folder in _splits(root).items():
        with pywarnings.catch_warnings():  # reported below instead
            pywarnings.simplefilter("ignore", UnusedFilesWarning)
            ds = ImageFolderDataset(folder)
        unreadable, warned, not_jpeg_data, hashes = [], [], [], {}
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
                kind = data_kind(data[:16])
                if kind not in (None, "empty"):  # (an empty file is unreadable: "empty input")
                    not_jpeg_data.append({"path": os.path.relpath(path, folder), "kind": kind})
                digest = hashlib.blake2b(data, digest_size=16).hexdigest()
                hashes[path] = digest
                owners[digest].append(f"{split}/{os.path.relpath(path, folder)}")
            results = read_coefficients_batch(blobs, threads=threads, warnings=warnings, errors="return")
            named = {d["path"] for d in not_jpeg_data}
            for (path, _), res in zip(part, results):
                rel = os.path.relpath(path, folder)
                if rel in named:  # reported as what it is, below
                    continue
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
            "non_jpeg": [os.path.relpath(p, folder) for p in ds.non_jpeg], "not_jpeg_data": not_jpeg_data,
            "empty_classes": list(ds.empty_classes),
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
                     f"{len(s['non_jpeg']) + len(s['not_jpeg_data']):8d}")
    lines.append(f"\nleakage across splits: {len(report['leakage'])} groups of identical files")
    for split, s in report["splits"].items():
        for u in s["unreadable"][:10]:
            lines.append(f"  unreadable {split}/{u['path']}: {u['reason']}")
        for w in s["warnings"][:10]:
            lines.append(f"  warning    {split}/{w['path']}: {'; '.join(w['warnings'])}")
        for d in s["duplicates"][:5]:
            lines.append(f"  duplicate  {split}: {', '.join(d)}")
        for d in s["not_jpeg_data"][:10]:
            lines.append(f"  not JPEG   {split}/{d['path']}: {d['kind']} data under a JPEG name (a bad sample)")
        for p in s["non_jpeg"][:10]:
            lines.append(f"  not JPEG   {split}/{p} (not read: dctnet reads JPEG only)")
        if len(s["non_jpeg"]) > 10:
            lines.append(f"  not JPEG   … {len(s['non_jpeg']) - 10} more in {split}")
        for c in s["empty_classes"]:
            lines.append(f"  no JPEG    {split}/{c}/ (a class folder without any JPEG)")
    for group in report["leakage"][:10]:
        lines.append(f"  leaked     {', '.join(group)}")
    return "\n".join(lines)
