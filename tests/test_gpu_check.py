"""benchmarks/gpu_check.sh on a machine without CUDA: it must not say "ok" when it is not.

Without a GPU the script exits non-zero with a one-line reason (0 only with --allow-no-gpu); a GPU
that nvidia-smi lists but torch does not see fails loudly; and its step bookkeeping (steps.jsonl,
the summary line, the exit status) runs under GPU_CHECK_DRY=1, every step's command replaced by
``true``. The four runs start at once (two import torch: a few seconds in all).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible: the script would run its steps")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[int, str, Path]]:
    """name → (exit status, stdout, $OUT) of each run, started together."""
    base = tmp_path_factory.mktemp("gpu_check")
    fake = base / "bin"
    fake.mkdir()
    smi = fake / "nvidia-smi"  # a driver that lists a GPU torch does not see
    smi.write_text("#!/bin/sh\necho '535.104.05, NVIDIA H100 80GB HBM3'\n")
    smi.chmod(0o755)
    old_driver = fake / "python"  # as torch answers the script's probe there (no torch import: fast)
    old_driver.write_text("#!/bin/sh\n"
                          "echo 'x/torch/cuda/__init__.py:1: UserWarning: CUDA initialization: The NVIDIA driver on your "
                          "system is too old (found version 11040).' >&2\n"
                          "echo '  return torch._C._cuda_getDeviceCount() > 0' >&2\n"
                          "echo '2.14.1+cu130 13.0 0'\n")
    old_driver.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "GPU_CHECK_DRY")}
    env["PY"] = sys.executable
    plans = {
        "no-gpu": ([], {}),
        "allow": (["--allow-no-gpu"], {}),
        "driver-only": (["--allow-no-gpu"], {"PATH": f"{fake}{os.pathsep}{env.get('PATH', '')}", "PY": str(old_driver)}),
        "dry": ([], {"GPU_CHECK_DRY": "1"}),
    }
    procs = {}
    for name, (args, extra) in plans.items():
        out = base / name
        procs[name] = (subprocess.Popen(["bash", str(SCRIPT), *args], env={**env, **extra, "OUT": str(out)},
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), out)
    results = {}
    for name, (proc, out) in procs.items():
        stdout, _ = proc.communicate(timeout=120)
        results[name] = (proc.returncode, stdout, out)
    return results


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="nvidia-smi is installed here")
def test_no_gpu_fails_with_one_line(runs):
    rc, stdout, out = runs["no-gpu"]
    lines = stdout.splitlines()
    assert rc != 0, stdout
    assert len(lines) == 1, stdout
    assert lines[0].startswith("gpu_check: no CUDA device (nvidia-smi: none; torch "), stdout
    assert lines[0].endswith("pass --allow-no-gpu to exit 0"), stdout
    assert (out / "summary.txt").read_text().splitlines() == lines
    assert not (out / "steps.jsonl").exists()


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="nvidia-smi is installed here")
def test_allow_no_gpu_exits_0_with_the_same_line(runs):
    rc, stdout, _ = runs["allow"]
    assert rc == 0, stdout
    assert stdout.splitlines() == runs["no-gpu"][1].splitlines()


def test_a_gpu_torch_does_not_see_fails_even_when_allowed(runs):
    rc, stdout, _ = runs["driver-only"]
    assert rc == 1, stdout
    lines = stdout.splitlines()
    assert len(lines) == 2, stdout
    assert lines[0] == ("gpu_check: torch 2.14.1+cu130 (torch.version.cuda 13.0); nvidia-smi (driver_version, name): "
                        "535.104.05, NVIDIA H100 80GB HBM3; torch says: CUDA initialization: The NVIDIA driver on your "
                        "system is too old (found version 11040).")
    assert lines[1] == ("gpu_check: FAILED: torch does not see the GPU the driver sees (likely a driver too old for "
                        "the wheel's CUDA 13.0)")


def test_dry_run_records_every_step_within_the_budget(runs):
    rc, stdout, out = runs["dry"]
    assert rc == 0, stdout
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert len(steps) >= 8
    assert all(s["rc"] == 0 and s["timed_out"] is False and isinstance(s["seconds"], int) for s in steps)
    assert sum(s["timeout_s"] for s in steps) <= 480  # runs once and reruns once in a 15-minute lease
    names = [s["step"] for s in steps]
    assert names[0] == "CUDA tests"
    share = names.index("share of a ViT-S step")
    assert all(share < i for i, n in enumerate(names) if "compile" in n)  # the share before any compile arm
    assert stdout.splitlines()[-1] == f"gpu_check: all {len(steps)} steps passed"
    assert len(list((out / "steps").glob("*.log"))) == len(steps)
