"""Training: recipe validation, the three input pipelines against their references, a run that
learns, exact resume, a 2-process torchrun (gloo) run, the CLI commands of the training issue."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from dctnet import data as D
from dctnet import transforms as T
from dctnet.cli import main as cli_main
from dctnet.kernels import coefficients as TF
from dctnet.synthetic import make_labelled_dataset
from dctnet.train import RecipeError, Trainer, load_recipe
from dctnet.train.pipeline import build_pipeline

from conftest import ROOT, write_recipe


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    """A small generated dataset: 3 shape classes, mixed JPEG settings."""
    root = tmp_path_factory.mktemp("shapes")
    return make_labelled_dataset(str(root), classes=3, train_per_class=120, val_per_class=20, size=(40, 64), seed=1)


def tiny(shapes, tmp_path, **over):
    return write_recipe(tmp_path, shapes, **over)


# ---------------------------------------------------------------------- recipes
def test_shipped_recipes_load():
    paths = sorted((ROOT / "recipes").rglob("*.yaml"))
    assert len(paths) >= 11
    for p in paths:
        r = load_recipe(p)
        assert r.name == p.stem
        assert "${" not in r.data.root and "${" not in r.train.out


def test_recipe_errors_name_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    for text, match in [("optim: {lr: fast}", r"optim\.lr: expected a number"),
                        ("optim: {learning_rate: 0.1}", r"unknown key 'learning_rate'"),
                        ("optim: {epoch: 3}", r"did you mean 'epochs'"),
                        ("model: {input: jpeg}", r"model\.input: 'jpeg' is not one of"),
                        ("data: {decode: int}", r"data\.decode: 'int' is not one of"),
                        ("data: {scale: [0.5]}", r"data\.scale: expected a list of 2"),
                        ("data: {image_size: 100}", r"multiple of 16"),
                        ("train: {compile: 3}", r"train\.compile: expected true or false"),
                        ("model: {arch: timm:vit_tiny_patch16_224, input: dct, stem: dct8}", r"'dct-patch'"),
                        ("[1, 2]", r"mapping of sections"),
                        ("optim: {lr: [", r"not valid YAML")]:
        bad.write_text(text)
        with pytest.raises(RecipeError, match=match):
            load_recipe(bad)
    with pytest.raises(RecipeError, match="no such recipe"):
        load_recipe(tmp_path / "missing.yaml")
    with pytest.raises(RecipeError, match="key=value"):
        load_recipe(None, ["optim.lr"])
    r = load_recipe(None, ["optim.lr=0.5", "data.scale=[0.2, 0.9]", "train.amp=off", "name=x"])
    assert (r.optim.lr, r.data.scale, r.train.amp, r.train.out) == (0.5, (0.2, 0.9), "off", "runs/x")
    os.environ["DCTNET_TEST_ROOT"] = "/somewhere"
    try:
        assert load_recipe(None, ["data.root=${DCTNET_TEST_ROOT:/x}"]).data.root == "/somewhere"
    finally:
        del os.environ["DCTNET_TEST_ROOT"]


def test_foreign_options_say_so_and_suggestions_are_only_for_misspellings(tmp_path):
    """timm's and torchvision's training options that dctnet lacks are named as such; a "did you mean"
    is offered only for a close misspelling, never for an unrelated field (issue 29: ema_decay → weight_decay,
    sampler → scale)."""
    bad = tmp_path / "bad.yaml"
    for text, match in [("train: {model_ema: true}", r"unknown key 'model_ema': write train\.ema: "),
                        ("optim: {ema_decay: 0.9998}", r"write train\.ema"),
                        ("data: {sampler: ra}", r"write data\.repeated_aug"),
                        ("data: {ra_reps: 4}", r"write data\.repeated_aug"),
                        ("optim: {smoothing: 0.1}", r"write optim\.label_smoothing"),
                        ("data: {reprob: 0.25}", r"as an .augment:. list entry"),
                        ("model: {drop_path: 0.1}", r"write model\.drop_path_rate"),
                        ("model: {pretrained: true}", r"write model\.init"),
                        ("data: {batchsize: 8}", r"did you mean 'batch_size'"),
                        ("optim: {lr_bach: 8}", r"did you mean 'lr_batch'")]:
        bad.write_text(text)
        with pytest.raises(RecipeError, match=match):
            load_recipe(bad)
    for text in ("optim: {ema_decay: 0.9}", "data: {sampler: x}", "optim: {warmup_lr_init: 1e-6}"):
        bad.write_text(text)
        with pytest.raises(RecipeError) as e:
            load_recipe(bad)
        assert "did you mean" not in str(e.value), str(e.value)
    bad.write_text("data: {colour: 1}")
    with pytest.raises(RecipeError, match=r"unknown key 'colour' \(known: source, root"):
        load_recipe(bad)


def test_environment_references_expand_in_every_string_field(tmp_path, monkeypatch):
    monkeypatch.setenv("DCTNET_TEST_ARCH", "resnet50")
    monkeypatch.setenv("DCTNET_TEST_POLICY", "rand-m7-mstd0.5")
    (tmp_path / "r.yaml").write_text(
        "name: r-${DCTNET_TEST_ARCH}\n"
        "model: {arch: '${DCTNET_TEST_ARCH:resnet18}', input: device-rgb}\n"
        "data: {train: '${DCTNET_TEST_MISSING:train}-x', val: '${name}'}\n"
        "augment: [{name: TimmAugment, policy: '${DCTNET_TEST_POLICY:rand-m9}'}]\n")
    r = load_recipe(tmp_path / "r.yaml")
    assert (r.name, r.model.arch, r.data.train, r.data.val, r.train.out) == (
        "r-resnet50", "resnet50", "train-x", "r-resnet50", "runs/r-resnet50")
    assert r.augment[0]["policy"] == "rand-m7-mstd0.5"


# ---------------------------------------------------------------------- optimizer groups
def weight_decay_by_name(model, groups) -> dict[str, tuple[float, float]]:
    """``name → (lr, weight_decay)`` of every parameter, from the groups it landed in."""
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: (g["lr"], g["weight_decay"]) for g in groups for p in g["params"]}


def test_param_groups_put_the_dct_stem_apart():
    import timm

    from dctnet.models import swap_stem
    from dctnet.train.optim import param_groups

    model = swap_stem(timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32))
    groups = param_groups(model, 1e-3, stem_lr_mult=0.1)
    assert [g["lr"] for g in groups] == [1e-3, pytest.approx(1e-4)]  # weight_decay 0: [rest, stem]
    assert {id(p) for p in groups[1]["params"]} == {id(p) for p in model.patch_embed.proj.parameters()}
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))


def test_param_groups_honour_no_weight_decay():
    """timm's convention: the names ``model.no_weight_decay()`` returns (a ViT's ``pos_embed`` and
    ``cls_token``), biases and 1-d (norm) parameters get no weight decay; torchvision's ViT tokens
    likewise; weights, the DCT stem's included, do."""
    import timm
    import torchvision

    from dctnet.models import swap_stem
    from dctnet.train.optim import param_groups

    vit = swap_stem(timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32))
    assert {"pos_embed", "cls_token"} <= set(vit.no_weight_decay())
    wd = weight_decay_by_name(vit, param_groups(vit, 1e-3, stem_lr_mult=0.5, weight_decay=0.05))
    assert wd["pos_embed"] == wd["cls_token"] == (1e-3, 0.0)
    assert wd["blocks.0.norm1.weight"] == wd["blocks.0.attn.qkv.bias"] == (1e-3, 0.0)
    assert wd["blocks.0.attn.qkv.weight"] == (1e-3, 0.05)
    assert wd["patch_embed.proj.linear.weight"] == (5e-4, 0.05) and wd["patch_embed.proj.linear.bias"] == (5e-4, 0.0)
    everything = weight_decay_by_name(vit, param_groups(vit, 1e-3, weight_decay=0.05, decay_norms_and_biases=True))
    assert everything["pos_embed"][1] == everything["blocks.0.norm1.weight"][1] == 0.05
    tv = torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=1, num_heads=2, hidden_dim=16,
                                              mlp_dim=32)
    wd = weight_decay_by_name(tv, param_groups(tv, 1e-3, weight_decay=0.05))
    assert wd["class_token"][1] == wd["encoder.pos_embedding"][1] == 0.0 and wd["conv_proj.weight"][1] == 0.05


