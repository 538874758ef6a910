"""WebDataset tar shards: our own shard reader, and a decode step for ``webdataset`` pipelines.

Shard format (WebDataset's): a tar whose consecutive members share a key (the member name up to
the first dot of its basename) — here ``KEY.jpg`` (or ``.jpeg``) and ``KEY.cls`` (the label as
decimal text).

:class:`TarShardDataset` is an ``IterableDataset``: per epoch it shuffles the shard order
(seeded), lays the shards end to end in that order and cuts them into one contiguous run of
samples per reader (``rank × DataLoader worker`` or ``rank × ThreadLoader thread``), so that every
sample is read exactly once per epoch across all readers and the readers' counts differ by at most
one, whatever the number and sizes of the shards (a run may begin or end inside a shard: that
reader seeks to its first sample by the shard's header index). Each reader streams its shards,
shuffles samples through a buffer, and decodes each JPEG to a cropped :class:`CoefficientSample`.
Use it with ``DataLoader(batch_size=..., collate_fn=collate)`` or :class:`dctnet.data.ThreadLoader`.

:func:`wds_decode` returns a picklable step for ``webdataset.WebDataset(...).map(step)``.
"""

from __future__ import annotations

import glob
import io
import json
import os
import tarfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dctnet.distributed import placement
from dctnet.codec import DEFAULT_MAX_PIXELS, JpegError, read_coefficients, warn_mode
from dctnet.data.crop import FullImage
from dctnet.data.dataset import ImageFolderDataset, sample_from_coefficients
from dctnet.data.sample import CoefficientSample
from dctnet.data.sources import DataSource, SourceContext, register_source
from dctnet.data.streams import DEFAULT_INTERLEAVE, ReaderSplit, reader_stream
from dctnet.data.tar import IMAGE_EXTS, iter_tar, key_of, shard_index, tar_index

__all__ = ["TarShardDataset", "WdsDecode", "wds_decode"]

class WdsDecode:
    """Sample dict (``jpg``/``jpeg`` bytes + ``cls`` label) → :class:`CoefficientSample`.

    The crop draw is a pure function of ``(seed, epoch, crc32(key))``, so it does not depend on
    the order a shuffled pipeline delivers samples in. Call :meth:`set_epoch` before each epoch
    (as with a ``DistributedSampler``): the epoch lives in shared memory, so the call reaches
    ``DataLoader`` workers that already hold a copy of the step (``persistent_workers=True``,
    fork or spawn). Bad images follow ``on_error``; skipped ones come out as
    ``(index, key, reason)`` tuples, which :func:`dctnet.data.collate` records."""

    def __init__(self, crop: Callable | None = None, *, seed: int = 0, label_key: str = "cls",
                 on_error: str = "raise", exif: str = "ignore", max_pixels: int | None = DEFAULT_MAX_PIXELS,
                 warnings: str = "raise") -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        self.crop, self.seed, self.label_key = crop or FullImage(), seed, label_key
        warn_mode(warnings)  # validated here, not at the first read
        self.on_error, self.exif, self.max_pixels, self.warnings = on_error, exif, max_pixels, warnings
        # shared memory: a worker's pickled or forked copy of this step reads the parent's writes
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()

    @property
    def epoch(self) -> int:
        return int(self._epoch[0])

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        self._epoch[0] = int(epoch)

    def set_epoch(self, epoch: int) -> None:
        """Draw this epoch's crops from now on, in this process and in its DataLoader workers."""
        self.epoch = epoch

    def __call__(self, sample: dict[str, Any]) -> CoefficientSample | tuple[int, str, str]:
        key = sample.get("__key__", "")
        index = zlib.crc32(key.encode()) & 0x7FFFFFFF
        data = next((sample[e] for e in IMAGE_EXTS if e in sample), None)
        try:
            if data is None:
                raise JpegError(f"no {'/'.join(IMAGE_EXTS)} member", key)
            label = int(sample[self.label_key]) if self.label_key in sample else -1
            coeffs = read_coefficients(data, max_pixels=self.max_pixels, name=key, warnings=self.warnings)
        except (JpegError, ValueError) as exc:
            if self.on_error == "raise":
                raise
            return index, key, str(exc)
        return sample_from_coefficients(coeffs, self.crop, label, index, seed=self.seed, epoch=self.epoch,
                                        exif=self.exif)


