"""The trainer runs the library's own transforms: a recipe's augment list becomes a
dctnet.transforms.Compose run in the device step (crops decoded to pixels, the list there, then
ToRGB or ToCoefficients), the device step by hand gives the same tensors, runs with DeiT's timm
augmentation (RandAugment, erasing, mixup/CutMix) repeat bit for bit, resume included; the
torchvision baseline (input rgb) maps each entry one to one onto torchvision's / timm's own classes."""

from __future__ import annotations

import os

import pytest
import torch

from dctnet import data as D
from dctnet import transforms as T
from dctnet.synthetic import make_labelled_dataset
from dctnet.train import RecipeError, Trainer, load_recipe
from dctnet.train.baseline import baseline_op
from dctnet.train.pipeline import build_pipeline

from conftest import ROOT, write_recipe

#: DeiT's training augmentation exactly as timm states it (Touvron et al. 2021; timm's train.py
#: --aa rand-m9-mstd0.5-inc1 --reprob 0.25 --remode pixel --mixup 0.8 --cutmix 1.0)
DEIT = [{"name": "RandomHorizontalFlip", "p": 0.5}, {"name": "TimmAugment", "policy": "rand-m9-mstd0.5-inc1"},
        {"name": "RandomErasing", "p": 0.25, "mode": "pixel"},
        {"name": "Mixup", "mixup_alpha": 0.8, "cutmix_alpha": 1.0, "switch_prob": 0.5}]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("aug")
    return make_labelled_dataset(str(root), classes=3, train_per_class=16, val_per_class=4, size=(40, 64), seed=5)


def test_the_recipe_pipeline_is_the_device_step_by_hand(data, tmp_path):
    """The device step written by hand (crops_to_rgb, then a Compose of the list ending in
    ToCoefficients, drawing from step_generator(seed, epoch, step, rank)) gives the trainer's very
    tensors."""
    augment = [{"name": "RandomHorizontalFlip"}, {"name": "ColorJitter", "brightness": 0.4, "contrast": 0.4,
                                                   "saturation": 0.4}, {"name": "RandomRequantize"}]
    r = load_recipe(write_recipe(tmp_path, data, augment=augment, train__seed=7))
    pipe = build_pipeline(r, torch.device("cpu"))
    assert [type(t).__name__ for t in pipe.augment.transforms] == ["RandomHorizontalFlip", "ColorJitter",
                                                                   "RandomRequantize", "ToCoefficients"]
    pipe.set_epoch(2)
    got = [(x.clone(), t.clone()) for x, t, _ in pipe.batches(train=True)][:3]
    # by hand
    ds = D.ImageFolderDataset(f"{data}/train", crop=D.RandomResizedCrop(scale=(0.5, 1.0)), seed=7)
    loader = D.ThreadLoader(ds, 16, sampler=D.SubsetSampler(list(range(len(ds))), seed=7, drop_last=True),
                            threads=1, drop_last=True, pin_memory=False)
    loader.set_epoch(2)
    aug = T.Compose([T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4), T.RandomRequantize(), T.ToCoefficients()],
                    seed=7)
    for step, batch in enumerate(D.DevicePrefetcher(loader, "cpu")):
        if step == 3:
            break
        x = T.crops_to_rgb(batch, (32, 32))
        x, y = aug(x, batch.labels, generator=T.step_generator(7, 2, step, 0))
        assert x.shape == (16, 3, 4, 4, 64)
        assert torch.equal(x, got[step][0]) and torch.equal(y, got[step][1])
    assert len(got) == 3


