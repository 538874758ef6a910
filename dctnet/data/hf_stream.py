"""Streamed Hugging Face data as a source of JPEG coefficients: :class:`HFStreamDataset`, the
samples of :class:`dctnet.data.TarShardDataset` from a ``datasets.IterableDataset`` (the image
column read as its stored bytes, bad rows under ``on_error``, as :class:`dctnet.data.HFDataset`).

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
"""

from __future__ import annotations

import copy
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from dctnet.codec import DEFAULT_MAX_PIXELS, JpegError, read_coefficients, warn_mode
from dctnet.data.crop import FullImage
from dctnet.data.dataset import sample_from_coefficients
from dctnet.data.hf_open import hf_columns, image_source, open_hf, read_error, require_datasets
from dctnet.data.sample import CoefficientSample
from dctnet.data.streams import DEFAULT_INTERLEAVE, ReaderSplit, reader_stream
from dctnet.distributed import placement

__all__ = ["HFStreamDataset"]

#: rows read from a source at a time (one arrow batch)
_READ_BATCH = 64


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
        self.data, self.classes = hf_columns(data, image_column, label_column)
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

    def single_reader(self, seed: int) -> HFStreamDataset:
        """The same stream and columns read whole by one rank with ``seed`` (the training
        pipeline's statistics pass: the same stream on every rank)."""
        out = copy.copy(self)
        out.seed, out.rank, out.world_size = seed, 0, 1
        return out

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
        data, path = image_source(row[self.image_column])
        name = f"{self.name}[source {shard}, row {r}]" + (f" ({path})" if path else "")
        label = int(row[self.label_column]) if self.label_column is not None else -1
        try:
            if data is None:
                raise JpegError("no image bytes", name)
            try:
                coeffs = read_coefficients(data, max_pixels=self.max_pixels, warnings=self.warnings, name=name)
            except (JpegError, OSError) as exc:
                raise JpegError(read_error(data, exc), name) from None
        except JpegError as exc:
            if self.on_error == "raise":
                raise
            return index, name, exc.reason
        return sample_from_coefficients(coeffs, self.crop, label, index, seed=self.seed, epoch=epoch, exif=self.exif)
