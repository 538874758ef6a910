"""The host process's memory: keep freed memory for reuse instead of handing it back to the kernel.

PyTorch's CPU tensors come from the C library's ``malloc``. glibc serves every block above its mmap
threshold (128 KiB at start, at most 32 MiB) with a fresh ``mmap`` and unmaps it on ``free``, and
trims the heap's free top back to the kernel. A device step run on the CPU allocates a dozen
batch-sized temporaries per op (a ``(32, 3, 224, 224)`` float32 tensor is 19 MiB), so each one is
faulted in page by page, zeroed by the kernel and unmapped again, batch after batch. Measured on the
DeiT list with one thread, that was 73,000 page faults and ~40% of the step's CPU time at batch 32,
349,000 faults and ~60% at batch 64 (``benchmarks/device_transforms.py``). A CUDA step never pays this:
its caching allocator reuses blocks. :func:`keep_freed_host_memory` gives the host the same reuse,
as PyTorch's CPU performance guide suggests with jemalloc or TCMalloc, but without preloading a
library: it tells glibc (``mallopt``) to serve large blocks from the heap rather than ``mmap``, and to
trim the heap only past ``trim_threshold`` of free memory at its top.

The cost is resident memory: a process keeps its peak heap (less what lies beyond
``trim_threshold``) instead of returning it between batches. PyTorch's 64-byte-aligned blocks can
miss a freed block of their own size by a few bytes, so the heap may take one more batch-sized
block before it settles: over 40 steps of DeiT's list at batch 32 the resident size settled at
~810 MB after 25 steps, with no page fault a step from then on.

``dctnet train`` calls this at start-up when its device is the CPU (a GPU's step allocates on the
GPU), and so does the ``dctnet bench`` command; a library call never does it behind a user's back.
Set ``DCTNET_HOST_ALLOCATOR=system`` to leave the C library's defaults alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

__all__ = ["keep_freed_host_memory"]

#: glibc's ``mallopt`` parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4

_applied: bool | None = None


def keep_freed_host_memory(trim_threshold: int = 1 << 30) -> bool:
    """Keep freed host memory in the process for reuse (glibc only; see the module's docstring):
    large blocks come from the heap instead of a fresh ``mmap`` each, and the heap is trimmed only
    when more than ``trim_threshold`` bytes lie free at its top.

    Returns True when the settings are in force, False where they cannot be (not glibc: macOS,
    Windows, musl) or where ``DCTNET_HOST_ALLOCATOR=system`` asks to leave the defaults. Process-wide
    and idempotent: the first call decides."""
    global _applied
    if not isinstance(trim_threshold, int) or isinstance(trim_threshold, bool) or not 0 < trim_threshold < 1 << 62:
        raise ValueError(f"trim_threshold must be a positive number of bytes, got {trim_threshold!r}")
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get("DCTNET_HOST_ALLOCATOR", "").strip().lower() == "system":
        return _applied
    if not sys.platform.startswith("linux"):
        return _applied
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        gnu = ctypes.CDLL(None).gnu_get_libc_version  # glibc's own symbol: musl has mallopt but not this
        gnu.restype = ctypes.c_char_p
        gnu()
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return _applied
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt's value is an int: clamp the threshold to what it can carry
    trim = min(trim_threshold, (1 << 31) - 1)
    _applied = bool(mallopt(_M_TRIM_THRESHOLD, trim)) and bool(mallopt(_M_MMAP_MAX, 0))
    return _applied