def test_augment_list_errors_name_the_transform(tmp_path, data):
    for spec, match in [([{"name": "RandAugmnt"}], "did you mean 'RandAugment'"),
                        ([{"name": "Mixup", "mixup_alpa": 0.8}], "did you mean 'mixup_alpha'"),
                        # the old forms: Mixup(alpha, p) and CutMix(alpha, p) side by side
                        ([{"name": "Mixup", "alpha": 0.8, "p": 0.5}], r"Mixup: unknown argument 'alpha'; did you mean "
                                                                      r"'mixup_alpha'"),
                        ([{"name": "CutMix", "alpha": 1.0, "p": 0.5}], r"CutMix: unknown argument 'p'"),
                        ([{"name": "ColorJitter", "chroma_rotation": 0.3}], r"unknown argument 'chroma_rotation'"),
                        ([{"name": "Mixup", "label_smoothing": 0.1}], r"optim\.label_smoothing"),
                        ([{"name": "RandomResizedCrop"}], r"data\.scale"),
                        ({"hflip": 0.5}, "a list of transforms")]:
        with pytest.raises(RecipeError, match=match):
            load_recipe(write_recipe(tmp_path, data, augment=spec))
    # the torchvision baseline takes the same list (torchvision's / timm's own ops and timm's Mixup)
    record = Trainer(load_recipe(write_recipe(tmp_path / "rgb", data, model__input="rgb", augment=DEIT,
                                              train__max_steps=1))).fit()
    assert record["train_loss"] > 0
    text = (tmp_path / "rgb" / "run" / "pipeline.txt").read_text()
    for name in ("input: rgb", "RandomHorizontalFlip", "RandAugment", "RandomErasing", "Mixup"):
        assert name in text, text
    with pytest.raises(ValueError, match="no torchvision or timm counterpart"):
        Trainer(load_recipe(write_recipe(tmp_path, data, model__input="rgb",
                                         augment=[{"name": "FrequencyDropout"}])))


def test_mixers_come_last_one_at_most_with_an_even_batch(tmp_path, data):
    """timm and torchvision erase each sample, then mix the batch; timm's Mixup alone switches
    between mixup and CutMix (two mixers would mix twice); timm mixes each sample with its mirror."""
    erase = {"name": "RandomErasing", "p": 0.25, "mode": "pixel"}
    mix = {"name": "Mixup", "mixup_alpha": 0.8, "cutmix_alpha": 1.0}
    with pytest.raises(RecipeError, match=r"Mixup must come last.*RandomErasing follows it.*erase before they mix"):
        load_recipe(write_recipe(tmp_path, data, augment=[{"name": "RandomHorizontalFlip"}, mix, erase]))
    with pytest.raises(RecipeError, match=r"augment names 2 mixers \(MixUp, CutMix\): use one"):
        load_recipe(write_recipe(tmp_path, data, augment=[{"name": "MixUp", "alpha": 0.8}, {"name": "CutMix"}]))
    with pytest.raises(RecipeError, match=r"augment names 2 mixers"):
        load_recipe(write_recipe(tmp_path, data, augment=[mix, {"name": "Mixup", "mixup_alpha": 0.2}]))
    with pytest.raises(RecipeError, match=r"data\.batch_size must be even with Mixup"):
        load_recipe(write_recipe(tmp_path, data, augment=[mix], batch_size=15))
    assert load_recipe(write_recipe(tmp_path, data, augment=[erase, mix])).augment[-1]["name"] == "Mixup"
    assert load_recipe(write_recipe(tmp_path, data, augment=[erase], batch_size=15)).data.batch_size == 15