# ---------------------------------------------------------------------- pipelines
def test_device_inputs_match_their_references(shapes, tmp_path):
    """Without augmentation: plan A = device crops normalised with the model's statistics;
    the DCT input = the orthonormal block DCT of those same crops (YCbCr, level-shifted)."""
    r = load_recipe(tiny(shapes, tmp_path, augment=[], model__input="device-rgb"))
    pipe = build_pipeline(r, torch.device("cpu"))
    pipe.set_epoch(0)
    assert pipe.augment is None
    raw = next(iter(pipe.train_loader))
    labels = raw.labels
    x_rgb, y, _ = pipe.device_step(raw, pipe.augment, None)
    crops = T.crops_to_rgb(raw, (32, 32))
    mean = torch.tensor(T.IMAGENET_MEAN).reshape(1, 3, 1, 1)
    std = torch.tensor(T.IMAGENET_STD).reshape(1, 3, 1, 1)
    torch.testing.assert_close(x_rgb, (crops - mean) / std)
    assert torch.equal(y, labels.long())
    # the device step is built from the recipe: another input kind is another pipeline (same batch)
    pipe_dct = build_pipeline(load_recipe(tiny(shapes, tmp_path, augment=[], model__input="dct")), torch.device("cpu"))
    x_dct, _, _ = pipe_dct.device_step(raw, None, None)
    # numpy-free oracle: YCbCr by JFIF's matrix, level shift, 8x8 DCT-II as an explicit sum
    rgb = crops.double() * 255
    ycc = torch.stack([0.299 * rgb[:, 0] + 0.587 * rgb[:, 1] + 0.114 * rgb[:, 2],
                       -0.168736 * rgb[:, 0] - 0.331264 * rgb[:, 1] + 0.5 * rgb[:, 2] + 128,
                       0.5 * rgb[:, 0] - 0.418688 * rgb[:, 1] - 0.081312 * rgb[:, 2] + 128], 1) - 128
    n = torch.arange(8, dtype=torch.float64)
    basis = torch.cos((2 * n[None, :] + 1) * n[:, None] * torch.pi / 16) * torch.where(n == 0, 0.5 ** 0.5, 1.0)[:, None] / 2
    blocks = ycc.reshape(-1, 3, 4, 8, 4, 8).permute(0, 1, 2, 4, 3, 5)
    coef = torch.einsum("ui,vj,bchwij->bchwuv", basis, basis, blocks).reshape(-1, 3, 4, 4, 64)
    torch.testing.assert_close(x_dct.double(), coef, atol=1e-3, rtol=1e-4)
    # data.decode: exact switches the device decode to libjpeg's integer one (Pillow's pixels)
    pipe_exact = build_pipeline(load_recipe(tiny(shapes, tmp_path, augment=[], model__input="device-rgb",
                                                 data__decode="exact")), torch.device("cpu"))
    x_exact, _, _ = pipe_exact.device_step(raw, None, None)
    torch.testing.assert_close(x_exact, (T.crops_to_rgb(raw, (32, 32), exact=True) - mean) / std)
    assert not torch.equal(x_exact, x_rgb)


