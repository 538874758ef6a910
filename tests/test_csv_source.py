"""The ``csv`` data source: a split is a CSV table of image paths and class names.

Oracle: the same files as an image folder — :class:`dctnet.data.ImageFolderDataset` and
torchvision's ``ImageFolder`` give every file the label its class name gets in the table."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest
import torch

from dctnet.data import CsvImageDataset, ImageFolderDataset
from dctnet.data.csv_list import read_image_table
from dctnet.train import Trainer, load_recipe

from conftest import write_recipe


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> Path:
    """A labelled folder of mixed JPEGs (3 classes) and ``train.csv`` / ``val.csv`` listing its files
    (paths relative to the tables, rows shuffled, one path absolute)."""
    from dctnet.synthetic import make_labelled_dataset

    root = Path(make_labelled_dataset(str(tmp_path_factory.mktemp("csv")), classes=3, train_per_class=4,
                                      val_per_class=2, size=(40, 64), seed=2))
    for split in ("train", "val"):
        rows = [(os.path.relpath(p, root), Path(p).parent.name) for p, _ in ImageFolderDataset(root / split).samples]
        rows = rows[::-1]
        rows[0] = (str(root / rows[0][0]), rows[0][1])
        with open(root / f"{split}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["file", "species"])
            w.writerows(rows)
    return root


def test_a_table_labels_its_files_as_the_folder_does(tables):
    from torchvision.datasets import ImageFolder

    for split in ("train", "val"):
        ds = CsvImageDataset(tables / f"{split}.csv", image_column="file", label_column="species")
        folder = ImageFolder(str(tables / split))
        assert ds.classes == folder.classes
        want = {os.path.normpath(p): t for p, t in folder.samples}
        assert {os.path.normpath(p): t for p, t in ds.samples} == want
        a = ds.load_batch([(0, i) for i in range(3)])
        assert all(s.label == ds.samples[i][1] for i, s in enumerate(a))


@pytest.mark.parametrize("arm", ["dct", "rgb"])
def test_a_csv_recipe_trains_in_both_arms(tables, tmp_path, arm):
    if arm == "rgb":
        pytest.importorskip("timm")
    path = write_recipe(tmp_path, str(tables), batch_size=4, data__source="csv", data__train="train.csv",
                        data__val="val.csv", data__image_column="file", data__label_column="species",
                        model__input=arm, train__max_steps=1, augment=[])
    record = Trainer(load_recipe(path)).fit()
    assert record["val_images"] == 6 and torch.isfinite(torch.tensor(record["train_loss"]))


@pytest.mark.parametrize("text,says", [
    ("path,label\na.jpg,x\n", r"no column 'file' \(its header: path, label\)"),
    ("file,label\n", "no rows"),
    ("file,label\na.jpg,\n", "line 2: empty label"),
    ("file,label\n,x\n", "line 2: empty file"),
    (b"file,label\n\xff\xfe.jpg,x\n", "not a UTF-8 CSV"),
    ("fil,label\na.jpg,x\n", "did you mean 'fil'"),
])
def test_a_bad_table_is_refused_naming_the_file_and_the_reason(tmp_path, text, says):
    table = tmp_path / "t.csv"
    table.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError, match=says) as info:
        read_image_table(table, "file", "label")
    assert str(table) in str(info.value)


def test_numeric_labels_sort_as_numbers_and_a_stray_label_is_refused(tmp_path):
    (tmp_path / "t.csv").write_text("image,label\na.jpg,10\nb.jpg,2\n")
    assert CsvImageDataset(tmp_path / "t.csv").classes == ["2", "10"]
    with pytest.raises(ValueError, match="labels not among the classes: 10"):
        CsvImageDataset(tmp_path / "t.csv", classes=["2"])
