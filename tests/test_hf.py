"""Hugging Face ``datasets`` as a data source (issue 31, item 2): the map-style and streamed
datasets against independent oracles (the folder dataset over the same files, ``read_coefficients``
of the same bytes, the ClassLabel names), the rank × worker split, the seeded order, bad bytes,
``dctnet train`` from a saved and a streamed dataset, and a coefficient cache built from one."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

# datasets' own cache (load_dataset of parquet converts the files there): a private, temporary one,
# set before datasets reads its configuration
_HF_CACHE = tempfile.mkdtemp(prefix="dctnet-test-hf-")
atexit.register(shutil.rmtree, _HF_CACHE, True)
os.environ.setdefault("HF_DATASETS_CACHE", _HF_CACHE)
datasets = pytest.importorskip("datasets")
datasets.disable_progress_bars()

import dctnet  # noqa: E402
from dctnet import data as D  # noqa: E402
from dctnet.data.cache.check import compare_with_sources  # noqa: E402
from dctnet.data.hf import require_datasets  # noqa: E402
from dctnet.synthetic import make_labelled_dataset  # noqa: E402
from dctnet.train import RecipeError, Trainer, load_recipe  # noqa: E402

from conftest import IMAGENETTE, write_recipe  # noqa: E402


def folder_rows(split_dir: Path) -> tuple[list[str], list[tuple[str, int]]]:
    """Classes and (path, label) in ImageFolderDataset's order: the rows a dataset is written in."""
    ds = D.ImageFolderDataset(split_dir)
    return ds.classes, ds.samples


def hf_dataset(classes: list[str], rows: list[tuple[str, int]]) -> datasets.Dataset:
    """The rows as a Dataset with ImageNet-1k's Hub layout: an Image column of the files' bytes
    (and names) and a ClassLabel column."""
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=classes)})
    images = [{"bytes": Path(p).read_bytes(), "path": os.path.basename(p)} for p, _ in rows]
    return datasets.Dataset.from_dict({"image": images, "label": [y for _, y in rows]}, features=features)


