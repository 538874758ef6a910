"""What a recipe's ``data`` and ``model`` sections resolve to, the same for every input arm (dctnet's
loaders and the torchvision baseline): the dataset root, the model's eval transform at the recipe's
size, and the subset ``data.limit_train`` / ``limit_val`` keep."""

from __future__ import annotations

import glob
from pathlib import Path

from dctnet.synthetic import make_labelled_dataset
from dctnet.train.recipe import Recipe
from dctnet.transforms.normalization import data_config

__all__ = ["data_root", "eval_config", "limited_indices"]


def data_root(recipe: Recipe) -> Path:
    """The dataset root, generating the synthetic dataset first when the recipe asks for it."""
    root = Path(recipe.data.root)
    if recipe.data.source == "synthetic":
        d = recipe.data
        make_labelled_dataset(str(root), classes=d.synthetic_classes, train_per_class=d.synthetic_train_per_class,
                              val_per_class=d.synthetic_val_per_class, size=d.synthetic_size, seed=recipe.train.seed)
    if recipe.data.source == "shards":
        if not glob.glob(str(root / recipe.data.train)):
            raise FileNotFoundError(f"no training shards match {root / recipe.data.train} (data.root / data.train, "
                                    "a glob such as train-*.tar)")
    elif not (root / recipe.data.train).exists():
        raise FileNotFoundError(f"training data not found: {root / recipe.data.train} (data.root / data.train; "
                                "for Imagenette set DCTNET_DATA)")
    return root


def eval_config(r: Recipe) -> dict:
    """The model's eval transform (:func:`dctnet.transforms.normalization.data_config`) at the
    recipe's image size, with the recipe's ``data.crop_pct`` / ``crop_mode`` / ``eval_interpolation``
    where set."""
    s = r.data.image_size
    return data_config(r.model.arch, input_size=(3, s, s), crop_pct=r.data.crop_pct, crop_mode=r.data.crop_mode,
                       interpolation=r.data.eval_interpolation)


def limited_indices(n: int, limit: int) -> list[int]:
    """All of ``range(n)``, or ``limit`` indices spread evenly over it (every class represented:
    folder datasets are sorted by class)."""
    if not limit or limit >= n:
        return list(range(n))
    return [int(i * n / limit) for i in range(limit)]
