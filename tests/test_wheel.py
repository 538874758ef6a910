"""The wheel carries its own libjpeg: ``pip wheel .`` in a clean venv (no system libjpeg needed:
csrc/module.c refuses any jconfig.h but the vendored one), the built extension links no libjpeg
and exports nothing but its init function, and the wheel's own module reads the corpus's
coefficients bit-identical to jpeglib."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import venv
import zipfile

import pytest

from conftest import CORPUS, ROOT


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory):
    """The wheel built by a clean venv (its own pip and setuptools, no site packages), unpacked."""
    if shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    tmp = tmp_path_factory.mktemp("wheel")
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    # pip's own build isolation fetches setuptools and wheel as pyproject.toml asks, like a user's pip
    out = subprocess.run([str(py), "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"), str(ROOT)],
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0 and ("Could not find a version" in out.stderr or "NewConnectionError" in out.stderr):
        pytest.skip("no package index to fetch the build requirements from")
    assert out.returncode == 0, out.stderr[-3000:]
    wheels = sorted((tmp / "dist").glob("dctnet-*.whl"))
    assert len(wheels) == 1, wheels
    site = tmp / "site"
    with zipfile.ZipFile(wheels[0]) as z:
        z.extractall(site)
    return site


def _extension(site):
    found = sorted((site / "dctnet").glob("_jpeg*.so"))
    assert len(found) == 1, found
    return found[0]


def test_the_wheels_extension_links_no_libjpeg_and_exports_only_its_init(wheel_site):
    so = _extension(wheel_site)
    ldd = subprocess.run(["ldd", str(so)], capture_output=True, text=True, check=True).stdout
    assert "libjpeg" not in ldd, ldd
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True, check=True).stdout
    assert [line.split()[-1] for line in symbols.splitlines() if line.strip()] == ["PyInit__jpeg"], symbols
    assert (wheel_site / "dctnet" / "codec.py").exists()


@pytest.mark.skipif(not CORPUS.exists(), reason="needs ../shared/jpeg-corpus")
def test_the_wheel_reads_the_corpus_bit_identical_to_jpeglib(wheel_site):
    pytest.importorskip("jpeglib")
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(wheel_site)!r})
        sys.path.append({str(ROOT / "tests")!r})
        import dctnet
        assert dctnet.__file__.startswith({str(wheel_site)!r}), dctnet.__file__
        print(dctnet.codec.libjpeg_version())
        from conftest import corpus_file, corpus_rows
        from test_codec import check_against_libjpeg
        n = 0
        for row in corpus_rows():
            if row["libjpeg_coef"].startswith("error") or "Fractional sampling" in row["libjpeg_decode"]:
                continue
            check_against_libjpeg(corpus_file(row))
            n += 1
        print(n)
    """)
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    version, n = out.stdout.split("\n")[:2]
    assert version == "libjpeg-turbo 2.1.5 (API 62)"
    assert int(n) > 150  # the corpus's readable files
