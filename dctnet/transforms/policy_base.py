r"""Augmentation policies drawn per sample and applied batched: torchvision's ``RandAugment``,
``TrivialAugmentWide`` and ``AutoAugment``, and timm's policy strings (``rand-m9-mstd0.5-inc1``,
``original``, ``v0``, ``3a``, …).

torchvision draws one op list per call — for a batch, one list for every sample; timm draws per
image in a CPU worker with PIL. Here every sample draws its own ops, magnitudes, signs and
per-op coins on the host (one seeded ``torch.Generator``, vectorised over the batch). Each slot then
runs in groups (:func:`plan_slots` on the host, :func:`run_planned_slots` on the device): one warp
for every geometric op, one blend for brightness/colour/contrast/sharpness, one chain for the
value-by-value ops (solarize, invert, solarize-add, posterize: each row's other ops neutral), one
group per other per-pixel op, each a batched kernel of :mod:`dctnet.kernels.pixel` /
:mod:`~dctnet.kernels.geometry` over the rows that drew it (``index_select`` → kernel →
``index_copy_``), slot after slot, so every sample
sees its ops in its own draw order. A group has a fixed number of rows (:func:`group_capacity`,
padding into scratch rows past the batch), so every batch of a size runs the same kernels on the same
shapes; which rows is read off the host parameters: no device sync. ``set_fixed_shapes(False)``:
exact groups instead (no padding).

Parameters of a batch (``draw_params``): ``op (B, S)`` int64 — the index of the op each sample runs
in slot ``s`` in :attr:`Policy.ops`, or −1 where the slot does nothing (timm's per-op coin, an
AutoAugment sub-policy op that did not fire) — and ``arg (B, S)`` float64, the op's argument in
the kernel's units (degrees, pixels, a factor, bits, a threshold on the [0, 1] scale). The
magnitude conventions of each library are resolved at draw time:

- **torchvision** (``RandAugment``, ``TrivialAugmentWide``, ``AutoAugment``): op uniform over its
  space, magnitude from its bins (``linspace`` per op, sizes from the image), a sign coin for signed
  ops; Brightness/Color/Contrast/Sharpness take ``1 + m``; TranslateX/Y ``int(m)`` pixels; ShearX/Y
  ``atan(m)`` degrees about the corner (``center=[0, 0]``); Solarize the threshold ``m``;
  Posterize ``int(m)`` bits. Fill: ``fill`` (default black), interpolation ``nearest`` by default.
- **timm** (``TimmAugment``): ``rand``: ``n`` ops uniform with replacement (or timm's weights),
  each applied with probability ``p`` (0.5), magnitude ``m`` plus N(0, ``mstd``) noise (uniform in
  [0, m] for ``mstd`` > 100), clipped to [0, ``mmax``]; timm's level functions (``inc1``:
  the increasing variants); PIL's geometry (shear and translate about the corner, rotate about the
  centre, fractional translations); fill = the dataset mean rounded to 8 bits, as timm's
  ``create_transform`` sets it; interpolation ``bicubic`` as DeiT's ``--train-interpolation``.

The pixel ops work on RGB ``(B, 3, H, W)`` in [0, 1] and clamp as torchvision does after each op.
A coefficient image ``(B, 3, Hb, Wb, 64)`` is decoded to RGB first and encoded back afterwards
(exact up to that clamp); inside a :class:`~dctnet.transforms.base.Compose` the batch simply stays
in pixels until an op needs coefficients.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from dctnet.kernels import geometry as G
from dctnet.kernels import pixel as P
from dctnet.kernels.cache import plain_eager, select
from dctnet.kernels.pil import PIL_AFFINE_OPS, PIL_WARP_AXES, pil_affine_data, pil_bicubic_affine, pil_posterize
from dctnet.transforms.base import (Transform, group_capacity, group_chunks, may_overwrite, round_to_levels, run_groups,
                                   to_device)

__all__ = ["KERNELS", "Kernel", "Policy"]


#: the argument an op receives: kernel(img (n, 3, H, W), arg (n,) on img's device, ctx) -> img
Kernel = Callable[[Tensor, Tensor, "_Context"], Tensor]


@dataclass
class _Context:
    """What the geometric ops need besides their argument: the interpolation and the fill
    (``(3,)`` RGB on the [0, 1] scale, or None for black)."""

    interpolation: str
    fill: Tensor | None
    #: round each op's result to these levels (256: 8-bit pixels), or None
    levels: int | None = None


def _zeros(n: int, like: Tensor) -> Tensor:
    return torch.zeros(n, dtype=like.dtype, device=like.device)


def _tv_affine(angle=None, translate=None, shear=None, corner: bool = False) -> Kernel:
    """torchvision's ``F.affine`` with one of its arguments per sample (the others neutral)."""

    def kernel(img: Tensor, arg: Tensor, ctx: _Context) -> Tensor:
        n = img.shape[0]
        zero = _zeros(n, arg)
        ang = arg if angle else zero
        tr = torch.stack([arg.trunc() if translate == "x" else zero, arg.trunc() if translate == "y" else zero], 1)
        deg = torch.rad2deg(torch.atan(arg))
        sh = torch.stack([deg if shear == "x" else zero, deg if shear == "y" else zero], 1)
        center = torch.zeros(2, dtype=arg.dtype, device=arg.device) if corner else None
        inv = G.affine_matrix(ang, tr, torch.ones_like(arg), sh, center, size=tuple(img.shape[-2:]))
        return G.affine(img, inv, interpolation=ctx.interpolation, fill=ctx.fill)

    return kernel


