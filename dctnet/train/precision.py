"""How a run computes on its device: autocast's dtype (``train.amp``) and the memory format of
convolutional models (``train.channels_last``) — one rule for every task."""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from dctnet.train.recipe import Recipe

__all__ = ["amp_dtype", "autocast", "use_channels_last"]


def amp_dtype(recipe: Recipe, device: torch.device) -> torch.dtype | None:
    """``train.amp``: ``bf16`` / ``fp16`` / ``off``; ``auto`` is bf16 on CUDA (no loss scaling needed)
    and off on a CPU (bf16 matmuls there are slower than float32 on most cores)."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None,
            "auto": torch.bfloat16 if device.type == "cuda" else None}[recipe.train.amp]


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """Autocast in ``dtype`` on ``device`` (:func:`amp_dtype`); a no-op for ``None``."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def use_channels_last(recipe: Recipe, model: nn.Module, device: torch.device) -> bool:
    """``train.channels_last`` acts on CUDA, for convolutional models — more than one 2-D convolution
    (cuDNN's NHWC kernels are its fast ones, with tensor cores under AMP); a ViT's single patch
    embedding is not worth converting every batch for. A CPU run keeps the default layout."""
    return (recipe.train.channels_last and device.type == "cuda"
            and sum(isinstance(m, nn.Conv2d) for m in model.modules()) > 1)