def test_the_rgb_arm_maps_each_entry_one_to_one(tmp_path, data):
    """input rgb: timm's own Mixup with the recipe's mixup_alpha / cutmix_alpha / prob / switch_prob
    (one mixer, not a RandomChoice of two at half the probability), label smoothing from
    optim.label_smoothing; timm's RandAugment and RandomErasing; torchvision's flip, jitter, policies,
    erasing and MixUp / CutMix; a RandomApply only where dctnet's class has a p torchvision's lacks."""
    import timm.data
    import timm.data.auto_augment as taa
    import timm.data.random_erasing as tre
    from torchvision.transforms import v2

    r = load_recipe(write_recipe(tmp_path, data, model__input="rgb", augment=DEIT, optim__label_smoothing=0.1))
    pipe = build_pipeline(r, torch.device("cpu"))
    (mix,) = pipe.rgb_mixing
    assert type(mix) is timm.data.Mixup
    assert (mix.mixup_alpha, mix.cutmix_alpha, mix.mix_prob, mix.switch_prob, mix.mode, mix.label_smoothing,
            mix.num_classes, mix.correct_lam) == (0.8, 1.0, 1.0, 0.5, "batch", 0.1, 3, True)
    assert pipe.targets_smoothed  # so the loss does not smooth them a second time
    tf = pipe.train_loader.loader.dataset.transform
    assert [type(t).__name__ for t in tf.transforms] == ["RandomResizedCrop", "RandomHorizontalFlip", "RandAugment",
                                                         "ToImage", "ToDtype", "Normalize", "RandomErasing"]
    flip, ra, erase = tf.transforms[1], tf.transforms[2], tf.transforms[6]
    assert type(flip) is v2.RandomHorizontalFlip and flip.p == 0.5
    assert type(ra) is taa.RandAugment and ra.num_layers == 2
    assert all((op.magnitude, op.magnitude_std, op.prob) == (9, 0.5, 0.5) for op in ra.ops)
    assert "PosterizeIncreasing" in {op.name for op in ra.ops}  # inc1
    assert ra.ops[0].hparams["translate_const"] == int(32 * 0.45)
    assert ra.ops[0].hparams["img_mean"] == tuple(round(255 * m) for m in T.IMAGENET_MEAN)
    assert type(erase) is tre.RandomErasing and (erase.probability, erase.mode) == (0.25, "pixel")
    text = pipe.describe()
    assert "RandAugment" in text and "Mixup" in text
    # every other entry, one to one
    cases = [
        ({"name": "Mixup", "mixup_alpha": 0.2, "cutmix_alpha": 1.0, "prob": 0.5, "switch_prob": 0.3, "mode": "elem"},
         timm.data.Mixup, lambda o: (o.mixup_alpha, o.cutmix_alpha, o.mix_prob, o.switch_prob, o.mode)
         == (0.2, 1.0, 0.5, 0.3, "elem")),
        ({"name": "MixUp", "alpha": 0.4}, v2.MixUp, lambda o: o.alpha == 0.4 and o.num_classes == 3),
        ({"name": "CutMix", "alpha": 1.0}, v2.CutMix, lambda o: o.alpha == 1.0 and o.num_classes == 3),
        ({"name": "ColorJitter", "brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "hue": 0.1}, v2.ColorJitter,
         lambda o: o.brightness == (0.6, 1.4) and o.hue == (-0.1, 0.1)),
        ({"name": "ColorJitter", "brightness": 0.4, "p": 0.8}, v2.RandomApply,
         lambda o: o.p == 0.8 and type(o.transforms[0]) is v2.ColorJitter),
        ({"name": "RandomGrayscale", "p": 0.2}, v2.RandomGrayscale, lambda o: o.p == 0.2),
        ({"name": "RandomVerticalFlip", "p": 0.3}, v2.RandomVerticalFlip, lambda o: o.p == 0.3),
        ({"name": "RandAugment", "num_ops": 3, "magnitude": 7}, v2.RandAugment,
         lambda o: (o.num_ops, o.magnitude, o.num_magnitude_bins) == (3, 7, 31)),
        ({"name": "TrivialAugmentWide"}, v2.TrivialAugmentWide, lambda o: o.num_magnitude_bins == 31),
        ({"name": "AutoAugment"}, v2.AutoAugment, lambda o: o.policy == v2.AutoAugmentPolicy.IMAGENET),
        ({"name": "TimmAugment", "policy": "original"}, taa.AutoAugment, lambda o: len(o.policy) == 25),
        ({"name": "TimmAugment", "policy": "3a"}, taa.AutoAugment, lambda o: len(o.policy) == 3),
        ({"name": "ThreeAugment"}, taa.AutoAugment, lambda o: len(o.policy) == 3),
        ({"name": "RandomErasing", "p": 0.3}, v2.RandomErasing, lambda o: o.p == 0.3 and o.scale == (0.02, 0.33)),
        ({"name": "RandomErasing", "mode": "rand", "max_count": 3}, tre.RandomErasing,
         lambda o: (o.probability, o.mode, o.max_count) == (0.5, "rand", 3)),
        ({"name": "RandomRequantize", "quality": [40, 90]}, v2.RandomApply,
         lambda o: o.p == 0.5 and type(o.transforms[0]) is v2.JPEG and tuple(o.transforms[0].quality) == (40, 90)),
    ]
    for spec, cls, check in cases:
        op = baseline_op(spec, r, 3)
        assert type(op) is cls and check(op), spec


@pytest.mark.parametrize("augment", [
    [{"name": "RandAugment", "num_ops": 2, "magnitude": 9}], [{"name": "TrivialAugmentWide"}],
    [{"name": "AutoAugment"}], [{"name": "ThreeAugment"}], [{"name": "TimmAugment", "policy": "original"}],
    [{"name": "TimmAugment", "policy": "3a"}],
], ids=["RandAugment", "TrivialAugmentWide", "AutoAugment", "ThreeAugment", "TimmAugment-original", "TimmAugment-3a"])
def test_policies_by_name_train_a_step(data, tmp_path, augment):
    r = load_recipe(write_recipe(tmp_path, data, augment=[{"name": "RandomHorizontalFlip"}, *augment],
                                 train__max_steps=1, data__limit_val=6))
    t = Trainer(r)
    assert type(t.task.pipe.augment.transforms[1]).__name__ == augment[0]["name"]
    assert type(t.task.pipe.augment.transforms[-1]) is T.ToCoefficients
    record = t.fit()
    assert record["train_loss"] > 0 and record["val_images"] == 6


def _weights(run):
    return torch.load(run / "last.pt", weights_only=False)["model"]


@pytest.mark.parametrize("inp", ["dct", "device-rgb"])
def test_deit_augmentation_is_bit_reproducible_and_resumes_exactly(data, tmp_path, inp):
    common = dict(augment=DEIT, model__input=inp, optim__epochs=2, train__max_steps=2, optim__optimizer="adamw",
                  optim__lr=1e-3, optim__label_smoothing=0.1)
    if inp == "device-rgb":
        common["model__stem"] = "dct8"
    a, b, c = (write_recipe(tmp_path / k, data, **common) for k in "abc")
    ta = Trainer(load_recipe(a))
    # timm's Mixup carries optim.label_smoothing in its targets: the loss does not smooth again
    assert ta.task.pipe.targets_smoothed and ta.task.criterion.label_smoothing == 0.0
    assert ta.task.pipe.augment.transforms[3].label_smoothing == 0.1
    last = T.ToRGB if inp == "device-rgb" else T.ToCoefficients
    assert [type(t) for t in ta.task.pipe.augment.transforms] == [T.RandomHorizontalFlip, T.TimmAugment, T.RandomErasing,
                                                            T.Mixup, last]
    text = (tmp_path / "a" / "run" / "pipeline.txt").read_text()
    for name in (f"input: {inp}", "RandomResizedCrop", "RandomHorizontalFlip", "TimmAugment", "rand-m9-mstd0.5-inc1",
                 "RandomErasing", "Mixup", last.__name__):
        assert name in text, text
    ta.fit()
    Trainer(load_recipe(b)).fit()
    wa, wb = _weights(tmp_path / "a" / "run"), _weights(tmp_path / "b" / "run")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # one epoch, then --resume for the second: the straight run's weights
    t = Trainer(load_recipe(c))
    t.task.pipe.set_epoch(0)
    t.history.append({"epoch": 1, **t.train_epoch(0)})
    t._save(t.out / "last.pt", 0)
    resumed = Trainer(load_recipe(c), resume=True)
    resumed.fit()
    wc = _weights(tmp_path / "c" / "run")
    assert all(torch.equal(wa[k], wc[k]) for k in wa)
    # and the augmentation did something: a run without it ends elsewhere
    d = write_recipe(tmp_path / "d", data, **{**common, "augment": []})
    Trainer(load_recipe(d)).fit()
    wd = _weights(tmp_path / "d" / "run")
    assert any(not torch.equal(wa[k], wd[k]) for k in wa)


def test_the_trainer_has_no_augmentation_code_of_its_own():
    """Flip, jitter and mixup kernels live in dctnet/kernels and dctnet/transforms only."""
    import re

    for path in (ROOT / "dctnet").rglob("*.py"):
        if "transforms" in path.parts or "kernels" in path.parts:
            continue
        text = path.read_text()
        for pattern in (r"\.flip\(", r"Beta\(", r"adjust_(brightness|contrast|saturation)", r"\bhflip\(",
                        r"rgb_to_grayscale"):
            assert not re.search(pattern, text), f"{path.relative_to(ROOT)}: {pattern}"


def test_the_rgb_arm_posterizes_0_bits_to_black_as_dctnet_does(tmp_path, data):
    """timm's -inc1 posterize draws 0 bits now and then; Pillow 13 refuses them (Pillow < 13 gave
    black). The baseline's timm ops give black, as dctnet's own TimmAugment does, and a
    transform's error is raised as itself instead of being blamed on the image file."""
    import numpy as np
    from PIL import Image
    from timm.data import auto_augment as timm_aa

    from dctnet.train.baseline import jpeg_image_folder

    r = load_recipe(write_recipe(tmp_path, data, model__input="rgb"))
    op = baseline_op({"name": "TimmAugment", "policy": "rand-m9-mstd0.5-inc1"}, r, 6)
    posterize = next(o for o in op.ops if o.name == "PosterizeIncreasing")
    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8))
    with pytest.raises(ValueError):  # timm's own op on this Pillow: the failure the baseline avoids
        timm_aa.posterize(img, 0)
    black = posterize.aug_fn(img, 0)
    assert not np.asarray(black).any()
    from dctnet.transforms.policy_base import KERNELS

    ours = KERNELS["PilPosterize"](torch.from_numpy(np.asarray(img)).permute(2, 0, 1)[None] / 255.0, torch.zeros(1), None)
    assert not ours.any()
    for bits in (1, 4, 7):
        assert np.array_equal(np.asarray(posterize.aug_fn(img, bits)), np.asarray(timm_aa.posterize(img, bits)))

    def broken(_):
        raise ValueError("a transform's own error")

    ds = jpeg_image_folder(os.path.join(data, "train"), broken, "skip")
    with pytest.raises(ValueError, match="transform's own error"):
        ds[0]


