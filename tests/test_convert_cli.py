"""``dctnet convert``: normalisation override and its reported source, the load hint after
``--keep``, the learned stems refused (nothing to convert), a short error for a wrong ``--arch``,
the new families.

The command runs in-process (``dctnet.cli.main``) to keep the tests fast. The oracle for a written
file is the RGB model built independently: ``swap_stem(build(ARCH), <printed arguments>)`` loaded
with OUT must give the RGB model's logits on pixels normalised the way the command said."""

from __future__ import annotations

import re

import pytest
import timm
import torch
import torchvision

import dctnet.models as M
from dctnet.cli import main
from dctnet.models import build_model
from dctnet.synthetic import synthetic_jpeg
from dctnet.kernels import coefficients as TF


def run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(["convert", *map(str, args)])
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


@pytest.fixture()
def image(tmp_path):
    p = tmp_path / "photo.jpg"
    p.write_bytes(synthetic_jpeg(3, 64, 64))
    return p


def coefficients(size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(7)
    rgb = torch.nn.functional.interpolate(torch.rand(2, 3, size // 8, size // 8), size=(size, size), mode="bilinear")
    return rgb, TF.coefficient_image_from_rgb(rgb)


def normalize(rgb, mean, std):
    return (rgb - torch.tensor(mean).reshape(1, 3, 1, 1)) / torch.tensor(std).reshape(1, 3, 1, 1)


def hint_kwargs(stdout: str) -> dict:
    """The keyword arguments of the printed ``dctnet.models.swap_stem(model, ...)`` hint."""
    call = re.search(r"load with dctnet\.models\.swap_stem\(model(.*?)\)\)\s*$", stdout, re.M)
    assert call, stdout
    return eval(f"dict({call.group(1).lstrip(', ')})")  # the hint is Python, by design


@pytest.mark.parametrize("arch,kind", [("timm:convnext_atto", "patch embedding"), ("resnet18", "IDCT")])
def test_mean_std_override_is_folded_in_and_reported(capsys, tmp_path, image, arch, kind):
    torch.manual_seed(0)
    model = build_model(arch, num_classes=10).eval()
    src, dst = tmp_path / "in.pt", tmp_path / "out.pt"
    torch.save(model.state_dict(), src)
    mean, std = (0.3, 0.4, 0.5), (0.2, 0.25, 0.3)
    code, out, err = run(capsys, src, dst, "--arch", arch, "--image", image, "--mean", *mean, "--std", *std)
    assert code == 0, err
    assert "normalisation: mean (0.3, 0.4, 0.5) std (0.2, 0.25, 0.3) (from --mean/--std)" in out
    assert kind in out
    kwargs = hint_kwargs(out)
    assert kwargs == {"mean": mean, "std": std}
    dct = M.swap_stem(build_model(arch, num_classes=10), **kwargs).eval()
    dct.load_state_dict(torch.load(dst, weights_only=True))
    rgb, x = coefficients()
    with torch.no_grad():
        ref = model(normalize(rgb, mean, std))
        default = model(normalize(rgb, *M.input_mean_std(model)))
        got = dct(x)
    scale = ref.abs().max().item()
    assert (got - ref).abs().max().item() <= 1e-4 * scale
    assert (got - default).abs().max().item() > 1e-3 * scale  # the override, not the default, is in the stem


def test_reported_normalisation_source(capsys, tmp_path, image):
    torch.manual_seed(1)
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64, num_classes=10)
    plain, wrapped, recorded, dst = (tmp_path / n for n in ("plain.pt", "wrapped.pt", "recorded.pt", "out.pt"))
    torch.save(vit.state_dict(), plain)
    # a dctnet train checkpoint: the recipe's arch decides (timm ViT: 0.5/0.5)
    torch.save({"model": vit.state_dict(), "recipe": {"model": {"arch": "timm:vit_tiny_patch16_224", "input": "rgb"}}},
               wrapped)
    torch.save({"state_dict": vit.state_dict(), "mean": [0.1, 0.2, 0.3], "std": [0.3, 0.3, 0.3]}, recorded)
    common = ("--arch", "timm:vit_tiny_patch16_224", "--image-size", "64", "--image", image)
    code, out, err = run(capsys, plain, dst, *common)
    assert code == 0 and "mean (0.5, 0.5, 0.5) std (0.5, 0.5, 0.5) (from timm pretrained_cfg" in out, err
    assert "load with dctnet.models.swap_stem(model))" in out
    code, out, err = run(capsys, wrapped, dst, *common)
    assert code == 0 and "(from checkpoint metadata (dctnet recipe, model.arch=timm:vit_tiny_patch16_224))" in out, err
    code, out, err = run(capsys, recorded, dst, *common)
    assert code == 0 and "mean (0.1, 0.2, 0.3) std (0.3, 0.3, 0.3) (from checkpoint metadata (mean/std))" in out, err
    code, out, err = run(capsys, recorded, dst, *common, "--mean", 0.5, 0.5, 0.5, "--std", 0.5, 0.5, 0.5)
    assert code == 0 and "(from --mean/--std)" in out, err  # the argument beats the metadata
    torch.save({"model": vit.state_dict(), "recipe": {"model": {"arch": "timm:vit_tiny_patch16_224", "input": "dct"}}},
               wrapped)
    code, out, err = run(capsys, wrapped, dst, *common)
    assert code == 1 and "already has a DCT stem" in err
    code, out, err = run(capsys, plain, dst, *common, "--mean", 0.5, 0.5, 0.5)
    assert code == 2 and "--mean and --std go together" in err


def test_torchvision_checkpoint_uses_imagenet_default(capsys, tmp_path, image):
    model = torchvision.models.mobilenet_v3_small(num_classes=5)
    src, dst = tmp_path / "in.pt", tmp_path / "out.pt"
    torch.save(model.state_dict(), src)
    code, out, err = run(capsys, src, dst, "--arch", "mobilenet_v3_small", "--image", image)
    assert code == 0, err
    assert "(from ImageNet default)" in out and "IDCT stem" in out


def test_keep_hint_is_the_call_that_loads_the_file(capsys, tmp_path, image):
    torch.manual_seed(2)
    model = build_model("timm:convnext_atto", num_classes=10)
    src, dst = tmp_path / "in.pt", tmp_path / "out.pt"
    torch.save(model.state_dict(), src)
    code, out, err = run(capsys, src, dst, "--arch", "timm:convnext_atto", "--image", image, "--keep", "10")
    assert code == 0, err
    assert "load with dctnet.models.swap_stem(model, keep=10))" in out and "frequency truncation" in out
    state = torch.load(dst, weights_only=True)
    M.swap_stem(build_model("timm:convnext_atto", num_classes=10), **hint_kwargs(out)).load_state_dict(state)
    with pytest.raises(RuntimeError):  # the hint matters: without keep the stem has other shapes
        M.swap_stem(build_model("timm:convnext_atto", num_classes=10)).load_state_dict(state)
    code, out, err = run(capsys, src, dst, "--arch", "timm:convnext_atto", "--image", image, "--keep", "square:4")
    assert code == 0 and "swap_stem(model, keep='square:4'))" in out, err


def test_learned_stems_have_nothing_to_convert(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["convert", "--help"])
    assert exc.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--stem NAME" in help_text and "dct-patch" in help_text and "idct" in help_text
    code, _, err = run(capsys, tmp_path / "a.pt", tmp_path / "b.pt", "--arch", "resnet18", "--stem", "dct8")
    assert code == 1 and "stem 'dct8' is a learned stem" in err and "'dct-patch', 'idct'" in err
    assert not (tmp_path / "b.pt").exists()


def test_wrong_torchvision_arch_is_a_short_error(capsys, tmp_path):
    src = tmp_path / "r18.pt"
    torch.save(torchvision.models.resnet18().state_dict(), src)
    code, out, err = run(capsys, src, tmp_path / "out.pt", "--arch", "resnet34")
    assert code == 1 and "Traceback" not in err
    assert len(err) < 600 and err.count("\n") == 1, err
    assert re.search(r"does not fit resnet34: 122 checkpoint keys vs 218 model keys; 96 keys missing \(e\.g\. layer", err)
    # a converted file fed back in: said so
    dst = tmp_path / "dct.pt"
    torch.save(M.swap_stem(torchvision.models.resnet18()).state_dict(), dst)
    code, out, err = run(capsys, dst, tmp_path / "out.pt", "--arch", "resnet18")
    assert code == 1 and "already converted" in err and len(err) < 600


@pytest.mark.parametrize("arch,extra", [("timm:swin_tiny_patch4_window7_224", ("--image-size", "64")),
                                        ("vit_b_32", ("--image-size", "64")), ("timm:efficientnet_b0", ())])
def test_new_families_convert(capsys, tmp_path, image, arch, extra):
    size = int(extra[1]) if extra else None
    torch.manual_seed(3)
    model = build_model(arch, image_size=size, num_classes=10)
    src, dst = tmp_path / "in.pt", tmp_path / "out.pt"
    torch.save(model.state_dict(), src)
    code, out, err = run(capsys, src, dst, "--arch", arch, "--image", image, *extra)
    assert code == 0, err
    rel = float(re.search(r"\(([0-9.e+-]+) relative\)", out).group(1))
    assert rel <= 1e-4
    dct = M.swap_stem(build_model(arch, image_size=size, num_classes=10))
    dct.load_state_dict(torch.load(dst, weights_only=True))
