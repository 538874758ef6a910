"""The device step in stages: crops decoded to pixels, the augmentation there (clamped per op as
torchvision does), one forward DCT only for coefficient models; the DCT-domain kernels equal their
pixel ops; a Compose changes representation only where a transform needs it."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2.functional as TVF

from dctnet import transforms as T
from dctnet.kernels import coefficients as TF


@pytest.fixture(scope="module")
def rgb() -> torch.Tensor:
    """Smooth, in-range photo-like crops ``(6, 3, 32, 40)`` float64."""
    g = torch.Generator().manual_seed(0)
    base = torch.rand(6, 3, 4, 5, generator=g, dtype=torch.float64)
    x = torch.nn.functional.interpolate(base, size=(32, 40), mode="bicubic", align_corners=False)
    return (0.3 + 0.4 * x).clamp(0, 1)


@pytest.mark.parametrize("make", [
    lambda: T.RandomHorizontalFlip(p=1.0), lambda: T.RandomVerticalFlip(p=1.0),
    lambda: T.ColorJitter(0.2, 0.2, 0.2), lambda: T.RandomChromaRotation(20.0), lambda: T.RandomGrayscale(p=1.0),
])
def test_coefficient_kernels_equal_the_pixel_ops(rgb, make):
    """The same parameters on pixels and on the coefficient image give the same image (the colour
    factors are mild, so no pixel op clamps and the coefficient kernels' missing clamp is moot)."""
    t = make()
    params = t.draw_params(rgb.shape, torch.Generator().manual_seed(3))
    on_pixels = t(rgb, params=params)
    on_coefficients = t(TF.coefficient_image_from_rgb(rgb), params=params)
    # float rounding of the 8×8 DCT round trip; grayscale and contrast's mean grey: JFIF's Y against
    # torchvision's 0.2989/0.587/0.114 weights (≤ 0.03 grey levels)
    tol = 2e-3 if isinstance(t, T.RandomGrayscale) else 5e-5 if isinstance(t, T.ColorJitter) else 1e-6
    assert on_pixels.min() > 0 and on_pixels.max() < 1
    torch.testing.assert_close(TF.coefficient_image_to_rgb(on_coefficients), on_pixels, atol=tol, rtol=0)


def test_color_jitter_is_torchvisions_per_sample(rgb):
    """Each sample's factors and order, replayed through torchvision's functional ops."""
    t = T.ColorJitter(0.5, 0.5, 0.5, 0.2, seed=1)
    params = t.draw_params(rgb.shape, torch.Generator().manual_seed(5))
    out = t(rgb, params=params)
    fns = {0: TVF.adjust_brightness, 1: TVF.adjust_contrast, 2: TVF.adjust_saturation, 3: TVF.adjust_hue}
    orders = set()
    for i in range(rgb.shape[0]):
        want = rgb[i].float()
        for k, f in zip(params["op"][i].tolist(), params["arg"][i].tolist()):
            want = fns[k](want, f)
        orders.add(tuple(params["op"][i].tolist()))
        torch.testing.assert_close(out[i].float(), want, atol=2e-6, rtol=0)
    assert len(orders) > 1  # the order is drawn per sample (torchvision: randperm(4))
    with pytest.raises(ValueError, match="hue"):
        T.ColorJitter(hue=0.6)


def test_chroma_rotation_is_in_degrees(rgb):
    """Regression: the angle was radians while the recipes said degrees (30 meant ~1719°)."""
    t = T.RandomChromaRotation(30.0)
    params = t.draw_params((4000, 3, 8, 8), torch.Generator().manual_seed(0))
    assert params["angle"].abs().max() <= 30.0 and params["angle"].abs().max() > 29.0
    x = TF.coefficient_image_from_rgb(rgb)
    one = {"angle": torch.full((6,), 30.0, dtype=torch.float64)}
    torch.testing.assert_close(t(x, params=one), TF.rotate_chroma(x, torch.full((6,), torch.pi / 6, dtype=torch.float64)))


def test_compose_changes_representation_only_where_needed(rgb, monkeypatch):
    """[RandAugment (pixels), RandomRequantize (coefficients), flip (either), ToCoefficients]: one
    forward DCT, no inverse; the flip runs on the coefficients it finds."""
    aug = T.Compose([T.RandAugment(), T.RandomRequantize(p=1.0), T.RandomHorizontalFlip(p=1.0), T.ToCoefficients()],
                    seed=2)
    x = rgb.float()
    params = aug.draw_params(x.shape, torch.Generator().manual_seed(1))
    calls = {"dct": 0, "idct": 0}
    real_from, real_to = TF.coefficient_image_from_rgb, TF.coefficient_image_to_rgb

    def from_rgb(t):
        calls["dct"] += 1
        return real_from(t)

    def to_rgb(t, **kw):
        calls["idct"] += 1
        return real_to(t, **kw)

    monkeypatch.setattr(TF, "coefficient_image_from_rgb", from_rgb)
    monkeypatch.setattr(TF, "coefficient_image_to_rgb", to_rgb)
    out = aug(x, params=params)
    assert calls == {"dct": 1, "idct": 0} and out.shape == (6, 3, 4, 5, 64)
    monkeypatch.undo()
    want = T.RandAugment()(x, params=params["0"])
    want = TF.hflip(TF.requantize(TF.coefficient_image_from_rgb(want), params["1"]["tables"]))
    torch.testing.assert_close(out, want)
    # without a converter at the end the Compose gives back the representation it was given
    back = T.Compose([T.RandAugment(), T.RandomRequantize(p=1.0)], seed=2)(x)
    assert back.shape == x.shape


def test_device_rgb_never_round_trips_through_the_dct(tmp_path, monkeypatch):
    """input device-rgb with a pixel-only list: no forward DCT anywhere in the training step."""
    from dctnet.synthetic import make_labelled_dataset
    from dctnet.train import load_recipe
    from dctnet.train.pipeline import build_pipeline

    from conftest import write_recipe

    root = make_labelled_dataset(str(tmp_path / "d"), classes=2, train_per_class=8, val_per_class=2, size=(40, 56), seed=1)
    augment = [{"name": "RandomHorizontalFlip"}, {"name": "TimmAugment", "policy": "rand-m9-mstd0.5-inc1"},
               {"name": "RandomErasing", "p": 0.5, "mode": "pixel"},
               {"name": "Mixup", "mixup_alpha": 0.8, "cutmix_alpha": 1.0}]
    r = load_recipe(write_recipe(tmp_path, root, model__input="device-rgb", augment=augment, batch_size=8))
    pipe = build_pipeline(r, torch.device("cpu"))

    def refuse(*a, **k):
        raise AssertionError("device-rgb went through the DCT")

    monkeypatch.setattr(TF, "coefficient_image_from_rgb", refuse)
    x, target, labels = next(iter(pipe.batches(train=True)))
    assert x.shape == (8, 3, 32, 32) and target.shape == (8, 2)
    # timm's Mixup put optim.label_smoothing (0.1 by default) into the targets; the loss does not add it again
    assert pipe.targets_smoothed and float(target.min()) >= 0.1 / 2 - 1e-6
    assert "TimmAugment" in pipe.describe() and "ToRGB" in pipe.describe()


@pytest.mark.cuda
@pytest.mark.parametrize("inp", ["dct", "device-rgb"])
def test_device_step_with_deits_list_makes_no_host_sync_on_cuda(tmp_path, inp):
    """The whole device step (decode, crop, DeiT's list, ToRGB / DCT, per-(c,u,v) statistics) under
    torch.cuda.set_sync_debug_mode("error"): any blocking copy or .item() raises."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    from dctnet.synthetic import make_labelled_dataset
    from dctnet.train import load_recipe
    from dctnet.train.pipeline import build_pipeline

    from conftest import write_recipe

    root = make_labelled_dataset(str(tmp_path / "d"), classes=3, train_per_class=8, val_per_class=2, size=(40, 64),
                                 seed=2)
    augment = [{"name": "RandomHorizontalFlip"}, {"name": "TimmAugment", "policy": "rand-m9-mstd0.5-inc1"},
               {"name": "RandomErasing", "p": 0.5, "mode": "pixel"},
               {"name": "Mixup", "mixup_alpha": 0.8, "cutmix_alpha": 1.0, "switch_prob": 0.5}]
    extra = {"model__arch": "timm:vit_tiny_patch16_224", "model__stem": "dct-patch"} if inp == "dct" else {}
    r = load_recipe(write_recipe(tmp_path, root, model__input=inp, augment=augment, batch_size=8, **extra))
    device = torch.device("cuda")
    pipe = build_pipeline(r, device)
    host = next(iter(pipe.train_loader))
    batch = host.to(device, non_blocking=True)
    step = pipe.device_step(batch, pipe.augment, T.step_generator(0, 0, 0))  # warm-up: caches, kernels
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for k in range(3):
            x, target, labels = pipe.device_step(batch, pipe.augment, T.step_generator(0, 0, k + 1))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert x.is_cuda and target.shape == (8, 3) and step[0].shape == x.shape
