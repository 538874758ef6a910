"""The model of a recipe: an architecture by name, with the input path's stem."""

from __future__ import annotations

import torch
from torch import nn

from dctnet.models import build_model, stem_modules, swap_stem
from dctnet.train.recipe import Recipe

__all__ = ["build_recipe_model"]


def build_recipe_model(recipe: Recipe, num_classes: int) -> nn.Module:
    """``model.arch`` with ``num_classes`` outputs for ``data.image_size`` inputs.

    ``input: rgb`` and ``device-rgb`` keep the model unchanged (the device decode is the same
    function as the converted stem, ``swap_stem(model, stem="converted")``, puts in front of conv1).
    ``input: dct``: ResNets get :class:`dctnet.nn.ResNetDCTStem` (``dct8``/``dct-up``; it starts
    with a BatchNorm over the coefficient channels, so it needs no input statistics); ViTs get
    :class:`dctnet.nn.DCTPatchEmbed`. With ``normalize: stats`` the ViT's input is standardised
    per (c,u,v), so its embedding starts from the default linear init (the conv's own init,
    fan-in 3·p·p); with ``normalize: none`` it is the exact conversion of the randomly
    initialised conv (the same function as the RGB model at step 0)."""
    m = recipe.model
    model = build_model(m.arch, image_size=recipe.data.image_size if "vit" in m.arch else None, num_classes=num_classes)
    if m.input != "dct":
        return model
    if "vit" in m.arch:
        swap_stem(model, keep=m.keep, chroma=m.chroma)
        if m.normalize == "stats":
            for embed in stem_modules(model):
                embed.luma.reset_parameters()
                if m.chroma == "native":  # the same default init, over the stem's whole fan-in
                    fan_in = embed.luma.in_features + embed.chroma_weight.shape[-1]
                    torch.nn.init.uniform_(embed.chroma_weight, -fan_in ** -0.5, fan_in ** -0.5)
        return model
    return swap_stem(model, stem=m.stem, keep=m.keep)
