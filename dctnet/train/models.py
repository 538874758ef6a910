"""The model of a recipe: an architecture by name, with the input path's stem."""

from __future__ import annotations

import torch
from torch import nn

from dctnet.models import build_model, default_stem, stem_modules, stems_for, swap_stem
from dctnet.models.surgery import check_swap, family, stem_error
from dctnet.nn import DCTPatchEmbed
from dctnet.train.recipe import Recipe, RecipeError

__all__ = ["build_recipe_model", "check_recipe_model", "input_stats"]


def input_stats(recipe: Recipe) -> bool:
    """Whether the pipeline standardises the model's coefficient input per (c,u,v) from data
    (``normalize: stats``): input ``dct`` with a ViT (``dctnet.train.pipeline``'s rule)."""
    m = recipe.model
    return m.input == "dct" and "vit" in m.arch and m.normalize == "stats"


def _check(model: nn.Module, recipe: Recipe) -> str:
    """The stem ``model`` gets from the recipe, or a ``RecipeError`` naming the key. ``model`` may
    live on the meta device (nothing is converted)."""
    m = recipe.model
    try:
        stem = m.stem if m.stem is not None else default_stem(model)
        if stem not in stems_for(model):
            raise RecipeError(f"model.stem: {stem_error(model, stem, takes=f'{m.arch} takes')}")
        check_swap(model, stem=stem, keep=m.keep, chroma=m.chroma)
    except RecipeError:
        raise
    except (ValueError, TypeError) as exc:
        raise RecipeError(f"model.arch {m.arch!r} with input 'dct'" + (f", stem {m.stem!r}" if m.stem else "")
                          + f": {exc}") from None
    if input_stats(recipe) and stem != "dct-patch":
        raise RecipeError(f"model.normalize: 'stats' standardises the coefficients per (channel, frequency) for a "
                          f"'dct-patch' stem; the {stem!r} stem of {family(model)} takes raw coefficients — set "
                          "model.normalize: none (or model.stem: dct-patch where the model takes it)")
    return stem


def check_recipe_model(recipe: Recipe) -> None:
    """Everything :func:`build_recipe_model` would refuse about the model of an ``input: dct``
    recipe (an unknown ``model.arch``, a stem the family does not take, options that do not fit
    the stem), found without building it: the architecture is built on the meta device (no memory,
    no random draws) and only its structure is read. ``RecipeError`` naming the key; a model that
    cannot be built on the meta device is left to :func:`build_recipe_model`."""
    m = recipe.model
    if m.input != "dct":
        return
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        try:
            model = build_model(m.arch, image_size=recipe.data.image_size)
        except ValueError as exc:
            raise RecipeError(f"model.arch: {exc}") from None
        except Exception:  # noqa: BLE001 — not buildable on the meta device: the real build says why
            return
    _check(model, recipe)  # off the meta device: dctnet caches its constant matrices per device


def build_recipe_model(recipe: Recipe, num_classes: int) -> nn.Module:
    """``model.arch`` with ``num_classes`` outputs for ``data.image_size`` inputs (given to the
    models that fix it at construction: ViTs, timm's Swin).

    ``input: rgb`` and ``device-rgb`` keep the model unchanged (the device decode is the same
    function as the ``idct`` stem puts in front of the first conv). ``input: dct``: ``model.stem``
    as :func:`dctnet.models.swap_stem` takes it — ``dct-patch`` (ViT, Swin, ConvNeXt), ``idct``
    (any model), ``dct8`` / ``dct-up`` (learned, ResNets); unset, the model's default (``dct-patch``
    where the first conv is a block-aligned patchify conv, else ``idct``). A converted stem starts
    as the exact conversion of the randomly initialised conv (the same function as the RGB model
    at step 0), except that with ``normalize: stats`` a ViT's input is standardised per (c,u,v),
    so its ``dct-patch`` embedding starts from the default linear init (the conv's own init,
    fan-in 3·p·p). ``RecipeError`` (naming the key) for a stem the model does not take."""
    m = recipe.model
    model = build_model(m.arch, image_size=recipe.data.image_size, num_classes=num_classes)
    if m.input != "dct":
        return model
    swap_stem(model, stem=_check(model, recipe), keep=m.keep, chroma=m.chroma)
    if input_stats(recipe):
        for embed in stem_modules(model):
            if not isinstance(embed, DCTPatchEmbed):
                continue
            embed.linear.reset_parameters()
            if m.chroma == "native":  # the same default init, over the stem's whole fan-in
                fan_in = embed.linear.in_features + embed.chroma_weight.shape[-1]
                torch.nn.init.uniform_(embed.chroma_weight, -fan_in ** -0.5, fan_in ** -0.5)
    return model
