r"""Augmentation policies drawn per sample and applied batched: torchvision's ``RandAugment``,
``TrivialAugmentWide`` and ``AutoAugment``, and timm's policy strings (``rand-m9-mstd0.5-inc1``,
``original``, ``v0``, ``3a``, …).

torchvision draws one op list per call — for a batch, one list for every sample; timm draws per
image in a CPU worker with PIL. Here every sample draws its own ops, magnitudes, signs and
per-op coins on the host (one seeded ``torch.Generator``, vectorised over the batch). Each slot then
runs in groups (:mod:`dctnet.transforms.slots`: :func:`~dctnet.transforms.slots.plan_slots` on the
host, :func:`~dctnet.transforms.slots.run_planned_slots` on the device; the kernels:
:mod:`dctnet.kernels.policy`), so every sample sees its ops in its own draw order and every batch of
a size runs the same kernels on the same shapes. ``set_fixed_shapes(False)``: exact groups instead
(no padding).

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
(exact up to that clamp); inside a :class:`~dctnet.transforms.compose.Compose` the batch simply stays
in pixels until an op needs coefficients.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

# the slot scheduler and the policies' kernels, re-exported here for the ops that run slots (ColorJitter)
from dctnet.kernels.policy import KERNELS, Context, Kernel, run_masked
from dctnet.transforms.groups import may_overwrite, to_device
from dctnet.transforms.slots import capacities, plan_masked, plan_slots, run_planned_slots
from dctnet.transforms.transform import Transform

__all__ = ["KERNELS", "Context", "Kernel", "Policy", "capacities", "plan_masked", "plan_slots", "run_masked",
           "run_planned_slots", "to_device"]


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
        return run_planned_slots(x, prepared, self.ops, Context(self.interpolation, fill, self.pixel_levels),
                                 overwrite=may_overwrite(self, x)), labels

    def op_names(self, params: dict[str, Tensor]) -> list[list[str]]:
        """The ops each sample ran, in order (for notebooks and tests)."""
        return [[self.ops[k] for k in row if k >= 0] for row in params["op"].tolist()]