def _tv_rotate(img: Tensor, arg: Tensor, ctx: _Context) -> Tensor:
    return G.rotate(img, arg, interpolation=ctx.interpolation, fill=ctx.fill)


#: the policies' names of PIL's geometric ops → :func:`dctnet.kernels.pil.pil_affine_data`'s (``PilShearX``: ``shear_x``)
PIL_OPS = {f"Pil{which.title().replace('_', '')}": which for which in PIL_AFFINE_OPS}


def _pil_affine(which: str) -> Kernel:
    """PIL's ``Image.transform(size, AFFINE, data)`` as timm calls it: shear about the corner,
    translation by a (fractional) number of pixels, or ``Image.rotate`` about the centre."""

    def kernel(img: Tensor, arg: Tensor, ctx: _Context) -> Tensor:
        data = pil_affine_data(which, arg, size=tuple(img.shape[-2:]))
        return _pil_warp(img, data, ctx, PIL_WARP_AXES[which])  # shears and translations: along one axis only

    return kernel





























def _blur(img: Tensor, arg: Tensor, ctx: _Context) -> Tensor:
    # PIL's GaussianBlur(radius) has standard deviation `radius`; a kernel reaching 3σ of the largest
    # radius timm draws (2.0) covers it
    return P.gaussian_blur(img, 13, arg)


#: every op a policy can name → its batched kernel (``arg`` in the kernel's units)
KERNELS: dict[str, Kernel | None] = {
    "Identity": None,
    # torchvision's geometry
    "ShearX": _tv_affine(shear="x", corner=True),
    "ShearY": _tv_affine(shear="y", corner=True),
    "TranslateX": _tv_affine(translate="x"),
    "TranslateY": _tv_affine(translate="y"),
    "Rotate": _tv_rotate,
    # PIL's geometry (timm)
    "PilShearX": _pil_affine("shear_x"),
    "PilShearY": _pil_affine("shear_y"),
    "PilTranslateX": _pil_affine("translate_x"),
    "PilTranslateY": _pil_affine("translate_y"),
    "PilRotate": _pil_affine("rotate"),
    # colour and tone (the same kernels serve both libraries; factors and thresholds are resolved at draw time)
    "Brightness": lambda img, a, ctx: P.adjust_brightness(img, a),
    "Color": lambda img, a, ctx: P.adjust_saturation(img, a),
    "Contrast": lambda img, a, ctx: P.adjust_contrast(img, a),
    "Sharpness": lambda img, a, ctx: P.adjust_sharpness(img, a),
    "Posterize": lambda img, a, ctx: P.posterize(img, a.long()),
    "PilPosterize": lambda img, a, ctx: pil_posterize(img, a.long()),
    "Solarize": lambda img, a, ctx: P.solarize(img, a),
    "SolarizeAdd": lambda img, a, ctx: P.solarize_add(img, a, torch.full_like(a, 128.0 / 255.0)),
    "AutoContrast": lambda img, a, ctx: P.autocontrast(img),
    "Equalize": lambda img, a, ctx: P.equalize(img),
    "Invert": lambda img, a, ctx: P.invert(img),
    "Grayscale": lambda img, a, ctx: P.rgb_to_grayscale(img),
    "GaussianBlur": _blur,
    "Hue": lambda img, a, ctx: P.adjust_hue(img, a),  # ColorJitter's (no policy draws it)
}


