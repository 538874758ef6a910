r"""torchvision v2's ``RandomChoice``, ``RandomApply`` and ``RandomOrder`` over dctnet transforms.

torchvision calls a transform once per image for the per-sample ops (in its DataLoader workers) and
once per batch for the mixers (its reference's ``RandomChoice([MixUp, CutMix])`` on the collated
batch). So here a container of per-sample transforms draws **per sample** — which transform
(``RandomChoice``: index ``k`` with probability ``p[k]``, uniform by default, torchvision's
``multinomial``), whether the list runs (``RandomApply``: with probability ``p``), or in which order
(``RandomOrder``: a uniform permutation, torchvision's ``randperm``) — and a container of mixers draws
**once per batch**. Mixing the two kinds in one container is refused.

Batched and with fixed shapes: every child runs on the whole batch with its own draws, and each
sample keeps the result of what it drew (a ``where`` per child; labels too, for mixers' soft
targets), so every batch runs the same kernels whatever was drawn. The cost is every child on every
sample — and for ``RandomOrder`` every child in every slot of the order, ``n²`` runs for ``n``
children: these containers are for short lists (torchvision's reference: two mixers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from dctnet.transforms.base import Transform, in_domain, representation
from dctnet.transforms.counterparts import counterpart as counterpart_of

__all__ = ["RandomApply", "RandomChoice", "RandomOrder"]


class _Container(Transform):
    """Children run on the whole batch; each sample (or the whole batch, for mixers) keeps the
    output its draw selects."""

    takes_transforms = True

    def __init__(self, transforms: Sequence[Transform], seed: int | None = None) -> None:
        super().__init__(seed)
        transforms = list(transforms)
        if not transforms or not all(isinstance(t, Transform) for t in transforms):
            raise ValueError(f"{type(self).__name__}: transforms must be a non-empty list of dctnet transforms")
        kinds = {bool(t.acts_on_batch) for t in transforms}  # mixers act on the batch as a whole
        if len(kinds) > 1:
            raise ValueError(f"{type(self).__name__}: mixers (which act on the batch) and per-sample transforms cannot "
                             "share one container")
        self.transforms = nn.ModuleList(transforms)
        self.acts_on_batch = kinds.pop()  # a container of mixers acts on the batch, as its children do
        domains = {t.domain for t in transforms}
        self.domain = "pixel" if "pixel" in domains else ("coefficient" if "coefficient" in domains else "any")

    @property
    def batch_level(self) -> bool:
        """Whether this container holds mixers, drawn once per batch (:attr:`acts_on_batch`)."""
        return self.acts_on_batch

    def _child_params(self, shape, gen) -> list:
        return [t.draw_params(shape, gen) for t in self.transforms]

    def _prepare_labels(self, labels):
        return self.transforms[0]._prepare_labels(labels) if self.acts_on_batch else labels

    def prepare(self, params, shape, device):
        return {"children": [t.prepare(p, t._domain_shape(torch.Size(shape)), device)
                             for t, p in zip(self.transforms, params["children"])],
                "keep": params["keep"].to(device, non_blocking=True)}

    def execute(self, x, labels, prepared):
        return self._run_children(x, labels, prepared["children"], prepared["keep"])

    def extra_repr(self) -> str:  # the base's reads self.p, the per-sample coin these classes do not use
        return f"p={getattr(self, 'p_choice', getattr(self, 'p_apply', None))!r}"

    @classmethod
    def counterpart(cls, args: dict[str, Any], ctx):
        """torchvision v2's class of the same name over each child's counterpart, with the same ``p``."""
        from torchvision.transforms import v2  # optional dependency (the baseline's)

        return getattr(v2, cls.__name__)([counterpart_of(s, ctx) for s in args["transforms"]], p=args["p"])

    def _run_children(self, x: Tensor, labels: Tensor | None, children: list,
                      keep: Tensor) -> tuple[Tensor, Tensor | None]:
        """Each child on the whole batch with its prepared parameters ``children[k]``; ``keep (K, B)``:
        sample b keeps child k's output (at most one k per sample for a choice and for one slot of an
        order; for an apply, the children run in order and each keeps or not)."""
        labels = self._prepare_labels(labels)
        for k, (t, p) in enumerate(zip(self.transforms, children)):
            inp = in_domain(x, t.domain)
            out, out_labels = t.execute(inp, labels, p)
            out = in_domain(out, representation(x))  # back to the batch's representation
            m = keep[k]
            x = torch.where(m.reshape(-1, *([1] * (x.dim() - 1))), out.to(x.dtype), x)
            if out_labels is not None and labels is not None and out_labels is not labels:
                labels = torch.where(m.reshape(-1, *([1] * (labels.dim() - 1))), out_labels.to(labels.dtype), labels)
        return x, labels


class RandomChoice(_Container):
    """torchvision v2's ``RandomChoice(transforms, p=None)``: one of ``transforms``, index ``k`` with
    probability ``p[k]`` (normalised; uniform when ``None``) — per sample for per-sample transforms,
    once per batch for mixers (``RandomChoice([MixUp(0.2), CutMix(1.0)])``, torchvision's reference)."""

    summary = ("torchvision's `v2.RandomChoice`: one of `transforms` (probabilities `p`, uniform when null) — per "
               "sample, or once per batch for mixers (`[MixUp, CutMix]` as torchvision's reference)")
    runs_on = "its transforms'"

    def __init__(self, transforms: Sequence[Transform], p: Sequence[float] | None = None,
                 seed: int | None = None) -> None:
        super().__init__(transforms, seed)
        n = len(self.transforms)
        if p is None:
            p = [1.0] * n
        p = [float(v) for v in p]
        if len(p) != n or any(v < 0 for v in p) or sum(p) <= 0:
            raise ValueError(f"RandomChoice: p must be {n} non-negative weights with a positive sum, got {p!r}")
        total = sum(p)
        self.p_choice = [v / total for v in p]  # torchvision normalises p
        # a host tensor, not a buffer: the draw is host work, and .to(device) must not move it
        self._weights = torch.tensor(self.p_choice, dtype=torch.float64)

    def draw(self, shape, gen):
        n = 1 if self.acts_on_batch else shape[0]
        k = torch.multinomial(self._weights, n, replacement=True, generator=gen)
        k = k.expand(shape[0]) if self.acts_on_batch else k
        keep = k[None, :] == torch.arange(len(self.transforms))[:, None]
        return {"choice": k, "keep": keep, "children": self._child_params(shape, gen)}



class RandomApply(_Container):
    """torchvision v2's ``RandomApply(transforms, p=0.5)``: ``transforms`` in order with probability ``p``
    — per sample, or once per batch for mixers."""

    summary = "torchvision's `v2.RandomApply`: `transforms` in order with probability `p` (per sample; per batch for mixers)"
    runs_on = "its transforms'"

    def __init__(self, transforms: Sequence[Transform], p: float = 0.5, seed: int | None = None) -> None:
        super().__init__(transforms, seed)
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"RandomApply: p must be a probability in [0, 1], got {p!r}")
        self.p_apply = float(p)

    def draw(self, shape, gen):
        n = 1 if self.acts_on_batch else shape[0]
        on = (torch.rand(n, generator=gen, dtype=torch.float64) < self.p_apply).expand(shape[0])
        return {"keep": on[None, :].expand(len(self.transforms), shape[0]).clone(),
                "children": self._child_params(shape, gen)}


