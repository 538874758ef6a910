"""What a training run reports while it runs, the same in every task: the epoch's progress bar,
and the samples ``data.on_error: skip`` left out — ``skipped.txt`` (one
``epoch\\tsplit\\tname\\treason`` line each; epoch 0: refused by the full decode before training),
per-epoch counts over every rank, and the note on the epoch's line."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch.distributed as dist

__all__ = ["append_skipped", "epoch_skipped", "progress_bar", "skip_note"]

#: (split, name, reason) of one left-out sample
Skipped = tuple[str, str, str]


def progress_bar(rank: int, enabled: bool, total: int, desc: str) -> Any:
    """A tqdm bar on rank 0 when ``enabled`` (``train.progress``) and stderr is a terminal; ``None``
    otherwise — in logs and pipes the epoch's line is printed anyway, and no bar means no postfix, whose
    running loss would be a host read every ``log_every`` steps for no one."""
    if rank != 0 or not enabled:
        return None
    from tqdm import tqdm  # only for progress bars (train.progress)

    tqdm.monitor_interval = 0  # no monitor thread: nothing of ours outlives the run
    bar = tqdm(total=total, desc=desc, unit="batch", leave=False, dynamic_ncols=True, file=sys.stderr, disable=None)
    if bar.disable:
        bar.close()
        return None
    return bar


def append_skipped(path: Path, epoch: int, rows: Sequence[Skipped]) -> None:
    """``rows`` appended to ``skipped.txt`` at ``path`` as ``epoch\\tsplit\\tname\\treason`` lines."""
    if rows:
        with open(path, "a") as f:
            f.writelines(f"{epoch}\t{split}\t{name}\t{reason}\n" for split, name, reason in rows)


def epoch_skipped(mine: list[Skipped], epoch: int, path: Path, rank: int) -> dict[str, int]:
    """This epoch's skipped samples (``mine``: this rank's), gathered over ranks, appended to ``path`` by
    rank 0 (every rank's): ``{"train_skipped": N, "val_skipped": M}`` for the epoch's record."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        every: list = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
        mine = [x for part in every for x in part]
    if rank == 0:
        append_skipped(path, epoch + 1, mine)
    return {"train_skipped": sum(s == "train" for s, _, _ in mine), "val_skipped": sum(s == "val" for s, _, _ in mine)}


def skip_note(record: dict[str, Any], path: Path) -> str:
    """The epoch line's ending when samples were skipped (else ``""``)."""
    if not record["train_skipped"] + record["val_skipped"]:
        return ""
    return (f" | skipped {record['train_skipped']} train + {record['val_skipped']} val unreadable "
            f"(names in {path})")
