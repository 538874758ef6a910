"""Bad input never crashes, threads agree with serial decoding, memory stays flat."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import dctnet
from dctnet import _jpeg
from dctnet.synthetic import synthetic_jpeg

from conftest import CORPUS, ROOT, imagenette_files


def test_fuzz_mutations_never_crash():
    """A few thousand mutated corpus/synthetic files in a child process: a segfault shows up as a
    signal exit code, a hang as a timeout, anything but JpegError as a traceback."""
    cmd = [sys.executable, str(ROOT / "tests" / "fuzz_reader.py"), "--cases", "20000", "--seed", "1",
           "--corpus", str(CORPUS / "files")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"fuzzer exited with {out.returncode}:\n{out.stdout}\n{out.stderr[-3000:]}"
    assert "error" in out.stdout and "warned" in out.stdout
    print(out.stdout)


def test_scan_flood_is_refused():
    """A progressive file whose scans repeat thousands of times trips the scan limit instead of
    making libjpeg loop over the coefficient arrays for each one."""
    data = synthetic_jpeg(1, 16, 16, progressive=True)
    sos = data.index(b"\xff\xda")
    eoi = data.rindex(b"\xff\xd9")
    scans = data[sos:eoi]
    # repeat the whole scan sequence: refinement scans are legal to repeat for the parser
    flood = data[:sos] + scans * (_jpeg.MAX_SCANS // scans.count(b"\xff\xda") + 2) + b"\xff\xd9"
    with pytest.raises(dctnet.JpegError, match="scans"):
        dctnet.read_coefficients(flood, warnings="accept")  # (the repeats also warn "lost data")


def _files() -> list[str]:
    files = imagenette_files("val", every=20)
    if not files:
        files = []
        d = ROOT / "build" / "robust-synthetic"
        d.mkdir(parents=True, exist_ok=True)
        for i in range(100):
            p = d / f"{i}.jpg"
            if not p.exists():
                p.write_bytes(synthetic_jpeg(i, 64 + i, 96))
            files.append(str(p))
    return files


def test_concurrent_decoding_equals_serial():
    files = _files()
    serial = [dctnet.read_coefficients(f) for f in files]
    barrier = threading.Barrier(4)

    def work(offset: int) -> list:
        barrier.wait()
        order = files[offset:] + files[:offset]  # different threads on different files at once
        return [(f, dctnet.read_coefficients(f)) for f in order]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(0, 4 * 7, 7)))
    ref = dict(zip(files, serial))
    for res in results:
        for f, c in res:
            for a, b in zip(c.planes, ref[f].planes):
                np.testing.assert_array_equal(a, b)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_rss_flat_over_many_decodes_including_errors():
    good = synthetic_jpeg(2, 96, 128)
    truncated = good[: len(good) // 2]
    corrupt = bytearray(good)
    corrupt[len(good) // 3] ^= 0x55
    lossless = good.replace(b"\xff\xc0", b"\xff\xc3", 1)
    out = np.empty(dctnet.read_header(good).nbytes, np.uint8)

    def round_() -> None:
        dctnet.read_coefficients(good)
        dctnet.read_coefficients(good, out=out)
        dctnet.read_coefficients(truncated, warnings="accept")
        dctnet.read_header(good)
        dctnet.read_coefficients(bytes(corrupt), warnings="accept")
        for bad, kw in ((truncated, {}), (truncated, {"warnings": "strict"}), (b"\xff\xd8garbage", {}), (lossless, {}),
                        (good, {"max_pixels": 10})):
            with pytest.raises(dctnet.JpegError):
                dctnet.read_coefficients(bad, **kw)

    for _ in range(1000):
        round_()
    before = _rss_bytes()
    for _ in range(4000):  # 36,000 calls, a third of them failing
        round_()
    growth = _rss_bytes() - before
    assert growth < 4 << 20, f"RSS grew by {growth / 2**20:.1f} MiB"


def test_output_pool_reuses_buffers():
    data = synthetic_jpeg(3, 64, 64)
    _jpeg.pool_clear()
    c = dctnet.read_coefficients(data)
    addr = c.planes[0].ctypes.data
    del c
    assert _jpeg.pool_info()["buffers"] == 1
    c2 = dctnet.read_coefficients(data)
    assert c2.planes[0].ctypes.data == addr  # the same resident memory, no fresh page faults
    assert _jpeg.pool_info()["buffers"] == 0
    keep = c2.planes[0]
    del c2  # a plane still alive keeps the buffer out of the pool
    assert _jpeg.pool_info()["buffers"] == 0 and keep.sum() is not None


def test_output_pool_makes_room_for_new_sizes():
    """When the workload changes size (say from small images to large ones), buffers of the old
    sizes must not hold the pool full for good: giving back a buffer the pool has no room for
    evicts the oldest ones, so the new size is reused instead of page-faulted in afresh."""
    _jpeg.pool_clear()
    small = [_jpeg.alloc(1 << 20) for _ in range(256)]  # 256 MiB of small buffers: the pool's capacity
    del small
    full = _jpeg.pool_info()
    assert full["bytes"] >= 255 << 20
    big = _jpeg.alloc(40 << 20)  # no pooled buffer fits: a fresh one
    addr = np.frombuffer(big, np.uint8).ctypes.data
    del big
    after = _jpeg.pool_info()
    assert after["bytes"] <= 256 << 20 and after["buffers"] < full["buffers"]  # old ones evicted
    again = _jpeg.alloc(40 << 20)
    assert np.frombuffer(again, np.uint8).ctypes.data == addr  # the big buffer was kept and reused
    del again
    _jpeg.pool_clear()
