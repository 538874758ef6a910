"""Groups of rows and writes in place: how a transform runs an op on only the samples that drew it.

The host sorts the rows of a batch that drew one kind of op into groups of a fixed size
(:func:`group_capacity`, :func:`group_chunks`: padding rows go to scratch rows past the batch), so
every batch of a size runs the same kernels on the same shapes; the device gathers each group's
rows, runs the kernel and writes them back (:func:`run_groups`). A running
:class:`~dctnet.transforms.compose.Compose` marks the intermediate a transform may write into
(:func:`owning`, read by :func:`may_overwrite`), a per-thread flag. :func:`to_device` copies a plan."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = ["OVERFLOW", "group_capacity", "group_chunks", "may_overwrite", "owning", "run_groups", "shares_memory",
           "to_device"]


#: the chance that more samples of a batch draw one kind of op (or erase) than the group of rows
#: sized for it holds; then the group runs a second chunk: exact all the same, but the step's shapes
#: change for that batch
OVERFLOW = 1e-6


def group_capacity(batch: int, p: float, tail: float = OVERFLOW) -> int:
    """The smallest ``c`` with ``P(Binomial(batch, p) > c) ≤ tail``, at least 1: how many samples a
    group of ops is given room for when each sample draws it with probability ``p``."""
    if p <= 0.0:
        return 1
    if p >= 1.0:
        return max(1, batch)
    log_p, log_q = math.log(p), math.log1p(-p)
    cdf = 0.0
    for c in range(batch + 1):
        cdf += math.exp(math.lgamma(batch + 1) - math.lgamma(c + 1) - math.lgamma(batch - c + 1)
                        + c * log_p + (batch - c) * log_q)
        if 1.0 - cdf <= tail:
            return max(1, c)
    return batch


def group_chunks(rows: Tensor, batch: int, capacity: int | None) -> list[tuple[Tensor, Tensor]]:
    """Host: the ``rows`` (int64, on the host) of a batch of ``batch`` that drew one kind of op, as
    groups of ``capacity`` rows: per group ``(members, index)``, ``index`` = the members padded with
    the scratch rows ``batch, batch + 1, …`` (distinct, so writes never collide). One group when the
    rows fit, even none (all padding); more in the rare batch where they do not. ``capacity=None``:
    exact groups — the rows alone, and no group when there are none."""
    if capacity is None:
        cap, total = max(len(rows), 1), len(rows)
    else:
        cap, total = max(1, min(batch, capacity)), max(len(rows), 1)
    chunks = []
    for start in range(0, total, cap):
        members = rows[start:start + cap]
        pad = cap - len(members)
        chunks.append((members, torch.cat([members, torch.arange(batch, batch + pad)]) if pad else members))
    return chunks



#: per thread, the (transform, input) a running Compose lets write into its input (:func:`may_overwrite`)
_OWNED = threading.local()


def may_overwrite(transform: Any, x: Tensor) -> bool:
    """Whether ``transform.execute`` may write into its input ``x``: a :class:`Compose` is running
    ``transform`` itself (not a transform nested in it, whose caller may still read ``x``) on one of
    its intermediates (made by an earlier transform of the list, sharing no memory with the list's
    input, which is the caller's), nothing wants its gradient, and no ``torch.compile`` trace is
    running. A transform that asks must not read ``x`` after writing it."""
    if torch.compiler.is_compiling():  # checked first: dynamo does not trace the thread-local
        return False
    return getattr(_OWNED, "step", None) == (id(transform), id(x)) and not (torch.is_grad_enabled() and x.requires_grad)


@contextlib.contextmanager
def owning(transform: Any, x: Any, owned: bool) -> Iterator[None]:
    """While a :class:`~dctnet.transforms.compose.Compose` runs ``transform`` on ``x``: ``owned`` says
    that ``x`` is the list's own intermediate, which :func:`may_overwrite` then lets ``transform``
    write into. The previous mark comes back afterwards (a Compose nested in another)."""
    before = getattr(_OWNED, "step", None)
    _OWNED.step = (id(transform), id(x)) if owned else None
    try:
        yield
    finally:
        _OWNED.step = before


def shares_memory(a: Tensor, b: Any) -> bool:
    """Whether ``a`` may share memory with ``b`` (the same storage; yes when it cannot tell: a layout
    without one storage, or ``b`` not a tensor)."""
    if not isinstance(b, Tensor) or torch.compiler.is_compiling():  # a storage's address is no graph value
        return True
    try:
        return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # sparse and other storage-less layouts
        return True


def run_groups(x: Tensor, groups: Sequence[tuple[Any, dict[str, Tensor]]],
               kernel: Callable[[Tensor, Any, dict[str, Tensor]], Tensor], *, overwrite: bool = False) -> Tensor:
    """Device: for each ``(key, group)`` in order, ``kernel(rows of x, key, group)`` on the rows
    ``group["rows"]`` (:func:`group_chunks`' index), written back; padding rows land in scratch rows
    past the batch. The shapes are the groups', whatever the values. A group that says
    ``group["padded"] = False`` (a host bool: exact groups, every row in the batch) needs no
    scratch row: when none is padded the batch is copied without the scratch rows' zeros, and with
    ``overwrite`` (:func:`may_overwrite`) not copied at all — the rows are written into ``x``."""
    if not groups:
        return x
    scratch = max((len(g["rows"]) for _, g in groups if g.get("padded", True)), default=0)
    buf = torch.cat([x, x.new_zeros(scratch, *x.shape[1:])]) if scratch else x if overwrite else x.clone()
    for key, g in groups:
        rows = g["rows"]
        buf.index_copy_(0, rows, kernel(buf.index_select(0, rows), key, g).to(buf.dtype))
    return buf[:x.shape[0]]


def to_device(tree, device: torch.device | str):
    """A plan (nested lists and dicts of host tensors) copied to ``device`` with ``non_blocking=True``;
    strings, numbers and booleans in it (what a kernel decides on the host) stay as they are."""
    if isinstance(tree, Tensor):
        return tree.to(device, non_blocking=True)
    if tree is None or isinstance(tree, (str, bool, int, float)):
        return tree
    if isinstance(tree, dict):
        return {k: to_device(v, device) for k, v in tree.items()}
    return [to_device(v, device) for v in tree]
