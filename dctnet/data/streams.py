"""Streamed datasets split over ranks and readers: the epoch's seeded source order, its cut into
one contiguous run per reader (:func:`reader_ranges`), the interleaved read with a shuffle buffer
(:func:`reader_stream`) and the reader a DataLoader worker is (:class:`ReaderSplit`). Shared by tar
shards (:mod:`dctnet.data.shards`) and streamed Hugging Face data (:mod:`dctnet.data.hf`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

__all__ = ["DEFAULT_INTERLEAVE", "ReaderSplit", "reader_ranges", "reader_stream"]


#: shards a reader keeps open at once (``TarShardDataset(interleave=)``, recipes' ``data.interleave``)
DEFAULT_INTERLEAVE = 32


def _interleaved(sources: Sequence[Any], read: Callable[[Any], Iterator[Any]], k: int,
                 g: torch.Generator) -> Iterator[Any]:
    """The items of ``sources`` (each opened by ``read``), ``k`` of them open at once: each next
    item comes from an open source drawn uniformly (``g``), each source read front to back; a
    finished source is replaced by the next in order. ``k = 1``: the sources one after another."""
    pending = iter(sources)
    open_: list[Iterator[Any]] = []
    for source in pending:
        open_.append(read(source))
        if len(open_) == k:
            break
    while open_:
        j = int(torch.randint(len(open_), (1,), generator=g)) if len(open_) > 1 else 0
        item = next(open_[j], None)
        if item is None:
            nxt = next(pending, None)
            if nxt is None:
                open_.pop(j)
            else:
                open_[j] = read(nxt)
            continue
        yield item


def reader_ranges(sizes: Sequence[int], order: Sequence[int], me: int, total: int) -> list[tuple[int, int, int]]:
    """Reader ``me`` of ``total``'s part of an epoch: the sources (``sizes[i]`` items each) laid end
    to end in ``order`` and cut into ``total`` contiguous runs, run ``me`` holding items
    ``N·me // total`` to ``N·(me + 1) // total`` of the ``N``. Returned as ``(source, start, stop)``
    pieces in order: whole sources, and at each end of the run at most one part of a source.

    Every item falls in exactly one run, and the runs differ by at most one item, whatever the
    number and sizes of the sources; ``total = ranks × threads`` readers with reader
    ``rank × threads + t`` give rank ``r`` the items ``N·r // ranks`` to ``N·(r + 1) // ranks``,
    whatever the number of threads (or DataLoader workers) each rank runs."""
    n = sum(int(x) for x in sizes)
    lo, hi = n * me // total, n * (me + 1) // total
    out, pos = [], 0
    for i in order:
        first, pos = pos, pos + int(sizes[i])
        a, b = max(first, lo), min(pos, hi)
        if a < b:
            out.append((i, a - first, b - first))
        if pos >= hi:
            break
    return out


def reader_stream(sources: Sequence[Any], read: Callable[..., Iterator[Any]], me: int, total: int, *, seed: int,
                  epoch: int, shuffle: bool, interleave: int, buffer: int,
                  sizes: Sequence[int] | None = None) -> Iterator[Any]:
    """The items reader ``me`` of ``total`` streams from ``sources`` (tar shards, a streamed
    dataset's sources): the epoch's seeded source order, ``interleave`` of this reader's sources
    open at once, a shuffle buffer of ``buffer`` items. Without ``shuffle``: the sources in order,
    one at a time.

    With ``sizes`` (items per source) the split is by items (:func:`reader_ranges`): every item
    exactly once over the readers, their counts within one of each other, whatever the number and
    sizes of the sources; ``read(source, start, stop)`` opens items ``start`` to ``stop`` of a
    source. Without them, ``read(source)`` opens a whole source and the split is by source, this
    reader's being ``order[me::total]`` (every item once, but readers' counts follow the sources'
    sizes); with fewer sources than readers every reader streams all and keeps every
    ``total``-th item of one shared interleaving order."""
    if not 0 <= me < total:
        raise ValueError(f"reader {me} of {total}")
    base = seed * 1_000_003 + epoch
    order = list(range(len(sources)))
    if shuffle:
        order = torch.randperm(len(order), generator=torch.Generator().manual_seed(base)).tolist()
    keep = None
    if sizes is not None:
        if len(sizes) != len(sources):
            raise ValueError(f"{len(sizes)} sizes for {len(sources)} sources")
        mine = [(sources[i], a, b) for i, a, b in reader_ranges(sizes, order, me, total)]
        opener: Callable[[Any], Iterator[Any]] = lambda piece: read(*piece)  # noqa: E731
    elif len(order) >= total:
        mine, opener = [sources[i] for i in order[me::total]], read
    else:
        mine, opener, keep = [sources[i] for i in order], read, (me, total)
    g = torch.Generator().manual_seed(base * 65_537 + me)
    # readers that split one stream by position must all see one interleaving order
    mix = g if keep is None else torch.Generator().manual_seed(base * 65_537 + total)
    buf: list[Any] = []
    for count, item in enumerate(_interleaved(mine, opener, interleave if shuffle else 1, mix)):
        if keep is not None and count % keep[1] != keep[0]:
            continue
        if not shuffle:
            yield item
            continue
        if len(buf) < buffer:
            buf.append(item)
            continue
        j = int(torch.randint(len(buf), (1,), generator=g))
        buf[j], item = item, buf[j]
        yield item
    while buf:
        j = int(torch.randint(len(buf), (1,), generator=g))
        yield buf.pop(j)


class ReaderSplit:
    """What streamed datasets share: iterating in a DataLoader worker reads as reader
    ``rank × workers + worker`` of ``world_size × workers`` (their ``iter_split``)."""

    rank: int
    world_size: int

    def _split(self) -> tuple[int, int]:
        info = torch.utils.data.get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        return self.rank * workers + worker, self.world_size * workers

    def __iter__(self) -> Iterator[Any]:
        return self.iter_split(*self._split())  # type: ignore[attr-defined]
