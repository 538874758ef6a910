"""Files that lost data are bad samples by default, decided once for every reader.

A folder with each kind of bad file a user's photos hold: a truncated JPEG, corrupt entropy-coded
data mid-stream, junk bytes before EOI (a warning that loses nothing: real ImageNet files carry
it), PNG data named ``.jpg``, a CMYK JPEG and an empty file. The oracles: libjpeg's own warning
texts read through jpeglib (not through dctnet), and Pillow, which raises on the truncated file."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from PIL import Image

import dctnet
from dctnet import data as D
from dctnet.cli import main as cli_main
from dctnet.train import Trainer, load_recipe
from dctnet.train.pipeline import build_pipeline

from conftest import write_recipe

BAD = {"corrupt.jpg", "empty.jpg", "png.jpg", "truncated.jpg"}  # unusable under the default policy
USABLE_ODD = {"cmyk.jpg", "extraneous.jpg"}                     # read, the second with its warning


def _photo(seed: int, size: int = 48) -> Image.Image:
    """A smooth picture with texture (enough entropy-coded data to cut and corrupt)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size] / size
    base = np.stack([np.sin(6 * x + seed), np.cos(5 * y - seed), np.sin(4 * (x + y))], -1) * 90 + 128
    return Image.fromarray(np.clip(base + rng.normal(0, 25, base.shape), 0, 255).astype(np.uint8))


def _jpeg(img: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90, **kw)
    return buf.getvalue()


def _scan(data: bytes) -> tuple[int, int]:
    """Start (after the SOS header) and end (EOI) of a baseline file's entropy-coded data."""
    sos = data.index(b"\xff\xda")
    return sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big"), data.rindex(b"\xff\xd9")