# ---------------------------------------------------------------------- fixed-shape slots
#: the blend ops: ``f·x + (1 − f)·D`` with the degenerate image ``D`` each op blends against —
#: black (brightness), the sample's grey image (colour), its mean grey level (contrast) or its
#: 3×3-smoothed image (sharpness)
BLEND_DEGENERATE = {"Brightness": "zero", "Color": "gray", "Contrast": "mean", "Sharpness": "smooth"}
#: the geometric ops: one affine warp per slot; torchvision's (centred matrices) and PIL's (timm)
TV_WARPS = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")
PIL_WARPS = ("PilShearX", "PilShearY", "PilTranslateX", "PilTranslateY", "PilRotate")
#: the value-by-value ops, one "point" group a slot: each row runs a chain of them in which its own op
#: has its argument and the others their neutral one (an exact identity: a solarize threshold above 1,
#: nothing below a solarize-add threshold of 0, a posterize flag off / 8 PIL bits); Invert is the
#: solarize with threshold 0
POINT_OPS = ("Invert", "Solarize", "SolarizeAdd", "Posterize", "PilPosterize")
#: the other per-pixel ops, each a group of its own; the argument a padding row is given (any value the
#: kernel computes finitely with; its result goes to a scratch row)
MAP_NEUTRAL = {"AutoContrast": 0.0, "Equalize": 0.0, "Grayscale": 0.0, "GaussianBlur": 1.0, "Hue": 0.0}


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


def _tv_warp_inverse(names: Sequence[str], op: Tensor, arg: Tensor, size: tuple[int, int]) -> Tensor:
    """Host: each sample's torchvision inverse matrix ``(B, 2, 3)`` float64 for its op in one slot
    (``op (B,)`` indexes ``names``), the identity where it drew no torchvision warp. The arguments
    are those :func:`_tv_affine` / :func:`_tv_rotate` give ``affine_matrix``, sample by sample:
    shears about the corner, translations by ``int`` pixels, rotations about the centre."""
    h, w = size
    is_ = {n: torch.zeros_like(op, dtype=torch.bool) for n in TV_WARPS}
    for k, n in enumerate(names):
        if n in is_:
            is_[n] = is_[n] | (op == k)
    zero = torch.zeros_like(arg)
    deg = torch.rad2deg(torch.atan(arg))
    angle = torch.where(is_["Rotate"], -torch.remainder(arg, 360.0), zero)
    tr = torch.stack([torch.where(is_["TranslateX"], arg.trunc(), zero),
                      torch.where(is_["TranslateY"], arg.trunc(), zero)], 1)
    sh = torch.stack([torch.where(is_["ShearX"], deg, zero), torch.where(is_["ShearY"], deg, zero)], 1)
    corner = (is_["ShearX"] | is_["ShearY"])[:, None]
    # the image centre as a pixel coordinate gives affine_matrix's centred offset 0 exactly, as center=None does
    center = torch.where(corner, torch.zeros(1, 2, dtype=arg.dtype),
                         torch.tensor([[w * 0.5, h * 0.5]], dtype=arg.dtype))
    return G.affine_matrix(angle, tr, torch.ones_like(arg), sh, center, size=size)


