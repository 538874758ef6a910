"""Untrusted input and concurrency around the C extension: caches read by several threads and
ranks, tampered cache files, hostile JPEG headers, re-entrant and concurrent callers, fork.

Work that could crash the interpreter runs in a child process, so a regression shows up as a
failing test (the signal in the exit code) rather than as a dead test run."""

from __future__ import annotations

import gc
import os
import struct
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest
import yaml

import dctnet
from dctnet import _jpeg
from dctnet import data as D
from dctnet.synthetic import encode_jpeg, labelled_image, synthetic_jpeg

from conftest import ROOT

ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))


def run_child(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=ENV)
    assert r.returncode == 0, f"exit {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def folder_420(root, n=96, size=(48, 80)):
    """Files the fast C gather takes: 4:2:0 at mixed qualities and odd sizes, every 7th grayscale."""
    for i in range(n):
        d = root / f"c{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        kw = dict(gray=True) if i % 7 == 0 else dict(quality=(50, 75, 95)[i % 3])
        (d / f"{i:03d}.jpg").write_bytes(synthetic_jpeg(i, size[0] + i % 13, size[1] - i % 11, **kw))
    return root


def jpeg_header(width: int, height: int, sampling: list[tuple[int, int]]) -> bytes:
    """A baseline JPEG that is only a header (DQT, SOF0 with these components, DHT, SOS of the first
    component) and no entropy-coded data: what a bomb or a truncated download looks like."""
    seg = lambda marker, body: b"\xff" + bytes([marker]) + struct.pack(">H", len(body) + 2) + body  # noqa: E731
    dqt = seg(0xDB, b"\x00" + bytes([1] * 64))
    sof = seg(0xC0, struct.pack(">BHHB", 8, height, width, len(sampling)) +
              b"".join(bytes([i + 1, (h << 4) | v, 0]) for i, (h, v) in enumerate(sampling)))
    one_code = bytes([1] + [0] * 15) + b"\x00"  # one 1-bit code for symbol 0 (DC: no diff; AC: EOB)
    dht = seg(0xC4, b"\x00" + one_code + b"\x10" + one_code)
    sos = seg(0xDA, b"\x01\x01\x00\x00\x3f\x00")
    return b"\xff\xd8" + dqt + sof + dht + sos + b"\xff\xd9"


# ------------------------------------------------------------------------------- concurrent reads

@pytest.mark.parametrize("fmt", ["dense", "sparse"])
def test_cache_reads_with_2_to_4_threads_equal_one_thread(tmp_path, fmt):
    """A crash once seen: ThreadLoader threads opened a lazily mapped cache at once; one map was
    replaced (and unmapped) while the other thread's GIL-free C gather read it. Four part files,
    each first used by parallel threads, several epochs; every batch equals the one-thread read."""
    src = folder_420(tmp_path / "src", n=160)
    out = D.build_cache(src, tmp_path / "cache", format=fmt, workers=4, progress=False)
    run_child(str(ROOT / "tests" / "cache_worker.py"), "threads", str(src), str(out), "--epochs", "4")


def train_recipe(tmp_path, root: str, fmt: str) -> str:
    data = {"source": "cache", "root": root, "image_size": 32, "batch_size": 16, "workers": 0, "scale": [0.3, 1.0]}
    recipe = {"name": f"cache-{fmt}", "data": data,  # no "threads": the recipe default (2) applies
              "model": {"arch": "resnet18", "input": "dct", "stem": "dct8"},
              "optim": {"lr": 0.05, "lr_batch": 16, "epochs": 3, "warmup_epochs": 0.5},
              "train": {"out": str(tmp_path / f"run-{fmt}"), "progress": False, "torch_threads": 1}}
    path = tmp_path / f"{fmt}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


