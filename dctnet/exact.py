"""libjpeg-turbo's default decode in integer arithmetic — the ``islow`` IDCT (jidctint.c), integer
("fancy" triangle and box) upsampling (jdsample.c) and fixed-point colour conversion (jdcolor.c) —
so that pixels are bit-identical to libjpeg's and Pillow's (the SIMD versions are bit-exact to
these). Batched torch, like :mod:`dctnet.kernels.dct`; whole images: :func:`dctnet.image.to_rgb`
with ``exact=True``.
"""

from __future__ import annotations


import torch
from torch import Tensor

from dctnet.kernels.cache import cached
from dctnet.kernels.dct import resample_last

__all__ = ["block_idct_islow", "islow_matrix", "upsample_pixels_exact"]


# ---------------------------------------------------------------- libjpeg-exact reconstruction
# libjpeg-turbo's default decode in integer arithmetic, so pixels are bit-identical to Pillow's
# and libjpeg's (jidctint.c, jdsample.c, jdcolor.c; the SIMD versions are bit-exact to these).

#: jidctint.c's fixed-point constants, FIX(x) = round(x·2¹³).
_ISLOW = dict(c0_298=2446, c0_390=3196, c0_541=4433, c0_765=6270, c0_899=7373, c1_175=9633, c1_501=12299,
              c1_847=15137, c1_961=16069, c2_053=16819, c2_562=20995, c3_072=25172)


def _islow_1d(x: list[int]) -> list[int]:
    """libjpeg's 1-D islow butterfly on 8 integers, before descaling (outputs scaled by 2¹³).

    It is linear with integer constants and no intermediate rounding, so it equals an integer
    matrix product; :func:`islow_matrix` evaluates it on the unit vectors."""
    k = _ISLOW
    z2, z3 = x[2], x[6]
    z1 = (z2 + z3) * k["c0_541"]
    tmp2 = z1 - z3 * k["c1_847"]
    tmp3 = z1 + z2 * k["c0_765"]
    tmp0 = (x[0] + x[4]) << 13
    tmp1 = (x[0] - x[4]) << 13
    tmp10, tmp13, tmp11, tmp12 = tmp0 + tmp3, tmp0 - tmp3, tmp1 + tmp2, tmp1 - tmp2
    tmp3, tmp2, tmp1, tmp0 = x[1], x[3], x[5], x[7]
    z4, z3, z2, z1 = tmp1 + tmp3, tmp0 + tmp2, tmp1 + tmp2, tmp0 + tmp3
    z5 = (z3 + z4) * k["c1_175"]
    tmp3, tmp2, tmp1, tmp0 = tmp3 * k["c1_501"], tmp2 * k["c3_072"], tmp1 * k["c2_053"], tmp0 * k["c0_298"]
    z4 = -z4 * k["c0_390"] + z5
    z3 = -z3 * k["c1_961"] + z5
    z1 = -z1 * k["c0_899"]
    z2 = -z2 * k["c2_562"]
    tmp3, tmp2, tmp1, tmp0 = tmp3 + z1 + z4, tmp2 + z2 + z3, tmp1 + z2 + z4, tmp0 + z1 + z3
    return [tmp10 + tmp3, tmp11 + tmp2, tmp12 + tmp1, tmp13 + tmp0,
            tmp13 - tmp0, tmp12 - tmp1, tmp11 - tmp2, tmp10 - tmp3]


def islow_matrix(*, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None) -> Tensor:
    """``(8, 8)`` integer matrix ``A`` of libjpeg's islow 1-D IDCT: ``A[y, k]`` = output ``y`` for a
    unit coefficient at frequency ``k``, scaled by 2¹³ (≈ 2¹³·√8·c_k cos((2y+1)kπ/16))."""
    def make() -> Tensor:
        cols = [_islow_1d([int(i == k) for i in range(8)]) for k in range(8)]
        return torch.tensor(cols, dtype=torch.float64).T.to(dtype=dtype, device=device, non_blocking=True)

    return cached(("islow", dtype, str(device)), make)


def block_idct_islow(coeffs: Tensor) -> Tensor:
    r"""libjpeg's integer IDCT (``JDCT_ISLOW``, the default of libjpeg, Pillow and torchvision)
    of every block, bit-exact: ``(..., Hb, Wb, 64)`` dequantized integer coefficients →
    ``int32 (..., 8·Hb, 8·Wb)`` samples in 0..255 (level shift and clamping included).

    With ``A`` = :func:`islow_matrix` and ``F`` a block (rows = vertical frequency):
    :math:`W = \lfloor (A F + 2^{10}) / 2^{11} \rfloor` (columns, libjpeg's pass 1),
    :math:`f = \mathrm{clamp}(\lfloor (W A^\top + 2^{17}) / 2^{18} \rfloor + 128, 0, 255)` (rows).
    Every partial sum is an integer below 2⁴⁰, so float64 matmuls compute them exactly on any
    device (CUDA has no integer matmul). libjpeg's own shortcut for all-zero AC columns/rows gives
    the same values. Out-of-range results saturate, as libjpeg-turbo's SIMD code does (its C code
    wraps values beyond ±512 — only corrupt data gets there)."""
    *lead, hb, wb, _ = coeffs.shape
    a = islow_matrix(device=coeffs.device)
    blocks = coeffs.to(torch.float64).reshape(*lead, hb, wb, 8, 8)
    work = torch.floor((a @ blocks + 1024.0) / 2048.0)
    pix = torch.floor((work @ a.T + 131072.0) / 262144.0) + 128.0
    pix = pix.clamp(0.0, 255.0).to(torch.int32).transpose(-3, -2)
    return pix.reshape(*lead, hb * 8, wb * 8)


