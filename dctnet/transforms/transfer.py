"""A batch's plan on the device in one copy.

:meth:`~dctnet.transforms.Transform.prepare` turns the host-drawn parameters into a plan: nested
dicts and lists of small tensors (rows of groups, warp matrices, factors, boxes, noise keys) and host
values (strings, bools, ints). Copied tensor by tensor, DeiT's list is ~44 host → device transfers per
batch, each a separate driver call from pageable memory (staged through a bounce buffer) and, under
CUDA graphs, a separate static-input copy. Here the plan is made on the host and moved as one buffer:

1. :func:`pack_plan` lays every host tensor of the plan out in one ``uint8`` buffer, grouped by dtype
   (one segment per dtype, each aligned to 16 bytes), in pinned memory when CUDA is there;
2. one ``copy`` with ``non_blocking=True`` puts the buffer on the device (:func:`move_plan`);
3. :func:`unpack_plan` views it back into the plan's tree: one ``view(dtype)`` per segment, then a
   slice and ``reshape`` per tensor — views, no kernels. Inside a compiled step the buffer itself is
   the graph's input (:class:`~dctnet.transforms.CompiledHalf`), so CUDA graphs copy one input, not
   one per tensor.

:class:`PlanLayout` (the tree's structure, each tensor's dtype, shape and offset, the host values) is
hashable; a compiled step interns the layouts it runs (``pack_plan(..., intern=True)``: one object
per batch size for its guards). Eager steps do not: their exact groups give nearly every batch a
layout of its own, and a table of them would grow for the whole run.

On a CPU device nothing is packed: the plan is already where it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import TreeSpec, tree_flatten, tree_unflatten

__all__ = ["PackedPlan", "PlanLayout", "move_plan", "pack_plan", "unpack_plan"]

_ALIGN = 16

#: one object per distinct layout a compiled step ran (its guards compare it by identity); only those
#: (:class:`~dctnet.transforms.CompiledHalf` packs one signature per batch size), so it stays small
_INTERNED: dict["PlanLayout", "PlanLayout"] = {}


@dataclass(frozen=True)
class PlanLayout:
    """Where each piece of a packed plan lies.

    ``spec``: the plan's tree structure; ``segments``: per dtype, ``(dtype, byte offset, element
    count)``; ``leaves``: per leaf, ``("t", segment index, element offset, shape)`` for a packed tensor,
    ``("d", index)`` for a tensor already on the device (kept beside the buffer), or ``("v", value)``
    for a host value; ``nbytes``: the buffer's size."""

    spec: TreeSpec
    segments: tuple[tuple[torch.dtype, int, int], ...]
    leaves: tuple[tuple[Any, ...], ...]
    nbytes: int


@dataclass
class PackedPlan:
    """A plan as one ``uint8`` buffer (``(layout.nbytes,)``, on the device after :func:`move_plan`),
    its :class:`PlanLayout`, and the plan's tensors that were already on the device."""

    buffer: Tensor
    layout: PlanLayout
    resident: tuple[Tensor, ...] = ()

    def unpack(self) -> Any:
        return unpack_plan(self.buffer, self.layout, self.resident)


def _is_host(t: Tensor, device: torch.device) -> bool:
    return t.device.type == "cpu" and device.type != "cpu"


def pack_plan(plan: Any, device: torch.device | str, *, intern: bool = False) -> PackedPlan:
    """``plan``'s host tensors packed into one host buffer (pinned when CUDA is available), to go to
    ``device``; tensors already elsewhere than the host stay as they are (:attr:`PackedPlan.resident`).
    ``intern``: the layout object is shared by every equal layout (for a compiled graph's guards)."""
    device = torch.device(device)
    leaves, spec = tree_flatten(plan)
    by_dtype: dict[torch.dtype, list[int]] = {}
    for i, v in enumerate(leaves):
        if isinstance(v, Tensor) and _is_host(v, device):
            by_dtype.setdefault(v.dtype, []).append(i)
    segments, where, offset = [], {}, 0
    for s, (dtype, members) in enumerate(sorted(by_dtype.items(), key=lambda kv: str(kv[0]))):
        count = 0
        for i in members:
            where[i] = (s, count)
            count += leaves[i].numel()
        segments.append((dtype, offset, count))
        size = count * torch.empty((), dtype=dtype).element_size()
        offset += -(-size // _ALIGN) * _ALIGN
    pin = torch.cuda.is_available()  # (pinned memory needs a CUDA runtime; a CPU-only machine has none)
    buffer = torch.empty(offset, dtype=torch.uint8, pin_memory=pin)
    described, resident = [], []
    for i, v in enumerate(leaves):
        if i in where:
            s, start = where[i]
            dtype, byte, count = segments[s]
            view = buffer[byte:byte + count * v.element_size()].view(dtype)
            view[start:start + v.numel()].copy_(v.reshape(-1))
            described.append(("t", s, start, tuple(v.shape)))
        elif isinstance(v, Tensor):
            described.append(("d", len(resident)))
            resident.append(v)
        else:
            described.append(("v", v))
    layout = PlanLayout(spec, tuple(segments), tuple(described), offset)
    if intern:
        layout = _INTERNED.setdefault(layout, layout)
    return PackedPlan(buffer, layout, tuple(resident))


def unpack_plan(buffer: Tensor, layout: PlanLayout, resident: tuple[Tensor, ...] = ()) -> Any:
    """The plan's tree from its packed ``buffer`` (``uint8 (layout.nbytes,)``, wherever it is): views
    of it, no copy — traceable by ``torch.compile``."""
    typed = [buffer[byte:byte + count * torch.empty((), dtype=dtype).element_size()].view(dtype)
             for dtype, byte, count in layout.segments]
    leaves = []
    for kind, *rest in layout.leaves:
        if kind == "t":
            s, start, shape = rest
            n = 1
            for d in shape:
                n *= d
            leaves.append(typed[s][start:start + n].view(shape))
        elif kind == "d":
            leaves.append(resident[rest[0]])
        else:
            leaves.append(rest[0])
    return tree_unflatten(leaves, layout.spec)


def move_plan(plan: Any, device: torch.device | str) -> Any:
    """``plan`` (made on the host) on ``device`` in one ``non_blocking`` copy of its packed tensors;
    on a CPU device, ``plan`` as it is."""
    device = torch.device(device)
    if device.type == "cpu":
        return plan
    packed = pack_plan(plan, device)
    if not packed.layout.segments:
        return plan
    packed.buffer = packed.buffer.to(device, non_blocking=True)
    return packed.unpack()
