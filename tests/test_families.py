"""DCT stems for more model families, against the unconverted RGB model (the oracle).

Each converted model is fed the coefficient image of real photos and must give the logits the
original RGB model gives on the same pixels: ``crops_to_rgb(exact=True)`` (libjpeg's integer
decode, Pillow's pixels, then the device resize) and ``crops_to_coefficients(exact=True)`` (the
DCT of those very pixels) from one ``JpegBatch``. Models are float64 with random weights, in eval
mode; the bound is ``1e-4 · max|logit|`` (measured ~1e-7: the 6-digit JFIF colour constants).
Also: the patchify algebra for p = 2, 4, 32 against ``nn.Conv2d`` on any input, the normalisation
rule shared with ``ToRGB``, and the error messages of swapped models.
"""

from __future__ import annotations

import copy

import pytest
import timm
import torch
import torchvision
from torch import nn

import dctnet
from dctnet.kernels import color as KC
from dctnet.kernels import coefficients as TF
from dctnet.kernels import dct as KD
import dctnet.models as M
import dctnet.nn as N
from dctnet import data as D
from dctnet import transforms as T
from dctnet.synthetic import synthetic_jpeg

from conftest import imagenette_files

SIZE = 64


@pytest.fixture(scope="module")
def photos():
    """``(rgb, x)``: 3 Imagenette val photos, centre-cropped to 64², as float64 pixels in [0, 1]
    and as the coefficient image of the same pixels."""
    files = imagenette_files("val", every=900)[:3]
    if not files:
        pytest.skip("Imagenette not found")
    ds = D.ImageFolderDataset.from_files(files, crop=D.CenterCrop())
    batch = D.collate([ds[i] for i in range(len(files))], pin_memory=False)
    rgb = T.crops_to_rgb(batch, (SIZE, SIZE), exact=True).double()
    x = T.crops_to_coefficients(batch, (SIZE, SIZE), exact=True).double()
    return rgb, x


IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def normalized(rgb: torch.Tensor, model: nn.Module) -> torch.Tensor:
    """What the RGB model was trained on, written out here (not dctnet's rule): timm's
    ``pretrained_cfg`` statistics, torchvision's ImageNet ones."""
    cfg = getattr(model, "pretrained_cfg", None)
    mean, std = (cfg["mean"], cfg["std"]) if cfg else IMAGENET
    m, s = (torch.tensor(v, dtype=rgb.dtype).reshape(1, 3, 1, 1) for v in (mean, std))
    return (rgb - m) / s


def relative_logit_error(model: nn.Module, rgb: torch.Tensor, x: torch.Tensor, stem: str) -> float:
    """max |converted − RGB logits| / max |RGB logits|, checking the stem kind swap_stem chose."""
    model = model.double().eval()
    with torch.no_grad():
        ref = model(normalized(rgb, model))
        dct = M.swap_stem(copy.deepcopy(model)).eval()
        out = dct(x)
    assert dct.dctnet_stem == stem
    scale = ref.abs().max().item()
    assert scale > 0 and (ref - ref.mean(0)).abs().max().item() > 1e-3 * scale  # logits depend on the photo
    return (out - ref).abs().max().item() / scale


def timm_model(name: str, **kw) -> nn.Module:
    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False, **kw)


def tv_model(name: str, **kw) -> nn.Module:
    torch.manual_seed(0)
    m = torchvision.models.get_model(name, weights=None, **kw)
    if hasattr(m, "heads"):  # torchvision zero-initialises the ViT head
        nn.init.normal_(m.heads.head.weight, std=0.02)
    return m


FAMILIES = [
    # name, builder, stem swap_stem must pick
    ("timm:convnext_atto", lambda: timm_model("convnext_atto"), "dct-patch"),
    ("timm:swin_tiny_patch4_window7_224", lambda: timm_model("swin_tiny_patch4_window7_224", img_size=SIZE), "dct-patch"),
    ("timm:vit_base_patch32_224", lambda: timm_model("vit_base_patch32_224", img_size=SIZE), "dct-patch"),
    ("timm:efficientnet_b0", lambda: timm_model("efficientnet_b0"), "idct"),
    ("convnext_tiny", lambda: tv_model("convnext_tiny"), "dct-patch"),
    ("swin_t", lambda: tv_model("swin_t"), "dct-patch"),
    ("vit_b_32", lambda: tv_model("vit_b_32", image_size=SIZE), "dct-patch"),
    ("mobilenet_v3_small", lambda: tv_model("mobilenet_v3_small"), "idct"),
    ("regnet_y_400mf", lambda: tv_model("regnet_y_400mf"), "idct"),
]


