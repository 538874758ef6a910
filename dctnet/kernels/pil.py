r"""PIL's geometry and posterize as timm's ``auto_augment`` ops call them, batched and exact: the
``Image.transform(AFFINE)`` data of each op (:func:`pil_affine_data`), PIL's bicubic affine warp
(:func:`pil_bicubic_affine`: its a = −1 cubic and border rule, with 1-D kernels for shears and
translations) and ``ImageOps.posterize`` (:func:`pil_posterize`). Images are RGB ``(n, C, H, W)`` on
the [0, 1] scale, as in :mod:`dctnet.kernels.pixel`; nearest and bilinear PIL warps go through
torchvision's grid (:func:`dctnet.kernels.geometry.pil_affine_inverse`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from dctnet.kernels.cache import cached, select

__all__ = ["PIL_AFFINE_OPS", "PIL_WARP_AXES", "pil_affine_data", "pil_bicubic_affine", "pil_posterize"]

#: timm's geometric ops as PIL runs them (:func:`pil_affine_data`)
PIL_AFFINE_OPS = ("shear_x", "shear_y", "translate_x", "translate_y", "rotate")

#: the axes each of PIL's geometric ops samples between pixels (:func:`pil_bicubic_affine`'s ``axes``):
#: a shear or translation keeps the other coordinate on a pixel centre
PIL_WARP_AXES = {"shear_x": "x", "translate_x": "x", "shear_y": "y", "translate_y": "y", "rotate": "xy"}


def pil_affine_data(op: str, arg: Tensor, *, size: tuple[int, int]) -> Tensor:
    """PIL's ``Image.transform(size, AFFINE, data)`` data ``(n, 6)`` for timm's op ``op`` (one of
    :data:`PIL_AFFINE_OPS`) with ``arg (n,)`` per sample, ``size = (H, W)``: a shear about the corner
    (``arg`` the shear factor), a translation by a (fractional) number of pixels, or ``Image.rotate``
    about the centre (``arg`` in degrees, counter-clockwise)."""
    one, zero = torch.ones_like(arg), torch.zeros_like(arg)
    if op == "shear_x":
        data = [one, arg, zero, zero, one, zero]
    elif op == "shear_y":
        data = [one, zero, zero, arg, one, zero]
    elif op == "translate_x":
        data = [one, zero, arg, zero, one, zero]
    elif op == "translate_y":
        data = [one, zero, zero, zero, one, arg]
    elif op == "rotate":  # PIL's matrix about (w/2, h/2), angle counter-clockwise in degrees
        h, w = size
        a = -torch.deg2rad(arg)
        cos, sin = torch.cos(a), torch.sin(a)
        cx, cy = w / 2.0, h / 2.0
        data = [cos, sin, cos * -cx + sin * -cy + cx, -sin, cos, -sin * -cx + cos * -cy + cy]
    else:
        raise ValueError(f"op must be one of {PIL_AFFINE_OPS}, got {op!r}")
    return torch.stack(data, 1)


#: PIL's cubic (a = −1) as polynomials in the fraction t, one column per tap −1, 0, 1, 2: rows A, B, C, D of
#: ``((A·t + B)·t + C)·t + D`` (``−t + 2t² − t³``, ``1 − 2t² + t³``, ``t + t² − t³``, ``−t² + t³``)
_CUBIC_A1 = torch.tensor([[-1.0, 1.0, -1.0, 1.0], [2.0, -2.0, 1.0, -1.0], [-1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
_TAPS = torch.arange(-1, 3, dtype=torch.int32)
#: sampling points are computed in units of 2⁻³² px, as whole numbers in float64 (exact below 2⁵³): far
#: below float32 weights' resolution, and every sum of them is exact, in any order
_GRID = 2.0 ** 32


def _pil_grid(h: int, w: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(3, w + h + 1)`` float64 and its bias ``(w + h + 1,)``: what turns each sample's ``(a, b, c)`` and
    ``(d, e, f)`` into ``[a·X | b·Y | c − ½]`` and ``[d·X | e·Y | f − ½]`` in units of 2⁻³² px
    (``X = x + ½``, ``Y = y + ½``), one product per entry (built once per size and device)."""

    def make() -> Tensor:
        g = torch.zeros(4, w + h + 1, dtype=torch.float64)
        g[0, :w] = (torch.arange(w, dtype=torch.float64) + 0.5) * _GRID
        g[1, w:w + h] = (torch.arange(h, dtype=torch.float64) + 0.5) * _GRID
        g[2, w + h] = _GRID
        g[3, w + h] = -0.5 * _GRID
        return g.to(device=device, non_blocking=True)

    g = cached(("pil_grid", h, w, str(device)), make)
    return g[:3], g[3]


