"""Run files on disk, treated as fallible: an output folder that cannot be written, a disk that fills
up while a checkpoint is written, a ``last.pt`` that was cut short or damaged.

Each becomes an ``OSError`` naming the path and the reason (``dctnet`` prints ``error: PATH:
reason``) or a ``ValueError`` saying what to do, and leaves no partial file behind: a checkpoint is
serialised in memory first, its size checked against the free space, written to ``last.tmp`` and
renamed over ``last.pt`` (atomic: a killed run keeps the previous one).
"""

from __future__ import annotations

import errno
import io
import os
import pickle
import shutil
import uuid
from pathlib import Path
from typing import Any

import torch

__all__ = ["check_room", "check_writable", "read_checkpoint", "state_bytes", "write_checkpoint"]

#: free space kept beyond a checkpoint's size (the file system's own bookkeeping, other writers)
ROOM_MARGIN = 16 << 20


def check_writable(folder: Path) -> None:
    """Create ``folder`` (and its parents) and write and remove a probe file in it: a run whose
    output cannot be written is refused at start, not after an epoch. Raises ``OSError`` naming the
    path."""
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".dctnet-write-probe-{uuid.uuid4().hex}"
    try:
        probe.write_bytes(b"")
    finally:
        probe.unlink(missing_ok=True)


def state_bytes(state: Any) -> int:
    """The bytes of the tensors in a nested checkpoint state (dicts, lists, tuples): what its file
    holds, up to the pickled structure around them."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state)
    return 0


def check_room(path: Path, nbytes: int) -> None:
    """Raise ``OSError(ENOSPC)`` naming ``path`` when its folder has less free space than
    ``nbytes`` plus a margin: checked before a checkpoint is written (and after a run's first step,
    when its size is known), so a full disk stops a run early and cleanly."""
    free = shutil.disk_usage(path.parent).free
    if free < nbytes + ROOM_MARGIN:
        raise OSError(errno.ENOSPC, f"No space left on device: the checkpoint needs {nbytes / 2**20:.0f} MiB, "
                                    f"{free / 2**20:.0f} MiB free", str(path))


def write_checkpoint(state: dict[str, Any], path: Path) -> None:
    """``torch.save(state)`` to ``path`` atomically: serialised in memory, the free space checked,
    written to ``path.with_suffix(".tmp")`` and renamed. A failed write removes the partial file and
    raises ``OSError`` with the errno and the path (torch's own writer reports a full disk as
    ``basic_ios::clear: iostream error``, naming neither)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getbuffer()
    check_room(path, len(data))
    tmp = path.with_suffix(".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic: a killed run leaves the previous checkpoint intact
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None


def read_checkpoint(path: Path, map_location: Any) -> dict[str, Any]:
    """``torch.load(path, weights_only=True)``; a file that is not a readable checkpoint (cut short,
    damaged, another format) raises ``ValueError`` naming it, the reason, and whether an older
    checkpoint lies beside it."""
    with open(path, "rb"):  # a missing or unreadable file is the file system's error (OSError), not damage
        pass
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, KeyError, AttributeError, TypeError, IndexError,
            UnicodeDecodeError, pickle.UnpicklingError) as exc:  # (torch's reader: OSError EINVAL on garbage)
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        older = sorted(p.name for p in path.parent.glob("*.pt") if p.name != path.name)
        beside = (f"other checkpoints beside it: {', '.join(older)}" if older else
                  "no older checkpoint beside it (a run keeps only last.pt)")
        raise ValueError(f"--resume: {path} is damaged or not a checkpoint ({reason}); {beside}. Delete it to "
                         "start afresh, or train into another --out") from None
    if not isinstance(state, dict):
        raise ValueError(f"--resume: {path} is not a dctnet checkpoint (a {type(state).__name__}, not a dict)")
    return state
