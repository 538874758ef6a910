"""Where this process sits in a distributed run: one answer for the loaders, the shard reader,
cache builds and the trainer.

``torch.distributed`` when a process group is initialised; else ``torchrun``'s environment
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), which is set before the group exists (a trainer needs
it to create the group, a cache build to decide whether to); else a single process.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch

__all__ = ["Placement", "placement"]


class Placement(NamedTuple):
    rank: int
    world_size: int
    local_rank: int


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value.strip() else default
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def placement(rank: int | None = None, world_size: int | None = None) -> Placement:
    """``(rank, world_size, local_rank)`` of this process; explicit ``rank``/``world_size`` win."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        found = dist.get_rank(), dist.get_world_size()
    else:
        found = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)
    r = found[0] if rank is None else rank
    w = found[1] if world_size is None else world_size
    if w < 1 or not 0 <= r < w:
        raise ValueError(f"rank {r} is not within a world of {w} processes")
    return Placement(r, w, _env_int("LOCAL_RANK", 0))
