"""The trainer runs the library's own transforms: a recipe's augment list becomes a
dctnet.transforms.Compose run in the device step, the README's pipeline by hand gives the same
tensors, and runs with RandAugment + mixup + cutmix + erasing repeat bit for bit, resume included."""

from __future__ import annotations

import pytest
import torch

from dctnet import data as D
from dctnet import transforms as T
from dctnet.synthetic import make_labelled_dataset
from dctnet.train import RecipeError, Trainer, load_recipe
from dctnet.train.pipeline import build_pipeline

from conftest import ROOT, write_recipe

DEIT = [{"name": "RandomHorizontalFlip", "p": 0.5}, {"name": "RandAugment", "num_ops": 2, "magnitude": 9},
        {"name": "Mixup", "alpha": 0.8, "p": 0.5}, {"name": "CutMix", "alpha": 1.0, "p": 0.5},
        {"name": "RandomErasing", "p": 0.25}]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("aug")
    return make_labelled_dataset(str(root), classes=3, train_per_class=16, val_per_class=4, size=(40, 64), seed=5)


def test_the_recipe_pipeline_is_the_readme_pipeline(data, tmp_path):
    """The README's example (crops_to_coefficients, then a Compose drawing from
    step_generator(seed, epoch, step, rank)) built by hand gives the trainer's very tensors."""
    augment = [{"name": "RandomHorizontalFlip"}, {"name": "ColorJitter", "brightness": 0.4, "contrast": 0.4,
                                                   "saturation": 0.4}, {"name": "RandomRequantize"}]
    r = load_recipe(write_recipe(tmp_path, data, augment=augment, train__seed=7))
    pipe = build_pipeline(r, torch.device("cpu"))
    pipe.set_epoch(2)
    got = [(x.clone(), t.clone()) for x, t, _ in pipe.batches(train=True)][:3]
    # by hand, as README.md shows it
    ds = D.ImageFolderDataset(f"{data}/train", crop=D.RandomResizedCrop(scale=(0.5, 1.0)), seed=7)
    loader = D.ThreadLoader(ds, 16, sampler=D.SubsetSampler(list(range(len(ds))), seed=7, drop_last=True),
                            threads=1, drop_last=True, pin_memory=False)
    loader.set_epoch(2)
    aug = T.Compose([T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4), T.RandomRequantize()], seed=7)
    for step, batch in enumerate(D.DevicePrefetcher(loader, "cpu")):
        if step == 3:
            break
        x = T.crops_to_coefficients(batch, (32, 32))
        x, y = aug(x, batch.labels, generator=T.step_generator(7, 2, step, 0))
        assert torch.equal(x, got[step][0]) and torch.equal(y, got[step][1])
    assert len(got) == 3


def test_augment_list_errors_name_the_transform(tmp_path, data):
    for spec, match in [([{"name": "RandAugmnt"}], "did you mean 'RandAugment'"),
                        ([{"name": "Mixup", "alpa": 0.8}], "did you mean 'alpha'"),
                        ({"hflip": 0.5}, "a list of transforms")]:
        with pytest.raises(RecipeError, match=match):
            load_recipe(write_recipe(tmp_path, data, augment=spec))
    # the torchvision baseline takes the same list (its own ops; MixUp or CutMix per batch)
    record = Trainer(load_recipe(write_recipe(tmp_path / "rgb", data, model__input="rgb", augment=DEIT,
                                              train__max_steps=1))).fit()
    assert record["train_loss"] > 0
    with pytest.raises(ValueError, match="no torchvision counterpart"):
        Trainer(load_recipe(write_recipe(tmp_path, data, model__input="rgb",
                                         augment=[{"name": "FrequencyDropout"}])))


def _weights(run):
    return torch.load(run / "last.pt", weights_only=False)["model"]


@pytest.mark.parametrize("inp", ["dct", "device-rgb"])
def test_deit_augmentation_is_bit_reproducible_and_resumes_exactly(data, tmp_path, inp):
    common = dict(augment=DEIT, model__input=inp, optim__epochs=2, train__max_steps=2, optim__optimizer="adamw",
                  optim__lr=1e-3, optim__label_smoothing=0.1)
    if inp == "device-rgb":
        common["model__stem"] = "dct8"
    a, b, c = (write_recipe(tmp_path / k, data, **common) for k in "abc")
    Trainer(load_recipe(a)).fit()
    Trainer(load_recipe(b)).fit()
    wa, wb = _weights(tmp_path / "a" / "run"), _weights(tmp_path / "b" / "run")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # one epoch, then --resume for the second: the straight run's weights
    t = Trainer(load_recipe(c))
    t.pipe.set_epoch(0)
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
    """Flip, jitter and mixup kernels live in dctnet/transforms only."""
    import re

    for path in (ROOT / "dctnet").rglob("*.py"):
        if "transforms" in path.parts:
            continue
        text = path.read_text()
        for pattern in (r"\.flip\(", r"Beta\(", r"adjust_(brightness|contrast|saturation)", r"\bhflip\(",
                        r"rgb_to_grayscale"):
            assert not re.search(pattern, text), f"{path.relative_to(ROOT)}: {pattern}"