def test_coefficient_statistics_are_those_of_the_inputs_the_model_is_fed(data, tmp_path):
    """A DCT ViT's per-(c,u,v) standardisation is computed over the augmented training crops, and
    pixel-noise erasing draws its noise in those standardised coefficients: posterize / solarize
    edges and per-pixel RGB noise land in the high (chroma) frequencies, where clean crops have
    almost no spread. Oracle: the standardised training inputs have unit spread per (c,u,v); the
    clean crops' statistics (the rule before) and RGB erasing noise each leave some (c,u,v) many
    times wider."""
    r = load_recipe(write_recipe(tmp_path, data, model__arch="timm:vit_tiny_patch16_224", model__stem="dct-patch",
                                 model__normalize="stats", model__stats_batches=3,
                                 augment=[{"name": "TimmAugment", "policy": "rand-m9-mstd0.5-inc1"},
                                          {"name": "RandomErasing", "p": 0.5, "mode": "pixel"}]))
    pipe = build_pipeline(r, torch.device("cpu"))
    erasing = pipe.augment.transforms[1]
    assert erasing.coefficient_input is pipe.normalize

    def fed() -> torch.Tensor:  # standardised (B, 3, 4, 4, 64), one epoch
        pipe.set_epoch(1)
        return torch.cat([x for x, _, _ in pipe.batches(train=True)])

    def spread(x: torch.Tensor) -> torch.Tensor:
        return x.transpose(0, 1).reshape(3, -1, 64).std(dim=1)

    ours = fed()
    assert 0.5 < float(spread(ours).median()) < 2.0 and float(spread(ours).max()) < 3.0, spread(ours)
    # the same inputs standardised by the statistics of the clean training crops
    loader = D.ThreadLoader(D.ImageFolderDataset(f"{data}/train", crop=D.RandomResizedCrop(scale=(0.5, 1.0))), 16,
                            threads=1, pin_memory=False)
    clean = D.compute_stats(loader, lambda b: T.crops_to_coefficients(b, (32, 32)))
    raw = ours * pipe.normalize.std.reshape(1, 3, 1, 1, 64) + pipe.normalize.mean.reshape(1, 3, 1, 1, 64)
    by_clean = (raw - clean.mean.reshape(1, 3, 1, 1, 64)) / clean.std.reshape(1, 3, 1, 1, 64)
    assert float(spread(by_clean).max()) > 5.0, spread(by_clean).max()
    # RGB erasing noise under these statistics
    erasing.noise_in(None)
    assert float(spread(fed()).max()) > 10.0
