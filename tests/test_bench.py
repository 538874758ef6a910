"""``dctnet bench`` on a user's mixed folder: bad files skipped and named, the layout census, and
the report's structure per pipeline (timings are not tested: they depend on the machine)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dctnet.train import bench, bench_files

PIPELINES = ("libjpeg_floor", "dctnet_host", "dctnet_device_step", "dctnet_total_host", "torchvision", "timm")
BAD = {"png.jpg": "PNG", "empty.jpg": "empty", "truncated.jpg": None}


def photo(seed: int, h: int = 40, w: int = 56) -> Image.Image:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 4 % 256, y * 5 % 256, (x + y) * 3 % 256], -1) + rng.integers(-20, 20, (h, w, 3))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """A user's folder of two classes: six good layouts and three bad files."""
    root = tmp_path_factory.mktemp("mixed")
    a, b = root / "a", root / "b"
    a.mkdir()
    b.mkdir()
    photo(0).save(a / "q95_444.jpg", quality=95, subsampling=0)
    photo(1).save(a / "s422.jpg", quality=85, subsampling=1)
    photo(2).save(a / "progressive.jpg", quality=85, progressive=True)  # 4:2:0
    photo(3).convert("L").save(b / "gray.jpg", quality=85)
    photo(4).save(b / "s420.jpg", quality=85, subsampling=2)
    photo(5).convert("CMYK").save(b / "cmyk.jpg", quality=90)  # Adobe CMYK, 4:4:4
    photo(6).save(a / "png.jpg", format="PNG")
    (b / "empty.jpg").write_bytes(b"")
    data = io.BytesIO()
    photo(7, 96, 128).save(data, format="JPEG", quality=90)
    (b / "truncated.jpg").write_bytes(data.getvalue()[: len(data.getvalue()) // 2])
    (a / "notes.txt").write_text("not an image name: not counted")
    return root


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dctnet", "bench", *args], capture_output=True, text=True, timeout=300)


def check_census(c: dict) -> None:
    assert c["files"] == 6
    assert c["process"] == {"baseline": 5, "extended": 0, "progressive": 1, "extended-arithmetic": 0,
                            "progressive-arithmetic": 0}
    assert c["color_space"] == {"YCbCr": 4, "RGB": 0, "gray": 1, "CMYK": 1, "YCCK": 0, "unknown": 0}
    # sampling over the files with colour (gray has one component); CMYK is its own colour space
    assert c["sampling"] == {"4:4:4": 2, "4:2:2": 1, "4:2:0": 2, "4:4:0": 0, "4:1:1": 0, "other": 0}
    assert c["layouts"]["YCbCr 4:2:0 progressive"] == 1 and c["layouts"]["CMYK 4:4:4 baseline"] == 1
    assert c["layouts"]["gray baseline"] == 1 and sum(c["layouts"].values()) == 6


def test_bad_files_are_skipped_with_reasons_and_the_census_counts_layouts(mixed):
    found, n = bench_files.sample_files(mixed, 100)
    assert n == 9 and len(found) == 9  # JPEG names only (notes.txt is not one)
    usable, facts, skipped, _ = bench_files.check_files(found)
    assert len(usable) == 6
    reasons = {s["file"].rsplit("/", 1)[-1]: s["reason"] for s in skipped}
    assert set(reasons) == set(BAD)
    for name, why in BAD.items():
        assert why is None or why in reasons[name], reasons[name]
    check_census(bench_files.census([facts[f] for f in usable]))


def test_limit_samples_evenly_over_the_classes(tmp_path):
    for c in "abc":
        (tmp_path / c).mkdir()
        for i in range(4):
            (tmp_path / c / f"{i}.jpg").write_bytes(b"")
    files, n = bench_files.sample_files(tmp_path, 3)
    assert n == 12 and [f.split("/")[-2] for f in files] == ["a", "b", "c"]


def test_bench_json_on_a_mixed_folder(mixed):
    out = run_cli(str(mixed), "--json", "--limit", "50", "--repeat", "1", "--threads", "2", "--size", "32",
                  "--rate", "1000")
    assert out.returncode == 0, out.stderr[-3000:]
    rep = json.loads(out.stdout)
    assert (rep["files_found"], rep["files_sampled"], rep["files_used"]) == (9, 9, 6)
    assert {s["file"].rsplit("/", 1)[-1] for s in rep["skipped"]} == set(BAD)
    assert all(s["reason"] and s["by"] in ("dctnet", "pillow") for s in rep["skipped"])
    check_census(rep["census"])
    # without a recipe: DeiT's per-sample list at the given crop size
    assert [s["name"] for s in rep["augment"]] == ["RandomHorizontalFlip", "TimmAugment", "RandomErasing"]
    assert rep["augment_source"].startswith("default") and rep["crop_size"] == 32 and rep["input"] == "device-rgb"
    assert list(rep["pipelines"]) == list(PIPELINES)
    for name, row in rep["pipelines"].items():
        us = row["host_us_per_sample"]
        assert us > 0 and row["label"], name
        assert row["images_per_s_per_core"] == pytest.approx(1e6 / us, rel=0.01)
        assert row["cores_needed"] == pytest.approx(1000 * us / 1e6, abs=0.01)
    step = rep["pipelines"]["dctnet_device_step"]
    assert step["device_us_per_sample"] > 0
    assert "same_as" not in rep["pipelines"]["timm"]  # the list has a timm policy: timm's own transform is timed
    assert rep["threads"]["threads"] == 2 and rep["threads"]["images_per_s"] > 0
    if step["runs_on"] == "host":  # no GPU: said plainly
        assert rep["device"] == "cpu" and "No GPU here" in rep["notes"][0]
        total = rep["pipelines"]["dctnet_total_host"]["host_us_per_sample"]
        assert total == pytest.approx(rep["pipelines"]["dctnet_host"]["host_us_per_sample"] + step["host_us_per_sample"],
                                      abs=0.2)


def bench_main(*args: str) -> int:
    from dctnet.cli import main

    with pytest.raises(SystemExit) as e:
        main(["bench", *args])
    return e.value.code


def test_bench_text_names_the_skipped_files(mixed, capsys):
    assert bench_main(str(mixed / "b"), "--limit", "50", "--repeat", "1", "--threads", "1", "--size", "32") == 0
    text = capsys.readouterr().out
    assert "3 used, 2 skipped" in text and "empty.jpg: empty" in text and "truncated.jpg:" in text
    assert "colour    YCbCr 1, gray 1, CMYK 1" in text
    for label in ("raw libjpeg floor", "dctnet host", "dctnet device step", "torchvision v2", "timm"):
        assert label in text
    assert "img/s/core" in text and "cores @ 3000/s" in text


def test_bench_with_a_recipe_maps_its_list(mixed, tmp_path):
    """A recipe without a timm policy: timm's transform is the torchvision mapping; a dctnet-only
    transform is left out of the baselines and said so; the recipe's crop size is used."""
    from conftest import write_recipe

    recipe = write_recipe(tmp_path, str(mixed), model__input="device-rgb", data__image_size=32,
                          augment=[{"name": "RandomHorizontalFlip", "p": 0.5}, {"name": "ColorJitter", "brightness": 0.4},
                                   {"name": "RandomChromaRotation"}])
    rep = bench.run_bench(mixed / "a", recipe=str(recipe), limit=4, rounds=1, threads=1, device="cpu")
    assert rep["files_used"] == 3 and rep["crop_size"] == 32 and rep["augment_source"] == str(recipe)
    assert rep["input"] == "device-rgb"
    assert rep["left_out"] == {"torchvision": ["RandomChromaRotation"]}
    assert rep["pipelines"]["timm"]["same_as"] == "torchvision"
    assert any("RandomChromaRotation" in n for n in rep["notes"])


def test_no_usable_file_is_an_error_not_a_traceback(tmp_path, capsys):
    assert bench_main(str(tmp_path)) == 1
    assert "no JPEG files" in capsys.readouterr().err
    (tmp_path / "only.jpg").write_bytes(b"")
    assert bench_main(str(tmp_path), "--repeat", "1") == 1
    assert "none of the 1 files" in capsys.readouterr().err


def test_the_timm_row_posterizes_0_bits_as_the_training_baseline():
    """timm's -inc1 posterize draws 0 bits now and then, which Pillow >= 13 refuses; the timm row
    runs the same fix as the training baseline (black, as on Pillow < 13), so no draw raises."""
    from dctnet.train.baseline import pillow12_posterize

    tf, _ = bench.timm_transform(bench.bench_recipe(None))  # the default list: DeiT's, rand-m9-mstd0.5-inc1
    aa = [t for t in tf.transforms if hasattr(t, "ops")]
    assert aa and all(o.aug_fn is pillow12_posterize for t in aa for o in t.ops if "Posterize" in o.name)


def test_bench_refuses_a_detection_recipe(tmp_path):
    """``dctnet bench --recipe DETECTION_RECIPE`` timed a classification crop instead of the detection step;
    it now refuses, naming the benchmark that times a detection step."""
    from dctnet.train.bench import bench_recipe

    with pytest.raises(ValueError, match="detection recipe.*detection_trees.py"):
        bench_recipe(str(Path(__file__).resolve().parents[1] / "recipes" / "detection" / "trees_fasterrcnn_mnv3_320.yaml"))