def write_parquet(ds: datasets.Dataset, out: Path, n: int, stem: str = "part") -> list[int]:
    """``ds`` as ``n`` parquet files of contiguous rows (class-sorted, as the Hub's are): rows per file."""
    out.mkdir(parents=True, exist_ok=True)
    sizes = []
    for i in range(n):
        part = ds.shard(n, i, contiguous=True)
        part.to_parquet(str(out / f"{stem}-{i:05d}.parquet"))
        sizes.append(len(part))
    return sizes


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Real JPEG bytes: Imagenette (3 classes, 6 files each) when present, else generated ones;
    as a folder, a saved dataset and 5 parquet files."""
    tmp = tmp_path_factory.mktemp("hf_real")
    folder = tmp / "folder"
    if (IMAGENETTE / "val").is_dir():
        for c in sorted(d.name for d in (IMAGENETTE / "val").iterdir() if d.is_dir())[:3]:
            (folder / c).mkdir(parents=True)
            for f in sorted((IMAGENETTE / "val" / c).glob("*.JPEG"))[:6]:
                shutil.copy(f, folder / c / f.name)
    else:
        make_labelled_dataset(str(tmp / "gen"), classes=3, train_per_class=6, val_per_class=1, size=(40, 72), seed=3)
        shutil.copytree(tmp / "gen" / "train", folder)
    classes, rows = folder_rows(folder)
    ds = hf_dataset(classes, rows)
    ds.save_to_disk(str(tmp / "saved"), num_shards=2)
    sizes = write_parquet(ds, tmp / "pq", 5)
    return {"tmp": tmp, "folder": folder, "classes": classes, "rows": rows, "saved": tmp / "saved",
            "pq": str(tmp / "pq" / "part-*.parquet"), "sizes": sizes,
            "bytes": [Path(p).read_bytes() for p, _ in rows]}


def global_row(sizes: list[int], source: int, row: int) -> int:
    return sum(sizes[:source]) + row


# ---------------------------------------------------------------------- map-style
def test_rows_read_as_the_folder_dataset_reads_the_files(real):
    """Same samples as ImageFolderDataset over the same files (planes, windows, boxes, labels) at
    any (epoch, index), the ClassLabel names as classes, and the whole planes equal to
    read_coefficients of the row's bytes."""
    crop = D.RandomResizedCrop(scale=(0.3, 1.0))
    hf = D.HFDataset(real["saved"], crop=crop, seed=5)
    ref = D.ImageFolderDataset(real["folder"], crop=crop, seed=5)
    assert hf.classes == real["classes"] == ref.classes and len(hf) == len(ref)
    assert hf.targets.tolist() == [y for _, y in real["rows"]]
    keys = [(e, i) for e in (0, 3) for i in range(len(hf))]
    for a, b in zip(hf.load_batch(keys), ref.load_batch(keys)):
        assert (a.label, a.index, a.box, a.valid, a.sampling, a.color_space) == \
               (b.label, b.index, b.box, b.valid, b.sampling, b.color_space)
        assert all(np.array_equal(x, y) for x, y in zip(a.planes, b.planes))
    whole = D.HFDataset(real["saved"])  # FullImage: the whole planes
    for i in (0, len(whole) // 2, len(whole) - 1):
        want = dctnet.read_coefficients(real["bytes"][i])
        got = whole[i]
        assert len(got.planes) == len(want.planes)
        assert all(np.array_equal(x, y) for x, y in zip(got.planes, want.planes))
    # parquet read by row: the same rows in file order
    pq = D.HFDataset(real["pq"], crop=crop, seed=5)
    assert pq.targets.tolist() == hf.targets.tolist() and pq.classes == hf.classes
    a, b = pq[(2, 7)], hf[(2, 7)]
    assert a.box == b.box and all(np.array_equal(x, y) for x, y in zip(a.planes, b.planes))


def test_map_style_split_over_ranks_and_threads(real):
    """ThreadLoader on each of 2 ranks (2 threads) over a saved dataset: every row exactly once per
    epoch; the seeded order repeats for the same epoch and changes with the next."""
    hf = D.HFDataset(real["saved"], crop=D.CenterCrop(), seed=1)

    def epoch_order(epoch: int) -> list[list[int]]:
        per_rank = []
        for rank in range(2):
            sampler = D.EpochSampler(len(hf), seed=1, rank=rank, world_size=2)
            sampler.set_epoch(epoch)
            loader = D.ThreadLoader(hf, 4, sampler=sampler, threads=2, pin_memory=False)
            per_rank.append([i for b in loader for i in b.index.tolist()])
        return per_rank

    first = epoch_order(0)
    assert sorted(first[0] + first[1]) == list(range(len(hf)))
    assert epoch_order(0) == first and epoch_order(1) != first


# ---------------------------------------------------------------------- streamed
def stream_keys(ds: D.HFStreamDataset, total: int) -> list[list[tuple[int, int]]]:
    return [[(s, r) for s, r, _ in ds.raw_split(me, total)] for me in range(total)]


@pytest.mark.parametrize("world,workers", [(1, 1), (2, 1), (2, 2), (3, 4)])
def test_stream_reads_every_row_once_over_ranks_and_workers(real, world, workers):
    """5 parquet sources of unequal sizes over ranks × workers (split by rows, as tar shards):
    every row exactly once per epoch, and each rank's len what it reads, ranks within one row of
    each other (they agree on a step count that leaves out no more than a batch)."""
    total_rows = sum(real["sizes"])
    seen: Counter = Counter()
    for rank in range(world):
        ds = D.HFStreamDataset(real["pq"], rank=rank, world_size=world, buffer=4, interleave=2, seed=2)
        ds.set_epoch(1)
        mine = [k for me in range(rank * workers, (rank + 1) * workers) for k in stream_keys(ds, world * workers)[me]]
        assert len(ds) == len(mine) == total_rows * (rank + 1) // world - total_rows * rank // world
        seen.update(mine)
    assert sum(seen.values()) == total_rows and set(seen.values()) == {1}
    assert {global_row(real["sizes"], s, r) for s, r in seen} == set(range(total_rows))


def test_stream_samples_labels_and_coefficients(real):
    """Each streamed sample: the label of its row, the row's bytes' coefficients (FullImage),
    the classes of the ClassLabel; a saved dataset streams the same rows."""
    ds = D.HFStreamDataset(real["pq"], buffer=3, interleave=3)
    assert ds.classes == real["classes"] and ds.shard_sizes == real["sizes"] and len(ds) == sum(real["sizes"])
    labels = [y for _, y in real["rows"]]
    n = 0
    for (s, r, _), sample in zip(ds.raw_split(0, 1), ds.iter_split(0, 1)):
        g = global_row(real["sizes"], s, r)
        assert sample.label == labels[g]
        want = dctnet.read_coefficients(real["bytes"][g])
        assert all(np.array_equal(x, y) for x, y in zip(sample.planes, want.planes))
        n += 1
    assert n == len(labels)
    # crops: the webdataset step's rule for a sample keyed "source:row" — (seed, epoch, crc32(key))
    crop = D.RandomResizedCrop(scale=(0.2, 1.0))
    ds = D.HFStreamDataset(real["pq"], crop=crop, seed=7, buffer=3)
    ds.set_epoch(3)
    step = D.WdsDecode(crop, seed=7)
    step.set_epoch(3)
    for (s, r, _), sample in zip(ds.raw_split(0, 1), ds.iter_split(0, 1)):
        g = global_row(real["sizes"], s, r)
        ref = step({"__key__": f"{s}:{r}", "jpg": real["bytes"][g], "cls": str(labels[g]).encode()})
        assert (sample.index, sample.box, sample.valid, sample.label) == (ref.index, ref.box, ref.valid, ref.label)
        assert all(np.array_equal(x, y) for x, y in zip(sample.planes, ref.planes))
    saved = D.HFStreamDataset(real["saved"], buffer=3)
    assert saved.num_shards == len(labels) and sorted(s.label for s in saved) == sorted(labels)


def test_stream_order_is_seeded_per_epoch_and_interleaves_sources(real):
    """Same seed and epoch: the same order (also in a DataLoader with 2 workers); another epoch or
    seed: another; interleave 1 reads the sources one after another, interleave 3 mixes them."""
    def order(seed: int, epoch: int, **kw) -> list[tuple[int, int]]:
        ds = D.HFStreamDataset(real["pq"], seed=seed, **kw)
        ds.set_epoch(epoch)
        return stream_keys(ds, 1)[0]

    a = order(0, 0, buffer=4)
    assert a == order(0, 0, buffer=4) and a != order(0, 1, buffer=4) and a != order(1, 0, buffer=4)
    assert a != sorted(a)

    def runs(keys):  # maximal runs of consecutive samples from one source
        return 1 + sum(x[0] != y[0] for x, y in zip(keys, keys[1:]))

    one = order(0, 0, buffer=1, interleave=1)
    assert runs(one) == len(real["sizes"])  # each source front to back, then the next
    assert all(r == i for i, (_, r) in enumerate(k for k in one if k[0] == one[0][0]))
    assert runs(order(0, 0, buffer=1, interleave=3)) > len(real["sizes"])
    # DataLoader workers: rank × worker split, the same samples as the readers' own iter_split
    ds = D.HFStreamDataset(real["pq"], crop=D.CenterCrop(), buffer=4, seed=0)
    ds.set_epoch(2)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, collate_fn=D.collate)
    got = sorted(i for b in loader for i in b.index.tolist())
    want = sorted(s.index for me in range(2) for s in ds.iter_split(me, 2))
    assert got == want and len(got) == sum(real["sizes"])