def wds_decode(crop: Callable | None = None, **kwargs: Any) -> WdsDecode:
    """The dctnet decode step for a ``webdataset`` pipeline, e.g.
    ``wds.WebDataset(urls).map(wds_decode(RandomResizedCrop())).batched(64, collation_fn=collate)``."""
    return WdsDecode(crop, **kwargs)


class TarShardDataset(ReaderSplit, torch.utils.data.IterableDataset):
    """Stream cropped coefficient samples from WebDataset tar shards.

    Args:
        shards: tar paths, or a glob pattern.
        crop: box policy (``RandomResizedCrop()``, ``CenterCrop()``, …).
        seed: base of shard order, buffer shuffle and crop draws.
        shuffle: shuffle shard order and samples (buffer of ``buffer`` samples) each epoch.
        interleave: shards each reader keeps open at once, drawing every next sample from one of
            them at random (each still read front to back) before the buffer. Shards written from
            an ImageFolder are class-sorted: one shard at a time fills the buffer with a class or
            two, and a batch holds a handful of classes; ``interleave`` open shards give it about
            ``2 × interleave``. Shards written in a global random order (``dctnet shards write``)
            need none. 1: one shard after another.
        rank, world_size: distributed split (defaults from ``torch.distributed``).
        on_error, exif, max_pixels, label_key, warnings: as :class:`WdsDecode`.

    Each epoch every sample is read exactly once over all ranks and their readers: rank ``r`` gets
    ``N·r // world_size`` to ``N·(r + 1) // world_size`` of the epoch's shard order laid end to end
    (``len``: that many, the same for any readers per rank), a different run of shards each epoch
    under ``shuffle``, the same for the same ``(seed, epoch)``. Building one reads every shard's tar
    headers once (:func:`shard_index`; data is skipped, not read).
    """

    def __init__(self, shards: str | Sequence[str], *, crop: Callable | None = None, seed: int = 0,
                 shuffle: bool = True, buffer: int = 1000, interleave: int = DEFAULT_INTERLEAVE,
                 rank: int | None = None, world_size: int | None = None,
                 on_error: str = "raise", exif: str = "ignore", max_pixels: int | None = DEFAULT_MAX_PIXELS,
                 label_key: str = "cls", warnings: str = "raise") -> None:
        self.shards = sorted(glob.glob(shards)) if isinstance(shards, str) else [str(s) for s in shards]
        if not self.shards:
            raise FileNotFoundError(f"no shards match {shards!r}")
        self.rank, self.world_size, _ = placement(rank, world_size)
        self.decode = WdsDecode(crop, seed=seed, label_key=label_key, on_error=on_error, exif=exif,
                                max_pixels=max_pixels, warnings=warnings)
        if int(interleave) < 1:
            raise ValueError(f"interleave must be at least 1, got {interleave!r}")
        self.seed, self.shuffle, self.buffer, self.interleave = seed, shuffle, max(1, buffer), int(interleave)
        self.epoch = 0
        # one header scan per shard: the split by samples needs every shard's size in every reader
        # (workers get them pickled or forked with the dataset), and a reader entering a shard in
        # the middle seeks to its sample's offset
        index = [shard_index(s) for s in self.shards]
        #: samples per shard, in ``shards`` order
        self.sizes: list[int] = [n for n, _ in index]
        self._offsets: list[np.ndarray | None] = [o for _, o in index]

    @property
    def num_samples(self) -> int:
        """Samples in all shards: what an epoch reads over all ranks."""
        return sum(self.sizes)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def single_reader(self, seed: int) -> TarShardDataset:
        """The same shards, crop and bad-sample rule read whole by one rank with ``seed`` (the
        training pipeline's statistics pass: the same stream on every rank)."""
        return TarShardDataset(self.shards, crop=self.decode.crop, seed=seed, rank=0, world_size=1,
                               on_error=self.decode.on_error)

    def __len__(self) -> int:
        """Samples this rank reads per epoch: ``N·(rank + 1) // world_size − N·rank // world_size``
        of the ``N`` (:func:`dctnet.data.streams.reader_ranges`), whatever the shards' number and sizes and the
        readers per rank."""
        n = self.num_samples
        return n * (self.rank + 1) // self.world_size - n * self.rank // self.world_size

    def iter_split(self, me: int, total: int) -> Iterator[CoefficientSample | tuple[int, str, str]]:
        """The samples of reader ``me`` of ``total`` readers over all ranks (``__iter__`` uses
        ``rank × DataLoader worker``; :class:`dctnet.data.ThreadLoader` uses ``rank × thread``)."""
        self.decode.epoch = self.epoch
        for sample in self.raw_split(me, total):
            yield self.decode(sample)

    def raw_split(self, me: int, total: int,
                  read: Callable[[str, int, int], Iterator[dict[str, Any]]] | None = None) -> Iterator[dict[str, Any]]:
        """The undecoded samples of reader ``me`` of ``total``, in the order :meth:`iter_split`
        yields them (:func:`reader_stream` over the shards' sizes: a contiguous run of the epoch's
        shard order, which may begin or end inside a shard). ``read(path, start, stop)`` opens
        samples ``start`` to ``stop`` of a shard (default: every member's bytes, entered at the
        start sample's offset; the shuffle-quality figure passes a labels-only reader)."""
        offsets = dict(zip(self.shards, self._offsets))

        def whole(path: str, start: int, stop: int) -> Iterator[dict[str, Any]]:
            at = offsets.get(path)
            return iter_tar(path, start=start, stop=stop, offset=None if at is None or start == 0 else int(at[start]))

        return reader_stream(self.shards, read or whole, me, total, seed=self.seed, epoch=self.epoch,
                             shuffle=self.shuffle, interleave=self.interleave, buffer=self.buffer, sizes=self.sizes)


