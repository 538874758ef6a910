r"""The policies' op kernels, pure batched functions of tensors (no draw, no module): every op a
policy can name with its kernel (:data:`KERNELS`: torchvision's and PIL's geometry, colour and
tone), the grouped forms a slot runs — one warp for every geometric op (:func:`tv_warp_inverse`,
:func:`pil_warp_data`, :func:`pil_warp`), one blend for brightness/colour/contrast/sharpness
(:func:`blend_slot`), one chain for the value-by-value ops (:func:`point_params`,
:func:`point_slot`) — the masked form (:func:`run_masked`) and :func:`round_to_levels` (8-bit
results). Images are RGB ``(n, 3, H, W)`` in [0, 1]. The scheduler that groups the rows of a batch
by the op they drew is :mod:`dctnet.transforms.slots`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from dctnet.kernels import geometry as G
from dctnet.kernels import pixel as P
from dctnet.kernels.cache import plain_eager, select
from dctnet.kernels.pil import PIL_AFFINE_OPS, PIL_WARP_AXES, pil_affine_data, pil_bicubic_affine, pil_posterize

__all__ = ["BLEND_DEGENERATE", "KERNELS", "MAP_NEUTRAL", "PIL_OPS", "PIL_WARPS", "POINT_OPS", "TV_WARPS", "Context",
           "Kernel", "blend_slot", "pil_warp", "pil_warp_data", "point_params", "point_slot", "round_to_levels",
           "run_masked", "tv_warp_inverse"]


#: the argument an op receives: kernel(img (n, 3, H, W), arg (n,) on img's device, ctx) -> img
Kernel = Callable[[Tensor, Tensor, "Context"], Tensor]


@dataclass
class Context:
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

    def kernel(img: Tensor, arg: Tensor, ctx: Context) -> Tensor:
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


def _tv_rotate(img: Tensor, arg: Tensor, ctx: Context) -> Tensor:
    return G.rotate(img, arg, interpolation=ctx.interpolation, fill=ctx.fill)


#: the policies' names of PIL's geometric ops → :func:`dctnet.kernels.pil.pil_affine_data`'s (``PilShearX``: ``shear_x``)
PIL_OPS = {f"Pil{which.title().replace('_', '')}": which for which in PIL_AFFINE_OPS}


def _pil_affine(which: str) -> Kernel:
    """PIL's ``Image.transform(size, AFFINE, data)`` as timm calls it: shear about the corner,
    translation by a (fractional) number of pixels, or ``Image.rotate`` about the centre."""

    def kernel(img: Tensor, arg: Tensor, ctx: Context) -> Tensor:
        data = pil_affine_data(which, arg, size=tuple(img.shape[-2:]))
        return pil_warp(img, data, ctx, PIL_WARP_AXES[which])  # shears and translations: along one axis only

    return kernel


def _blur(img: Tensor, arg: Tensor, ctx: Context) -> Tensor:
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


def tv_warp_inverse(names: Sequence[str], op: Tensor, arg: Tensor, size: tuple[int, int]) -> Tensor:
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


def pil_warp_data(names: Sequence[str], op: Tensor, arg: Tensor, size: tuple[int, int]) -> Tensor:
    """Host: each sample's PIL ``Image.transform(AFFINE)`` data ``(B, 6)`` for its op in one slot, the
    identity ``(1, 0, 0, 0, 1, 0)`` where it drew no PIL warp (as :func:`_pil_affine` builds them)."""
    one, zero = torch.ones_like(arg), torch.zeros_like(arg)
    data = torch.stack([one, zero, zero, zero, one, zero], 1)
    drawn = set(op.tolist())  # the host's ops: only those drawn are built (a CPU's exact chunks hold one)
    for k, n in enumerate(names):
        if n in PIL_WARPS and k in drawn:
            data = torch.where((op == k)[:, None], pil_affine_data(PIL_OPS[n], arg, size=size), data)
    return data


def point_params(names: Sequence[str], op: Tensor, arg: Tensor) -> dict[str, Tensor]:
    """Host: a point group's per-row arguments ``(C,)`` float64 for :func:`point_slot`, from each row's
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


def point_slot(x: Tensor, ch: dict[str, Tensor], names: Sequence[str]) -> Tensor:
    """Device: the point group's chain on ``x (C, 3, H, W)`` — solarize (Invert too), solarize-add,
    posterize — each row through the ops of ``names`` only, its own op with its argument and the
    others neutral (:func:`point_params`): exactly the one op it drew."""
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


def blend_slot(x: Tensor, factor: Tensor, weights: Tensor, terms: tuple[bool, bool, bool]) -> Tensor:
    """``clamp(f·x + (1 − f)·D, 0, 1)`` per sample, ``D = w₀·grey + w₁·mean grey + w₂·smoothed``
    (torchvision's ``_blend`` against each op's degenerate image: ``D = 0`` is brightness), with the
    terms ``terms`` says are in use (host bools, in that order; the others have weight 0 on every row,
    and leaving them out changes no bit: each adds an exact 0). The smoothed image is torchvision's
    sharpness degenerate: the 3×3 ``[[1, 1, 1], [1, 5, 1], [1, 1, 1]]/13`` filter inside, the image
    itself on the one-pixel border. ``x`` is the group's own copy of its rows
    (:func:`dctnet.transforms.slots.run_planned_slots`): the blend is written into it, torchvision's
    ``_blend`` term by term."""
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


def pil_warp(img: Tensor, data: Tensor, ctx: Context, axes: str = "xy", one_by_one: bool = False) -> Tensor:
    """PIL's affine warp with the ``Image.transform(AFFINE)`` data ``data (n, 6)``: PIL's exact
    bicubic (sampling along ``axes`` only), or torchvision's grid for nearest and bilinear."""
    if ctx.interpolation == "bicubic":
        return pil_bicubic_affine(img, data, ctx.fill, axes, one_by_one=one_by_one)
    inv = G.pil_affine_inverse(data, size=tuple(img.shape[-2:]))
    return G.affine(img, inv, interpolation=ctx.interpolation, fill=ctx.fill)


def run_masked(x: Tensor, plans: Sequence[dict[str, Tensor]],
               kernels: Sequence[Callable[[Tensor, Tensor], Tensor] | None]) -> Tensor:
    """Device: slot after slot, every kernel on the whole batch, its result kept where the sample drew
    it (:func:`dctnet.transforms.slots.plan_masked`): each sample sees its ops in its own order, with fixed shapes."""
    view = (-1,) + (1,) * (x.dim() - 1)
    for plan in plans:
        for k, kernel in enumerate(kernels):
            if kernel is not None:
                x = select(plan["mask"][k].reshape(view), kernel(x, plan["arg"][k]).to(x.dtype), x)
    return x


def round_to_levels(x: Tensor, levels: int | None) -> Tensor:
    """Pixels in [0, 1] rounded to ``k/(levels − 1)`` (256 levels: an 8-bit image's values); ``None``:
    as they are."""
    if levels is None:
        return x
    scale = float(levels - 1)
    return torch.round(x * scale).div_(scale)  # k / 255, as to_tensor divides (k · (1/255) is 1 ulp off for half of k)
