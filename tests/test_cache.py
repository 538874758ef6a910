"""Coefficient cache: bit-identical read-back (dense and sparse, C and torch expansion), trust
(stale sources, interrupted builds), torchrun build with a crash and resume, rank-split reading."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import dctnet
from dctnet import data as D
from dctnet.batch import expand_torch
from dctnet.data import sparse as S
from dctnet.data.cache import INDEX_DTYPE
from dctnet.data.cache.format import record_checksum
from dctnet.synthetic import synthetic_jpeg

from conftest import CORPUS, ROOT


def make_folder(root, n=40, size=(40, 56)):
    variants = [dict(subsampling="4:2:0"), dict(gray=True), dict(subsampling="4:4:4"), dict(progressive=True),
                dict(quality=100, subsampling="4:2:2")]
    for i in range(n):
        d = root / f"c{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:04d}.jpg").write_bytes(synthetic_jpeg(i, size[0] + i % 9, size[1], **variants[i % len(variants)]))
    return root


def gray_and_420_folder(root, n, *, gray_every, qualities, size):
    """Two classes of the layouts the fast gather takes: grayscale every ``gray_every``-th file,
    4:2:0 otherwise at the given qualities, sizes from ``size(i)`` (odd sizes on purpose)."""
    for i in range(n):
        d = root / f"c{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        kw = dict(gray=True) if i % gray_every == 0 else dict(subsampling="4:2:0", quality=qualities[i % len(qualities)])
        (d / f"{i}.jpg").write_bytes(synthetic_jpeg(i, *size(i), **kw))
    return root


@pytest.fixture()
def folder(tmp_path):
    return make_folder(tmp_path / "src")


def corpus_folder(tmp_path):
    files = sorted((CORPUS / "files").glob("*.jpg")) if (CORPUS / "files").is_dir() else []
    if not files:
        pytest.skip("corpus not found")
    root = tmp_path / "corpus" / "all"
    root.mkdir(parents=True)
    for f in files:
        os.symlink(f, root / f.name)
    return root.parent


@pytest.mark.parametrize("fmt", ["dense", "sparse"])
def test_read_back_is_bit_identical(tmp_path, folder, fmt):
    out = D.build_cache(folder, tmp_path / "cache", format=fmt, progress=False)
    cache = D.open_cache(out)
    ds = D.ImageFolderDataset(folder)
    assert len(cache) == len(ds)
    for i, (path, label) in enumerate(ds.samples):
        ref = dctnet.read_coefficients(path)
        got = cache.coefficients(i)
        assert got.sampling == ref.sampling and got.color_space == ref.color_space and (got.height, got.width) == ref.size
        for a, b in zip(ref.planes, got.planes):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("fmt", ["dense", "sparse"])
def test_corpus_through_the_cache(tmp_path, fmt):
    """Every corpus file: readable ones bit-identical, unreadable ones (the reader's verdict: the
    catalog's libjpeg errors and the files that lost data) listed in the sidecar."""
    root = corpus_folder(tmp_path)
    out = D.build_cache(root, tmp_path / "cache", format=fmt, progress=False, hash_sources=False, on_error="skip")
    cache = D.open_cache(out)
    ds = D.ImageFolderDataset(root)
    bad = {b["path"] for b in cache.meta["bad"]}
    refused = D.check_files([p for p, _ in ds.samples]).unusable
    assert bad == set(refused) and len(bad) > 5  # 5 libjpeg errors, the rest lost data
    for i, (path, _) in enumerate(ds.samples):
        if path in bad:
            assert cache.is_bad(i)
            with pytest.raises(dctnet.JpegError):
                cache.coefficients(i)
            continue
        ref = dctnet.read_coefficients(path)
        for a, b in zip(ref.planes, cache.coefficients(i).planes):
            np.testing.assert_array_equal(a, b)


def test_sparse_device_expansion_matches_host(tmp_path):
    sources = [synthetic_jpeg(i, 48 + 8 * i, 64, quality=q) for i, q in enumerate((10, 50, 90, 100))]
    masks, values, escapes, tables, refs = [], [], [], [], []
    for data in sources:
        c = dctnet.read_coefficients(data)
        rec = S.encode(c.planes, c.quant_tables)
        counts = [p.shape[0] * p.shape[1] for p in c.planes]
        refs.append(S.expand(rec, counts))
        masks.append(rec.masks.view(np.int64))
        values.append(rec.values)
        escapes.append(rec.escapes)
        tables.append(np.repeat(rec.tables, counts, axis=0))
    out = expand_torch(*(torch.from_numpy(np.concatenate(a)) for a in (masks, values, escapes, tables)))
    np.testing.assert_array_equal(out.numpy(), np.concatenate(refs))
    assert sum(len(e) for e in escapes) > 0  # quality 100 exercises escapes


def test_saturated_file_round_trips_sparse(tmp_path):
    from test_codec import _set_dqt

    data = _set_dqt(synthetic_jpeg(3, 64, 64, quality=100, subsampling="4:4:4"), 255)
    c = dctnet.read_coefficients(data)
    assert c.saturated
    rec = S.encode(c.planes, c.quant_tables)
    back = S.expand(rec, [p.shape[0] * p.shape[1] for p in c.planes])
    np.testing.assert_array_equal(back, np.concatenate([p.reshape(-1, 64) for p in c.planes]))


def test_stale_sources_are_refused_with_reasons(tmp_path, folder):
    out = D.build_cache(folder, tmp_path / "cache", progress=False)
    D.open_cache(out)
    victim = sorted(folder.glob("c0/*.jpg"))[0]
    victim.write_bytes(victim.read_bytes() + b"\0\0")
    gone = sorted(folder.glob("c1/*.jpg"))[0]
    gone.unlink()
    (folder / "c2" / "new.jpg").write_bytes(synthetic_jpeg(99, 16, 16))
    with pytest.raises(D.CacheError) as info:
        D.open_cache(out)
    msg = str(info.value)
    assert "1 changed" in msg and victim.name in msg and "1 missing" in msg and "1 new" in msg and "new.jpg" in msg
    with pytest.raises(D.CacheError, match="exists"):
        D.build_cache(folder, out, progress=False)


def test_touched_but_identical_passes_hash_check(tmp_path, folder):
    out = D.build_cache(folder, tmp_path / "cache", progress=False)
    f = sorted(folder.glob("c0/*.jpg"))[0]
    os.utime(f, ns=(1, 1))
    with pytest.raises(D.CacheError, match="changed") as info:
        D.open_cache(out)
    assert "`data.verify: hash` in a recipe" in str(info.value)  # the way out, in a recipe user's words too
    D.open_cache(out, verify="hash")


def test_cache_dataset_matches_folder_dataset_and_policy(tmp_path, folder):
    (folder / "c0" / "broken.jpg").write_bytes(b"\xff\xd8 broken")
    out = D.build_cache(folder, tmp_path / "cache", progress=False, on_error="skip")
    cache_ds = D.CacheDataset(out, crop=D.RandomResizedCrop(), seed=5, on_error="skip")
    folder_ds = D.ImageFolderDataset(folder, crop=D.RandomResizedCrop(), seed=5, on_error="skip")
    a = list(D.ThreadLoader(cache_ds, 8, sampler=D.EpochSampler(len(cache_ds), seed=5), pin_memory=False))
    b = list(D.ThreadLoader(folder_ds, 8, sampler=D.EpochSampler(len(folder_ds), seed=5), pin_memory=False))
    for x, y in zip(a, b):
        assert all(torch.equal(p, q) for p, q in zip(x.tensors(), y.tensors()))
    assert sum(len(x.skipped) for x in a) == 1
    dl = list(D.make_dataloader(cache_ds, 8, sampler=D.EpochSampler(len(cache_ds), seed=5), num_workers=2,
                                pin_memory=False))
    assert all(all(torch.equal(p, q) for p, q in zip(x.tensors(), y.tensors())) for x, y in zip(dl, a))
    with pytest.raises(dctnet.JpegError):
        list(D.ThreadLoader(D.CacheDataset(out), 8, pin_memory=False))


def torchrun(*args, check=True):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--rdzv-backend=c10d",
           "--rdzv-endpoint=localhost:0", str(ROOT / "tests" / "cache_worker.py"), *args]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if check:
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def test_torchrun_build_crash_resume_and_rank_split_read(tmp_path):
    src = make_folder(tmp_path / "src", n=300, size=(48, 64))
    out = tmp_path / "cache"
    r = torchrun("build", str(src), str(out), "--die-after", "100", check=False)
    assert r.returncode != 0
    assert not out.exists() and (tmp_path / "cache.partial").exists()
    with pytest.raises(D.CacheError, match="not a finished"):
        D.open_cache(out)
    with pytest.raises(D.CacheError, match="not a finished"):
        D.open_cache(tmp_path / "cache.partial")
    progress = json.loads((tmp_path / "cache.partial" / "part-00001-of-00002.progress.json").read_text())
    assert 0 < progress["done"] < 150  # rank 1 died part-way through its 150 samples
    torchrun("build", str(src), str(out), "--resume")
    cache = D.open_cache(out)
    ds = D.ImageFolderDataset(src)
    for i, (path, _) in enumerate(ds.samples):
        for a, b in zip(dctnet.read_coefficients(path).planes, cache.coefficients(i).planes):
            np.testing.assert_array_equal(a, b)
    assert len(cache.meta["parts"]) == 2
    record = tmp_path / "seen.json"
    torchrun("read", str(src), str(out), "--record", str(record), "--epochs", "3")
    result = json.loads(record.read_text())
    seen = result["seen"]
    assert len(seen) == 2 and seen[0] and seen[1]
    assert sorted(seen[0] + seen[1]) == list(range(300))
    labels = [label for _, label in ds.samples]
    assert result["mean_label"] == pytest.approx(sum(labels) / len(labels))  # gathered before reduced
    shutil.rmtree(out)