@pytest.mark.parametrize("fmt", ["dense", "sparse"])
def test_dctnet_train_from_a_cache_with_default_threads(tmp_path, fmt):
    """`dctnet train` with `data.source: cache` and the default two loader threads (the way the
    crash was first met), on 4:2:0 photos-like images so every batch takes the C gather."""
    assert "threads" not in yaml.safe_load(open(train_recipe(tmp_path, "x", fmt)))["data"]
    rng = np.random.default_rng(0)
    for split, n in (("train", 48), ("val", 12)):
        for label in range(3):
            d = tmp_path / "jpg" / split / f"c{label}"
            d.mkdir(parents=True)
            for i in range(n):
                (d / f"{i}.jpg").write_bytes(encode_jpeg(labelled_image(rng, label, 48, 56), quality=80))
        D.build_cache(tmp_path / "jpg" / split, tmp_path / "caches" / split, format=fmt, workers=2, progress=False)
    r = run_child("-m", "dctnet", "train", train_recipe(tmp_path, str(tmp_path / "caches"), fmt), timeout=600)
    assert (tmp_path / f"run-{fmt}" / "metrics.jsonl").read_text().count("\n") == 3, r.stdout + r.stderr


# ------------------------------------------------------------------------------- tampered caches

@pytest.fixture()
def cache420(tmp_path):
    src = folder_420(tmp_path / "src", n=24)
    return {fmt: D.build_cache(src, tmp_path / fmt, format=fmt, progress=False) for fmt in ("dense", "sparse")}


def edit_index(cache, **fields) -> None:
    index = np.load(cache / "index.npy").copy()
    for key, (i, value) in fields.items():
        name, _, comp = key.partition("__")
        if comp:
            index[name][i][tuple(int(c) for c in comp.split("_"))] = value
        else:
            index[name][i] = value
    np.save(cache / "index.npy", index)


def refused(cache, match: str) -> None:
    with pytest.raises(D.CacheError, match=match) as exc:
        ds = D.CacheDataset(cache, crop=D.RandomResizedCrop(), verify="none")
        ds.load_collated([(0, i) for i in range(len(ds))])
    assert "record" in str(exc.value) or "tables.npy" in str(exc.value), str(exc.value)


@pytest.mark.parametrize("fmt", ["dense", "sparse"])
def test_negative_block_counts_with_a_matching_product_are_refused(cache420, fmt):
    """bh·bw unchanged (so nbytes still matches) but both negative: the plane start moved before
    the record. Today: garbage or SIGSEGV in gather_420."""
    cache = cache420[fmt]
    bh, bw = np.load(cache / "index.npy")["blocks"][3, 0]
    edit_index(cache, blocks__0_0=(3, -int(bh)), blocks__0_1=(3, -int(bw)))
    refused(cache, "record 3 .*block counts")


def test_block_counts_whose_byte_size_wraps_are_refused(cache420):
    """Σ bh·bw·128 wrapping around 2^64 to the record's real size: Cb becomes 2^28 × 2^29 blocks
    (2^57 · 128 = 2^64) and Cr carries both real chroma counts."""
    cache = cache420["dense"]
    index = np.load(cache / "index.npy")
    i = int(np.flatnonzero(index["ncomp"] == 3)[0])
    (y0, y1), (b0, b1), (r0, r1) = (tuple(int(v) for v in index["blocks"][i, c]) for c in range(3))
    total = y0 * y1 + 2**57 + b0 * b1 + r0 * r1
    assert (total * 128) % 2**64 == index["nbytes"][i]  # the old int64 check wrapped to the real size
    edit_index(cache, blocks__1_0=(i, 2**28), blocks__1_1=(i, 2**29), blocks__2_0=(i, 1), blocks__2_1=(i, b0 * b1 + r0 * r1))
    refused(cache, f"record {i} .*block counts")


@pytest.mark.parametrize("fmt", ["dense", "sparse"])
def test_an_offset_beyond_2_63_is_refused(cache420, fmt):
    """offset ≥ 2^63 is negative as int64: `offset + nbytes > size` passed."""
    edit_index(cache420[fmt], offset=(2, 2**63 + 8))
    refused(cache420[fmt], "record 2 .*past its part file")


@pytest.mark.parametrize("fmt", ["dense", "sparse"])
def test_misaligned_offsets_are_refused(cache420, fmt):
    """Odd offsets made the C side load uint64 masks from misaligned addresses (UBSan)."""
    edit_index(cache420[fmt], offset=(1, int(np.load(cache420[fmt] / "index.npy")["offset"][1]) + 1))
    refused(cache420[fmt], "record 1 .*aligned")


