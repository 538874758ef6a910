"""What a new user hit: silent wrong results and missing pieces in the data and training path —
recipe numbers and ranges, one on_error rule with skipped samples reported, non-JPEG files,
shard sources (loader, recipes, caches built from a glob), the cache source check from a recipe,
fresh metrics per run, threads and messages at exit."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import threading
import warnings

import pytest

import dctnet
from dctnet import data as D
from dctnet.synthetic import make_labelled_dataset, synthetic_jpeg
from dctnet.train import RecipeError, Trainer, load_recipe
from dctnet.train.trainer import train

from conftest import write_recipe


def recipe(tmp_path, root, **over):
    over = {"optim__lr": 0.05, "optim__warmup_epochs": 0, "train__max_steps": 2, **over}
    return write_recipe(tmp_path, root, name="u", batch_size=8, **over)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("small")
    return make_labelled_dataset(str(root), classes=2, train_per_class=12, val_per_class=4, size=(40, 48), seed=2)


@pytest.fixture
def with_bad_files(small, tmp_path):
    """The small dataset plus, in train/<first class>/: a corrupt .jpg, a truncated .jpg and a
    real PNG; and a class folder holding only PNGs."""
    from PIL import Image

    root = tmp_path / "data"
    shutil.copytree(small, root)
    first = sorted(os.listdir(root / "train"))[0]
    (root / "train" / first / "zz-corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    good = sorted((root / "train" / first).glob("*.jpg"))[0].read_bytes()
    (root / "train" / first / "zz-truncated.jpg").write_bytes(good[:40])
    Image.new("RGB", (20, 20), (10, 200, 30)).save(root / "train" / first / "photo.png")
    return root


# ---------------------------------------------------------------------- recipes
def test_recipe_numbers_in_any_standard_notation_and_ranges(tmp_path):
    r = load_recipe(None, ["optim.lr=1e-3", "optim.weight_decay=5E-2", "data.limit_train=1e3", "optim.momentum=.9"])
    assert (r.optim.lr, r.optim.weight_decay, r.data.limit_train, r.optim.momentum) == (1e-3, 5e-2, 1000, 0.9)
    f = tmp_path / "r.yaml"
    f.write_text("optim: {lr: 1e-3, warmup_epochs: 2e0}\n")  # YAML 1.1 reads both as strings
    assert load_recipe(f).optim.lr == 1e-3
    for bad, match in [("data.limit_train=-5", r"data\.limit_train must be in \[0, inf\)"),
                       ("model.keep=200", r"model\.keep must be in \[1, 64\]"),
                       ("data.crop_pct=5", r"data\.crop_pct must be in \(0, 4\]"), ("data.crop_fraction=0.9", "crop_pct"),
                       ("optim.lr=.nan", "expected a number"), ("optim.lr=-1e-3", r"optim\.lr must be in \(0"),
                       ("data.limit_train=1.5", "expected an integer"), ("optim.momentum=1", "momentum"),
                       ("augment.hflip=1.5", "hflip"), ("data.threads=0", "threads"),
                       ("data.on_error=ignore", "'raise', 'skip'"), ("data.verify=size", "'stat', 'hash', 'none'")]:
        with pytest.raises(RecipeError, match=match):
            load_recipe(None, [bad])


def test_a_new_run_into_an_old_run_directory_starts_fresh_metrics(small, tmp_path):
    path = recipe(tmp_path, small)
    for _ in range(2):
        Trainer(load_recipe(path)).fit()
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in rows] == [1]  # before: [1, 1]


# ---------------------------------------------------------------------- on_error
def test_one_on_error_rule_and_its_default(with_bad_files, tmp_path):
    """Datasets, shard readers, the webdataset step, cache builds and recipes default to raise."""
    import inspect

    for fn in (D.ImageFolderDataset, D.CacheDataset, D.TarShardDataset, D.WdsDecode, D.build_cache):
        assert inspect.signature(fn).parameters["on_error"].default == "raise", fn
    assert load_recipe(None).data.on_error == "raise"
    with pytest.raises(dctnet.JpegError, match="zz-corrupt|zz-truncated"):
        D.build_cache(with_bad_files / "train", tmp_path / "c", progress=False)


@pytest.mark.parametrize("inp", ["dct", "rgb"])
def test_training_follows_data_on_error_and_reports_skipped(with_bad_files, tmp_path, inp):
    over = dict(model__input=inp, train__max_steps=0)
    with pytest.raises(dctnet.JpegError, match="zz-"):  # raise: the file and the reason, not a PIL traceback
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", D.UnusedFilesWarning)
            Trainer(load_recipe(recipe(tmp_path / "a", with_bad_files, **over))).fit()
    path = recipe(tmp_path / "b", with_bad_files, data__on_error="skip", optim__epochs=2, **over)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", D.UnusedFilesWarning)
        logs = []
        Trainer(load_recipe(path), log=logs.append).fit()
    run = tmp_path / "b" / "run"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    # the two bad train files are left out once, before training (a full decode of every file):
    # no epoch meets them, and both arms leave out the same ones
    assert all(r["val_skipped"] == 0 and r["train_skipped"] == 0 for r in rows), rows
    assert "left out 2 unusable files" in logs[0] and "skipped.txt" in logs[0]
    lines = (run / "skipped.txt").read_text().splitlines()
    assert len(lines) == 2
    assert all(line.split("\t")[:2] == ["0", "train"] and "zz-" in line.split("\t")[2] for line in lines)


def test_non_jpeg_files_are_counted_and_reported(with_bad_files):
    from PIL import Image

    (with_bad_files / "train" / "only-png").mkdir()
    Image.new("RGB", (8, 8)).save(with_bad_files / "train" / "only-png" / "a.png")
    with pytest.warns(D.UnusedFilesWarning, match=r"2 file\(s\) are not JPEGs.*\.png.*without any JPEG: only-png"):
        ds = D.ImageFolderDataset(with_bad_files / "train")
    assert len(ds.non_jpeg) == 2 and ds.empty_classes == ["only-png"]
    assert "only-png" in ds.classes  # labels stay torchvision's
    report = D.verify_dataset(with_bad_files)
    assert sorted(report["splits"]["train"]["non_jpeg"])[0].endswith(".png")
    assert report["splits"]["train"]["empty_classes"] == ["only-png"]
    text = D.format_report(report)
    assert "not JPEG" in text and "only-png" in text


# ---------------------------------------------------------------------- shards
def write_shards(out, prefix, n_shards, per_shard, start=0):
    out.mkdir(parents=True, exist_ok=True)
    n = start
    for s in range(n_shards):
        with tarfile.open(out / f"{prefix}-{s:03d}.tar", "w") as tar:
            for _ in range(per_shard):
                for ext, data in (("jpg", synthetic_jpeg(n, 32 + n % 9, 40)), ("cls", str(n % 2).encode())):
                    info = tarfile.TarInfo(f"{prefix}{n:05d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                n += 1
    return out


def test_thread_loader_streams_an_iterable_dataset(tmp_path):
    shards = write_shards(tmp_path / "s", "train", 3, 20)
    ds = D.TarShardDataset(str(shards / "train-*.tar"), crop=D.RandomResizedCrop(), seed=4)
    assert len(ds) == 60
    loader = D.ThreadLoader(ds, 16, threads=2, pin_memory=False)  # before: "has no len()"
    first = [b.index.tolist() for b in loader]
    assert len(loader) == len(first) == 4 and sorted(sum(first, [])) == sorted(s.index for s in ds)
    assert [b.index.tolist() for b in loader] == first  # the same batches whatever the threads' timing
    loader.set_epoch(1)
    assert [b.index.tolist() for b in loader] != first
    for _ in loader:
        break
    assert not [t for t in threading.enumerate() if t.name.startswith("dctnet-loader")]
    with pytest.raises(ValueError, match="sampler"):
        D.ThreadLoader(ds, 16, sampler=D.EpochSampler(60))


def test_a_cache_built_from_a_shard_glob_opens_beside_other_shards(tmp_path):
    shards = write_shards(tmp_path / "s", "train", 2, 6)
    write_shards(shards, "val", 1, 4, start=100)
    out = D.build_cache(str(shards / "train-*.tar"), tmp_path / "cache", progress=False)
    D.open_cache(out)  # before: "is stale ...: 1 new (e.g. val-000.tar)"
    write_shards(shards / "more", "x", 1, 1)
    shutil.move(str(shards / "more" / "x-000.tar"), shards / "train-009.tar")
    with pytest.raises(D.CacheError, match="new.*train-009"):
        D.open_cache(out)


def test_recipes_train_from_shards_and_from_a_cache_whose_sources_moved(tmp_path):
    shards = write_shards(tmp_path / "s", "train", 2, 16)
    write_shards(shards, "val", 1, 8, start=100)
    path = recipe(tmp_path / "a", shards, data__source="shards", data__train="train-*.tar", data__val="val-*.tar",
                  model__num_classes=2, train__max_steps=0)
    record = Trainer(load_recipe(path)).fit()
    assert record["val_images"] == 8
    with pytest.raises(ValueError, match="num_classes"):
        Trainer(load_recipe(recipe(tmp_path / "b", shards, data__source="shards", data__train="train-*.tar",
                                   data__val="val-*.tar")))
    # a cache whose JPEGs moved: refused by the default check, trained from with data.verify: none
    root = tmp_path / "caches"
    D.build_cache(str(shards / "train-*.tar"), root / "train", progress=False)
    D.build_cache(str(shards / "val-*.tar"), root / "val", progress=False)
    shutil.move(str(shards), tmp_path / "moved")
    cache_recipe = dict(data__source="cache", model__num_classes=2, train__max_steps=1)
    with pytest.raises(D.CacheError, match="stale|missing"):
        Trainer(load_recipe(recipe(tmp_path / "c", root, **cache_recipe)))
    Trainer(load_recipe(recipe(tmp_path / "d", root, data__verify="none", **cache_recipe))).fit()


# ---------------------------------------------------------------------- exit
def test_no_thread_outlives_a_run(small, tmp_path):
    train(load_recipe(recipe(tmp_path, small, data__threads=2)))
    alive = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    assert not [n for n in alive if n.startswith("dctnet")], alive