def _triangle_int(x: Tensor, valid: Tensor, bias: tuple[int, int], shift: int) -> Tensor:
    """libjpeg's integer triangle filter doubling the last axis of ``x (B, R, N)``:
    ``out[2i] = (3·s[i] + s[i−1] + bias[0]) >> shift``, ``out[2i+1] = (3·s[i] + s[i+1] + bias[1]) >> shift``,
    neighbours beyond the component's ``valid[b]`` samples replaced by the edge sample (libjpeg's
    edge cases and context rows reduce to exactly this)."""
    b, rows, n = x.shape
    # shifted copies, as dctnet.kernels.dct.resample_last: the left neighbour of s[0] is itself, the right
    # neighbour of each sample's last valid one is itself (libjpeg's edge), past it is padding
    prev = torch.cat([x[..., :1], x[..., :-1]], -1)
    nxt = torch.cat([x[..., 1:], x[..., -1:]], -1)
    last = (valid - 1).clamp(min=0)[:, None, None]
    nxt = torch.where(torch.arange(n, device=x.device) == last, x, nxt)
    even, odd = 3 * x + prev + bias[0], 3 * x + nxt + bias[1]
    return (torch.stack([even, odd], -1) >> shift).reshape(b, rows, 2 * n)


def upsample_pixels_exact(pix: Tensor, fh: int, fv: int, valid: Tensor, *, mode: str = "fancy") -> Tensor:
    """:func:`upsample_pixels` in libjpeg-turbo's integer arithmetic: ``int32 (B, H, W)`` samples,
    bit-exact. Fancy 2×1 rounds with the ordered dither (+1, +2) >> 2; 2×2 sums the two rows
    (3·near + far) and then rounds (+8, +7) >> 4; 1×2 rounds (+1, +2) >> 2."""
    if mode not in ("fancy", "nearest"):
        raise ValueError(f"mode must be 'fancy' or 'nearest', not {mode!r}")
    fancy = mode == "fancy"
    tr = lambda t: t.transpose(1, 2)  # noqa: E731  rows are filtered as transposed columns
    if fancy and (fh, fv) == (1, 2):
        return tr(_triangle_int(tr(pix), valid[:, 0], (1, 2), 2))
    if fancy and (fh, fv) in ((2, 1), (2, 2)):
        if fv == 2:
            sums = tr(_triangle_int(tr(pix), valid[:, 0], (0, 0), 0))   # 3·near + far, unrounded
            tri = _triangle_int(sums, valid[:, 1], (8, 7), 4)
        else:
            tri = _triangle_int(pix, valid[:, 1], (1, 2), 2)
        box = upsample_pixels_exact(pix, fh, fv, valid, mode="nearest")
        wide = (valid[:, 1] > 2)[:, None, None]  # libjpeg replicates components 1-2 samples wide
        return torch.where(wide, tri, box)
    out = pix  # replication (libjpeg's int_upsample): exact in any dtype
    if fv != 1:
        out = tr(resample_last(tr(out), fv, valid[:, 0], None))
    if fh != 1:
        out = resample_last(out, fh, valid[:, 1], None)
    return out


def _ycc_to_rgb_exact(y: Tensor, cb: Tensor, cr: Tensor) -> Tensor:
    """jdcolor.c's fixed-point YCbCr → RGB (SCALEBITS 16) on int32 samples, clamped: ``(B, 3, H, W)``.
    In int32: samples are 0..255, so every product and sum stays below 2²⁴ (116130·128 + 2¹⁵ the largest)."""
    cb, cr = cb.to(torch.int32) - 128, cr.to(torch.int32) - 128
    half = 1 << 15
    r = y + ((91881 * cr + half) >> 16)                    # FIX(1.40200)
    g = y + ((-22554 * cb - 46802 * cr + half) >> 16)      # FIX(0.34414), FIX(0.71414)
    b = y + ((116130 * cb + half) >> 16)                   # FIX(1.77200)
    return torch.stack([r, g, b], dim=1).clamp(0, 255).to(torch.int32)


def components_to_rgb_exact(comps: Tensor, color_space: str) -> Tensor:
    """:func:`dctnet.kernels.color.unit_planes_to_rgb` in libjpeg's (and, for CMYK, Pillow's) integer arithmetic."""
    if color_space == "gray":
        return comps[:, :1].expand(-1, 3, -1, -1)
    if color_space == "YCbCr":
        return _ycc_to_rgb_exact(comps[:, 0], comps[:, 1], comps[:, 2])
    if color_space == "RGB":
        return comps
    if color_space in ("CMYK", "YCCK"):
        if color_space == "YCCK":  # libjpeg's ycck_cmyk_convert
            cmy = 255 - _ycc_to_rgb_exact(comps[:, 0], comps[:, 1], comps[:, 2])
            comps = torch.cat([cmy, comps[:, 3:]], dim=1)
        # Pillow reads inverted ink (c' = 255 − C) and converts R = K − MULDIV255(c', K)
        k = comps[:, 3:4]
        t = (255 - comps[:, :3]) * k + 128
        return k - (((t >> 8) + t) >> 8)
    raise ValueError(f"cannot convert colour space {color_space!r} to RGB")