# ---------------------------------------------------------------------------------------------- writing
def global_order(n: int, seed: int) -> np.ndarray:
    """The order :func:`write_shards` writes ``n`` samples in: ``int64 (n,)``, position → source index."""
    return np.random.default_rng(seed).permutation(n)


def _hf_source(source: Any) -> Any:
    """An :class:`dctnet.data.hf.HFDataset` when ``source`` is a ``datasets.Dataset``, a saved
    dataset directory or parquet files (and ``datasets`` is installed), else ``None``."""
    try:
        from dctnet.data import hf  # optional dependency (datasets)
    except ImportError:
        return None
    if not isinstance(source, (str, os.PathLike, list, tuple)):
        return hf.HFDataset(source) if type(source).__name__ == "Dataset" else None
    try:
        hf.hf_files(source)
    except FileNotFoundError:
        return None
    return hf.HFDataset(source)


#: what :func:`write_shards` (``dctnet shards write SRC``) reads, in words for its errors and help
SOURCES = ("SRC is a folder of class folders (SRC/<class>/*.jpg), a folder of .tar shards, tar shards as a "
           "quoted glob ('shards/train-*.tar') or one .tar file, or a Hugging Face dataset (a save_to_disk folder, "
           "or parquet files: a file, a glob or a folder of them)")


