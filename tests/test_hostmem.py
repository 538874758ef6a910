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
x = torch.rand(64, 3, 224, 224)  # a batch of 224² crops: 38.5 MiB, above glibc's largest mmap threshold


def step():  # a device step's pattern: batch-sized temporaries, freed before the next batch
    return ((x * 0.5 + 0.25).clamp_(0, 1) - x.flip(-1)).abs().sum()


def resident():
    return int(open("/proc/self/statm").read().split()[1])


for _ in range(10):  # the heap settles (glibc's aligned blocks can miss a freed one a few times first)
    step()
before, rss = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, resident()
for _ in range(5):
    step()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, resident() - rss)
"""

BLOCK_PAGES = 64 * 3 * 224 * 224 * 4 // os.sysconf("SC_PAGE_SIZE")


def _probe(mode: str, **env: str) -> tuple[bool, int, int]:
    # the C library's own tunables would change what "its defaults" are: left out of the probe's environment
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True,
                         env={**clean, **env}).stdout.split()
    return out[0] == "True", int(out[1]), int(out[2])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_batch_blocks_are_reused_instead_of_faulted_in_again():
    """Five steps of batch-sized temporaries: with the C library's defaults each is mapped and faulted
    in afresh (every page, every step); kept, they are reused — at most one more block is faulted in
    (glibc's aligned blocks can miss a freed one by a few bytes once), and the resident size does not
    grow with the steps."""
    applied, faults, grown = _probe("keep")
    if not applied:
        pytest.skip("not glibc")
    _, system_faults, _ = _probe("system")
    assert system_faults > 5 * BLOCK_PAGES, system_faults  # the default: several blocks a step
    assert faults <= 1.2 * BLOCK_PAGES and grown <= 1.2 * BLOCK_PAGES, (faults, grown, system_faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the probe reads /proc/self/statm")
def test_the_environment_leaves_the_c_library_defaults():
    applied, faults, _ = _probe("keep", DCTNET_HOST_ALLOCATOR="system")
    assert not applied
    assert faults > 5 * BLOCK_PAGES


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1GiB"])
def test_the_threshold_is_a_positive_byte_count(bad):
    with pytest.raises(ValueError, match="trim_threshold"):
        keep_freed_host_memory(bad)