# ---------------------------------------------------------------------- bad bytes
@pytest.fixture(scope="module")
def bad(real, tmp_path_factory):
    """A saved dataset and a parquet file with 3 bad rows among good ones: PNG-like bytes, a
    truncated JPEG, no bytes at all."""
    tmp = tmp_path_factory.mktemp("hf_bad")
    good = real["bytes"][:5]
    cells = [{"bytes": b, "path": f"ok{i}.jpg"} for i, b in enumerate(good)]
    cells[1] = {"bytes": b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "path": "fake.jpg"}
    cells[3] = {"bytes": good[3][: len(good[3]) // 2], "path": "cut.jpg"}
    cells.append(None)  # a null image
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    ds = datasets.Dataset.from_dict({"image": cells, "label": [i % 2 for i in range(len(cells))]}, features=features)
    ds.save_to_disk(str(tmp / "saved"))
    write_parquet(ds, tmp / "pq", 2)
    return {"saved": tmp / "saved", "pq": str(tmp / "pq" / "*.parquet"), "bad_rows": {1, 3, 5}, "n": len(cells)}


def test_bad_bytes_raise_naming_the_row_or_are_skipped_and_counted(bad):
    raising = D.HFDataset(bad["saved"])
    for row, what in ((1, "not a JPEG: PNG"), (3, str(bad["saved"]) + "[3] (cut.jpg)"), (5, "no image bytes")):
        with pytest.raises(dctnet.JpegError, match=rf"{row}\]") as exc:
            raising[row]
        assert what in str(exc.value)
    with pytest.raises(dctnet.JpegError, match="and 2 more unusable rows"):
        D.HFDataset(bad["saved"]).check(threads=1)
    skipping = D.HFDataset(bad["saved"], on_error="skip")
    batch = D.collate(skipping.load_batch([(0, i) for i in range(bad["n"])]))
    assert sorted(i for i, _, _ in batch.skipped) == sorted(bad["bad_rows"])
    assert sorted(batch.index.tolist()) == sorted(set(range(bad["n"])) - bad["bad_rows"])
    left = skipping.check(threads=1)
    assert len(left) == 3 and len(skipping) == bad["n"] - 3 and skipping.rows.tolist() == [0, 2, 4]
    # streamed: the same rule, the bad rows named by source and row
    stream = D.HFStreamDataset(bad["pq"], buffer=2)
    with pytest.raises(dctnet.JpegError, match=r"source \d, row \d"):
        list(stream)
    stream = D.HFStreamDataset(bad["pq"], buffer=2, on_error="skip")
    loader = D.ThreadLoader(stream, 2, threads=2, pin_memory=False)
    batches = list(loader)
    assert sum(len(b.skipped) for b in batches) == 3
    assert sum(len(b.index) for b in batches) == bad["n"] - 3


# ---------------------------------------------------------------------- recipes and training
@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A generated dataset (3 classes) as a folder, saved datasets and parquet files per split."""
    tmp = tmp_path_factory.mktemp("hf_small")
    make_labelled_dataset(str(tmp / "folder"), classes=3, train_per_class=16, val_per_class=4, size=(40, 64), seed=4)
    for split in ("train", "val"):
        classes, rows = folder_rows(tmp / "folder" / split)
        ds = hf_dataset(classes, rows)
        ds.save_to_disk(str(tmp / "saved" / split))
        write_parquet(ds, tmp / "pq", 3, stem=split)
    return tmp


def test_train_from_a_saved_dataset_matches_the_folder(small, tmp_path):
    """data.source hf (read by row) trains on the same samples, crops and labels as the folder the
    rows came from: the same losses and accuracy."""
    runs = {}
    for source, root, sub in (("folder", small / "folder", ""), ("hf", small / "saved", "")):
        path = write_recipe(tmp_path / source, str(root), data__source=source, train__max_steps=2, augment=[])
        runs[source] = Trainer(load_recipe(path)).fit()
    for key in ("train_loss", "val_top1", "val_loss"):
        assert runs["hf"][key] == pytest.approx(runs["folder"][key], rel=1e-5, abs=1e-6), key
    assert runs["hf"]["val_images"] == 12


def test_train_cli_from_a_streamed_parquet_dataset(small, tmp_path, capsys):
    from dctnet.cli import main as cli_main  # the CLI, as a user runs it

    path = write_recipe(tmp_path, str(small / "pq"), data__source="hf", data__streaming=True,
                        data__train="train-*.parquet", data__val="val-*.parquet", data__interleave=2)
    with pytest.raises(SystemExit) as exit_:
        cli_main(["train", str(path), "--set", "train.max_steps=2", "--set", "optim.epochs=1"])
    assert exit_.value.code == 0, capsys.readouterr().err
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert '"val_images": 12' in metrics


def test_recipes_refuse_what_hf_cannot_do(small, tmp_path):
    for over, match in (({"data__source": "hf", "model__input": "rgb"}, "'rgb'"),
                        ({"data__streaming": True}, "data.streaming is for data.source: hf"),
                        ({"data__source": "hf", "data__streaming": True, "data__limit_train": 8}, "indexable"),
                        ({"data__source": "hf", "data__label_column": "image"}, "both 'image'")):
        with pytest.raises(RecipeError, match=match):
            load_recipe(write_recipe(tmp_path, str(small / "saved"), **over))
    path = write_recipe(tmp_path, str(small / "saved"), data__source="hf", data__train="nowhere")
    with pytest.raises(FileNotFoundError, match="no Hugging Face dataset"):
        Trainer(load_recipe(path))
    with pytest.raises(ValueError, match="no column 'img'"):
        D.HFDataset(small / "saved" / "train", image_column="img")


def test_a_saved_dataset_dict_validates_on_the_split_it_holds(small, tmp_path):
    """A DatasetDict saved with train/test splits (datasets' own save_to_disk, its dataset_dict.json)
    trains from a recipe that names no splits: validation reads the test split — the rows of the
    split saved alone — and of validation/valid/val/test the first the dict holds; a dict with none
    of them, or a split named that is not there, is refused naming the splits it has."""
    from dctnet.data.hf import split_path
    from dctnet.train.inputs import data_root
    from dctnet.train.pipeline import build_pipeline

    train = datasets.load_from_disk(str(small / "saved" / "train"))
    test = datasets.load_from_disk(str(small / "saved" / "val"))
    dd = tmp_path / "dd"
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(dd))
    recipe = load_recipe(write_recipe(tmp_path, str(dd), data__source="hf"))
    pipe = build_pipeline(recipe, torch.device("cpu"))
    val, fit = pipe.val_loader.dataset, pipe.train_loader.dataset
    assert [r["bytes"] for r in val.data["image"]] == [r["bytes"] for r in test.cast_column(
        "image", datasets.Image(decode=False))["image"]]
    assert len(val) == len(test) == 12 and len(fit) == len(train) == 48
    both = tmp_path / "both"
    datasets.DatasetDict({"train": train, "test": test, "validation": test.select(range(3))}).save_to_disk(str(both))
    assert split_path(both, "val", "val") == both / "validation"
    assert split_path(tmp_path, "both", "val") == both / "validation"  # data.val naming the dict itself
    assert split_path(both, "test", "val") == both / "test"  # a split named is read as named
    only = tmp_path / "only"
    datasets.DatasetDict({"train": train, "extra": test}).save_to_disk(str(only))
    for name, match in (("val", r"splits train, extra: none is validation / valid / val / test"),
                        ("valid", r"no split 'valid' .*one of train, extra")):
        with pytest.raises(FileNotFoundError, match=match):
            split_path(only, name, "val")
    recipe.data.root = str(only)
    with pytest.raises(FileNotFoundError, match=r"splits train, extra.*data\.val"):
        data_root(recipe)


def test_missing_datasets_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets now raises ImportError
    with pytest.raises(ImportError, match=r"pip install dctnet\[hf\]"):
        require_datasets()
    with pytest.raises(ImportError, match=r"dctnet\[hf\]"):
        D.HFDataset("/nonexistent/x.parquet")


# ---------------------------------------------------------------------- coefficient cache
@pytest.mark.parametrize("kind", ["saved", "pq"])
def test_cache_built_from_an_hf_dataset_reads_the_rows_coefficients(real, tmp_path, kind):
    out = D.build_cache(str(real[kind]), tmp_path / "cache", progress=False)
    cache = D.open_cache(out)
    assert len(cache) == len(real["rows"]) and cache.meta["classes"] == real["classes"]
    assert [s["label"] for s in cache.meta["sources"]] == [y for _, y in real["rows"]]
    for i in range(len(cache)):
        want = dctnet.read_coefficients(real["bytes"][i])
        got = cache.coefficients(i)
        assert all(np.array_equal(x, y) for x, y in zip(got.planes, want.planes))
    checked, different = compare_with_sources(cache, 4)  # `dctnet cache verify`: re-read from the dataset
    assert checked == 4 and different == []
    ds = D.CacheDataset(out, crop=D.RandomResizedCrop(), seed=3)
    ref = D.HFDataset(real["saved"], crop=D.RandomResizedCrop(), seed=3)
    a, b = ds[(1, 5)], ref[(1, 5)]
    assert a.box == b.box and a.label == b.label and all(np.array_equal(x, y) for x, y in zip(a.planes, b.planes))


def test_cache_build_cli_takes_a_saved_dataset_and_refuses_bad_rows(bad, tmp_path, capsys):
    from dctnet.cli import main as cli_main  # the CLI, as a user runs it

    with pytest.raises(SystemExit) as exit_:
        cli_main(["cache", "build", str(bad["saved"]), str(tmp_path / "c1"), "--quiet"])
    assert exit_.value.code == 1 and "[1]" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        cli_main(["cache", "build", str(bad["saved"]), str(tmp_path / "c2"), "--quiet", "--on-error", "skip"])
    assert exit_.value.code == 0
    cache = D.open_cache(tmp_path / "c2")
    assert sorted(b["index"] for b in cache.meta["bad"]) == sorted(bad["bad_rows"])


def test_shards_write_from_a_saved_dataset_and_parquet(real, tmp_path):
    """dctnet shards write from a Hugging Face dataset: every row once, its stored bytes and label,
    in the seeded global order; the ClassLabel names in classes.txt."""
    import tarfile

    from dctnet.data.shards import global_order, write_shards

    for name, src in (("saved", real["saved"]), ("pq", real["pq"])):
        info = write_shards(src, tmp_path / name, shard_size=5, seed=2)
        assert info["samples"] == len(real["rows"]) and info["classes"] == real["classes"]
        assert (tmp_path / name / "classes.txt").read_text().split() == real["classes"]
        got = []
        for shard in info["shards"]:
            with tarfile.open(shard) as tar:
                members = [m for m in tar if m.isfile()]
                got += [(tar.extractfile(j).read(), int(tar.extractfile(c).read())) for j, c in zip(members[0::2],
                                                                                                   members[1::2])]
        want = [(real["bytes"][i], real["rows"][i][1]) for i in global_order(len(real["rows"]), 2)]
        assert got == want, name
