"""torchvision's ``RandAugment``, ``TrivialAugmentWide`` and ``AutoAugment``, drawn per sample and
applied batched (how: :mod:`dctnet.transforms.policy_base`).

Op uniform over torchvision's space, magnitude from its bins (``linspace`` per op, sizes from the
image), a sign coin for signed ops; Brightness/Color/Contrast/Sharpness take ``1 + m``;
TranslateX/Y ``int(m)`` pixels; ShearX/Y ``atan(m)`` degrees about the corner
(``center=[0, 0]``); Solarize the threshold ``m``; Posterize ``int(m)`` bits. Fill: ``fill``
(default black), interpolation ``nearest`` by default.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from dctnet.transforms.base import image_size
from dctnet.transforms.policy_base import Policy

__all__ = ["AutoAugment", "RandAugment", "TrivialAugmentWide"]


def _signed(m: Tensor, signed: Tensor, gen: torch.Generator) -> Tensor:
    """torchvision's sign coin: a signed op's magnitude is negated with probability ½."""
    flip = torch.rand(m.shape, generator=gen, dtype=torch.float64) <= 0.5
    return torch.where(signed & flip, -m, m)


def _tv_space(kind: str, bins: int, height: int, width: int) -> dict[str, tuple[Tensor | None, bool]]:
    """torchvision's ``_AUGMENTATION_SPACE`` of ``RandAugment`` / ``TrivialAugmentWide`` /
    ``AutoAugment``: op → (magnitudes over the bins, signed)."""
    # float32 as torchvision builds them: int(magnitude) of a translation depends on it (32·15/30 is
    # 15.999999 in float32, so torchvision translates by 15 pixels there)
    lin = lambda hi: torch.linspace(0.0, hi, bins).double()  # noqa: E731
    if kind == "wide":
        space = {"Identity": (None, False), "ShearX": (lin(0.99), True), "ShearY": (lin(0.99), True),
                 "TranslateX": (lin(32.0), True), "TranslateY": (lin(32.0), True), "Rotate": (lin(135.0), True),
                 "Brightness": (lin(0.99), True), "Color": (lin(0.99), True), "Contrast": (lin(0.99), True),
                 "Sharpness": (lin(0.99), True),
                 "Posterize": ((8 - (torch.arange(bins) / ((bins - 1) / 6))).round().int().double(), False)}
    else:
        space = {"Identity": (None, False), "ShearX": (lin(0.3), True), "ShearY": (lin(0.3), True),
                 "TranslateX": (lin(150.0 / 331.0 * width), True), "TranslateY": (lin(150.0 / 331.0 * height), True),
                 "Rotate": (lin(30.0), True), "Brightness": (lin(0.9), True), "Color": (lin(0.9), True),
                 "Contrast": (lin(0.9), True), "Sharpness": (lin(0.9), True),
                 "Posterize": ((8 - (torch.arange(bins) / ((bins - 1) / 4))).round().int().double(), False)}
    space.update({"Solarize": (torch.linspace(1.0, 0.0, bins).double(), False),
                  "AutoContrast": (None, False), "Equalize": (None, False)})
    if kind == "auto":
        del space["Identity"]
        space["Invert"] = (None, False)
    return space


def _tv_argument(names: Sequence[str], op: Tensor, magnitude: Tensor) -> Tensor:
    """torchvision's ``_apply_image_or_video_transform`` arguments from (op, signed magnitude)."""
    arg = magnitude.clone()
    for k, name in enumerate(names):
        m = op == k
        if name in ("Brightness", "Color", "Contrast", "Sharpness"):
            arg[m] = 1.0 + magnitude[m]
        elif name in ("TranslateX", "TranslateY", "Posterize"):
            arg[m] = magnitude[m].trunc()  # int(magnitude)
    return arg


def pil_fill(fill: float | Sequence[float] | None) -> list[int] | None:
    """A fill on the [0, 1] scale as torchvision's PIL ops take it (0..255 per channel)."""
    return None if fill is None else [round(255 * v) for v in ((fill,) * 3 if isinstance(fill, (int, float)) else fill)]


class _TorchvisionPolicy(Policy):
    kind = "rand"
    runs_on = "pixels"

    @classmethod
    def counterpart(cls, args, ctx):
        from torchvision.transforms import v2  # optional dependency (the baseline's)

        common = dict(interpolation=args["interpolation"], fill=pil_fill(args["fill"]))
        if cls is RandAugment:
            return v2.RandAugment(args["num_ops"], args["magnitude"], args["num_magnitude_bins"], **common)
        if cls is TrivialAugmentWide:
            return v2.TrivialAugmentWide(args["num_magnitude_bins"], **common)
        return v2.AutoAugment(v2.AutoAugmentPolicy.IMAGENET, **common)

    def _space(self, shape) -> tuple[tuple[str, ...], Tensor, Tensor, Tensor]:
        """(op names, magnitudes (K, bins) with 0 for magnitude-less ops, has magnitudes (K,), signed (K,))."""
        h, w = image_size(shape)
        space = _tv_space(self.kind, self.num_magnitude_bins, h, w)
        names = tuple(space)
        mags = torch.stack([m if m is not None else torch.zeros(self.num_magnitude_bins, dtype=torch.float64)
                            for m, _ in space.values()])
        signed = torch.tensor([s for _, s in space.values()])
        return names, mags, signed

    def _finish(self, names, op, magnitude, signed_k, gen) -> dict[str, Tensor]:
        valid = op >= 0
        signed = signed_k[op.clamp(min=0)] & valid
        magnitude = _signed(magnitude, signed, gen)
        return {"op": op, "arg": torch.where(valid, _tv_argument(names, op, magnitude), 0.0)}


