"""WebDataset tar shards: our reader (epoch coverage across ranks × workers, seeded shuffles) and
the decode step inside a real ``webdataset`` pipeline."""

from __future__ import annotations

import io
import tarfile

import pytest
import torch

from dctnet import data as D
from dctnet.synthetic import synthetic_jpeg


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    out = tmp_path_factory.mktemp("shards")
    paths = []
    n = 0
    for s in range(5):
        p = out / f"train-{s:04d}.tar"
        with tarfile.open(p, "w") as tar:
            for _ in range(9):
                for ext, data in (("jpg", synthetic_jpeg(n, 24 + n % 17, 40)), ("cls", str(n % 4).encode())):
                    info = tarfile.TarInfo(f"sample{n:05d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                n += 1
        paths.append(str(p))
    return paths


def keys(samples) -> list[int]:
    return [s.index for s in samples]


@pytest.mark.parametrize("world,workers", [(1, 0), (2, 0), (2, 2), (3, 2)])
def test_every_sample_once_per_epoch(shards, world, workers):
    seen = []
    for rank in range(world):
        ds = D.TarShardDataset(shards, crop=D.RandomResizedCrop(), seed=3, rank=rank, world_size=world, buffer=8)
        ds.set_epoch(2)
        dl = torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=D.collate, num_workers=workers)
        for batch in dl:
            seen += batch.index.tolist()
            assert set(batch.labels.tolist()) <= {0, 1, 2, 3}
    assert len(seen) == 45 and len(set(seen)) == 45


def test_shuffle_is_seeded_per_epoch(shards):
    def order(seed, epoch):
        ds = D.TarShardDataset(shards, seed=seed, buffer=10)
        ds.set_epoch(epoch)
        return keys(ds)

    assert order(1, 0) == order(1, 0)
    assert order(1, 0) != order(1, 1) and sorted(order(1, 0)) == sorted(order(1, 1))
    import zlib

    plain = D.TarShardDataset(shards, shuffle=False)  # file order: shard by shard, member by member
    assert keys(plain) == [zlib.crc32(f"sample{n:05d}".encode()) & 0x7FFFFFFF for n in range(45)]


def test_bad_members_follow_policy(tmp_path):
    p = tmp_path / "bad.tar"
    with tarfile.open(p, "w") as tar:
        for i, data in enumerate([synthetic_jpeg(0, 16, 16), b"\xff\xd8junk", synthetic_jpeg(1, 16, 16)]):
            info = tarfile.TarInfo(f"k{i}.jpg")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(Exception, match="k1"):
        list(D.TarShardDataset([str(p)], shuffle=False))
    out = list(D.TarShardDataset([str(p)], shuffle=False, on_error="skip"))
    batch = D.collate(out, pin_memory=False)
    assert len(batch) == 2 and len(batch.skipped) == 1 and batch.skipped[0][1].endswith("k1")


def test_decode_step_in_a_webdataset_pipeline(shards):
    wds = pytest.importorskip("webdataset")
    pipeline = wds.WebDataset(shards, shardshuffle=False).map(D.wds_decode(D.CenterCrop(), seed=0)).batched(
        8, collation_fn=D.collate)
    batches = list(pipeline)
    assert sum(len(b) for b in batches) == 45
    ours = D.collate(list(D.TarShardDataset(shards, crop=D.CenterCrop(), shuffle=False)), pin_memory=False)
    theirs = torch.cat([b.labels for b in batches])
    assert torch.equal(theirs, ours.labels)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_wds_decode_follows_the_epoch_into_persistent_workers(shards, context):
    """set_epoch on the step the parent holds changes the crops drawn in persistent DataLoader
    workers (before: every epoch repeated the first epoch's boxes)."""
    wds = pytest.importorskip("webdataset")
    step = D.wds_decode(D.RandomResizedCrop(), seed=3)
    pipeline = wds.WebDataset(shards, shardshuffle=False, empty_check=False).map(step)
    loader = torch.utils.data.DataLoader(pipeline, batch_size=None, num_workers=1, persistent_workers=True,
                                         multiprocessing_context=context)
    epochs = []
    for epoch in range(3):
        step.set_epoch(epoch)
        epochs.append({s.index: tuple(s.box) for s in loader})
    assert len(epochs[0]) == 45 and epochs[0].keys() == epochs[1].keys() == epochs[2].keys()
    for a, b in ((0, 1), (1, 2)):
        same = sum(epochs[a][k] == epochs[b][k] for k in epochs[a])
        assert same < 5, f"{same} of 45 boxes repeat between epochs {a} and {b}"
    # the draws are the in-process step's for that epoch
    step.set_epoch(2)
    here = {s.index: tuple(s.box) for s in pipeline}
    assert here == epochs[2]