def _is_shard_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder of tar shards: ``.tar`` files and no subfolders (an image
    folder's classes are subfolders; a shard folder's ``classes.txt`` and ``order.json`` are files)."""
    entries = list(os.scandir(path))
    return not any(e.is_dir() for e in entries) and any(e.is_file() and e.name.endswith(".tar") for e in entries)


def _shard_classes(paths: Sequence[str]) -> list[str]:
    """The class names of shards that all lie in one folder holding a ``classes.txt`` (as
    :func:`write_shards` leaves it), else ``[]``: labels are copied as they are, so their names
    still hold for the rewritten shards."""
    folders = {os.path.dirname(os.path.abspath(p)) for p in paths}
    names = Path(folders.pop(), "classes.txt") if len(folders) == 1 else None
    if names is None or not names.is_file():
        return []
    return [line for line in names.read_text().splitlines() if line]


def _folder_error(src: str) -> ValueError:
    """A folder that is neither an image folder nor a shard folder, said with what SRC may be."""
    return ValueError(f"{src}: no class folders (<class>/*.jpg) and no .tar shards in it; {SOURCES}")


_Item = tuple[str, Callable[[], dict[str, bytes]]]  # (description, reader of {ext: bytes})


def write_shards(source: str | os.PathLike | Sequence[str], out: str | os.PathLike, *, shard_size: int = 1000,
                 seed: int = 0, prefix: str = "shard") -> dict[str, Any]:
    """Write WebDataset tar shards (``KEY.jpg`` + ``KEY.cls``) holding the samples of ``source`` in
    one seeded global permutation, so that a stream read shard by shard is as mixed as a folder's
    sampler (the shards themselves need no shuffling across them).

    ``source``: an ImageFolder directory (``root/<class>/*.jpg``; labels are the sorted class
    folders' indices, written to ``out/classes.txt``), tar shards (a glob, a list, one ``.tar`` or a
    folder of ``.tar`` files with no subfolders: every sample and member copied as it is, and the
    folder's ``classes.txt`` — as this function writes it — copied along), or a Hugging Face
    dataset (a ``datasets.Dataset``, a ``save_to_disk`` directory or parquet files: the image
    column's stored bytes and the labels, ``ClassLabel`` names to ``classes.txt``; ``pip install
    dctnet[hf]``). Samples are written ``shard_size`` per shard as
    ``out/{prefix}-{i:06d}.tar``; keys are ``{position:09d}`` (unique, in the written order) and
    ``out/order.json`` maps each key's position to its source. One folder holds one written set:
    ``out`` holding an ``order.json`` or ``classes.txt`` already (another split's) is refused, as
    is one holding ``{prefix}-*.tar`` shards. Returns ``{"shards", "samples", "classes"}``. The
    order is :func:`global_order` (``numpy.random.default_rng(seed).permutation``): the same seed
    writes the same shards."""
    if shard_size < 1:
        raise ValueError(f"shard_size must be at least 1, got {shard_size}")
    out = Path(out)
    # the source is read (and its errors raised) before the output folder is checked
    items, classes = _source_items(source, out)
    _check_write_folder(out, prefix)
    order = global_order(len(items), seed)
    out.mkdir(parents=True, exist_ok=True)
    shards: list[str] = []
    for s in range(0, len(order), shard_size):
        name = out / f"{prefix}-{s // shard_size:06d}.tar"
        _write_one_shard(name, items, order, range(s, min(s + shard_size, len(order))))
        shards.append(str(name))
    (out / "order.json").write_text(json.dumps([items[i][0] for i in order.tolist()]))
    if classes:
        (out / "classes.txt").write_text("\n".join(classes) + "\n")
    return {"shards": shards, "samples": len(order), "classes": classes}


def _source_items(source: str | os.PathLike | Sequence[str], out: Path) -> tuple[list[_Item], list[str]]:
    """The samples of :func:`write_shards`'s ``source`` as ``(description, reader)`` pairs, each
    reader returning the sample's ``{ext: bytes}`` when called, and the source's class names."""
    src = source if isinstance(source, (str, os.PathLike)) else None
    hf = _hf_source(source)
    if hf is not None:  # a saved Hugging Face dataset or parquet files: rows as samples, ClassLabel names as classes
        classes = list(hf.classes)
        return _hf_items(hf), classes
    if src is not None and os.path.isdir(src) and not _is_shard_folder(src):
        return _folder_items(src)
    if src is not None and os.path.isdir(src):  # a folder of .tar shards (what this function writes)
        paths = sorted(str(t) for t in Path(src).glob("*.tar"))
    else:
        paths = sorted(glob.glob(str(src))) if src is not None else [str(p) for p in source]  # type: ignore[union-attr]
    if not paths:
        raise FileNotFoundError(f"no image folder or tar shards at {source!r}: {SOURCES}")
    if any(Path(p).resolve().parent == out.resolve() for p in paths):
        # the new shards would lie beside their sources: a folder or *.tar glob then reads each sample twice
        raise ValueError(f"{out} holds the source shards: write the new ones into another folder")
    classes = _shard_classes(paths)  # its classes.txt read before the shards are indexed
    return _tar_items(paths), classes


def _hf_items(hf: Any) -> list[_Item]:
    """One reader per row of the Hugging Face dataset ``hf``: its image column's stored bytes (or
    the file they name) and its label."""
    items: list[_Item] = []
    for i in range(len(hf)):
        def read_row(i=i) -> dict[str, bytes]:
            data, name = hf.image_source(i)
            if data is None:
                raise JpegError("no image bytes", name)
            data = Path(data).read_bytes() if isinstance(data, str) else bytes(data)
            return {"jpg": data, "cls": str(int(hf.targets[i])).encode()}
        items.append((hf.sample_name(i), read_row))
    return items


def _folder_items(src: str | os.PathLike) -> tuple[list[_Item], list[str]]:
    """One reader per image of the ImageFolder ``src`` (the file's bytes under its own extension,
    ``jpg`` for one that is no image extension) and the folder's classes."""
    if not any(e.is_dir() for e in os.scandir(src)):
        raise _folder_error(str(src))
    folder = ImageFolderDataset(src)
    items: list[_Item] = []
    for path, label in folder.samples:
        ext = Path(path).suffix.lower().lstrip(".")
        ext = "jpg" if ext not in IMAGE_EXTS else ext
        items.append((path, lambda p=path, y=label, e=ext: {e: Path(p).read_bytes(), "cls": str(y).encode()}))
    return items, list(folder.classes)


def _tar_items(paths: list[str]) -> list[_Item]:
    """One reader per sample of the tar shards ``paths``: every member of the sample, read at its
    indexed offset (no tar walk per sample)."""
    items: list[_Item] = []
    for path, groups in tar_index(paths):
        for members in groups:
            def read(p=path, ms=members) -> dict[str, bytes]:
                with open(p, "rb") as f:
                    got = {}
                    for m in ms:
                        f.seek(m.offset_data)
                        got[key_of(m.name)[1]] = f.read(m.size)
                    return got
            items.append((f"{path}:{key_of(members[0].name)[0]}", read))
    return items


def _check_write_folder(out: Path, prefix: str) -> None:
    """Refuse an ``out`` that already holds a written set: ``{prefix}-*.tar`` shards, or another
    split's ``order.json`` / ``classes.txt``."""
    old = sorted(out.glob(f"{prefix}-*.tar")) if out.is_dir() else []
    if old:  # a training glob would read them with the new ones — or they are the sources being read
        raise ValueError(f"{out} already holds {len(old)} {prefix}-*.tar shards (e.g. {old[0].name}): write into an "
                         "empty folder")
    # order.json and classes.txt name one written set: a second split written beside it (another
    # --prefix) would overwrite them and leave the first split's keys mapped to the second's sources
    taken = [name for name in ("order.json", "classes.txt") if (out / name).exists()]
    if taken:
        others = sorted({t.name.rsplit("-", 1)[0] + "-*.tar" for t in out.glob("*-*.tar")})
        raise ValueError(f"{out} already holds {' and '.join(taken)} of another `shards write`"
                         + (f" ({', '.join(others)})" if others else "")
                         + f", which writing {prefix}-*.tar there would overwrite: write each split into its own folder "
                         "(e.g. shards/train and shards/val)")


def _write_one_shard(name: Path, items: list[_Item], order: np.ndarray, positions: range) -> None:
    """Write the samples at ``positions`` of ``order`` into the shard ``name``, keyed by position.
    It is written under a ``.tar.tmp`` name and renamed, so a shard present is a complete one."""
    tmp = name.with_suffix(".tar.tmp")
    with tarfile.open(tmp, "w") as tar:
        for pos in positions:
            members = items[order[pos]][1]()
            for ext in sorted(members, key=lambda e: (e not in IMAGE_EXTS, e)):  # the image first
                data = members[ext]
                info = tarfile.TarInfo(f"{pos:09d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, name)


# ---------------------------------------------------------------------------------------------- the source
def _shards_split(ctx: SourceContext, split: str) -> TarShardDataset:
    """``data.source: shards``: the split's shards (a glob under the root), split by rank; the
    training split shuffled, mixed over ``data.interleave`` open shards and ``data.buffer`` samples."""
    d = ctx.data
    mixing = dict(interleave=d.interleave, buffer=d.buffer) if split == "train" else dict(shuffle=False)
    return TarShardDataset(str(ctx.path(split)), crop=ctx.crops.get(split), rank=ctx.rank, world_size=ctx.world_size,
                           **mixing, warnings=d.warnings, **ctx.policy)


def _find_shards(ctx: SourceContext) -> None:
    if not glob.glob(str(ctx.path("train"))):
        raise FileNotFoundError(f"no training shards match {ctx.path('train')} (data.root / data.train, "
                                "a glob such as train-*.tar)")


register_source(DataSource("shards", fields=("interleave", "buffer"), streams=True, coefficients=_shards_split,
                           rgb_refusal="holds JPEG coefficients", locate=_find_shards))
