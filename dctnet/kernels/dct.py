r"""Pure tensor maths on 8×8 DCT blocks: the device side of dctnet.

Every function here is plain, batched ``torch`` (matmul / einsum / indexing, no per-sample or
per-block Python loops) and runs on any device. Conventions:

- A *plane* is ``(..., Hb, Wb, 64)``: a grid of blocks, coefficients in natural order
  ``k = 8·v + u`` (``v`` vertical, ``u`` horizontal frequency).
- A *mosaic* ``(..., C, 8·Hb, 8·Wb)`` is a plane laid out as an image: block ``(i, j)``'s
  coefficient ``k = 8·v + u`` at pixel ``(8i + v, 8j + u)``, as a JPEG file's DCT planes are
  drawn. Code that only looks at an image's shape (torchvision's detectors: batching, padding,
  anchors in pixels) carries coefficients as mosaics unchanged.
- Blocks hold the orthonormal 2-D DCT-II of level-shifted samples:
  :math:`F = C (f - 128) C^\top`, :math:`C[u, x] = c_u \cos\frac{(2x+1)u\pi}{16}`,
  :math:`c_0 = \sqrt{1/8}`, :math:`c_u = \sqrt{2/8}`. So ``DC = 8·mean(f − 128)``.
- Pixel tensors are float in the 0..255 scale unless a docstring says otherwise.
- Colour (YCbCr, CMYK) is :mod:`dctnet.kernels.color`; whole images (planes → RGB, float or
  libjpeg-exact, and back) :mod:`dctnet.image`; the libjpeg-exact integer primitives
  :mod:`dctnet.exact`; antialiased resizing :mod:`dctnet.resize`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Union

import torch
from torch import Tensor

from dctnet.kernels.cache import cached, plain_eager

__all__ = [
    "ZIGZAG",
    "block_dct",
    "block_idct",
    "box_downsample_dct",
    "box_downsample_matrix",
    "coefficient_mosaic",
    "dct_basis",
    "dct_matrix",
    "mosaic_coefficients",
    "upsample_nearest_dct",
    "upsample_nearest_matrices",
    "upsample_pixels",
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


def zigzag_indices(device: torch.device | str | None = None) -> Tensor:
    """``int64 (64,)``: natural index of each zigzag position (for frequency selection)."""
    return cached(("zigzag", str(device)),
                   lambda: torch.tensor(ZIGZAG, dtype=torch.long).to(device=device, non_blocking=True))


def dct_matrix(n: int = 8, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> Tensor:
    """Orthonormal DCT-II matrix ``C (n, n)``: ``C[u, x] = c_u cos((2x+1)uπ/2n)``, so ``C @ C.T = I``."""

    def make() -> Tensor:
        x = torch.arange(n, dtype=torch.float64)
        u = x[:, None]
        c = torch.cos((2 * x[None, :] + 1) * u * math.pi / (2 * n)) * math.sqrt(2.0 / n)
        c[0] /= math.sqrt(2.0)
        return c.to(dtype=dtype, device=device, non_blocking=True)

    return cached(("dct", n, dtype, str(device)), make)


def dct_basis(*, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> Tensor:
    """``(64, 64)`` matrix ``K`` with ``K[8v+u, 8y+x] = C[v, y]·C[u, x]``.

    A block's pixels (flattened row-major) are ``coeffs @ K``; its coefficients are
    ``pixels @ K.T`` (``K`` is orthogonal). One 64×64 matmul per block batch is the fastest
    form on GPUs and keeps the whole transform a single kernel."""

    def make() -> Tensor:
        c = dct_matrix(8, dtype=torch.float64, device="cpu")  # built on the host, then moved
        return torch.einsum("vy,ux->vuyx", c, c).reshape(64, 64).to(dtype=dtype, device=device, non_blocking=True)

    return cached(("basis", dtype, str(device)), make)


def block_idct(coeffs: Tensor) -> Tensor:
    """Inverse DCT of every block: ``(..., Hb, Wb, 64) -> (..., 8·Hb, 8·Wb)``.

    No level shift (add 128 for samples). Floating dtypes are kept; integers become float32."""
    if not coeffs.is_floating_point():
        coeffs = coeffs.float()
    *lead, hb, wb, _ = coeffs.shape
    pix = coeffs @ dct_basis(dtype=coeffs.dtype, device=coeffs.device)
    pix = pix.reshape(*lead, hb, wb, 8, 8).transpose(-3, -2)
    return pix.reshape(*lead, hb * 8, wb * 8)


def unit_samples(plane: Tensor, *, centred: bool, clamp: bool, transposed: bool = False) -> Tensor:
    """A component's samples from its dequantized coefficients ``plane (B, Hb, Wb, 64)`` (floating):
    ``(B, 8·Hb, 8·Wb)`` in units of 255 — ``s/255``, or ``(s − 128)/255`` if ``centred`` (chroma, whose
    colour maths subtracts the 128 anyway) — clamped to the 8-bit range when ``clamp``. One matmul with
    the level shift as its bias, and one pass that clamps while it lays the blocks out as rows: the
    passes of a separate shift, clamp and divide are gone. ``transposed``: ``(B, 8·Wb, 8·Hb)``, the
    plane transposed, laid out by the same pass."""
    b, hb, wb, _ = plane.shape
    basis = cached(("unit_basis", plane.dtype, str(plane.device)),
                    lambda: (dct_basis(dtype=torch.float64) / 255.0).to(dtype=plane.dtype, device=plane.device,
                                                                         non_blocking=True))
    flat = plane.reshape(-1, 64)
    if centred:
        blocks = flat @ basis
    else:
        shift = cached(("unit_shift", plane.dtype, str(plane.device)),
                        lambda: torch.full((64,), 128.0 / 255.0, dtype=plane.dtype).to(plane.device, non_blocking=True))
        blocks = torch.addmm(shift, flat, basis)
    blocks = blocks.view(b, hb, wb, 8, 8)                                          # (B, Hb, Wb, y, x)
    rows = blocks.permute(0, 2, 4, 1, 3) if transposed else blocks.transpose(2, 3)  # (B, Wb, 8, Hb, 8) / (B, Hb, 8, Wb, 8)
    size = (b, 8 * wb, 8 * hb) if transposed else (b, 8 * hb, 8 * wb)
    lo, hi = (-128.0 / 255.0, 127.0 / 255.0) if centred else (0.0, 1.0)
    if not clamp:
        return rows.reshape(size)
    if plain_eager(blocks):
        return torch.clamp(rows, lo, hi, out=blocks.new_empty(rows.shape)).view(size)
    return rows.reshape(size).clamp(lo, hi)


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


def coefficient_mosaic(plane: Tensor) -> Tensor:
    """Plane ``(..., C, Hb, Wb, 64)`` → mosaic ``(..., C, 8·Hb, 8·Wb)`` (module docstring)."""
    *lead, c, hb, wb, _ = plane.shape
    return plane.reshape(*lead, c, hb, wb, 8, 8).movedim(-2, -3).reshape(*lead, c, 8 * hb, 8 * wb)


def mosaic_coefficients(mosaic: Tensor) -> Tensor:
    """Mosaic ``(..., C, H, W)`` (H, W multiples of 8) → plane ``(..., C, H/8, W/8, 64)``."""
    *lead, c, h, w = mosaic.shape
    if h % 8 or w % 8:
        raise ValueError(f"a coefficient mosaic is 8×8 blocks: H and W must be multiples of 8, got {(h, w)}")
    return mosaic.reshape(*lead, c, h // 8, 8, w // 8, 8).movedim(-3, -2).reshape(*lead, c, h // 8, w // 8, 64)


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
        return out.permute(1, 2, 0, 3).contiguous().to(dtype=dtype, device=device, non_blocking=True)

    return cached(("upnn", fh, fv, dtype, str(device)), make)


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
        return block_dct(down).reshape(n, 64).to(dtype=dtype, device=device, non_blocking=True)

    return cached(("boxdown", fh, fv, dtype, str(device)), make)


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


def as_sizes(size: Size, batch: int, device: torch.device) -> Tensor:
    """``int64 (B, 2)`` of (height, width) per sample."""
    if isinstance(size, Tensor):
        s = size.to(device=device, dtype=torch.long)
        return s.expand(batch, 2) if s.dim() == 1 else s
    h, w = (int(v) for v in size)
    # built on the host, copied without blocking (torch.tensor(..., device=cuda) waits for the stream)
    return torch.tensor([[h, w]], dtype=torch.long).to(device, non_blocking=True).expand(batch, 2)


def component_extent(sizes: Tensor, h: int, v: int, hmax: int, vmax: int) -> Tensor:
    """``int64 (B, 2)``: a component's true (downsampled) height and width — libjpeg's
    ``downsampled_height/width`` = ⌈size·v/vmax⌉, ⌈size·h/hmax⌉."""
    return torch.stack([(sizes[:, 0] * v + vmax - 1) // vmax, (sizes[:, 1] * h + hmax - 1) // hmax], 1)


def resample_last(x: Tensor, factor: int, valid: Tensor, fancy: Tensor | None) -> Tensor:
    """Upsample ``x (B, R, N)`` by an integer ``factor`` along its last dimension.

    Samples at index ``>= valid[b]`` are treated as absent (replicated from the last valid one),
    as libjpeg does at the component's true edge. ``fancy`` (bool per sample, factor 2 only)
    selects libjpeg's triangle filter: output ``2i`` = ¾·s[i] + ¼·s[i−1], ``2i+1`` = ¾·s[i] + ¼·s[i+1];
    where it is False, or ``None``, samples are replicated."""
    b, rows, n = x.shape
    if fancy is None or factor != 2:
        return x.unsqueeze(-1).expand(b, rows, n, factor).reshape(b, rows, n * factor)
    return fancy_double(x, 2, valid, fancy).reshape(b, rows, 2 * n)


def fancy_double(x: Tensor, dim: int, valid: Tensor, fancy: Tensor) -> Tensor:
    """libjpeg's triangle filter doubling ``x (B, ·, ·)`` along ``dim`` (1 or 2): ``(B, N, 2, R)`` for
    ``dim=1`` (rows; reshape to ``(B, 2N, R)``), ``(B, R, N, 2)`` for ``dim=2``. Output ``2i`` =
    ``lerp(s[i−1], s[i], ¾)``, ``2i+1`` = ``lerp(s[i+1], s[i], ¾)``; the left neighbour of ``s[0]`` is
    itself, and so is the right neighbour of each sample's last valid one (``valid[b] − 1``:
    libjpeg's right edge; past it is padding no reader uses). Where ``fancy[b]`` is False the weight
    is 1: replication, exactly.

    Written straight into the interleaved output from shifted views (one ``lerp`` per parity and a
    scatter for the per-sample edge), no transposes, no concatenated copies: a third of the passes
    over the chroma planes that shifted copies and blends took."""
    n = x.shape[dim]
    other = 3 - dim  # the axis that is not resampled
    w = torch.where(fancy, 0.75, 1.0).to(x.dtype)[:, None, None]                   # (B, 1, 1)
    head, tail = x.narrow(dim, 0, n - 1), x.narrow(dim, 1, n - 1)
    shape = [x.shape[0], 1, 1]
    shape[other] = x.shape[other]
    last = (valid - 1).clamp(min=0, max=n - 1).view(-1, 1, 1).expand(*shape)
    if not plain_eager(x):  # the same lerps, concatenated and stacked (no out= into views)
        even = torch.cat([x.narrow(dim, 0, 1), torch.lerp(head, tail, w)], dim)
        odd = torch.cat([torch.lerp(tail, head, w), x.narrow(dim, n - 1, 1)], dim)
        odd = odd.scatter(dim, last, x.gather(dim, last))
        return torch.stack([even, odd], dim + 1)
    if dim == 1:
        out = x.new_empty(x.shape[0], n, 2, x.shape[2])
        even, odd = out[:, :, 0], out[:, :, 1]                                     # (B, N, R) views
    else:
        out = x.new_empty(x.shape[0], x.shape[1], n, 2)
        even, odd = out[..., 0], out[..., 1]                                       # (B, R, N) views
    torch.lerp(head, tail, w, out=even.narrow(dim, 1, n - 1))                      # s[i − 1] → s[i]
    even.narrow(dim, 0, 1).copy_(x.narrow(dim, 0, 1))
    torch.lerp(tail, head, w, out=odd.narrow(dim, 0, n - 1))                       # s[i + 1] → s[i]
    odd.narrow(dim, n - 1, 1).copy_(x.narrow(dim, n - 1, 1))
    # each sample's last valid sample: its right neighbour is itself
    odd.scatter_(dim, last, x.gather(dim, last))
    return out


def upsample_pixels(pix: Tensor, fh: int, fv: int, valid: Tensor, *, mode: str = "fancy",
                    transposed: bool = False) -> Tensor:
    """Upsample one component's samples ``(B, H, W)`` by integer factors ``(fh, fv)``.

    ``valid (B, 2)``: the component's true (downsampled) height and width per sample; samples
    beyond are replaced by edge replication, as libjpeg does. ``mode="fancy"`` reproduces
    libjpeg-turbo's default upsampler: the triangle filter for 2×1 (only when the component is
    more than 2 samples wide), 2×2 (same condition) and 1×2, and replication for every other
    ratio. ``mode="nearest"`` always replicates. ``transposed``: ``pix`` is ``(B, W, H)`` (the
    plane transposed) and so is the result; factors, ``valid`` and the rules stay the image's."""
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
    rows, cols = (2, 1) if transposed else (1, 2)  # the dims holding the image's y and x
    out = pix
    if fv != 1:  # y first, then x (libjpeg's order)
        out = _resample_dim(out, rows, fv, valid[:, 0], fancy_v)
    if fh != 1:
        out = _resample_dim(out, cols, fh, valid[:, 1], fancy_h)
    return out


def _resample_dim(x: Tensor, dim: int, factor: int, valid: Tensor, fancy: Tensor | None) -> Tensor:
    """Upsample ``x (B, ·, ·)`` by ``factor`` along ``dim`` (1 or 2): libjpeg's triangle filter where
    ``fancy`` says so (factor 2), replication elsewhere (:func:`resample_last`)."""
    b, n1, n2 = x.shape
    if fancy is not None and factor == 2:
        doubled = fancy_double(x, dim, valid, fancy)
        return doubled.reshape(b, 2 * n1, n2) if dim == 1 else doubled.reshape(b, n1, 2 * n2)
    if dim == 2:
        return resample_last(x, factor, valid, fancy)
    return resample_last(x.transpose(1, 2), factor, valid, fancy).transpose(1, 2)
