r"""Pure tensor maths on 8×8 DCT blocks: the device side of dctnet.

Every function here is plain, batched ``torch`` (matmul / einsum / indexing, no per-sample or
per-block Python loops) and runs on any device. Conventions:

- A *plane* is ``(..., Hb, Wb, 64)``: a grid of blocks, coefficients in natural order
  ``k = 8·v + u`` (``v`` vertical, ``u`` horizontal frequency).
- Blocks hold the orthonormal 2-D DCT-II of level-shifted samples:
  :math:`F = C (f - 128) C^\top`, :math:`C[u, x] = c_u \cos\frac{(2x+1)u\pi}{16}`,
  :math:`c_0 = \sqrt{1/8}`, :math:`c_u = \sqrt{2/8}`. So ``DC = 8·mean(f − 128)``.
- Pixel tensors are float in the 0..255 scale unless a docstring says otherwise; :func:`to_rgb`
  returns torchvision's float convention, 0..1.
- Two decodes: float maths (default; within a few grey levels of libjpeg), and ``exact=True``,
  libjpeg-turbo's integer arithmetic (``islow`` IDCT, integer upsampling, fixed-point colour)
  reproduced bit for bit — Pillow's 8-bit pixels, as ``k/255``.

Colour (JFIF, full range)::

    R = Y + 1.402 (Cr − 128)
    G = Y − 0.344136 (Cb − 128) − 0.714136 (Cr − 128)
    B = Y + 1.772 (Cb − 128)

CMYK / YCCK (4 components, Adobe): libjpeg's CMYK samples are taken to follow the Adobe
(Photoshop) convention of *inverted* ink values, as Pillow assumes when it reads any CMYK JPEG
(rawmode ``"CMYK;I"``); converting like Pillow's ``convert("RGB")`` then gives
``R = C·K/255, G = M·K/255, B = Y·K/255`` in libjpeg's sample values. YCCK is first turned into
libjpeg's CMYK (``C = 255 − R(Y,Cb,Cr)`` etc., ``K`` unchanged), exactly as libjpeg does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Union

import torch
from torch import Tensor

__all__ = [
    "RESIZE_SUPPORT",
    "ZIGZAG",
    "block_dct",
    "block_idct",
    "block_idct_islow",
    "coefficients_to_rgb",
    "dct_matrix",
    "dct_basis",
    "from_rgb",
    "islow_matrix",
    "rgb_to_ycbcr",
    "to_rgb",
    "upsample_nearest_dct",
    "upsample_nearest_matrices",
    "upsample_pixels",
    "upsample_pixels_exact",
    "ycbcr_to_rgb",
    "zigzag_indices",
]

#: Natural index (``8·v + u``) of the i-th coefficient in JPEG zigzag order.
ZIGZAG: tuple[int, ...] = (
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5,
    12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21, 28,
    35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
    58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
)

Size = Union[tuple[int, int], Sequence[int], Tensor]

_cache: dict[tuple[Any, ...], Tensor] = {}


def _cached(key: tuple[Any, ...], make: Any) -> Tensor:
    # Small constant matrices, built once per (kind, dtype, device). device=None means the default
    # device, which a `with torch.device(...)` block changes: it is part of the key. Meta tensors
    # (shape-only model building) are never kept.
    default = str(torch.get_default_device())
    key = tuple(default if k == "None" else k for k in key)
    t = _cache.get(key)
    if t is None:
        t = make()
        if t.device.type != "meta":
            _cache[key] = t
    return t


def zigzag_indices(device: torch.device | str | None = None) -> Tensor:
    """``int64 (64,)``: natural index of each zigzag position (for frequency selection)."""
    return _cached(("zigzag", str(device)), lambda: torch.tensor(ZIGZAG, dtype=torch.long, device=device))


def dct_matrix(n: int = 8, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> Tensor:
    """Orthonormal DCT-II matrix ``C (n, n)``: ``C[u, x] = c_u cos((2x+1)uπ/2n)``, so ``C @ C.T = I``."""

    def make() -> Tensor:
        x = torch.arange(n, dtype=torch.float64)
        u = x[:, None]
        c = torch.cos((2 * x[None, :] + 1) * u * math.pi / (2 * n)) * math.sqrt(2.0 / n)
        c[0] /= math.sqrt(2.0)
        return c.to(dtype=dtype, device=device)

    return _cached(("dct", n, dtype, str(device)), make)


def dct_basis(*, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> Tensor:
    """``(64, 64)`` matrix ``K`` with ``K[8v+u, 8y+x] = C[v, y]·C[u, x]``.

    A block's pixels (flattened row-major) are ``coeffs @ K``; its coefficients are
    ``pixels @ K.T`` (``K`` is orthogonal). One 64×64 matmul per block batch is the fastest
    form on GPUs and keeps the whole transform a single kernel."""

    def make() -> Tensor:
        c = dct_matrix(8, dtype=torch.float64)
        return torch.einsum("vy,ux->vuyx", c, c).reshape(64, 64).to(dtype=dtype, device=device)

    return _cached(("basis", dtype, str(device)), make)


def block_idct(coeffs: Tensor) -> Tensor:
    """Inverse DCT of every block: ``(..., Hb, Wb, 64) -> (..., 8·Hb, 8·Wb)``.

    No level shift (add 128 for samples). Floating dtypes are kept; integers become float32."""
    if not coeffs.is_floating_point():
        coeffs = coeffs.float()
    *lead, hb, wb, _ = coeffs.shape
    pix = coeffs @ dct_basis(dtype=coeffs.dtype, device=coeffs.device)
    pix = pix.reshape(*lead, hb, wb, 8, 8).transpose(-3, -2)
    return pix.reshape(*lead, hb * 8, wb * 8)


def block_dct(pixels: Tensor) -> Tensor:
    """Forward DCT of every 8×8 block: ``(..., H, W) -> (..., H/8, W/8, 64)``; H, W multiples of 8.

    No level shift (subtract 128 from samples first)."""
    if not pixels.is_floating_point():
        pixels = pixels.float()
    *lead, h, w = pixels.shape
    if h % 8 or w % 8:
        raise ValueError(f"block_dct needs sizes that are multiples of 8, got {h}x{w}")
    blocks = pixels.reshape(*lead, h // 8, 8, w // 8, 8).transpose(-3, -2).reshape(*lead, h // 8, w // 8, 64)
    return blocks @ dct_basis(dtype=blocks.dtype, device=blocks.device).T


def upsample_nearest_matrices(fh: int, fv: int, *, dtype: torch.dtype = torch.float32,
                              device: torch.device | str | None = None) -> Tensor:
    """``(fv, fh, 64, 64)`` operators of nearest-neighbour upsampling in the DCT domain.

    Output block ``(i, j)`` of an upsampled block ``F`` is ``F @ M[i, j]``. Built by pushing the
    64 basis blocks through the pixel-domain operation (IDCT → repeat → DCT), so it is exact."""

    def make() -> Tensor:
        eye = torch.eye(64, dtype=torch.float64).reshape(64, 1, 1, 64)          # 64 one-block planes
        pix = block_idct(eye)                                                   # (64, 8, 8)
        up = pix.repeat_interleave(fv, dim=-2).repeat_interleave(fh, dim=-1)    # (64, 8fv, 8fh)
        out = block_dct(up)                                                     # (64, fv, fh, 64)
        return out.permute(1, 2, 0, 3).contiguous().to(dtype=dtype, device=device)

    return _cached(("upnn", fh, fv, dtype, str(device)), make)


def upsample_nearest_dct(plane: Tensor, fh: int, fv: int) -> Tensor:
    """Nearest-neighbour upsampling by integer factors, on coefficients:
    ``(..., Hb, Wb, 64) -> (..., fv·Hb, fh·Wb, 64)``. Equals DCT(repeat(IDCT(plane)))."""
    if fh == 1 and fv == 1:
        return plane
    if not plane.is_floating_point():
        plane = plane.float()
    m = upsample_nearest_matrices(fh, fv, dtype=plane.dtype, device=plane.device)
    *lead, hb, wb, _ = plane.shape
    out = torch.einsum("...hwk,ijkl->...hiwjl", plane, m)
    return out.reshape(*lead, hb * fv, wb * fh, 64)


def box_downsample_matrix(fh: int, fv: int, *, dtype: torch.dtype = torch.float32,
                          device: torch.device | str | None = None) -> Tensor:
    """``(fv·fh·64, 64)`` operator of ``fv × fh`` box-average downsampling in the DCT domain.

    The coefficients of ``fv × fh`` neighbouring blocks (row-major, each in natural order),
    concatenated, times this matrix give the block of their box-averaged pixels. Built by pushing
    the basis through the pixel-domain operation (IDCT → mean over ``fv × fh`` → DCT): exact."""

    def make() -> Tensor:
        n = fv * fh * 64
        eye = torch.eye(n, dtype=torch.float64).reshape(n, fv, fh, 64)           # n one-coefficient regions
        pix = block_idct(eye)                                                     # (n, 8fv, 8fh)
        down = pix.reshape(n, 8, fv, 8, fh).mean(dim=(2, 4))                      # (n, 8, 8)
        return block_dct(down).reshape(n, 64).to(dtype=dtype, device=device)

    return _cached(("boxdown", fh, fv, dtype, str(device)), make)


def box_downsample_dct(plane: Tensor, fh: int, fv: int) -> Tensor:
    """Box-average downsampling by integer factors, on coefficients:
    ``(..., Hb, Wb, 64) -> (..., Hb/fv, Wb/fh, 64)``. Equals DCT(box_mean(IDCT(plane))) — e.g. a
    JPEG encoder's 4:2:0 chroma (before its rounding) from full-resolution chroma, with ``(2, 2)``."""
    if fh == 1 and fv == 1:
        return plane
    if not plane.is_floating_point():
        plane = plane.float()
    *lead, hb, wb, _ = plane.shape
    if hb % fv or wb % fh:
        raise ValueError(f"a {hb}x{wb} block grid does not divide into {fv}x{fh} neighbourhoods")
    m = box_downsample_matrix(fh, fv, dtype=plane.dtype, device=plane.device)
    x = plane.reshape(*lead, hb // fv, fv, wb // fh, fh, 64).transpose(-4, -3)   # (..., Hb/fv, Wb/fh, fv, fh, 64)
    return x.reshape(*lead, hb // fv, wb // fh, fv * fh * 64) @ m


def _as_sizes(size: Size, batch: int, device: torch.device) -> Tensor:
    """``int64 (B, 2)`` of (height, width) per sample."""
    if isinstance(size, Tensor):
        s = size.to(device=device, dtype=torch.long)
        return s.expand(batch, 2) if s.dim() == 1 else s
    h, w = (int(v) for v in size)
    return torch.tensor([[h, w]], dtype=torch.long, device=device).expand(batch, 2)


def _neighbours(n: int, factor: int, valid: Tensor) -> tuple[Tensor, Tensor]:
    """Source indices ``(B, n·factor)`` of upsampling an axis of ``n`` samples by ``factor``: the
    nearest sample and (factor 2) the next nearest — left for even outputs, right for odd — both
    clamped to the ``valid[b]`` real samples (libjpeg replicates the edge sample)."""
    pos = torch.arange(n * factor, device=valid.device)
    last = (valid - 1).clamp(min=0)[:, None]                                   # (B, 1)
    near = torch.minimum((pos // factor)[None, :], last)
    far = torch.minimum((pos // 2 + torch.where(pos % 2 == 0, -1, 1)).clamp(min=0)[None, :], last)
    return near, far


def _component_extent(sizes: Tensor, h: int, v: int, hmax: int, vmax: int) -> Tensor:
    """``int64 (B, 2)``: a component's true (downsampled) height and width — libjpeg's
    ``downsampled_height/width`` = ⌈size·v/vmax⌉, ⌈size·h/hmax⌉."""
    return torch.stack([(sizes[:, 0] * v + vmax - 1) // vmax, (sizes[:, 1] * h + hmax - 1) // hmax], 1)


def _resample_last(x: Tensor, factor: int, valid: Tensor, fancy: Tensor | None) -> Tensor:
    """Upsample ``x (B, R, N)`` by an integer ``factor`` along its last dimension.

    Samples at index ``>= valid[b]`` are treated as absent (replicated from the last valid one),
    as libjpeg does at the component's true edge. ``fancy`` (bool per sample, factor 2 only)
    selects libjpeg's triangle filter: output ``2i`` = ¾·s[i] + ¼·s[i−1], ``2i+1`` = ¾·s[i] + ¼·s[i+1];
    where it is False, or ``None``, samples are replicated."""
    b, rows, n = x.shape
    near, far = _neighbours(n, factor, valid)
    gather = lambda idx: torch.gather(x, 2, idx[:, None, :].expand(b, rows, idx.shape[1]))  # noqa: E731
    if fancy is None or factor != 2:
        return gather(near)
    w_near = torch.where(fancy, 0.75, 1.0).to(x.dtype)[:, None, None]          # (B, 1, 1)
    g_far = gather(far)
    return g_far + w_near * (gather(near) - g_far)


def upsample_pixels(pix: Tensor, fh: int, fv: int, valid: Tensor, *, mode: str = "fancy") -> Tensor:
    """Upsample one component's samples ``(B, H, W)`` by integer factors ``(fh, fv)``.

    ``valid (B, 2)``: the component's true (downsampled) height and width per sample; samples
    beyond are replaced by edge replication, as libjpeg does. ``mode="fancy"`` reproduces
    libjpeg-turbo's default upsampler: the triangle filter for 2×1 (only when the component is
    more than 2 samples wide), 2×2 (same condition) and 1×2, and replication for every other
    ratio. ``mode="nearest"`` always replicates."""
    if mode not in ("fancy", "nearest"):
        raise ValueError(f"mode must be 'fancy' or 'nearest', not {mode!r}")
    use_fancy = mode == "fancy" and (fh, fv) in ((2, 1), (2, 2), (1, 2))
    wide = valid[:, 1] > 2
    if use_fancy and fh == 2:
        fancy_h: Tensor | None = wide
        fancy_v: Tensor | None = wide if fv == 2 else None
    elif use_fancy:  # (1, 2): libjpeg-turbo has no width condition for h1v2
        fancy_h, fancy_v = None, torch.ones_like(wide)
    else:
        fancy_h = fancy_v = None
    out = pix
    if fv != 1:  # rows: the same filter on the transposed samples
        out = _resample_last(out.transpose(1, 2), fv, valid[:, 0], fancy_v).transpose(1, 2)
    if fh != 1:
        out = _resample_last(out, fh, valid[:, 1], fancy_h)
    return out


_YCC_TO_RGB = ((1.0, 0.0, 1.402), (1.0, -0.344136, -0.714136), (1.0, 1.772, 0.0))


_RGB_TO_YCC = ((0.299, 0.587, 0.114), (-0.168735892, -0.331264108, 0.5), (0.5, -0.418687589, -0.081312411))


def _constant(name: str, values: Any, like: Tensor) -> Tensor:
    """A small constant tensor on ``like``'s dtype and device, built once: a ``torch.tensor(...,
    device=cuda)`` per call would be a blocking host-to-device copy (a sync) inside the device step."""
    return _cached((name, like.dtype, str(like.device)),
                   lambda: torch.tensor(values, dtype=torch.float64).to(dtype=like.dtype, device=like.device))


def ycbcr_to_rgb(ycc: Tensor, dim: int = -3) -> Tensor:
    """JFIF YCbCr → RGB on samples (0..255 scale), channels along ``dim``; no clamping."""
    m = _constant("ycc_to_rgb", _YCC_TO_RGB, ycc)
    x = ycc.movedim(dim, -1)
    return ((x - _constant("ycc_offset", (0.0, 128.0, 128.0), ycc)) @ m.T).movedim(-1, dim)


def rgb_to_ycbcr(rgb: Tensor, dim: int = -3) -> Tensor:
    """RGB → JFIF YCbCr on samples (0..255 scale), channels along ``dim``."""
    x = rgb.movedim(dim, -1) @ _constant("rgb_to_ycc", _RGB_TO_YCC, rgb).T
    return (x + _constant("ycc_offset", (0.0, 128.0, 128.0), rgb)).movedim(-1, dim)


def _components_to_rgb(comps: Tensor, color_space: str) -> Tensor:
    """``(B, C, H, W)`` samples (0..255) in ``color_space`` → ``(B, 3, H, W)`` RGB (0..255)."""
    if color_space == "gray":
        return comps[:, :1].expand(-1, 3, -1, -1)
    if color_space == "YCbCr":
        return ycbcr_to_rgb(comps, dim=1)
    if color_space == "RGB":
        return comps
    if color_space in ("CMYK", "YCCK"):
        if color_space == "YCCK":
            cmy = 255.0 - ycbcr_to_rgb(comps[:, :3], dim=1).clamp(0, 255)
            comps = torch.cat([cmy, comps[:, 3:]], dim=1)
        comps = comps.clamp(0, 255)
        return comps[:, :3] * comps[:, 3:4] / 255.0
    raise ValueError(f"cannot convert colour space {color_space!r} to RGB")


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
        return torch.tensor(cols, dtype=torch.float64).T.to(dtype=dtype, device=device)

    return _cached(("islow", dtype, str(device)), make)


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
    near, far = _neighbours(n, 2, valid)
    gather = lambda idx: torch.gather(x, 2, idx[:, None, :].expand(b, rows, idx.shape[1]))  # noqa: E731
    rounding = _cached(("triangle_bias", tuple(bias), n, x.dtype, str(x.device)),
                       lambda: torch.tensor(bias, dtype=x.dtype).repeat(n).to(x.device))
    return (3 * gather(near) + gather(far) + rounding) >> shift


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
        out = tr(_resample_last(tr(out), fv, valid[:, 0], None))
    if fh != 1:
        out = _resample_last(out, fh, valid[:, 1], None)
    return out


def _ycc_to_rgb_exact(y: Tensor, cb: Tensor, cr: Tensor) -> Tensor:
    """jdcolor.c's fixed-point YCbCr → RGB (SCALEBITS 16) on int32 samples, clamped: ``(B, 3, H, W)``."""
    cb, cr = cb.long() - 128, cr.long() - 128
    half = 1 << 15
    r = y + ((91881 * cr + half) >> 16)                    # FIX(1.40200)
    g = y + ((-22554 * cb - 46802 * cr + half) >> 16)      # FIX(0.34414), FIX(0.71414)
    b = y + ((116130 * cb + half) >> 16)                   # FIX(1.77200)
    return torch.stack([r, g, b], dim=1).clamp(0, 255).to(torch.int32)


def _components_to_rgb_exact(comps: Tensor, color_space: str) -> Tensor:
    """:func:`_components_to_rgb` in libjpeg's (and, for CMYK, Pillow's) integer arithmetic."""
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


def to_rgb(planes: Sequence[Tensor], sampling: Sequence[tuple[int, int]], size: Size, *,
           color_space: str = "YCbCr", upsampling: str = "fancy", clamp: bool = True,
           dtype: torch.dtype = torch.float32, exact: bool = False) -> Tensor:
    """Rebuild RGB images from coefficient planes (block IDCT, chroma upsampling, colour).

    Args:
        planes: one tensor per component, ``(B, Hb_c, Wb_c, 64)`` (int16 or float), MCU-aligned
            as :func:`dctnet.read_coefficients` returns them (``Hb_c = mcu_rows·v_c`` …).
        sampling: ``(h, v)`` sampling factors per component.
        size: true ``(height, width)``, shared, or an ``int64 (B, 2)`` tensor per sample.
        color_space: ``"YCbCr"``, ``"gray"``, ``"RGB"``, ``"CMYK"`` or ``"YCCK"``.
        upsampling: ``"fancy"`` (libjpeg's default, matches Pillow/libjpeg output) or
            ``"nearest"``. Non-integer ratios (e.g. 3×2 luma with 2×1 chroma), which libjpeg
            cannot decode, always use nearest: output pixel ``x`` takes component sample
            ``floor(x·h_c/h_max)``.
        clamp: clamp each component's samples to [0, 255] after the IDCT and the RGB result to
            [0, 1], as an 8-bit decoder does (off: the purely linear reconstruction).
        dtype: compute dtype (float32 default; autocast is disabled inside so AMP does not
            degrade reconstruction).
        exact: reproduce libjpeg-turbo's default decode bit for bit (integer ``islow`` IDCT,
            integer fancy upsampling, fixed-point colour conversion; Pillow's CMYK → RGB): the
            result is exactly ``k/255`` for Pillow's 8-bit pixel ``k``. Costs float64 matmuls and
            integer ops instead of one float32 matmul; for models that must see the very pixels
            they were trained on (e.g. comparing with a Pillow pipeline). Needs integer
            coefficients; always clamps; non-integer sampling ratios (which libjpeg cannot
            decode) raise ``ValueError``.

    Returns:
        ``(B, 3, H, W)`` float RGB in [0, 1], ``H, W`` the largest true size in the batch;
        pixels beyond a smaller sample's own size are padding (whatever its blocks decode to).
    """
    if len(planes) != len(sampling):
        raise ValueError(f"{len(planes)} planes but {len(sampling)} sampling factors")
    device = planes[0].device
    batch = planes[0].shape[0]
    sizes = _as_sizes(size, batch, device)
    if isinstance(size, Tensor):
        out_h, out_w = int(sizes[:, 0].max()), int(sizes[:, 1].max())
    else:
        out_h, out_w = int(size[0]), int(size[1])
    hmax = max(h for h, _ in sampling)
    vmax = max(v for _, v in sampling)
    with torch.autocast(device_type=device.type, enabled=False):
        if exact:
            return _to_rgb_exact(planes, sampling, sizes, out_h, out_w, hmax, vmax, color_space, upsampling).to(dtype) / 255.0
        comps = []
        for plane, (h, v) in zip(planes, sampling):
            pix = block_idct(plane.to(dtype)) + 128.0                      # (B, 8Hb, 8Wb)
            if clamp:  # a decoder's samples are 8-bit: ringing past 0/255 is cut before colour maths
                pix = pix.clamp(0.0, 255.0)
            valid = _component_extent(sizes, h, v, hmax, vmax)
            if hmax % h == 0 and vmax % v == 0:
                pix = upsample_pixels(pix, hmax // h, vmax // v, valid, mode=upsampling)
            else:
                pix = _upsample_fractional(pix, h, v, hmax, vmax, valid, out_h, out_w)
            comps.append(pix[:, :out_h, :out_w])
        rgb = _components_to_rgb(torch.stack(comps, dim=1), color_space)
        if clamp:
            rgb = rgb.clamp(0.0, 255.0)
        return rgb / 255.0


def _to_rgb_exact(planes: Sequence[Tensor], sampling: Sequence[tuple[int, int]], sizes: Tensor, out_h: int, out_w: int,
                  hmax: int, vmax: int, color_space: str, upsampling: str) -> Tensor:
    """:func:`to_rgb` with ``exact=True``: ``int32 (B, 3, H, W)`` pixels, libjpeg's own."""
    comps = []
    for plane, (h, v) in zip(planes, sampling):
        if hmax % h or vmax % v:
            raise ValueError(f"exact decode needs integer sampling ratios (libjpeg cannot decode {sampling})")
        valid = _component_extent(sizes, h, v, hmax, vmax)
        pix = upsample_pixels_exact(block_idct_islow(plane), hmax // h, vmax // v, valid, mode=upsampling)
        comps.append(pix[:, :out_h, :out_w])
    return _components_to_rgb_exact(torch.stack(comps, dim=1), color_space)


def _upsample_fractional(pix: Tensor, h: int, v: int, hmax: int, vmax: int, valid: Tensor, out_h: int,
                         out_w: int) -> Tensor:
    """Nearest mapping for non-integer sampling ratios: out (y, x) ← (⌊y·v/vmax⌋, ⌊x·h/hmax⌋)."""
    b = pix.shape[0]
    ys = torch.arange(out_h, device=pix.device) * v // vmax
    xs = torch.arange(out_w, device=pix.device) * h // hmax
    ys = torch.minimum(ys[None, :], (valid[:, :1] - 1).clamp(min=0)).clamp(max=pix.shape[1] - 1)
    xs = torch.minimum(xs[None, :], (valid[:, 1:] - 1).clamp(min=0)).clamp(max=pix.shape[2] - 1)
    rows = torch.gather(pix, 1, ys[:, :, None].expand(b, out_h, pix.shape[2]))
    return torch.gather(rows, 2, xs[:, None, :].expand(b, out_h, out_w))


def coefficients_to_rgb(coeffs: Any, *, device: torch.device | str | None = None, **kwargs: Any) -> Tensor:
    """:func:`to_rgb` for one :class:`dctnet.JpegCoefficients`: ``(1, 3, H, W)`` float in [0, 1]."""
    planes = [t.to(device).unsqueeze(0) for t in coeffs.to_torch()]
    return to_rgb(planes, coeffs.sampling, (coeffs.height, coeffs.width), color_space=coeffs.color_space, **kwargs)


def from_rgb(rgb: Tensor, sampling: Sequence[tuple[int, int]] = ((2, 2), (1, 1), (1, 1)), *,
             quant_tables: Tensor | None = None) -> list[Tensor]:
    """Encode-side counterpart of :func:`to_rgb`: RGB → YCbCr → chroma downsampling → block DCT.

    Args:
        rgb: ``(B, 3, H, W)`` float RGB in [0, 1] (torchvision convention).
        sampling: per component ``(h, v)``; one entry gives a grayscale (luma-only) result.
        quant_tables: optional ``(C, 64)`` or ``(C, 8, 8)`` tables; when given, coefficients are
            quantized and dequantized (``round(F/Q)·Q``) as a JPEG encoder at that table would.

    Returns:
        One float plane per component, ``(B, mcu_rows·v_c, mcu_cols·h_c, 64)``: MCU-aligned like
        the reader's output. Edges are padded by replicating the last row/column (what libjpeg's
        encoder does); chroma is downsampled by box averaging (libjpeg's downsampler, without
        its alternating rounding bias).
    """
    b, c, height, width = rgb.shape
    if c != 3:
        raise ValueError(f"from_rgb expects (B, 3, H, W) RGB, got {tuple(rgb.shape)}")
    hmax = max(h for h, _ in sampling)
    vmax = max(v for _, v in sampling)
    mcu_h, mcu_w = 8 * vmax, 8 * hmax
    pad_h, pad_w = -height % mcu_h, -width % mcu_w
    x = rgb.float() * 255.0
    ycc = rgb_to_ycbcr(x, dim=1) if len(sampling) > 1 else (x * _constant(
        "luma_weights", _RGB_TO_YCC[0], x).reshape(1, 3, 1, 1)).sum(1, keepdim=True)
    if pad_h or pad_w:
        ycc = torch.nn.functional.pad(ycc, (0, pad_w, 0, pad_h), mode="replicate")
    planes = []
    for ci, (h, v) in enumerate(sampling):
        fh, fv = hmax // h, vmax // v
        if hmax % h or vmax % v:
            raise ValueError(f"from_rgb supports integer sampling ratios only, got {sampling}")
        comp = ycc[:, ci:ci + 1]
        if fh > 1 or fv > 1:
            comp = torch.nn.functional.avg_pool2d(comp, (fv, fh))
        coeffs = block_dct(comp[:, 0] - 128.0)
        if quant_tables is not None:
            q = quant_tables[ci].reshape(64).to(coeffs)
            coeffs = torch.round(coeffs / q) * q
        planes.append(coeffs)
    return planes


#: what :func:`resize_matrices` offers: each filter's half-width in input pixels when the axis is
#: not shrunk (PIL's and torch's ``interp_size / 2``); a shrink by ``s > 1`` widens it ``s`` times
RESIZE_SUPPORT = {"bilinear": 1.0, "bicubic": 2.0}


def _resize_filter(x: Tensor, interpolation: str) -> Tensor:
    """The resampling kernel at ``x`` (input pixels, already divided by ``max(scale, 1)``):
    bilinear's triangle, or Keys' cubic convolution with ``a = −0.5`` — the kernel of PIL's
    ``BICUBIC`` and of torch's antialiased bicubic (``aa_filter``), not the ``a = −0.75`` of torch's
    non-antialiased bicubic and ``grid_sample``."""
    ax = torch.abs(x)
    if interpolation == "bilinear":
        return torch.clamp(1.0 - ax, min=0.0)
    a = -0.5
    near = ((a + 2.0) * ax - (a + 3.0)) * ax * ax + 1.0                         # |x| < 1
    far = ((a * ax - 5.0 * a) * ax + 8.0 * a) * ax - 4.0 * a                     # 1 ≤ |x| < 2
    return torch.where(ax < 1.0, near, torch.where(ax < 2.0, far, torch.zeros_like(ax)))


def _check_interpolation(interpolation: str) -> None:
    if interpolation not in RESIZE_SUPPORT:
        raise ValueError(f"interpolation must be one of {sorted(RESIZE_SUPPORT)}, not {interpolation!r}")


def resize_matrices(starts: Tensor, lengths: Tensor, in_size: int, out_size: int, *,
                    interpolation: str = "bilinear", resized: Tensor | None = None, offsets: Tensor | None = None,
                    dtype: torch.dtype = torch.float32) -> Tensor:
    """Per-sample 1-D resampling matrices ``(B, out_size, in_size)`` for an antialiased resize of
    the segment ``[starts[b], starts[b] + lengths[b])`` of an axis of ``in_size`` pixels.

    Without ``resized``/``offsets`` the segment is resized to ``out_size`` (torchvision's
    ``resized_crop``: crop, then resize). With them, the segment is resized to ``resized[b]``
    samples and the ``out_size`` outputs from ``offsets[b]`` on are kept (timm's eval transform:
    resize the whole image, then centre-crop); outputs outside ``[0, resized[b])`` (``offsets < 0``
    or past the end: a centre crop larger than the image, whose padding a caller fills) get an
    all-zero row. The segment may reach outside ``[0, in_size)`` (a whole image whose window is a
    part of it): taps are clipped to the segment, and the caller's window must hold every tap the
    kept outputs use (:class:`dctnet.data.ResizeCenterCrop` plans it so).

    The weights are exactly those of ``torch.nn.functional.interpolate(mode=interpolation,
    antialias=True, align_corners=False)``, i.e. PIL's resampling, which torchvision's ``resize``
    and ``resized_crop`` use: in segment coordinates, with ``scale = length/resized``, output ``k``
    (``offsets + i``) has centre ``c = scale·(k + ½)``, support ``R·max(scale, 1)`` (``R`` = 1
    bilinear, 2 bicubic), taps ``j ∈ [trunc(c − support + ½), trunc(c + support + ½))`` clipped to
    ``[0, length)``, weight ``filter((j − c + ½)/max(scale, 1))`` (the triangle, or the ``a = −0.5``
    cubic), normalised to sum 1. Applying ``M_y @ img @ M_xᵀ`` crops and resizes every sample at
    once. ``starts``, ``lengths``, ``resized``, ``offsets``: ``int64 (B,)`` in pixels."""
    _check_interpolation(interpolation)
    device = starts.device
    lengths = lengths.to(torch.float64)
    size = lengths if resized is None else resized.to(torch.float64)           # (B,) the resized segment
    scale = (lengths / (out_size if resized is None else size))[:, None]        # (B, 1)
    i = torch.arange(out_size, device=device, dtype=torch.float64)[None, :]
    if offsets is not None:
        i = i + offsets.to(torch.float64)[:, None]                              # (B, out) output index k
    centre = scale * (i + 0.5)                                                  # (B, out)
    stretch = torch.clamp(scale, min=1.0)                                       # the antialiasing widening
    support = stretch * RESIZE_SUPPORT[interpolation]
    lo = torch.clamp(torch.trunc(centre - support + 0.5), min=0.0)
    hi = torch.minimum(torch.trunc(centre + support + 0.5), lengths[:, None])
    j = torch.arange(in_size, device=device, dtype=torch.float64)[None, None, :] - starts.to(torch.float64)[:, None, None]
    if interpolation == "bilinear":  # the expression the bilinear matrices have always used (bit-identical)
        w = torch.clamp(1.0 - torch.abs((j - centre[..., None] + 0.5) / support[..., None]), min=0.0)
    else:
        w = _resize_filter((j - centre[..., None] + 0.5) / stretch[..., None], interpolation)
    keep = (j >= lo[..., None]) & (j < hi[..., None])
    if resized is not None:  # outputs past the resized segment: padding, no taps
        keep = keep & ((i >= 0) & (i < size[:, None]))[..., None]
    w = w * keep
    w = w / w.sum(-1, keepdim=True).clamp(min=1e-12)
    return w.to(dtype)


def resized_crop(images: Tensor, boxes: Tensor, size: tuple[int, int], *, interpolation: str = "bilinear",
                 resize: Tensor | None = None, fill: float | Sequence[float] = 0.0) -> Tensor:
    """Crop ``boxes (B, 4)`` = (top, left, height, width) out of ``images (B, C, H, W)`` and
    resize each to ``size`` = (h, w) with antialiased ``interpolation`` (``"bilinear"`` or
    ``"bicubic"``) weights — torchvision's ``resized_crop(..., antialias=True)`` on float tensors
    for every sample at once, as two batched matmuls (:func:`resize_matrices`). Returns
    ``(B, C, h, w)`` in the images' dtype, not clamped: bicubic overshoots the input's range, as
    torchvision's does on float tensors.

    ``resize``: ``int64 (B, 4)`` = (height, width, top, left): resize each box to height × width
    instead and keep the ``size`` crop at (top, left) of it — ``Resize`` then ``CenterCrop`` of
    the box (:attr:`dctnet.batch.JpegBatch.resize`). The box may then reach outside the image
    tensor (it is the whole image, of which ``images`` holds a window); taps are clipped to it.
    Output pixels outside the resized box (a crop larger than it) are ``fill`` (a float, or one
    per channel), as a padding centre crop gives."""
    th, tw = size
    ry = rx = None
    if resize is not None:
        ry, rx = (resize[:, 0], resize[:, 2]), (resize[:, 1], resize[:, 3])
    my = resize_matrices(boxes[:, 0], boxes[:, 2], images.shape[-2], th, interpolation=interpolation,
                         resized=None if ry is None else ry[0], offsets=None if ry is None else ry[1], dtype=images.dtype)
    mx = resize_matrices(boxes[:, 1], boxes[:, 3], images.shape[-1], tw, interpolation=interpolation,
                         resized=None if rx is None else rx[0], offsets=None if rx is None else rx[1], dtype=images.dtype)
    out = torch.einsum("bih,bchw,bjw->bcij", my, images, mx)
    fills = [float(v) for v in fill] if isinstance(fill, Sequence) else [float(fill)]
    if resize is not None and any(fills):  # padding (zero so far): where either axis has no taps
        inside = (my.abs().sum(-1) > 0)[:, :, None] & (mx.abs().sum(-1) > 0)[:, None, :]   # (B, h, w)
        value = torch.tensor(fills, dtype=images.dtype).to(images.device, non_blocking=True)
        out = torch.where(inside[:, None], out, value.reshape(1, -1, 1, 1).expand(1, images.shape[1], 1, 1))
    return out
