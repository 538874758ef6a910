"""``pixels: 8bit``: the crops and the results of the ops an RGB pipeline runs on 8-bit PIL images
(policies, ColorJitter, grayscale) are rounded to k/255, as Pillow hands them over; erasing and mixing,
which act on float tensors there too, are not. Oracle: the float op followed by rounding (numpy)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dctnet import data as D
from dctnet import transforms as T
from dctnet.train.recipe import RecipeError, load_recipe


def _x8(n: int = 12, size: int = 32) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.interpolate(torch.rand(n, 3, 5, 5, generator=g), size=(size, size), mode="bicubic")
    return torch.round(x.clamp(0, 1) * 255) / 255


@pytest.mark.parametrize("make", [lambda: T.TimmAugment("rand-m9-mstd0.5-inc1", seed=0),
                                  lambda: T.RandAugment(2, 9, interpolation="bilinear", seed=0),
                                  lambda: T.ColorJitter(0.4, 0.4, 0.4, 0.1, seed=0)])
def test_eight_bit_ops_round_each_result(make):
    """One slot at a time (each sample one op): the 8-bit op equals the float op rounded to k/255."""
    x = _x8()
    aug = make()
    params = aug.draw_params(x.shape, torch.Generator().manual_seed(3))
    slots = params["op"].shape[1]
    for s in range(slots):
        one = {"op": params["op"][:, s:s + 1], "arg": params["arg"][:, s:s + 1]}
        one.update({k: v for k, v in params.items() if k not in ("op", "arg")})
        want = np.round(aug(x, params=one).numpy() * np.float32(255)) / np.float32(255)  # k/255 in float32, as the images
        got = aug.set_pixel_levels(256)(x, params=one)
        aug.set_pixel_levels(None)
        np.testing.assert_allclose(got.numpy(), want, atol=1e-6, rtol=0)


def test_device_step_8bit_rounds_crops_and_8bit_ops_only(synthetic_files):
    files = [f for f in synthetic_files if "syn_00" in f][:8]
    ds = D.ImageFolderDataset.from_files(files, crop=D.RandomResizedCrop(), seed=0)
    batch = next(iter(D.ThreadLoader(ds, 8, threads=1)))
    ops = [T.RandomHorizontalFlip(), T.TimmAugment("rand-m9-mstd0.5-inc1"), T.RandomGrayscale(0.5)]
    for pixels in ("float", "8bit"):
        step = T.DeviceStep((32, 32), augment=ops, mean=None, std=None, pixels=pixels, seed=0)
        x, _, _ = step(batch, T.step_generator(0, 0, 0))
        levels = x * 255
        on_levels = torch.allclose(levels, levels.round(), atol=1e-4)
        assert on_levels == (pixels == "8bit"), pixels
    # erasing's noise is a float op: not rounded
    step = T.DeviceStep((32, 32), augment=[T.RandomErasing(p=1.0, mode="pixel")], mean=None, std=None, pixels="8bit")
    x, _, _ = step(batch, T.step_generator(0, 0, 1))
    assert not torch.allclose(x * 255, (x * 255).round(), atol=1e-4)


def test_recipe_pixels_field(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("data: {pixels: 8bit}\n")
    assert load_recipe(good).data.pixels == "8bit"
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: {pixels: 10bit}\n")
    with pytest.raises(RecipeError, match="data.pixels"):
        load_recipe(bad)


def test_sharpness_leaves_tiny_images_as_they_are():
    """torchvision's adjust_sharpness returns images 2 pixels or less across unchanged."""
    import torchvision.transforms.v2.functional as TVF

    x = torch.rand(3, 3, 2, 8, generator=torch.Generator().manual_seed(0))
    aug = T.RandAugment(1, 9, seed=0)
    params = {"op": torch.full((3, 1), aug.ops.index("Sharpness")), "arg": torch.full((3, 1), 1.8, dtype=torch.float64)}
    want = torch.stack([TVF.adjust_sharpness(x[i], 1.8) for i in range(3)])
    torch.testing.assert_close(aug(x, params=params), want, atol=1e-6, rtol=0)