@pytest.mark.parametrize("fmt", ["dense", "sparse"])
def test_fast_gather_equals_per_sample_path(tmp_path, fmt):
    """The C window gather builds exactly the batch that per-sample reads + collate build."""
    root = gray_and_420_folder(tmp_path / "src", 48, gray_every=5, qualities=(30, 75, 100),
                               size=lambda i: (17 + 13 * (i % 7), 23 + 11 * (i % 5)))
    out = D.build_cache(root, tmp_path / "cache", format=fmt, progress=False)
    for crop in (D.RandomResizedCrop(), D.CenterCrop(), D.FullImage()):
        ds = D.CacheDataset(out, crop=crop, seed=2)
        sampler = D.EpochSampler(len(ds), seed=2)
        sampler.set_epoch(3)
        keys = list(sampler)
        for start in range(0, len(keys), 16):
            chunk = keys[start:start + 16]
            fast = ds.cache.gather(chunk, crop, 2, ds.targets)
            assert fast is not None
            slow = D.collate(ds.load_batch(chunk), pin_memory=False)
            for a, b in zip(fast.tensors(), slow.tensors()):
                assert torch.equal(a, b)
    dl = D.make_dataloader(ds, 16, sampler=D.EpochSampler(len(ds), seed=2), num_workers=1, pin_memory=False)
    tl = D.ThreadLoader(ds, 16, sampler=D.EpochSampler(len(ds), seed=2), pin_memory=False)
    for a, b in zip(dl, tl):
        assert all(torch.equal(x, y) for x, y in zip(a.tensors(), b.tensors()))


