"""FLOP counting, for comparing stems (torch's FlopCounterMode)."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["count_flops"]


def count_flops(module: nn.Module, *inputs: object) -> int:
    """Floating-point operations of one forward pass of ``module`` on ``inputs`` (torch's
    FlopCounterMode: 2 per multiply-add; elementwise ops are not counted), without gradients."""
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        module(*inputs)
    return int(counter.get_total_flops())
