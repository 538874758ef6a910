"""The process a training run lives in: its rank among the processes, its device, the process
group (``torchrun``), the log and the run directory — shared by the classification and the
detection trainers."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from dctnet.distributed import placement
from dctnet.hostmem import keep_freed_host_memory
from dctnet.train.recipe import Recipe

__all__ = ["RunProcess", "start_process"]


@dataclass
class RunProcess:
    rank: int
    world_size: int
    device: torch.device
    log: Callable[[str], None]
    out: Path


def start_process(recipe: Recipe, log: Callable[[str], None] | None = None) -> RunProcess:
    """Place this process: ``train.device`` (``auto``: ``cuda:LOCAL_RANK`` when CUDA is there, else
    the CPU), the process group under ``torchrun`` (NCCL on CUDA, gloo on the CPU),
    ``train.torch_threads``, on a CPU device the host allocator (:func:`dctnet.hostmem.keep_freed_host_memory`:
    the device step's freed batch-sized blocks are reused, not unmapped and faulted in again every
    batch), the log (stderr by default) and the run directory (made by rank 0)."""
    r = recipe
    rank, world_size, local = placement()
    want = r.train.device
    if want == "auto":
        want = f"cuda:{local}" if torch.cuda.is_available() else "cpu"
    device = torch.device(want)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if r.train.torch_threads:
        torch.set_num_threads(r.train.torch_threads)
    if device.type == "cpu":  # the device step's batch-sized temporaries live on the host then
        keep_freed_host_memory()
    out = Path(r.train.out)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    return RunProcess(rank, world_size, device, log or (lambda msg: print(msg, file=sys.stderr, flush=True)), out)
