"""The device of a training process (issue 40 item 5): under ``torchrun`` each rank takes the GPU of
its ``LOCAL_RANK`` whatever ``train.device`` says (``auto``, ``cuda``, or an index), so no two ranks
share GPU 0. :func:`dctnet.train.process.run_device` is pure (CUDA's presence is an argument), so it
is checked here without a GPU; :func:`start_process` is checked with CUDA and the process group
stubbed out."""

from __future__ import annotations

import types

import pytest
import torch

import dctnet.train.process as P
from dctnet.train.recipe import load_recipe


@pytest.mark.parametrize("want, local, world, cuda, expect", [
    ("auto", 0, 1, False, "cpu"),
    ("auto", 3, 4, False, "cpu"),
    ("auto", 0, 1, True, "cuda:0"),
    ("auto", 3, 4, True, "cuda:3"),
    ("cuda", 0, 1, True, "cuda:0"),
    ("cuda", 1, 2, True, "cuda:1"),      # all ranks on GPU 0 before
    ("cuda", 5, 8, True, "cuda:5"),
    ("cuda:1", 0, 1, True, "cuda:1"),    # one process: the recipe's index holds
    ("cuda:0", 1, 2, True, "cuda:1"),    # several: the local rank's GPU (timm's choice; logged)
    ("cuda:3", 3, 4, True, "cuda:3"),
    ("cpu", 2, 4, True, "cpu"),          # a CPU run under torchrun (gloo) stays on the CPU
    ("cpu", 0, 1, False, "cpu"),
])
def test_run_device(want, local, world, cuda, expect):
    assert P.run_device(want, local, world, cuda) == torch.device(expect)


def test_run_device_refuses_what_cannot_run():
    with pytest.raises(ValueError, match="CUDA is not available"):
        P.run_device("cuda", 0, 1, False)
    with pytest.raises(ValueError, match="CUDA is not available"):
        P.run_device("cuda:1", 1, 2, False)
    with pytest.raises(ValueError, match="is not a device"):
        P.run_device("gpu0", 0, 1, True)


@pytest.mark.parametrize("want, expect, overridden", [("cuda", "cuda:1", False), ("auto", "cuda:1", False),
                                                        ("cuda:0", "cuda:1", True), ("cuda:1", "cuda:1", False)])
def test_start_process_puts_each_torchrun_rank_on_its_local_gpu(monkeypatch, tmp_path, want, expect, overridden):
    """Rank 1 of 2 under torchrun's environment: its device is ``cuda:1``, set as the current device,
    the NCCL group is created, and an explicit other index is logged as overridden."""
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    current, groups, logged = [], [], []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    monkeypatch.setattr(P, "dist", types.SimpleNamespace(is_initialized=lambda: False,
                                                         init_process_group=groups.append))
    recipe = load_recipe(None, [f"train.device={want}", f"train.out={tmp_path / 'run'}"])
    proc = P.start_process(recipe, logged.append)
    assert (proc.rank, proc.world_size, proc.device) == (1, 2, torch.device(expect))
    assert current == [torch.device(expect)] and groups == ["nccl"]
    assert bool(logged) == overridden
    if overridden:
        assert "'cuda:0' overridden by cuda:1" in logged[0]
