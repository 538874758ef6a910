r"""Augmentation policies drawn per sample and applied batched: torchvision's ``RandAugment``,
``TrivialAugmentWide`` and ``AutoAugment``, and timm's policy strings (``rand-m9-mstd0.5-inc1``,
``original``, ``v0``, ``3a``, …).

torchvision draws one op list per call — for a batch, one list for every sample; timm draws per
image in a CPU worker with PIL. Here every sample draws its own ops, magnitudes, signs and
per-op coins on the host (one seeded ``torch.Generator``, vectorised over the batch), and each op
then runs **once per slot** as a batched kernel of :mod:`dctnet.transforms.pixel` over the samples
that drew it (``index_select`` → kernel → ``index_copy``), slot after slot, so every sample sees its
ops in its own draw order. Which samples drew which op is read off the host parameters: no device
sync, and at most ``slots × ops`` kernel launches whatever the batch size.

Parameters of a batch (``draw_params``): ``op (B, S)`` int64 — the index of the op each sample runs
in slot ``s`` in :attr:`_Policy.ops`, or −1 where the slot does nothing (timm's per-op coin, an
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
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from dctnet.transforms import pixel as P
from dctnet.transforms.base import Transform, apply_slots, image_size
from dctnet.transforms.normalization import IMAGENET_MEAN

__all__ = ["AutoAugment", "RandAugment", "ThreeAugment", "TimmAugment", "TrivialAugmentWide"]

#: the argument an op receives: kernel(img (n, 3, H, W), arg (n,) on img's device, ctx) -> img
Kernel = Callable[[Tensor, Tensor, "_Context"], Tensor]


@dataclass
class _Context:
    """What the geometric ops need besides their argument: the interpolation and the fill
    (``(3,)`` RGB on the [0, 1] scale, or None for black)."""

    interpolation: str
    fill: Tensor | None


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
        inv = P.affine_matrix(ang, tr, torch.ones_like(arg), sh, center, size=tuple(img.shape[-2:]))
        return P.affine(img, inv, interpolation=ctx.interpolation, fill=ctx.fill)

    return kernel


def _tv_rotate(img: Tensor, arg: Tensor, ctx: _Context) -> Tensor:
    return P.rotate(img, arg, interpolation=ctx.interpolation, fill=ctx.fill)


def _pil_affine(which: str) -> Kernel:
    """PIL's ``Image.transform(size, AFFINE, data)`` as timm calls it: shear about the corner,
    translation by a (fractional) number of pixels, or ``Image.rotate`` about the centre."""

    def kernel(img: Tensor, arg: Tensor, ctx: _Context) -> Tensor:
        n = img.shape[0]
        one, zero = torch.ones_like(arg), _zeros(n, arg)
        h, w = img.shape[-2:]
        if which == "shear_x":
            data = [one, arg, zero, zero, one, zero]
        elif which == "shear_y":
            data = [one, zero, zero, arg, one, zero]
        elif which == "translate_x":
            data = [one, zero, arg, zero, one, zero]
        elif which == "translate_y":
            data = [one, zero, zero, zero, one, arg]
        else:  # rotate: PIL's matrix about (w/2, h/2), angle counter-clockwise in degrees
            a = -torch.deg2rad(arg)
            cos, sin = torch.cos(a), torch.sin(a)
            cx, cy = w / 2.0, h / 2.0
            data = [cos, sin, cos * -cx + sin * -cy + cx, -sin, cos, -sin * -cx + cos * -cy + cy]
        data = torch.stack(data, 1)
        if ctx.interpolation == "bicubic":
            return _pil_bicubic_affine(img, data, ctx.fill)
        inv = P.pil_affine_inverse(data, size=(h, w))
        return P.affine(img, inv, interpolation=ctx.interpolation, fill=ctx.fill)

    return kernel


def _pil_bicubic_affine(img: Tensor, data: Tensor, fill: Tensor | None) -> Tensor:
    """PIL's ``Image.transform(size, AFFINE, data, BICUBIC, fillcolor=fill)`` batched, as timm's
    geometric ops call it: output pixel (x, y) samples the input at ``(a·X + b·Y + c, d·X + e·Y + f)``
    with ``X = x + ½, Y = y + ½`` (``data (n, 6)`` = a..f); a point outside the input takes the fill;
    inside, PIL's 4×4 cubic convolution with **a = −1** (its ``BICUBIC`` macro in Geometry.c, not the
    a = −0.5 of PIL's resize nor grid_sample's a = −0.75) over neighbours clipped to the edge.
    ``img (n, C, H, W)`` in [0, 1] → same, clipped to [0, 1] as PIL's 8 bits are."""
    n, c, h, w = img.shape
    x = img.float() if img.dtype in (torch.float16, torch.bfloat16) else img
    d = data.to(device=x.device, dtype=torch.float64)
    ys = (torch.arange(h, device=x.device, dtype=torch.float64) + 0.5)[None, :, None]
    xs = (torch.arange(w, device=x.device, dtype=torch.float64) + 0.5)[None, None, :]
    col = lambda k: d[:, k, None, None]  # noqa: E731
    xin = col(0) * xs + col(1) * ys + col(2)                                     # (n, H, W)
    yin = col(3) * xs + col(4) * ys + col(5)
    inside = (xin >= 0) & (xin < w) & (yin >= 0) & (yin < h)
    fx, fy = xin - 0.5, yin - 0.5
    x0, y0 = torch.floor(fx), torch.floor(fy)
    tx, ty = fx - x0, fy - y0

    def weights(t: Tensor) -> list[Tensor]:  # PIL's cubic with a = −1, taps at −1, 0, 1, 2
        t2, t3 = t * t, t * t * t
        return [-t + 2 * t2 - t3, 1 - 2 * t2 + t3, t + t2 - t3, -t2 + t3]

    wx, wy = weights(tx), weights(ty)
    flat = x.reshape(n, c, h * w)
    out = torch.zeros(n, c, h, w, dtype=torch.float64, device=x.device)
    for j in range(4):                                   # 16 taps: a loop over the kernel, not over samples
        row = (y0 + (j - 1)).clamp(0, h - 1).long() * w
        for k in range(4):
            idx = row + (x0 + (k - 1)).clamp(0, w - 1).long()
            tap = flat.gather(2, idx.reshape(n, 1, h * w).expand(n, c, h * w)).reshape(n, c, h, w)
            out += (wy[j] * wx[k])[:, None] * tap
    out = out.clamp(0.0, 1.0).to(x.dtype)
    if fill is None:
        fill_v = torch.zeros((), dtype=x.dtype, device=x.device)
    else:
        fill_v = fill.to(device=x.device, dtype=x.dtype).reshape(-1, c, 1, 1) if fill.dim() else fill.to(x)
    return torch.where(inside[:, None], out, fill_v).to(img.dtype)


