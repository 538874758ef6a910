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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from dctnet.transforms import geometry as G
from dctnet.transforms import pixel as P
from dctnet.transforms.base import Transform, apply_slots

__all__ = ["KERNELS", "Kernel", "Policy"]


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
        inv = G.affine_matrix(ang, tr, torch.ones_like(arg), sh, center, size=tuple(img.shape[-2:]))
        return G.affine(img, inv, interpolation=ctx.interpolation, fill=ctx.fill)

    return kernel


def _tv_rotate(img: Tensor, arg: Tensor, ctx: _Context) -> Tensor:
    return G.rotate(img, arg, interpolation=ctx.interpolation, fill=ctx.fill)


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
        inv = G.pil_affine_inverse(data, size=(h, w))
        return G.affine(img, inv, interpolation=ctx.interpolation, fill=ctx.fill)

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


class Policy(Transform):
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
