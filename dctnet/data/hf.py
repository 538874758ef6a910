"""Hugging Face ``datasets`` as a source of JPEG coefficients.

Two datasets, each producing what its counterpart over files produces:

* :class:`HFDataset` — map-style, over a ``datasets.Dataset`` (``load_from_disk``, or
  ``load_dataset("parquet", ...)`` of local files): the samples of :class:`ImageFolderDataset`
  (indexing by ``index`` or ``(epoch, index)``, crops drawn from ``(seed, epoch, index)``, a full
  decode :meth:`HFDataset.check` before training), ``index`` being the row.
* :class:`HFStreamDataset` — iterable, over a streamed ``datasets.IterableDataset``: the samples
  of :class:`dctnet.data.TarShardDataset`, with its split, order and mixing (below).

The image column is read as its stored bytes (``Image(decode=False)``): dctnet's reader takes the
JPEG bytes, Pillow never decodes them. A row whose bytes are missing, not a JPEG, truncated or
otherwise refused by the reader under ``warnings`` is a bad sample under ``on_error`` (a
:class:`dctnet.JpegError` naming the row, or skipped and reported in the batch's ``skipped``), as
everywhere in :mod:`dctnet.data`. ``ClassLabel`` names become :attr:`classes`.

**Streaming: split, order and mixing.** An ``IterableDataset`` is a list of ``num_shards``
sources (parquet files, or the row ranges of ``to_iterable_dataset(num_shards=)``), each read
front to back; ``ds.shard(num_shards, i)`` is source ``i`` alone. :class:`HFStreamDataset`
treats them exactly as :class:`TarShardDataset` treats tar files: per epoch a seeded permutation
of the sources; reader ``me`` of ``total`` (``rank × DataLoader worker``, or ``rank × thread``
under :class:`dctnet.data.ThreadLoader`) takes one contiguous run of its rows, the sources laid
end to end (``shard_sizes`` known, as for local data: every row exactly once per epoch over all
readers, readers' counts within one of each other; a run may begin or end inside a source) — or,
without the sizes, every ``total``-th source (fewer sources than readers: every reader streams all
of them and keeps every ``total``-th sample); each reader keeps ``interleave`` of its sources
open and draws every next sample from one of them at random (Hub datasets such as
ImageNet-1k are written in class order: one source at a time would fill a batch with a class or
two), then passes them through a shuffle buffer. A sample's identity — its crop draw and its name
in error messages — is ``(source, row within the source)``, so it does not depend on the number of
readers. ``datasets``' own ``shuffle``/``split_dataset_by_node`` are not used: they would split
and mix differently from the shard readers, and not per ``(seed, epoch)``.

``datasets`` is an optional dependency (``pip install dctnet[hf]``), imported when one of these
is built.
"""

from __future__ import annotations

import glob
import json
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dctnet.codec import DEFAULT_MAX_PIXELS, JpegError, read_coefficients, read_coefficients_batch, warn_mode
from dctnet.data.crop import FullImage
from dctnet.data.dataset import CropDataset, sample_from_coefficients, samples_from_coefficients
from dctnet.data.sample import CoefficientSample
from dctnet.data.streams import DEFAULT_INTERLEAVE, ReaderSplit, reader_stream
from dctnet.data.usable import data_kind
from dctnet.distributed import placement

__all__ = ["HFDataset", "HFStreamDataset", "VAL_SPLITS", "dataset_dict_splits", "hf_files", "open_hf", "require_datasets",
           "split_path"]

#: rows read from a source at a time (one arrow batch)
_READ_BATCH = 64

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


def _columns(ds: Any, image_column: str, label_column: str | None) -> tuple[Any, list[str]]:
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


def _image_source(value: Any) -> tuple[Any, str | None]:
    """An image cell → ``(bytes or a path to read, the stored file name)``."""
    if isinstance(value, dict):
        data, path = value.get("bytes"), value.get("path")
        return (data if data is not None else path), path
    return value, None