def _pil_posterize(img: Tensor, bits: Tensor) -> Tensor:
    """PIL's ``ImageOps.posterize`` as timm calls it, on the 8-bit values ``round(255·x)``: keep the top
    ``bits (n,)`` bits (``v & ~(2^(8−b) − 1)``); 8 bits or more leave the image as it is. (torchvision's
    float rule, :func:`dctnet.transforms.pixel.posterize`, gives levels k/2^b instead.)"""
    shift = (8 - bits.clamp(0, 8)).to(torch.int32).reshape(-1, 1, 1, 1)
    v = torch.round(img.clamp(0, 1) * 255).to(torch.int32)
    out = ((v >> shift) << shift).to(img.dtype) / 255
    return torch.where(shift > 0, out, img)


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
    "PilPosterize": lambda img, a, ctx: _pil_posterize(img, a.long()),
    "Solarize": lambda img, a, ctx: P.solarize(img, a),
    "SolarizeAdd": lambda img, a, ctx: P.solarize_add(img, a, torch.full_like(a, 128.0 / 255.0)),
    "AutoContrast": lambda img, a, ctx: P.autocontrast(img),
    "Equalize": lambda img, a, ctx: P.equalize(img),
    "Invert": lambda img, a, ctx: P.invert(img),
    "Grayscale": lambda img, a, ctx: P.rgb_to_grayscale(img),
    "GaussianBlur": _blur,
}