def test_tables_with_fewer_rows_than_the_index_are_refused(cache420):
    """The sparse gather read table rows past the end of tables.npy (SIGSEGV)."""
    cache = cache420["sparse"]
    np.save(cache / "tables.npy", np.load(cache / "tables.npy")[:3])
    with pytest.raises(D.CacheError, match=r"tables\.npy: expected uint16 \(24, 4, 64\), found uint16 \(3, 4, 64\)"):
        D.open_cache(cache, verify="none")


def test_hostile_meta_json_is_refused(cache420):
    import json

    cache = cache420["dense"]
    meta = json.loads((cache / "meta.json").read_text())
    for key, value in (("parts", ["../../../etc/passwd"]), ("parts", ["/etc/passwd"]), ("num_samples", 10**9),
                       ("format", "raw"), ("sources", None), ("classes", [1, 2]),
                       ("shard_pattern", "../../*.tar"), ("shard_pattern", "/etc/*"), ("shard_pattern", 3),
                       ("shard_pattern", "")):
        bad = dict(meta, **{key: value})
        (cache / "meta.json").write_text(json.dumps(bad))
        with pytest.raises(D.CacheError, match="meta.json|format"):
            D.open_cache(cache, verify="none")
    (cache / "meta.json").write_text("[" * 100000)
    with pytest.raises(D.CacheError, match="JSON"):
        D.open_cache(cache, verify="none")


def gather_args(cache, i: int = 0):
    """One honest gather_planes call for sample ``i``: (items (1, 31), outputs)."""
    index = np.asarray(cache.index)
    nc = int(index["ncomp"][i])
    item = np.zeros((1, 31), np.int64)
    item[0, :5] = index["part"][i], index["offset"][i], index["nbytes"][i], i, nc
    item[0, 5:9], item[0, 9:13] = index["blocks"][i, :, 0], index["blocks"][i, :, 1]
    item[0, 13:15] = index["nvalues"][i], index["nescapes"][i]
    samp = index["sampling"][i]
    item[0, 15:19], item[0, 19:23] = 0, samp[:, 1]  # a window of one MCU: rows [0, v_c), cols [0, h_c)
    item[0, 23:27], item[0, 27:31] = 0, samp[:, 0]
    outs = [np.zeros((1, int(v), int(h), 64), np.int16) for h, v in samp[:nc]]
    return item, outs


@pytest.mark.parametrize("fmt", ["dense", "sparse"])
def test_the_c_gather_checks_its_own_preconditions(cache420, fmt):
    """The C side never trusts the caller: items pointing outside a part, at a missing table row,
    into a window wider than the output, or at a negative window are refused with ValueError, and
    so are outputs that share memory with the items, the tables or a part (a write into them
    would change what is read next: the reviewer's out-of-bounds read through aliasing)."""
    cache = D.open_cache(cache420[fmt], verify="none")
    i = int(np.flatnonzero(np.asarray(cache.index)["ncomp"] == 3)[0])
    good, outs = gather_args(cache, i)
    code = int(fmt == "sparse")
    _jpeg.gather_planes(cache._parts, cache.tables, good, code, outs)  # the honest item works
    want = cache.coefficients(i).planes
    assert all(np.array_equal(o[0], p[: o.shape[1], : o.shape[2]]) for o, p in zip(outs, want))
    size = len(cache._parts[0])
    for col, value in ((0, 1), (0, -1), (1, size), (1, -8), (1, 4), (2, size + 1), (3, 10**6), (3, -1), (4, 2), (4, 1),
                       (5, -2), (5, 1 << 40), (15, -1), (19, 5), (27, 3), (16, 2), (13, -1), (14, 10**9)):
        bad = good.copy()
        bad[0, col] = value
        if col == 3 and fmt == "dense":
            continue  # dense records use no table
        with pytest.raises(ValueError, match="gather_planes"):
            _jpeg.gather_planes(cache._parts, cache.tables, bad, code, outs)
    small = [np.zeros((1, 1, 1, 64), np.int16)] * 3
    with pytest.raises(ValueError, match="gather_planes"):
        _jpeg.gather_planes(cache._parts, cache.tables, good, code, small)  # outputs smaller than the window
    with pytest.raises(ValueError, match="gather_planes"):
        _jpeg.gather_planes(cache._parts, cache.tables, good, code, [o.astype(np.int32) for o in outs])
    # aliasing: an output that is the items' own memory, the tables, a part, or another output
    buf = np.zeros(4096, np.int16)
    alias_items = buf[: 31 * 4].view(np.int64).reshape(1, 31)
    alias_items[:] = good
    aliased = [buf[: 64 * 2 * 2].reshape(1, 2, 2, 64), outs[1], outs[2]]
    for args in ((cache._parts, cache.tables, alias_items, code, aliased),
                 (cache._parts, np.ascontiguousarray(cache.tables), good, code, [outs[0], outs[1], outs[1]])):
        with pytest.raises(ValueError, match="shares memory"):
            _jpeg.gather_planes(*args)
    tables = np.array(cache.tables)
    with pytest.raises(ValueError, match="shares memory"):
        aliased = tables[:1, :1, :64].view(np.int16).reshape(1, 1, 1, 64)
        _jpeg.gather_planes(cache._parts, tables, good, code, [aliased] + outs[1:])
    part = np.array(cache._parts[0])
    with pytest.raises(ValueError, match="shares memory"):
        _jpeg.gather_planes([part], cache.tables, good, code, [part[:128].view(np.int16).reshape(1, 1, 1, 64)] + outs[1:])


