"""The kernels' shared tensor utilities: small constants built once per (kind, dtype, device)
(:func:`cached`, :func:`constant`), whether ``out=`` writes are allowed (:func:`plain_eager`), and a
``where`` that is vectorised on a CPU (:func:`select`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["cached", "constant", "plain_eager", "select", "traced_misses"]

_cache: dict[tuple[Any, ...], Tensor] = {}
#: the kinds of constant a ``torch.compile`` trace had to build inside its graph (a cold cache: see
#: :func:`cached`) — empty when compiled steps read every constant as an input, as they should
traced_misses: list[str] = []


def select(mask: Tensor, a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``torch.where(mask, a, b)`` (``mask`` broadcasting to ``a`` and ``b``). On a CPU, for floating
    ``a`` and ``b``: ``lerp(b, a, mask)``, whose weights 0 and 1 return ``b`` and ``a`` exactly
    (``b + 0·(a − b)``, ``a − (a − b)·0``) provided ``a − b`` is finite everywhere — true of pixels
    and coefficients, not of tensors holding inf or NaN or values near the dtype's limits (then a
    NaN would leak into the rows that keep ``b``). There ``where`` with a broadcast bool mask is not
    vectorised and costs ~3× the lerp (3.5 ns an element, measured on a batch of 224² crops);
    elsewhere (a GPU) it is one kernel like the lerp, and ``where`` runs.

    ``out``: write the result there (``a`` or ``b`` themselves may be it: each element reads its own
    inputs only) — a CPU writes into memory it has just read several times faster than into a new
    tensor. Ignored where autograd or a ``torch.compile`` trace is running."""
    if out is not None and not plain_eager(out):
        out = None
    if not (a.is_floating_point() and b.is_floating_point()) or a.device.type != "cpu":
        cond = mask if mask.dtype == torch.bool else mask != 0
        return torch.where(cond, a, b) if out is None else torch.where(cond, a, b, out=out)
    dtype = torch.promote_types(a.dtype, b.dtype)
    weight = mask if mask.dtype == dtype else mask.to(dtype)
    if out is not None and out.dtype == dtype:
        return torch.lerp(b.to(dtype), a.to(dtype), weight, out=out)
    return torch.lerp(b.to(dtype), a.to(dtype), weight)


def cached(key: tuple[Any, ...], make: Any) -> Tensor:
    """Small constant matrices, built once per (kind, dtype, device) and kept in :data:`_cache`.

    ``device=None`` (``"None"`` in the key) means the default device, which a ``with
    torch.device(...)`` block changes: it is part of the key. Meta tensors (shape-only model
    building) are never kept. Makers build on the host and copy with ``non_blocking=True``: a
    blocking host → device copy waits for the device's queue to drain (a host sync), and the first
    use is inside a device step. The source is pageable memory, which CUDA stages before the call
    returns, so it may be freed at once.

    While ``torch.compile`` traces, a missing constant is built inside the graph and **not** stored:
    a stored graph output would live in the graph's memory (under CUDA graphs, overwritten at the
    next replay) and the store itself would change what the next call's guards see (a recompile).
    The compiled steps run their first batch eagerly (:meth:`dctnet.transforms.DeviceStep.compile`,
    :func:`dctnet.transforms.compile_step`), which builds every constant they use beforehand; a hit
    while tracing is a plain global read, a graph input."""
    if "None" in key and not torch.compiler.is_compiling():  # get_default_device(): no graph value (a break)
        default = str(torch.get_default_device())
        key = tuple(default if k == "None" else k for k in key)
    t = _cache.get(key)
    if t is None:
        t = make()
        if torch.compiler.is_compiling():
            traced_misses.append(str(key[0]))
        elif t.device.type != "meta":
            _cache[key] = t
    return t


def constant(name: str, values: Any, like: Tensor) -> Tensor:
    """A small constant tensor on ``like``'s dtype and device, built once (and copied without
    blocking): a ``torch.tensor(..., device=cuda)`` per call would be a blocking host-to-device copy
    (a sync) inside the device step."""
    return cached((name, like.dtype, str(like.device)),
                   lambda: torch.tensor(values, dtype=torch.float64).to(dtype=like.dtype, device=like.device,
                                                                         non_blocking=True))


def plain_eager(x: Tensor) -> bool:
    """Whether ``out=`` writes into views of a new tensor are allowed for ``x``'s result: floating,
    no gradient wanted, not being traced by ``torch.compile`` (autograd refuses ``out=``, dynamo
    breaks the graph on ``out=`` into a non-contiguous view)."""
    return (x.is_floating_point() and not (torch.is_grad_enabled() and x.requires_grad)
            and not torch.compiler.is_compiling())