def _cubic_weights(t: Tensor) -> Tensor:
    """PIL's a = −1 cubic at the taps −1, 0, 1, 2 of fractions ``t (..., L)`` → ``(..., 4, L)`` in ``t``'s
    dtype, by Horner's rule in separate multiplies and adds (but the first, exact): the same bits whatever
    the shape (a fused multiply-add in one vectorised loop and not in another would not be), so the 1-D
    kernels and the general one weigh a tap alike."""
    a, b, c, d = cached(("pil_cubic_taps", t.dtype, str(t.device)),
                         lambda: _CUBIC_A1.to(device=t.device, dtype=t.dtype, non_blocking=True)[..., None]).unbind(0)
    t = t.unsqueeze(-2)
    # a is ±1 or 0, so a·t is exact and b + a·t rounds once, fused or not
    return torch.addcmul(b, a, t).mul_(t).add_(c).mul_(t).add_(d)


def _pil_terms(data: Tensor, h: int, w: int) -> tuple[Tensor, Tensor]:
    """PIL's sampling points minus ½, from ``data (n, 6)`` (``x_src = a·X + b·Y + c``,
    ``y_src = d·X + e·Y + f``, ``X = x + ½``, ``Y = y + ½``), in units of 2⁻³² px (PIL's double maths
    to ~1e-9 px): a column term ``(n, 2, w)`` = ``a·X``, ``d·X`` and a row term ``(n, 2, h)`` =
    ``b·Y + c − ½``, ``e·Y + f − ½``, every product (and the constant) rounded to a whole unit on its own,
    so every sum of them is exact. For a shear or translation along x (``a = 1``) the column term is ``x`` exactly and
    the row term one number per row: the point's fraction is the same along a whole row, bit for bit
    (along y, with ``e = 1``, per column), which is what the 1-D kernels (:func:`_pil_shift_filter`)
    rely on."""
    d = data.to(dtype=torch.float64).view(-1, 2, 3)
    n = d.shape[0]
    grid, bias = _pil_grid(h, w, d.device)
    r = torch.baddbmm(bias.expand(n, 2, -1), d, grid.expand(n, 3, -1)).round_()       # (n, 2, w + h + 1)
    return r[..., :w], r[..., w:w + h] + r[..., w + h:]


def pil_bicubic_affine(img: Tensor, data: Tensor, fill: Tensor | None, axes: str = "xy", *,
                        one_by_one: bool = False) -> Tensor:
    """PIL's ``Image.transform(size, AFFINE, data, BICUBIC, fillcolor=fill)`` batched, as timm's
    geometric ops call it: output pixel (x, y) samples the input at ``(a·X + b·Y + c, d·X + e·Y + f)``
    with ``X = x + ½, Y = y + ½`` (``data (n, 6)`` = a..f); a point outside the input takes the fill;
    inside, PIL's 4×4 cubic convolution with **a = −1** (its ``BICUBIC`` macro in Geometry.c, not the
    a = −0.5 of PIL's resize nor grid_sample's a = −0.75) over neighbours clipped to the edge.
    ``img (n, C, H, W)`` in [0, 1] → same, clipped to [0, 1] as PIL's 8 bits are.

    The general kernel gathers each row of the 4×4 taps at once (4 gathers: the pixel index
    innermost, contiguous) and sums them as ``Σ_j wy_j · Σ_i wx_i · v_ji`` in order, a multiply and an
    add at a time.

    ``axes="x"`` (``"y"``): every row is a shear or translation along x (y) — ``a, d, e = 1, 0, 1``
    (``a, b, e = 1, 0, 1``) — so the other coordinate lands on a pixel centre, its weights are exactly
    ``(0, 1, 0, 0)``, and along the axis every output row (column) samples at one fraction
    (:func:`_pil_terms`): the 4-tap filter runs over whole rows of the edge-padded input with one
    weight per row, then each row is shifted by its whole number of pixels (one gather). The same
    values, bit for bit, as the general kernel, for a tenth of its work (:data:`PIL_WARP_AXES`; the
    caller vouches for the rows: :func:`dctnet.transforms.slots.plan_slots` sorts them by op on the host).

    ``one_by_one``: the general kernel gathers one tap at a time (:func:`_taps_one_by_one`, what an
    eager CPU step's exact groups run) instead of a row of four (:func:`_taps_by_rows`, fewer launches): the same
    sums in the same order."""
    n, c, h, w = img.shape
    x = img.float() if img.dtype in (torch.float16, torch.bfloat16) else img
    if axes == "x":
        out, inside = _pil_shift_filter(x, data, 3)
    elif axes == "y":
        out, inside = _pil_shift_filter(x, data, 2)
    else:
        cols, rows = _pil_terms(data.to(x.device), h, w)
        f = (cols[:, :, None, :] + rows[:, :, :, None]).mul_(1.0 / _GRID).view(n, 2, h * w)  # (n, 2, HW): point − ½
        f0 = torch.floor(f)
        low, high = _axis_limits(h, w, x.device)
        inside = (f.clamp(low, high) == f).all(1)                                     # (n, HW)
        wts = _cubic_weights((f - f0).to(x.dtype))                                    # (n, 2, 4, HW)
        offsets = cached(("pil_taps32", str(x.device)), lambda: _TAPS.to(x.device, non_blocking=True)[:, None])
        # int32 indices (gather takes them: torch ≥ 2.8): half the bytes of int64, the same taps — the
        # points' floors lie within a few image sizes of it (timm's warps), far inside int32
        taps = f0.to(torch.int32)[:, :, None] + offsets                              # (n, 2, 4, HW)
        # into the image, an axis at a time (scalar bounds: a broadcast integer minimum costs a CPU 5x)
        taps[:, 0].clamp_(0, w - 1)
        taps[:, 1].clamp_(0, h - 1)
        wx, wy = wts[:, 0:1], wts[:, 1:2]                                              # (n, 1, 4, HW)
        taps16 = _taps_one_by_one if one_by_one else _taps_by_rows
        out = taps16(x.reshape(n, c, h * w), taps[:, 0], taps[:, 1], w, wx, wy)
        out = out.view(n, c, h, w)
        inside = inside.view(n, 1, h, w)
    out = out.clamp_(0.0, 1.0)
    if fill is None:
        fill_v = torch.zeros((), dtype=x.dtype, device=x.device)
    else:
        fill_v = fill.to(device=x.device, dtype=x.dtype).reshape(-1, c, 1, 1) if fill.dim() else fill.to(x)
    return select(inside, out, fill_v).to(img.dtype)  # where with a broadcast mask: not vectorised on a CPU