def test_sparse_expand_checks_table_indices_alignment_and_aliasing():
    """sparse_expand checked its table indices before releasing the GIL and read them again after
    (an output aliasing them could change them in between), and took misaligned tables/outputs."""
    masks = np.array([1, 1], np.uint64)
    values, escapes = np.array([5, 7], np.int8), np.zeros(0, np.int16)
    tables = np.ones((1, 64), np.uint16)
    out = np.zeros((2, 64), np.int16)
    _jpeg.sparse_expand(masks, values, escapes, tables, np.zeros(2, np.uint8), out)
    assert out[:, 0].tolist() == [5, 7]
    with pytest.raises(ValueError, match="table index"):
        _jpeg.sparse_expand(masks, values, escapes, tables, np.array([0, 1], np.uint8), out)
    shared = np.zeros(2 * 64 + 1, np.int16)
    with pytest.raises(ValueError, match="shares memory"):  # the indices live in the output
        _jpeg.sparse_expand(masks, values, escapes, tables, shared[127:128].view(np.uint8), shared[:128])
    raw = np.zeros(2 * 128 + 1, np.uint8)
    with pytest.raises(ValueError, match="aligned"):
        _jpeg.sparse_expand(masks, values, escapes, tables, np.zeros(2, np.uint8), memoryview(raw)[1:])
    raw_t = np.zeros(129, np.uint8)
    with pytest.raises(ValueError, match="aligned"):
        _jpeg.sparse_expand(masks, values, escapes, memoryview(raw_t)[1:], np.zeros(2, np.uint8), out)


def test_cache_verify_reports_a_tampered_cache(cache420, capsys):
    from dctnet.cli import main

    edit_index(cache420["dense"], blocks__1_1=(4, 3))
    with pytest.raises(SystemExit) as exit_:
        main(["cache", "verify", str(cache420["dense"])])
    assert exit_.value.code == 1
    assert "record 4 (c0/012.jpg): block counts do not match" in capsys.readouterr().err


def test_cache_fuzzer_a_few_thousand_cases():
    """Tampered index/tables/meta/parts of dense and sparse caches, opened and read in a child:
    every outcome is a read or a CacheError (`make fuzz` runs 100,000 under ASan+UBSan)."""
    r = run_child(str(ROOT / "tests" / "fuzz_cache.py"), "--cases", "3000", "--seed", "1", timeout=600)
    assert "findings 0" in r.stdout and "refused at open" in r.stdout, r.stdout
    print(r.stdout)


# ------------------------------------------------------------------------------- the JPEG reader

