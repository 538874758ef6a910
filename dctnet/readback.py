"""Where the training loops read device values on the host (or wait for the device on purpose):
:func:`log_point`, and nowhere else.

A read of a device tensor (``.item()``, ``.tolist()``, ``float(t)``) waits for every kernel queued
before it, and a copy from pageable host memory into device memory waits too: the GPU then idles
while the host draws and plans the next batch. The loops keep their running sums on the device and
read them back only at the log points that exist — a progress bar's postfix every ``log_every``
steps (only when the bar is shown), the end of an epoch, an evaluation's results, the checkpoint —
and the one-time waits of a compiled step's first calls (compiling, recording CUDA graphs). Each is
wrapped in :func:`log_point`, which:

- on CUDA lowers ``torch.cuda.set_sync_debug_mode`` to ``"default"`` for its duration, so a run under
  ``"error"`` (``benchmarks/gpu_check.sh``) fails on any *other* synchronising call;
- marks the thread as reading on purpose (:func:`at_log_point`), which the CPU test that simulates
  device memory (``tests/test_loop_syncs.py``) uses to tell documented reads from stray ones.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

__all__ = ["at_log_point", "log_point"]

_state = threading.local()


@contextlib.contextmanager
def log_point(device: torch.device | str | None = None) -> Iterator[None]:
    """A documented host read of device values (see the module docstring)."""
    mode = None
    if device is not None and torch.device(device).type == "cuda" and torch.cuda.is_available():
        mode = torch.cuda.get_sync_debug_mode()
        if mode:
            torch.cuda.set_sync_debug_mode(0)
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1
        if mode:
            torch.cuda.set_sync_debug_mode(mode)


def at_log_point() -> bool:
    """Whether this thread is inside :func:`log_point`."""
    return getattr(_state, "depth", 0) > 0
