"""DCT stems against the unconverted model (the oracle): converted ViTs give the RGB model's
logits; ResNet converted (IDCT) stem likewise; learned stems train; checkpoints round-trip.

Reference input: ``model(normalize(rgb))`` with ``rgb`` the linear (unclamped) reconstruction of the
coefficients — the affine map the conversion folds in. Bound: float32 models agree to
``1e-4 · max|logit| + 1e-4`` (float32 rounding through a deep network; measured ~1e-6 relative)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import timm
import torch
import torchvision
from torch import nn

import dctnet
from dctnet.kernels import color as KC
from dctnet.kernels import dct as KD
import dctnet.image as IM
import dctnet.resize as RS
import dctnet.models as M
import dctnet.nn as N
from dctnet.synthetic import synthetic_jpeg
from dctnet.train.optim import param_groups

from conftest import imagenette_files

SAMPLINGS = {"4:2:0": ((2, 2), (1, 1), (1, 1)), "4:2:2": ((2, 1), (1, 1), (1, 1)), "4:4:4": ((1, 1), (1, 1), (1, 1))}


def _idct_basis() -> np.ndarray:
    """JPEG's orthonormal 8-point DCT-II matrix ``D[u, x] = c_u·cos((2x + 1)uπ/16)·½`` (c_0 = 1/√2)."""
    u, x = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
    d = np.cos((2 * x + 1) * u * np.pi / 16) / 2
    d[0] /= np.sqrt(2)
    return d


