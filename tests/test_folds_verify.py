"""k-fold splits (balance, stratification, persistence, rank composition, metric reduction) and
`dctnet verify` (unreadable files, warnings, duplicates, leakage, class balance)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from dctnet import data as D
from dctnet.synthetic import synthetic_jpeg


def test_kfold_balanced_stratified_and_persisted(tmp_path):
    labels = np.repeat(np.arange(3), [50, 30, 21])  # 101 samples, uneven classes
    folds = D.kfold(101, 5, seed=1, stratify=labels, path=tmp_path / "folds.json")
    sizes = [len(folds.val(f)) for f in range(5)]
    assert sum(sizes) == 101 and max(sizes) - min(sizes) <= 1
    for c, n in ((0, 50), (1, 30), (2, 21)):
        per_fold = [int((labels[folds.val(f)] == c).sum()) for f in range(5)]
        assert sum(per_fold) == n and max(per_fold) - min(per_fold) <= 1
    for f in range(5):
        assert sorted(folds.val(f) + folds.train(f)) == list(range(101))
    again = D.kfold(101, 5, seed=1, stratify=labels, path=tmp_path / "folds.json")
    assert np.array_equal(again.fold_of, folds.fold_of)
    with pytest.raises(ValueError, match="asked for"):
        D.kfold(101, 4, seed=1, stratify=labels, path=tmp_path / "folds.json")
    with pytest.raises(ValueError, match="samples"):
        D.Folds.load(tmp_path / "folds.json", n=100)
    assert not np.array_equal(D.kfold(101, 5, seed=2).fold_of, D.kfold(101, 5, seed=1).fold_of)


def test_fold_indices_compose_with_rank_split():
    folds = D.kfold(103, 5, seed=0)
    val = folds.val(2)
    for world in (1, 2, 3):
        seen = []
        for rank in range(world):
            s = D.SubsetSampler(val, seed=4, rank=rank, world_size=world)
            s.set_epoch(1)
            seen += [i for _, i in s]
        assert sorted(seen) == sorted(val)  # global indices of the fold, each once across ranks


def test_metric_reduction_weights_by_count():
    # single process: plain division of the summed numerators and denominators
    assert D.all_reduce_metric(torch.tensor(3.0), torch.tensor(4.0)).item() == pytest.approx(0.75)


def test_verify_reports_problems(tmp_path):
    root = tmp_path / "ds"
    for split in ("train", "val"):
        for c in ("a", "b"):
            (root / split / c).mkdir(parents=True)
    for i in range(6):
        (root / "train" / "a" / f"{i}.jpg").write_bytes(synthetic_jpeg(i, 24, 24))
    (root / "train" / "b" / "0.jpg").write_bytes(synthetic_jpeg(10, 24, 24))
    (root / "train" / "b" / "dup.jpg").write_bytes(synthetic_jpeg(10, 24, 24))      # duplicate in train
    (root / "train" / "b" / "bad.jpg").write_bytes(b"\xff\xd8 broken")                 # unreadable
    (root / "train" / "b" / "trunc.jpg").write_bytes(synthetic_jpeg(11, 64, 64)[:-200])  # lost data
    (root / "val" / "a" / "leak.jpg").write_bytes(synthetic_jpeg(3, 24, 24))          # same bytes as train/a/3
    (root / "val" / "b" / "ok.jpg").write_bytes(synthetic_jpeg(20, 24, 24))
    report = D.verify_dataset(root)
    train = report["splits"]["train"]
    assert train["files"] == 10 and train["classes"] == {"a": 6, "b": 4}
    assert [u["path"] for u in train["unreadable"]] == ["b/bad.jpg", "b/trunc.jpg"]
    assert "lost data" in train["unreadable"][1]["reason"] and train["warnings"] == []
    accepting = D.verify_dataset(root, warnings="accept")["splits"]["train"]
    assert [w["path"] for w in accepting["warnings"]] == ["b/trunc.jpg"]
    assert train["duplicates"] == [["b/0.jpg", "b/dup.jpg"]]
    assert report["leakage"] == [["train/a/3.jpg", "val/a/leak.jpg"]]
    out = subprocess.run([sys.executable, "-m", "dctnet", "verify", str(root), "--json", str(tmp_path / "r.json"),
                          "--strict"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "leakage across splits: 1" in out.stdout
    assert json.loads((tmp_path / "r.json").read_text())["leakage"] == report["leakage"]