class _Policy(Transform):
    """Base of the policies: subclasses draw ``{"op": (B, S), "arg": (B, S)}`` over :attr:`ops` (names
    of :data:`KERNELS`); this class runs them slot by slot, one batched kernel per (slot, op)
    (:func:`~dctnet.transforms.base.apply_slots`)."""

    domain = "pixel"
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

    def _run_native(self, x, labels, params, gen):
        if params is None:
            params = self.draw_params(x.shape, gen)
        fill = None if self.fill_rgb is None else self.fill_rgb.to(x.device, non_blocking=True)
        ctx = _Context(self.interpolation, fill)
        kernels = [None if KERNELS[name] is None else (lambda img, a, k=KERNELS[name]: k(img, a, ctx))
                   for name in self.ops]
        return apply_slots(x, params["op"], params["arg"], kernels), labels, params

    def op_names(self, params: dict[str, Tensor]) -> list[list[str]]:
        """The ops each sample ran, in order (for notebooks and tests)."""
        return [[self.ops[k] for k in row if k >= 0] for row in params["op"].tolist()]


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


class _TorchvisionPolicy(_Policy):
    kind = "rand"

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


# ---------------------------------------------------------------------- timm
_LEVEL_DENOM = 10.0

#: timm's op name → (kernel name, level function over a magnitude tensor (n,) → argument (n,),
#: whether the level is negated with probability ½ (timm's ``_randomly_negate``))
def _timm_levels(translate_pct: float, translate_const: float) -> dict[str, tuple[str, Callable[[Tensor], Tensor], bool]]:
    lv = lambda m: m / _LEVEL_DENOM  # noqa: E731
    enhance = lambda m: lv(m) * 1.8 + 0.1  # noqa: E731
    posterize = lambda m: torch.floor(lv(m) * 4)  # noqa: E731  (int() of a non-negative value)
    solarize = lambda m: torch.clamp(torch.floor(lv(m) * 256), max=256)  # noqa: E731
    return {
        "AutoContrast": ("AutoContrast", lambda m: m * 0, False),
        "Equalize": ("Equalize", lambda m: m * 0, False),
        "Invert": ("Invert", lambda m: m * 0, False),
        "Rotate": ("PilRotate", lambda m: lv(m) * 30.0, True),
        "Posterize": ("PilPosterize", posterize, False),
        "PosterizeIncreasing": ("PilPosterize", lambda m: 4 - posterize(m), False),
        "PosterizeOriginal": ("PilPosterize", lambda m: posterize(m) + 4, False),
        # thresholds and additions of timm's uint8 LUTs, on the [0, 1] scale
        "Solarize": ("Solarize", lambda m: solarize(m) / 255.0, False),
        "SolarizeIncreasing": ("Solarize", lambda m: (256 - solarize(m)) / 255.0, False),
        "SolarizeAdd": ("SolarizeAdd", lambda m: torch.clamp(torch.floor(lv(m) * 110), max=128) / 255.0, False),
        "Color": ("Color", enhance, False),
        "Contrast": ("Contrast", enhance, False),
        "Brightness": ("Brightness", enhance, False),
        "Sharpness": ("Sharpness", enhance, False),
        # the increasing variants: 1 ± 0.9·level, kept >= 0.1 (the sign is folded in by TimmAugment.draw)
        "ColorIncreasing": ("Color", lambda m: lv(m) * 0.9, True),
        "ContrastIncreasing": ("Contrast", lambda m: lv(m) * 0.9, True),
        "BrightnessIncreasing": ("Brightness", lambda m: lv(m) * 0.9, True),
        "SharpnessIncreasing": ("Sharpness", lambda m: lv(m) * 0.9, True),
        "ShearX": ("PilShearX", lambda m: lv(m) * 0.3, True),
        "ShearY": ("PilShearY", lambda m: lv(m) * 0.3, True),
        "TranslateX": ("PilTranslateX", lambda m: lv(m) * translate_const, True),
        "TranslateY": ("PilTranslateY", lambda m: lv(m) * translate_const, True),
        "TranslateXRel": ("PilTranslateX", lambda m: lv(m) * translate_pct, True),
        "TranslateYRel": ("PilTranslateY", lambda m: lv(m) * translate_pct, True),
        "Desaturate": ("Color", lambda m: torch.clamp(1.0 - torch.clamp(0.5 + 0.5 * lv(m), 0.5, 1.0), 0.0, 1.0), False),
        "GaussianBlur": ("GaussianBlur", lambda m: torch.clamp(0.1 + 1.9 * lv(m), 0.1, 2.0), False),
        "GaussianBlurRand": ("GaussianBlur", lambda m: torch.clamp(lv(m), 0.0, 1.0), False),  # radius U(0.1, 2·level)
    }


