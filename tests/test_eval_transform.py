"""Bicubic resizing and timm's eval transform on dctnet's path.

- ``resized_crop`` (bilinear and bicubic) equals torchvision's on float tensors, per sample.
- Decoding windows equals decoding the whole image, then torchvision's ``resized_crop``, for
  bicubic too. torchvision crops first, so the filter taps stay inside the box and the 2-pixel
  window margin is for chroma upsampling only.
- :class:`dctnet.data.ResizeCenterCrop` equals timm's own eval geometry (``Resize`` +
  ``CenterCrop`` / ``ResizeKeepRatio`` / ``CenterCropOrPad``), in every crop mode and on every
  loader path. There the taps reach past the kept crop, and the read box covers them.
- :func:`data_config` is timm's ``resolve_data_config``.
- The acceptance check: a timm ViT and a ConvNeXt, converted with ``swap_stem``, evaluated on
  dctnet's eval path, give the logits that the unconverted models give through timm's own
  ``create_transform`` on the PIL images.
"""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as TVF
from PIL import Image
from torchvision.transforms import InterpolationMode

import dctnet.data as D
import dctnet.transforms as T
from dctnet import resize as RS
from dctnet.models import swap_stem
from dctnet.kernels.normalization import data_config, input_mean_std

from conftest import imagenette_files

timm = pytest.importorskip("timm")

INTERPOLATIONS = ("bilinear", "bicubic")


def pillow_float(path: str) -> torch.Tensor:
    """Pillow's decode as float64 ``(3, H, W)`` in [0, 1] (the pixels ``exact=True`` reproduces)."""
    with Image.open(path) as im:
        return torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1).double() / 255


