"""Streams shuffled as well as a folder, or told otherwise: the reader order over ImageNet-sized
class-sorted shards (labels only: 1,000 classes × 1,281, shards of 1,000) with and without
interleaving, the same stream rewritten by ``write_shards`` (≥ 0.95× a uniform shuffle's distinct
classes per batch of 256), every sample read exactly once under interleaving, real shards written
and read back, ``dctnet verify`` on shards and the warning at the start of ``dctnet train``."""

from __future__ import annotations

import subprocess
import sys
import tarfile

import numpy as np
import pytest

from dctnet.data.shards import TarShardDataset, global_order, write_shards
from dctnet.data.shuffle_quality import batch_stats, labels_of, stream_quality, uniform_stats
from dctnet.synthetic import synthetic_jpeg

C, PER, SHARD, BATCH = 1000, 1281, 1000, 256


def _simulated(labels: np.ndarray, interleave: int, seed: int = 0) -> tuple[TarShardDataset, object]:
    """A TarShardDataset over in-memory shards of ``labels`` (consecutive SHARD-sized chunks) and
    the labels-only reader its ``raw_split`` takes — the real order logic, no files."""
    shards = {f"s{i:05d}": labels[i * SHARD:(i + 1) * SHARD] for i in range(-(-len(labels) // SHARD))}
    ds = TarShardDataset.__new__(TarShardDataset)
    ds.shards, ds.seed, ds.shuffle, ds.buffer, ds.epoch, ds.interleave = sorted(shards), seed, True, 1000, 0, interleave

    ds.sizes, ds._offsets = [len(shards[name]) for name in ds.shards], [None] * len(shards)

    def read(name, start, stop):  # samples start..stop of a shard, as a reader entering it there sees them
        return ({"__key__": f"{name}/{j}", "cls": str(int(shards[name][j])).encode()} for j in range(start, stop))
    return ds, read


def _quality(ds, read, readers, mode):
    return stream_quality(lambda me, total: labels_of(ds.raw_split(me, total, read)), readers, BATCH, num_classes=C,
                          mode=mode, batches=10)


SORTED = np.repeat(np.arange(C), PER)


def test_uniform_baseline_is_the_closed_form():
    d, e = uniform_stats([PER] * C, BATCH, batches=40)
    assert abs(d - C * (1 - (1 - 1 / C) ** BATCH)) < 3  # 225.9 for ImageNet's sizes
    assert 7.6 < e < 7.9
    assert batch_stats([0] * BATCH + [1, 2] * (BATCH // 2), BATCH)[:2] == (1.5, 0.5)


@pytest.mark.parametrize("readers,mode", [(1, "round-robin"), (8, "per-reader"), (8, "round-robin")])
def test_interleaving_raises_the_class_sorted_case(readers, mode):
    one = _quality(*_simulated(SORTED, 1), readers, mode)
    default = _quality(*_simulated(SORTED, TarShardDataset.__init__.__kwdefaults__["interleave"]), readers, mode)
    assert one.poor  # the problem the test is named for: a handful of classes per batch
    assert default.distinct >= 5 * one.distinct and default.distinct >= 30


@pytest.mark.parametrize("readers,mode", [(1, "round-robin"), (8, "per-reader"), (8, "round-robin")])
def test_rewritten_shards_read_as_mixed_as_a_folder(readers, mode):
    written = SORTED[global_order(len(SORTED), seed=0)]
    q = _quality(*_simulated(written, 32), readers, mode)
    assert q.distinct >= 0.95 * q.uniform_distinct, q.describe()
    assert not q.poor


@pytest.mark.parametrize("n_shards,readers", [(12, 3), (2, 5)])
def test_every_sample_once_across_readers_under_interleaving(n_shards, readers):
    labels = np.arange(n_shards * SHARD) // 7
    ds, read = _simulated(labels, 4)
    seen = [s["__key__"] for me in range(readers) for s in ds.raw_split(me, readers, read)]
    assert len(seen) == len(set(seen)) == len(labels)


def _folder(root, classes=3, per=5):
    for c in range(classes):
        d = root / f"class{c}"
        d.mkdir(parents=True)
        for i in range(per):
            (d / f"{i}.jpg").write_bytes(synthetic_jpeg(c * 100 + i, 24, 32))
    return sorted(p for p in root.rglob("*.jpg"))


def _read_back(pattern):
    out = []
    for path in sorted(__import__("glob").glob(pattern)):
        with tarfile.open(path) as tar:
            members = [m for m in tar if m.isfile()]
            for jpg, cls in zip(members[0::2], members[1::2]):
                assert cls.name.rsplit(".", 1)[0] == jpg.name.rsplit(".", 1)[0]
                out.append((jpg.name, tar.extractfile(cls).read(), tar.extractfile(jpg).read()))
    return out


def test_write_shards_from_a_folder_and_from_shards(tmp_path):
    files = _folder(tmp_path / "src")
    info = write_shards(tmp_path / "src", tmp_path / "out", shard_size=4, seed=3)
    assert info["samples"] == 15 and len(info["shards"]) == 4 and info["classes"] == ["class0", "class1", "class2"]
    got = _read_back(str(tmp_path / "out" / "shard-*.tar"))
    # the written order is the seeded permutation of the folder's sorted samples, labels its class indices
    order = global_order(15, 3)
    assert [name for name, _, _ in got] == [f"{i:09d}.jpg" for i in range(15)]
    for (name, cls, data), src in zip(got, order):
        assert data == files[src].read_bytes() and int(cls) == int(files[src].parent.name[-1])
    assert write_shards(tmp_path / "src", tmp_path / "again", shard_size=4, seed=3)["samples"] == 15
    assert _read_back(str(tmp_path / "again" / "shard-*.tar")) == got
    other = write_shards(tmp_path / "src", tmp_path / "other", shard_size=4, seed=4)
    assert [d for _, _, d in _read_back(str(tmp_path / "other" / "shard-*.tar"))] != [d for _, _, d in got]
    assert other["samples"] == 15
    # from those shards again: every sample once, members copied as they are (and the class names
    # of their folder's classes.txt, which the copied labels still index)
    again = write_shards(str(tmp_path / "out" / "shard-*.tar"), tmp_path / "re", shard_size=6, seed=1)
    assert again["samples"] == 15 and again["classes"] == ["class0", "class1", "class2"]
    assert sorted((c, d) for _, c, d in _read_back(str(tmp_path / "re" / "shard-*.tar"))) == sorted((c, d) for _, c, d in got)


def test_shards_write_takes_a_folder_of_shards_and_says_what_src_is(tmp_path, capsys):
    """`dctnet shards write DIR OUT` on a folder of tar shards re-shards them (every sample's members
    once, read back with tarfile against the source tars; its classes.txt copied along); `--help`
    says what SRC may be; a folder of neither class folders nor shards, and OUT = the source folder,
    are refused with what SRC takes."""
    from dctnet.cli import main

    src = tmp_path / "shards"
    pattern = _sorted_shards(src, classes=3, per=4)
    (src / "classes.txt").write_text("cat\ndog\nfox\n")
    want = sorted((c, d) for _, c, d in _read_back(pattern))
    with pytest.raises(SystemExit) as done:
        main(["shards", "write", str(src), str(tmp_path / "out"), "--shard-size", "5"])
    assert done.value.code == 0, capsys.readouterr().err
    assert sorted((c, d) for _, c, d in _read_back(str(tmp_path / "out" / "shard-*.tar"))) == want
    assert len(list((tmp_path / "out").glob("shard-*.tar"))) == 3
    assert (tmp_path / "out" / "classes.txt").read_text() == "cat\ndog\nfox\n"
    assert "12 samples in 3 shards" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["shards", "write", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    for words in ("folder of class folders", "folder of .tar shards", "glob", "save_to_disk", "parquet"):
        assert words in helped, words
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no images here")
    for args, says in (([str(tmp_path / "empty"), str(tmp_path / "o2")], "folder of .tar shards"),
                       ([str(src), str(src), "--prefix", "mixed"], "holds the source shards")):
        with pytest.raises(SystemExit) as done:
            main(["shards", "write", *args])
        err = capsys.readouterr().err
        assert done.value.code == 1 and says in err and "Traceback" not in err, err
    assert not list(src.glob("mixed-*.tar"))


def _sorted_shards(root, classes=6, per=40):
    """Class-sorted shards of synthetic JPEGs: one class per shard, as a folder written in order gives."""
    root.mkdir()
    for c in range(classes):
        with tarfile.open(root / f"train-{c:03d}.tar", "w") as tar:
            for i in range(per):
                for ext, data in (("jpg", synthetic_jpeg(c * 1000 + i, 16, 16)), ("cls", str(c).encode())):
                    info = tarfile.TarInfo(f"c{c}_{i:04d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, __import__("io").BytesIO(data))
    return str(root / "train-*.tar")


@pytest.fixture(scope="module")
def sorted_root(tmp_path_factory):
    """A root holding ``shards/train-*.tar``: class-sorted shards (built once for the module)."""
    root = tmp_path_factory.mktemp("sorted")
    _sorted_shards(root / "shards")
    return root


def test_verify_reports_the_shuffle_quality_of_shards(sorted_root, tmp_path):
    pattern = str(sorted_root / "shards" / "train-*.tar")
    run = [sys.executable, "-m", "dctnet", "verify", pattern, "--batch-size", "32", "--readers", "2", "--buffer", "16"]
    sorted_out = subprocess.run(run + ["--interleave", "1", "--strict"], capture_output=True, text=True, timeout=120)
    assert sorted_out.returncode == 1 and "far from a uniform shuffle" in sorted_out.stdout, sorted_out.stdout
    assert "dctnet shards write" in sorted_out.stdout
    write = subprocess.run([sys.executable, "-m", "dctnet", "shards", "write", pattern, str(tmp_path / "mixed")],
                           capture_output=True, text=True, timeout=120)
    assert write.returncode == 0 and "240 samples in 1 shards" in write.stdout, write.stderr
    mixed = subprocess.run([sys.executable, "-m", "dctnet", "verify", str(tmp_path / "mixed" / "*.tar"), "--batch-size",
                            "32", "--readers", "2", "--interleave", "1", "--buffer", "16", "--strict"], capture_output=True,
                           text=True,
                           timeout=120)
    assert mixed.returncode == 0 and "far from" not in mixed.stdout, mixed.stdout


@pytest.mark.parametrize("interleave,warns", [(1, True), (32, False)])
def test_dctnet_train_warns_on_a_class_sorted_stream(sorted_root, tmp_path, interleave, warns):
    from dctnet.train import load_recipe
    from dctnet.train.trainer import Trainer

    recipe = load_recipe(None, {
        "data": {"source": "shards", "root": str(sorted_root), "train": "shards/train-*.tar", "val": "shards/train-00*.tar",
                 "batch_size": 32, "threads": 1, "image_size": 16, "interleave": interleave, "buffer": 16},
        "model": {"arch": "resnet18", "input": "device-rgb", "num_classes": 6},
        "augment": [], "train": {"out": str(tmp_path / "run")}})
    said = []
    Trainer(recipe, log=said.append)
    warned = [m for m in said if "far from shuffled" in m]
    assert bool(warned) == warns, said
    if warns:
        assert "dctnet shards write" in warned[0] and "data.interleave" in warned[0]


def test_dctnet_bench_reports_the_recipes_stream_mixing(sorted_root):
    from dctnet.train import load_recipe
    from dctnet.train.bench import _stream_mixing

    spec = {"data": {"source": "shards", "root": str(sorted_root), "train": "shards/train-*.tar", "val": "shards/train-00*.tar",
                     "batch_size": 32, "threads": 1, "buffer": 16},
            "model": {"arch": "resnet18", "input": "device-rgb", "num_classes": 6}, "augment": []}
    poor = _stream_mixing(load_recipe(None, {**spec, "data": {**spec["data"], "interleave": 1}}))
    good = _stream_mixing(load_recipe(None, spec))
    assert poor["poor"] and not good["poor"] and good["distinct"] > poor["distinct"]
    assert _stream_mixing(load_recipe(None, {"model": {"arch": "resnet18"}})) is None


def test_verify_compares_with_every_class_of_the_shards_not_the_ones_seen(tmp_path):
    """A badly mixed stream shows few classes in its first batches; its uniform baseline must count
    all of the shards' classes (read from their labels), or the stream looks well shuffled."""
    pattern = _sorted_shards(tmp_path / "many", classes=40, per=10)
    out = subprocess.run([sys.executable, "-m", "dctnet", "verify", pattern, "--batch-size", "8", "--readers", "1",
                          "--interleave", "1", "--buffer", "4", "--strict"], capture_output=True, text=True, timeout=120)
    assert "400 labelled samples in 40 classes" in out.stdout, out.stdout
    assert out.returncode == 1 and "far from a uniform shuffle" in out.stdout, out.stdout


def test_shards_commands_name_unreadable_shards_without_a_traceback(tmp_path):
    bad = tmp_path / "bad-000.tar"
    bad.write_bytes(b"not a tar at all")
    for cmd in (["verify", str(bad)], ["shards", "write", str(bad), str(tmp_path / "out")],
                ["verify", str(bad), "--batch-size", "0"]):
        out = subprocess.run([sys.executable, "-m", "dctnet", *cmd], capture_output=True, text=True, timeout=120)
        assert out.returncode != 0 and "Traceback" not in out.stderr and "error" in out.stderr, (cmd, out.stderr)
