"""Which files dctnet's readers refuse, decided once by a full decode of each.

A loader's read stops entropy decoding below its crop window, so one epoch's crop may miss
corrupt data that another epoch's crop meets; and the torchvision baseline decodes with Pillow,
which reads PNG data under a ``.jpg`` name and fills in corrupt entropy-coded data without a
word. :func:`check_files` decodes every file in full once, under the datasets' ``warnings``
policy, so that every epoch, every rank and both arms of a comparison use the same files.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from dctnet.codec import DEFAULT_MAX_PIXELS, read_coefficients_batch, warn_mode

__all__ = ["CheckedFiles", "check_files", "data_kind"]

#: leading bytes of image formats a JPEG-named file may hold instead
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"GIF87a", "GIF"), (b"GIF89a", "GIF"), (b"BM", "BMP"),
          (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"), (b"\x00\x00\x00\x0cjP  ", "JPEG 2000"))


def data_kind(data: bytes) -> str | None:
    """``None`` for data that starts like a JPEG (SOI), else what it looks like: ``"empty"``,
    ``"PNG"``, ``"GIF"``, ``"WebP"``, ``"BMP"``, ``"TIFF"``, ``"JPEG 2000"``, ``"HEIF/AVIF"`` or
    ``"unknown"``."""
    if data[:2] == b"\xff\xd8":
        return None
    if not data:
        return "empty"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP"
    if data[4:8] == b"ftyp":
        return "HEIF/AVIF"
    return next((kind for magic, kind in _MAGIC if data.startswith(magic)), "unknown")


class CheckedFiles(NamedTuple):
    """What :func:`check_files` found: ``unusable`` ``{path: reason}`` (refused by the readers),
    ``warned`` ``{path: libjpeg warnings}`` (usable: warnings that lost nothing)."""

    unusable: dict[str, str]
    warned: dict[str, tuple[str, ...]]


def check_files(paths: Sequence[str], *, warnings: str = "raise", max_pixels: int | None = DEFAULT_MAX_PIXELS,
                threads: int | None = None, chunk: int = 256) -> CheckedFiles:
    """Decode each file in full once (so corrupt data below any crop window counts too), under
    the ``warnings`` policy (:data:`dctnet.codec.WARNING_POLICIES`): which files the readers
    refuse and why, and which read with warnings. Costs about one epoch of entropy decoding, on
    ``threads`` threads (default: the CPUs this process may use); memory stays at ``chunk``
    images."""
    warn_mode(warnings)
    found = CheckedFiles({}, {})
    for start in range(0, len(paths), chunk):
        part = list(paths[start:start + chunk])
        results = read_coefficients_batch(part, threads=threads, warnings=warnings, max_pixels=max_pixels,
                                          errors="return")
        for path, res in zip(part, results):
            if isinstance(res, BaseException):
                found.unusable[path] = _reason(path, res)
            elif res.warnings:
                found.warned[path] = res.warnings
    return found


def _reason(path: str, exc: BaseException) -> str:
    """The reason a file is refused, saying what non-JPEG data is when the name hides it."""
    reason = getattr(exc, "reason", None) or (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc))
    try:
        with open(path, "rb") as f:
            kind = data_kind(f.read(16))
    except OSError:
        return reason
    if kind == "empty":
        return "empty file (0 bytes)"
    return f"not a JPEG: {kind} data under a JPEG name" if kind else reason