def test_torchvision_pipeline_and_flip_augmentation(shapes, tmp_path):
    flip = [{"name": "RandomHorizontalFlip", "p": 1.0}]
    r = load_recipe(tiny(shapes, tmp_path, model__input="rgb", augment=flip))
    pipe = build_pipeline(r, torch.device("cpu"))
    pipe.set_epoch(0)
    x, y, _ = next(pipe.batches(train=True))
    assert x.shape == (16, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    # the dct input with a flip (p = 1): the pixel crops flipped, then one forward DCT — the same
    # coefficients as the crops' coefficients flipped in the DCT domain
    r2 = load_recipe(tiny(shapes, tmp_path, augment=flip))
    pipe2 = build_pipeline(r2, torch.device("cpu"))
    assert [type(t) for t in pipe2.augment.transforms] == [T.RandomHorizontalFlip, T.ToCoefficients]
    pipe2.set_epoch(0)
    raw = next(iter(pipe2.train_loader))
    flipped, _, _ = pipe2.device_step(raw, pipe2.augment, T.step_generator(0, 0, 0))
    want = T.crops_to_coefficients(raw, (32, 32))
    back = TF.hflip(flipped)
    torch.testing.assert_close(back, want, atol=1e-3, rtol=1e-4)


def test_torchvision_baseline_runs_the_cpu_recipes_augment_list(shapes, tmp_path):
    """The evidence recipes' list (flip, timm's RandAugment, timm's pixel erasing, timm's Mixup)
    maps onto timm / torchvision in the RGB baseline: per-sample ops on the PIL crop, erasing on the
    normalised tensor, timm's Mixup on the batch with soft, label-smoothed targets."""
    import timm.data
    import yaml

    listed = yaml.safe_load((ROOT / "recipes" / "imagenette" / "resnet18_rgb_cpu.yaml").read_text())["augment"]
    assert [a["name"] for a in listed] == ["RandomHorizontalFlip", "TimmAugment", "RandomErasing", "Mixup"]
    r = load_recipe(tiny(shapes, tmp_path, model__input="rgb", augment=listed, optim__label_smoothing=0.1))
    pipe = build_pipeline(r, torch.device("cpu"))
    (mix,) = pipe.rgb_mixing
    assert type(mix) is timm.data.Mixup and (mix.mix_prob, mix.switch_prob) == (listed[-1]["prob"],
                                                                               listed[-1]["switch_prob"])
    pipe.set_epoch(0)
    x, target, labels = next(pipe.batches(train=True))
    assert x.shape == (16, 3, 32, 32) and x.dtype == torch.float32 and torch.isfinite(x).all()
    assert labels.dtype == torch.int64 and target.shape == (16, 3) and target.dtype == torch.float32
    # timm's targets: distributions over the classes, smoothed (no class below 0.1 / 3)
    torch.testing.assert_close(target.sum(1), torch.ones(16))
    assert target.min() >= 0.1 / 3 - 1e-6


# ---------------------------------------------------------------------- training
def test_training_learns_and_writes_its_outputs(shapes, tmp_path):
    path = tiny(shapes, tmp_path, optim__epochs=5, optim__lr=0.02, data__image_size=48)
    record = Trainer(load_recipe(path)).fit()
    run = tmp_path / "run"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4, 5]
    assert record["val_images"] == 60
    assert record["val_top1"] > 0.5, rows  # 3 classes: chance is 0.33 (measured 0.70)
    assert rows[-1]["train_loss"] < rows[0]["train_loss"]
    for key in ("images_per_s", "data_wait", "data_cpu_us_per_sample", "val_top5", "lr"):
        assert key in rows[-1]
    assert 0 <= rows[-1]["data_wait"] <= 1 and rows[-1]["data_cpu_us_per_sample"] > 0
    assert (run / "plot.png").stat().st_size > 10_000 and (run / "last.pt").is_file()
    assert load_recipe(run / "recipe.yaml").optim.epochs == 5


