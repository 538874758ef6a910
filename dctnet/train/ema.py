"""Model EMA as timm's train.py and torchvision's classification reference keep it: an exponential
moving average of the model's parameters and buffers, evaluated beside the model.

The update is timm's ``ModelEmaV3.apply_update_``: every floating-point tensor of the state
``ema ← ema + (1 − d)·(model − ema)`` (a ``lerp``), every other one copied. ``d`` at update ``t`` is
timm's ``get_decay``: 0 at the first update (the EMA starts as the model), then ``decay``, or with
``warmup`` ``clamp(1 − (1 + t − 1)^(−2/3), 0, decay)`` (ModelEmaV3's ``use_warmup``). ``every``
averages every N optimizer updates (torchvision's ``--model-ema-steps``); ``adjust`` is
torchvision's rescaling of the decay for that and for the global batch and epochs:
``d = 1 − min(1, (1 − decay)·world_size·batch_size·every/epochs)``.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["ModelEma", "adjusted_decay", "recipe_ema"]


def adjusted_decay(decay: float, *, world_size: int, batch_size: int, every: int, epochs: int) -> float:
    """torchvision's reference: ``alpha = 1 − decay``, ``alpha = min(1, alpha·world_size·batch_size·every/epochs)``,
    the decay ``1 − alpha``."""
    alpha = min(1.0, (1.0 - decay) * world_size * batch_size * every / epochs)
    return 1.0 - alpha


def _unwrap(model: nn.Module) -> nn.Module:
    """The model inside ``torch.compile``'s and DDP's wrappers (whose names carry a prefix)."""
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif hasattr(model, "_orig_mod") and isinstance(model._orig_mod, nn.Module):  # torch.compile
            model = model._orig_mod
        else:
            return model


class ModelEma(nn.Module):
    """An EMA copy of ``model`` (``.module``, in eval mode, no gradients)."""

    def __init__(self, model: nn.Module, decay: float, *, warmup: bool = False, every: int = 1) -> None:
        super().__init__()
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"ModelEma: decay must be in [0, 1), got {decay!r}")
        if every < 1:
            raise ValueError(f"ModelEma: every must be >= 1, got {every!r}")
        self.module = copy.deepcopy(model).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.decay, self.warmup, self.every = float(decay), bool(warmup), int(every)
        self.updates = 0  # EMA updates made (not optimizer steps)
        # The tensors averaged are the state_dict's (timm's), found without building a state_dict each
        # step: the parameters, and the buffers that are persistent (a non-persistent one — the IDCT
        # stem's mean/std, a frequency index — is a constant, not state). Names, not tensors, are kept:
        # ``.to(device)`` or ``load_state_dict(assign=True)`` after construction replace the tensors.
        names = self.module.state_dict().keys()
        self._param_names = tuple(n for n, _ in self.module.named_parameters())
        self._buffer_names = tuple(n for n, _ in self.module.named_buffers() if n in names)

    def decay_at(self, t: int) -> float:
        """timm ``ModelEmaV3.get_decay(t)`` for the ``t``-th update (1-based)."""
        step = max(0, t - 1)
        if step <= 0:
            return 0.0
        if self.warmup:
            return max(min(1.0 - (1.0 + step) ** (-2.0 / 3.0), self.decay), 0.0)
        return self.decay

    @torch.no_grad()
    def step(self, model: nn.Module, optimizer_step: int) -> None:
        """After optimizer update ``optimizer_step`` (1-based): average every ``every``-th one."""
        if optimizer_step % self.every:
            return
        self.updates += 1
        d = self.decay_at(self.updates)
        ema_float, model_float, ema_other, model_other = [], [], [], []
        for ema_v, v in zip(self._tensors(self.module), self._tensors(_unwrap(model))):
            if ema_v.is_floating_point():
                ema_float.append(ema_v)
                model_float.append(v.to(dtype=ema_v.dtype))
            else:  # num_batches_tracked and other integer state: copied, not averaged
                ema_other.append(ema_v)
                model_other.append(v)
        # one multi-tensor kernel (launch) per list instead of one per tensor; the same lerp per element
        if ema_float:
            torch._foreach_lerp_(ema_float, model_float, 1.0 - d)
        if ema_other:  # (empty lists: _foreach_* raise on them)
            torch._foreach_copy_(ema_other, model_other)

    def _tensors(self, module: nn.Module) -> list[Tensor]:
        """``module``'s parameters then its persistent buffers, in the EMA copy's order; a
        ``ValueError`` if its names are not the EMA copy's (a different model)."""
        params = dict(module.named_parameters())
        buffers = dict(module.named_buffers())
        if len(params) != len(self._param_names):
            raise ValueError(f"ModelEma.step: the model has {len(params)} parameters, the EMA copy "
                             f"{len(self._param_names)} (not the model the EMA was made from)")
        try:
            return [params[n] for n in self._param_names] + [buffers[n] for n in self._buffer_names]
        except KeyError as e:
            raise ValueError(f"ModelEma.step: the model has no tensor {e.args[0]!r} that the EMA copy has "
                             "(not the model the EMA was made from)") from None

    def state(self) -> dict:
        return {"module": self.module.state_dict(), "updates": self.updates}

    def load(self, state: dict) -> None:
        self.module.load_state_dict(state["module"])
        self.updates = int(state["updates"])


def recipe_ema(model: nn.Module, recipe: Any, world_size: int) -> ModelEma | None:
    """The EMA a recipe's ``train.ema`` asks for over ``model`` (None when its decay is 0): the decay
    rescaled by torchvision's rule when ``adjust`` is set — one rule for every task's trainer."""
    e = recipe.train.ema
    if e.decay <= 0:
        return None
    decay = adjusted_decay(e.decay, world_size=world_size, batch_size=recipe.data.batch_size, every=e.every,
                           epochs=recipe.optim.epochs) if e.adjust else e.decay
    return ModelEma(model, decay, warmup=e.warmup, every=e.every)