_INCREASING = ("ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing")

_RAND_TRANSFORMS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd", "Color",
                    "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")
_RAND_INCREASING_TRANSFORMS = ("AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing",
                               "SolarizeIncreasing", "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing",
                               "BrightnessIncreasing", "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel",
                               "TranslateYRel")
_RAND_3A = ("SolarizeIncreasing", "Desaturate", "GaussianBlur")
_RAND_WEIGHTED_3A = {"SolarizeIncreasing": 6, "Desaturate": 6, "GaussianBlur": 6, "Rotate": 3, "ShearX": 2, "ShearY": 2,
                     "PosterizeIncreasing": 1, "AutoContrast": 1, "ColorIncreasing": 1, "SharpnessIncreasing": 1,
                     "ContrastIncreasing": 1, "BrightnessIncreasing": 1, "Equalize": 1, "Invert": 1}
_RAND_WEIGHTED_0 = {"Rotate": 3, "ShearX": 2, "ShearY": 2, "TranslateXRel": 1, "TranslateYRel": 1,
                    "ColorIncreasing": .25, "SharpnessIncreasing": 0.25, "AutoContrast": 0.25,
                    "SolarizeIncreasing": .05, "SolarizeAdd": .05, "ContrastIncreasing": .05,
                    "BrightnessIncreasing": .05, "Equalize": .05, "PosterizeIncreasing": 0.05, "Invert": 0.05}

#: timm's AutoAugment policies: (op, probability, magnitude) pairs
_TIMM_POLICIES: dict[str, tuple[tuple[tuple[str, float, int], ...], ...]] = {
    "v0": (
        (("Equalize", 0.8, 1), ("ShearY", 0.8, 4)), (("Color", 0.4, 9), ("Equalize", 0.6, 3)),
        (("Color", 0.4, 1), ("Rotate", 0.6, 8)), (("Solarize", 0.8, 3), ("Equalize", 0.4, 7)),
        (("Solarize", 0.4, 2), ("Solarize", 0.6, 2)), (("Color", 0.2, 0), ("Equalize", 0.8, 8)),
        (("Equalize", 0.4, 8), ("SolarizeAdd", 0.8, 3)), (("ShearX", 0.2, 9), ("Rotate", 0.6, 8)),
        (("Color", 0.6, 1), ("Equalize", 1.0, 2)), (("Invert", 0.4, 9), ("Rotate", 0.6, 0)),
        (("Equalize", 1.0, 9), ("ShearY", 0.6, 3)), (("Color", 0.4, 7), ("Equalize", 0.6, 0)),
        (("Posterize", 0.4, 6), ("AutoContrast", 0.4, 7)), (("Solarize", 0.6, 8), ("Color", 0.6, 9)),
        (("Solarize", 0.2, 4), ("Rotate", 0.8, 9)), (("Rotate", 1.0, 7), ("TranslateYRel", 0.8, 9)),
        (("ShearX", 0.0, 0), ("Solarize", 0.8, 4)), (("ShearY", 0.8, 0), ("Color", 0.6, 4)),
        (("Color", 1.0, 0), ("Rotate", 0.6, 2)), (("Equalize", 0.8, 4), ("Equalize", 0.0, 8)),
        (("Equalize", 1.0, 4), ("AutoContrast", 0.6, 2)), (("ShearY", 0.4, 7), ("SolarizeAdd", 0.6, 7)),
        (("Posterize", 0.8, 2), ("Solarize", 0.6, 10)), (("Solarize", 0.6, 8), ("Equalize", 0.6, 1)),
        (("Color", 0.8, 6), ("Rotate", 0.4, 5)),
    ),
    "original": (
        (("PosterizeOriginal", 0.4, 8), ("Rotate", 0.6, 9)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, 5)),
        (("Equalize", 0.8, 8), ("Equalize", 0.6, 3)), (("PosterizeOriginal", 0.6, 7), ("PosterizeOriginal", 0.6, 6)),
        (("Equalize", 0.4, 7), ("Solarize", 0.2, 4)), (("Equalize", 0.4, 4), ("Rotate", 0.8, 8)),
        (("Solarize", 0.6, 3), ("Equalize", 0.6, 7)), (("PosterizeOriginal", 0.8, 5), ("Equalize", 1.0, 2)),
        (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)), (("Equalize", 0.6, 8), ("PosterizeOriginal", 0.4, 6)),
        (("Rotate", 0.8, 8), ("Color", 0.4, 0)), (("Rotate", 0.4, 9), ("Equalize", 0.6, 2)),
        (("Equalize", 0.0, 7), ("Equalize", 0.8, 8)), (("Invert", 0.6, 4), ("Equalize", 1.0, 8)),
        (("Color", 0.6, 4), ("Contrast", 1.0, 8)), (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
        (("Color", 0.8, 8), ("Solarize", 0.8, 7)), (("Sharpness", 0.4, 7), ("Invert", 0.6, 8)),
        (("ShearX", 0.6, 5), ("Equalize", 1.0, 9)), (("Color", 0.4, 0), ("Equalize", 0.6, 3)),
        (("Equalize", 0.4, 7), ("Solarize", 0.2, 4)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, 5)),
        (("Invert", 0.6, 4), ("Equalize", 1.0, 8)), (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
        (("Equalize", 0.8, 8), ("Equalize", 0.6, 3)),
    ),
    "3a": ((("Solarize", 1.0, 5),), (("Desaturate", 1.0, 10),), (("GaussianBlurRand", 1.0, 10),)),
}
# the "r" variants replace the posterize ops by the increasing one
_TIMM_POLICIES["v0r"] = tuple(tuple(("PosterizeIncreasing" if o == "Posterize" else o, p, m) for o, p, m in sp)
                              for sp in _TIMM_POLICIES["v0"])