@pytest.mark.parametrize("arch,inp", [("timm:vit_tiny_patch16_224", "dct"), ("timm:vit_tiny_patch16_224", "rgb"),
                                      ("resnet18", "device-rgb")])
def test_other_models_and_inputs_run(shapes, tmp_path, arch, inp):
    stem = "dct-patch" if "vit" in arch else "dct8"
    path = tiny(shapes, tmp_path, model__arch=arch, model__input=inp, model__stem=stem, train__max_steps=2,
                optim__optimizer="adamw", optim__lr=1e-3, augment=[{"name": "ColorJitter", "brightness": 0.2, "contrast": 0.2,
                                                                "saturation": 0.2, "hue": 0.05},
                                                               {"name": "Mixup", "mixup_alpha": 0.2}],
                model__stats_batches=2)
    record = Trainer(load_recipe(path)).fit()
    assert record["val_images"] == 60 and record["train_loss"] > 0
    state = torch.load(tmp_path / "run" / "last.pt", weights_only=False)
    assert (state["normalize"] is not None) == (inp == "dct" and "vit" in arch)


def test_native_chroma_vit_trains_on_mixed_layouts(shapes, tmp_path):
    """`model.chroma: native` end to end: the device step feeds (y, 4:2:0 c) to a chroma="native"
    patch embedding (the shapes dataset mixes 4:2:0, 4:2:2, 4:4:4, gray and progressive files);
    the input statistics are those of the native inputs (y in channel 0, c in 1-2)."""
    path = tiny(shapes, tmp_path, model__arch="timm:vit_tiny_patch16_224", model__input="dct", model__stem="dct-patch",
                model__chroma="native", train__max_steps=2, optim__optimizer="adamw", optim__lr=1e-3,
                augment=[{"name": "Mixup", "mixup_alpha": 0.2}], model__stats_batches=2)
    trainer = Trainer(load_recipe(path))
    embed = trainer.model.patch_embed.proj
    assert embed.chroma == "native" and embed.linear.in_features == 4 * 64 and embed.chroma_weight.shape[-1] == 2 * 64
    record = trainer.fit()
    assert record["val_images"] == 60 and record["train_loss"] > 0
    from dctnet.train import pipeline as P

    native = trainer.task.pipe.normalize
    recipe = load_recipe(path)
    recipe.model.chroma = "upsampled"
    upsampled = P.build_pipeline(recipe, torch.device("cpu")).normalize
    # luma statistics are the same either way; chroma's are those of the box-downsampled chroma
    assert torch.allclose(native.mean[0], upsampled.mean[0]) and torch.allclose(native.std[0], upsampled.std[0])
    assert (native.std[1:, 0] < upsampled.std[1:, 0]).all()  # averaging 2x2 blocks lowers the DC spread
    assert not torch.allclose(native.std[1:], upsampled.std[1:], rtol=1e-3)
    with pytest.raises(RecipeError, match="chroma"):
        load_recipe(tiny(shapes, tmp_path / "bad", model__chroma="native"))


