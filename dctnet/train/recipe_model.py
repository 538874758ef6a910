"""The model of a recipe: an architecture by name, with the input path's stem."""

from __future__ import annotations

import torch
from torch import nn

from dctnet.models import build_model, stem_modules, swap_stem
from dctnet.nn import DCTPatchEmbed
from dctnet.train.recipe import Recipe, check_model_fits, input_stats

__all__ = ["build_recipe_model"]


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
    swap_stem(model, stem=check_model_fits(model, recipe), keep=m.keep, chroma=m.chroma)
    if input_stats(recipe):
        for embed in stem_modules(model):
            if not isinstance(embed, DCTPatchEmbed):
                continue
            embed.linear.reset_parameters()
            if m.chroma == "native":  # the same default init, over the stem's whole fan-in
                fan_in = embed.linear.in_features + embed.chroma_weight.shape[-1]
                torch.nn.init.uniform_(embed.chroma_weight, -fan_in ** -0.5, fan_in ** -0.5)
    return model
