"""Hugging Face ``datasets`` as a source of JPEG coefficients.

Two datasets, each producing what its counterpart over files produces:

* :class:`HFDataset` — map-style, over a ``datasets.Dataset`` (``load_from_disk``, or
  ``load_dataset("parquet", ...)`` of local files): the samples of :class:`ImageFolderDataset`
  (indexing by ``index`` or ``(epoch, index)``, crops drawn from ``(seed, epoch, index)``, a full
  decode :meth:`HFDataset.check` before training), ``index`` being the row.
* :class:`HFStreamDataset` — iterable, over a streamed ``datasets.IterableDataset``: the samples
  of :class:`dctnet.data.TarShardDataset`, with its split, order and mixing
  (:mod:`dctnet.data.hf_stream`).

Where local data is and how it opens (saved datasets, parquet files, a ``DatasetDict``'s splits):
:mod:`dctnet.data.hf_open`.

The image column is read as its stored bytes (``Image(decode=False)``): dctnet's reader takes the
JPEG bytes, Pillow never decodes them. A row whose bytes are missing, not a JPEG, truncated or
otherwise refused by the reader under ``warnings`` is a bad sample under ``on_error`` (a
:class:`dctnet.JpegError` naming the row, or skipped and reported in the batch's ``skipped``), as
everywhere in :mod:`dctnet.data`. ``ClassLabel`` names become :attr:`classes`.

``datasets`` is an optional dependency (``pip install dctnet[hf]``), imported when one of these
is built. The ``hf`` data source (:mod:`dctnet.data.sources`) is registered here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dctnet.codec import DEFAULT_MAX_PIXELS, JpegError, read_coefficients_batch
from dctnet.data.dataset import CropDataset, samples_from_coefficients
from dctnet.data.hf_open import (VAL_SPLITS, dataset_dict_splits, hf_columns, hf_files, image_source,  # noqa: F401
                                 open_hf, read_error, require_datasets, split_path)
from dctnet.data.hf_stream import HFStreamDataset
from dctnet.data.sample import CoefficientSample
from dctnet.data.sources import DataSource, SourceContext, register_source

__all__ = ["HFDataset", "HFStreamDataset", "VAL_SPLITS", "dataset_dict_splits", "hf_files", "open_hf", "require_datasets",
           "split_path"]


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
        self.data, self.classes = hf_columns(data, image_column, label_column)
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
        _, path = image_source(self.data[row][self.image_column])
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
            data, path = image_source(cell)
            out.append((data, f"{self.name}[{row}]" + (f" ({path})" if path else "")))
        return out

    def _read_all(self, sources: list[tuple[Any, str]], threads: int | None = 1) -> list[Any]:
        """Each source read (or its exception, a :class:`JpegError` naming the row)."""
        srcs = [b"" if data is None else data for data, _ in sources]
        results = read_coefficients_batch(srcs, threads=threads, max_pixels=self.max_pixels, warnings=self.warnings,
                                          errors="return")
        return [JpegError("no image bytes" if data is None else read_error(data, res), name)
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


# ---------------------------------------------------------------------- the source
def _hf_split(ctx: SourceContext, split: str) -> HFDataset | HFStreamDataset:
    """``data.source: hf``: the split's Hugging Face data (saved or parquet; a saved DatasetDict's
    split names from its dataset_dict.json where the recipe names none) — read by row, its rows
    checked by a full decode once as a folder's files are, or streamed (``data.streaming``), split
    and mixed as tar shards are."""
    d = ctx.data
    cols = dict(image_column=d.image_column, label_column=d.label_column, warnings=d.warnings)
    path = str(split_path(ctx.root, getattr(d, split), split))
    if not d.streaming:
        return ctx.checked(split, HFDataset(path, crop=ctx.crops.get(split), **cols, **ctx.policy))
    mixing = dict(interleave=d.interleave) if split == "train" else dict(shuffle=False)
    return HFStreamDataset(path, crop=ctx.crops.get(split), rank=ctx.rank, world_size=ctx.world_size, **mixing,
                           **cols, **ctx.policy)


def _find_hf(ctx: SourceContext) -> None:
    for split in ("train", "val"):
        try:
            hf_files(split_path(ctx.root, getattr(ctx.data, split), split))
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"{exc} (data.root / data.{split})") from None


def _check_hf(d, bad) -> None:
    """A recipe's Hugging Face columns and streaming options."""
    for key in ("image_column", "label_column"):
        if not getattr(d, key).strip():
            bad(f"data.{key} must name a column of the dataset (ImageNet-1k on the Hub: image, label)")
    if d.image_column == d.label_column:
        bad(f"data.image_column and data.label_column are both {d.image_column!r}")
    if d.streaming and (d.limit_train or d.limit_val or d.repeated_aug > 1):
        bad("data.limit_train / limit_val / repeated_aug need indexable data; data.streaming: true streams the "
            "dataset (set streaming: false to read it by row)")


register_source(DataSource(
    "hf", fields=("image_column", "label_column", "streaming", "interleave"),
    refused_elsewhere={"streaming": "(a streamed Hugging Face dataset), not {source!r}; tar shards are always streamed"},
    streams=lambda d: d.streaming, coefficients=_hf_split, rgb_refusal="is read as JPEG bytes by dctnet's reader",
    locate=_find_hf, check=_check_hf))