def _read_error(data: Any, exc: BaseException) -> str:
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


class HFDataset(CropDataset):
    """A ``datasets.Dataset`` with an image column of JPEG bytes → cropped coefficient samples,
    as :class:`ImageFolderDataset` gives them (same sample type, crop policy, randomness and
    bad-sample rule; ``index`` is the row).

    Args:
        data: a ``datasets.Dataset``, or a path :func:`open_hf` opens (a ``save_to_disk``
            directory, a parquet file, glob or folder).
        image_column: the image column (``Image`` feature, or raw ``binary``): read as its stored
            bytes, never decoded by Pillow. An image stored as a path (no bytes) is read from it.
        label_column: integer labels or a ``ClassLabel`` (its names are :attr:`classes`); ``None``:
            unlabelled (label −1).
        crop, seed, on_error, exif, max_pixels, warnings: as :class:`ImageFolderDataset`.

    ``targets`` is an int64 array ``(len,)``; :meth:`check` decodes every row in full once and
    leaves out (``on_error="skip"``) or reports (``"raise"``) the rows the reader refuses.
    """

    def __init__(self, data: Any, *, image_column: str = "image", label_column: str | None = "label",
                 crop: Callable | None = None, seed: int = 0, on_error: str = "raise", exif: str = "ignore",
                 max_pixels: int | None = DEFAULT_MAX_PIXELS, warnings: str = "raise") -> None:
        super().__init__(crop, seed, on_error, exif, warnings)
        #: how messages name the dataset (its path, or the Dataset's repr)
        self.name = str(data) if isinstance(data, (str, os.PathLike)) else type(data).__name__
        if isinstance(data, (str, os.PathLike, list, tuple)):
            self.name = self.name if isinstance(data, (str, os.PathLike)) else os.path.dirname(str(data[0])) or "."
            data, _ = open_hf(data)
        ds_mod = require_datasets()
        if isinstance(data, ds_mod.DatasetDict):
            raise ValueError(f"a DatasetDict ({', '.join(data)}): pass one split, e.g. ds['train']")
        if isinstance(data, ds_mod.IterableDataset):
            raise TypeError("a streamed IterableDataset has no random access: use HFStreamDataset")
        self.data, self.classes = _columns(data, image_column, label_column)
        self.image_column, self.label_column = image_column, label_column
        self.max_pixels = max_pixels
        n = len(self.data)
        if not n:
            raise ValueError(f"{self.name}: the dataset has no rows")
        #: the dataset rows this dataset serves, in index order (:meth:`check` may leave some out)
        self.rows = np.arange(n, dtype=np.int64)
        if label_column is None:
            labels = np.full(n, -1, np.int64)
        else:
            labels = np.asarray(self.data.select_columns([label_column]).with_format("numpy")[label_column], np.int64)
        self._labels = labels
        if label_column is not None and not self.classes:
            self.classes = [str(c) for c in range(int(labels.max()) + 1 if len(labels) and labels.max() >= 0 else 0)]
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        #: rows that read with libjpeg warnings that lost nothing, once :meth:`check` ran (name → warnings)
        self.warned: dict[str, tuple[str, ...]] = {}

    @property
    def targets(self) -> np.ndarray:
        """int64 ``(len,)``: each sample's label (−1: unlabelled)."""
        return self._labels[self.rows]

    def __len__(self) -> int:
        return len(self.rows)

    def sample_name(self, index: int) -> str:
        """How messages name sample ``index``: the dataset, the row, and the stored file name."""
        row = int(self.rows[index])
        _, path = _image_source(self.data[row][self.image_column])
        return f"{self.name}[{row}]" + (f" ({path})" if path else "")

    def image_source(self, index: int) -> tuple[bytes | str | None, str]:
        """Sample ``index``'s stored image — its bytes, or the path it was stored as (``None``:
        neither) — and its name (:meth:`sample_name`); for readers of their own (cache builds)."""
        return self._sources([index])[0]

    def _sources(self, indices: Sequence[int]) -> list[tuple[Any, str]]:
        """``(bytes or path, name)`` of samples ``indices``, fetched in one take from the table."""
        rows = [int(self.rows[i]) for i in indices]
        cells = self.data[rows][self.image_column]
        out = []
        for row, cell in zip(rows, cells):
            data, path = _image_source(cell)
            out.append((data, f"{self.name}[{row}]" + (f" ({path})" if path else "")))
        return out

    def _read_all(self, sources: list[tuple[Any, str]], threads: int | None = 1) -> list[Any]:
        """Each source read (or its exception, a :class:`JpegError` naming the row)."""
        srcs = [b"" if data is None else data for data, _ in sources]
        results = read_coefficients_batch(srcs, threads=threads, max_pixels=self.max_pixels, warnings=self.warnings,
                                          errors="return")
        return [JpegError("no image bytes" if data is None else _read_error(data, res), name)
                if isinstance(res, BaseException) else res for (data, name), res in zip(sources, results)]

    def load(self, index: int, epoch: int) -> CoefficientSample | tuple[int, str, str]:
        """Read and crop one sample; a bad row under ``"skip"``: ``(index, name, reason)``."""
        return self.load_batch([(epoch, index)])[0]

    def load_batch(self, keys: Sequence[tuple[int, int]]) -> list[CoefficientSample | tuple[int, str, str]]:
        """:meth:`load` for ``(epoch, index)`` keys: one table take, the bytes read in one
        GIL-free pass on the calling thread, the crops drawn for the batch at once."""
        sources = self._sources([i for _, i in keys])
        results = self._read_all(sources)
        out: list[Any] = [None] * len(keys)
        good = []
        for k, ((_, index), res) in enumerate(zip(keys, results)):
            if isinstance(res, JpegError):
                if self.on_error == "raise":
                    raise res
                out[k] = (index, res.source, res.reason)
            else:
                good.append(k)
        made = samples_from_coefficients([results[k] for k in good], self.crop,
                                         [int(self._labels[self.rows[keys[k][1]]]) for k in good],
                                         [keys[k][1] for k in good], seed=self.seed,
                                         epochs=[keys[k][0] for k in good], exif=self.exif)
        for k, sample in zip(good, made):
            out[k] = sample
        return out

    def check(self, *, threads: int | None = None, chunk: int = 256) -> list[tuple[str, str]]:
        """Decode every row in full once, as :meth:`ImageFolderDataset.check` decodes every
        file: ``(name, reason)`` of the rows the reader refuses under this dataset's
        ``warnings``; under ``on_error="raise"`` the first raises :class:`dctnet.JpegError`
        naming it (and counting the others), under ``"skip"`` they leave :attr:`rows` (indices
        renumbered). Rows read with harmless warnings are kept in :attr:`warned`."""
        bad: list[tuple[str, str]] = []
        keep = np.ones(len(self.rows), bool)
        for start in range(0, len(self.rows), chunk):
            idx = list(range(start, min(start + chunk, len(self.rows))))
            sources = self._sources(idx)
            # read_coefficients reads a whole image (no crop window): every row's data is decoded
            for i, (_, name), res in zip(idx, sources, self._read_all(sources, threads)):
                if isinstance(res, JpegError):
                    bad.append((name, res.reason))
                    keep[i] = False
                elif res.warnings:
                    self.warned[name] = res.warnings
        if bad and self.on_error == "raise":
            more = f" — and {len(bad) - 1} more unusable rows" if len(bad) > 1 else ""
            raise JpegError(f"{bad[0][1]}{more} (on_error='skip' leaves them out)", bad[0][0])
        self.rows = self.rows[keep]
        return bad


