"""Collate, samplers, loaders and the device prefetcher.

Two ways to run the CPU side, giving identical batches for the same seed:

- ``torch.utils.data.DataLoader(dataset, sampler=EpochSampler(...), collate_fn=collate, ...)`` —
  worker processes, as any PyTorch pipeline (:func:`make_dataloader` wires it);
- :class:`ThreadLoader` — threads in this process: the coefficient reader releases the GIL, so
  threads decode in parallel without pickling batches between processes.

``drop_last``: with ``EpochSampler(drop_last=False)`` every sample appears exactly once per epoch
across all ranks (ranks may differ by one sample; nothing is padded or repeated); with
``drop_last=True`` each rank gets ``len(dataset) // world_size`` samples (the remainder, a
different one each epoch, is left out). Loaders' own ``drop_last`` drops a final partial batch.
Tar shards (:class:`dctnet.data.TarShardDataset`, an iterable dataset) split by samples: rank ``r``
of ``w`` reads ``N·r // w`` to ``N·(r + 1) // w`` of the epoch's stream, every sample exactly once
across ranks and their threads, whatever the shards' number and sizes.
"""

from __future__ import annotations

import collections
import math
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from dctnet.distributed import placement
from dctnet.data.collate import collate
from dctnet.data.dataset import ImageFolderDataset
from dctnet.batch import JpegBatch, PackedJpegBatch, SparseJpegBatch, as_jpeg_batch

__all__ = ["DevicePrefetcher", "EpochSampler", "REPEAT_SHIFT", "RepeatedAugSampler", "ThreadLoader", "make_dataloader"]