# ---------------------------------------------------------------------- the split over ranks × readers
def write_sized_shards(root, sizes, *, side=8, name="part") -> list[str]:
    """Tar shards of tiny synthetic JPEGs, ``sizes[i]`` samples in shard ``i``, keys unique over
    all of them (``{name}{i}_{j}``); labels ``j % 4``."""
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, size in enumerate(sizes):
        path = root / f"{name}-{i:03d}.tar"
        with tarfile.open(path, "w") as tar:
            for j in range(size):
                for ext, data in (("jpg", synthetic_jpeg(i * 100 + j, side, side)), ("cls", str(j % 4).encode())):
                    info = tarfile.TarInfo(f"{name}{i}_{j}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        paths.append(str(path))
    return paths


def key_index(key: str) -> int:
    import zlib

    return zlib.crc32(key.encode()) & 0x7FFFFFFF


#: unequal shard sizes for 1–9 shards: 2–9 samples each, one shard of 1 (fewer than the 9 readers of
#: 3 ranks × 3 threads) from 3 shards on
SIZES = {k: [1 if i == 1 and k >= 3 else 2 + (5 * i + k) % 8 for i in range(k)] for k in range(1, 10)}


def trained(paths, world, threads, epoch, batch, drop_last):
    """What the trainer trains from these shards in one epoch: each rank's ThreadLoader over its
    TarShardDataset, every rank taking the smallest step count over ranks under ``drop_last``
    (trainer.py's all-reduce MIN; without it every batch, as evaluation reads them). Returns per
    rank the sample indices of the batches trained, and the step count."""
    loaders = []
    for rank in range(world):
        ds = D.TarShardDataset(paths, seed=5, rank=rank, world_size=world, buffer=3, interleave=2)
        loader = D.ThreadLoader(ds, batch, threads=threads, drop_last=drop_last, pin_memory=False)
        loader.set_epoch(epoch)
        loaders.append(loader)
    steps = min(len(loader) for loader in loaders) if drop_last else None
    out = []
    for loader in loaders:
        batches = [b.index.tolist() for b in loader]
        assert len(batches) == len(loader)  # the trainer's step count is the loader's real one
        out.append([i for b in batches[:steps] for i in b])
    return out, steps


@pytest.mark.parametrize("n_shards", range(1, 10))
def test_every_sample_trained_once_per_epoch_for_any_shards_ranks_and_threads(tmp_path, n_shards):
    """Shards of unequal sizes (1–9 of them) over 1–3 ranks × 1–3 loader threads: without drop_last
    the ranks train every sample exactly once per epoch; with it (the trainer's) nothing is trained
    twice and each rank leaves out less than one batch more than its own remainder (at most one batch)."""
    paths = write_sized_shards(tmp_path, SIZES[n_shards])
    n = sum(SIZES[n_shards])
    want = sorted(key_index(f"part{i}_{j}") for i, size in enumerate(SIZES[n_shards]) for j in range(size))
    batch = 4
    for world in (1, 2, 3):
        for threads in (1, 2, 3):
            for epoch in (0, 1):
                every, _ = trained(paths, world, threads, epoch, batch, drop_last=False)
                got = sorted(i for rank in every for i in rank)
                assert got == want, (world, threads, epoch)
                counts = [len(rank) for rank in every]
                assert counts == [n * (r + 1) // world - n * r // world for r in range(world)]
                kept, steps = trained(paths, world, threads, epoch, batch, drop_last=True)
                flat = [i for rank in kept for i in rank]
                assert len(flat) == len(set(flat)) == steps * batch * world
                for rank, mine in zip(every, kept):
                    assert mine == rank[:len(mine)]  # the same stream, its last part left out
                    assert len(rank) - len(mine) <= batch, (world, threads, epoch)


def test_the_split_is_a_seeded_permutation_each_epoch(tmp_path):
    """Under shuffling each epoch's runs differ (another shard order), the same (seed, epoch) gives
    the same batches on every rank and reader, and a rank's share does not depend on its threads."""
    paths = write_sized_shards(tmp_path, SIZES[5])

    def epoch_of(epoch, threads=2):
        return trained(paths, 2, threads, epoch, 4, drop_last=False)[0]

    assert epoch_of(0) == epoch_of(0) and epoch_of(3) == epoch_of(3)
    assert epoch_of(0) != epoch_of(1)
    assert [sorted(r) for r in epoch_of(1, threads=1)] == [sorted(r) for r in epoch_of(1, threads=3)]
    assert {tuple(sorted(epoch_of(e)[0])) for e in range(6)}.__len__() > 1  # rank 0 gets other samples


def test_a_reader_enters_a_shard_at_its_sample(tmp_path):
    """A run that begins inside a shard starts at its sample's header offset (or, compressed,
    skips the samples before it by their headers), reading what a whole read would give there;
    long member names (GNU/pax headers) included."""
    import gzip

    from dctnet.data.tar import iter_tar, shard_index

    (tmp_path / "plain").mkdir()
    path = tmp_path / "plain" / "long.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for j in range(7):
            key = f"{'deep/' * 30}k{j}" if j % 2 else f"k{j}"  # a long name on every other sample
            for ext, data in (("jpg", synthetic_jpeg(j, 8, 8)), ("cls", str(j).encode())):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    zipped = tmp_path / "long.tar.gz"
    zipped.write_bytes(gzip.compress(path.read_bytes()))
    whole = list(iter_tar(str(path)))
    n, offsets = shard_index(str(path))
    assert n == 7 and offsets is not None and shard_index(str(zipped)) == (7, None)
    for a, b in ((0, 7), (1, 4), (3, 7), (6, 7), (2, 3)):
        part = list(iter_tar(str(path), start=a, stop=b, offset=int(offsets[a])))
        assert [s["__key__"] for s in part] == [s["__key__"] for s in whole[a:b]]
        assert [s["jpg"] for s in part] == [s["jpg"] for s in whole[a:b]]
        zpart = list(iter_tar(str(zipped), start=a, stop=b))
        assert [(s["__key__"], s["cls"]) for s in zpart] == [(s["__key__"], s["cls"]) for s in whole[a:b]]
    # a dataset over both reads all 14 samples once over 4 readers (runs cross into each shard's middle)
    ds = D.TarShardDataset([str(path), str(zipped)], seed=1, buffer=2)
    seen = [s["__key__"] + s["__shard__"] for me in range(4) for s in ds.raw_split(me, 4)]
    assert len(seen) == len(set(seen)) == 14


def test_unreadable_shards_are_named_when_the_dataset_is_built(tmp_path):
    bad = tmp_path / "bad-000.tar"
    bad.write_bytes(b"not a tar at all" * 64)
    with pytest.raises(ValueError, match="bad-000.tar: not a readable tar shard"):
        D.TarShardDataset([str(bad)])


def _shard_recipe(tmp_path, root, batch_size, epochs=2):
    import yaml

    spec = {"data": {"source": "shards", "root": str(root), "train": "part-*.tar", "val": "part-004.tar",
                     "batch_size": batch_size, "threads": 2, "image_size": 16, "buffer": 16},
            "model": {"arch": "mobilenet_v3_small", "input": "device-rgb", "num_classes": 4}, "augment": [],
            "optim": {"epochs": epochs, "lr_batch": batch_size},
            "train": {"out": str(tmp_path / "run"), "progress": False, "torch_threads": 1, "checkpoint": False}}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


#: the tracker's case: 240 samples in 5 shards of unequal sizes, which two ranks used to train 160 of
UNEQUAL = [50, 50, 50, 50, 40]


def test_torchrun_two_ranks_train_every_sample_of_unequal_shards_once_per_epoch(tmp_path):
    """torchrun, 2 ranks × 2 loader threads, the classification trainer over 5 shards of 50, 50,
    50, 50 and 40 samples: every epoch trains all 240 samples, each once (batches of 8: 15 steps of
    8 on each rank, nothing for drop_last to leave out)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    write_sized_shards(tmp_path / "shards", UNEQUAL)
    path = _shard_recipe(tmp_path, tmp_path / "shards", batch_size=8)
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--rdzv-backend=c10d",
           "--rdzv-endpoint=localhost:0", str(root / "tests" / "shard_worker.py"), str(path), str(tmp_path / "seen")]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(root))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"seen.rank{k}.json").read_text()) for k in range(2)]
    assert [rank["steps_per_epoch"] for rank in ranks] == [15, 15]
    want = sorted(key_index(f"part{i}_{j}") for i, size in enumerate(UNEQUAL) for j in range(size))
    for epoch in ("0", "1"):
        per_rank = [rank["epochs"][epoch] for rank in ranks]
        assert [len(x) for x in per_rank] == [120, 120]
        assert sorted(per_rank[0] + per_rank[1]) == want, epoch  # 240 of 240, each once
    assert ranks[0]["epochs"]["0"] != ranks[0]["epochs"]["1"]  # another order (and share) each epoch
    assert "left out" not in r.stdout + r.stderr


def test_the_trainer_says_what_drop_last_leaves_out(tmp_path):
    """Batches that do not divide a rank's share: the trainer says how many samples an epoch leaves
    out (240 samples, batches of 32: 7 steps, 224 trained, 16 left out)."""
    from dctnet.train import load_recipe
    from dctnet.train.trainer import Trainer

    write_sized_shards(tmp_path / "shards", UNEQUAL)
    said = []
    t = Trainer(load_recipe(_shard_recipe(tmp_path, tmp_path / "shards", batch_size=32, epochs=1)), log=said.append)
    assert t.steps_per_epoch == 7
    note = [m for m in said if "left out" in m or "leaves out" in m]
    assert len(note) == 1 and "trains 224 of its 240" in note[0] and "leaves out 16" in note[0], said


def test_shards_write_refuses_a_second_split_in_one_folder(tmp_path, capsys):
    """`shards write` of train and then val into one folder: the second would overwrite the first's
    order.json and classes.txt, so it is refused (CLI: exit 1, a message, no traceback) before it
    writes anything; a folder of its own per split works."""
    import json

    from dctnet.cli import main
    from dctnet.data.shards import write_shards

    for split in ("train", "val"):
        for c in range(2):
            (tmp_path / "src" / split / f"c{c}").mkdir(parents=True)
            for i in range(3):
                (tmp_path / "src" / split / f"c{c}" / f"{i}.jpg").write_bytes(synthetic_jpeg(c * 10 + i, 8, 8))
    out = tmp_path / "shards"
    write_shards(tmp_path / "src" / "train", out, prefix="train", shard_size=4)
    order = (out / "order.json").read_text()
    assert len(json.loads(order)) == 6
    with pytest.raises(ValueError, match="order.json and classes.txt of another `shards write` \\(train-\\*.tar\\)"):
        write_shards(tmp_path / "src" / "val", out, prefix="val")
    with pytest.raises(SystemExit) as done:
        main(["shards", "write", str(tmp_path / "src" / "val"), str(out), "--prefix", "val"])
    err = capsys.readouterr().err
    assert done.value.code == 1 and "its own folder" in err and "Traceback" not in err, err
    assert not list(out.glob("val-*")) and (out / "order.json").read_text() == order
    assert write_shards(tmp_path / "src" / "val", tmp_path / "val", prefix="val")["samples"] == 6