def _taps_one_by_one(src: Tensor, cols: Tensor, rows: Tensor, width: int, wx: Tensor, wy: Tensor) -> Tensor:
    """``Σ_j wy_j · Σ_i wx_i · src[width · rows_j + cols_i]`` (``src (n, C, P)``; ``cols``, ``rows``
    ``(n, 4, P)`` int32: the taps' columns and rows in an image ``width`` pixels across; ``wx``, ``wy``
    ``(n, 1, 4, P)``), in that order: one tap at a time, accumulated in place — image-sized
    temporaries that stay in a CPU's caches (1.8× faster for one image than :func:`_taps_by_rows`).
    A row's four flat indices are made when it is summed: the 16 at once are an integer tensor 16
    images' worth of pixels in size."""
    n, c, p = src.shape
    out = None
    starts = rows * width                                                              # the rows' first pixels
    for j in range(4):
        flat = cols + starts[:, j:j + 1]                                               # (n, 4, P)
        term = None
        for i in range(4):
            v = src.gather(2, flat[:, i, None].expand(n, c, p)).mul_(wx[:, :, i])
            term = v if term is None else term.add_(v)
        out = term.mul_(wy[:, :, j]) if out is None else out.add_(term.mul_(wy[:, :, j]))
    return out


def _taps_by_rows(src: Tensor, cols: Tensor, rows: Tensor, width: int, wx: Tensor, wy: Tensor) -> Tensor:
    """:func:`_taps_one_by_one`'s sums (the same order: a sum over a dim of 4 adds in turn) with one
    gather per row of 4 taps, the pixel index innermost: 16 launches fewer, for an accelerator."""
    n, c, p = src.shape
    idx = torch.add(cols[:, None], rows[:, :, None], alpha=width)                      # (n, 4, 4, P): tap (j, i)
    terms = []
    for j in range(4):
        row = idx[:, j].reshape(n, 1, 4 * p).expand(n, c, 4 * p)
        terms.append((src.gather(2, row).view(n, c, 4, p) * wx).sum(2))                # Σ_i wx_i · v_ji
    return (torch.stack(terms, 2) * wy).sum(2)                                         # Σ_j wy_j · (…)