class EpochSampler(torch.utils.data.Sampler):
    """Seeded per-epoch order, split across distributed ranks; yields ``(epoch, index)``.

    Args:
        n: dataset size.
        shuffle: a new permutation each epoch (``seed + epoch``), else 0..n−1.
        rank, world_size: defaults from ``torch.distributed`` when initialised, else 0 and 1.
        drop_last: see the module docstring.
    """

    def __init__(self, n: int, *, shuffle: bool = True, seed: int = 0, rank: int | None = None,
                 world_size: int | None = None, drop_last: bool = False) -> None:
        self.rank, self.world_size, _ = placement(rank, world_size)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside world size {self.world_size}")
        self.n, self.shuffle, self.seed, self.drop_last = n, shuffle, seed, drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def indices(self) -> list[int]:
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed * 1_000_003 + self.epoch)
            order = torch.randperm(self.n, generator=g).tolist()
        else:
            order = list(range(self.n))
        mine = order[self.rank::self.world_size]
        if self.drop_last:
            mine = mine[: self.n // self.world_size]
        return mine

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter([(self.epoch, i) for i in self.indices()])

    def __len__(self) -> int:
        return self.n // self.world_size if self.drop_last else len(range(self.rank, self.n, self.world_size))


#: a key's epoch holds the repeat number above this bit (:class:`RepeatedAugSampler`): repeat ``r`` of
#: epoch ``e`` draws its crop from the stream ``e | r << 20`` (the crop streams use 32 bits of the epoch)
REPEAT_SHIFT = 20


class RepeatedAugSampler(torch.utils.data.Sampler):
    """Repeated augmentation: DeiT's ``RASampler`` (timm's ``RepeatAugSampler``; torchvision's
    reference's ``--ra-sampler --ra-reps``) over ``indices`` (a dataset size, or global indices).

    Each epoch: the indices permuted (seeded ``seed·1000003 + epoch``: with seed 0, timm's own
    permutation), each repeated ``repeats`` times in a row, the list wrapped to a multiple of the world
    size and dealt to the ranks by stride (so the repeats of an image land on different ranks), each
    rank keeping ``floor(n // 256 · 256 / world_size)`` of its share (``ceil(n / world_size)`` below
    256 samples), timm's rule: an epoch is about ``n`` samples in all, ``n / repeats`` distinct images.

    Yields ``(epoch key, index)``. The key's epoch is ``epoch | r << REPEAT_SHIFT`` for repeat ``r``,
    so that each repeat of an image draws its own crop (a crop is a pure function of (seed, epoch,
    index): with the plain epoch every repeat would get the same box); the device augmentation draws
    per batch row, so the repeats' other draws differ too. ``keys=False``: plain indices, for a
    DataLoader whose transforms draw their own randomness (the torchvision arm)."""

    def __init__(self, indices: int | Sequence[int], repeats: int = 3, *, shuffle: bool = True, seed: int = 0,
                 rank: int | None = None, world_size: int | None = None, keys: bool = True,
                 selected_round: int = 256) -> None:
        if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats < 1 << (32 - REPEAT_SHIFT):
            raise ValueError(f"RepeatedAugSampler: repeats must be an int in [1, {1 << (32 - REPEAT_SHIFT)}), "
                             f"got {repeats!r}")
        self.rank, self.world_size, _ = placement(rank, world_size)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside world size {self.world_size}")
        self.indices = list(range(indices)) if isinstance(indices, int) else list(indices)
        self.repeats, self.shuffle, self.seed, self.keys = repeats, shuffle, seed, keys
        n, w = len(self.indices), self.world_size
        self.total_size = math.ceil(n * repeats / w) * w
        if selected_round and n >= selected_round:
            selected = math.floor(n // selected_round * selected_round / w)
        else:
            selected = math.ceil(n / w)
        self.num_selected = min(selected, self.total_size // w)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        if not 0 <= epoch < 1 << REPEAT_SHIFT:
            raise ValueError(f"RepeatedAugSampler: epoch must be in [0, 2^{REPEAT_SHIFT}), got {epoch}")
        self.epoch = epoch

    def plan(self) -> list[tuple[int, int]]:
        """This rank's ``(index, repeat)`` for the epoch, in order."""
        n = len(self.indices)
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed * 1_000_003 + self.epoch)
            order = torch.randperm(n, generator=g).tolist()
        else:
            order = list(range(n))
        repeated = [(self.indices[i], r) for i in order for r in range(self.repeats)]
        picks = range(self.rank, self.total_size, self.world_size)[:self.num_selected]
        return [repeated[i % len(repeated)] for i in picks] if repeated else []

    def __iter__(self) -> Iterator[Any]:
        if not self.keys:
            return iter([i for i, _ in self.plan()])
        return iter([(self.epoch | r << REPEAT_SHIFT, i) for i, r in self.plan()])

    def __len__(self) -> int:
        return self.num_selected


def make_dataloader(dataset: ImageFolderDataset, batch_size: int, *, sampler: EpochSampler | None = None,
                    num_workers: int = 2, drop_last: bool = False, grid: tuple[int, int] | None = None,
                    pin_memory: bool | None = None, **kwargs) -> torch.utils.data.DataLoader:
    """A ``DataLoader`` over a coefficient dataset: our sampler, collate and worker settings.

    Batches are collated (and pinned, when CUDA is available) inside the workers."""
    sampler = sampler or EpochSampler(len(dataset), seed=dataset.seed)
    fn = _Collate(grid, pin_memory if pin_memory is not None else False)
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=sampler, collate_fn=fn,
                                       num_workers=num_workers, drop_last=drop_last,
                                       pin_memory=bool(pin_memory if pin_memory is not None else torch.cuda.is_available()),
                                       **kwargs)


class _Collate:
    """Picklable collate with fixed options (for worker processes)."""

    def __init__(self, grid: tuple[int, int] | None, pin_memory: bool) -> None:
        self.grid, self.pin_memory = grid, pin_memory

    def __call__(self, samples):
        return collate(samples, grid=self.grid, pin_memory=self.pin_memory)


class ThreadLoader:
    """Batches from a dataset using threads in this process.

    Each batch is one task: ``dataset.load_collated(keys)`` where the dataset has it (image
    folders: one GIL-free read of the batch's files, then one C window copy per layout group;
    caches: one C gather), else ``dataset.load_batch(keys)`` then collate.
    ``threads`` tasks run at once and ``prefetch`` batches are kept ready, in order. The same
    ``sampler`` gives the same batches as a DataLoader. ``cpu_seconds`` adds up the threads' CPU
    time spent on batches.
    """

    def __init__(self, dataset: ImageFolderDataset, batch_size: int, *, sampler: EpochSampler | None = None,
                 threads: int = 2, drop_last: bool = False, grid: tuple[int, int] | None = None,
                 pin_memory: bool | None = None, prefetch: int | None = None) -> None:
        if batch_size < 1 or threads < 1:
            raise ValueError(f"batch_size and threads must be positive, got {batch_size} and {threads}")
        self.dataset, self.batch_size = dataset, batch_size
        #: an iterable dataset (e.g. :class:`dctnet.data.TarShardDataset`) streams its samples
        self.iterable = isinstance(dataset, torch.utils.data.IterableDataset)
        if self.iterable and sampler is not None:
            raise ValueError("an iterable dataset orders its own samples: ThreadLoader takes no sampler for it")
        self.sampler = None if self.iterable else (sampler or EpochSampler(len(dataset), seed=dataset.seed))
        self.threads, self.drop_last, self.grid = threads, drop_last, grid
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        # Batches built in one C call (caches) take about a millisecond: one batch ahead per thread
        # is enough, and fewer live multi-megabyte batches stay in the L3 cache (measured ~0.5 µs
        # a sample cheaper than two ahead). Decoded batches take ~10 ms: two ahead per thread
        # smooth out slow files.
        self.prefetch = prefetch or (threads if getattr(dataset, "cheap_batches", False) else 2 * threads)
        #: CPU seconds the loader threads have spent building batches (for per-sample accounting)
        self.cpu_seconds = 0.0
        self._cpu_lock = threading.Lock()

    def set_epoch(self, epoch: int) -> None:
        (self.dataset if self.iterable else self.sampler).set_epoch(epoch)

    @property
    def samples(self) -> int:
        """Samples this rank's epoch holds before the loader's ``drop_last``: its sampler's, or an
        iterable dataset's ``len`` (tar shards: the rank's exact share of every sample)."""
        return len(self.dataset if self.iterable else self.sampler)

    def __len__(self) -> int:
        n = self.samples
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def _batches(self) -> list[list[tuple[int, int]]]:
        keys = list(self.sampler)
        out = [keys[i:i + self.batch_size] for i in range(0, len(keys), self.batch_size)]
        if self.drop_last and out and len(out[-1]) < self.batch_size:
            out.pop()
        return out

    def _load(self, keys: list[tuple[int, int]]) -> JpegBatch:
        t = time.thread_time()
        collated = getattr(self.dataset, "load_collated", None)
        if collated is not None:  # datasets that build the batch in one go (image folders, caches)
            batch = collated(keys, grid=self.grid, pin_memory=self.pin_memory)
        else:
            batch = collate(self.dataset.load_batch(keys), grid=self.grid, pin_memory=self.pin_memory)
        with self._cpu_lock:
            self.cpu_seconds += time.thread_time() - t
        return batch

    def __iter__(self) -> Iterator[JpegBatch]:
        if self.iterable:
            yield from self._iter_stream()
            return
        batches = self._batches()
        pending: collections.deque[Future] = collections.deque()
        with ThreadPoolExecutor(self.threads, thread_name_prefix="dctnet-loader") as pool:
            it = iter(batches)
            for keys in it:
                pending.append(pool.submit(self._load, keys))
                if len(pending) >= self.prefetch:
                    break
            while pending:
                batch = pending.popleft().result()
                nxt = next(it, None)
                if nxt is not None:
                    pending.append(pool.submit(self._load, nxt))
                yield batch


    def _iter_stream(self) -> Iterator[JpegBatch]:
        """An iterable dataset: thread ``t`` streams reader ``t`` of ``threads``
        (``dataset.iter_split``, else every thread-th sample of one iterator per thread), and the
        batches take the threads' samples round-robin, so the batch sequence is the same on every
        run whatever the threads' timing. Threads stop when the iteration does."""
        stop = threading.Event()
        queues = [queue.Queue(maxsize=2 * self.batch_size) for _ in range(self.threads)]
        done = object()
        split = getattr(self.dataset, "iter_split", None)

        def produce(t: int) -> None:
            start = time.thread_time()
            try:
                if split is not None:
                    rank = getattr(self.dataset, "rank", 0)
                    world = getattr(self.dataset, "world_size", 1)
                    source = split(rank * self.threads + t, world * self.threads)
                else:
                    source = (x for i, x in enumerate(iter(self.dataset)) if i % self.threads == t)
                for sample in source:
                    while not stop.is_set():
                        try:
                            queues[t].put(sample, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if stop.is_set():
                        return
                queues[t].put(done)
            except BaseException as exc:  # handed to the consumer, raised there
                queues[t].put(exc)
            finally:
                with self._cpu_lock:
                    self.cpu_seconds += time.thread_time() - start

        workers = [threading.Thread(target=produce, args=(t,), name=f"dctnet-loader-stream-{t}", daemon=True)
                   for t in range(self.threads)]
        for w in workers:
            w.start()
        try:
            live, batch = list(range(self.threads)), []
            while live:
                for t in list(live):
                    item = queues[t].get()
                    if item is done:
                        live.remove(t)
                        continue
                    if isinstance(item, BaseException):
                        raise item
                    batch.append(item)
                    if len(batch) == self.batch_size:
                        yield collate(batch, grid=self.grid, pin_memory=self.pin_memory)
                        batch = []
            if batch and not self.drop_last:
                yield collate(batch, grid=self.grid, pin_memory=self.pin_memory)
        finally:
            stop.set()
            for q in queues:  # unblock producers waiting on a full queue
                while not q.empty():
                    q.get_nowait()
            for w in workers:
                w.join()


class DevicePrefetcher:
    """Moves batches to ``device`` ahead of use: copies from pinned memory with
    ``non_blocking=True`` on a side CUDA stream, two batches in flight, and makes the compute
    stream wait on the copy (no host sync). On a CPU device it passes batches through. Packed and
    sparse batches (``CacheDataset(device_expand=True)``) are expanded on arrival
    (:func:`dctnet.transforms.as_jpeg_batch`), so what it yields is always a :class:`JpegBatch`.

    ``transform`` (optional) runs on the device batch before it is yielded (e.g. the crop/resize
    step and augmentations), on the current stream."""

    def __init__(self, loader: Iterable[JpegBatch], device: torch.device | str, *,
                 transform: Callable[[JpegBatch], object] | None = None, depth: int = 2) -> None:
        self.loader, self.device, self.transform, self.depth = loader, torch.device(device), transform, depth

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[object]:
        transform = self.transform or (lambda b: b)

        def finish(batch):
            return transform(as_jpeg_batch(batch) if isinstance(batch, (PackedJpegBatch, SparseJpegBatch)) else batch)

        if self.device.type != "cuda":
            for batch in self.loader:
                yield finish(batch.to(self.device))
            return
        stream = torch.cuda.Stream(device=self.device)
        queue: collections.deque = collections.deque()

        def push(batch: JpegBatch) -> None:
            with torch.cuda.stream(stream):
                moved = batch.to(self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(stream)
            queue.append((moved, event))

        it = iter(self.loader)
        for batch in it:
            push(batch)
            if len(queue) >= self.depth:
                break
        while queue:
            moved, event = queue.popleft()
            torch.cuda.current_stream(self.device).wait_event(event)
            for t in moved.tensors():
                t.record_stream(torch.cuda.current_stream(self.device))  # memory from the side stream
            nxt = next(it, None)
            if nxt is not None:
                push(nxt)
            yield finish(moved)