_TIMM_POLICIES["originalr"] = tuple(tuple(("PosterizeIncreasing" if o == "PosterizeOriginal" else o, p, m)
                                          for o, p, m in sp) for sp in _TIMM_POLICIES["original"])


@dataclass(frozen=True)
class TimmConfig:
    """A parsed timm ``auto_augment`` string (timm's ``rand_augment_transform`` /
    ``auto_augment_transform`` grammar)."""

    kind: str                         # "rand" or an AutoAugment policy name
    magnitude: float = 10.0
    num_layers: int = 2
    prob: float = 0.5
    magnitude_std: float = 0.0
    magnitude_max: float | None = None
    increasing: bool = False
    transforms: str | None = None     # rand's 't' section: "weights", "3a", "3aw"

    @classmethod
    def parse(cls, config: str) -> "TimmConfig":
        if not isinstance(config, str) or not config:
            raise ValueError(f"a timm augmentation string such as 'rand-m9-mstd0.5-inc1', 'original', 'v0' or '3a', "
                             f"got {config!r}")
        head, *sections = config.split("-")
        if head != "rand" and head not in _TIMM_POLICIES:
            raise ValueError(f"unknown timm augmentation {head!r} in {config!r}: 'rand-…', or one of "
                             f"{', '.join(sorted(_TIMM_POLICIES))} ('augmix' is not provided)")
        kw: dict = {"kind": head}
        for section in sections:
            if head == "rand" and section.startswith("t"):
                kw["transforms"] = section[1:]
                continue
            parts = re.split(r"(\d.*)", section)
            if len(parts) < 2:
                raise ValueError(f"timm augmentation {config!r}: section {section!r} has no value")
            key, val = parts[:2]
            try:
                if key == "mstd":
                    mstd = float(val)
                    kw["magnitude_std"] = math.inf if mstd > 100 else mstd
                elif head != "rand":
                    raise ValueError(f"timm augmentation {config!r}: AutoAugment takes only 'mstd', not {key!r}")
                elif key == "mmax":
                    kw["magnitude_max"] = float(int(val))
                elif key == "inc":
                    kw["increasing"] = bool(int(val))
                elif key == "m":
                    kw["magnitude"] = float(int(val))
                elif key == "n":
                    kw["num_layers"] = int(val)
                elif key == "p":
                    kw["prob"] = float(val)
                else:
                    raise ValueError(f"timm augmentation {config!r}: unknown section {section!r} (m, n, p, mstd, mmax, "
                                     "inc, t)")
            except ValueError as exc:
                if "timm augmentation" in str(exc):
                    raise
                raise ValueError(f"timm augmentation {config!r}: bad value in section {section!r}") from None
        if kw.get("transforms") not in (None, "weights", "3a", "3aw"):
            raise ValueError(f"timm augmentation {config!r}: transform set must be 'weights', '3a' or '3aw', "
                             f"got {kw['transforms']!r}")
        if not 0.0 <= kw.get("prob", 0.5) <= 1.0:
            raise ValueError(f"timm augmentation {config!r}: p must be a probability in [0, 1], got {kw['prob']}")
        if kw.get("num_layers", 2) < 0:
            raise ValueError(f"timm augmentation {config!r}: n must be >= 0, got {kw['num_layers']}")
        if kw.get("magnitude_max") is not None and kw["magnitude_max"] <= 0:
            raise ValueError(f"timm augmentation {config!r}: mmax must be > 0, got {kw['magnitude_max']}")
        return cls(**kw)


