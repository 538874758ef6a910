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
