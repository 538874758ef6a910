"""Local Hugging Face data: where a recipe's split is (a saved dataset, a ``DatasetDict``'s split,
parquet files), opened by row or streamed, and its image and label columns as stored bytes and
labels — what :class:`dctnet.data.HFDataset` and :class:`dctnet.data.HFStreamDataset` share.

``datasets`` is an optional dependency (``pip install dctnet[hf]``), imported when data is opened.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dctnet.data.usable import data_kind

__all__ = ["STREAM_SHARDS", "VAL_SPLITS", "dataset_dict_splits", "hf_columns", "hf_files", "image_source", "open_hf",
           "read_error", "require_datasets", "split_path"]

#: sources a saved dataset is cut into when it is streamed (``to_iterable_dataset(num_shards=)``),
#: at least: contiguous row ranges, so that readers split it by source and interleave several
STREAM_SHARDS = 256


def require_datasets() -> Any:
    """The ``datasets`` module, or an ``ImportError`` saying how to install it."""
    try:
        import datasets  # optional dependency (datasets): only HF sources need it
    except ImportError as exc:
        raise ImportError("Hugging Face datasets as a data source need the `datasets` package: "
                          "pip install dctnet[hf]  (or pip install datasets)") from exc
    return datasets


#: the split a saved ``DatasetDict`` validates on when a recipe names none: the first of these it
#: holds (the Hub's datasets call it ``validation``, some ``valid`` or ``val``; many have only ``test``)
VAL_SPLITS = ("validation", "valid", "val", "test")

#: what a recipe's ``data.train`` / ``data.val`` say when they are left out (``DataConfig``'s defaults)
_UNNAMED = {"train": "train", "val": "val"}


def dataset_dict_splits(path: str | os.PathLike) -> list[str] | None:
    """The splits of a ``save_to_disk`` ``DatasetDict`` at ``path``, as its ``dataset_dict.json``
    lists them; ``None`` when ``path`` is not one."""
    f = Path(path) / "dataset_dict.json"
    if not f.is_file():
        return None
    try:
        splits = json.loads(f.read_text())["splits"]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{f}: not a DatasetDict's dataset_dict.json (no 'splits' list)") from None
    return [str(name) for name in splits]


def _dict_split(path: Path, splits: list[str], role: str) -> Path:
    """The split of the DatasetDict at ``path`` a recipe's ``role`` reads: ``train`` for training,
    the first of :data:`VAL_SPLITS` for validation; ``FileNotFoundError`` naming the splits there are."""
    wanted = ("train",) if role == "train" else VAL_SPLITS
    found = next((name for name in wanted if name in splits), None)
    if found is None:
        raise FileNotFoundError(f"{path} is a saved DatasetDict with splits {', '.join(splits) or 'none'}: none is "
                                f"{' / '.join(wanted)}; name the {role} split (a recipe's data.{role}: one of "
                                f"{', '.join(splits) or 'none'})")
    return path / found


def split_path(root: str | os.PathLike, name: str, role: str) -> Path:
    """The Hugging Face data a recipe's ``data.train`` / ``data.val`` (``name`` under ``root``) reads
    as ``role`` (``"train"`` or ``"val"``), resolving a saved ``DatasetDict``'s split names from its
    ``dataset_dict.json``:

    - ``root/name`` a ``DatasetDict``: its split for ``role`` — ``train``; for ``val`` the first of
      :data:`VAL_SPLITS` (``validation``, ``valid``, ``val``, ``test``) it holds;
    - ``root/name`` missing, ``name`` left at the recipe's default (``train`` / ``val``) and ``root`` a
      ``DatasetDict``: ``root``'s split for ``role`` (a dict saved with ``train``/``test`` validates
      on ``test`` without ``data.val: test`` spelled out);
    - ``root/name`` missing under a ``DatasetDict`` otherwise: ``FileNotFoundError`` naming its splits;
    - else ``root/name`` as it is (a split, parquet files, a glob: :func:`hf_files` reads it)."""
    if role not in _UNNAMED:
        raise ValueError(f"role must be 'train' or 'val', not {role!r}")
    root = Path(root)
    path = root / name
    splits = dataset_dict_splits(path) if path.is_dir() else None
    if splits is not None:
        return _dict_split(path, splits, role)
    if path.exists() or any(ch in str(name) for ch in "*?["):
        return path
    splits = dataset_dict_splits(root) if root.is_dir() else None
    if splits is None:
        return path
    if name == _UNNAMED[role]:  # the recipe names no split: the dict's own names decide
        return _dict_split(root, splits, role)
    raise FileNotFoundError(f"{root} is a saved DatasetDict with splits {', '.join(splits) or 'none'}: no split "
                            f"{name!r} (a recipe's data.{role}: one of {', '.join(splits) or 'none'})")


def hf_files(path: str | os.PathLike | Sequence[str]) -> tuple[str, list[str]]:
    """What ``path`` names: ``("saved", [arrow files])`` for a ``save_to_disk`` directory, or
    ``("parquet", [files])`` for a parquet file, a glob of them, a folder holding them (sorted) or
    a list of parquet files. ``FileNotFoundError`` otherwise."""
    if isinstance(path, (list, tuple)):
        if not path or not all(str(f).endswith(".parquet") and os.path.isfile(f) for f in path):
            raise FileNotFoundError(f"not a list of existing .parquet files: {list(path)[:3]}")
        return "parquet", [str(f) for f in path]
    text = str(path)
    p = Path(text)
    if p.is_dir() and (p / "dataset_dict.json").is_file():
        splits = dataset_dict_splits(p) or []
        raise FileNotFoundError(f"{p} is a saved DatasetDict: name one of its splits, e.g. {p / (splits or ['train'])[0]}"
                                f" (splits: {', '.join(splits) or 'none found'})")
    if p.is_dir() and (p / "state.json").is_file():
        return "saved", sorted(str(f) for f in p.glob("*.arrow"))
    if p.is_dir():
        files = sorted(str(f) for f in p.rglob("*.parquet"))
    elif any(ch in text for ch in "*?["):
        files = sorted(f for f in glob.glob(text, recursive=True) if f.endswith(".parquet"))
    else:
        files = [text] if p.is_file() and text.endswith(".parquet") else []
    if not files:
        raise FileNotFoundError(f"no Hugging Face dataset at {text}: expected a save_to_disk directory (with state.json), "
                                "a .parquet file, a glob of them or a folder holding them")
    return "parquet", files


def open_hf(path: str | os.PathLike | Sequence[str], *, streaming: bool = False) -> tuple[Any, list[int] | None]:
    """``(dataset, rows per source)`` of a local Hugging Face dataset (:func:`hf_files`).

    ``streaming=False``: a ``datasets.Dataset`` (``load_from_disk``; parquet files through
    ``load_dataset("parquet")``, which converts them into ``datasets``' cache once), sizes
    ``None``. ``streaming=True``: an ``IterableDataset`` whose sources are the parquet files (rows
    per file from their footers), or a saved dataset's rows cut into ``STREAM_SHARDS`` contiguous
    ranges (at least one per arrow file), with the rows of each source: :class:`HFStreamDataset`'s
    length needs them."""
    ds_mod = require_datasets()
    kind, files = hf_files(path)
    if kind == "saved":
        ds = ds_mod.load_from_disk(str(path))
        if not streaming:
            return ds, None
        n = min(len(ds), max(STREAM_SHARDS, len(files))) or 1
        # to_iterable_dataset cuts rows [0, len) into n contiguous ranges as np.array_split does
        sizes = [len(part) for part in np.array_split(np.arange(len(ds)), n)]
        return ds.to_iterable_dataset(num_shards=n), sizes
    if not streaming:
        return ds_mod.load_dataset("parquet", data_files=files, split="train"), None
    import pyarrow.parquet as pq  # pyarrow: a dependency of datasets, needed only here (row counts)

    sizes = [pq.ParquetFile(f).metadata.num_rows for f in files]
    return ds_mod.load_dataset("parquet", data_files=files, split="train", streaming=True), sizes


def hf_columns(ds: Any, image_column: str, label_column: str | None) -> tuple[Any, list[str]]:
    """``ds`` with only the image and label columns, the image as stored bytes; its class names
    (``ClassLabel`` names, else ``"0" .. "max"`` for integer labels, ``[]`` without labels)."""
    ds_mod = require_datasets()
    features = ds.features
    if features is None:  # a stream whose schema is not known until read
        raise ValueError("the dataset's features are unknown: load it with its features (e.g. load_dataset(..., "
                         "features=...)) so that the image column can be read as bytes")
    missing = [c for c in (image_column, label_column) if c is not None and c not in features]
    if missing:
        raise ValueError(f"no column {missing[0]!r} in the dataset (columns: {', '.join(features)}); set the "
                         "image/label column names (data.image_column / data.label_column in recipes)")
    image = features[image_column]
    if not isinstance(image, ds_mod.Image) and not (isinstance(image, ds_mod.Value) and image.dtype in ("binary",
                                                                                                     "large_binary")):
        raise ValueError(f"column {image_column!r} is {image}, not an Image (or binary) column")
    keep = [image_column] + ([label_column] if label_column is not None else [])
    ds = ds.select_columns(keep)
    if isinstance(image, ds_mod.Image):
        # the stored bytes, not a PIL image: dctnet's reader takes the JPEG as it is
        ds = ds.cast_column(image_column, ds_mod.Image(decode=False))
    classes: list[str] = []
    if label_column is not None:
        label = features[label_column]
        if isinstance(label, ds_mod.ClassLabel):
            classes = list(label.names)
        elif not (isinstance(label, ds_mod.Value) and "int" in label.dtype):
            raise ValueError(f"label column {label_column!r} is {label}: integer labels or a ClassLabel needed")
    return ds, classes


def image_source(value: Any) -> tuple[Any, str | None]:
    """An image cell → ``(bytes or a path to read, the stored file name)``."""
    if isinstance(value, dict):
        data, path = value.get("bytes"), value.get("path")
        return (data if data is not None else path), path
    return value, None


def read_error(data: Any, exc: BaseException) -> str:
    """The reader's reason, saying what the bytes are when they are not a JPEG at all."""
    head = None
    if isinstance(data, (bytes, bytearray, memoryview)):
        head = bytes(data[:16])
    elif isinstance(data, str):  # an image stored as a path
        try:
            with open(data, "rb") as f:
                head = f.read(16)
        except OSError:
            pass
    if head is not None:
        kind = data_kind(head)
        if kind == "empty":
            return "empty image bytes"
        if kind is not None:
            return f"not a JPEG: {kind} data"
    return getattr(exc, "reason", None) or str(exc)