class TimmAugment(_Policy):
    """timm's augmentation policies (``timm.data.create_transform(auto_augment=...)``), drawn per sample
    and run batched: ``rand-m9-mstd0.5-inc1`` (RandAugment), ``original``, ``originalr``, ``v0``,
    ``v0r`` (AutoAugment, ``-mstd`` allowed) and ``3a`` (DeiT III's 3-Augment: solarize, grayscale or
    Gaussian blur, one of the three per sample).

    ``mean`` is the model's normalisation mean: timm fills the area a geometric op uncovers with it,
    rounded to 8 bits (``img_mean``), and sets ``translate_const = int(0.45·min(H, W))`` from the image
    size. ``interpolation`` is timm's ``train_interpolation`` (DeiT: ``bicubic``; timm's ``random``,
    a bilinear/bicubic coin per op, is not provided); recipes default it to ``data.interpolation``."""

    #: a recipe's build defaults ``interpolation`` to the training crop's, as timm's create_transform does
    interpolation_from_crop = True

    def __init__(self, policy: str = "rand-m9-mstd0.5-inc1", interpolation: str = "bicubic",
                 mean: tuple[float, float, float] = IMAGENET_MEAN, translate_pct: float = 0.45,
                 seed: int | None = None) -> None:
        fill = tuple(min(255, round(255 * float(m))) / 255.0 for m in mean)
        super().__init__(seed, interpolation, fill)
        self.policy, self.mean, self.translate_pct = policy, tuple(float(m) for m in mean), float(translate_pct)
        self.config = TimmConfig.parse(policy)
        c = self.config
        if c.kind == "rand":
            if c.transforms == "weights":
                names, weights = tuple(_RAND_WEIGHTED_0), tuple(_RAND_WEIGHTED_0.values())
            elif c.transforms == "3aw":
                names, weights = tuple(_RAND_WEIGHTED_3A), tuple(_RAND_WEIGHTED_3A.values())
            elif c.transforms == "3a":
                names, weights = _RAND_3A, None
            else:
                names, weights = (_RAND_INCREASING_TRANSFORMS if c.increasing else _RAND_TRANSFORMS), None
            self.timm_ops = names
            self._weights = None if weights is None else torch.tensor(weights, dtype=torch.float64)
            if weights is not None and c.num_layers > len(names):  # timm draws a weighted set without replacement
                raise ValueError(f"timm augmentation {policy!r}: n={c.num_layers} ops without replacement from a "
                                 f"weighted set of {len(names)}")
        else:
            policy_ops = _TIMM_POLICIES[c.kind]
            self.timm_ops = tuple(dict.fromkeys(o for sp in policy_ops for o, _, _ in sp))
            index = {name: k for k, name in enumerate(self.timm_ops)}
            width = max(len(sp) for sp in policy_ops)
            self._sub_op = torch.tensor([[index[o] for o, _, _ in sp] + [-1] * (width - len(sp)) for sp in policy_ops])
            self._sub_p = torch.tensor([[p for _, p, _ in sp] + [0.0] * (width - len(sp)) for sp in policy_ops],
                                       dtype=torch.float64)
            self._sub_m = torch.tensor([[m for _, _, m in sp] + [0] * (width - len(sp)) for sp in policy_ops],
                                       dtype=torch.float64)
        # the kernels the timm ops map to, in one table (op ids of the params index it)
        levels = _timm_levels(self.translate_pct, 0.0)
        self.ops = tuple(dict.fromkeys(levels[o][0] for o in self.timm_ops))

    def _levels(self, shape):
        h, w = image_size(shape)
        # timm's create_transform: translate_const = int(0.45 · min(H, W)); relative translations
        # are fractions of the image width (x) or height (y) — resolved per op below
        return _timm_levels(self.translate_pct, float(int(min(h, w) * 0.45))), h, w

    def draw(self, shape, gen):
        n, c = shape[0], self.config
        if c.kind == "rand":
            slots = c.num_layers
            if slots == 0:
                which = torch.zeros(n, 0, dtype=torch.long)
            elif self._weights is None:
                which = torch.randint(len(self.timm_ops), (n, slots), generator=gen)
            else:  # timm: np.random.choice(ops, n, replace=False, p=weights)
                which = torch.multinomial(self._weights.expand(n, -1), slots, replacement=False, generator=gen)
            fire = torch.rand(n, slots, generator=gen, dtype=torch.float64) <= c.prob if c.prob < 1.0 else \
                torch.ones(n, slots, dtype=torch.bool)
            magnitude = torch.full((n, slots), c.magnitude, dtype=torch.float64)
        else:
            sub = torch.randint(len(self._sub_op), (n,), generator=gen)
            which = self._sub_op[sub].clamp(min=0)
            slots = which.shape[1]
            fire = (torch.rand(n, slots, generator=gen, dtype=torch.float64) <= self._sub_p[sub]) & (self._sub_op[sub] >= 0)
            magnitude = self._sub_m[sub]
        if c.magnitude_std == math.inf:
            magnitude = torch.rand(n, slots, generator=gen, dtype=torch.float64) * magnitude
        elif c.magnitude_std > 0:
            magnitude = magnitude + c.magnitude_std * torch.randn(n, slots, generator=gen, dtype=torch.float64)
        upper = c.magnitude_max or _LEVEL_DENOM
        magnitude = magnitude.clamp(0.0, upper)
        negate = torch.rand(n, slots, generator=gen, dtype=torch.float64) > 0.5
        blur_u = torch.rand(n, slots, generator=gen, dtype=torch.float64)
        levels, h, w = self._levels(shape)
        op = torch.full((n, slots), -1, dtype=torch.long)
        arg = torch.zeros(n, slots, dtype=torch.float64)
        kernel_index = {name: k for k, name in enumerate(self.ops)}
        for t, name in enumerate(self.timm_ops):  # a loop over the op table, not over samples
            m = (which == t) & fire
            kernel, level, signed = levels[name]
            a = level(magnitude)
            if signed:
                a = torch.where(negate, -a, a)
            if name in _INCREASING:
                a = torch.clamp(1.0 + a, min=0.1)
            elif name == "TranslateXRel":
                a = a * w
            elif name == "TranslateYRel":
                a = a * h
            elif name == "GaussianBlurRand":  # radius uniform in [0.1, 2·level]
                a = 0.1 + blur_u * (2.0 * a - 0.1)
            op = torch.where(m, kernel_index[kernel], op)
            arg = torch.where(m, a, arg)
        return {"op": op, "arg": arg}


class ThreeAugment(TimmAugment):
    """DeiT III's 3-Augment (timm's ``3a``): per sample one of grayscale, solarize (threshold 128)
    and Gaussian blur (σ uniform in [0.1, 2]), always applied. timm's ``create_transform`` keeps its
    ColorJitter on with ``3a`` (DeiT III: 0.3): list a :class:`~dctnet.transforms.ColorJitter` after it."""

    def __init__(self, interpolation: str = "bicubic", mean: tuple[float, float, float] = IMAGENET_MEAN,
                 seed: int | None = None) -> None:
        super().__init__("3a", interpolation, mean, seed=seed)