def test_device_expansion_of_a_sparse_batch_matches_host(tmp_path):
    root = gray_and_420_folder(tmp_path / "src", 30, gray_every=4, qualities=(20, 90, 100),
                               size=lambda i: (20 + 9 * (i % 6), 30 + 7 * (i % 4)))
    out = D.build_cache(root, tmp_path / "cache", format="sparse", progress=False)
    ds = D.CacheDataset(out, crop=D.RandomResizedCrop(), seed=9)
    keys = list(D.EpochSampler(len(ds), seed=9))
    from dctnet.transforms import expand_sparse

    for start in range(0, len(keys), 8):
        chunk = keys[start:start + 8]
        host = ds.cache.gather(chunk, ds.crop, 9, ds.targets)
        packed = ds.cache.gather_compressed(chunk, ds.crop, 9, ds.targets)
        device = expand_sparse(packed)
        for a, b in zip(host.tensors(), device.tensors()):
            assert torch.equal(a, b)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("fmt", ["dense", "sparse"])
def test_device_expansion_on_cuda(tmp_path, folder, fmt):
    """device_expand batches (packed windows, compressed records) through pinned memory and the
    prefetcher's side stream, finished on the GPU: the host gather's batch."""
    out = D.build_cache(folder, tmp_path / "cache", format=fmt, progress=False)
    ds = D.CacheDataset(out, crop=D.RandomResizedCrop(), seed=1)
    dev = D.CacheDataset(out, crop=D.RandomResizedCrop(), seed=1, device_expand=True)
    keys = [(0, i) for i in range(len(ds)) if i % 5 in (0, 3)]  # 4:2:0 and gray samples of the fixture
    host = ds.cache.gather(keys, ds.crop, 1, ds.targets)
    loader = D.ThreadLoader(dev, len(keys), sampler=keys, pin_memory=True)
    (device,) = list(D.DevicePrefetcher(loader, "cuda"))
    assert device.labels.is_cuda
    for a, b in zip(host.tensors(), device.tensors()):
        assert torch.equal(a, b.cpu())