def _axis_limits(h: int, w: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(2, 1)`` float64 bounds of a point − ½ inside the input along x and y: ``−½`` and the last unit
    (2⁻³² px) below ``w − ½``, ``h − ½`` (points are whole units: ``< L − ½`` is ``≤`` that)."""

    def make() -> Tensor:
        b = torch.tensor([[[-0.5], [-0.5]], [[w - 0.5 - 1.0 / _GRID], [h - 0.5 - 1.0 / _GRID]]], dtype=torch.float64)
        return b.to(device, non_blocking=True)

    low, high = cached(("pil_limits", h, w, str(device)), make).unbind(0)
    return low, high


def _pil_shift_filter(x: Tensor, data: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """:func:`pil_bicubic_affine` for rows that sample along one axis (``dim`` 3: x, 2: y): the
    unclipped result ``(n, C, H, W)`` and where the points lie inside the input, ``(n, 1, H, W)``.

    Along the axis the point minus ½ is ``p + u`` for output position ``p``, with ``u`` one number per
    line across it (from :func:`_pil_terms`, exactly): the taps of ``p`` are
    ``p + ⌊u⌋ − 1 … p + ⌊u⌋ + 2`` at weights of ``u − ⌊u⌋``. So the filter ``g[q] = Σ_i w_i · in[q − 1 + i]``
    is evaluated at every ``q`` of ``−1 … L − 1`` (all an inside point can use) over the input padded
    by 2 edge pixels each side (the taps' clipping), in contiguous passes, and ``p`` reads
    ``g[p + ⌊u⌋]``."""
    n, c, h, w = x.shape
    length, lines = (w, h) if dim == 3 else (h, w)
    cols, rows = _pil_terms(data.to(x.device), h, w)
    # the point − ½ is p + u, u a whole number of units too (so the sum is exact): the point at p = 0 — along
    # x, the row term plus the column term of x = 0 (the column term is x + ½ exactly); along y, the
    # column term plus the row term of y = 0 (the row term is y + ½ + f − ½ exactly)
    u = (rows[:, 0] + cols[:, 0, :1] if dim == 3 else cols[:, 1] + rows[:, 1, :1]).mul_(1.0 / _GRID)  # (n, lines)
    u0 = torch.floor(u)
    wts = _cubic_weights((u - u0).to(x.dtype))                                        # (n, 4, lines)
    # weights per line, broadcast along it: (n, 1, lines, 1) for rows, (n, 1, 1, lines) for columns
    line_shape = (n, 1, lines, 1) if dim == 3 else (n, 1, 1, lines)
    pad = (2, 2, 0, 0) if dim == 3 else (0, 0, 2, 2)
    padded = torch.nn.functional.pad(x, pad, mode="replicate")                       # (n, C, ·, ·) + 4 along dim
    g = None
    for i in range(4):
        term = padded.narrow(dim, i, length + 1) * wts[:, i].view(line_shape)
        g = term if g is None else g.add_(term)
    # p reads g at p + ⌊u⌋ + 1 (g's index 0 is q = −1); a point outside takes the fill, any index will do
    pos = cached(("pil_positions32", length, str(x.device)),
                  lambda: torch.arange(length, dtype=torch.int32, device=x.device))
    pos = pos.view(1, 1, length) if dim == 3 else pos.view(1, length, 1)               # along the axis

    def per_line(t: Tensor) -> Tensor:  # (n, lines) broadcast across the axis: (n, h, 1) or (n, 1, w)
        return t[:, :, None] if dim == 3 else t[:, None, :]

    idx = (pos + per_line(u0.to(torch.int32))).add_(1).clamp_(0, length)              # (n, h, w) int32
    out = g.gather(dim, idx.unsqueeze(1).expand(n, c, h, w))
    # inside: −½ ≤ p + u < L − ½ (the point − ½ against the general kernel's limits), per line
    lo, hi = (-0.5 - u).ceil_(), ((length - 0.5) - u).ceil_()                         # (n, lines)
    inside = (pos >= per_line(lo)) & (pos < per_line(hi))
    return out, inside.unsqueeze(1)


def pil_posterize(img: Tensor, bits: Tensor) -> Tensor:
    """PIL's ``ImageOps.posterize`` as timm calls it, on the 8-bit values ``round(255·x)``: keep the top
    ``bits (n,)`` bits (``v & ~(2^(8−b) − 1)``); 8 bits or more leave the image as it is. (torchvision's
    float rule, :func:`dctnet.kernels.pixel.posterize`, gives levels k/2^b instead.)"""
    shift = (8 - bits.clamp(0, 8)).to(torch.int32).reshape(-1, 1, 1, 1)
    v = torch.round(img.clamp(0, 1) * 255).to(torch.int32)
    out = ((v >> shift) << shift).to(img.dtype) / 255
    return select(shift > 0, out, img)
