"""The model of a recipe: an architecture by name, with the input path's stem."""

from __future__ import annotations

import torch
from torch import nn

from dctnet.models import build_model, stem_modules, swap_stem
from dctnet.nn import DCTPatchEmbed
from dctnet.train.recipe import Recipe, RecipeError, check_model_fits, input_stats

__all__ = ["build_recipe_model", "init_state", "load_init"]


def init_state(path: str) -> dict[str, torch.Tensor]:
    """The state_dict in ``path``: a plain one (timm's, torchvision's ``.pth``), or the ``model`` (or
    ``state_dict``) entry of a checkpoint such as a dctnet run's ``last.pt``. Read with
    ``weights_only=True``: a checkpoint is untrusted input, and tensors are all it may hold here."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise RecipeError(f"model.init: no such file {path}") from None
    except Exception as exc:  # noqa: BLE001 — pickle, zip and format errors: name the file and the reason
        raise RecipeError(f"model.init: {path} is not a readable state_dict ({type(exc).__name__}: {exc})") from None
    for key in ("model", "state_dict"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise RecipeError(f"model.init: {path} holds no state_dict of tensors")
    return {k.removeprefix("module."): v for k, v in state.items()}  # DDP's prefix


def load_init(model: nn.Module, state: dict[str, torch.Tensor], path: str) -> None:
    """``state`` into ``model``: entries whose shape differs (a head of another class count) are left at
    their init, as timm does when it adapts a pretrained head; any other missing or extra key is a
    ``RecipeError`` naming it."""
    own = model.state_dict()
    head = sorted(k for k, v in state.items() if k in own and own[k].shape != v.shape)
    missing, unexpected = model.load_state_dict({k: v for k, v in state.items() if k not in head}, strict=False)
    missing = [k for k in missing if k not in head]
    if missing or unexpected:
        raise RecipeError(f"model.init: {path} does not fit {type(model).__name__}: missing {missing[:5]}, "
                          f"unexpected {list(unexpected)[:5]}")
    if len(head) > 4:
        raise RecipeError(f"model.init: {path}: {len(head)} tensors differ in shape from the model (e.g. {head[:3]}): "
                          "not the same architecture")


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
    model = build_model(m.arch, image_size=recipe.data.image_size, num_classes=num_classes,
                        drop_path_rate=m.drop_path_rate)
    state = None if m.init is None else init_state(m.init)
    if m.input != "dct":
        if state is not None:
            load_init(model, state, m.init)
        return model
    rgb_keys = set(model.state_dict())
    # an RGB checkpoint goes into the RGB model, and swap_stem converts its first layer (exactly where
    # the stem allows); a dctnet run's DCT checkpoint (stem keys the RGB model lacks) after the swap
    rgb_init = state is not None and (set(state) & rgb_keys) and not (set(state) - rgb_keys)
    if rgb_init:
        load_init(model, state, m.init)
    swap_stem(model, stem=check_model_fits(model, recipe), keep=m.keep, chroma=m.chroma)
    if state is not None and not rgb_init:
        load_init(model, state, m.init)
        return model
    if input_stats(recipe):
        for embed in stem_modules(model):
            if not isinstance(embed, DCTPatchEmbed):
                continue
            embed.linear.reset_parameters()
            if m.chroma == "native":  # the same default init, over the stem's whole fan-in
                fan_in = embed.linear.in_features + embed.chroma_weight.shape[-1]
                torch.nn.init.uniform_(embed.chroma_weight, -fan_in ** -0.5, fan_in ** -0.5)
    return model
