"""One set of stem names for ``swap_stem``, ``dctnet convert`` and recipes' ``model.stem``.

- every name in ``dctnet.models.STEMS`` is taken by all three, with the same meaning (the model
  records the name it got); the converted stems named explicitly give the unconverted model's
  logits (the oracle: the RGB model on the pixels whose coefficients the DCT model gets);
- a name that is not a stem gets an error listing the stems, in all three;
- a stem the family does not take names the family as its class says (a ConvNeXt is never
  called a ResNet) and lists the stems that family takes;
- ``dctnet train`` trains a ConvNeXt and a Swin from an ``input: dct`` recipe on tiny data.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch
from torch import nn

import dctnet.models as M
from dctnet import nn as N
from dctnet.cli import main as cli_main
from dctnet.kernels import coefficients as TF
from dctnet.synthetic import make_labelled_dataset
from dctnet.train import RecipeError, load_recipe
from dctnet.train.recipe_model import build_recipe_model

from conftest import write_recipe

#: a family that takes each stem (timm ConvNeXt: dct-patch and idct; torchvision ResNet: idct and the learned)
TAKES = {"dct-patch": "timm:convnext_atto", "idct": "timm:convnext_atto", "dct8": "resnet18", "dct-up": "resnet18"}
MODULE = {"dct-patch": N.DCTPatchEmbed, "idct": N.IDCTStem, "dct8": N.ResNetDCTStem, "dct-up": N.ResNetDCTStem}


def test_the_vocabulary():
    assert tuple(M.STEMS) == ("dct-patch", "idct", "dct8", "dct-up")
    assert set(M.CONVERTED_STEMS) | set(M.LEARNED_STEMS) == set(M.STEMS)
    assert set(TAKES) == set(M.STEMS)


def build(arch: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return M.build_model(arch, image_size=32, num_classes=5)


def rgb_and_coefficients(n: int = 2, size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """In-range float64 pixels in [0, 1] and the coefficient image of those very pixels."""
    torch.manual_seed(11)
    rgb = nn.functional.interpolate(torch.rand(n, 3, size // 4, size // 4, dtype=torch.float64), size=(size, size),
                                    mode="bilinear")
    return rgb, TF.coefficient_image_from_rgb(rgb)


@pytest.mark.parametrize("stem", list(M.STEMS))
def test_swap_stem_takes_every_name(stem):
    model = build(TAKES[stem]).double().eval()
    dct = M.swap_stem(copy.deepcopy(model), stem=stem).double().eval()  # a learned stem starts in float32
    assert dct.dctnet_stem == stem
    assert isinstance(M.stem_modules(dct)[0], MODULE[stem])
    rgb, x = rgb_and_coefficients()
    with torch.no_grad():
        out = dct(x)
        if stem in M.CONVERTED_STEMS:  # the oracle: the unconverted model on the same pixels
            mean, std = (torch.tensor(v, dtype=torch.float64).reshape(1, 3, 1, 1) for v in M.input_mean_std(model))
            ref = model((rgb - mean) / std)
            torch.testing.assert_close(out, ref, atol=1e-6 * ref.abs().max().item(), rtol=0)
    assert out.shape == (2, 5)


@pytest.mark.parametrize("stem", list(M.STEMS))
def test_recipes_take_every_name(tmp_path, stem):
    path = write_recipe(tmp_path, tmp_path / "data", model__arch=TAKES[stem], model__stem=stem,
                        model__normalize="none")
    recipe = load_recipe(path)
    assert recipe.model.stem == stem
    model = build_recipe_model(recipe, 5)
    assert model.dctnet_stem == stem and isinstance(M.stem_modules(model)[0], MODULE[stem])
    # --set takes the same names
    assert load_recipe(path, [f"model.stem={stem}"]).model.stem == stem


def run_convert(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        cli_main(["convert", *map(str, args)])
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


@pytest.mark.parametrize("stem", list(M.STEMS))
def test_convert_takes_every_name(capsys, tmp_path, stem):
    """The converted stems convert (the written file in the model the printed hint builds gives
    the RGB model's logits); the learned ones are refused with the converted names listed."""
    arch = TAKES[stem]
    model = build(arch, seed=1)
    src, dst = tmp_path / "rgb.pt", tmp_path / "dct.pt"
    torch.save(model.state_dict(), src)
    code, out, err = run_convert(capsys, src, dst, "--arch", arch, "--stem", stem, "--image-size", 32)
    if stem in M.LEARNED_STEMS:
        assert code == 1 and "Traceback" not in err and not dst.exists()
        assert f"stem {stem!r} is a learned stem" in err and "'dct-patch', 'idct'" in err
        return
    assert code == 0, err
    assert f"stem: {stem}," in out
    hint = re.search(r"load with dctnet\.models\.swap_stem\(model(.*?)\)\)\s*$", out, re.M).group(1)
    assert (f"stem={stem!r}" in hint) == (stem != M.default_stem(model))  # only a non-default stem is written out
    kwargs = eval(f"dict({hint.lstrip(', ')})")  # noqa: S307 — the command's own printed call
    dct = M.swap_stem(build(arch, seed=2), **kwargs)
    dct.load_state_dict(torch.load(dst, weights_only=True))
    assert dct.dctnet_stem == stem
    rgb, x = rgb_and_coefficients()
    model, dct = model.double().eval(), dct.double().eval()
    with torch.no_grad():
        mean, std = (torch.tensor(v, dtype=torch.float64).reshape(1, 3, 1, 1) for v in M.input_mean_std(model))
        ref = model((rgb - mean) / std)
        torch.testing.assert_close(dct(x), ref, atol=1e-5 * ref.abs().max().item(), rtol=0)


def test_convert_python_api_takes_the_names(tmp_path):
    torch.save(build("resnet18").state_dict(), tmp_path / "r.pt")
    r = M.convert(tmp_path / "r.pt", tmp_path / "o.pt", "resnet18", stem="idct", image_size=32)
    assert r.stem == "idct" and r.rel < 1e-4 and r.hint == "dctnet.models.swap_stem(model)"
    with pytest.raises(ValueError, match=r"does not fit torchvision's ResNet .*converting resnet18 makes 'idct' "
                                         r"\(the default\)"):
        M.convert(tmp_path / "r.pt", tmp_path / "o.pt", "resnet18", stem="dct-patch")


# --------------------------------------------------------------------------- wrong names
LISTING = r"the stems are 'dct-patch': .*; 'idct': .*; 'dct8': .*; 'dct-up': "


@pytest.mark.parametrize("name", ["dct-pach", "converted", "exact", "patch"])
def test_a_wrong_name_lists_the_stems_everywhere(capsys, tmp_path, name):
    listing = r"'converted' is not a stem name: the converted stems are 'dct-patch' and 'idct'" \
        if name == "converted" else r"'dct-patch' and 'idct'" if name == "exact" else LISTING
    with pytest.raises(ValueError, match=listing):
        M.swap_stem(build("resnet18"), stem=name)
    path = write_recipe(tmp_path, tmp_path / "data", model__stem=name)
    with pytest.raises(RecipeError, match="model.stem: .*" + listing):
        load_recipe(path)
    code, _, err = run_convert(capsys, tmp_path / "a.pt", tmp_path / "b.pt", "--arch", "resnet18", "--stem", name)
    assert code == 1 and re.search(listing, err) and "Traceback" not in err
    if name == "dct-pach":
        assert "did you mean 'dct-patch'?" in err


MISFITS = [
    # arch, stem, the family as the error must name it, the stems it must list
    ("timm:convnext_atto", "dct8", "timm's ConvNeXt", "'dct-patch' (the default), 'idct'"),
    ("convnext_tiny", "dct-up", "torchvision's ConvNeXt", "'dct-patch' (the default), 'idct'"),
    ("timm:swin_tiny_patch4_window7_224", "dct8", "timm's SwinTransformer", "'dct-patch' (the default), 'idct'"),
    ("timm:vit_tiny_patch16_224", "dct-up", "timm's VisionTransformer", "'dct-patch' (the default), 'idct'"),
    ("timm:efficientnet_b0", "dct-patch", "timm's EfficientNet", "'idct' (the default)"),
    ("resnet18", "dct-patch", "torchvision's ResNet", "'idct' (the default), 'dct8', 'dct-up'"),
]


@pytest.mark.parametrize("arch,stem,family,takes", MISFITS, ids=[f"{a}-{s}" for a, s, _, _ in MISFITS])
def test_a_stem_the_family_does_not_take_names_the_family(tmp_path, arch, stem, family, takes):
    with torch.device("meta"):  # the structure is all that matters here
        model = M.build_model(arch, image_size=32)
    assert M.stems_for(model) == tuple(s.split(" ")[0].strip("'") for s in takes.split(", "))
    with pytest.raises(ValueError, match=re.escape(f"does not fit {family} (")) as exc:
        M.swap_stem(model, stem=stem)
    assert re.search(re.escape(f"it takes {takes}") + "$", str(exc.value))
    others = {"ResNet", "ConvNeXt", "SwinTransformer", "VisionTransformer", "EfficientNet"} - {family.split("'s ")[1]}
    assert not any(f"fit timm's {o}" in str(exc.value) or f"fit torchvision's {o}" in str(exc.value) for o in others)
    path = write_recipe(tmp_path, tmp_path / "data", model__arch=arch, model__stem=stem, model__normalize="none")
    with pytest.raises(RecipeError, match=re.escape(f"model.stem: stem {stem!r} does not fit {family} (")) as exc:
        load_recipe(path)
    assert str(exc.value).endswith(f"{arch} takes {takes}")


def test_the_default_stem_is_the_same_everywhere(tmp_path):
    """Unset, every entry point gives the model its default: dct-patch where the first conv is a
    block-aligned patchify conv, else idct."""
    for arch, default in (("timm:convnext_atto", "dct-patch"), ("resnet18", "idct")):
        assert M.swap_stem(build(arch)).dctnet_stem == default
        path = write_recipe(tmp_path / arch.replace(":", "_"), tmp_path, model__arch=arch, model__stem=None)
        recipe = load_recipe(path)
        assert recipe.model.stem is None and build_recipe_model(recipe, 5).dctnet_stem == default
        torch.save(build(arch).state_dict(), tmp_path / "in.pt")
        assert M.convert(tmp_path / "in.pt", tmp_path / "out.pt", arch, image_size=32).stem == default


# --------------------------------------------------------------------------- training
@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("stems")
    return make_labelled_dataset(str(root), classes=2, train_per_class=8, val_per_class=4, size=(40, 56), seed=3)


@pytest.mark.parametrize("arch", ["timm:convnext_atto", "timm:swin_tiny_patch4_window7_224"])
def test_dctnet_train_trains_convnext_and_swin_on_coefficients(tiny_data, tmp_path, capsys, arch):
    """``dctnet train`` with ``input: dct`` and no stem named: the model's default, ``dct-patch``
    (a converted patch embedding behind timm's own stem / patch-embed interface)."""
    path = write_recipe(tmp_path, tiny_data, batch_size=8, model__arch=arch, model__stem=None,
                        optim__optimizer="adamw", optim__lr=1e-3, train__max_steps=2)
    with pytest.raises(SystemExit) as exc:
        cli_main(["train", str(path)])
    out = capsys.readouterr()
    assert exc.value.code == 0, out.err
    assert "val top-1" in out.out and "train loss" in out.out
    state = torch.load(tmp_path / "run" / "last.pt", weights_only=False)
    assert any(k.endswith("proj.linear.weight") or k.endswith("stem.0.linear.weight") for k in state["model"]), \
        list(state["model"])[:5]
    assert load_recipe(tmp_path / "run" / "recipe.yaml").model.stem is None


def test_checking_a_recipe_leaves_no_meta_tensors_behind(tmp_path):
    """The recipe check builds the architecture on the meta device; dctnet's constant matrices
    (cached per device) made afterwards must still be real — checked in a fresh process, where
    nothing filled the caches before."""
    import subprocess
    import sys

    path = write_recipe(tmp_path, tmp_path / "data", model__arch="timm:vit_tiny_patch16_224", model__stem="dct-patch",
                        model__keep=10)
    code = ("import sys, timm, torch; from dctnet.train import load_recipe; import dctnet.models as M; "
            f"load_recipe({str(path)!r}); "
            "m = M.swap_stem(timm.create_model('vit_tiny_patch16_224', img_size=32)); "
            "print(m(torch.zeros(1, 3, 4, 4, 64)).shape)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "torch.Size([1, 1000])" in out.stdout, out.stderr[-2000:]
