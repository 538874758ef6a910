"""The float-gap ladder's rungs (benchmarks/float_gap_ladder.py) change the stage they name and no
other: each rung's decode against the two shipped decodes, on every layout Pillow writes."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import dctnet
from dctnet import image as IM
from conftest import ROOT


@pytest.fixture(scope="module")
def ladder():
    spec = importlib.util.spec_from_file_location("float_gap_ladder", ROOT / "benchmarks" / "float_gap_ladder.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _decodes(path: str, ladder) -> dict[str, torch.Tensor]:
    c = dctnet.read_coefficients(path)
    planes = [t.unsqueeze(0) for t in c.to_torch()]
    args = (planes, c.sampling, (c.height, c.width))
    kw = dict(color_space=c.color_space)
    return {"exact": IM.to_rgb(*args, exact=True, **kw) * 255, "float": IM.to_rgb(*args, **kw) * 255,
            "idct-float": ladder._idct_float(*args, **kw) * 255, "idct-exact": ladder._idct_exact(*args, **kw) * 255,
            "gray": torch.tensor(c.color_space == "gray")}


def test_each_rung_swaps_only_its_stage(ladder, synthetic_files):
    """Gray images have no upsampling and no colour: there ``idct-exact`` (libjpeg's IDCT, float
    rest) is the exact decode bit for bit, and ``idct-float`` (the float IDCT rounded, libjpeg's
    rest) is the float decode rounded to 8 bits. On every layout ``idct-float`` is integer-valued
    and, with libjpeg's upsampling and colour, far nearer the exact decode than the float decode is
    (within 3 levels: one IDCT step of chroma, through the colour matrix and rounding);
    ``idct-exact`` lies within a level and a half of both."""
    near, far = 0.0, 0.0
    for path in synthetic_files:
        d = _decodes(path, ladder)
        assert torch.equal(d["idct-float"], d["idct-float"].round()), path
        if d["gray"]:
            assert torch.equal(d["idct-exact"], d["exact"]), path
            assert torch.allclose(d["idct-float"], d["float"].round(), atol=1e-3), path
        elif d["exact"].numel() > 3 * 64:  # the float colour maths keeps its fractions: no 8-bit rounding
            assert not torch.equal(d["idct-exact"], d["idct-exact"].round()), path
        # one islow step of a chroma sample is up to 1.77 levels of blue: 3 after libjpeg's rounding
        assert (d["idct-float"] - d["exact"]).abs().max() <= 3.0, path
        assert (d["idct-exact"] - d["exact"]).abs().max() <= 1.5, path
        assert (d["idct-exact"] - d["float"]).abs().max() <= 1.5, path
        near += (d["idct-float"] - d["exact"]).abs().sum().item()
        far += (d["float"] - d["exact"]).abs().sum().item()
    assert near < far / 3, (near, far)


def test_the_patch_reaches_the_device_step_and_is_undone(ladder, synthetic_files):
    """Under ``rung_decode("idct-exact")`` the device step's crops of gray images are the exact
    decode's; afterwards the shipped decode is back."""
    from dctnet import data as D
    from dctnet.transforms import crops_to_rgb

    gray = [p for p in synthetic_files if dctnet.read_coefficients(p).color_space == "gray"
            and min(dctnet.read_coefficients(p).height, dctnet.read_coefficients(p).width) >= 16]
    ds = D.ImageFolderDataset.from_files(gray, crop=D.RandomResizedCrop())
    batch = D.collate([ds[i] for i in range(len(gray))], pin_memory=False)
    exact = crops_to_rgb(batch, (32, 32), exact=True)
    shipped = crops_to_rgb(batch, (32, 32))
    with ladder.rung_decode("idct-exact") as decode:
        assert decode == "float"
        patched = crops_to_rgb(batch, (32, 32))
    assert torch.allclose(patched, exact, atol=1e-6) and not torch.allclose(shipped, exact, atol=1e-6)
    assert IM.to_rgb is ladder._SHIPPED_TO_RGB
    assert torch.equal(crops_to_rgb(batch, (32, 32)), shipped)


def test_each_rung_hands_the_resize_the_layout_it_names(ladder, synthetic_files):
    """The CPU's band resize asks for columns (``column_major=True``): the float decode and
    ``idct-exact`` hand them over, ``float-rows`` and ``idct-float`` hand over rows (the exact
    decode's layout) — the same values either way."""
    c = dctnet.read_coefficients(synthetic_files[0])
    args = ([t.unsqueeze(0) for t in c.to_torch()], c.sampling, (c.height, c.width))
    for rung, columns in (("float", True), ("idct-exact", True), ("float-rows", False), ("idct-float", False)):
        with ladder.rung_decode(rung):
            out = IM.to_rgb(*args, column_major=True)
            rows = IM.to_rgb(*args, column_major=False)
        assert out.transpose(-1, -2).is_contiguous() == columns and out.is_contiguous() != columns, rung
        assert torch.allclose(out, rows, atol=1e-6), rung
