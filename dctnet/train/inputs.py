"""What a recipe's ``data`` and ``model`` sections resolve to, the same for every input arm (dctnet's
loaders and the torchvision baseline): the dataset root, the model's eval transform at the recipe's
size, and the subset ``data.limit_train`` / ``limit_val`` keep."""

from __future__ import annotations

import math
from pathlib import Path

from dctnet.data.sources import SourceContext, get_source
from dctnet.train.recipe import Recipe
from dctnet.kernels.normalization import data_config

__all__ = ["data_root", "eval_config", "eval_description", "limited_indices"]


def data_root(recipe: Recipe) -> Path:
    """The dataset root, once the recipe's data source has found its data there (and made it first,
    for the synthetic dataset): its ``locate`` (:class:`dctnet.data.sources.DataSource`)."""
    root = Path(recipe.data.root)
    get_source(recipe.data.source).locate(SourceContext(recipe.data, root, seed=recipe.train.seed))
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