def bad_files(seed: int = 0) -> dict[str, bytes]:
    good = _jpeg(_photo(seed))
    start, end = _scan(good)
    corrupt = bytearray(good)
    at = start + (end - start) * 4 // 5       # near the bottom: a crop window above it never meets it
    corrupt[at:at + 2] = b"\xff\xd5"          # a restart marker inside a scan that has none
    buf = io.BytesIO()
    Image.new("RGB", (40, 40), (200, 30, 30)).save(buf, "PNG")
    return {
        "truncated.jpg": good[: start + (end - start) * 6 // 10],
        "corrupt.jpg": bytes(corrupt),
        "extraneous.jpg": good[:end] + b"\x55" * 64 + good[end:],
        "png.jpg": buf.getvalue(),
        "cmyk.jpg": _jpeg(_photo(seed + 1).convert("CMYK")),
        "empty.jpg": b"",
    }


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """train/{a,b}/ and val/{a,b}/ of good photos in several layouts, the bad files in train/a."""
    root = tmp_path_factory.mktemp("mixed")
    layouts = [dict(subsampling=0), dict(subsampling=1), dict(subsampling=2), dict(progressive=True)]
    for split, n in (("train", 12), ("val", 4)):
        for c, cls in enumerate("ab"):
            (root / split / cls).mkdir(parents=True)
            for i in range(n):
                img = _photo(100 * c + i)
                data = _jpeg(img.convert("L")) if i % 5 == 4 else _jpeg(img, **layouts[i % 4])
                (root / split / cls / f"{i:02d}.jpg").write_bytes(data)
    for name, data in bad_files().items():
        (root / "train" / "a" / name).write_bytes(data)
    return root


def test_the_files_are_what_they_claim(folder, capfd):
    """The oracles are independent of dctnet: libjpeg through jpeglib (its warnings, which libjpeg
    prints on stderr) and Pillow. dctnet then reports libjpeg's own warnings, word for word."""
    jpeglib = pytest.importorskip("jpeglib")
    a = folder / "train" / "a"

    def libjpeg(name: str) -> tuple[list[str], object]:
        capfd.readouterr()
        try:
            im = jpeglib.read_dct(str(a / name))
            result = (im.Y, str(im.jpeg_color_space))
        except OSError as exc:
            result = exc
        return [line for line in capfd.readouterr().err.splitlines() if line.strip()], result

    said, _ = libjpeg("truncated.jpg")
    assert said[0] == "Premature end of JPEG file"
    said, _ = libjpeg("corrupt.jpg")
    assert said[0].startswith("Corrupt JPEG data: premature end of data segment")
    said, _ = libjpeg("extraneous.jpg")
    assert said[0].startswith("Corrupt JPEG data: ") and "extraneous bytes before marker 0xd9" in said[0]
    said, result = libjpeg("png.jpg")
    assert isinstance(result, OSError) and any(line.startswith("Not a JPEG file") for line in said)
    assert isinstance(libjpeg("empty.jpg")[1], OSError)
    assert "CMYK" in libjpeg("cmyk.jpg")[1][1]
    with pytest.raises(OSError, match="truncated"):
        Image.open(a / "truncated.jpg").convert("RGB")
    assert Image.open(a / "png.jpg").format == "PNG"  # Pillow reads it; dctnet reads JPEG only
    assert Image.open(a / "cmyk.jpg").mode == "CMYK"
    # dctnet says what libjpeg says, and counts the two that lost data as lost
    for name in ("truncated.jpg", "corrupt.jpg", "extraneous.jpg"):
        ours = dctnet.read_coefficients(a / name, warnings="accept")
        assert ours.warnings[0] == libjpeg(name)[0][0], name
        assert ours.lost_data == (name != "extraneous.jpg"), name
    assert dctnet.read_header(a / "cmyk.jpg").color_space == "CMYK"


@pytest.mark.parametrize("name", sorted(BAD - {"png.jpg", "empty.jpg"}))
def test_lost_data_raises_by_default_and_accept_keeps_the_fill_in(folder, name):
    path = folder / "train" / "a" / name
    with pytest.raises(dctnet.JpegError, match="lost data") as info:
        dctnet.read_coefficients(path)
    assert info.value.source == str(path)
    assert dctnet.read_coefficients(path, warnings="accept").lost_data
    [res] = dctnet.read_coefficients_batch([str(path)], errors="return")
    assert isinstance(res, dctnet.JpegError) and "lost data" in res.reason


def test_every_windowed_read_sees_truncation_but_not_damage_below_the_window(folder):
    """A folder batch stops entropy decoding below its crop windows: a cut file is still found
    from its bytes by every read, in every epoch; damage below the windows is not seen by such a
    read, which is why check() decodes every file in full once."""
    a = folder / "train" / "a"
    top = D.CenterCrop(crop_fraction=0.2)  # a small centred window: decoding stops above the bottom
    ds = D.ImageFolderDataset.from_files([str(a / "truncated.jpg"), str(a / "corrupt.jpg"), str(a / "00.jpg")],
                                         crop=top, on_error="skip")
    for epoch in range(3):
        batch = ds.load_collated([(epoch, 0), (epoch, 1), (epoch, 2)])
        assert [(name.rsplit("/", 1)[-1], "Premature end" in why) for _, name, why in batch.skipped] == [
            ("truncated.jpg", True)]
    found = ds.check()
    assert sorted((p.rsplit("/", 1)[-1], "lost data" in why) for p, why in found) == [
        ("corrupt.jpg", True), ("truncated.jpg", True)]
    assert [p.rsplit("/", 1)[-1] for p, _ in ds.samples] == ["00.jpg"]
    accepting = D.ImageFolderDataset.from_files([str(a / "truncated.jpg")], crop=top, warnings="accept")
    assert accepting.check() == [] and len(accepting.load_collated([(0, 0)]).labels) == 1


def test_default_raises_naming_the_truncated_file(folder, tmp_path):
    """on_error: raise stops before training, naming every unusable file and its reason."""
    r = load_recipe(write_recipe(tmp_path, str(folder)))
    with pytest.raises(dctnet.JpegError) as info:
        build_pipeline(r, torch.device("cpu"))
    text = str(info.value)
    for name in BAD:
        assert name in text
    assert "truncated.jpg: Premature end of JPEG file: the image lost data" in text
    assert "png.jpg: not a JPEG: PNG data under a JPEG name" in text


def _train_files(pipe) -> set[str]:
    loader = pipe.train_loader
    ds = loader.loader.dataset if hasattr(loader, "loader") else loader.dataset
    return {p.rsplit("/", 1)[-1] for p, _ in ds.samples if "/train/a/" in p}


@pytest.mark.parametrize("inp", ["dct", "rgb"])
def test_skip_leaves_the_same_files_out_of_both_arms(folder, tmp_path, inp):
    r = load_recipe(write_recipe(tmp_path, str(folder), data__on_error="skip", model__input=inp))
    pipe = build_pipeline(r, torch.device("cpu"))
    assert {(s, p.rsplit("/", 1)[-1]) for s, p, _ in pipe.excluded} == {("train", n) for n in BAD}
    reasons = {p.rsplit("/", 1)[-1]: why for _, p, why in pipe.excluded}
    assert reasons["empty.jpg"] == "empty file (0 bytes)"
    assert "PNG data" in reasons["png.jpg"] and "lost data" in reasons["truncated.jpg"]
    files = _train_files(pipe)
    assert USABLE_ODD <= files and not (BAD & files) and len(files) == 12 + len(USABLE_ODD)
    assert [(s, p.rsplit("/", 1)[-1]) for s, p, _ in pipe.warned] == [("train", "extraneous.jpg")]


def test_train_records_the_left_out_and_the_warned_files(folder, tmp_path):
    path = write_recipe(tmp_path, str(folder), data__on_error="skip", batch_size=8)
    record = Trainer(load_recipe(path)).fit()
    assert record["train_skipped"] == 0  # left out before training, not met during it
    run = tmp_path / "run"
    lines = [line.split("\t") for line in (run / "skipped.txt").read_text().splitlines()]
    assert sorted(row[2].rsplit("/", 1)[-1] for row in lines) == sorted(BAD) and {row[0] for row in lines} == {"0"}
    assert "extraneous.jpg" in (run / "warnings.txt").read_text()


def test_accept_trains_on_the_fill_in_in_both_arms(folder, tmp_path):
    """warnings: accept keeps libjpeg's fill-in: the truncated and corrupt files train (Pillow
    reads the truncated one grey too), only the PNG and the empty file are left out."""
    for inp in ("dct", "rgb"):
        r = load_recipe(write_recipe(tmp_path / inp, str(folder), data__on_error="skip", data__warnings="accept",
                                     model__input=inp))
        pipe = build_pipeline(r, torch.device("cpu"))
        assert {p.rsplit("/", 1)[-1] for _, p, _ in pipe.excluded} == {"png.jpg", "empty.jpg"}
        assert {"truncated.jpg", "corrupt.jpg"} <= _train_files(pipe)
    from dctnet.data.pillow import PilLoader
    img = PilLoader(accept_truncated=True)(str(folder / "train" / "a" / "truncated.jpg"))
    assert img.size == (48, 48)
    with pytest.raises(OSError, match="truncated"):
        PilLoader(accept_truncated=False)(str(folder / "train" / "a" / "truncated.jpg"))


def test_verify_strict_fails_and_names_each_kind(folder, tmp_path, capsys):
    out = tmp_path / "report.json"
    with pytest.raises(SystemExit) as code:
        cli_main(["verify", str(folder), "--strict", "--json", str(out)])
    assert code.value.code == 1
    train = json.loads(out.read_text())["splits"]["train"]
    unreadable = {u["path"].rsplit("/", 1)[-1]: u["reason"] for u in train["unreadable"]}
    assert set(unreadable) == {"truncated.jpg", "corrupt.jpg", "empty.jpg"}
    assert "lost data" in unreadable["truncated.jpg"] and "lost data" in unreadable["corrupt.jpg"]
    assert [(d["path"].rsplit("/", 1)[-1], d["kind"]) for d in train["not_jpeg_data"]] == [("png.jpg", "PNG")]
    assert [w["path"].rsplit("/", 1)[-1] for w in train["warnings"]] == ["extraneous.jpg"]
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if line.startswith("train"))
    assert row.split()[-1] == "1"  # the "not JPEG" column counts the PNG named .jpg
    with pytest.raises(SystemExit) as code:  # the good split alone passes
        cli_main(["verify", str(folder / "val"), "--strict"])
    assert code.value.code == 0


def test_shards_and_cache_builds_follow_the_same_rule(folder, tmp_path):
    a = folder / "train" / "a"
    step = D.WdsDecode(on_error="skip")
    skipped = step({"__key__": "t", "jpg": (a / "truncated.jpg").read_bytes(), "cls": b"0"})
    assert isinstance(skipped, tuple) and "lost data" in skipped[2]
    assert not isinstance(D.WdsDecode(on_error="skip", warnings="accept")(
        {"__key__": "t", "jpg": (a / "truncated.jpg").read_bytes(), "cls": b"0"}), tuple)
    files = [str(a / n) for n in ("00.jpg", "truncated.jpg", "corrupt.jpg", "extraneous.jpg")]
    src = D.ImageFolderDataset.from_files(files)
    for policy, bad in (("raise", {"truncated.jpg", "corrupt.jpg"}), ("accept", set())):
        out = D.build_cache(src, tmp_path / policy, on_error="skip", progress=False, warnings=policy)
        meta = D.open_cache(out, verify="none").meta
        assert {b["path"].rsplit("/", 1)[-1] for b in meta["bad"]} == bad
