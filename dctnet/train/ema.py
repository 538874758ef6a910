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

import torch
from torch import nn

__all__ = ["ModelEma", "adjusted_decay"]


def adjusted_decay(decay: float, *, world_size: int, batch_size: int, every: int, epochs: int) -> float:
    """torchvision's reference: ``alpha = 1 − decay``, ``alpha = min(1, alpha·world_size·batch_size·every/epochs)``,
    the decay ``1 − alpha``."""
    alpha = min(1.0, (1.0 - decay) * world_size * batch_size * every / epochs)
    return 1.0 - alpha


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
        for ema_v, v in zip(self.module.state_dict().values(), model.state_dict().values()):
            if ema_v.is_floating_point():
                ema_v.lerp_(v.to(dtype=ema_v.dtype), 1.0 - d)
            else:
                ema_v.copy_(v)

    def state(self) -> dict:
        return {"module": self.module.state_dict(), "updates": self.updates}

    def load(self, state: dict) -> None:
        self.module.load_state_dict(state["module"])
        self.updates = int(state["updates"])
