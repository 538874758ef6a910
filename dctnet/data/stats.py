"""Streaming per-(channel, frequency) statistics of coefficient images, for ``Normalize``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["CoefficientStats", "compute_stats"]


class CoefficientStats(NamedTuple):
    """Per-(channel, frequency) ``mean`` and ``std``, ``(3, 64)`` float32 on the host (``std``
    at least 1e-6), as :class:`dctnet.transforms.Normalize` holds them: ``T.Normalize(*stats)`` is
    the standardisation. :meth:`save` writes the file ``Normalize.load`` reads."""

    mean: Tensor
    std: Tensor

    def save(self, path: str | Path) -> None:
        torch.save({"mean": self.mean.detach().cpu(), "std": self.std.detach().cpu()}, path)


def compute_stats(batches: Iterable, to_coefficients: Callable[[object], Tensor] | None = None, *,
                  max_batches: int | None = None, save: str | Path | None = None) -> CoefficientStats:
    """Mean and standard deviation of every (channel, frequency) over a dataset, in one pass.

    Args:
        batches: an iterable of coefficient images ``(B, 3, Hb, Wb, 64)``, or of native-chroma
            pairs ``(y (B, Hb, Wb, 64), c (B, 2, Hb', Wb', 64))`` (statistics of y in channel 0,
            of c in channels 1–2), or of anything ``to_coefficients`` turns into one (e.g. a
            loader's ``JpegBatch`` and ``lambda b: crops_to_coefficients(b, (224, 224))``).
        max_batches: stop after this many batches.
        save: also write the statistics to this file (``Normalize.load`` reads it).

    Returns the statistics (:class:`CoefficientStats`: ``.mean``, ``.std``, ``.save``);
    ``dctnet.transforms.Normalize(*stats)`` standardises with them.

    Sums are accumulated in float64 on the batches' device (no host sync per batch), so the
    result does not depend on how the data is split into batches beyond rounding.
    """
    total = None
    for i, batch in enumerate(batches):
        if max_batches is not None and i >= max_batches:
            break
        x = to_coefficients(batch) if to_coefficients else batch
        parts = (x[0].unsqueeze(1), x[1]) if isinstance(x, tuple) else (x,)
        parts = [p.to(torch.float64) for p in parts]
        s = torch.cat([p.sum(dim=(0, 2, 3)) for p in parts])
        s2 = torch.cat([(p * p).sum(dim=(0, 2, 3)) for p in parts])
        count = torch.cat([torch.full((p.shape[1], 1), float(p.shape[0] * p.shape[2] * p.shape[3]),
                                      dtype=torch.float64, device=p.device) for p in parts])
        total = (s, s2, count) if total is None else (total[0] + s, total[1] + s2, total[2] + count)
    if total is None:
        raise ValueError("compute_stats got no batches")
    s, s2, count = total
    mean = s / count
    var = (s2 / count - mean * mean).clamp(min=0.0)
    # what Normalize(mean, std) holds: float32, (3, 64), std at least 1e-6
    stats = CoefficientStats(mean.float().cpu().reshape(3, 64).clone(), var.sqrt().float().cpu().reshape(3, 64).clamp(min=1e-6))
    if save is not None:
        stats.save(save)
    return stats