def test_read_many_holds_its_sources_while_the_gil_is_released():
    """Another thread drops the list's reference to a source while read_many decodes without the
    GIL: the source stays alive (read_many owns a reference) and its error names it. Today the
    reference was borrowed: a use-after-free in the error path."""
    class Path(str):  # a str that can be watched with a weak reference
        pass

    slow = [synthetic_jpeg(i, 512, 512) for i in range(24)]  # ~50 ms of GIL-free decoding
    for attempt in range(10):
        missing = Path(f"/nonexistent/dctnet-{attempt}.jpg")
        watch = weakref.ref(missing)
        sources = slow + [missing]
        del missing
        seen = {}

        def mutate():
            time.sleep(0.005)
            sources[-1] = "replaced"
            gc.collect()
            seen["alive"] = watch() is not None

        t = threading.Thread(target=mutate)
        t.start()
        result = _jpeg.read_many(sources, False, 0, 0)
        t.join()
        assert isinstance(result[-1], FileNotFoundError)
        if result[-1].filename == "replaced":
            # On a loaded machine the other thread can run before read_many takes the list: then
            # "replaced" is the source it was given, rightly named, and this attempt tests nothing.
            continue
        assert result[-1].filename == f"/nonexistent/dctnet-{attempt}.jpg"
        if seen.get("alive"):
            return  # the mutation landed inside the call and the source outlived it
    pytest.fail("the other thread never ran inside read_many's GIL-free stretch")


def test_timing_entries_refuse_a_huge_repeat():
    """`repeat` sized a malloc whose size wrapped (heap overflow)."""
    data = synthetic_jpeg(0, 16, 16)
    for fn in (_jpeg.time_read, _jpeg.time_raw):
        with pytest.raises(ValueError, match="repeat"):
            fn(data, 2**61 + 1)
        with pytest.raises(ValueError, match="repeat"):
            fn(data, 0)
        assert len(fn(data, 3)) == 3


def test_a_reentrant_read_from_a_gc_callback_gets_its_own_job():
    """A GC callback (or __del__, a profiler hook) that reads a JPEG while another read on the
    same thread is building its result: both results are right, no buffer stays locked, no pool
    memory leaks. Today the inner call overwrote the outer call's per-thread job."""
    outer_src = bytearray(synthetic_jpeg(1, 64, 48))
    inner_src = bytearray(synthetic_jpeg(2, 40, 24, subsampling="4:4:4"))
    want_outer, want_inner = dctnet.read_coefficients(bytes(outer_src)), dctnet.read_coefficients(bytes(inner_src))
    inner_results, state = [], {"inside": False}

    def callback(phase, info):
        if phase == "start" and state["inside"] and len(inner_results) < 50:
            inner_results.append(dctnet.read_coefficients(inner_src))

    threshold = gc.get_threshold()
    gc.callbacks.append(callback)
    gc.set_threshold(1)  # collect on (nearly) every allocation: inside the C call's result building
    try:
        for _ in range(20):
            state["inside"] = True
            got = dctnet.read_coefficients(outer_src)
            state["inside"] = False
            assert (got.width, got.height, got.subsampling) == (want_outer.width, want_outer.height, "4:2:0")
            assert all(np.array_equal(a, b) for a, b in zip(got.planes, want_outer.planes))
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(*threshold)
    assert inner_results, "the callback never ran inside a read"
    for r in inner_results:
        assert r.subsampling == "4:4:4" and all(np.array_equal(a, b) for a, b in zip(r.planes, want_inner.planes))
    outer_src.extend(b"\0")  # BufferError ("Existing exports") if a read left the buffer locked
    inner_src.extend(b"\0")


def test_max_bytes_bounds_what_a_header_can_allocate():
    """max_pixels counts pixels, not components x sampling x padding: a header declaring 4
    components at 4x4 sampling asks for 8 bytes a pixel. max_bytes refuses before allocating."""
    bomb = jpeg_header(20000, 20000, [(4, 4)] * 4)
    assert len(bomb) < 150
    with pytest.raises(dctnet.JpegError, match="max_bytes"):
        dctnet.read_coefficients(bomb, max_pixels=None)  # 3.2 GB of planes: refused by the default
    with pytest.raises(dctnet.JpegError, match="max_bytes"):
        dctnet.read_header(bomb, max_pixels=None)
    small = jpeg_header(3000, 3000, [(2, 2), (1, 1), (1, 1)])  # 27 MB of planes
    assert dctnet.read_header(small).nbytes == (376 * 376 + 2 * 188 * 188) * 2 * 64
    with pytest.raises(dctnet.JpegError, match="needs 27144192 bytes .* max_bytes=1000000"):
        dctnet.read_coefficients(small, max_bytes=1_000_000)
    [res] = dctnet.read_coefficients_batch([small], max_bytes=1_000_000, errors="return")
    assert isinstance(res, dctnet.JpegError) and "max_bytes" in res.reason
    accepted = dctnet.read_coefficients(small, max_bytes=None, warnings="accept")
    assert accepted.num_warnings > 0 and accepted.lost_data  # truncated: zeros + a warning
    for policy in ("raise", "strict"):
        with pytest.raises(dctnet.JpegError, match="(?i)premature end"):
            dctnet.read_coefficients(small, max_bytes=None, warnings=policy)