class RandomOrder(_Container):
    """torchvision v2's ``RandomOrder(transforms)``: every one of ``transforms``, in a uniformly random
    order (torchvision's ``randperm``) drawn per sample. Each transform's parameters are drawn once,
    so a sample meets each transform exactly once, with the same draw whatever its position.

    Per-sample transforms only: torchvision's ``MixUp`` / ``CutMix`` take class indices, so a second
    mixer after the first fails there too."""

    summary = "torchvision's `v2.RandomOrder`: all of `transforms`, in a uniformly random order per sample"
    runs_on = "its transforms'"

    def __init__(self, transforms: Sequence[Transform], seed: int | None = None) -> None:
        super().__init__(transforms, seed)
        if self.acts_on_batch:
            raise ValueError("RandomOrder: mixers take class indices (torchvision's too), so one cannot follow "
                             "another; use RandomChoice to pick one mixer per batch")

    def extra_repr(self) -> str:
        return f"n={len(self.transforms)}"

    @classmethod
    def counterpart(cls, args: dict[str, Any], ctx):
        """torchvision v2's ``RandomOrder`` over each child's counterpart."""
        from torchvision.transforms import v2  # optional dependency (the baseline's)

        return v2.RandomOrder([counterpart_of(s, ctx) for s in args["transforms"]])

    def draw(self, shape, gen):
        n = len(self.transforms)
        # argsort of i.i.d. uniforms: each of the n! orders equally likely (ties have probability ~0)
        order = torch.rand(shape[0], n, generator=gen, dtype=torch.float64).argsort(dim=1)
        # keep[s, k, b]: at slot s, sample b runs child k
        keep = order.T[:, None, :] == torch.arange(n)[None, :, None]
        return {"order": order, "keep": keep, "children": self._child_params(shape, gen)}

    def execute(self, x, labels, prepared):
        for keep in prepared["keep"]:  # one slot of the order after another: n passes of every child
            x, labels = self._run_children(x, labels, prepared["children"], keep)
        return x, labels