def test_corrupt_sparse_records_raise_not_crash(tmp_path, folder):
    """Random damage to a sparse cache's data, read without checksums (which would refuse it
    first): reads fail with ValueError or return something; never read outside the record (the C
    walk checks every value and escape it consumes)."""
    out = D.build_cache(folder, tmp_path / "cache", format="sparse", progress=False)
    part = out / D.open_cache(out).meta["parts"][0]
    pristine = part.read_bytes()
    rng = np.random.default_rng(0)
    failures = 0
    for trial in range(40):
        data = bytearray(pristine)
        for pos in rng.integers(0, len(data), 64):
            data[pos] = int(rng.integers(256))
        part.write_bytes(bytes(data))
        ds = D.CacheDataset(out, crop=D.RandomResizedCrop(), verify="none", checksums=False)
        keys = [(0, i) for i in range(len(ds))]
        for k in range(0, len(keys), 8):
            try:
                ds.load_collated(keys[k:k + 8])
            except ValueError:
                failures += 1
        for i in range(len(ds)):
            try:
                ds.cache.coefficients(i)
            except ValueError:
                failures += 1
    assert failures > 0  # damage is detected, not silently expanded everywhere


def _write_shards(root, n_shards=3, per_shard=7):
    import io
    import tarfile

    root.mkdir(parents=True, exist_ok=True)
    n = 0
    for s in range(n_shards):
        with tarfile.open(root / f"train-{s:03d}.tar", "w") as tar:
            for _ in range(per_shard):
                data = synthetic_jpeg(n, 24 + n % 11, 32, subsampling="4:2:0" if n % 3 else "4:4:4") \
                    if n != 5 else b"\xff\xd8 broken"
                for ext, payload in (("jpg", data), ("cls", str(n % 4).encode())):
                    info = tarfile.TarInfo(f"s{n:04d}.{ext}")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
                n += 1
    return n


@pytest.mark.parametrize("fmt", ["dense", "sparse"])
def test_cache_from_tar_shards(tmp_path, fmt):
    n = _write_shards(tmp_path / "shards")
    out = D.build_cache(str(tmp_path / "shards" / "*.tar"), tmp_path / "cache", format=fmt, progress=False, on_error="skip")
    cache = D.open_cache(out)
    assert len(cache) == n and [b["path"].endswith("s0005") for b in cache.meta["bad"]] == [True]
    # bit-identical to decoding the members straight from the shards
    members = {s.index: s for s in D.TarShardDataset(str(tmp_path / "shards" / "*.tar"), shuffle=False,
                                                     on_error="skip") if not isinstance(s, tuple)}
    from dctnet.data.cache import source_bytes

    for i in range(n):
        if cache.is_bad(i):
            continue
        ref = dctnet.read_coefficients(source_bytes(cache.meta, cache.meta["root"], i))
        for a, b in zip(ref.planes, cache.coefficients(i).planes):
            np.testing.assert_array_equal(a, b)
    assert len(members) == n - 1
    assert [s["label"] for s in cache.meta["sources"]] == [k % 4 for k in range(n)]
    # a changed shard and a new shard are both reported
    shard = tmp_path / "shards" / "train-001.tar"
    shard.write_bytes(shard.read_bytes() + b"\0" * 512)
    (tmp_path / "shards" / "train-009.tar").write_bytes((tmp_path / "shards" / "train-000.tar").read_bytes())
    with pytest.raises(D.CacheError) as info:
        D.open_cache(out)
    assert "1 changed (e.g. train-001.tar" in str(info.value) and "1 new (e.g. train-009.tar" in str(info.value)