@pytest.mark.parametrize("limit", ["max_pixels", "max_bytes"])
def test_negative_limits_are_refused_in_single_and_batch_reads(limit):
    """read_coefficients_batch passed max_pixels through a "K" format: -1 became 2^64-1 (no limit)."""
    data = synthetic_jpeg(0, 16, 16)
    for call in (lambda: dctnet.read_coefficients(data, **{limit: -1}),
                 lambda: dctnet.read_header(data, **{limit: -5}),
                 lambda: dctnet.read_coefficients_batch([data, data], **{limit: -1})):
        with pytest.raises(ValueError, match=f"{limit} must be >= 0"):
            call()
    for args in ((data, None, False, -1, 0, False, None), (data, None, False, 0, -1, False, None)):
        with pytest.raises(ValueError, match="must be >= 0"):
            _jpeg.read(*args)  # the C side checks too
    with pytest.raises(ValueError, match="must be >= 0"):
        _jpeg.read_many([data], False, -1, 0)


@pytest.mark.parametrize("ncomp", [2, 5, 10])
def test_component_counts_other_than_1_3_4_are_refused(tmp_path, ncomp):
    """A 5-component JPEG read fine and then aborted build_cache even with on_error='skip'."""
    data = jpeg_header(16, 16, [(1, 1)] * ncomp)
    with pytest.raises(dctnet.JpegError, match=f"{ncomp} components"):
        dctnet.read_coefficients(data)
    src = folder_420(tmp_path / "src", n=6)
    (src / "c0" / "odd.jpg").write_bytes(data)
    out = D.build_cache(src, tmp_path / "cache", format="sparse", on_error="skip", progress=False)
    cache = D.open_cache(out)
    assert [os.path.relpath(b["path"], src) for b in cache.meta["bad"]] == [os.path.join("c0", "odd.jpg")]
    assert "components" in cache.meta["bad"][0]["reason"]


def test_a_fifo_is_refused_without_blocking(tmp_path):
    """A FIFO named *.jpg blocked the reader in open() for ever (and the cache build's hashing,
    and `dctnet verify`). In a child with a timeout, so that a regression cannot hang the suite."""
    src = folder_420(tmp_path / "src", n=6)
    fifo = src / "c1" / "pipe.jpg"
    os.mkfifo(fifo)
    code = f"""
import dctnet
from dctnet import data as D
try:
    dctnet.read_coefficients({str(fifo)!r})
except OSError as exc:
    assert "not a regular file" in str(exc) and {str(fifo)!r} in str(exc), exc
else:
    raise SystemExit("read a FIFO")
[res] = dctnet.read_coefficients_batch([{str(fifo)!r}], errors="return")
assert isinstance(res, OSError), res
ds = D.ImageFolderDataset({str(src)!r}, on_error="skip")
batches = list(D.ThreadLoader(ds, 4, pin_memory=False))
skipped = [s for b in batches for s in b.skipped]
assert len(skipped) == 1 and "pipe.jpg" in str(skipped[0]), skipped
out = D.build_cache({str(src)!r}, {str(tmp_path / "cache")!r}, on_error="skip", progress=False)
assert [b["path"] for b in D.open_cache(out).meta["bad"]] == [{str(fifo)!r}]
report = D.verify_dataset({str(src)!r})
print("ok", report["splits"])
"""
    r = run_child("-c", code, timeout=60)
    assert "ok" in r.stdout