def photos(n: int) -> list[str]:
    files = imagenette_files("val")
    if not files:
        pytest.skip("Imagenette not found")
    return files[:: max(1, len(files) // n)][:n]


def timm_geometry(img: torch.Tensor, cfg: dict) -> torch.Tensor:
    """timm's own eval transform, without ToTensor/Normalize, applied to a float tensor
    ``(3, H, W)``: its torchvision resizes then run on floats (antialiased, no 8-bit rounding)."""
    tf = timm.data.create_transform(**cfg)
    geometry = [t for t in tf.transforms if type(t).__name__ in ("Resize", "CenterCrop", "ResizeKeepRatio")]
    assert len(geometry) == 2, tf
    for t in geometry:
        img = t(img)
    return img


# --- resized_crop vs torchvision ---------------------------------------------------------------

@pytest.mark.parametrize("interpolation", INTERPOLATIONS)
def test_resized_crop_equals_torchvision_per_sample(interpolation, synthetic_files):
    """Odd boxes, up- and downscaling, both interpolations, on real photos (when Imagenette is
    present) and generated JPEGs: float32 within 1e-5 of torchvision's ``resized_crop``."""
    files = imagenette_files("val")[::700] + synthetic_files[:7]
    g = torch.Generator().manual_seed(0)
    mode = InterpolationMode(interpolation)
    worst = 0.0
    for path in files:
        img = pillow_float(path).float()
        h, w = img.shape[1:]
        boxes = [(0, 0, h, w)]
        for _ in range(4):
            bh, bw = (int(torch.randint(1, s + 1, (1,), generator=g)) for s in (h, w))
            top, left = (int(torch.randint(0, s - b + 1, (1,), generator=g)) for s, b in ((h, bh), (w, bw)))
            boxes.append((top, left, bh, bw))
        for size in ((37, 53), (224, 224), (300, 171)):
            ours = RS.resized_crop(img[None].expand(len(boxes), -1, -1, -1), torch.tensor(boxes), size,
                                  interpolation=interpolation)
            for k, box in enumerate(boxes):
                want = TVF.resized_crop(img, *box, list(size), interpolation=mode, antialias=True)
                worst = max(worst, (ours[k] - want).abs().max().item())
    assert worst <= 1e-5, worst


@pytest.mark.parametrize("interpolation", INTERPOLATIONS)
def test_resize_then_crop_equals_torchvision_resize_and_center_crop(interpolation):
    """``resize=`` (the eval geometry) is torchvision's ``resize`` of the whole box, then
    ``center_crop`` (padding included), up- and downscaling, float64 to rounding."""
    g = torch.Generator().manual_seed(1)
    img = torch.rand(2, 3, 45, 70, generator=g, dtype=torch.float64)
    mode = InterpolationMode(interpolation)
    boxes = torch.tensor([[0, 0, 45, 70]] * 2)
    for rh, rw, size in [(30, 47, (20, 20)), (96, 150, (64, 80)), (45, 70, (45, 70)), (20, 33, (32, 40)), (91, 17, (24, 24))]:
        ours = RS.resized_crop(img, boxes, size, interpolation=interpolation,
                              resize=torch.tensor([[rh, rw, *(D.crop._centre_offset(np.array([r]), s)[0] for r, s in
                                                                ((rh, size[0]), (rw, size[1])))]] * 2), fill=0.25)
        full = TVF.resize(img, [rh, rw], interpolation=mode, antialias=True)
        pt, pl = max(0, (size[0] - rh) // 2), max(0, (size[1] - rw) // 2)
        padded = torch.full((2, 3, max(rh, size[0]), max(rw, size[1])), 0.25, dtype=torch.float64)
        padded[:, :, pt:pt + rh, pl:pl + rw] = full  # a crop larger than the image: centred padding first
        want = TVF.center_crop(padded, list(size))
        assert torch.allclose(ours, want, atol=1e-12, rtol=0), (rh, rw, size, (ours - want).abs().max())


# --- windows vs full decode ------------------------------------------------------------------

def test_windowed_bicubic_crop_equals_full_decode_then_torchvision(synthetic_files):
    """RandomResizedCrop windows (box + 2 pixels, snapped to the MCU grid), exact decode and
    bicubic resize on the device == Pillow's whole image, then torchvision's bicubic
    ``resized_crop`` (crop first, so no tap leaves the box), clamped: within 1e-5."""
    files = (imagenette_files("val")[::400] or []) + synthetic_files
    ds = D.ImageFolderDataset.from_files(files, crop=D.RandomResizedCrop())
    batch = D.collate([ds[i] for i in range(len(files))], pin_memory=False)
    for size in ((160, 160), (56, 72)):
        ours = T.crops_to_rgb(batch, size, exact=True, interpolation="bicubic").double()
        worst = 0.0
        for k, path in enumerate(files):
            img = pillow_float(path)
            box = D.RandomResizedCrop().box(img.shape[1], img.shape[2], 0, 0, k)
            want = TVF.resized_crop(img, *box, list(size), interpolation=InterpolationMode.BICUBIC,
                                    antialias=True).clamp(0, 1)
            worst = max(worst, (ours[k] - want).abs().max().item())
        assert worst <= 1e-5, (size, worst)


# --- the eval crop vs timm's geometry --------------------------------------------------------

MODES = [("center", (128, 128), 0.9), ("center", (64, 48), 0.875), ("squash", (96, 96), 0.95),
         ("border", (64, 64), 1.0), ("center", (48, 48), 1.1)]


@pytest.mark.parametrize("mode,size,crop_pct", MODES, ids=[f"{m}-{s[0]}x{s[1]}-{p}" for m, s, p in MODES])
def test_eval_crop_equals_timm_geometry(mode, size, crop_pct, synthetic_files):
    """Every crop mode (square and not, shrinking and enlarging, a crop larger than the image),
    both interpolations, every layout of the generated files and some photos: the device crop of
    the host windows == timm's eval transform of Pillow's image, on floats, within 1e-5. The
    windows hold the taps that reach past the kept crop."""
    files = synthetic_files + (imagenette_files("val")[::800] or [])
    crop = D.ResizeCenterCrop(size, crop_pct, mode)
    mean = (0.485, 0.456, 0.406)
    ds = D.ImageFolderDataset.from_files(files, crop=crop)
    per_sample = D.collate([ds[i] for i in range(len(files))], pin_memory=False)
    collated = ds.load_collated([(0, i) for i in range(len(files))])
    for a, b in zip(per_sample.tensors(), collated.tensors()):  # the batched planner agrees
        assert torch.equal(a, b)
    assert per_sample.resize is not None and per_sample.resize.shape == (len(files), 4)
    for interpolation in INTERPOLATIONS:
        cfg = dict(input_size=(3, *size), interpolation=interpolation, crop_pct=crop_pct, crop_mode=mode,
                   mean=mean, std=(0.229, 0.224, 0.225))
        ours = T.crops_to_rgb(per_sample, size, exact=True, interpolation=interpolation, fill=crop.fill(mean)).double()
        worst = 0.0
        for k, path in enumerate(files):
            img = pillow_float(path)
            if mode == "border":  # timm pads the 8-bit image with round(255·mean): do it on floats
                want = _border_reference(img, cfg, crop.fill(mean))
            else:
                want = timm_geometry(img, cfg)
            worst = max(worst, (ours[k] - want.clamp(0, 1)).abs().max().item())
        assert worst <= 1e-5, (interpolation, worst)


def _border_reference(img: torch.Tensor, cfg: dict, fill: tuple[float, float, float]) -> torch.Tensor:
    """timm's ``"border"`` geometry (``ResizeKeepRatio(longest=1)`` + ``CenterCropOrPad``) on a
    float tensor, with the padding value per channel (timm's tensor pad takes one value)."""
    from timm.data.transforms import ResizeKeepRatio, center_crop_or_pad

    h, w = cfg["input_size"][1:]
    scale = (int(h / cfg["crop_pct"]), int(w / cfg["crop_pct"]))
    img = ResizeKeepRatio(scale, interpolation=cfg["interpolation"], longest=1.0)(img)
    return torch.stack([center_crop_or_pad(img[c:c + 1], [h, w], fill=fill[c])[0] for c in range(3)])


def test_eval_crop_on_every_loader_path(tmp_path, synthetic_files):
    """The eval crop's batch (windows, whole-image boxes, ``resize``) is the same from the folder
    dataset, a dense and a sparse cache (host gather, packed and compressed deliveries expanded
    on the device), and collate of per-sample reads."""
    import shutil

    root = tmp_path / "src" / "c"
    root.mkdir(parents=True)
    for p in synthetic_files:
        shutil.copy(p, root)
    crop = D.ResizeCenterCrop(40, 0.8)
    folder = D.ImageFolderDataset(tmp_path / "src", crop=crop)
    keys = [(0, i) for i in range(len(folder))]
    want = D.collate([folder[i] for i in range(len(folder))], pin_memory=False)
    got = [folder.load_collated(keys)]
    for fmt in ("dense", "sparse"):
        cache = D.CacheDataset(D.build_cache(tmp_path / "src", tmp_path / fmt, format=fmt, progress=False), crop=crop)
        got += [cache.cache.gather(keys, crop, 0, cache.targets),
                T.as_jpeg_batch(cache.cache.gather_packed(keys, crop, 0, cache.targets)),
                D.collate(cache.load_batch(keys), pin_memory=False)]
        if fmt == "sparse":
            got.append(T.as_jpeg_batch(cache.cache.gather_compressed(keys, crop, 0, cache.targets)))
    for batch in got:
        assert torch.equal(batch.resize, want.resize) and torch.equal(batch.boxes, want.boxes)
        assert torch.equal(T.crops_to_rgb(batch, (40, 40), interpolation="bicubic"),
                           T.crops_to_rgb(want, (40, 40), interpolation="bicubic"))


def test_eval_crop_windows_are_smaller_than_the_image():
    """The read box is the kept crop's taps, not the whole image: for timm's 0.875 crop of a
    landscape photo the window skips the sides (and the batch's box is still the whole image)."""
    crop = D.ResizeCenterCrop(224, 0.875)
    top, left, h, w = crop.box(375, 500)
    (_, _, sh, sw), (rh, rw, t, lft) = (v[0] for v in crop.frames([375], [500]))
    assert (sh, sw, rh, rw, t, lft) == (375, 500, 256, 341, 16, 58)
    assert 0 < top and h < 375 and 0 < left and w < 500
    # every bicubic tap of the kept rows/columns lies in the read box, and the widest one touches it
    for start, length, size, resized, off in ((top, h, 375, rh, t), (left, w, 500, rw, lft)):
        m = RS.resize_matrices(torch.tensor([0]), torch.tensor([size]), size, 224, interpolation="bicubic",
                              resized=torch.tensor([resized]), offsets=torch.tensor([off]), dtype=torch.float64)[0]
        used = torch.nonzero(m.abs().sum(0)).flatten()
        assert start <= used.min() and used.max() < start + length and start + length - used.max() <= 3


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_eval_crop_on_cuda_matches_cpu(synthetic_files):
    """The tap bounds are float64 on the device too: the CUDA crop of the eval batch (padding
    fill included) equals the CPU one to float32 rounding."""
    crop = D.ResizeCenterCrop(64, 1.05, "border")
    ds = D.ImageFolderDataset.from_files(synthetic_files, crop=crop)
    batch = ds.load_collated([(0, i) for i in range(len(synthetic_files))])
    for interpolation in INTERPOLATIONS:
        kw = dict(exact=True, interpolation=interpolation, fill=crop.fill((0.5, 0.4, 0.3)))
        cpu = T.crops_to_rgb(batch, (64, 64), **kw)
        gpu = T.crops_to_rgb(batch.to("cuda"), (64, 64), **kw).cpu()
        assert (cpu - gpu).abs().max().item() <= 1e-5


# --- data_config vs timm ---------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["vit_tiny_patch16_224", "convnext_atto", "resnet50", "vit_base_patch16_clip_224"])
def test_data_config_is_timms_resolve_data_config(arch):
    model = timm.create_model(arch, pretrained=False, num_classes=10)
    want = timm.data.resolve_data_config({}, model=model)
    for got in (data_config(model), data_config(f"timm:{arch}")):
        assert got["input_size"] == tuple(want["input_size"]) and got["interpolation"] == want["interpolation"]
        assert got["crop_pct"] == pytest.approx(want["crop_pct"]) and got["crop_mode"] == want["crop_mode"]
        assert got["mean"] == pytest.approx(want["mean"]) and got["std"] == pytest.approx(want["std"])
        assert (got["mean"], got["std"]) == input_mean_std(model)
    test = timm.data.resolve_data_config({}, model=model, use_test_size=True)
    got = data_config(model, use_test_size=True)
    assert got["input_size"] == tuple(test["input_size"]) and got["crop_pct"] == pytest.approx(test["crop_pct"])


def test_data_config_defaults_and_overrides():
    import torchvision

    tv = data_config(torchvision.models.resnet18())
    assert tv == {"input_size": (3, 224, 224), "interpolation": "bilinear", "crop_pct": 0.875, "crop_mode": "center",
                  "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
    assert data_config("resnet18") == tv
    over = data_config("timm:vit_tiny_patch16_224", crop_pct=1.0, interpolation="bilinear", img_size=160, std=None)
    assert over["crop_pct"] == 1.0 and over["interpolation"] == "bilinear" and over["input_size"] == (3, 160, 160)
    assert over["std"] == (0.5, 0.5, 0.5)  # None leaves the field to the model
    crop = D.ResizeCenterCrop.from_config(over)
    assert (crop.size, crop.crop_pct, crop.crop_mode) == ((160, 160), 1.0, "center")
    with pytest.raises(ValueError, match="unknown override"):
        data_config("resnet18", crop=0.9)
    with pytest.raises(ValueError, match="interpolation"):
        data_config("resnet18", interpolation="lanczos")
    with pytest.raises(ValueError, match="crop_mode"):
        D.ResizeCenterCrop(224, 0.9, "centre")
    with pytest.raises(ValueError, match="interpolation"):
        RS.resize_matrices(torch.tensor([0]), torch.tensor([4]), 4, 2, interpolation="nearest")


# --- acceptance: converted timm models on dctnet's eval path vs timm's eval transform ----------

def _relative_logits(arch: str, files: list[str], *, exact: bool = True, old_crop: bool = False
                     ) -> tuple[float, float]:
    """``(‖a − b‖/‖b‖ vs timm's PIL transform, the same vs timm's geometry on float pixels)``:
    ``a`` the converted model on dctnet's eval path, ``b`` the RGB model on timm's. ``old_crop``:
    dctnet's previous eval crop (``CenterCrop(0.875)`` square box, bilinear), for comparison."""
    torch.manual_seed(0)
    rgb = timm.create_model(arch, pretrained=False).eval()  # timm sets pretrained_cfg at random init too
    dct = swap_stem(copy.deepcopy(rgb)).eval()
    timm_cfg = timm.data.resolve_data_config({}, model=rgb)
    tf = timm.data.create_transform(**timm_cfg)
    cfg = data_config(rgb)
    size = cfg["input_size"][1:]
    mean, std = (torch.tensor(v, dtype=torch.float64)[:, None, None] for v in (cfg["mean"], cfg["std"]))
    with torch.no_grad():
        b_pil = rgb(torch.stack([tf(Image.open(p).convert("RGB")) for p in files]))
        b_float = rgb(torch.stack([((timm_geometry(pillow_float(p), timm_cfg).clamp(0, 1) - mean) / std).float()
                                   for p in files]))
        crop = D.CenterCrop(0.875) if old_crop else D.ResizeCenterCrop.from_config(cfg)
        ds = D.ImageFolderDataset.from_files(files, crop=crop)
        batch = ds.load_collated([(0, i) for i in range(len(files))])
        x = T.crops_to_coefficients(batch, size, exact=exact, interpolation="bilinear" if old_crop else cfg["interpolation"],
                                    fill=crop.fill(cfg["mean"]) if not old_crop else 0.0)
        a = dct(x)
    return ((a - b_pil).norm() / b_pil.norm()).item(), ((a - b_float).norm() / b_float.norm()).item()


ARCHS = ["vit_tiny_patch16_224", "convnext_atto"]


@pytest.mark.parametrize("arch", ARCHS)
def test_converted_timm_model_on_eval_path_matches_timm_eval_transform(arch, capsys):
    """Imagenette val photos (32; ``DCTNET_EVAL_PHOTOS=100`` for the figure in the notes): the
    converted model on dctnet's eval path (timm eval crop, exact decode, the config's
    interpolation) vs the RGB model through timm's ``create_transform``: relative logit
    difference ≤ 1e-2 (100 photos: ViT 1.3e-3, ConvNeXt 4.5e-3; the old square 0.875 crop with
    bilinear gave 1.3e-1 and 2.3e-2). What is left is Pillow's 8-bit rounding of the resized
    image: against timm's geometry on float pixels it is ~1e-6."""
    files = photos(int(os.environ.get("DCTNET_EVAL_PHOTOS", "32")))
    rel, rel_float = _relative_logits(arch, files)
    with capsys.disabled():
        print(f"\n{arch}: relative logit difference vs timm eval, {len(files)} photos: {rel:.2e} "
              f"(vs timm's geometry on float pixels: {rel_float:.1e})")
    assert rel <= 1e-2
    assert rel_float <= 1e-4


@pytest.mark.parametrize("arch", ARCHS)
def test_converted_timm_model_on_eval_path_synthetic(arch, synthetic_files):
    """The always-run version, on generated JPEGs of every layout (gray, 4:2:0, 4:2:2, 4:4:4,
    progressive) and odd sizes, 1×1 to 224×224 (ViT 1.2e-3, ConvNeXt 2.7e-3)."""
    files = synthetic_files[::2]
    rel, rel_float = _relative_logits(arch, files)
    assert rel <= 1e-2, rel
    assert rel_float <= 1e-4, rel_float


# ---------------------------------------------------------------------- train and eval sizes (issue 29)
def test_torchvision_recipe_eval_is_resize_232_then_centre_crop_224(tmp_path):
    """torchvision's classification "new recipe" trains at 176 and evaluates ``Resize(232)`` +
    ``CenterCrop(224)``: ``data.eval_resize: 232, data.eval_crop: 224``. dctnet's eval input (its
    float device decode, bilinear, the recipe's defaults) against torchvision's own transform on the
    PIL images of 100 Imagenette photos: ≤ 1.5 grey levels mean."""
    from torchvision.transforms import v2

    from dctnet.train.inputs import eval_config, eval_description
    from dctnet.train.recipe import load_recipe

    r = load_recipe(None, ["model.input=device-rgb", "data.image_size=176", "data.eval_resize=232",
                           "data.eval_crop=224"])
    cfg = eval_config(r)
    assert cfg["input_size"] == (3, 224, 224) and cfg["resize"] == 232 and cfg["interpolation"] == "bilinear"
    assert eval_description(cfg).startswith("resize the shorter side to 232") and "centre crop 224" in eval_description(cfg)
    files = photos(100)
    crop = D.ResizeCenterCrop.from_config(cfg)
    ds = D.ImageFolderDataset.from_files(files, crop=crop)
    step = T.DeviceStep((176, 176), eval_size=(224, 224), input="rgb", mean=(0.0,) * 3, std=(1.0,) * 3)
    ref_tf = v2.Compose([v2.Resize(232, interpolation=InterpolationMode.BILINEAR, antialias=True), v2.CenterCrop(224),
                         v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
    diffs = []
    for start in range(0, len(files), 25):
        batch = D.collate(ds.load_batch([(0, i) for i in range(start, min(start + 25, len(files)))]), pin_memory=False)
        x, _, _ = step(batch)
        assert x.shape[-2:] == (224, 224)
        for k, i in enumerate(range(start, min(start + 25, len(files)))):
            with Image.open(files[i]) as im:
                want = ref_tf(im.convert("RGB"))
            diffs.append(float(((x[k] - want).abs() * 255).mean()))
    assert max(diffs) <= 1.5, (max(diffs), float(np.mean(diffs)))


def test_a_models_test_input_size_is_its_eval_size_when_the_recipe_sets_none():
    """timm's ``use_test_size``: a model whose pretrained config has ``test_input_size`` /
    ``test_crop_pct`` (resnet50.a1_in1k: 288, 1.0) evaluates there unless the recipe sets an eval size."""
    from dctnet.train.inputs import eval_config
    from dctnet.train.recipe import load_recipe

    arch = "timm:resnet50.a1_in1k"
    want = timm.data.resolve_data_config({}, pretrained_cfg=timm.models.get_pretrained_cfg("resnet50.a1_in1k").to_dict(),
                                         use_test_size=True)
    cfg = eval_config(load_recipe(None, [f"model.arch={arch}", "model.input=device-rgb"]))
    assert cfg["input_size"] == want["input_size"] == (3, 288, 288) and cfg["crop_pct"] == want["crop_pct"] == 1.0
    cfg = eval_config(load_recipe(None, [f"model.arch={arch}", "model.input=device-rgb", "data.eval_crop=224"]))
    assert cfg["input_size"] == (3, 224, 224) and cfg["resize"] is None
    plain = eval_config(load_recipe(None, ["model.arch=timm:vit_small_patch16_224", "data.image_size=160"]))
    assert plain["input_size"] == (3, 160, 160)  # no test size in its config: the training size


def test_eval_size_fields_are_checked():
    from dctnet.train.recipe import RecipeError, load_recipe

    for over, match in [(["data.eval_resize=232", "data.crop_pct=0.9"], "set one"),
                        (["data.eval_crop=200"], "multiple of 16"),
                        (["data.eval_resize=232", "data.crop_mode=squash"], "'center' only"),
                        (["data.eval_resize=8"], r"data\.eval_resize must be in")]:
        with pytest.raises(RecipeError, match=match):
            load_recipe(None, over)
