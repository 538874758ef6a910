"""What a recipe's ``data`` and ``model`` sections resolve to, the same for every input arm (dctnet's
loaders and the torchvision baseline): the dataset root, the model's eval transform at the recipe's
size, and the subset ``data.limit_train`` / ``limit_val`` keep."""

from __future__ import annotations

import glob
import math
from pathlib import Path

from dctnet.data.hf_open import hf_files, split_path
from dctnet.synthetic import make_labelled_dataset
from dctnet.train.recipe import Recipe
from dctnet.kernels.normalization import data_config

__all__ = ["data_root", "eval_config", "eval_description", "limited_indices"]


def data_root(recipe: Recipe) -> Path:
    """The dataset root, generating the synthetic dataset first when the recipe asks for it."""
    root = Path(recipe.data.root)
    if recipe.data.source == "synthetic":
        d = recipe.data
        make_labelled_dataset(str(root), classes=d.synthetic_classes, train_per_class=d.synthetic_train_per_class,
                              val_per_class=d.synthetic_val_per_class, size=d.synthetic_size, seed=recipe.train.seed)
    if recipe.data.source == "hf":
        for split in ("train", "val"):
            try:
                hf_files(split_path(root, getattr(recipe.data, split), split))
            except FileNotFoundError as exc:
                raise FileNotFoundError(f"{exc} (data.root / data.{split})") from None
    elif recipe.data.source == "shards":
        if not glob.glob(str(root / recipe.data.train)):
            raise FileNotFoundError(f"no training shards match {root / recipe.data.train} (data.root / data.train, "
                                    "a glob such as train-*.tar)")
    elif not (root / recipe.data.train).exists():
        raise FileNotFoundError(f"training data not found: {root / recipe.data.train} (data.root / data.train; "
                                "for Imagenette set DCTNET_DATA)")
    return root


def eval_config(r: Recipe) -> dict:
    """The model's eval transform (:func:`dctnet.kernels.normalization.data_config`) with the
    recipe's eval fields where set, plus ``resize`` (the shorter side, or None):

    - ``data.eval_resize`` / ``data.eval_crop``: torchvision's ``Resize(eval_resize) +
      CenterCrop(eval_crop)`` (its reference's ``--val-resize-size`` / ``--val-crop-size``); the crop
      defaults to ``data.image_size``; ``eval_crop`` alone keeps timm's ``floor(crop / crop_pct)``;
    - none of ``eval_resize``, ``eval_crop``, ``crop_pct`` set: the crop is ``data.image_size`` — or the
      model's ``test_input_size`` with its ``test_crop_pct`` where its timm config has one (timm's
      ``use_test_size``);
    - ``crop_pct`` / ``crop_mode`` / ``eval_interpolation`` override the model's."""
    d = r.data
    s = d.eval_crop or d.image_size
    cfg = data_config(r.model.arch, input_size=(3, s, s), crop_pct=d.crop_pct, crop_mode=d.crop_mode,
                      interpolation=d.eval_interpolation)
    if d.eval_crop is None and d.eval_resize is None and d.crop_pct is None:
        test = data_config(r.model.arch, use_test_size=True)
        if test["input_size"] != data_config(r.model.arch)["input_size"]:  # the model has a test size
            cfg = data_config(r.model.arch, use_test_size=True, crop_mode=d.crop_mode,
                              interpolation=d.eval_interpolation)
    cfg["resize"] = d.eval_resize
    return cfg


def eval_description(cfg: dict) -> str:
    """An eval config in words with its sizes: ``"resize the shorter side to 232 (center, bilinear) +
    centre crop 224"``."""
    _, h, w = cfg["input_size"]
    if cfg.get("resize") is not None:
        how = f"resize the shorter side to {cfg['resize']} (torchvision's Resize)"
    else:
        lh, lw = math.floor(h / cfg["crop_pct"]), math.floor(w / cfg["crop_pct"])
        how = f"resize to floor({h}/{cfg['crop_pct']:g}) = {lh}" + (f" x {lw}" if lw != lh else "")
    crop = f"{h}" if h == w else f"{h}x{w}"
    return f"{how} ({cfg['crop_mode']}, {cfg['interpolation']}) + centre crop {crop}"


def limited_indices(n: int, limit: int) -> list[int]:
    """All of ``range(n)``, or ``limit`` indices spread evenly over it (every class represented:
    folder datasets are sorted by class)."""
    if not limit or limit >= n:
        return list(range(n))
    return [int(i * n / limit) for i in range(limit)]