def test_the_buffer_pool_survives_fork_while_another_thread_holds_its_lock():
    """fork() while a reader thread is inside the pool's critical section (readers take pool memory
    without the GIL) copied the mutex locked: the child's first allocation waited for ever. The
    pool is filled with 1,000 buffers no read can use, so every take scans them under the lock."""
    code = """
import os, threading, time
import dctnet
from dctnet import _jpeg
from dctnet.synthetic import synthetic_jpeg
keep = [_jpeg.alloc(1 << 16) for _ in range(1000)]
del keep
data = [synthetic_jpeg(0, 16, 16)] * 64
stop = False
def reader():
    while not stop:
        dctnet.read_coefficients_batch(data, threads=1)
for _ in range(2):
    threading.Thread(target=reader, daemon=True).start()
time.sleep(0.1)
for i in range(200):
    pid = os.fork()
    if pid == 0:
        _jpeg.alloc(4096)
        os._exit(0)
    deadline = time.time() + 10
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert status == 0, status
            break
        if time.time() > deadline:
            os.kill(pid, 9)
            raise SystemExit(f"child {i} deadlocked in the buffer pool")
        time.sleep(0.001)
stop = True
print("forks ok")
"""
    run_child("-W", "ignore::DeprecationWarning", "-c", code, timeout=240)


@pytest.mark.skipif(not os.path.exists(subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                                                      text=True).stdout.strip() or "/nonexistent"),
                    reason="gcc's AddressSanitizer runtime is not installed")
def test_fuzz_asan_script_builds_and_runs():
    """tests/fuzz_asan.sh left csrc/crop.c out (undefined symbol rrc_boxes), so `make fuzz` had
    not run. A short run of both fuzzers under ASan+UBSan."""
    r = subprocess.run(["bash", str(ROOT / "tests" / "fuzz_asan.sh"), "300", "100", "5"], capture_output=True,
                       text=True, timeout=600, env=dict(ENV, PY=sys.executable))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert "fuzz: 300 cases" in r.stdout and "fuzz-cache: 100 cases" in r.stdout and "findings 0" in r.stdout


# ------------------------------------------------------------------------------- memory

