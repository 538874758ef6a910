"""The ``csv`` source (:mod:`dctnet.data.sources`): a split is a CSV file listing its images and their
labels, as many datasets ship (Kaggle's ``train.csv``, ImageNet's list files turned to CSV) — no
folder per class needed.

``data.train`` / ``data.val`` name the CSV files under ``data.root``. Each has a header row; the
column ``data.image_column`` (default ``image``) holds an image's path, relative to the CSV file's
folder or absolute, and ``data.label_column`` (default ``label``) its class name. The classes are
the labels of both splits, sorted (numerically when every label is an integer), so the two splits
index them alike. Every file is checked by a full decode once, as the ``folder`` source's are, and
read by dctnet's reader or, for the ``rgb`` baseline, by Pillow. The CSV is untrusted input: a
missing column, an empty label or path, or an unreadable file is a ``ValueError`` naming the file,
its line and the reason.
"""

from __future__ import annotations

import csv
import difflib
import os
from collections.abc import Callable
from pathlib import Path

from dctnet.data.dataset import DEFAULT_MAX_PIXELS, CropDataset, ImageFolderDataset
from dctnet.data.pillow import PillowFiles
from dctnet.data.sources import DataSource, SourceContext, register_source

__all__ = ["CsvImageDataset", "read_image_table"]

#: the largest CSV a split may be (a list of a few million images is well under it)
MAX_TABLE_BYTES = 1 << 30


def read_image_table(table: str | os.PathLike, image_column: str = "image",
                     label_column: str = "label") -> list[tuple[str, str]]:
    """``(path, label)`` of each row of the CSV ``table``: paths resolved against its folder.
    ``ValueError`` naming the file (and line) for a missing column, an empty cell, no rows, or
    text that is not UTF-8 CSV; ``FileNotFoundError`` when it is not there."""
    table = Path(table)
    if not table.is_file():
        raise FileNotFoundError(f"image table not found: {table}")
    if table.stat().st_size > MAX_TABLE_BYTES:
        raise ValueError(f"{table}: {table.stat().st_size} bytes is too large for an image table")
    rows: list[tuple[str, str]] = []
    try:
        with open(table, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            columns = reader.fieldnames or []
            for column in (image_column, label_column):
                if column not in columns:
                    close = difflib.get_close_matches(column, columns, n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    raise ValueError(f"{table}: no column {column!r} (its header: {', '.join(columns) or 'none'}){hint}")
            for row in reader:
                path, label = (row.get(image_column) or "").strip(), (row.get(label_column) or "").strip()
                if not path or not label:
                    raise ValueError(f"{table}, line {reader.line_num}: empty {image_column if not path else label_column}")
                rows.append((str(table.parent / path), label))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"{table}: not a UTF-8 CSV file ({exc})") from None
    if not rows:
        raise ValueError(f"{table}: no rows under its header")
    return rows


def _sorted_classes(labels: set[str]) -> list[str]:
    """Class names sorted: numerically when every one is an integer (``2`` before ``10``)."""
    if all(label.lstrip("-").isdigit() for label in labels):
        return sorted(labels, key=int)
    return sorted(labels)


class CsvImageDataset(ImageFolderDataset):
    """The images a CSV table lists (:func:`read_image_table`) → cropped coefficient samples, as
    :class:`~dctnet.data.ImageFolderDataset` gives them (the same crop policy, randomness, ``check``
    and ``on_error``). ``classes``: the class names, sorted, or the ``classes`` given (so that the
    splits agree); a label outside them is a ``ValueError``."""

    def __init__(self, table: str | os.PathLike, *, image_column: str = "image", label_column: str = "label",
                 classes: list[str] | None = None, crop: Callable | None = None, seed: int = 0,
                 on_error: str = "raise", exif: str = "ignore", max_pixels: int | None = DEFAULT_MAX_PIXELS,
                 warnings: str = "raise") -> None:
        CropDataset.__init__(self, crop, seed, on_error, exif, warnings)
        rows = read_image_table(table, image_column, label_column)
        self.root = Path(table).parent
        self.classes = list(classes) if classes is not None else _sorted_classes({label for _, label in rows})
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        unknown = sorted({label for _, label in rows} - set(self.class_to_idx))
        if unknown:
            raise ValueError(f"{table}: labels not among the classes: {', '.join(unknown[:5])}")
        self.samples = [(path, self.class_to_idx[label]) for path, label in rows]
        self.targets = [t for _, t in self.samples]
        self.non_jpeg, self.empty_classes = [], []
        self.max_pixels = max_pixels
        self.warned: dict[str, tuple[str, ...]] = {}


def _classes(ctx: SourceContext) -> list[str]:
    """Both splits' labels, sorted: one class list for the two."""
    d = ctx.data
    labels = {label for split in ("train", "val")
              for _, label in read_image_table(ctx.path(split), d.image_column, d.label_column)}
    return _sorted_classes(labels)


def checked_table(ctx: SourceContext, split: str) -> CsvImageDataset:
    """The split's table (its crop: ``ctx.crops[split]``), every file checked by a full decode."""
    d = ctx.data
    ds = CsvImageDataset(ctx.path(split), image_column=d.image_column, label_column=d.label_column,
                         classes=_classes(ctx), crop=ctx.crops.get(split), warnings=d.warnings, **ctx.policy)
    return ctx.checked(split, ds)


def _pillow_table(ctx: SourceContext, split: str) -> PillowFiles:
    """The rgb baseline's view of the split: the files :func:`checked_table` finds usable, by Pillow."""
    ds = checked_table(ctx, split)
    return PillowFiles(ds.samples, ds.classes, ctx.data.warnings == "accept")


register_source(DataSource(
    "csv", fields=("image_column", "label_column"), coefficients=checked_table,
    pillow=lambda ctx, split: _pillow_table(ctx, split)))