def linear_rgb(planes, sampling, size, dtype=torch.float32):
    """The oracle: the linear (unclamped) decode of dequantized coefficient planes in plain numpy float64,
    written from JPEG's definitions and not from dctnet — each block's 2-D IDCT ``Dᵀ·F·D`` (F row-major,
    vertical frequency first) + 128, chroma repeated to the luma grid (nearest), JFIF YCbCr → RGB
    (R = Y + 1.402 Cr', G = Y − 0.344136 Cb' − 0.714136 Cr', B = Y + 1.772 Cb', ' = −128), ÷ 255:
    ``(N, 3, H, W)``. It is the affine map a converted stem folds in."""
    d = _idct_basis()
    hmax, vmax = max(h for h, _ in sampling), max(v for _, v in sampling)
    comps = []
    for p, (h, v) in zip(planes, sampling):
        c = p.double().numpy()
        n, bh, bw, _ = c.shape
        px = np.einsum("ux,nijuv,vy->nixjy", d, c.reshape(n, bh, bw, 8, 8), d).reshape(n, bh * 8, bw * 8) + 128.0
        comps.append(np.repeat(np.repeat(px, vmax // v, 1), hmax // h, 2)[:, :size[0], :size[1]])
    if len(comps) == 1:
        rgb = np.stack([comps[0]] * 3, 1)
    else:
        y, cb, cr = comps[0], comps[1] - 128.0, comps[2] - 128.0
        rgb = np.stack([y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb], 1)
    return torch.from_numpy(rgb / 255.0).to(dtype)


def test_the_numpy_oracle_decodes_as_pillow():
    """The oracle anchored to an independent decoder: on 4:4:4 and gray files (no chroma upsampling, where
    Pillow's fancy filter and the oracle's nearest agree) it rounds to Pillow's pixels within libjpeg's
    integer IDCT's and colour tables' error (at most 2 grey levels, 0.38 on average here)."""
    import io

    from PIL import Image

    for sub in ("4:4:4", "gray"):
        from dctnet.synthetic import encode_jpeg, synthetic_image

        arr = synthetic_image(np.random.default_rng(5), 48, 40)
        data = encode_jpeg(arr, quality=90, subsampling="4:4:4", gray=sub == "gray")
        c = dctnet.read_coefficients(data)
        planes = [torch.from_numpy(p[None]) for p in c.planes]
        ours = (linear_rgb(planes, c.sampling, c.size, torch.float64)[0] * 255).round().clamp(0, 255).numpy()
        with Image.open(io.BytesIO(data)) as im:
            pil = np.asarray(im.convert("RGB"), dtype=np.float64).transpose(2, 0, 1)
        diff = np.abs(ours - pil)
        assert diff.max() <= 2 and diff.mean() < 0.5, (sub, diff.max(), diff.mean())  # measured: 2, 0.38


def normalize(rgb, mean, std):
    m = torch.tensor(mean, dtype=rgb.dtype).reshape(1, 3, 1, 1)
    return (rgb - m) / torch.tensor(std, dtype=rgb.dtype).reshape(1, 3, 1, 1)


def inputs(sub: str, size: int = 64, n: int = 2):
    """Real photos when available (center 64² of Imagenette val), else synthetic, as JPEG planes
    of the given layout (encoded by libjpeg through Pillow)."""
    from PIL import Image

    files = imagenette_files("val", every=700)[:n]
    imgs = []
    for i in range(n):
        if files:
            with Image.open(files[i]) as im:
                im = im.convert("RGB").resize((size, size))
                arr = np.asarray(im)
        else:
            from dctnet.synthetic import synthetic_image

            arr = synthetic_image(np.random.default_rng(i), size, size)
        from dctnet.synthetic import encode_jpeg

        data = encode_jpeg(arr, quality=90, subsampling=sub if sub != "gray" else "4:2:0", gray=sub == "gray")
        imgs.append(dctnet.read_coefficients(data))
    planes = [torch.from_numpy(np.stack([c.planes[k] for c in imgs])).float() for k in range(imgs[0].num_components)]
    return planes, imgs[0].sampling


def upsampled(planes, sampling):
    """Coefficient image on the luma grid (nearest chroma upsampling in the DCT domain)."""
    if len(planes) == 1:
        return planes[0].unsqueeze(1)
    hmax = max(h for h, _ in sampling)
    vmax = max(v for _, v in sampling)
    out = [KD.upsample_nearest_dct(p, hmax // h, vmax // v) for p, (h, v) in zip(planes, sampling)]
    return torch.stack(out, 1)


def check(a, b):
    bound = 1e-4 * b.abs().max().item() + 1e-4
    assert (a - b).abs().max().item() <= bound, ((a - b).abs().max().item(), bound)


def tv_vit():
    torch.manual_seed(0)
    m = torchvision.models.vit_b_16(image_size=64)
    nn.init.normal_(m.heads.head.weight, std=0.02)  # torchvision zero-initialises the head
    return m.eval()


def timm_vit():
    torch.manual_seed(0)
    return timm.create_model("vit_small_patch16_224", pretrained=False, img_size=64).eval()


@pytest.mark.parametrize("arch", ["torchvision", "timm"])
@pytest.mark.parametrize("sub", ["4:2:0", "4:2:2", "4:4:4", "gray"])
@pytest.mark.parametrize("chroma", ["upsampled", "native"])
def test_converted_vit_reproduces_logits(arch, sub, chroma):
    model = tv_vit() if arch == "torchvision" else timm_vit()
    mean, std = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)) if arch == "torchvision" else ((0.5,) * 3, (0.5,) * 3)
    planes, sampling = inputs(sub)
    with torch.no_grad():
        ref = model(normalize(linear_rgb(planes, sampling, (64, 64)), mean, std))
        if chroma == "upsampled":
            dct = M.swap_stem(copy.deepcopy(model)).eval()
            out = dct(upsampled(planes, sampling))
        else:
            factor = (1, 1) if sub == "gray" else (sampling[0][0], sampling[0][1])
            dct = M.swap_stem(copy.deepcopy(model), chroma="native", chroma_factor=factor).eval()
            c = torch.stack(planes[1:], 1) if len(planes) > 1 else None
            out = dct((planes[0], c))
    check(out, ref)


@pytest.mark.parametrize("patch", [8, 16])
@pytest.mark.parametrize("sub", ["4:2:0", "4:2:2", "4:4:4"])
def test_patch_embed_native_matches_conv_for_patch_8_and_16(patch, sub):
    torch.manual_seed(1)
    conv = nn.Conv2d(3, 32, patch, patch).double()
    planes, sampling = inputs(sub, size=32)
    planes = [p.double() for p in planes]
    rgb = linear_rgb(planes, sampling, (32, 32), dtype=torch.float64)
    ref = conv(normalize(rgb, (0.4, 0.5, 0.6), (0.2, 0.3, 0.25)).double())
    emb = N.DCTPatchEmbed.from_conv(conv, (0.4, 0.5, 0.6), (0.2, 0.3, 0.25), chroma="native",
                                    chroma_factor=(sampling[0][0], sampling[0][1]))
    out = emb((planes[0], torch.stack(planes[1:], 1)))
    torch.testing.assert_close(out, ref, atol=1e-9, rtol=1e-9)
    up = N.DCTPatchEmbed.from_conv(conv, (0.4, 0.5, 0.6), (0.2, 0.3, 0.25))(upsampled(planes, sampling))
    torch.testing.assert_close(up, ref, atol=1e-9, rtol=1e-9)


def test_converted_vit_on_real_photos_fancy_decode():
    """End to end on real photos: the loader's coefficient image (fancy upsampling) into the
    converted model vs the same pixels into the RGB model."""
    from dctnet.kernels import coefficients as TF

    files = imagenette_files("val", every=500)
    if not files:
        pytest.skip("Imagenette not found")
    model = timm_vit()
    imgs = []
    for path in files[:4]:
        rgb = IM.coefficients_to_rgb(dctnet.read_coefficients(path))
        imgs.append(RS.resized_crop(rgb, torch.tensor([[0, 0, rgb.shape[2], rgb.shape[3]]]), (64, 64)))
    x = TF.coefficient_image_from_rgb(torch.cat(imgs).double()).float()
    with torch.no_grad():
        rgb = KC.ycbcr_to_rgb(KD.block_idct(x) + 128.0, dim=1) / 255
        ref = model(normalize(rgb, (0.5,) * 3, (0.5,) * 3))
        out = M.swap_stem(copy.deepcopy(model)).eval()(x)
    check(out, ref)
    assert (out.argmax(1) == ref.argmax(1)).all()


def test_frequency_truncation_drops_columns_and_reports_error():
    torch.manual_seed(2)
    conv = nn.Conv2d(3, 16, 16, 16)
    full = N.DCTPatchEmbed.from_conv(conv)
    for keep, k in ((15, 15), ("square:4", 16), ([0, 1, 8], 3)):
        emb = N.DCTPatchEmbed.from_conv(conv, keep=keep)
        assert emb.linear.in_features == 3 * 4 * k
        idx = N.frequency_index(keep)
        torch.testing.assert_close(emb.linear.weight.reshape(16, 3, 2, 2, k),
                                   full.linear.weight.reshape(16, 3, 2, 2, 64)[..., idx])
    x = torch.randn(2, 3, 4, 4, 64) * 20
    x_low = torch.zeros_like(x)
    idx = N.frequency_index(10)
    x_low[..., idx] = x[..., idx]
    emb = N.DCTPatchEmbed.from_conv(conv, keep=10)
    torch.testing.assert_close(emb(x), full(x_low), atol=1e-4, rtol=1e-5)  # exact when dropped coefs are 0


@pytest.mark.parametrize("stem", ["idct", "dct8", "dct-up"])
def test_resnet_stems(stem):
    torch.manual_seed(3)
    model = torchvision.models.resnet18(num_classes=5).eval()
    planes, sampling = inputs("4:2:0", size=64, n=4)
    x = upsampled(planes, sampling)
    swapped = M.swap_stem(copy.deepcopy(model), stem=stem)
    if stem == "idct":
        with torch.no_grad():
            ref = model(normalize(linear_rgb(planes, sampling, (64, 64)), M.IMAGENET_MEAN, M.IMAGENET_STD))
            check(swapped.eval()(x), ref)
        return
    # learned stems: output shape right, FLOPs below the original, and they train
    assert swapped.eval()(x).shape == (4, 5)
    flops_rgb = M.count_flops(model, torch.zeros(1, 3, 64, 64))
    flops_dct = M.count_flops(swapped, torch.zeros(1, 3, 8, 8, 64))
    assert flops_dct < flops_rgb
    swapped.train()
    opt = torch.optim.SGD(param_groups(swapped, 0.05, stem_lr_mult=0.2), lr=0.05, momentum=0.9)
    labels = torch.tensor([0, 1, 2, 3])
    losses = []
    for _ in range(15):
        loss = nn.functional.cross_entropy(swapped(x), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


def test_patch_embed_spatial_init_has_the_conv_scale():
    emb = N.DCTPatchEmbed(16, 64)
    emb.init_from_spatial(torch.Generator().manual_seed(0))
    # same output scale as the spatial conv it came from, on coefficient inputs of pixel noise
    conv = nn.Conv2d(3, 64, 16, 16)
    x = torch.randn(8, 3, 64, 64) * 60
    coeffs = KD.block_dct(x)  # level-shifted samples, no colour transform: compare spreads only
    ratio = emb(coeffs).std() / (conv(x / 255).std())
    assert 0.3 < ratio < 3, ratio
    with pytest.raises(ValueError):
        N.DCTPatchEmbed.from_conv(nn.Conv2d(3, 8, 7, 2))


def test_names_that_are_not_stems_say_which_are():
    """``"exact"`` (the libjpeg integer decode) and ``"converted"`` (a kind of stem, not one) name
    the converted stems, ``dct-patch`` and ``idct``."""
    for name in ("exact", "converted"):
        with pytest.raises(ValueError, match=f"stem='{name}': .*the converted stems are 'dct-patch' and 'idct'"):
            M.swap_stem(torchvision.models.resnet18(), stem=name)
        with pytest.raises(ValueError, match="the converted stems are 'dct-patch' and 'idct'"):
            M.convert_checkpoint("in.pt", "out.pt", "resnet18", stem=name)


def test_state_dict_round_trip(tmp_path):
    model = M.swap_stem(tv_vit())
    path = tmp_path / "dct.pt"
    torch.save(model.state_dict(), path)
    fresh = M.swap_stem(tv_vit().apply(lambda m: None))
    for p in fresh.parameters():
        nn.init.zeros_(p)
    fresh.load_state_dict(torch.load(path, weights_only=True))
    x = upsampled(*inputs("4:2:0"))
    with torch.no_grad():
        torch.testing.assert_close(fresh.eval()(x), model.eval()(x))


def test_torchvision_vit_takes_coefficients_through_its_own_forward():
    """The swapped torchvision ViT is a VisionTransformer subclass (no per-instance patch): its
    inherited forward runs on coefficients, and it survives pickling and deepcopy."""
    import io

    model = M.swap_stem(tv_vit()).eval()
    assert isinstance(model, torchvision.models.VisionTransformer) and "_process_input" not in vars(model)
    x = upsampled(*inputs("4:2:0"))
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    with torch.no_grad():
        want = model(x)
        torch.testing.assert_close(torch.load(buf, weights_only=False)(x), want, atol=0, rtol=0)
        torch.testing.assert_close(copy.deepcopy(model)(x), want, atol=0, rtol=0)


def test_convert_cli_round_trip(tmp_path):
    import subprocess
    import sys

    torch.manual_seed(4)
    src = tmp_path / "vit.pt"
    m = timm.create_model("vit_small_patch16_224", pretrained=False)
    torch.save(m.state_dict(), src)
    out = tmp_path / "vit_dct.pt"
    img = tmp_path / "a.jpg"
    img.write_bytes(synthetic_jpeg(0, 224, 224))
    r = subprocess.run([sys.executable, "-m", "dctnet", "convert", str(src), str(out), "--arch", "timm:vit_small_patch16_224",
                        "--image", str(img)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "max |logit difference|" in r.stdout
    dct = M.swap_stem(timm.create_model("vit_small_patch16_224", pretrained=False))
    dct.load_state_dict(torch.load(out, weights_only=True))
    r = subprocess.run([sys.executable, "-m", "dctnet", "convert", str(tmp_path / "missing.pt"), str(out), "--arch",
                        "resnet50"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr


@pytest.mark.parametrize("arch,size", [("vit_b_16", "64"), ("resnet50", None)])
def test_convert_cli_torchvision(tmp_path, arch, size):
    import subprocess
    import sys

    torch.manual_seed(5)
    model = M.build_model(arch, image_size=int(size) if size else None)
    src, out = tmp_path / "in.pt", tmp_path / "out.pt"
    torch.save({"state_dict": {"module." + k: v for k, v in model.state_dict().items()}}, src)  # DDP-style wrapper
    cmd = [sys.executable, "-m", "dctnet", "convert", str(src), str(out), "--arch", arch]
    if size:
        cmd += ["--image-size", size]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    dct = M.swap_stem(M.build_model(arch, image_size=int(size) if size else None))
    dct.load_state_dict(torch.load(out, weights_only=True))


def test_idct_stem_keep_truncates_like_a_patch_embedding():
    """``keep`` on the IDCT stem (not block-aligned first convs) zeroes the dropped frequencies:
    the truncated model on any input equals the full one on the input with them zeroed."""
    torch.manual_seed(6)
    model = torchvision.models.resnet18(num_classes=5).eval()
    full = M.swap_stem(copy.deepcopy(model)).eval()
    low = M.swap_stem(copy.deepcopy(model), keep=10).eval()
    assert isinstance(low.conv1, N.IDCTStem) and M.stem_modules(low) == [low.conv1]
    x = upsampled(*inputs("4:2:0", size=64, n=2))
    x_low = torch.zeros_like(x)
    idx = N.frequency_index(10)
    x_low[..., idx] = x[..., idx]
    with torch.no_grad():
        check(low(x), full(x_low))
        assert (low(x) - full(x)).abs().max() > 1e-3


def test_idct_stem_reconstruction_stays_float32_under_autocast():
    """Issue 40 item 5: under a bf16 autocast (the trainer's ``train.amp``) the IDCT stem's
    reconstruction (DCTToRGB: block IDCT, colour, normalisation) is still the float32 one, so the stem
    stays the exact conversion; only the model's own first conv after it runs in bf16, as it did in
    the RGB model. Without autocast off inside DCTToRGB the IDCT matmul rounds to bf16 (the control
    below; measured 0.05 on normalised pixels, a few grey levels)."""
    from dctnet.kernels import coefficients as TF

    torch.manual_seed(7)
    model = torchvision.models.resnet18(num_classes=5).eval()
    stem = M.swap_stem(copy.deepcopy(model)).conv1
    assert isinstance(stem, N.IDCTStem)
    x = upsampled(*inputs("4:2:0", size=64, n=2))
    with torch.no_grad():
        ref = stem[0](x)                                           # float32, no autocast
        with torch.autocast("cpu", dtype=torch.bfloat16):
            rgb = stem[0](x)
            out = stem(x)
            conv_ref = stem[1](ref)                                # the conv under autocast on float32 pixels
            rounded = TF.coefficient_image_to_rgb(x, clamp=False)  # control: the IDCT under autocast
        assert (rounded - TF.coefficient_image_to_rgb(x, clamp=False)).abs().max() > 1e-3  # 0..1 scale
    assert rgb.dtype == torch.float32
    torch.testing.assert_close(rgb, ref)                           # float32 tolerance (rtol 1.3e-6)
    assert out.dtype == torch.bfloat16                             # the conv kept the caller's autocast
    torch.testing.assert_close(out, conv_ref, atol=0, rtol=0)