def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_rss_stays_flat_over_50000_refused_caches_and_rejected_jpegs(tmp_path):
    """Every refusal path frees what it took: 10,000 opens of tampered caches (index, tables,
    meta, C gather) and 40,000 rejected JPEGs (bombs, odd component counts, negative limits, bad
    data, a FIFO)."""
    src = folder_420(tmp_path / "src", n=8)
    caches = []
    for k, edit in enumerate(("offset", "tables", "meta", "gather")):
        c = D.build_cache(src, tmp_path / f"c{k}", format="sparse", progress=False, hash_sources=False)
        if edit == "offset":
            edit_index(c, offset=(1, 2**63))
        elif edit == "tables":
            np.save(c / "tables.npy", np.load(c / "tables.npy")[:2])
        elif edit == "meta":
            (c / "meta.json").write_text('{"format_version": 1, "format": "sparse", "parts": ["../x"]}')
        else:  # valid index, damaged masks: refused by the C gather at read time
            part = c / "part-00000-of-00001.bin"
            part.write_bytes(b"\xff" * part.stat().st_size)
        caches.append(c)
    os.mkfifo(tmp_path / "fifo.jpg")
    jpegs = [jpeg_header(20000, 20000, [(4, 4)] * 4), jpeg_header(16, 16, [(1, 1)] * 5), b"\xff\xd8\xff\xd9",
             synthetic_jpeg(0, 32, 32)[:200], b"", str(tmp_path / "fifo.jpg")]

    def one_round(k: int) -> None:
        if k % 5 == 0:
            try:
                ds = D.CacheDataset(caches[(k // 5) % 4], verify="none")
                ds.load_collated([(0, i) for i in range(len(ds))])
                raise AssertionError("a tampered cache was read")
            except D.CacheError:
                pass
        else:
            src_ = jpegs[k % len(jpegs)]
            try:
                if k % 7 == 0:
                    dctnet.read_coefficients(src_, max_pixels=-1)
                dctnet.read_coefficients(src_, warnings="strict", max_pixels=None)
                raise AssertionError(f"accepted {src_[:20]!r}")
            except (dctnet.JpegError, OSError, ValueError):
                pass

    for k in range(5000):  # warm-up: allocator pools, caches and lazy imports settle
        one_round(k)
    gc.collect()
    before = _rss_mb()
    for k in range(50000):
        one_round(k)
    gc.collect()
    grown = _rss_mb() - before
    assert grown < 8, f"RSS grew by {grown:.1f} MiB over 50,000 refused reads"


@pytest.mark.parametrize("fmt", ["dense", "sparse"])
def test_the_packed_gather_checks_its_own_preconditions(cache420, fmt):
    """gather_packed (windows without padding): the same record checks as gather_planes, plus
    every window's destination inside the output, offsets of the right shape, int16 (NB, 64)
    output, no output aliasing an input."""
    cache = D.open_cache(cache420[fmt], verify="none")
    i = int(np.flatnonzero(np.asarray(cache.index)["ncomp"] == 3)[0])
    good, outs = gather_args(cache, i)
    code = int(fmt == "sparse")
    sizes = [o.shape[1] * o.shape[2] for o in outs]
    offsets = np.array([[0, sizes[0], sizes[0] + sizes[1]]], np.int64)
    packed = np.full((sum(sizes), 64), 7, np.int16)
    _jpeg.gather_packed(cache._parts, cache.tables, good, code, packed, offsets)  # the honest item works
    want = cache.coefficients(i).planes
    for o, p, (a, b) in zip(outs, want, zip(offsets[0], list(offsets[0, 1:]) + [len(packed)])):
        assert np.array_equal(packed[a:b].reshape(o.shape[1:]), p[: o.shape[1], : o.shape[2]])
    for col, value in ((1, len(cache._parts[0])), (2, 10**9), (15, -1), (19, 1 << 17), (27, -5), (5, 1 << 40)):
        bad = good.copy()
        bad[0, col] = value
        with pytest.raises(ValueError, match="gather_packed"):
            _jpeg.gather_packed(cache._parts, cache.tables, bad, code, packed, offsets)
    for off in ([[0, sizes[0], len(packed)]], [[-1, 0, 0]], [[0, 0, 1 << 62]], [[0, 0]], [[0, 0, 0, 0, 0]]):
        with pytest.raises(ValueError, match="gather_packed"):
            _jpeg.gather_packed(cache._parts, cache.tables, good, code, packed, np.array(off, np.int64))
    for out in (packed[: sum(sizes) - 1], packed.astype(np.int32), packed.reshape(-1, 32)):
        with pytest.raises(ValueError, match="gather_packed"):
            _jpeg.gather_packed(cache._parts, cache.tables, good, code, np.ascontiguousarray(out), offsets)
    part = np.array(cache._parts[0])
    with pytest.raises(ValueError, match="shares memory"):
        _jpeg.gather_packed([part], cache.tables, good, code, part[: len(part) // 128 * 128].view(np.int16).reshape(-1, 64),
                            offsets)


def test_copy_ranges_checks_every_range():
    parts = [np.arange(100, dtype=np.uint8), np.arange(50, dtype=np.uint8)[::-1].copy()]
    out = np.zeros(40, np.uint8)
    _jpeg.copy_ranges(parts, np.array([[0, 10, 5, 0], [1, 0, 3, 5], [0, 99, 1, 39], [1, 50, 0, 40]], np.int64), out)
    assert out[:8].tolist() == [10, 11, 12, 13, 14, 49, 48, 47] and out[39] == 99
    for row in ([2, 0, 1, 0], [-1, 0, 1, 0], [0, 99, 2, 0], [0, -1, 1, 0], [0, 0, -1, 0], [0, 0, 1, 40], [0, 0, 41, 0],
                [0, 1 << 62, 1 << 62, 0], [0, 0, 1, -1]):
        before = out.copy()
        with pytest.raises(ValueError, match="copy_ranges"):
            _jpeg.copy_ranges(parts, np.array([[0, 0, 4, 0], row], np.int64), out)
        assert np.array_equal(out, before)  # checked before any byte is copied
    with pytest.raises(ValueError, match="int64"):
        _jpeg.copy_ranges(parts, np.zeros(3, np.int64), out)
    with pytest.raises(ValueError, match="shares memory"):
        _jpeg.copy_ranges([out], np.array([[0, 0, 4, 10]], np.int64), out)