#: what each arm draws from: timm's RandAugment (Python's random), erasing (torch's), timm's Mixup in
#: the main process (numpy's), the flip and crop
RESUME_AUGMENT = [{"name": "RandomHorizontalFlip", "p": 0.5},
                  {"name": "TimmAugment", "policy": "rand-m5-mstd0.5-inc1", "interpolation": "bicubic"},
                  {"name": "RandomErasing", "p": 0.5, "mode": "pixel"},
                  {"name": "Mixup", "mixup_alpha": 0.2, "cutmix_alpha": 1.0, "prob": 0.5, "switch_prob": 0.5}]


@pytest.mark.parametrize("arm,workers", [("dct", 0), ("device-rgb", 2), ("rgb", 0), ("rgb", 2)])
def test_resume_continues_exactly(shapes, tmp_path, arm, workers):
    """Stopped after epoch 1 (as a killed run leaves it) and resumed, a run ends bit for bit where an
    uninterrupted one does — every tensor of the final checkpoint and the resumed epoch's metrics — on
    every arm, with and without DataLoader workers (the rgb arm's transforms draw from the process's
    generators: each sample's are seeded from (seed, epoch, index), the main process's are in last.pt)."""
    def recipe(name):
        stem = {"dct": "dct8", "device-rgb": None, "rgb": None}[arm]
        return load_recipe(tiny(shapes, tmp_path / name, optim__epochs=2, train__max_steps=3, data__workers=workers,
                                model__input=arm, model__stem=stem, augment=RESUME_AUGMENT))

    Trainer(recipe("a")).fit()
    t = Trainer(recipe("c"))
    t.task.pipe.set_epoch(0)
    t.history.append({"epoch": 1, **t.train_epoch(0), **t.evaluate()})
    t._save(t.out / "last.pt", 0)
    del t
    resumed = Trainer(recipe("c"), resume=True)
    assert resumed.start_epoch == 1
    resumed.fit()
    sa = torch.load(tmp_path / "a" / "run" / "last.pt", weights_only=True)
    sc = torch.load(tmp_path / "c" / "run" / "last.pt", weights_only=True)
    differ = [k for k in sa["model"] if not torch.equal(sa["model"][k], sc["model"][k])]
    assert not differ, f"{len(differ)} of {len(sa['model'])} tensors differ: {differ[:5]}"
    assert sa["history"][-1]["train_loss"] == sc["history"][-1]["train_loss"]
    rows = [json.loads(x) for x in (tmp_path / "c" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2]  # the checkpoint's history, then the resumed epoch


def test_torchrun_two_process_training(shapes, tmp_path):
    path = tiny(shapes, tmp_path, optim__epochs=2, train__max_steps=3, train__ema={"decay": 0.9})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--rdzv-backend=c10d",
           "--rdzv-endpoint=localhost:0", "-m", "dctnet", "train", str(path)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2  # written once (rank 0)
    assert rows[-1]["val_images"] == 60  # every val image counted once over the two ranks
    assert 0.0 <= rows[-1]["val_top1_ema"] <= 1.0  # the EMA evaluated beside the model, under DDP
    assert "val top-1" in r.stdout
    # resumed for one more epoch: rank-0-only messages, and a clean exit on both ranks
    r = subprocess.run(cmd[:-1] + [str(path), "--resume", "--set", "optim.epochs=3"], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (r.stdout + r.stderr).count("resumed from") == 1, r.stdout + r.stderr
    assert "terminate called" not in r.stderr
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["epoch"] for row in rows] == [1, 2, 3]


# ---------------------------------------------------------------------- CLI
def run_cli(*args):
    with pytest.raises(SystemExit) as e:
        cli_main(list(args))
    return e.value.code


@pytest.mark.parametrize("cmd", ["info", "bench", "verify", "stats", "cache", "convert", "train", "demo"])
def test_every_command_has_help(cmd, capsys):
    assert run_cli(cmd, "--help") == 0
    assert len(capsys.readouterr().out) > 200


def test_train_cli_errors_and_stats_and_bench(shapes, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("optim: {lr: -1}\n")
    assert run_cli("train", str(bad)) == 2
    assert "optim.lr must be in (0, inf), got -1.0" in capsys.readouterr().err
    assert run_cli("train", str(tiny(shapes, tmp_path)), "--set", "data.root=/nonexistent") == 1
    assert "training data not found" in capsys.readouterr().err
    out = tmp_path / "stats.pt"
    assert run_cli("stats", f"{shapes}/train", str(out), "--size", "32", "--batches", "2", "--batch-size", "16") == 0
    norm = T.Normalize.load(out)
    assert norm.mean.shape == (3, 64) and (norm.std > 0).all()
    # oracle: the same statistics from compute_stats over the same batches
    ds = D.ImageFolderDataset(f"{shapes}/train", crop=D.CenterCrop(), on_error="skip")
    loader = D.ThreadLoader(ds, 16, sampler=D.EpochSampler(len(ds), seed=0), pin_memory=False)
    ref = D.compute_stats(loader, lambda b: T.crops_to_coefficients(b, (32, 32)), max_batches=2)
    torch.testing.assert_close(norm.mean, ref.mean)
    assert run_cli("bench", f"{shapes}/val", "--limit", "8", "--repeat", "1", "--threads", "1", "--size", "32") == 0
    text = capsys.readouterr().out
    for bad, why in ((["--size", "0"], "must be >= 1"), (["--limit", "-3"], "must be >= 1"),
                     (["--repeat", "x"], "expected a positive integer")):  # a usage error, not a traceback
        with pytest.raises(SystemExit) as exit_:
            cli_main(["bench", f"{shapes}/val", *bad])
        assert exit_.value.code == 2 and why in capsys.readouterr().err
    # what the loader does per sample (not the read alone), next to the baselines and the raw floor
    assert "dctnet host: read + crop window + collate" in text and "torchvision v2: Pillow + RandomResizedCrop" in text
    assert "raw libjpeg floor" in text and "dctnet device step" in text


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("inp", ["dct", "device-rgb", "rgb"])
def test_training_on_cuda_with_bf16(shapes, tmp_path, inp):
    path = tiny(shapes, tmp_path, model__input=inp, train__device="cuda", train__amp="bf16", optim__epochs=2)
    record = Trainer(load_recipe(path)).fit()
    assert record["val_images"] == 60 and record["train_loss"] < 5


def test_training_from_a_coefficient_cache_matches_the_folder(shapes, tmp_path):
    """source: cache reads the same samples, crops and labels as the folder it was built from."""
    caches = tmp_path / "caches"
    for split in ("train", "val"):
        D.build_cache(f"{shapes}/{split}", caches / split, format="sparse", progress=False)
    runs = {}
    for source, root in (("folder", shapes), ("cache", str(caches))):
        path = tiny(shapes, tmp_path / source, data__source=source, data__root=root, train__max_steps=3,
                    augment=[])
        runs[source] = Trainer(load_recipe(path)).fit()
    for key in ("train_loss", "train_acc", "val_top1", "val_loss"):
        assert runs["cache"][key] == pytest.approx(runs["folder"][key], rel=1e-5, abs=1e-6), key


def test_resume_refuses_a_checkpoint_of_another_model(shapes, tmp_path):
    path = tiny(shapes, tmp_path, train__max_steps=1)
    Trainer(load_recipe(path)).fit()
    before = (tmp_path / "run" / "recipe.yaml").read_text()
    with pytest.raises(ValueError, match="different model or optimizer"):
        Trainer(load_recipe(path, ["model.stem=dct-up"]), resume=True)
    assert (tmp_path / "run" / "recipe.yaml").read_text() == before


def test_data_wait_counts_only_the_host_loader():
    """The data wait is the time ``next`` blocks on the host loader; whatever the consumer does
    with a batch (on a CPU device: the device step and the model) is not waiting (a fake clock:
    each host batch costs 1 tick, each consumer step 10)."""
    from types import SimpleNamespace

    from dctnet.train.accounting import TimedLoader

    now = [0.0]

    class Host:
        def __len__(self):
            return 3

        def __iter__(self):
            for i in range(3):
                now[0] += 1.0
                yield i

    owner = SimpleNamespace(wait_seconds=0.0)
    timed = TimedLoader(Host(), owner, clock=lambda: now[0])
    assert len(timed) == 3
    for _ in timed:
        now[0] += 10.0
    assert owner.wait_seconds == 3.0 and now[0] == 33.0


# ---------------------------------------------------------------------- issue 29 item 5: what a run starts from
def test_lr_schedule_is_timms_cosine_with_min_and_warmup_lr():
    """optim.min_lr / optim.warmup_lr mean what timm's --min-lr / --warmup-lr mean: its
    CosineLRScheduler (warmup_prefix, stepped per update) at t = step + 1 during the warm-up, t = step
    after it."""
    from timm.scheduler import CosineLRScheduler

    from dctnet.train.optim import lr_at

    total, warm, lr, min_lr, warmup_lr = 120, 20, 0.5, 1e-3, 1e-4
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    sched = CosineLRScheduler(opt, t_initial=total - warm, lr_min=min_lr, warmup_t=warm, warmup_lr_init=warmup_lr,
                              warmup_prefix=True, t_in_epochs=False)
    for step in range(total):
        t = step + 1 if step < warm else step
        want = sched._get_lr(t)[0]
        got = lr_at(step, lr=lr, total=total, warmup=warm, min_lr=min_lr, warmup_lr=warmup_lr)
        assert abs(got - want) < 1e-12, (step, got, want)
    assert lr_at(0, lr=lr, total=total, warmup=warm) == lr / warm  # the defaults: from 0 to 0, as before


def test_drop_path_rate_reaches_the_model():
    from dctnet.models import build_model

    vit = build_model("timm:vit_tiny_patch16_224", image_size=32, num_classes=3, drop_path_rate=0.1)
    rates = [m.drop_prob for m in vit.modules() if type(m).__name__ == "DropPath"]
    assert rates and max(rates) == pytest.approx(0.1)  # timm's linear rule over the blocks
    convnext = build_model("convnext_tiny", num_classes=3, drop_path_rate=0.2)
    assert max(m.p for m in convnext.modules() if type(m).__name__ == "StochasticDepth") == pytest.approx(0.2)
    with pytest.raises(ValueError, match="takes no drop-path rate"):
        build_model("resnet18", drop_path_rate=0.1)


def test_model_init_loads_an_rgb_checkpoint_and_converts_it_into_the_stem(tmp_path):
    """model.init: a timm state_dict (another class count: the head is left at its init) loaded into the
    RGB model, then converted into the DCT stem: the converted model gives the checkpoint's features
    on the same pixels (the unconverted model as the oracle)."""
    import timm

    from dctnet.kernels import color as KC
    from dctnet.kernels import dct as KD
    from dctnet.train.recipe_model import build_recipe_model

    torch.manual_seed(0)
    src = timm.create_model("convnext_atto", pretrained=False, num_classes=1000)
    path = tmp_path / "rgb.pth"
    torch.save(src.state_dict(), path)
    r = load_recipe(None, ["model.arch=timm:convnext_atto", "model.input=dct", "data.image_size=64",
                           f"model.init={path}"])
    model = build_recipe_model(r, num_classes=10).eval()
    assert model.head.fc.out_features == 10
    rgb = torch.rand(2, 3, 64, 64)
    mean, std = torch.tensor((0.485, 0.456, 0.406)).view(1, 3, 1, 1), torch.tensor((0.229, 0.224, 0.225)).view(1, 3, 1, 1)
    coef = KD.block_dct(KC.rgb_to_ycbcr(rgb * 255, dim=1) - 128.0)       # the coefficient image of those pixels
    with torch.no_grad():
        want = src.eval().forward_features((rgb - mean) / std)
        got = model.forward_features(coef)
    assert (got - want).abs().max() < 1e-3 * want.abs().max(), float((got - want).abs().max())
    torch.save({"model": {"bogus": torch.zeros(1)}}, tmp_path / "bad.pt")
    with pytest.raises(RecipeError, match="does not fit"):
        build_recipe_model(load_recipe(None, ["model.arch=resnet18", "model.input=device-rgb",
                                               f"model.init={tmp_path / 'bad.pt'}"]), num_classes=10)
    with pytest.raises(RecipeError, match="normalize: none"):
        load_recipe(None, ["model.arch=timm:vit_tiny_patch16_224", "model.input=dct", f"model.init={path}"])


# ---------------------------------------------------------------------- issue 29 item 2: model EMA
@pytest.mark.parametrize("warmup", [False, True])
def test_model_ema_is_timms_model_ema_v3(warmup):
    """The same averages as timm's ModelEmaV3 (its update after each optimizer step, with the step count
    timm's train.py passes), with and without its decay warm-up."""
    from timm.utils import ModelEmaV3

    from dctnet.train.ema import ModelEma

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    ours = ModelEma(model, 0.99, warmup=warmup)
    theirs = ModelEmaV3(model, decay=0.99, use_warmup=warmup)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for step in range(1, 30):
        loss = model(torch.randn(16, 4)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        ours.step(model, step)
        theirs.update(model, step=step)
        for (k, a), b in zip(ours.module.state_dict().items(), theirs.module.state_dict().values()):
            assert torch.allclose(a, b, atol=1e-6, rtol=0), (step, k)


def test_model_ema_every_and_torchvisions_adjust():
    """torchvision's reference: ``adjust = world_size·batch_size·model_ema_steps/epochs``, ``alpha =
    min(1, (1 − decay)·adjust)``, the EMA updated every ``model_ema_steps`` iterations."""
    from dctnet.train.ema import ModelEma, adjusted_decay

    world, batch, steps, epochs, decay = 8, 128, 32, 600, 0.99998  # the "new recipe"
    alpha = min(1.0, (1.0 - decay) * (world * batch * steps / epochs))
    assert adjusted_decay(decay, world_size=world, batch_size=batch, every=steps, epochs=epochs) == 1.0 - alpha
    model = nn.Linear(2, 2)
    ema = ModelEma(model, 0.5, every=3)
    for step in range(1, 10):
        with torch.no_grad():
            model.weight.add_(1.0)
        ema.step(model, step)
    assert ema.updates == 3  # steps 3, 6, 9


def test_ema_is_evaluated_saved_and_resumed_exactly(shapes, tmp_path):
    ema = {"decay": 0.8, "every": 2, "warmup": True}
    a = tiny(shapes, tmp_path / "a", optim__epochs=2, train__max_steps=3, train__ema=ema)
    Trainer(load_recipe(a)).fit()
    c = tiny(shapes, tmp_path / "c", optim__epochs=2, train__max_steps=3, train__ema=ema)
    t = Trainer(load_recipe(c))
    t.task.pipe.set_epoch(0)
    t.history.append({"epoch": 1, **t.train_epoch(0)})
    t._save(t.out / "last.pt", 0)
    resumed = Trainer(load_recipe(c), resume=True)
    assert resumed.ema.updates == t.ema.updates > 0
    resumed.fit()
    ea = torch.load(tmp_path / "a" / "run" / "last.pt", weights_only=True)["ema"]
    ec = torch.load(tmp_path / "c" / "run" / "last.pt", weights_only=True)["ema"]
    assert ea["updates"] == ec["updates"] == 3  # 6 updates, every 2nd averaged
    for k in ea["module"]:
        assert torch.equal(ea["module"][k], ec["module"][k]), k
    rows = [json.loads(x) for x in (tmp_path / "a" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert "val_top1_ema" in rows[-1] and "val_loss_ema" in rows[-1]
    with pytest.raises(RecipeError, match=r"train\.ema\.decay"):
        load_recipe(None, {"train": {"ema": {"decay": 1.0}}})


# ---------------------------------------------------------------------- the reference recipes (issue 29)
def test_reference_recipes_mean_what_their_command_lines_mean():
    """torchvision's "new recipe" and DeiT-S, shipped: each line read back as the reference's flag means it."""
    from dctnet import transforms as T
    from dctnet.train.ema import adjusted_decay
    from dctnet.train.inputs import eval_config
    from dctnet.train.recipe_model import build_recipe_model

    tv = load_recipe(ROOT / "recipes" / "reference" / "torchvision_new_recipe_resnet50.yaml")
    cfg = eval_config(tv)
    assert (tv.data.image_size, cfg["resize"], cfg["input_size"][1:]) == (176, 232, (224, 224))
    assert tv.data.repeated_aug == 4 and tv.optim.label_smoothing == 0.1 and tv.optim.weight_decay == 2e-5
    assert (tv.train.ema.decay, tv.train.ema.every, tv.train.ema.adjust) == (0.99998, 32, True)
    # torchvision's adjust at 8 x 128, 600 epochs: alpha = 2e-5 · 1024 · 32 / 600
    assert adjusted_decay(0.99998, world_size=8, batch_size=128, every=32, epochs=600) == pytest.approx(
        1 - 2e-5 * 1024 * 32 / 600)
    aug = T.build_transform(tv.augment, num_classes=10, seed=0)
    names = [type(t).__name__ for t in aug.transforms]
    assert names == ["RandomHorizontalFlip", "TrivialAugmentWide", "RandomErasing", "RandomChoice"]
    choice = aug.transforms[-1]
    assert choice.batch_level and [(type(t).__name__, t.alpha) for t in choice.transforms] == [("MixUp", 0.2),
                                                                                              ("CutMix", 1.0)]
    assert aug.transforms[2].p == 0.1 and aug.transforms[2].mode is None  # torchvision's erasing
    deit = load_recipe(ROOT / "recipes" / "reference" / "deit_s.yaml")
    assert (deit.data.repeated_aug, deit.model.drop_path_rate, deit.optim.min_lr, deit.optim.warmup_lr) == (
        3, 0.1, 1e-5, 1e-6)
    mix = T.build_transform(deit.augment, num_classes=10, seed=0).transforms[-1]
    assert (mix.mixup_alpha, mix.cutmix_alpha, mix.switch_prob, mix.label_smoothing) == (0.8, 1.0, 0.5, 0.1)
    model = build_recipe_model(deit, num_classes=10)
    assert max(m.drop_prob for m in model.modules() if type(m).__name__ == "DropPath") == pytest.approx(0.1)
