"""The host allocator setting (dctnet.hostmem): a freed batch-sized block is reused instead of being
unmapped and faulted in again. Oracle: the kernel's own count of minor page faults (getrusage)
around a second allocation of the same size, in a fresh process each (the setting is process-wide)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dctnet.hostmem import keep_freed_host_memory

PROBE = r"""
import resource, sys, torch
from dctnet.hostmem import keep_freed_host_memory
applied = keep_freed_host_memory() if sys.argv[1] == "keep" else False
n = 64 << 20  # a 64 MiB temporary, well above glibc's largest mmap threshold (32 MiB)
torch.empty(n, dtype=torch.uint8).fill_(1)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
torch.empty(n, dtype=torch.uint8).fill_(1)
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _probe(mode: str, **env: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True,
                         env={**os.environ, **env}).stdout.split()
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_freed_block_is_reused_instead_of_faulted_in_again():
    applied, faults = _probe("keep")
    if not applied:
        pytest.skip("not glibc")
    _, system_faults = _probe("system")
    pages = (64 << 20) // os.sysconf("SC_PAGE_SIZE")
    assert system_faults > pages // 2, system_faults  # the default: every page faulted in afresh
    assert faults < pages // 20, faults


def test_the_environment_leaves_the_c_library_defaults():
    applied, faults = _probe("keep", DCTNET_HOST_ALLOCATOR="system")
    assert not applied
    assert faults > (64 << 20) // os.sysconf("SC_PAGE_SIZE") // 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1GiB"])
def test_the_threshold_is_a_positive_byte_count(bad):
    with pytest.raises(ValueError, match="trim_threshold"):
        keep_freed_host_memory(bad)