@pytest.mark.parametrize("name,build,stem", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_converted_family_reproduces_logits_on_photos(photos, name, build, stem):
    rgb, x = photos
    err = relative_logit_error(build(), rgb, x, stem)
    print(f"{name}: max relative logit difference {err:.2e}")
    assert err <= 1e-4, err


def test_patchify_stem_keeps_what_follows_the_conv():
    """ConvNeXt's LayerNorm and Swin's norm + NHWC layout stay; only the conv is replaced."""
    convnext = M.swap_stem(timm_model("convnext_atto"))
    assert isinstance(convnext.stem[0], N.DCTPatchEmbed) and type(convnext.stem[1]).__name__ == "LayerNorm2d"
    swin = M.swap_stem(timm_model("swin_tiny_patch4_window7_224", img_size=SIZE))
    assert isinstance(swin.patch_embed.proj, N.DCTPatchEmbed) and isinstance(swin.patch_embed.norm, nn.LayerNorm)
    with torch.no_grad():
        tokens = swin.patch_embed(torch.zeros(1, 3, SIZE // 8, SIZE // 8, 64))
    assert tokens.shape == (1, SIZE // 4, SIZE // 4, 96)  # NHWC, as timm's Swin stages expect
    assert M.stem_modules(convnext) == [convnext.stem[0]]


@pytest.mark.parametrize("patch", [2, 4, 32])
def test_patch_embed_matches_conv_for_sub_block_and_large_patches(patch):
    """Any input (not only in-range photos): the linear map on coefficients equals the conv on
    the normalised linear reconstruction, to float64 rounding."""
    torch.manual_seed(patch)
    conv = nn.Conv2d(3, 12, patch, patch).double()
    x = torch.randn(2, 3, 8, 8, 64, dtype=torch.float64) * 40
    rgb = KC.ycbcr_to_rgb(KD.block_idct(x) + 128.0, dim=1) / 255.0
    mean, std = (0.4, 0.5, 0.6), (0.2, 0.3, 0.25)
    ref = conv((rgb - torch.tensor(mean, dtype=torch.float64).reshape(1, 3, 1, 1))
               / torch.tensor(std, dtype=torch.float64).reshape(1, 3, 1, 1))
    emb = N.DCTPatchEmbed.from_conv(conv, mean, std)
    torch.testing.assert_close(emb(x), ref, atol=1e-9, rtol=1e-9)
    if patch == 32:  # native 4:2:0 chroma: each patch covers 2×2 chroma blocks
        c = torch.randn(2, 2, 4, 4, 64, dtype=torch.float64) * 20
        up = torch.stack([KD.upsample_nearest_dct(c[:, i], 2, 2) for i in range(2)], 1)
        full = torch.cat([x[:, :1], up], 1)
        native = N.DCTPatchEmbed.from_conv(conv, mean, std, chroma="native")((x[:, 0], c))
        torch.testing.assert_close(native, N.DCTPatchEmbed.from_conv(conv, mean, std)(full), atol=1e-9, rtol=1e-9)


def test_patch_sizes_that_do_not_nest_with_blocks_are_refused():
    for p in (3, 12, 14):
        with pytest.raises(ValueError, match="patch_size"):
            N.DCTPatchEmbed(p, 8)
    with pytest.raises(ValueError, match="native"):
        N.DCTPatchEmbed(4, 8, chroma="native")
    with pytest.raises(ValueError, match="nest"):
        N.DCTPatchEmbed(24, 8, chroma="native")


def test_torgb_for_model_and_swap_stem_share_one_normalisation():
    """The documented rule: ``ToRGB.for_model(model)`` + the RGB model == ``swap_stem(model)`` on
    the coefficients, for a timm model whose statistics are not ImageNet's (0.5/0.5)."""
    model = timm_model("vit_small_patch16_224", img_size=32).double().eval()
    assert M.input_mean_std(model) == ((0.5,) * 3, (0.5,) * 3)
    assert M.input_mean_std("timm:vit_small_patch16_224") == M.input_mean_std(model)
    assert M.input_mean_std("resnet50") == (T.IMAGENET_MEAN, T.IMAGENET_STD)
    rgb = torch.rand(2, 3, 32, 32, dtype=torch.float64)
    x = TF.coefficient_image_from_rgb(rgb)
    with torch.no_grad():
        ref = model(T.ToRGB.for_model(model)(x))
        out = M.swap_stem(copy.deepcopy(model)).eval()(x)
    torch.testing.assert_close(out, ref, atol=1e-6 * ref.abs().max().item(), rtol=0)
    assert torch.equal(T.ToRGB().mean, torch.tensor(T.IMAGENET_MEAN).reshape(1, 3, 1, 1))  # default unchanged


def test_swapping_twice_says_the_model_already_has_a_dct_stem():
    for model in (timm_model("vit_small_patch16_224", img_size=32), torchvision.models.resnet18(),
                  timm_model("convnext_atto")):
        M.swap_stem(model)
        with pytest.raises(ValueError, match="already has a DCT stem"):
            M.swap_stem(model)


def test_a_grid_that_does_not_fit_names_expected_and_got_sizes():
    vit = M.swap_stem(timm_model("vit_small_patch16_224")).eval()  # 224² = 14x14 tokens
    with pytest.raises(ValueError, match=r"224x224 pixels = a 28x28 block grid, 14x14 patches; got a 34x34 block grid "
                                         r"\(272x272 pixels, 17x17 patches\)"):
        vit(torch.zeros(1, 3, 34, 34, 64))
    tv = M.swap_stem(tv_model("vit_b_32", image_size=SIZE)).eval()
    with pytest.raises(ValueError, match=r"expects 64x64 pixels.*got a 10x10 block grid"):
        tv(torch.zeros(1, 3, 10, 10, 64))
    with pytest.raises(ValueError, match="coefficient image"):
        tv(torch.zeros(1, 3, SIZE, SIZE))  # RGB into a DCT model


def test_jpeg_batch_into_a_tensor_transform_says_to_decode_first():
    c = D.sample_from_coefficients(dctnet.read_coefficients(synthetic_jpeg(0, 32, 32)), D.CenterCrop(), 0, 0)
    batch = D.collate([c], pin_memory=False)
    for t in (T.RandomHorizontalFlip(), T.ToRGB(), T.Compose([T.ColorJitter(0.2)]), T.RandAugment(),
              T.Mixup(num_classes=2)):
        with pytest.raises(TypeError, match=r"crops_to_rgb\(batch, size\) first \(or crops_to_coefficients"):
            t(batch)
    # either decoded form is taken, and comes back in its own representation
    assert T.RandomHorizontalFlip(p=1.0)(T.crops_to_rgb(batch, (32, 32))).shape == (1, 3, 32, 32)
    assert T.RandomHorizontalFlip(p=1.0)(T.crops_to_coefficients(batch, (32, 32))).shape == (1, 3, 4, 4, 64)
