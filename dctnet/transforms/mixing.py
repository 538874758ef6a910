r"""Batch mixing with the reference libraries' semantics: timm's :class:`Mixup` (mixup / CutMix
switch, modes ``batch`` / ``pair`` / ``elem``, label smoothing) and torchvision v2's :class:`MixUp`
and :class:`CutMix`.

Every class takes either representation, with a kernel registered for each
(:func:`~dctnet.transforms.base.kernel`):

- pixels ``(B, C, H, W)`` (float): boxes are drawn in pixels exactly as the reference draws them;
- a coefficient image ``(B, 3, Hb, Wb, 64)``: the box is drawn in pixels, as the reference would
  for an image of ``8·Hb × 8·Wb``, then *snapped to the 8-pixel block grid* (each edge to the
  nearest multiple of 8, halves up) and λ is recomputed from the area actually pasted (always —
  ``correct_lam`` only concerns pixel batches there). The pasting is then exact in the DCT domain:
  mixing ``from_rgb(x)`` equals ``from_rgb`` of mixing ``x`` with the same (aligned) box.

Labels are class indices ``(B,)`` (integers; one-hot over ``num_classes``) or soft targets
``(B, K)``; the output is soft ``(B, K)`` (float32 from indices, soft targets keep their floating
dtype).

Parameters (host tensors, first dimension ``B``, replayable with ``params=``; the per-batch draws of
``mode="batch"`` and of torchvision's classes are broadcast to every sample):

- ``perm`` ``(B,)`` long — each sample's partner;
- ``lam`` ``(B,)`` float64 — the label weight of the sample itself (after timm's / torchvision's λ
  correction from the box area), also the pixel weight for mixup; 1 where nothing is mixed;
- ``mixed`` ``(B,)`` bool — whether the sample is mixed at all;
- ``cutmix`` ``(B,)`` bool and ``boxes`` ``(B, 4)`` long ``(top, left, height, width)`` in pixels
  (multiples of 8 for a coefficient image) — the box pasted from the partner where ``cutmix``.

Partners: timm pairs sample ``i`` with the mirrored batch (``x.flip(0)``, partner ``B − 1 − i``).
For an odd ``B`` its middle sample ``m = B // 2`` would be paired with itself (timm's
``Mixup.__call__`` asserts an even batch): here it takes its neighbour ``m − 1`` as partner instead,
one way (``m − 1`` keeps its own mirror), and in ``mode="pair"`` it gets a λ / box draw of its own.
torchvision pairs ``i`` with ``i − 1`` (``roll(1, 0)``), never itself for ``B ≥ 2``. A batch of one
has no partner: it is left unmixed (timm's targets are still label-smoothed).

Draws come from the host generator of the call (:class:`~dctnet.transforms.base.Transform`):
Beta(α, α) as ``G1 / (G1 + G2)`` of ``torch._standard_gamma``, the switch as ``rand < switch_prob``,
the application coin as ``rand < prob``, integers as the references' (uniform over the same range).
The base class's per-sample ``p`` is not used (``p=None``): timm's ``prob`` is the probability here.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch
from torch import Tensor

from dctnet.kernels.boxes import box_mask, image_geometry, snap_to_blocks
from dctnet.kernels.cache import select
from dctnet.transforms.base import Transform, kernel, may_overwrite

__all__ = ["CutMix", "MixUp", "Mixup"]

_MODES = ("batch", "pair", "elem")
_F64 = torch.float64


# ---------------------------------------------------------------------- shared helpers
def _beta(alpha: Tensor, gen: torch.Generator) -> Tensor:
    """Beta(α, α) per entry of ``alpha`` (float64) as G1 / (G1 + G2), Gi ~ Gamma(α) from ``gen``
    (``torch.distributions.Beta`` takes no generator). Both gammas underflowing to 0 (tiny α, rare)
    gives 1 (unmixed) instead of 0/0."""
    g1 = torch._standard_gamma(alpha, generator=gen)
    g2 = torch._standard_gamma(alpha, generator=gen)
    s = g1 + g2
    return torch.where(s > 0, g1 / torch.where(s > 0, s, 1.0), 1.0)


def _soft_targets(name: str, labels: Tensor | None, num_classes: int | None, smoothing: float = 0.0) -> Tensor:
    """Labels as soft targets ``(B, K)`` with timm's label smoothing (off = s/K, on = 1 − s + off;
    soft targets: ``y·(1 − s) + s/K``, the same on a one-hot). Integer labels give float32 (built as
    timm's ``one_hot``: a ``full`` of off values with on values scattered), soft ones keep their
    floating dtype."""
    if labels is None:
        raise ValueError(f"{name} needs labels: call it as t(x, labels)")
    if not isinstance(labels, Tensor):
        raise TypeError(f"{name}: labels must be a tensor, got {type(labels).__name__}")
    if labels.dim() == 1:
        if labels.is_floating_point() or labels.dtype == torch.bool:
            raise ValueError(f"{name}: 1-D labels must be integer class indices, got dtype {labels.dtype}")
        if num_classes is None:
            raise ValueError(f"{name} needs num_classes for integer labels")
        # a host check (free on the CPU); never on a device (a read-back) nor in a compiled graph (a branch
        # on values breaks it in two)
        if (labels.device.type == "cpu" and labels.numel() and not torch.compiler.is_compiling()
                and (labels.min() < 0 or labels.max() >= num_classes)):
            raise ValueError(f"{name}: labels must be in 0..{num_classes - 1}, got {labels.min()}..{labels.max()}")
        off = smoothing / num_classes
        on = 1.0 - smoothing + off
        return torch.full((labels.shape[0], num_classes), off, device=labels.device).scatter_(
            1, labels.long().view(-1, 1), on)
    if labels.dim() == 2:
        if num_classes is not None and labels.shape[1] != num_classes:
            raise ValueError(f"{name}: soft targets have {labels.shape[1]} classes, num_classes is {num_classes}")
        y = labels if labels.is_floating_point() else labels.float()
        if smoothing:
            y = y * (1.0 - smoothing) + smoothing / labels.shape[1]
        return y
    raise ValueError(f"{name}: labels must be class indices (B,) or soft targets (B, K), got shape {tuple(labels.shape)}")


def _mix(name: str, x: Tensor, labels: Tensor, params: dict[str, Tensor], inplace: bool,
         coefficients: bool) -> tuple[Tensor, Tensor]:
    """The batched kernel of every class here: mixup ``λ·x + (1 − λ)·x[perm]`` or the partner's box
    pasted, per sample, and ``λ·y + (1 − λ)·y[perm]`` for the targets. No loop, no host sync.
    ``inplace``: the result is written into ``x`` (:func:`dctnet.transforms.groups.may_overwrite`);
    ``coefficients``: ``x`` is a coefficient image (the registered kernel's representation)."""
    if labels.shape[0] != x.shape[0]:
        raise ValueError(f"{name}: {labels.shape[0]} labels for a batch of {x.shape[0]}")
    perm, lam = params["perm"], params["lam"]
    box = params.get("paste_box")
    if box is not None:  # every sample pastes its partner's same box (timm's batch mode, torchvision's CutMix)
        top, left, h, w = (v // 8 for v in box) if coefficients else box  # coefficient images: in blocks
        # clipped to the image as box_mask clips (a replayed box may start above or left of it)
        region = (slice(None), slice(None), slice(max(top, 0), max(top + h, 0)), slice(max(left, 0), max(left + w, 0)))
        out = x if inplace else x.clone()
        out[region] = x[region].index_select(0, perm)  # the box alone (copied first), not a batch-sized mask and select
    else:
        # not x[perm]: a CPU pays 2.5x the copy
        out = _blend_and_paste(x, x.index_select(0, perm), params, inplace, coefficients)
    y = labels * lam.to(labels.dtype)[:, None] + labels[perm] * (1.0 - lam).to(labels.dtype)[:, None]
    return (x.clone() if out is x and not inplace else out), y  # a new tensor, as when something was mixed


def _blend_and_paste(x: Tensor, xp: Tensor, params: dict[str, Tensor], inplace: bool, coefficients: bool) -> Tensor:
    """:func:`_mix`'s pixels through per-sample weights and a mask, ``xp`` the partners. One blend
    and one paste over the batch (each pass over it is what a CPU pays for): a sample mixed by mixup
    blends with weights λ and 1 − λ (cast to x's dtype as the references' scalar multiplies do: in
    float64 first), in the references' order of operations, so that the pixels are theirs bit for bit
    (a lerp would save a pass and differ in the last bit); every other sample takes weights 1 and 0,
    which give x back exactly (x and its partner are finite), and a CutMix sample then has its
    partner's box pasted (the box is empty elsewhere). With exact groups (a CPU's) the host said which
    half some sample of this batch uses (``blend``, ``paste``)."""
    view = (-1,) + (1,) * (x.dim() - 1)
    lam, mixed = params["lam"], params["mixed"]
    paste = "boxes" in params and params.get("paste", True)
    out = x
    if params.get("blend", True):
        blend = mixed if "cutmix" not in params else mixed & ~params["cutmix"]
        w_x = torch.where(blend, lam, 1.0).to(x.dtype).reshape(view)
        w_p = torch.where(blend, 1.0 - lam, 0.0).to(x.dtype).reshape(view)
        if inplace and not paste:  # the same products and sum, written where they are read (xp is ours)
            out = x.mul_(w_x).add_(xp.mul_(w_p))
        else:
            out = x * w_x + xp * w_p
    if paste:
        pasted = (params["cutmix"] & mixed)[:, None]
        out = select(box_mask(x, torch.where(pasted, params["boxes"], 0), coefficients=coefficients), xp, out)
    return out


def _prepare_mix(transform: Transform, params: dict[str, Tensor], shape, device) -> dict[str, Tensor | bool]:
    """:meth:`Transform.prepare` of the mixers, plus, with exact groups (no fixed shapes: a CPU's
    eager run), host flags saying whether any sample of the batch blends (``blend``) or pastes a box
    (``paste``): timm's ``batch`` mode does one or the other for the whole batch, so half of
    :func:`_mix` would compute weights of 1 and empty boxes; and when every sample pastes one and the
    same box (timm's ``batch`` CutMix, torchvision's ``CutMix``), that box (``paste_box``, host ints
    in pixels), which :func:`_mix` copies as a slice instead of selecting through a batch-sized mask."""
    prepared = Transform.prepare(transform, params, shape, device)
    if not transform.fixed_shapes:
        mixed, cut = params["mixed"], params.get("cutmix")
        prepared["blend"] = bool((mixed if cut is None else mixed & ~cut).any())
        prepared["paste"] = cut is not None and bool((mixed & cut).any())
        if prepared["paste"] and not prepared["blend"] and bool((mixed & cut).all()):
            boxes = params["boxes"]
            if bool((boxes == boxes[:1]).all()):  # one box for the batch: paste it as a slice
                prepared["paste_box"] = tuple(int(v) for v in boxes[0])
    return prepared


def _probability(name: str, arg: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0.0 <= float(v) <= 1.0:
        raise ValueError(f"{name}: {arg} must be a probability in [0, 1], got {v!r}")
    return float(v)


def _num_classes(name: str, v: object) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise ValueError(f"{name}: num_classes must be a positive int or None, got {v!r}")
    return int(v)


def timm_partners(batch: int) -> Tensor:
    """timm's partners, the mirrored batch ``B − 1 − i``, except that the middle sample of an odd
    batch (which timm would mix with itself) takes its neighbour ``B // 2 − 1``."""
    perm = torch.arange(batch - 1, -1, -1)
    if batch % 2 and batch > 1:
        perm[batch // 2] = batch // 2 - 1
    return perm


def torchvision_partners(batch: int) -> Tensor:
    """torchvision's partners, ``roll(1, 0)``: sample ``i`` takes ``i − 1`` (and 0 takes ``B − 1``)."""
    return (torch.arange(batch) - 1) % max(batch, 1)


# ---------------------------------------------------------------------- timm
class _Mixer(Transform):
    """What timm's and torchvision's mixers share: the host plan (:func:`_prepare_mix`) and the batched
    kernel (:func:`_mix`), one registered per representation. Mixers act on the collated batch
    (:attr:`~dctnet.transforms.transform.Transform.acts_on_batch`): last in an augment list."""

    acts_on_batch = True

    def prepare(self, params, shape, device):
        return _prepare_mix(self, params, shape, device)

    @kernel("pixel")
    def _pixels(self, x, labels, params):
        return _mix(type(self).__name__, x, labels, params, may_overwrite(self, x), coefficients=False)

    @kernel("coefficient")
    def _coefficients(self, x, labels, params):
        return _mix(type(self).__name__, x, labels, params, may_overwrite(self, x), coefficients=True)


class Mixup(_Mixer):
    """timm's ``timm.data.Mixup`` as a batched transform (see the module docstring for
    representations, partners and parameters).

    ``mixup_alpha`` / ``cutmix_alpha``: Beta(α, α) of each, active when > 0 (at least one must be,
    or ``cutmix_minmax`` given). ``cutmix_minmax=(lo, hi)``: CutMix boxes with sides uniform in
    ``[int(lo·side), int(hi·side))`` (timm's ``rand_bbox_minmax``; as in timm this forces
    ``cutmix_alpha = 1``). ``prob``: probability of mixing — per batch in ``mode="batch"``, per
    sample (``elem``) or per pair (``pair``). ``switch_prob``: probability of CutMix instead of mixup
    when both are active. ``mode``: ``"batch"`` (one λ and one mixup/CutMix choice for the batch),
    ``"elem"`` (per sample), ``"pair"`` (per pair ``(i, B − 1 − i)``: both get the same λ and box).
    ``correct_lam``: λ from the clipped box's area (timm's ``correct_lam``; always with minmax and on
    coefficient images). ``label_smoothing``: timm's smoothing of the targets (before mixing).

    Numerics follow timm: in ``elem`` / ``pair`` modes λ is float32 (timm's ``lam_batch``), so the
    box side is ``int(H·sqrt(1 − λ))`` in float32 there and in float64 in ``batch`` mode.
    A ``cutmix_minmax`` range empty at the image size (``int(hi·side) == int(lo·side)``, where
    numpy's ``randint`` raises) gives the side ``int(lo·side)``."""

    summary = ("timm's `Mixup` (modes `batch`, `pair`, `elem`); partner = the mirrored batch, never the sample itself; "
               "smoothing from `optim.label_smoothing`")

    @classmethod
    def counterpart(cls, args, ctx):
        from timm.data import Mixup as TimmMixup  # slow to import

        return TimmMixup(mixup_alpha=args["mixup_alpha"], cutmix_alpha=args["cutmix_alpha"],
                         cutmix_minmax=args["cutmix_minmax"], prob=args["prob"], switch_prob=args["switch_prob"],
                         mode=args["mode"], correct_lam=args["correct_lam"], label_smoothing=ctx.label_smoothing,
                         num_classes=ctx.num_classes)

    def __init__(self, mixup_alpha: float = 1.0, cutmix_alpha: float = 0.0,
                 cutmix_minmax: tuple[float, float] | None = None, prob: float = 1.0, switch_prob: float = 0.5,
                 mode: str = "batch", correct_lam: bool = True, label_smoothing: float = 0.1,
                 num_classes: int | None = None, seed: int | None = None) -> None:
        super().__init__(seed, p=None)
        name = type(self).__name__
        for arg, v in (("mixup_alpha", mixup_alpha), ("cutmix_alpha", cutmix_alpha)):
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name}: {arg} must be a number >= 0 (0 disables it), got {v!r}")
        if cutmix_minmax is not None:
            if (isinstance(cutmix_minmax, (str, bytes)) or not isinstance(cutmix_minmax, Sequence)
                    or len(cutmix_minmax) != 2
                    or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in cutmix_minmax)
                    or not 0.0 < cutmix_minmax[0] < cutmix_minmax[1] <= 1.0):
                raise ValueError(f"{name}: cutmix_minmax must be a pair (lo, hi) with 0 < lo < hi <= 1, "
                                 f"got {cutmix_minmax!r}")
            cutmix_minmax = (float(cutmix_minmax[0]), float(cutmix_minmax[1]))
        if mixup_alpha <= 0 and cutmix_alpha <= 0 and cutmix_minmax is None:
            raise ValueError(f"{name}: mixup_alpha and cutmix_alpha are both <= 0 (and no cutmix_minmax): "
                             "nothing to mix; set one of them > 0")
        if mode not in _MODES:
            raise ValueError(f"{name}: mode must be one of {', '.join(map(repr, _MODES))}, got {mode!r}")
        if not isinstance(correct_lam, bool):
            raise ValueError(f"{name}: correct_lam must be a bool, got {correct_lam!r}")
        if (isinstance(label_smoothing, bool) or not isinstance(label_smoothing, numbers.Real)
                or not 0.0 <= label_smoothing < 1.0):
            raise ValueError(f"{name}: label_smoothing must be in [0, 1), got {label_smoothing!r}")
        self.mixup_alpha, self.cutmix_alpha, self.cutmix_minmax = float(mixup_alpha), float(cutmix_alpha), cutmix_minmax
        self.prob = _probability(name, "prob", prob)
        self.switch_prob = _probability(name, "switch_prob", switch_prob)
        self.mode, self.correct_lam, self.label_smoothing = mode, correct_lam, float(label_smoothing)
        self.num_classes = _num_classes(name, num_classes)
        # timm: "force cutmix alpha == 1.0 when minmax active"
        self._cutmix_alpha = 1.0 if cutmix_minmax is not None else self.cutmix_alpha

    # ------------------------------------------------------------------ draws
    def _units(self, batch: int) -> int:
        """Independent draws per batch: 1 (batch), B (elem), ⌈B/2⌉ (pair: one per pair, plus the
        middle sample of an odd batch)."""
        return {"batch": 1, "elem": batch, "pair": (batch + 1) // 2}[self.mode]

    def _draw_units(self, n: int, height: int, width: int, gen: torch.Generator) -> dict[str, Tensor]:
        """``n`` independent raw draws (the sampler): ``use_cutmix`` (n,) bool, ``lam`` (n,) float64
        (Beta draw; float32-rounded in elem/pair as timm's), ``coin`` (n,) bool (``rand < prob``),
        ``ints`` (n, 4) long — the box integers: ``(cy, cx, 0, 0)`` (``rand_bbox``) or
        ``(cut_h, cut_w, yl, xl)`` (``rand_bbox_minmax``)."""
        ma, ca = self.mixup_alpha, self._cutmix_alpha
        if ma > 0 and ca > 0:
            use_cutmix = torch.rand(n, generator=gen, dtype=_F64) < self.switch_prob
        else:
            use_cutmix = torch.full((n,), ca > 0)
        alpha = torch.where(use_cutmix, ca, ma).to(_F64)
        lam = _beta(alpha, gen)
        if self.mode != "batch":
            lam = lam.float().double()
        coin = torch.rand(n, generator=gen, dtype=_F64) < self.prob
        if self.cutmix_minmax is None:
            cy = torch.randint(0, height, (n,), generator=gen)
            cx = torch.randint(0, width, (n,), generator=gen)
            ints = torch.stack([cy, cx, torch.zeros_like(cy), torch.zeros_like(cx)], 1)
        else:
            lo, hi = self.cutmix_minmax
            sides = []
            for side in (height, width):
                a, b = int(side * lo), int(side * hi)
                sides.append(a + (torch.rand(n, generator=gen, dtype=_F64) * max(b - a, 1)).long())
            cut_h, cut_w = sides
            yl = (torch.rand(n, generator=gen, dtype=_F64) * (height - cut_h + 1)).long()
            xl = (torch.rand(n, generator=gen, dtype=_F64) * (width - cut_w + 1)).long()
            ints = torch.stack([cut_h, cut_w, yl, xl], 1)
        return {"use_cutmix": use_cutmix, "lam": lam, "coin": coin, "ints": ints}

    def _unit_params(self, coef: bool, height: int, width: int, use_cutmix: Tensor, lam: Tensor, coin: Tensor,
                     ints: Tensor) -> dict[str, Tensor]:
        """Per-unit ``mixed``, ``cutmix``, ``lam`` (the label weight) and ``boxes`` from the raw draws
        of :meth:`_draw_units`: timm's ``rand_bbox`` / ``rand_bbox_minmax`` and
        ``cutmix_bbox_and_lam`` arithmetic, then the snapping of a coefficient image."""
        f32 = self.mode != "batch"
        lam = torch.where(coin, lam.to(_F64), 1.0)
        mixed = coin & (lam != 1.0)
        if self.cutmix_minmax is None:
            ratio = torch.sqrt(1.0 - (lam.float() if f32 else lam))
            cut_h = torch.floor(height * ratio).long()
            cut_w = torch.floor(width * ratio).long()
            cy, cx = ints[:, 0], ints[:, 1]
            yl = torch.clamp(cy - cut_h // 2, 0, height)
            yh = torch.clamp(cy + (cut_h + 1) // 2, 0, height)
            xl = torch.clamp(cx - cut_w // 2, 0, width)
            xh = torch.clamp(cx + (cut_w + 1) // 2, 0, width)
            top, left, h, w = yl, xl, yh - yl, xh - xl
        else:
            h, w, top, left = ints.unbind(1)
        if coef:
            top, left, h, w = snap_to_blocks(top, left, h, w)
        area_lam = 1.0 - (h * w).to(_F64) / float(height * width)
        correct = coef or self.correct_lam or self.cutmix_minmax is not None
        cutmix = use_cutmix & mixed
        lam = torch.where(cutmix & correct, area_lam, lam)
        if f32:
            lam = lam.float().double()
        return {"mixed": mixed, "cutmix": cutmix, "lam": torch.where(mixed, lam, 1.0),
                "boxes": torch.stack([top, left, h, w], 1)}

    def _params_from_draws(self, shape: Sequence[int], use_cutmix: Tensor, lam: Tensor, coin: Tensor,
                           ints: Tensor) -> dict[str, Tensor]:
        """Per-sample parameters from the raw draws of :meth:`_draw_units` (one per unit), expanded
        to the batch: unit 0 for every sample (batch), unit i (elem), unit min(i, B − 1 − i) (pair;
        the middle sample of an odd batch has the last unit)."""
        coef, height, width = image_geometry(shape, type(self).__name__)
        batch = int(shape[0])
        u = self._unit_params(coef, height, width, use_cutmix, lam, coin, ints)
        if batch < 2:  # no partner
            u["mixed"] = torch.zeros_like(u["mixed"])
            u["cutmix"] = torch.zeros_like(u["cutmix"])
            u["lam"] = torch.ones_like(u["lam"])
        i = torch.arange(batch)
        unit = {"batch": torch.zeros_like(i), "elem": i, "pair": torch.minimum(i, batch - 1 - i)}[self.mode]
        return {"perm": timm_partners(batch), **{k: v[unit] for k, v in u.items()}}

    def draw(self, shape, gen):
        _, height, width = image_geometry(shape, type(self).__name__)
        return self._params_from_draws(shape, **self._draw_units(self._units(int(shape[0])), height, width, gen))

    # ------------------------------------------------------------------ apply
    def _prepare_labels(self, labels):
        return _soft_targets(type(self).__name__, labels, self.num_classes, self.label_smoothing)


# ---------------------------------------------------------------------- torchvision v2
class MixUp(_Mixer):
    """torchvision v2's ``MixUp``: one λ ~ Beta(α, α) per batch, sample ``i`` mixed with ``i − 1``
    (``roll(1, 0)``), labels one-hot then mixed (no smoothing). Always applied (torchvision's class
    has no probability; wrap it for one). Parameters as in the module docstring (``cutmix`` and
    ``boxes`` only for :class:`CutMix`)."""

    summary = "torchvision's `v2.MixUp` (one λ per batch, partner = the batch rolled by one)"

    @classmethod
    def counterpart(cls, args, ctx):
        from torchvision.transforms import v2  # optional dependency (the baseline's)

        return getattr(v2, cls.__name__)(alpha=args["alpha"], num_classes=ctx.num_classes)

    def __init__(self, alpha: float = 1.0, num_classes: int | None = None, seed: int | None = None) -> None:
        super().__init__(seed, p=None)
        name = type(self).__name__
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not math.isfinite(alpha) or alpha <= 0:
            raise ValueError(f"{name}: alpha must be a number > 0, got {alpha!r}")
        self.alpha = float(alpha)
        self.num_classes = _num_classes(name, num_classes)

    def _params_from_draws(self, shape: Sequence[int], lam: float | Tensor) -> dict[str, Tensor]:
        """Per-sample parameters from the batch's λ."""
        image_geometry(shape, type(self).__name__)
        batch = int(shape[0])
        lam = torch.as_tensor(lam, dtype=_F64).reshape(())
        mixed = torch.full((batch,), batch >= 2)
        return {"perm": torchvision_partners(batch), "lam": torch.where(mixed, lam, 1.0), "mixed": mixed}

    def draw(self, shape, gen):
        image_geometry(shape, type(self).__name__)
        return self._params_from_draws(shape, _beta(torch.full((1,), self.alpha, dtype=_F64), gen)[0])

    def _prepare_labels(self, labels):
        return _soft_targets(type(self).__name__, labels, self.num_classes)


class CutMix(MixUp):
    """torchvision v2's ``CutMix``: one λ ~ Beta(α, α) per batch; centre ``r_x, r_y`` uniform
    integers; half sides ``int(0.5·sqrt(1 − λ)·W)``, ``int(0.5·sqrt(1 − λ)·H)``; the box clamped to
    the image and λ recomputed from its area; pasted from sample ``i − 1`` (``roll(1, 0)``). On a
    coefficient image the box is snapped to the block grid first (module docstring)."""

    summary = "torchvision's `v2.CutMix` (one λ per batch, box from sample i − 1, λ from the clipped box's area)"

    @staticmethod
    def _box(coef: bool, height: int, width: int, lam: Tensor, r_x: Tensor, r_y: Tensor) -> tuple[Tensor, Tensor]:
        """Boxes ``(n, 4)`` (top, left, h, w) and the adjusted λ ``(n,)`` (float64) from ``n`` draws
        ``(λ, r_x, r_y)``: torchvision's ``make_params`` arithmetic (float64, as Python's), then the
        snapping of a coefficient image."""
        lam = torch.as_tensor(lam, dtype=_F64).reshape(-1)
        r_x = torch.as_tensor(r_x, dtype=torch.long).reshape(-1)
        r_y = torch.as_tensor(r_y, dtype=torch.long).reshape(-1)
        r = 0.5 * torch.sqrt(1.0 - lam)
        r_w_half, r_h_half = torch.floor(r * width).long(), torch.floor(r * height).long()
        x1, y1 = torch.clamp(r_x - r_w_half, min=0), torch.clamp(r_y - r_h_half, min=0)
        x2, y2 = torch.clamp(r_x + r_w_half, max=width), torch.clamp(r_y + r_h_half, max=height)
        top, left, h, w = y1, x1, y2 - y1, x2 - x1
        if coef:
            top, left, h, w = snap_to_blocks(top, left, h, w)
        return torch.stack([top, left, h, w], 1), 1.0 - (h * w).to(_F64) / float(width * height)

    def _params_from_draws(self, shape: Sequence[int], lam: float | Tensor, r_x: int | Tensor = 0,
                           r_y: int | Tensor = 0) -> dict[str, Tensor]:
        """Per-sample parameters from the batch's draws ``(λ, r_x, r_y)`` (torchvision's ``make_params``)."""
        coef, height, width = image_geometry(shape, type(self).__name__)
        batch = int(shape[0])
        box, lam_adjusted = self._box(coef, height, width, lam, r_x, r_y)
        mixed = torch.full((batch,), batch >= 2)
        return {"perm": torchvision_partners(batch), "lam": torch.where(mixed, lam_adjusted, 1.0), "mixed": mixed,
                "cutmix": mixed.clone(), "boxes": box.expand(batch, 4).clone()}

    def draw(self, shape, gen):
        _, height, width = image_geometry(shape, type(self).__name__)
        lam = _beta(torch.full((1,), self.alpha, dtype=_F64), gen)[0]
        r_x = torch.randint(0, width, (1,), generator=gen)[0]
        r_y = torch.randint(0, height, (1,), generator=gen)[0]
        return self._params_from_draws(shape, lam, r_x, r_y)