def _pil_warp_data(names: Sequence[str], op: Tensor, arg: Tensor, size: tuple[int, int]) -> Tensor:
    """Host: each sample's PIL ``Image.transform(AFFINE)`` data ``(B, 6)`` for its op in one slot, the
    identity ``(1, 0, 0, 0, 1, 0)`` where it drew no PIL warp (as :func:`_pil_affine` builds them)."""
    one, zero = torch.ones_like(arg), torch.zeros_like(arg)
    data = torch.stack([one, zero, zero, zero, one, zero], 1)
    drawn = set(op.tolist())  # the host's ops: only those drawn are built (a CPU's exact chunks hold one)
    for k, n in enumerate(names):
        if n in PIL_WARPS and k in drawn:
            data = torch.where((op == k)[:, None], pil_affine_data(PIL_OPS[n], arg, size=size), data)
    return data


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
    - ``point``: :func:`_point_params` (every op's neutral argument where the row drew another);
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
            chunk["warp"] = _tv_warp_inverse(names, oo, aa, size)
        else:
            chunk["pil_warp"], chunk["axes"] = _pil_warp_data(names, oo, aa, size), axes
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
        chunk.update(_point_params(names, oo, aa))
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


def run_masked(x: Tensor, plans: Sequence[dict[str, Tensor]],
               kernels: Sequence[Callable[[Tensor, Tensor], Tensor] | None]) -> Tensor:
    """Device: slot after slot, every kernel on the whole batch, its result kept where the sample drew
    it (:func:`plan_masked`): each sample sees its ops in its own order, with fixed shapes."""
    view = (-1,) + (1,) * (x.dim() - 1)
    for plan in plans:
        for k, kernel in enumerate(kernels):
            if kernel is not None:
                x = select(plan["mask"][k].reshape(view), kernel(x, plan["arg"][k]).to(x.dtype), x)
    return x


def _point_params(names: Sequence[str], op: Tensor, arg: Tensor) -> dict[str, Tensor]:
    """Host: a point group's per-row arguments ``(C,)`` float64 for :func:`_point_slot`, from each row's
    op ``op (C,)`` (indexes ``names``; −1 padding) and ``arg (C,)``: ``solarize`` (the threshold;
    Invert 0, neutral 2), ``add`` and ``add_threshold`` (SolarizeAdd's; neutral threshold 0), ``bits``
    with ``posterize`` (torchvision's, whose 8 bits are not the identity: 1 where drawn) and
    ``pil_bits`` (PIL's; neutral 8)."""
    is_ = {n: (op == names.index(n)) if n in names else torch.zeros_like(op, dtype=torch.bool) for n in POINT_OPS}
    const = lambda v: torch.full_like(arg, v)  # noqa: E731
    return {"solarize": torch.where(is_["Solarize"], arg, torch.where(is_["Invert"], 0.0, const(2.0))),
            "add": torch.where(is_["SolarizeAdd"], arg, 0.0),
            "add_threshold": torch.where(is_["SolarizeAdd"], 128.0 / 255.0, const(0.0)),
            "bits": torch.where(is_["Posterize"], arg.trunc(), 8.0), "posterize": is_["Posterize"].double(),
            "pil_bits": torch.where(is_["PilPosterize"], arg.trunc(), 8.0)}


def _point_slot(x: Tensor, ch: dict[str, Tensor], names: Sequence[str]) -> Tensor:
    """Device: the point group's chain on ``x (C, 3, H, W)`` — solarize (Invert too), solarize-add,
    posterize — each row through the ops of ``names`` only, its own op with its argument and the
    others neutral (:func:`_point_params`): exactly the one op it drew."""
    # x is the group's own copy of its rows: each op writes where it reads
    if "Invert" in names or "Solarize" in names:
        x = P.solarize(x, ch["solarize"], inplace=True)
    if "SolarizeAdd" in names:
        x = P.solarize_add(x, ch["add"], ch["add_threshold"], inplace=True)
    if "Posterize" in names:
        x = select(P.per_sample(ch["posterize"], x) > 0, P.posterize(x, ch["bits"]), x)
    if "PilPosterize" in names:
        x = pil_posterize(x, ch["pil_bits"])
    return x


def _blend_slot(x: Tensor, factor: Tensor, weights: Tensor, terms: tuple[bool, bool, bool]) -> Tensor:
    """``clamp(f·x + (1 − f)·D, 0, 1)`` per sample, ``D = w₀·grey + w₁·mean grey + w₂·smoothed``
    (torchvision's ``_blend`` against each op's degenerate image: ``D = 0`` is brightness), with the
    terms ``terms`` says are in use (host bools, in that order; the others have weight 0 on every row,
    and leaving them out changes no bit: each adds an exact 0). The smoothed image is torchvision's
    sharpness degenerate: the 3×3 ``[[1, 1, 1], [1, 5, 1], [1, 1, 1]]/13`` filter inside, the image
    itself on the one-pixel border. ``x`` is the group's own copy of its rows
    (:func:`run_planned_slots`): the blend is written into it, torchvision's ``_blend`` term by term."""
    f = P.per_sample(factor, x)
    wts = weights.to(device=x.device, dtype=x.dtype, non_blocking=True)
    use_gray, use_mean, smooth = terms
    degenerate = None
    if use_gray or use_mean:
        gray = P.gray(x)
        degenerate = wts[:, 0, None, None, None] * gray + wts[:, 1, None, None, None] * gray.mean(dim=(-3, -2, -1), keepdim=True)
    h, w = x.shape[-2:]
    if smooth:
        blurred = x.clone()  # images of 2 pixels or less across have no interior: torchvision leaves them as they are
        if h > 2 and w > 2:
            blurred[..., 1:-1, 1:-1] = P.smooth_interior(x)
        blurred = wts[:, 2, None, None, None] * blurred
        degenerate = blurred if degenerate is None else degenerate + blurred
    if not plain_eager(x):  # autograd or a trace: no writes into x
        return P.blend(x, degenerate if degenerate is not None else torch.zeros_like(x[:, :1]), f)
    if degenerate is None:  # brightness alone: f·x + 0
        return x.mul_(f).clamp_(0.0, 1.0)
    return x.mul_(f).add_(degenerate * (1.0 - f)).clamp_(0.0, 1.0)


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
                      ctx: "_Context", *, overwrite: bool = False) -> Tensor:
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
                out = _pil_warp(sub, ch["pil_warp"], ctx, ch["axes"], one_by_one=one_by_one)
        elif g == "blend":
            out = _blend_slot(sub, ch["factor"], ch["weights"], ch["terms"])
        elif g == "point":
            out = _point_slot(sub, ch, ch.get("drawn", names))
        else:
            out = KERNELS[g[4:]](sub, ch["arg"], ctx)
        return round_to_levels(out, ctx.levels)

    groups = [(g, ch) for plan in plans for g, chunks in plan.items() for ch in chunks]  # slots in order
    work = P.as_compute_dtype(x)  # x itself, or a float32 copy of it (which is always safe to write into)
    return run_groups(work, groups, kernel, overwrite=overwrite or work is not x).to(x.dtype)


