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
