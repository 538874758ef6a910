"""The data-source registry (dctnet.data.sources): a source is its module plus one registration.

The tiny source below — JPEG bytes held in memory, two classes — is registered by one
``register_source`` call in this file and nothing else, and trains through ``dctnet.train`` in
both arms: dctnet's reader (``model.input: dct``) and the torchvision baseline (``rgb``).
"""

from __future__ import annotations

import dataclasses
import io
import typing

import pytest
import torch

from dctnet.codec import read_coefficients
from dctnet.data.dataset import CropDataset, samples_from_coefficients
from dctnet.data.sources import SOURCES, DataSource, SourceContext, get_source, register_source, source_names
from dctnet.synthetic import synthetic_jpeg
from dctnet.train import RecipeError, Trainer, load_recipe
from dctnet.train.recipe_schema import DataConfig

from conftest import write_recipe

#: the in-memory data: per split, (JPEG bytes, label) of two classes
ITEMS = {split: [(synthetic_jpeg(i, 40 + 8 * (i % 3), 48, subsampling="4:2:0"), i % 2) for i in range(start, start + n)]
         for split, start, n in (("train", 0, 8), ("val", 100, 4))}


class MemoryJpegs(CropDataset):
    """The coefficient arm: cropped coefficient samples of in-memory JPEG bytes."""

    def __init__(self, items: list[tuple[bytes, int]], *, crop, seed: int, on_error: str) -> None:
        super().__init__(crop, seed, on_error, "ignore")
        self.items, self.classes = items, ["even", "odd"]

    def __len__(self) -> int:
        return len(self.items)

    def load(self, index: int, epoch: int):
        return self.load_batch([(epoch, index)])[0]

    def load_batch(self, keys):
        return samples_from_coefficients([read_coefficients(self.items[i][0]) for _, i in keys], self.crop,
                                         [self.items[i][1] for _, i in keys], [i for _, i in keys], seed=self.seed,
                                         epochs=[e for e, _ in keys])


class MemoryPillow(torch.utils.data.Dataset):
    """The rgb arm: the same bytes as PIL images."""

    def __init__(self, items: list[tuple[bytes, int]]) -> None:
        self.items, self.classes = items, ["even", "odd"]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        from PIL import Image

        data, label = self.items[index]
        return Image.open(io.BytesIO(data)).convert("RGB"), label

    def sample_name(self, index: int) -> str:
        return f"memory[{index}]"


def _nothing_to_find(ctx: SourceContext) -> None:
    """The data is in memory: nothing to find under data.root."""


@pytest.fixture
def memory_source():
    """The one registration (removed again after the test)."""
    source = register_source(DataSource(
        "memory", coefficients=lambda ctx, split: MemoryJpegs(ITEMS[split], crop=ctx.crops.get(split), **ctx.policy),
        pillow=lambda ctx, split: MemoryPillow(ITEMS[split]), locate=_nothing_to_find))
    yield source
    SOURCES.pop("memory")


@pytest.mark.parametrize("arm", ["dct", "rgb"])
def test_a_registered_source_trains_in_both_arms(memory_source, tmp_path, arm):
    pytest.importorskip("torchvision")
    if arm == "rgb":
        pytest.importorskip("timm")
    path = write_recipe(tmp_path, str(tmp_path / "unused"), batch_size=4, data__source="memory", model__input=arm,
                        train__max_steps=1, augment=[])
    recipe = load_recipe(path)
    assert recipe.data.source == "memory" and not recipe.detection
    metrics = Trainer(recipe).fit()
    assert metrics["val_images"] == len(ITEMS["val"])
    assert torch.isfinite(torch.tensor(metrics["train_loss"]))


def test_the_recipe_choices_are_the_registered_sources(memory_source):
    """``data.source``'s choices are the registry's names, and every registered source declares
    real recipe fields; an unknown name is refused (the registry says what was meant)."""
    choices = typing.get_args(typing.get_type_hints(DataConfig)["source"])
    assert choices == source_names() and set(choices) == set(SOURCES)
    assert {"folder", "synthetic", "cache", "shards", "hf", "coco", "memory"} <= set(choices)
    names = {f.name for f in dataclasses.fields(DataConfig)}
    for source in SOURCES.values():
        assert set(source.fields) <= names, source.name
        assert set(source.refused_elsewhere) <= set(source.fields), source.name
    assert get_source("coco").task == "detection"
    assert {s.name for s in SOURCES.values() if s.streamed(DataConfig(streaming=True))} == {"hf", "shards"}
    assert {s.name for s in SOURCES.values() if s.streamed(DataConfig())} == {"shards"}
    with pytest.raises(ValueError, match="did you mean 'shards'"):
        get_source("shard")
    with pytest.raises(RecipeError, match=r"data\.source: 'shard' is not one of"):
        load_recipe(None, {"data": {"source": "shard"}})


def test_an_arm_a_source_has_no_datasets_for_is_refused(tmp_path):
    """A source without a Pillow dataset refuses the rgb arm in the recipe check, in its own words."""
    register_source(DataSource("coefficients-only", coefficients=lambda ctx, split: None,
                               rgb_refusal="holds nothing Pillow reads"))
    try:
        with pytest.raises(RecipeError, match="'coefficients-only' holds nothing Pillow reads; model.input 'rgb'"):
            load_recipe(write_recipe(tmp_path, str(tmp_path), data__source="coefficients-only", model__input="rgb"))
    finally:
        SOURCES.pop("coefficients-only")


@pytest.mark.parametrize("over,says", [
    ({"image_column": "path"}, r"data\.image_column is for data\.source: hf or csv \(not read by 'folder'\)"),
    ({"buffer": 5}, r"data\.buffer is for data\.source: shards \(not read by 'folder'\)"),
    ({"verify": "hash"}, r"data\.verify is for data\.source: cache"),
    ({"synthetic_classes": 3}, r"data\.synthetic_classes is for data\.source: synthetic"),
])
def test_a_field_only_other_sources_read_is_refused_naming_them(tmp_path, over, says):
    """A source-specific field set away from its default under a source that does not read it is
    refused by the recipe check, naming the sources that do (it was silently ignored)."""
    with pytest.raises(RecipeError, match=says):
        load_recipe(None, {"data": {"source": "folder", "root": str(tmp_path), **over}})