# ---------------------------------------------------------------------- streaming
class HFStreamDataset(ReaderSplit, torch.utils.data.IterableDataset):
    """Stream cropped coefficient samples from a ``datasets.IterableDataset``, split, ordered and
    mixed as :class:`dctnet.data.TarShardDataset` does its shards (module docstring).

    Args:
        data: a ``datasets.IterableDataset`` (its ``num_shards`` sources are the unit of the split
            and of the interleave: ``ds.reshard()`` first gives more of them, one per parquet row
            group), or a path :func:`open_hf` opens streamed.
        image_column, label_column: as :class:`HFDataset`.
        crop: box policy; the crop of a sample is drawn from ``(seed, epoch, crc32("source:row"))``.
        seed, shuffle, buffer, interleave, rank, world_size: as :class:`TarShardDataset`.
        shard_sizes: rows of each source, in source order (``len`` needs them; :func:`open_hf`
            gives them for local data). Without them, ``len`` is the split's ``num_examples``
            from the dataset's info, on one rank only.
        on_error, exif, max_pixels, warnings: as :class:`HFDataset`.

    Yields :class:`CoefficientSample` (``index`` = that crc32), or under ``on_error="skip"``
    ``(index, name, reason)`` for a bad row, which :func:`dctnet.data.collate` records.
    """

    def __init__(self, data: Any, *, image_column: str = "image", label_column: str | None = "label",
                 crop: Callable | None = None, seed: int = 0, shuffle: bool = True, buffer: int = 1000,
                 interleave: int = DEFAULT_INTERLEAVE, rank: int | None = None, world_size: int | None = None,
                 shard_sizes: Sequence[int] | None = None, on_error: str = "raise", exif: str = "ignore",
                 max_pixels: int | None = DEFAULT_MAX_PIXELS, warnings: str = "raise") -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        if exif not in ("ignore", "apply"):
            raise ValueError(f"exif must be 'ignore' or 'apply', not {exif!r}")
        if int(interleave) < 1:
            raise ValueError(f"interleave must be at least 1, got {interleave!r}")
        warn_mode(warnings)  # validated here, not at the first read
        self.name = str(data) if isinstance(data, (str, os.PathLike)) else "stream"
        if isinstance(data, (str, os.PathLike)):
            data, found = open_hf(data, streaming=True)
            shard_sizes = shard_sizes if shard_sizes is not None else found
        ds_mod = require_datasets()
        if not isinstance(data, ds_mod.IterableDataset):
            raise TypeError(f"HFStreamDataset streams a datasets.IterableDataset, not {type(data).__name__} (a map-style "
                            "Dataset: HFDataset, or ds.to_iterable_dataset(num_shards=...))")
        self.data, self.classes = _columns(data, image_column, label_column)
        self.image_column, self.label_column = image_column, label_column
        #: the sources: ``data.shard(num_shards, i)`` reads source ``i`` alone
        self.num_shards = int(getattr(self.data, "num_shards", None) or self.data.n_shards)  # n_shards: datasets < 3
        if shard_sizes is not None and len(shard_sizes) != self.num_shards:
            raise ValueError(f"shard_sizes has {len(shard_sizes)} entries for {self.num_shards} sources")
        self.shard_sizes = None if shard_sizes is None else [int(s) for s in shard_sizes]
        self.rank, self.world_size, _ = placement(rank, world_size)
        self.crop, self.seed, self.shuffle, self.buffer = crop or FullImage(), seed, shuffle, max(1, buffer)
        self.interleave, self.on_error, self.exif, self.max_pixels = int(interleave), on_error, exif, max_pixels
        self.warnings = warnings
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Order, mix and crop this epoch's samples from now on (call before iterating)."""
        self.epoch = epoch

    def __len__(self) -> int:
        """Samples this rank reads per epoch: with ``shard_sizes``, its exact share of the ``N``
        rows, ``N·(rank + 1) // world_size − N·rank // world_size`` (the tar shards' split by
        samples); without them, on one rank, the split's ``num_examples``."""
        if self.shard_sizes is None:
            splits = getattr(self.data.info, "splits", None) or {}
            split = splits.get(str(self.data.split)) if self.data.split is not None else None
            total = getattr(split, "num_examples", None)
            if total is None or self.world_size > 1:
                raise TypeError("the length of a stream needs its rows per source: pass shard_sizes= (open_hf gives "
                                "them for local data)")
            return int(total)
        total = sum(self.shard_sizes)
        return total * (self.rank + 1) // self.world_size - total * self.rank // self.world_size

    def _open(self, shard: int, start: int = 0,
              stop: int | None = None) -> Callable[[], Iterator[tuple[int, int, dict[str, Any]]]]:
        """Rows ``start`` to ``stop`` of source ``shard`` (default: all); the rows before ``start``
        are skipped a read batch at a time (a streamed source has no index to seek by)."""
        def rows() -> Iterator[tuple[int, int, dict[str, Any]]]:
            # .iter(), not iter(): inside a DataLoader worker iter() would split the source again
            # among the workers (datasets' own worker split); the split here is already ours
            r = 0
            for batch in self.data.shard(self.num_shards, shard, contiguous=True).iter(batch_size=_READ_BATCH):
                n = len(batch[self.image_column])
                if r + n <= start:
                    r += n
                    continue
                for k in range(n):
                    if stop is not None and r >= stop:
                        return
                    if r >= start:
                        yield shard, r, {c: batch[c][k] for c in batch}
                    r += 1
        return rows

    def raw_split(self, me: int, total: int) -> Iterator[tuple[int, int, dict[str, Any]]]:
        """The undecoded rows of reader ``me`` of ``total`` as ``(source, row in source, row)``,
        in the order :meth:`iter_split` yields them — the tar shards' rule
        (:func:`dctnet.data.streams.reader_stream`): one seed means one order rule. With
        ``shard_sizes`` the split is by rows (every row once, readers' counts within one of each
        other); without them, by source."""
        if self.shard_sizes is None:
            return reader_stream(range(self.num_shards), lambda s: self._open(s)(), me, total, seed=self.seed,
                                 epoch=self.epoch, shuffle=self.shuffle, interleave=self.interleave, buffer=self.buffer)
        return reader_stream(range(self.num_shards), lambda s, a, b: self._open(s, a, b)(), me, total, seed=self.seed,
                             epoch=self.epoch, shuffle=self.shuffle, interleave=self.interleave, buffer=self.buffer,
                             sizes=self.shard_sizes)

    def iter_split(self, me: int, total: int) -> Iterator[CoefficientSample | tuple[int, str, str]]:
        """The samples of reader ``me`` of ``total`` readers over all ranks (``__iter__`` uses
        ``rank × DataLoader worker``; :class:`dctnet.data.ThreadLoader` uses ``rank × thread``)."""
        epoch = self.epoch
        for shard, r, row in self.raw_split(me, total):
            yield self.decode(shard, r, row, epoch)

    def sample_key(self, shard: int, row: int) -> str:
        """A sample's identity, ``"source:row"`` (its crop draw is crc32 of it)."""
        return f"{shard}:{row}"

    def decode(self, shard: int, r: int, row: dict[str, Any], epoch: int) -> CoefficientSample | tuple[int, str, str]:
        """One streamed row → its cropped sample, or under ``"skip"`` ``(index, name, reason)``."""
        key = self.sample_key(shard, r)
        index = zlib.crc32(key.encode()) & 0x7FFFFFFF
        data, path = _image_source(row[self.image_column])
        name = f"{self.name}[source {shard}, row {r}]" + (f" ({path})" if path else "")
        label = int(row[self.label_column]) if self.label_column is not None else -1
        try:
            if data is None:
                raise JpegError("no image bytes", name)
            try:
                coeffs = read_coefficients(data, max_pixels=self.max_pixels, warnings=self.warnings, name=name)
            except (JpegError, OSError) as exc:
                raise JpegError(_read_error(data, exc), name) from None
        except JpegError as exc:
            if self.on_error == "raise":
                raise
            return index, name, exc.reason
        return sample_from_coefficients(coeffs, self.crop, label, index, seed=self.seed, epoch=epoch, exif=self.exif)
