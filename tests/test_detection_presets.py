"""Each detection and segmentation preset is declared once (dctnet.transforms.detection.presets.PRESETS)
and builds both arms: dctnet's ops for the device arms and torchvision v2's own classes for the rgb arm,
the same names and arguments; a recipe's detect.preset takes the table's detection names."""

from __future__ import annotations

import typing

import pytest
from torchvision.transforms import v2

from dctnet.train.recipe import DetectConfig
from dctnet.transforms import detection as TD

from test_detection_geometry import samples  # noqa: F401,F811 (the per-op tests' images, a fixture)


def names(ops) -> list[str]:
    ops = ops.transforms if isinstance(ops, v2.Compose) else ops
    return [type(o).__name__.replace("Reference", "") for o in ops]


@pytest.mark.parametrize("name", TD.DETECTION_PRESETS)
def test_a_detection_preset_builds_both_arms_from_its_op_list(name):
    specs = TD.preset_specs(name, hflip_prob=0.3, mean=[1.0, 2.0, 3.0])
    device = TD.detection_preset(name, 0.3, mean=(1.0, 2.0, 3.0))
    assert names(device) == [s["name"] for s in specs] + ["SanitizeBoundingBoxes"]
    assert device[-2].p == 0.3  # every detection preset ends in the flip, then sanitize
    if name == "lsj":  # the references' FixedSizeCrop is not in the torchvision package
        with pytest.raises(ValueError, match="detect.preset 'lsj' with input 'rgb'.*FixedSizeCrop"):
            TD.torchvision_detection_preset(name, 0.3)
        return
    rgb = TD.torchvision_detection_preset(name, 0.3, mean=(1.0, 2.0, 3.0))
    assert names(rgb) == names(device)
    assert rgb.transforms[-2].p == 0.3 and isinstance(rgb.transforms[-1], v2.SanitizeBoundingBoxes)


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("hflip_prob", [0.0, 0.5])
def test_the_segmentation_preset_builds_both_arms_from_its_op_list(train, hflip_prob):
    device = TD.segmentation_preset(300, 256, hflip_prob, train=train)
    rgb = TD.torchvision_segmentation_preset(300, 256, hflip_prob, train=train)
    expected = (["RandomResize"] + ["RandomHorizontalFlip"] * (hflip_prob > 0) + ["PadIfSmaller", "RandomCrop"]
                if train else ["Resize"])
    assert names(device) == names(rgb) == expected


def test_the_recipe_takes_the_tables_detection_presets():
    assert typing.get_args(typing.get_type_hints(DetectConfig)["preset"]) == TD.DETECTION_PRESETS
    assert set(TD.DETECTION_PRESETS) | {"segmentation"} == set(TD.PRESETS)
    with pytest.raises(ValueError, match="known: hflip, lsj, multiscale, ssd, ssdlite, aerial"):
        TD.detection_preset("segmentation")


def test_the_aerial_preset_flips_both_ways_as_torchvision(samples):  # noqa: F811 (the fixture)
    """``aerial`` (overhead tiles: no "up") is torchvision's vertical then horizontal flip, each with the
    preset's flip probability: the same boxes, masks and pixels as v2's classes replayed from each
    sample's seed, and the rgb arm built of those classes."""
    from test_detection_geometry import check, seeds_for

    tv = [v2.RandomVerticalFlip(0.3), v2.RandomHorizontalFlip(0.3), v2.SanitizeBoundingBoxes()]
    for round_ in range(3):
        check(TD.detection_preset("aerial", 0.3), tv, samples, seeds_for(len(samples), round_))
    rgb = TD.torchvision_detection_preset("aerial", 0.3).transforms
    assert [type(o) for o in rgb] == [type(o) for o in tv] and [o.p for o in rgb[:2]] == [0.3, 0.3]
