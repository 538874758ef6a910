"""The dctnet command line: info on good and bad files, quality estimates."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import dctnet
from dctnet.quality import estimate_quality
from dctnet.synthetic import synthetic_jpeg


@pytest.mark.parametrize("quality", [1, 5, 20, 50, 75, 90, 100])
def test_estimate_quality_inverts_libjpeg_scaling(quality):
    hdr = dctnet.read_header(synthetic_jpeg(0, 16, 16, quality=quality))
    assert round(estimate_quality(hdr.quant_tables[0])) == quality
    assert round(estimate_quality(hdr.quant_tables[1], chroma=True)) == quality


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dctnet", *args], capture_output=True, text=True, timeout=120)


def test_info_good_and_bad_files(tmp_path):
    good = tmp_path / "good.jpg"
    good.write_bytes(synthetic_jpeg(1, 40, 56, quality=80, subsampling="4:2:2"))
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8 not really")
    out = run_cli("info", "--decode", str(good))
    assert out.returncode == 0, out.stderr
    assert "56x40" in out.stdout and "4:2:2" in out.stdout and "quality ~80" in out.stdout
    out = run_cli("info", str(good), str(bad), str(tmp_path / "missing.jpg"))
    assert out.returncode == 1
    assert "56x40" in out.stdout
    assert f"error: {bad}:" in out.stderr and "No such file" in out.stderr
    assert "Traceback" not in out.stderr


def test_info_without_files_names_the_libjpeg_the_extension_carries():
    out = run_cli("info")
    assert out.returncode == 0, out.stderr
    assert "libjpeg-turbo 2.1.5 (API 62)" in out.stdout and "third_party/libjpeg-turbo" in out.stdout


def test_help_lists_commands():
    out = run_cli("--help")
    assert out.returncode == 0 and "info" in out.stdout and "demo" in out.stdout


def test_demo_reports_fidelity_and_the_exact_decode(tmp_path):
    """`dctnet demo` on its built-in data: float decode within a few grey levels of Pillow, the
    exact decode with no differing pixel (its own table; the oracle is Pillow inside the command)."""
    env = {**os.environ, "DCTNET_DATA": str(tmp_path / "absent")}
    out = subprocess.run([sys.executable, "-m", "dctnet", "demo", "--device", "cpu"], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.split()[:1] in (["4:2:0"], ["4:2:2"], ["4:4:4"], ["gray"])]
    assert len(rows) == 4, out.stdout
    for layout, images, worst, mean, exact_differing in rows:
        assert int(images) > 0 and int(worst) <= 4 and float(mean) < 0.75 and int(exact_differing) == 0, out.stdout
