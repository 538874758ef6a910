"""WebDataset tar shards read member by member: a sample is a run of consecutive members with one
key (the member name up to the first dot of its basename), ``KEY.jpg`` and ``KEY.cls``; samples
read whole or by label only, a shard's sample count and header offsets, its members grouped by key.
What the shard reader (:mod:`dctnet.data.shards`), shard writing and cache builds share."""

from __future__ import annotations

import contextlib
import os
import tarfile
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

__all__ = ["IMAGE_EXTS", "iter_labels", "iter_tar", "key_of", "shard_index", "tar_index"]

IMAGE_EXTS = ("jpg", "jpeg")


def key_of(name: str) -> tuple[str, str]:
    """A tar member's ``(key, extension)``: the name up to the first dot of its basename, and the rest."""
    base = os.path.basename(name)
    stem, _, ext = base.partition(".")
    return os.path.join(os.path.dirname(name), stem), ext.lower()


def iter_tar(path: str, only: Sequence[str] | None = None, start: int = 0, stop: int | None = None,
              offset: int | None = None) -> Iterator[dict[str, Any]]:
    """Samples ``start`` to ``stop`` of one shard (default: all of them) as dicts
    ``{"__key__": key, "__shard__": path, ext: bytes, ...}`` (a sample: consecutive members with
    one key). ``only``: read just the members with these extensions and skip the others by their
    tar headers (random access; default: a stream, every member read). ``offset``: the byte offset
    of sample ``start``'s first header (:func:`shard_index`), where the read begins; without it the
    samples before ``start`` are skipped by their headers (their data is not read)."""
    with contextlib.ExitStack() as stack:
        if offset is not None:  # seek straight to the first wanted sample: the rest reads as a stream
            f = stack.enter_context(open(path, "rb"))
            f.seek(offset)
            tar = stack.enter_context(tarfile.open(fileobj=f, mode="r|" if only is None else "r:"))
            index = start - 1
        else:
            stream = only is None and start == 0  # skipping samples by their headers needs random access
            tar = stack.enter_context(tarfile.open(path, "r|*" if stream else "r:*"))
            index = -1
        current: dict[str, Any] | None = None
        key_now = None
        for member in tar:
            if not member.isfile():
                continue
            key, ext = key_of(member.name)
            if key != key_now:
                if current is not None:
                    yield current
                    current = None
                key_now, index = key, index + 1
                if stop is not None and index >= stop:
                    return
                if index >= start:
                    current = {"__key__": key, "__shard__": path}
            if current is not None and (only is None or ext in only):
                current[ext] = tar.extractfile(member).read()  # type: ignore[union-attr]
        if current is not None:
            yield current


def iter_labels(path: str, label_key: str = "cls", start: int = 0, stop: int | None = None) -> Iterator[dict[str, Any]]:
    """A shard's samples ``start`` to ``stop`` with only their label member read
    (``{"__key__", "__shard__", label_key}``); image data is skipped by its tar header (the
    shuffle-quality figure's reader)."""
    return iter_tar(path, only=(label_key,), start=start, stop=stop)


#: :func:`shard_index` results by (path, size, mtime): datasets built again over the same shards
#: (the trainer's statistics pass, a second loader) scan each shard's headers once
_INDEX_CACHE: dict[tuple[str, int, int], tuple[int, np.ndarray | None]] = {}


def shard_index(path: str) -> tuple[int, np.ndarray | None]:
    """``(samples, offsets)`` of one shard from its tar headers alone: the number of samples (runs
    of consecutive members with one key, as :func:`iter_tar` yields them) and, for an uncompressed
    tar, ``int64 (samples,)`` byte offsets of each sample's first header (``None`` for a compressed
    one, which cannot be entered in the middle)."""
    st = os.stat(path)
    cache_key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    hit = _INDEX_CACHE.get(cache_key)
    if hit is not None:
        return hit
    offsets: list[int] = []
    try:
        try:
            tar, plain = tarfile.open(path, "r:"), True
        except tarfile.ReadError:
            tar, plain = tarfile.open(path, "r:*"), False
        with tar:
            current = None
            for member in tar:
                if not member.isfile():
                    continue
                key = key_of(member.name)[0]
                if key != current:
                    # a long name's or pax header's offset: where a reader must start to get the member
                    offsets.append(member.offset)
                    current = key
    except tarfile.TarError as exc:  # said as a bad input, as a missing file is (callers catch OSError/ValueError)
        raise ValueError(f"{path}: not a readable tar shard ({type(exc).__name__}: {exc})") from None
    out = (len(offsets), np.asarray(offsets, dtype=np.int64) if plain else None)
    _INDEX_CACHE[cache_key] = out
    return out


def tar_index(shards: Sequence[str]) -> list[tuple[str, list[tarfile.TarInfo]]]:
    """Per shard, its samples as groups of consecutive members with one key (headers only)."""
    out = []
    for path in shards:
        groups: list[tarfile.TarInfo] = []
        with tarfile.open(path, "r:") as tar:
            current, members = None, []
            for m in tar:
                if not m.isfile():
                    continue
                key = key_of(m.name)[0]
                if current is not None and key != current:
                    groups.append(members)
                    members = []
                current = key
                members.append(m)
            if members:
                groups.append(members)
        out.append((path, groups))
    return out