def _pil_warp(img: Tensor, data: Tensor, ctx: "_Context", axes: str = "xy", one_by_one: bool = False) -> Tensor:
    if ctx.interpolation == "bicubic":
        return pil_bicubic_affine(img, data, ctx.fill, axes, one_by_one=one_by_one)
    inv = G.pil_affine_inverse(data, size=tuple(img.shape[-2:]))
    return G.affine(img, inv, interpolation=ctx.interpolation, fill=ctx.fill)


class Policy(Transform):
    """Base of the policies: subclasses draw ``{"op": (B, S), "arg": (B, S)}`` over :attr:`ops` (names
    of :data:`KERNELS`); this class runs them slot by slot, one batched kernel per (slot, group, chunk)
    (:func:`plan_slots`, :func:`run_planned_slots`)."""

    domain = "pixel"
    eight_bit_op = True
    ops: tuple[str, ...] = ()

    def __init__(self, seed: int | None, interpolation: str, fill: float | Sequence[float] | None) -> None:
        super().__init__(seed)
        if interpolation not in ("nearest", "bilinear", "bicubic"):
            raise ValueError(f"{type(self).__name__}: interpolation must be 'nearest', 'bilinear' or 'bicubic', "
                             f"got {interpolation!r}")
        if fill is not None:
            values = [float(fill)] * 3 if isinstance(fill, (int, float)) else [float(v) for v in fill]
            if len(values) != 3 or not all(0.0 <= v <= 1.0 for v in values):
                raise ValueError(f"{type(self).__name__}: fill must be a number or 3 numbers in [0, 1] (RGB on the "
                                 f"[0, 1] scale), got {fill!r}")
            fill = tuple(values)
        self.interpolation, self.fill = interpolation, fill
        # a buffer, so it moves with .to(device): building it per call would be a host-to-device copy
        self.register_buffer("fill_rgb", None if fill is None else torch.tensor(fill, dtype=torch.float32),
                             persistent=False)

    def prepare(self, params, shape, device):
        """The slots planned on the host in groups sized for this batch (:func:`plan_slots`), copied to
        ``device``."""
        cap = capacities(self.ops, lambda n, g: self.draw(torch.Size((n, *shape[1:])), g)["op"], shape[0],
                         self.__dict__.setdefault("_capacity_cache", {})) if self.fixed_shapes else None
        return to_device(plan_slots(self.ops, params["op"], params["arg"], tuple(shape[-2:]), cap), device)

    def execute(self, x, labels, prepared):
        fill = None if self.fill_rgb is None else self.fill_rgb.to(x.device, non_blocking=True)
        return run_planned_slots(x, prepared, self.ops, _Context(self.interpolation, fill, self.pixel_levels),
                                 overwrite=may_overwrite(self, x)), labels

    def op_names(self, params: dict[str, Tensor]) -> list[list[str]]:
        """The ops each sample ran, in order (for notebooks and tests)."""
        return [[self.ops[k] for k in row if k >= 0] for row in params["op"].tolist()]
