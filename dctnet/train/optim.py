"""Optimizer parameter groups: the DCT stem's learning rate and who gets weight decay."""

from __future__ import annotations

import math

import fnmatch

from torch import nn

from dctnet.models import stem_modules
from dctnet.train.recipe import Recipe

__all__ = ["lr_at", "no_weight_decay", "optimizer_groups", "param_groups"]

#: torchvision models have no ``no_weight_decay()``: their counterparts of timm's names (ViT's class
#: token and position embeddings, Swin's relative position bias tables)
_TORCHVISION_NO_DECAY = ("class_token", "encoder.pos_embedding", "*.relative_position_bias_table")


def no_weight_decay(model: nn.Module) -> set[str]:
    """Names of the parameters of ``model`` exempt from weight decay, by timm's convention: 1-d
    parameters (norm scales, biases) and ``*.bias``, and the names (fnmatch patterns) the model's
    ``no_weight_decay()`` returns (timm ViT: ``pos_embed``, ``cls_token``, ...); for torchvision
    models, which have no such method, ViT's tokens and Swin's bias tables."""
    patterns = set(model.no_weight_decay()) if callable(getattr(model, "no_weight_decay", None)) else set()
    patterns.update(_TORCHVISION_NO_DECAY)
    return {name for name, p in model.named_parameters()
            if p.ndim <= 1 or name.endswith(".bias") or any(fnmatch.fnmatch(name, pat) for pat in patterns)}


def lr_at(step: int, *, lr: float, total: int, warmup: float, min_lr: float = 0.0, warmup_lr: float = 0.0) -> float:
    """The learning rate of update ``step`` (0-based) of ``total``: a linear warm-up over ``warmup``
    updates from ``warmup_lr`` to ``lr`` (update ``s`` at ``warmup_lr + (s + 1)·(lr − warmup_lr)/warmup``,
    timm's ``warmup_lr_init + t·…`` at ``t = s + 1``: no update is spent at the starting rate), then
    a cosine from ``lr`` to ``min_lr`` over the remaining updates — timm's ``CosineLRScheduler`` with
    ``lr_min``, ``warmup_lr_init`` and ``warmup_prefix=True``, stepped per update."""
    if step < warmup:
        return warmup_lr + (step + 1) * (lr - warmup_lr) / warmup
    t = min(1.0, (step - warmup) / max(1.0, total - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * t))


def param_groups(model: nn.Module, lr: float, *, stem_lr_mult: float = 0.1, weight_decay: float = 0.0,
                 decay_norms_and_biases: bool = False) -> list[dict]:
    """Optimizer groups: the DCT stem (:func:`dctnet.models.stem_modules`) at ``lr · stem_lr_mult``
    (the literature uses 0.1–0.2, as coefficient inputs have a much wider dynamic range than
    normalised pixels), the rest at ``lr``; ``weight_decay`` on all but the parameters
    :func:`no_weight_decay` exempts (``decay_norms_and_biases=True``: on all).

    A model without a dctnet stem gets no stem group. Empty groups are left out; the order is
    ``[rest decayed, stem decayed, rest exempt, stem exempt]``, so with ``weight_decay=0`` (nothing
    to split) the groups are ``[rest, stem]``. Frozen parameters are left out."""
    try:
        stem_ids = {id(p) for m in stem_modules(model) for p in m.parameters()}
    except ValueError:
        stem_ids = set()
    exempt = set() if decay_norms_and_biases else no_weight_decay(model)
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {(False, True): [], (True, True): [], (False, False): [],
                                                           (True, False): []}
    for name, p in model.named_parameters():
        if p.requires_grad:
            decay = weight_decay > 0 and name not in exempt
            groups[(id(p) in stem_ids, decay)].append(p)
    return [{"params": ps, "lr": lr * (stem_lr_mult if is_stem else 1.0), "weight_decay": weight_decay if decay else 0.0}
            for (is_stem, decay), ps in groups.items() if ps]


def optimizer_groups(model: nn.Module, recipe: Recipe, lr: float) -> list[dict]:
    """A recipe's parameter groups: ``optim.weight_decay`` on weights only (timm's exemptions),
    the DCT stem at ``lr · optim.stem_lr_mult``."""
    return param_groups(model, lr, stem_lr_mult=recipe.optim.stem_lr_mult, weight_decay=recipe.optim.weight_decay)
