r"""The fixed-shape slot scheduler of the policies (and ColorJitter): each sample's drawn ops, slot
after slot, run in groups — :func:`plan_slots` on the host, :func:`run_planned_slots` on the device.

Per slot: one warp for every geometric op, one blend for brightness/colour/contrast/sharpness, one
chain for the value-by-value ops (solarize, invert, solarize-add, posterize: each row's other ops
neutral), one group per other per-pixel op, each a batched kernel of :mod:`dctnet.kernels.policy`
over the rows that drew it (``index_select`` → kernel → ``index_copy_``), slot after slot, so every
sample sees its ops in its own draw order. A group has a fixed number of rows
(:func:`~dctnet.transforms.groups.group_capacity`, sized by :func:`capacities`; padding into
scratch rows past the batch), so every batch of a size runs the same kernels on the same shapes;
which rows is read off the host parameters: no device sync. ``capacity=None``: exact groups
instead (no padding). :func:`plan_masked` plans the masked form (every kernel on every row).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from dctnet.kernels import geometry as G
from dctnet.kernels import pixel as P
from dctnet.kernels.pil import PIL_WARP_AXES
from dctnet.kernels.policy import (BLEND_DEGENERATE, KERNELS, MAP_NEUTRAL, PIL_OPS, PIL_WARPS, POINT_OPS, TV_WARPS,
                                   Context, blend_slot, pil_warp, pil_warp_data, point_params, point_slot,
                                   round_to_levels, tv_warp_inverse)
from dctnet.transforms.groups import group_capacity, group_chunks, run_groups

__all__ = ["KINDS", "capacities", "group_probabilities", "op_kind", "plan_masked", "plan_slots", "run_planned_slots",
           "slot_groups"]


KINDS = ("none", "warp", "blend", "point", "map")


def op_kind(name: str) -> str:
    """``"none"``, ``"warp"``, ``"blend"``, ``"point"`` or ``"map"``: how a slot runs op ``name``."""
    if KERNELS[name] is None:
        return "none"
    if name in TV_WARPS or name in PIL_WARPS:
        return "warp"
    if name in POINT_OPS:
        return "point"
    return "blend" if name in BLEND_DEGENERATE else "map"


def slot_groups(names: Sequence[str]) -> list[str]:
    """The groups a slot runs, in order: ``"warp"`` (every geometric op: one warp), ``"blend"`` (every
    blend), ``"point"`` (every value-by-value op: one chain), then ``"map:NAME"`` per other per-pixel
    op of ``names``."""
    kinds = [op_kind(n) for n in names]
    groups = [k for k in ("warp", "blend", "point") if k in kinds]
    return groups + [f"map:{n}" for n, k in zip(names, kinds) if k == "map"]


def group_probabilities(names: Sequence[str], op: Tensor) -> dict[str, float]:
    """Per group, the largest fraction of samples that drew it in any slot, from many draws ``op (N, S)``
    (an upper estimate: + 4 standard errors): what :func:`group_capacity` sizes the groups by."""
    kinds = [op_kind(n) for n in names]
    n = max(1, op.shape[0])
    out = {}
    for g in slot_groups(names):
        ks = [k for k, (nm, kind) in enumerate(zip(names, kinds)) if g in (kind, f"map:{nm}")]
        freq = torch.isin(op, torch.tensor(ks)).double().mean(0).max().item() if op.numel() else 0.0
        out[g] = min(1.0, freq + 4.0 * math.sqrt(max(freq * (1 - freq), 1.0 / n) / n))
    return out


def plan_slots(names: Sequence[str], op: Tensor, arg: Tensor, size: tuple[int, int],
               capacity: dict[str, int] | None = None) -> list[dict[str, list[dict[str, Tensor]]]]:
    """Host: every slot of drawn ``op (B, S)`` (indices into ``names``, −1 none) and ``arg (B, S)`` as
    fixed-size groups of samples: per slot, per group of :func:`slot_groups`, chunks of
    ``capacity[group]`` rows — ``rows (C,)`` int64, the batch rows that drew an op of the group,
    padded with the scratch rows ``B, B + 1, …`` (distinct, so writes never collide) — and their
    parameters (``capacity=None``: exact groups, the rows that drew the group and no padding, no
    chunk for a group nobody drew, PIL warps one chunk per axis and blends and point ops one chunk
    per op — the least work, at shapes that follow the draws):

    - ``warp``: ``warp (C, 2, 3)`` (torchvision's inverse matrices) or ``pil_warp (C, 6)`` (PIL's
      data), the identity on padding;
    - ``blend``: ``factor (C,)`` and ``weights (C, 3)``, the one-hot weights of the grey image, mean
      grey and smoothed image in the degenerate image (all 0: black);
    - ``point``: :func:`point_params` (every op's neutral argument where the row drew another);
    - ``map:NAME``: ``arg (C,)`` (the op's neutral argument on padding).

    Every group has one chunk, whatever this batch drew (an empty one is all padding), unless more
    samples drew it than its capacity (then more chunks): every batch of a size runs the same kernels
    on the same shapes, and the work is the groups' capacities, not every op on every sample."""
    if op.device.type != "cpu" or arg.device.type != "cpu":
        raise ValueError("policies plan their slots on the host: op and arg must be CPU tensors")
    kinds = [op_kind(n) for n in names]
    batch = op.shape[0]
    arg = arg.to(torch.float64)
    groups = slot_groups(names)
    tv = any(n in TV_WARPS for n in names)
    if tv and any(n in PIL_WARPS for n in names):  # one warp a slot: one convention of matrices
        raise ValueError(f"a policy warps with torchvision's matrices or PIL's, not both: {tuple(names)}")
    plans = []
    for s in range(op.shape[1]):
        o, a = op[:, s], arg[:, s]
        kind_of = torch.tensor([KINDS.index(k) for k in kinds] + [0])[o]  # −1 → none
        plan: dict[str, list[dict[str, Tensor]]] = {}
        for g in groups:
            member = o == names.index(g[4:]) if g.startswith("map:") else kind_of == KINDS.index(g)
            rows = member.nonzero().squeeze(1)  # host tensors: no device read
            # exact groups: PIL warps one chunk per axis the ops sample along (pil_bicubic_affine's
            # axes), the shears and translations reading 4 taps instead of 16; blends and point ops one
            # chunk per op, each computing its own degenerate image or value map alone
            if capacity is not None or g.startswith("map:"):
                parts = [("xy", rows)]
            elif g == "warp":
                parts = [("xy", rows)] if tv else _pil_warp_axes(names, o, rows)
            else:
                parts = [("xy", rows[o[rows] == k]) for k in sorted(set(o[rows].tolist()))]
            chunks = []
            for axes, part in parts:
                for r, idx in group_chunks(part, batch, None if capacity is None else capacity.get(g, batch)):
                    chunks.append(_chunk(g, names, o[r], a[r], idx, size, tv, axes, exact=capacity is None))
            plan[g] = chunks
        plans.append(plan)
    return plans


def _pil_warp_axes(names: Sequence[str], op: Tensor, rows: Tensor) -> list[tuple[str, Tensor]]:
    """Host: the warp ``rows`` of one slot split by the axis their PIL op samples along — ``"x"``
    (shear / translate along x: every point on a pixel row), ``"y"``, and ``"xy"`` (rotations) —
    parts with no rows left out."""
    axis = [PIL_WARP_AXES[PIL_OPS[names[k]]] for k in op[rows].tolist()]
    parts = [(ax, rows[torch.tensor([a == ax for a in axis], dtype=torch.bool)]) for ax in ("x", "y", "xy")]
    return [(ax, part) for ax, part in parts if len(part)]


def _chunk(g: str, names: Sequence[str], o: Tensor, a: Tensor, idx: Tensor, size: tuple[int, int], tv: bool,
           axes: str, exact: bool) -> dict[str, Tensor | str | bool]:
    """Host: one chunk of group ``g`` — the rows ``idx`` (the members, whose ops and arguments are
    ``o``, ``a``, then padding) and the group's parameters (:func:`plan_slots`). ``exact``: the chunk
    holds only rows that drew the group, so what they drew may choose the kernel's work (host values
    ``axes``, ``terms``, ``drawn``); a fixed-size chunk always runs the whole kernel."""
    pad = len(idx) - len(o)
    oo = torch.cat([o, torch.full((pad,), -1, dtype=o.dtype)]) if pad else o
    aa = torch.cat([a, torch.zeros(pad, dtype=a.dtype)]) if pad else a
    chunk: dict[str, Tensor | str | bool] = {"rows": idx, "padded": not exact}
    if g == "warp":
        if tv:
            chunk["warp"] = tv_warp_inverse(names, oo, aa, size)
        else:
            chunk["pil_warp"], chunk["axes"] = pil_warp_data(names, oo, aa, size), axes
    elif g == "blend":
        chunk["factor"] = torch.where(oo >= 0, aa, 1.0)
        weights = torch.zeros(len(oo), 3, dtype=torch.float64)
        for k, n in enumerate(names):
            degenerate = BLEND_DEGENERATE.get(n, "zero")
            if degenerate != "zero":
                column = ("gray", "mean", "smooth").index(degenerate)
                weights[:, column] = torch.where(oo == k, 1.0, weights[:, column])
        chunk["weights"] = weights
        # which terms the degenerate image has (host bools: grey image, mean grey, smoothed image): an
        # exact chunk only those a row of it blends against (a term of weight 0 adds an exact 0); a
        # fixed-size one every term the policy's ops can use, whatever it holds
        used = {BLEND_DEGENERATE.get(n, "zero") for n in names}
        chunk["terms"] = tuple(bool(weights[:, i].any()) if exact else term in used
                               for i, term in enumerate(("gray", "mean", "smooth")))
    elif g == "point":
        chunk.update(point_params(names, oo, aa))
        if exact:  # run only the ops its rows drew: the others are exact identities on every row
            chunk["drawn"] = sorted({names[k] for k in o.tolist()})
    else:
        chunk["arg"] = torch.where(oo >= 0, aa, MAP_NEUTRAL[g[4:]])
    return chunk


def plan_masked(op: Tensor, arg: Tensor, n_kernels: int, device: torch.device | str,
                neutral: Sequence[float] | None = None) -> list[dict[str, Tensor]]:
    """Host: per-sample op lists for :func:`run_masked` — ``op (B, S)`` (the kernel each sample runs
    in slot ``s``, −1 for none) and ``arg (B, S)`` as per slot ``mask (K, B)`` and ``arg (K, B)``
    on ``device``, a sample that did not draw kernel ``k`` getting ``neutral[k]`` (default 1.0: a
    factor that changes nothing; its result is discarded anyway)."""
    if op.device.type != "cpu":
        raise ValueError("per-sample op lists are planned on the host: op must be a CPU tensor")
    neutral_t = torch.tensor([1.0] * n_kernels if neutral is None else list(neutral), dtype=torch.float64)
    ks = torch.arange(n_kernels)[:, None]
    plans = []
    for s in range(op.shape[1]):
        mask = op[None, :, s] == ks                                                    # (K, B)
        a = torch.where(mask, arg[None, :, s].to(torch.float64), neutral_t[:, None])
        plans.append({"mask": mask.to(device, non_blocking=True), "arg": a.to(device, non_blocking=True)})
    return plans


def capacities(names: Sequence[str], draw: Callable[[int, torch.Generator], Tensor], batch: int,
               cache: dict) -> dict[str, int]:
    """Each group's capacity for a batch of ``batch`` (:func:`group_capacity`), its probability
    estimated once from 20,000 draws of ``draw(n, generator) -> op (n, S)`` with a fixed seed (the
    policy's own generators are not touched), kept in ``cache``."""
    if "p" not in cache:
        cache["p"] = group_probabilities(names, draw(20_000, torch.Generator().manual_seed(0)))
    if batch not in cache:
        cache[batch] = {g: group_capacity(batch, p) for g, p in cache["p"].items()}
    return cache[batch]


def run_planned_slots(x: Tensor, plans: Sequence[dict[str, list[dict[str, Tensor]]]], names: Sequence[str],
                      ctx: Context, *, overwrite: bool = False) -> Tensor:
    """Device: every slot of :func:`plan_slots` — per group, its rows gathered (``index_select``), the
    group's kernel, written back (``index_copy_``) — with no host sync and the same kernels on the same
    shapes for every batch of a size. In a slot a sample belongs to one group at most, so the
    groups' order within a slot does not matter; slots run in order."""
    def kernel(sub: Tensor, g: str, ch: dict[str, Tensor]) -> Tensor:
        if g == "warp":
            if "warp" in ch:
                out = G.affine(sub, ch["warp"], interpolation=ctx.interpolation, fill=ctx.fill)
            else:
                # a tap at a time where the temporaries stay in a CPU's caches (an eager CPU step); a row of
                # four per gather elsewhere: 12 launches fewer, which an accelerator wants
                one_by_one = ch.get("padded") is False and sub.device.type == "cpu"
                out = pil_warp(sub, ch["pil_warp"], ctx, ch["axes"], one_by_one=one_by_one)
        elif g == "blend":
            out = blend_slot(sub, ch["factor"], ch["weights"], ch["terms"])
        elif g == "point":
            out = point_slot(sub, ch, ch.get("drawn", names))
        else:
            out = KERNELS[g[4:]](sub, ch["arg"], ctx)
        return round_to_levels(out, ctx.levels)

    groups = [(g, ch) for plan in plans for g, chunks in plan.items() for ch in chunks]  # slots in order
    work = P.as_compute_dtype(x)  # x itself, or a float32 copy of it (which is always safe to write into)
    return run_groups(work, groups, kernel, overwrite=overwrite or work is not x).to(x.dtype)