class RandAugment(_TorchvisionPolicy):
    """torchvision's ``v2.RandAugment``, drawn per sample: ``num_ops`` ops uniform over its 14
    (Identity, ShearX/Y, TranslateX/Y, Rotate, Brightness, Color, Contrast, Sharpness, Posterize,
    Solarize, AutoContrast, Equalize), each at bin ``magnitude`` of ``num_magnitude_bins``, signed
    ops negated with probability ½. ``fill`` is RGB on the [0, 1] scale (None: black)."""

    kind = "rand"
    summary = "torchvision's `v2.RandAugment` (its 14 ops, bins and signs), drawn per sample; `fill` RGB on [0, 1]"

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31,
                 interpolation: str = "nearest", fill: float | tuple[float, float, float] | None = None,
                 seed: int | None = None) -> None:
        super().__init__(seed, interpolation, fill)
        if isinstance(num_ops, bool) or not isinstance(num_ops, int) or num_ops < 0:
            raise ValueError(f"RandAugment: num_ops must be a non-negative integer, got {num_ops!r}")
        if not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 2:
            raise ValueError(f"RandAugment: num_magnitude_bins must be an integer >= 2, got {num_magnitude_bins!r}")
        if not isinstance(magnitude, int) or not 0 <= magnitude < num_magnitude_bins:
            raise ValueError(f"RandAugment: magnitude must be an integer in [0, num_magnitude_bins), got {magnitude!r}")
        self.num_ops, self.magnitude, self.num_magnitude_bins = num_ops, magnitude, num_magnitude_bins
        self.ops = tuple(_tv_space(self.kind, num_magnitude_bins, 8, 8))

    def draw(self, shape, gen):
        names, mags, signed = self._space(shape)
        n = shape[0]
        op = torch.randint(len(names), (n, self.num_ops), generator=gen)
        return self._finish(names, op, mags[op, self.magnitude], signed, gen)


class TrivialAugmentWide(_TorchvisionPolicy):
    """torchvision's ``v2.TrivialAugmentWide``, drawn per sample: one op uniform over its 14 (the
    "wide" ranges: shear 0.99, translate 32 px, rotate 135°, factors ±0.99, posterize 2..8 bits),
    one bin uniform over ``num_magnitude_bins``, the sign coin."""

    kind = "wide"
    summary = "torchvision's `v2.TrivialAugmentWide`, per sample"

    def __init__(self, num_magnitude_bins: int = 31, interpolation: str = "nearest",
                 fill: float | tuple[float, float, float] | None = None, seed: int | None = None) -> None:
        super().__init__(seed, interpolation, fill)
        if not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 2:
            raise ValueError(f"TrivialAugmentWide: num_magnitude_bins must be an integer >= 2, got {num_magnitude_bins!r}")
        self.num_magnitude_bins = num_magnitude_bins
        self.ops = tuple(_tv_space(self.kind, num_magnitude_bins, 8, 8))

    def draw(self, shape, gen):
        names, mags, signed = self._space(shape)
        n = shape[0]
        op = torch.randint(len(names), (n, 1), generator=gen)
        b = torch.randint(self.num_magnitude_bins, (n, 1), generator=gen)
        return self._finish(names, op, mags[op, b], signed, gen)


#: torchvision's ``AutoAugmentPolicy.IMAGENET``: 25 sub-policies of two (op, probability, bin)
_IMAGENET_POLICY = (
    (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)), (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, None)), (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)), (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)), (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
    (("Equalize", 0.0, None), ("Equalize", 0.8, None)), (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)), (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)), (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, None)), (("Color", 0.4, 0), ("Equalize", 0.6, None)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)), (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
)


class AutoAugment(_TorchvisionPolicy):
    """torchvision's ``v2.AutoAugment`` with its ImageNet policy, drawn per sample: one of the 25
    sub-policies uniformly, each of its two ops applied with its probability at its bin of 10,
    signed ops negated with probability ½."""

    kind = "auto"
    summary = "torchvision's `v2.AutoAugment` ImageNet policy, per sample"

    def __init__(self, policy: str = "imagenet", interpolation: str = "nearest",
                 fill: float | tuple[float, float, float] | None = None, seed: int | None = None) -> None:
        super().__init__(seed, interpolation, fill)
        if str(policy).lower() != "imagenet":
            raise ValueError(f"AutoAugment: only the 'imagenet' policy is provided, got {policy!r} (timm's "
                             "'original' and 'v0' policies: TimmAugment)")
        self.policy = "imagenet"
        self.num_magnitude_bins = 10
        self.ops = tuple(_tv_space(self.kind, 10, 8, 8))
        index = {name: k for k, name in enumerate(self.ops)}
        self._sub_op = torch.tensor([[index[o] for o, _, _ in sp] for sp in _IMAGENET_POLICY])
        self._sub_p = torch.tensor([[p for _, p, _ in sp] for sp in _IMAGENET_POLICY], dtype=torch.float64)
        self._sub_bin = torch.tensor([[b if b is not None else 0 for _, _, b in sp] for sp in _IMAGENET_POLICY])

    def draw(self, shape, gen):
        names, mags, signed = self._space(shape)
        n = shape[0]
        sub = torch.randint(len(_IMAGENET_POLICY), (n,), generator=gen)
        fire = torch.rand(n, 2, generator=gen, dtype=torch.float64) <= self._sub_p[sub]
        op = torch.where(fire, self._sub_op[sub], -1)
        magnitude = mags[self._sub_op[sub], self._sub_bin[sub]]
        return self._finish(names, op, magnitude, signed, gen)