def test_cache_cli_with_shards(tmp_path):
    _write_shards(tmp_path / "shards", n_shards=2, per_shard=5)
    r = subprocess.run([sys.executable, "-m", "dctnet", "cache", "build", str(tmp_path / "shards"),
                        str(tmp_path / "cache"), "--quiet"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "train-001.tar:s0005" in r.stderr, r.stderr  # a bad member: on_error raise names it
    r = subprocess.run([sys.executable, "-m", "dctnet", "cache", "build", str(tmp_path / "shards"),
                        str(tmp_path / "cache"), "--quiet", "--on-error", "skip"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "dctnet", "cache", "verify", str(tmp_path / "cache")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "9 identical, 0 different" in r.stdout, r.stdout + r.stderr


# ------------------------------------------------------------------ working directory and checksums

def test_a_cache_built_from_a_relative_path_trains_from_another_directory(tmp_path, monkeypatch):
    """meta.json records the absolute source root: a cache built from ``data/train`` (relative to
    the build's working directory) passes its source check, verifies and trains from any other
    directory — it used to be 'stale … N missing' there. A relative root written into meta.json by
    hand is taken relative to the cache directory."""
    from dctnet.cli import main as cli_main
    from dctnet.synthetic import make_labelled_dataset
    from dctnet.train import Trainer, load_recipe

    from conftest import write_recipe

    monkeypatch.chdir(tmp_path)
    make_labelled_dataset("data", classes=2, train_per_class=8, val_per_class=4, size=(32, 48), seed=0)
    for split in ("train", "val"):
        D.build_cache(f"data/{split}", f"caches/{split}", format="sparse", progress=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cache = tmp_path / "caches" / "train"
    assert D.open_cache(cache, verify="hash").meta["root"] == str(tmp_path / "data" / "train")
    with pytest.raises(SystemExit) as exit_:  # re-decodes from the recorded root
        cli_main(["cache", "verify", str(cache), "--samples", "4"])
    assert exit_.value.code == 0
    path = write_recipe(elsewhere, str(tmp_path / "caches"), data__source="cache", train__max_steps=2, augment=[])
    record = Trainer(load_recipe(path)).fit()
    assert record["val_images"] == 8 and np.isfinite(record["train_loss"])

    meta = json.loads((cache / "meta.json").read_text())
    meta["root"] = os.path.join("..", "..", "data", "train")  # the cache and its data moved together
    (cache / "meta.json").write_text(json.dumps(meta))
    assert D.open_cache(cache).root == cache / ".." / ".." / "data" / "train"


def flip_bit(path, pos: int, bit: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ (1 << bit)]))


@pytest.mark.parametrize("fmt", ["dense", "sparse"])
def test_a_flipped_bit_in_a_record_or_its_table_raises_naming_it(tmp_path, folder, fmt):
    """One flipped bit inside each of 8 records' bytes (and in one record's quantization table row):
    every read path raises CacheRecordError naming the cache, the record, its source path and part
    file (on_error='raise'), or leaves exactly those samples out and lists them (on_error='skip').
    Without checksums the same flips are read silently (what the check is for)."""
    out = D.build_cache(folder, tmp_path / "cache", format=fmt, progress=False)
    cache = D.open_cache(out)
    index, sources = np.asarray(cache.index), [s["path"] for s in cache.meta["sources"]]
    rng = np.random.default_rng(1)
    flipped = sorted(rng.choice(len(index), 8, replace=False).tolist())
    part = out / cache.meta["parts"][0]
    for i in flipped[:-1]:
        flip_bit(part, int(index["offset"][i]) + int(rng.integers(index["nbytes"][i])), int(rng.integers(8)))
    tables = np.load(out / "tables.npy")
    tables[flipped[-1], 0, int(rng.integers(64))] ^= 1 << int(rng.integers(16))
    np.save(out / "tables.npy", tables)
    keys = [(0, i) for i in range(len(index))]
    for device_expand in (False, True):
        ds = D.CacheDataset(out, crop=D.RandomResizedCrop(), device_expand=device_expand)
        with pytest.raises(D.CacheRecordError) as exc:
            ds.load_collated(keys)
        i = flipped[0]
        assert isinstance(exc.value, dctnet.JpegError) and exc.value.record == i
        assert f"{out}: record {i} ({sources[i]}) in part-00000-of-00001.bin, bytes {index['offset'][i]}-" in \
            str(exc.value) and "checksum mismatch" in str(exc.value)
        skip = D.CacheDataset(out, crop=D.RandomResizedCrop(), on_error="skip", device_expand=device_expand)
        batch = skip.load_collated(keys)
        assert [s[0] for s in batch.skipped] == flipped and [s[1] for s in batch.skipped] == [sources[i] for i in flipped]
        assert len(batch) == len(keys) - len(flipped)
    for i in flipped:
        with pytest.raises(D.CacheRecordError, match=f"record {i} "):
            cache.coefficients(i)
    unchecked = D.CacheDataset(out, crop=D.RandomResizedCrop(), checksums=False, on_error="skip")
    if fmt == "dense":  # a dense record has no structure to notice a flip with
        assert len(unchecked.load_collated(keys)) == len(keys)


@pytest.fixture()
def cache_pair(tmp_path, folder):
    return {fmt: D.build_cache(folder, tmp_path / fmt, format=fmt, progress=False, hash_sources=False)
            for fmt in ("dense", "sparse")}


def test_every_bit_flip_in_the_index_is_refused_at_open(cache_pair):
    """Single-bit flips anywhere in index.npy's records (a fuzz of 300 positions and bits, both
    formats): the cache is refused when it is opened, by the field checks or the index checksum,
    never read with a wrong offset, size, layout or label."""
    rng = np.random.default_rng(2)
    for fmt, out in cache_pair.items():
        f = out / "index.npy"
        pristine = f.read_bytes()
        start = len(pristine) - len(np.load(f)) * INDEX_DTYPE.itemsize  # the records, after the .npy header
        for _ in range(150):
            data = bytearray(pristine)
            data[int(rng.integers(start, len(data)))] ^= 1 << int(rng.integers(8))
            f.write_bytes(bytes(data))
            with pytest.raises(D.CacheError, match="index.npy"):
                D.open_cache(out, verify="none")
        f.write_bytes(pristine)
        D.open_cache(out, verify="none")


def test_every_bit_flip_in_records_is_found_by_dctnet_verify(cache_pair, capsys, tmp_path):
    """A fuzz of 200 single-bit flips inside the records of both formats: each is found by the
    checksum of the record that holds it; `dctnet verify CACHE` checks every record, names the
    corrupt ones and exits 1, and exits 0 on a clean cache."""
    from dctnet.cli import main as cli_main
    from dctnet.data.cache.check import check_records

    rng = np.random.default_rng(3)
    for fmt, out in cache_pair.items():
        cache = D.open_cache(out, verify="none")
        index = np.asarray(cache.index)
        part = out / cache.meta["parts"][0]
        pristine = part.read_bytes()
        for i in range(len(index)):  # the build's streamed digest is the format's definition
            start, end = int(index["offset"][i]), int(index["offset"][i] + index["nbytes"][i])
            assert record_checksum(pristine[start:end], np.asarray(cache.tables[i])) == index["checksum"][i]
        for _ in range(100):
            i = int(rng.integers(len(index)))
            data = bytearray(pristine)
            data[int(index["offset"][i]) + int(rng.integers(index["nbytes"][i]))] ^= 1 << int(rng.integers(8))
            part.write_bytes(bytes(data))
            assert [c["record"] for c in check_records(cache)["corrupt"]] == [i]
        part.write_bytes(pristine)
    out = cache_pair["sparse"]
    with pytest.raises(SystemExit) as exit_:
        cli_main(["verify", str(out)])
    assert exit_.value.code == 0 and f"{len(index)} good, 0 corrupt" in capsys.readouterr().out
    cache = D.open_cache(out)
    index = np.asarray(cache.index)
    for i in (3, 7):
        flip_bit(out / cache.meta["parts"][0], int(index["offset"][i]), 0)
    with pytest.raises(SystemExit) as exit_:
        cli_main(["verify", str(out), "--json", str(tmp_path / "report.json")])
    text = capsys.readouterr().out
    assert exit_.value.code == 1 and "2 corrupt" in text, text
    for i in (3, 7):
        assert f"corrupt: record {i} ({cache.meta['sources'][i]['path']}) in part-00000-of-00001.bin, bytes " in text
    report = json.loads((tmp_path / "report.json").read_text())
    assert [c["record"] for c in report["corrupt"]] == [3, 7] and report["records"] == len(index)


def test_old_caches_are_refused_saying_how_to_read_them(cache_pair):
    """A version-1 cache (no checksums) is refused with the two ways out: rebuild it, or read it
    without checksums — which then reads it exactly as before. A meta.json label that disagrees with
    the index (a flipped digit) is refused at open."""
    from dctnet.data.cache.format import INDEX_DTYPE_V1

    out = cache_pair["sparse"]
    want = D.CacheDataset(out, crop=D.CenterCrop(16)).load_collated([(0, i) for i in range(6)])
    index = np.load(out / "index.npy")
    old = np.zeros(len(index), INDEX_DTYPE_V1)
    for name in INDEX_DTYPE_V1.names:
        old[name] = index[name]
    np.save(out / "index.npy", old)
    meta = json.loads((out / "meta.json").read_text())
    meta["format_version"] = 1
    del meta["checksums"]
    (out / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(D.CacheError, match="format version 1 has no checksums.*rebuild it.*cache_checksums: false"):
        D.CacheDataset(out)
    got = D.CacheDataset(out, crop=D.CenterCrop(16), checksums=False).load_collated([(0, i) for i in range(6)])
    for a, b in zip(want.tensors(), got.tensors()):
        assert torch.equal(a, b)

    out = cache_pair["dense"]
    meta = json.loads((out / "meta.json").read_text())
    meta["sources"][4]["label"] ^= 1
    (out / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(D.CacheError, match=r"sources\[4\] .* has label"):
        D.open_cache(out, verify="none")


# ------------------------------------------------------------------ the checksums in the C gathers

def _record_items(cache, records) -> np.ndarray:
    """GATHER_ITEM rows naming each record of ``records`` (part, offset, nbytes, its tables row), a
    window of one MCU from its top-left corner (enough for every gather to walk the record)."""
    from dctnet.data.plan import GATHER_ITEM

    index = np.asarray(cache.index)[records]
    items = np.zeros(len(records), GATHER_ITEM)
    items["part"], items["offset"], items["nbytes"], items["table"] = index["part"], index["offset"], index["nbytes"], \
        records
    items["ncomp"], items["bh"], items["bw"] = index["ncomp"], index["blocks"][:, :, 0], index["blocks"][:, :, 1]
    items["nvalues"], items["nescapes"] = index["nvalues"], index["nescapes"]
    items["r1"], items["c1"] = index["sampling"][:, :, 1], index["sampling"][:, :, 0]
    return items


def test_the_c_checksums_equal_pythons(cache_pair):
    """The C hash (vendored xxHash, csrc/checksum.c) gives the Python xxhash package's values: on
    every record of a dense and a sparse cache (what the build wrote into the index, and what
    format.record_checksum computes), and on random bytes of every length class XXH3 treats
    apart (0, 1-3, 4-8, 9-16, 17-128, 129-240 bytes, longer, and past a 1 KB stripe block)."""
    from dctnet.data.cache.gather import record_checksums
    from dctnet.data.plan import GATHER_ITEM

    for fmt, out in cache_pair.items():
        cache = D.open_cache(out, verify="none")
        index = np.asarray(cache.index)
        ok = np.flatnonzero(index["status"] == 0)
        got = record_checksums(cache._parts, cache.tables, _record_items(cache, ok))
        parts = [np.asarray(p) for p in cache._parts]
        python = [record_checksum(parts[int(index["part"][i])][int(index["offset"][i]):][:int(index["nbytes"][i])],
                                  np.asarray(cache.tables[i])) for i in ok]
        assert len(ok) > 30 and got.tolist() == python == index["checksum"][ok].tolist(), fmt
    rng = np.random.default_rng(4)
    lengths = [0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1023, 1024, 1025, 4096 + 7, 24000, 100003]
    data = rng.integers(0, 256, sum(lengths), dtype=np.uint8)
    tables = rng.integers(0, 1 << 16, (3, 4, 64)).astype("<u2")
    items = np.zeros(len(lengths), GATHER_ITEM)
    items["offset"] = np.cumsum(lengths) - lengths
    items["nbytes"], items["table"] = lengths, np.arange(len(lengths)) % 3
    got = record_checksums([data], tables, items)
    assert got.tolist() == [record_checksum(data[o:o + n], tables[t])
                            for o, n, t in zip(items["offset"], items["nbytes"], items["table"])]


@pytest.mark.parametrize("fmt", ["dense", "sparse"])
def test_each_c_gather_checks_the_records_it_reads(cache_pair, fmt):
    """gather_planes, gather_packed and copy_ranges with the records' checksums: the right sums read
    exactly what the unchecked calls read and report nothing; a wrong sum reports its item, whose
    outputs are zeroed, and the others are read as ever; sums=None is the unchecked call."""
    from dctnet.data.cache.gather import copy_records_checked, gather_packed_checked, gather_planes_checked

    cache = D.open_cache(cache_pair[fmt], verify="none")
    index = np.asarray(cache.index)
    code = int(fmt == "sparse")
    for nc in (1, 3):  # a batch of each component count (the gathers take one per call)
        records = np.flatnonzero((index["status"] == 0) & (index["ncomp"] == nc))[:6]
        items, sums = _record_items(cache, records), index["checksum"][records].copy()
        shapes = [(len(records), int(index["sampling"][records, c, 1].max()), int(index["sampling"][records, c, 0].max()),
                   64) for c in range(nc)]
        plain = [np.zeros(s, np.int16) for s in shapes]
        assert gather_planes_checked(cache._parts, cache.tables, items, code, plain, None) == []
        window = (items["r1"] * items["c1"])[:, :nc]
        offsets = (np.cumsum(window) - window.reshape(-1)).reshape(window.shape)
        packed_plain = np.zeros((int(window.sum()), 64), np.int16)
        gather_packed_checked(cache._parts, cache.tables, items, code, packed_plain, offsets, None)
        ranges = np.zeros((len(records), 2), dtype=[(k, np.int64) for k in ("part", "src", "size", "dst")])
        half = items["nbytes"] // 2  # each record copied as two ranges
        ranges["part"], ranges["src"][:, 0], ranges["size"][:, 0] = items["part"][:, None], items["offset"], half
        ranges["src"][:, 1], ranges["size"][:, 1] = items["offset"] + half, items["nbytes"] - half
        ranges["dst"] = (np.cumsum(items["nbytes"]) - items["nbytes"])[:, None] + np.array([0, 1]) * half[:, None]
        copied_plain = np.zeros(int(items["nbytes"].sum()), np.uint8)
        assert copy_records_checked(cache._parts, ranges.reshape(-1), copied_plain, cache.tables, items, None) == []
        for wrong in ([], [0], [1, len(records) - 1]):
            bad = sums.copy()
            bad[wrong] ^= np.uint64(1 << 63)
            outs = [np.full(s, 7, np.int16) for s in shapes]
            assert gather_planes_checked(cache._parts, cache.tables, items, code, outs, bad) == wrong
            for o, p in zip(outs, plain):
                keep = np.setdiff1d(np.arange(len(records)), wrong)
                assert np.array_equal(o[keep], p[keep]) and not o[wrong].any()
            packed = np.full_like(packed_plain, 7)
            assert gather_packed_checked(cache._parts, cache.tables, items, code, packed, offsets, bad) == wrong
            starts = offsets.reshape(-1)
            for j, (o, n) in enumerate(zip(starts, window.reshape(-1))):
                assert np.array_equal(packed[o:o + n], np.zeros_like(packed[o:o + n]) if j // nc in wrong
                                      else packed_plain[o:o + n])
            copied = np.zeros_like(copied_plain)
            assert copy_records_checked(cache._parts, ranges.reshape(-1), copied, cache.tables, items, bad) == wrong
            assert np.array_equal(copied, copied_plain)  # the ranges are copied all the same


def test_the_checked_c_calls_refuse_what_does_not_fit(cache_pair):
    """Every argument of the checked calls is untrusted: sums of another length, a table row past
    the tables (dense records too, whose gather uses no table otherwise), records outside their
    part, ranges outside their record or not grouped by record, half the check arguments, and an
    output that is the tables are refused with ValueError before a byte is read."""
    from dctnet import _jpeg

    cache = D.open_cache(cache_pair["dense"], verify="none")
    index = np.asarray(cache.index)
    records = np.flatnonzero((index["status"] == 0) & (index["ncomp"] == 1))[:2]
    items, sums = _record_items(cache, records), index["checksum"][records].copy()
    outs = [np.zeros((2, 1, 1, 64), np.int16)]
    for wrong_sums in (sums[:1], np.concatenate([sums, sums[:1]]), sums.view(np.uint8)[:15], b""):
        with pytest.raises(ValueError, match="sums must be uint64"):
            _jpeg.gather_planes(cache._parts, cache.tables, items, 0, outs, wrong_sums)
        with pytest.raises(ValueError, match="sums must be uint64"):
            _jpeg.gather_packed(cache._parts, cache.tables, items, 0, np.zeros((2, 64), np.int16),
                                np.array([[0], [1]], np.int64), wrong_sums)
    past = items.copy()
    past["table"][1] = len(index)
    with pytest.raises(ValueError, match="gather_planes: corrupt or out-of-bounds record") as exc:
        _jpeg.gather_planes(cache._parts, cache.tables, past, 0, outs, sums)
    assert exc.value.args[1] == 1
    _jpeg.gather_planes(cache._parts, cache.tables, past, 0, outs)  # unchecked, a dense gather reads no table
    ranges = np.zeros((2, 4), np.int64)
    ranges[:, 0], ranges[:, 1], ranges[:, 2] = items["part"], items["offset"], items["nbytes"]
    ranges[1, 3] = items["nbytes"][0]
    out = np.zeros(int(items["nbytes"].sum()), np.uint8)
    assert _jpeg.copy_ranges(cache._parts, ranges, out, cache.tables, items, sums) == []
    for row, col, value in ((1, 1, -8), (1, 2, 1), (0, 1, 8), (0, 0, 1), (1, 3, 1)):
        bad = ranges.copy()  # before the record, past its end, a record's range in another part, past the output
        bad[row, col] += value
        with pytest.raises(ValueError, match="copy_ranges: an item's record") as exc:
            _jpeg.copy_ranges(cache._parts, bad, out, cache.tables, items, sums)
        assert exc.value.args[1] == row
    for field, value in (("offset", len(cache._parts[0])), ("nbytes", 1 << 62), ("part", 1), ("table", -1)):
        bad = items.copy()
        bad[field][0] = value
        with pytest.raises(ValueError, match="copy_ranges: an item's record"):
            _jpeg.copy_ranges(cache._parts, ranges, out, cache.tables, bad, sums)
        with pytest.raises(ValueError, match="record_checksums"):
            _jpeg.record_checksums(cache._parts, cache.tables, bad, np.zeros(2, np.uint64))
    with pytest.raises(ValueError, match="go together"):
        _jpeg.copy_ranges(cache._parts, ranges, out, cache.tables)
    with pytest.raises(ValueError, match="groups"):
        _jpeg.copy_ranges(cache._parts, ranges[:1], out, cache.tables, items, sums)
    with pytest.raises(ValueError, match="sums must be uint64"):
        _jpeg.copy_ranges(cache._parts, ranges, out, cache.tables, items, sums[:1])
    tables = np.array(cache.tables)
    with pytest.raises(ValueError, match="shares memory"):
        _jpeg.copy_ranges(cache._parts, ranges, tables.reshape(-1).view(np.uint8), tables, items, sums)
    with pytest.raises(ValueError, match="record_checksums: items must be"):
        _jpeg.record_checksums(cache._parts, cache.tables, items, np.zeros(3, np.uint64))
