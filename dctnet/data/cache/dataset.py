"""A cache opened against its sources (:func:`open_cache`: sizes, times or hashes, the build's
parameters) and served as a dataset (:class:`CacheDataset`); what a sample was built from
(:func:`source_bytes`); the ``cache`` data source (:mod:`dctnet.data.sources`)."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dctnet.batch import JpegBatch, PackedJpegBatch, SparseJpegBatch
from dctnet.codec import JpegError
from dctnet.data.collate import collate
from dctnet.data.dataset import CropDataset, ImageFolderDataset, sample_from_coefficients
from dctnet.data.hf import HFDataset, require_datasets
from dctnet.data.sample import CoefficientSample
from dctnet.data.sources import DataSource, SourceContext, register_source
from dctnet.data.cache.format import CacheError, file_hash, load_meta, read_member
from dctnet.data.cache.read import Cache

__all__ = ["CacheDataset", "open_cache", "source_bytes"]


def source_bytes(meta: dict[str, Any], root: str | os.PathLike, i: int) -> bytes | str:
    """What sample ``i`` was built from: a file path, a tar member's bytes, or a Hugging Face
    dataset row's stored bytes (or path)."""
    s = meta["sources"][i]
    if meta.get("hf"):
        return _hf_rows(meta["hf"], str(root)).image_source(int(s["row"]))[0] or b""
    if "offset" in s:
        return read_member(os.path.join(root, s["shard"]), s["offset"], s["size"])
    return os.path.join(root, s["path"])


_HF_OPEN: dict[tuple, HFDataset] = {}


def _hf_rows(hf: Any, root: str) -> HFDataset:
    """The Hugging Face dataset a cache was built from (``meta["hf"]``), opened once per process;
    ``source_bytes`` then takes rows by their number (no check has left any out)."""
    files = hf.get("files") if isinstance(hf, dict) else None
    if not (isinstance(files, list) and files and all(isinstance(f, str) and not os.path.isabs(f)
                                                      and ".." not in Path(f).parts for f in files)
            and hf.get("kind") in ("saved", "parquet", "arrow") and isinstance(hf.get("image_column"), str)):
        raise CacheError("meta.json: 'hf' must list the dataset's files relative to the root")  # never a path elsewhere
    key = (root, hf["kind"], tuple(files), hf["image_column"])
    if key not in _HF_OPEN:
        if hf["kind"] == "saved":
            data: Any = root
        elif hf["kind"] == "parquet":
            data = [os.path.join(root, f) for f in files]
        else:  # the arrow files of a Dataset that was in memory
            ds_mod = require_datasets()
            data = ds_mod.concatenate_datasets([ds_mod.Dataset.from_file(os.path.join(root, f)) for f in files])
        _HF_OPEN[key] = HFDataset(data, image_column=hf["image_column"], label_column=None)
    return _HF_OPEN[key]


def open_cache(path: str | os.PathLike, *, source: str | os.PathLike | None = None, verify: str = "stat",
               format: str | None = None, checksums: bool = True) -> Cache:
    """Open and validate a cache.

    Args:
        path: the cache directory.
        source: the image folder it must match (default: the one recorded at build time — an
            absolute path; a relative one, written by hand, is taken relative to the cache
            directory, and in a version-1 cache relative to the working directory, as it was built).
        verify: ``"stat"`` (sizes and mtimes), ``"hash"`` (also content hashes) or ``"none"``.
        format: require this format.
        checksums: check the index's checksum now and each record's on every read (a mismatch
            raises :class:`CacheRecordError`); ``False`` skips both and opens version-1 caches,
            which have none.

    Raises:
        CacheError: incomplete build, changed/missing/new sources or other parameters, a corrupt
            index — the message says which (first few paths and counts)."""
    path = Path(path)
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        hint = " (an unfinished build: rerun it with resume=True / --resume)" if path.name.endswith(".partial") or \
            path.with_name(path.name + ".partial").exists() else ""
        raise CacheError(f"{path} is not a finished dctnet cache: no meta.json{hint}")
    meta = load_meta(path, checksums)
    if format is not None and meta["format"] != format:
        raise CacheError(f"{path}: built as {meta['format']!r}, {format!r} requested")
    root = Path(source) if source is not None else Path(meta["root"])
    if source is None and not root.is_absolute() and meta["format_version"] > 1:
        root = path / root
    if verify != "none":
        changed, missing = [], []
        files = meta.get("shards") or meta["sources"]  # tar-shard caches check the shard files
        for s in files:
            p = root / s["path"]
            try:
                st = p.stat()
            except FileNotFoundError:
                missing.append(s["path"])
                continue
            if st.st_size != s["size"] or st.st_mtime_ns != s["mtime_ns"]:
                if verify == "hash" and s["hash"] and st.st_size == s["size"] and file_hash(str(p)) == s["hash"]:
                    continue  # touched but identical
                what = f"size {s['size']} -> {st.st_size}" if st.st_size != s["size"] else "modified time"
                changed.append(f"{s['path']} ({what})")
            elif verify == "hash" and s["hash"] and file_hash(str(p)) != s["hash"]:
                changed.append(f"{s['path']} (content)")
        known = {s["path"] for s in files}
        if not root.is_dir():
            current: set[str] = set()
        elif meta.get("shards"):
            # the shards the cache was built from: its glob (train-*.tar leaves val-*.tar out), a
            # folder's *.tar (caches built before the pattern was recorded), or only those listed
            pattern = meta["shard_pattern"] if "shard_pattern" in meta else "*.tar"
            current = {os.path.relpath(p, root) for p in glob.glob(str(root / pattern))} if pattern else set()
        else:
            current = {os.path.relpath(p, root) for p, _ in ImageFolderDataset(root).samples}
        added = sorted(current - known)
        if changed or missing or added:
            parts = []
            for label, items in (("changed", changed), ("missing", missing), ("new", added)):
                if items:
                    parts.append(f"{len(items)} {label} (e.g. {', '.join(items[:3])})")
            hint = "" if verify == "hash" or not any(c.endswith("(modified time)") for c in changed) else \
                " (a file whose only change is its modified time is accepted when its content hash is unchanged:" \
                " `data.verify: hash` in a recipe, open_cache(..., verify='hash') / CacheDataset(..., verify='hash')" \
                " in Python, or `dctnet cache verify`)"
            raise CacheError(f"{path} is stale against {root}: " + "; ".join(parts) + ". Rebuild it" + hint + ".")
    return Cache(path, meta, checksums=checksums, root=root)


