"""The README's "Adopting dctnet in existing code" section runs as written (on a small generated
dataset instead of Imagenette) and does what it says: the swapped model trains, its logits equal
the unchanged model's on the same crops."""

from __future__ import annotations

import re

import torch

from dctnet.synthetic import make_labelled_dataset

from conftest import ROOT


def adopting_code() -> str:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- adopting:start -->\s*```python\n(.*?)```\s*<!-- adopting:end -->", text, re.S)
    assert block, "README: the adopting section's code block is missing"
    return block.group(1)


def test_the_adopting_section_runs(tmp_path):
    root = make_labelled_dataset(str(tmp_path / "data"), classes=2, train_per_class=4, val_per_class=1, size=(40, 64),
                                 seed=3)
    code = adopting_code()
    assert code.count('"path/to/imagenette/train"') == 1
    code = code.replace('"path/to/imagenette/train"', repr(f"{root}/train"))
    torch.manual_seed(0)
    scope: dict = {}
    exec(compile(code, "README.md:adopting", "exec"), scope)
    x, ds = scope["x"], scope["ds"]
    assert x.shape[1:] == (3, 28, 28, 64) and torch.isfinite(scope["loss"]) and len(ds) == 8
    assert scope["logits"].shape == (x.shape[0], 2)
    # what the section says of the two paths: a swapped model gives the unchanged model's logits
    # on the same crops, when the RGB path is normalised by ToRGB.for_model (the one rule)
    import timm

    from dctnet import models as M, transforms as T

    torch.manual_seed(1)
    ref = timm.create_model("convnext_atto", pretrained=False, num_classes=2).eval().double()
    torch.manual_seed(1)
    swapped = M.swap_stem(timm.create_model("convnext_atto", pretrained=False, num_classes=2).double()).eval()
    # on the crops before augmentation: jitter can push pixels past [0, 1], which ToRGB clamps
    crops = T.crops_to_coefficients(scope["batch"], (64, 64)).double()
    with torch.no_grad():
        want = ref(T.ToRGB.for_model(ref)(crops))
        got = swapped(crops)
    assert (got - want).abs().max() <= 1e-6 * want.abs().max(), float((got - want).abs().max())


def test_the_training_pipeline_snippet_gives_timms_erasing_noise_and_fill_for_the_model():
    """The README's "Training input pipeline" snippet, its ``aug = T.Compose(...)`` statement run as
    written for ``vit_small_patch16_224`` (0.5/0.5 normalisation): the erased pixels the model sees are
    N(0, 1), as timm's RandomErasing after Normalize gives them (built plainly, the classes assume
    ImageNet's statistics: mean −0.10, std 0.457 there), and TimmAugment fills with the model's mean in
    8 bits, as timm's create_transform sets img_mean."""
    import timm

    from dctnet import data as D, transforms as T

    text = (ROOT / "README.md").read_text()
    stmt = re.search(r"\naug = T\.Compose\(\[.*?\], seed=0\)", text, re.S)
    assert stmt, "README: the training-pipeline snippet's aug = T.Compose(...) is missing"
    model = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=10)
    scope = {"T": T, "D": D, "model": model}
    exec(compile(stmt.group(0).strip(), "README.md:training-pipeline", "exec"), scope)
    aug = scope["aug"]
    timm_aug = next(t for t in aug.transforms if isinstance(t, T.TimmAugment))
    erase = next(t for t in aug.transforms if isinstance(t, T.RandomErasing))
    assert timm_aug.fill == tuple(round(255 * 0.5) / 255 for _ in range(3))
    # the erasing and the model input alone, every sample erased over most of the image
    only = T.Compose([T.RandomErasing(p=1.0, scale=(0.9, 0.9), ratio=(1.0, 1.0), mode="pixel", mean=erase.mean,
                                      std=erase.std), aug.transforms[-1]], seed=1)
    x = torch.full((16, 3, 64, 64), 0.3)
    out, _ = only(x, torch.zeros(16, dtype=torch.long))
    plain = (0.3 - 0.5) / 0.5                      # an unerased pixel in the model's input
    erased = out[(out - plain).abs() > 1e-4]
    assert erased.numel() > 0.8 * out.numel()
    assert abs(float(erased.mean())) < 0.02 and abs(float(erased.std()) - 1.0) < 0.02, (erased.mean(), erased.std())
