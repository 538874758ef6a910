"""Host CPU and data-wait accounting: what the input pipeline costs the host, per epoch in training
and per image in ``dctnet bench`` / ``benchmarks/loader.py``.

* dctnet's loaders (:class:`dctnet.data.ThreadLoader`) count their threads' CPU seconds
  themselves (``cpu_seconds``); the torchvision baseline's worker processes stamp each batch
  with their own CPU time (:class:`WorkerCpu`, the collate) and :class:`RgbLoader` reads it off.
* :class:`TimedLoader` adds the time the training loop blocks on the next host batch to its
  owner's ``wait_seconds``.
* :func:`measure` times one epoch of a loader: images/s and CPU µs per image (this process plus
  its persistent worker processes, read from /proc).
"""

from __future__ import annotations

import os
import resource
import time

import torch

__all__ = ["RgbLoader", "Skipped", "TimedLoader", "WorkerCpu", "cpu_of", "cpu_seconds", "measure", "process_cpu",
           "worker_pids"]


# ---------------------------------------------------------------------- training: per epoch
class Skipped(tuple):
    """``(index, path, reason)`` of a sample the torchvision baseline could not read."""


class WorkerCpu:
    """Collate for torchvision DataLoaders that stamps each batch with its worker's CPU time and
    the samples the dataset skipped (:class:`Skipped`): ``(x, y, (worker, cpu_seconds, skipped))``."""

    def __call__(self, samples):
        skipped = tuple(tuple(s) for s in samples if isinstance(s, Skipped))
        good = [s for s in samples if not isinstance(s, Skipped)]
        if good:
            x, y = torch.utils.data.default_collate(good)
        else:  # every sample of the batch was bad
            x, y = torch.zeros(0), torch.zeros(0, dtype=torch.int64)
        info = torch.utils.data.get_worker_info()
        return x, y, (info.id if info else -1, time.process_time(), skipped)


class RgbLoader:
    """torchvision DataLoader whose worker CPU seconds are read off the batches it yields."""

    def __init__(self, loader: torch.utils.data.DataLoader) -> None:
        self.loader, self.sampler = loader, loader.sampler
        self.seen: dict[int, float] = {}

    @property
    def cpu_seconds(self) -> float:
        return sum(self.seen.values())

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for x, y, (wid, cpu, skipped) in self.loader:
            if wid >= 0:
                self.seen[wid] = max(self.seen.get(wid, 0.0), cpu)
            yield x, y, (wid, cpu, skipped)


class TimedLoader:
    """Iterates ``loader`` and adds the time each ``next`` blocks to ``owner.wait_seconds``.

    The device prefetcher pulls host batches from the training thread itself, so this is exactly
    the time the step waited for data, whatever the prefetcher then does on the device."""

    def __init__(self, loader, owner, clock=time.perf_counter) -> None:
        self.loader, self.owner, self.clock = loader, owner, clock

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        it = iter(self.loader)
        while True:
            t = self.clock()
            try:
                batch = next(it)
            except StopIteration:
                return
            finally:
                self.owner.wait_seconds += self.clock() - t
            yield batch


def cpu_of(loader) -> float:
    """CPU seconds a loader reports (``cpu_seconds``; 0 for one that does not count)."""
    return float(getattr(loader, "cpu_seconds", 0.0))


# ---------------------------------------------------------------------- benchmarks: per image
def cpu_seconds() -> float:
    """This process only: worker processes are read from /proc (RUSAGE_CHILDREN would also book
    the CPU of an earlier configuration's workers, reaped while a later one is measured)."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    return s.ru_utime + s.ru_stime


def process_cpu(pid: int) -> float:
    """utime + stime of a live process, seconds (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker_pids(loader) -> list[int]:
    it = getattr(loader, "_iterator", None)
    return [w.pid for w in getattr(it, "_workers", [])] if it is not None else []


def _batch_len(batch) -> int:
    return len(batch) if not isinstance(batch, (list, tuple)) else len(batch[0])


def measure(loader, n_images: int | None = None, *, warmup: bool = True) -> tuple[float, float]:
    """``(images/s, CPU µs per image)`` for one epoch of ``loader``, after a warm-up epoch (worker
    start-up, imports and first-touch page faults are not per-sample costs). CPU time = this
    process + the persistent worker processes, read from /proc around the measured epoch.
    ``n_images``: the count the epoch must yield (checked), or ``None``."""
    if warmup:
        for _ in loader:  # warm-up epoch; starts persistent workers
            pass
    pids = worker_pids(loader)
    cpu0 = cpu_seconds() + sum(process_cpu(p) for p in pids)
    t0 = time.perf_counter()
    count = 0
    for batch in loader:
        count += _batch_len(batch)
    wall = time.perf_counter() - t0
    cpu = cpu_seconds() + sum(process_cpu(p) for p in pids) - cpu0
    if n_images is not None and count != n_images:
        raise RuntimeError(f"the loader yielded {count} images, expected {n_images}")
    return count / wall, cpu / max(count, 1) * 1e6