class CacheDataset(CropDataset):
    """A cache as a dataset for the pipeline's loaders: same samples, crops and randomness as
    :class:`ImageFolderDataset` over the source folder (``(seed, epoch, index)`` draws).

    Indexing takes ``index`` or ``(epoch, index)``; bad samples follow ``on_error``.
    ``device_expand=True`` (for training on a GPU): batches leave the host packed or compressed and
    are padded / expanded on the device (see :meth:`load_collated`); the host then moves about
    half the bytes (dense) or only the compressed records (sparse).

    ``checksums`` (default on): every record read is checked against its checksum; a corrupt
    record is a bad sample under ``on_error`` (:class:`CacheRecordError` names it)."""

    cheap_batches = True  # a batch is one C gather (~1 ms): loaders keep one ahead per thread

    def __init__(self, path: str | os.PathLike, *, crop: Callable | None = None, seed: int = 0, on_error: str = "raise",
                 exif: str = "ignore", verify: str = "stat", source: str | os.PathLike | None = None,
                 device_expand: bool = False, checksums: bool = True) -> None:
        super().__init__(crop, seed, on_error, exif)
        self.cache = open_cache(path, source=source, verify=verify, checksums=checksums)
        self.device_expand = bool(device_expand)
        meta = self.cache.meta
        self.classes = meta["classes"]
        self.targets = np.array([s["label"] for s in meta["sources"]], np.int64)

    def __len__(self) -> int:
        return len(self.cache)

    def load(self, index: int, epoch: int) -> CoefficientSample | tuple[int, str, str]:
        try:
            coeffs = self.cache.coefficients(index)
        except JpegError as exc:
            if self.on_error == "raise":
                raise
            return index, str(exc.source), exc.reason
        return sample_from_coefficients(coeffs, self.crop, int(self.targets[index]), index, seed=self.seed, epoch=epoch,
                                        exif=self.exif)

    def load_batch(self, keys: Sequence[tuple[int, int]]) -> list:
        return [self.load(i, e) for e, i in keys]

    def load_collated(self, keys: Sequence[tuple[int, int]], *, grid: tuple[int, int] | None = None,
                      pin_memory: bool = False) -> JpegBatch | PackedJpegBatch | SparseJpegBatch:
        """The collated batch for ``keys`` — the same batch as ``collate(load_batch(keys))`` —
        built by one C call per layout group that copies (dense) or expands (sparse) only each
        sample's windows straight into the batch. With ``device_expand``, the host does less
        and the device finishes (:func:`dctnet.transforms.as_jpeg_batch`, which
        :class:`DevicePrefetcher` and ``crops_to_rgb`` apply): a dense cache delivers its windows
        packed without padding (:class:`PackedJpegBatch`), a sparse cache its compressed records
        (:class:`SparseJpegBatch`). Batches with bad samples or EXIF rotations take the
        per-sample path (a :class:`JpegBatch`)."""
        kw = dict(grid=grid, pin_memory=pin_memory, exif=self.exif)
        if not self.device_expand:
            batch = self.cache.gather(keys, self.crop, self.seed, self.targets, **kw)
        elif self.cache.format == "dense":
            batch = self.cache.gather_packed(keys, self.crop, self.seed, self.targets, **kw)
        else:
            batch = self.cache.gather_compressed(keys, self.crop, self.seed, self.targets, **kw)
        if batch is None:
            return collate(self.load_batch(keys), grid=grid, pin_memory=pin_memory)
        return batch

    def __getitems__(self, keys: Sequence[tuple[int, int] | int]) -> JpegBatch:
        """Batched fetch for ``DataLoader`` (its collate passes a JpegBatch through)."""
        return self.load_collated(self._keys(keys))


def _cache_split(ctx: SourceContext, split: str) -> CacheDataset:
    """``data.source: cache``: the split's cache. On a GPU its batches are padded (dense) or expanded
    (sparse) on the device: the host moves only each window's blocks, or only the compressed records."""
    return CacheDataset(ctx.path(split), crop=ctx.crops.get(split), verify=ctx.data.verify,
                        checksums=ctx.data.cache_checksums, device_expand=ctx.pin, **ctx.policy)


register_source(DataSource("cache", fields=("verify", "cache_checksums"), coefficients=_cache_split,
                           rgb_refusal="holds JPEG coefficients"))
