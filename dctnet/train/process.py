"""The process a training run lives in: its rank among the processes, its device, the process
group (``torchrun``), the log and the run directory — for the one trainer, whatever the
task."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from dctnet.distributed import placement
from dctnet.hostmem import keep_freed_host_memory
from dctnet.train.checkpoint_file import check_writable
from dctnet.train.recipe import Recipe

__all__ = ["RunProcess", "run_device", "start_process"]


@dataclass
class RunProcess:
    rank: int
    world_size: int
    device: torch.device
    log: Callable[[str], None]
    out: Path


def run_device(want: str, local_rank: int, world_size: int, cuda_available: bool) -> torch.device:
    """The device of this process from ``train.device`` (``want``), without touching CUDA.

    - ``auto``: ``cuda:local_rank`` when CUDA is there, else the CPU;
    - ``cuda`` (no index): ``cuda:local_rank`` — under ``torchrun`` each rank its own GPU, not all GPU 0;
    - ``cuda:N``: ``cuda:N`` in a single process; with ``world_size > 1``, ``cuda:local_rank`` (the
      caller logs the override);
    - anything else (``cpu``, ...): as given.

    Raises ``ValueError`` for a string that is not a device, or a CUDA device without CUDA."""
    if want == "auto":
        if not cuda_available:
            return torch.device("cpu")
        want = "cuda"
    try:
        device = torch.device(want)
    except RuntimeError as e:
        raise ValueError(f"train.device {want!r} is not a device ('auto', 'cpu', 'cuda', 'cuda:N'): {e}") from None
    if device.type != "cuda":
        return device
    if not cuda_available:
        raise ValueError(f"train.device {want!r}: CUDA is not available in this process (use 'auto' or 'cpu')")
    # An explicit index with several processes is overridden rather than refused, as timm's train.py
    # does (utils/distributed.py, init_distributed_device_so: "Ignore manually specified device index
    # in distributed mode and override with resolved local rank", with a warning):
    # torchrun gives every rank LOCAL_RANK and GPUs are chosen with CUDA_VISIBLE_DEVICES, so a recipe
    # written for one GPU (``cuda:0``) should run unchanged under torchrun; honouring the index would
    # put every rank on one GPU, which NCCL refuses (or hangs on), so it can never be what was meant.
    if device.index is None or world_size > 1:
        return torch.device("cuda", local_rank)
    return device


def start_process(recipe: Recipe, log: Callable[[str], None] | None = None) -> RunProcess:
    """Place this process: ``train.device`` (:func:`run_device`: ``auto`` or ``cuda`` is
    ``cuda:LOCAL_RANK``; ``auto`` is the CPU without CUDA), the process group under ``torchrun``
    (NCCL on CUDA, gloo on the CPU), ``train.torch_threads``, on a CPU device the host allocator
    (:func:`dctnet.hostmem.keep_freed_host_memory`: the device step's freed batch-sized blocks are
    reused, not unmapped and faulted in again every batch), the log (stderr by default) and the run
    directory (made by rank 0)."""
    r = recipe
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    rank, world_size, local = placement()
    want = r.train.device
    device = run_device(want, local, world_size, torch.cuda.is_available())
    if want != "auto" and torch.device(want).index not in (None, device.index):
        log(f"rank {rank}: train.device {want!r} overridden by {device} (LOCAL_RANK {local} of {world_size} "
            "processes: each rank takes the GPU of its local rank)")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if r.train.torch_threads:
        torch.set_num_threads(r.train.torch_threads)
    if device.type == "cpu":  # the device step's batch-sized temporaries live on the host then
        keep_freed_host_memory()
    out = Path(r.train.out)
    if rank == 0:  # an output folder that cannot be written is refused now, not at the first checkpoint
        check_writable(out)
    return RunProcess(rank, world_size, device, log, out)
