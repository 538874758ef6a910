"""torchvision v2's geometric ops on RGB batches ``(n, C, H, W)``, batched with per-sample
parameters: affine matrices (torchvision's centre and sign conventions, and PIL's inverse matrices
for timm's ops), torchvision's sampling grid (:func:`affine_grid`), :func:`affine` with
torchvision's fill and mask blending, :func:`rotate`. The colour and tone ops are
:mod:`dctnet.kernels.pixel` (its conventions hold here too); PIL's own bicubic warp (timm's) is
:mod:`dctnet.kernels.pil`.

torchvision samples a warped image on *centred pixel coordinates*: pixel ``(i, j)`` (row, column)
sits at ``u = j − (W − 1)/2``, ``v = i − (H − 1)/2``. An ``inverse (n, 2, 3)`` maps output
``(u, v, 1)`` to input ``(u', v')``; grid_sample (``align_corners=False``) then reads the input at
pixel ``(v' + (H − 1)/2, u' + (W − 1)/2)``. :func:`pil_affine_inverse` turns PIL's
``Image.transform(AFFINE)`` data (timm's shear / translate / rotate) into that ``inverse``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as nnf
from torch import Tensor

from dctnet.kernels.pixel import as_compute_dtype, as_tensor

__all__ = ["affine", "affine_grid", "affine_matrix", "pil_affine_inverse", "rotate"]


# -- geometry -------------------------------------------------------------------------------------------------------
def affine_matrix(angle: Tensor, translate: Tensor, scale: Tensor, shear: Tensor,
                  center: Tensor | Sequence[float] | None = None, *, size: tuple[int, int]) -> Tensor:
    r"""torchvision's ``_get_inverse_affine_matrix`` for a batch, as ``affine_image`` calls it:
    the ``inverse (n, 2, 3)`` (float64) that :func:`affine` takes.

    ``angle (n,)`` degrees (clockwise on screen, torchvision's ``affine``), ``translate (n, 2)``
    pixels (x, y), ``scale (n,)`` > 0, ``shear (n, 2)`` degrees (x, y) (or ``(n,)``: x only),
    ``center`` ``None`` (the image centre) or ``(2,)`` / ``(n, 2)`` pixel coordinates (x, y) with
    ``(0, 0)`` the top-left *corner* of the image (torchvision's RandAugment shears about
    ``[0, 0]``); ``size = (H, W)``.

    The forward map is ``M = T·C·R(a)·S(s)·SHy(sy)·SHx(sx)·C⁻¹`` (C the centre, in torchvision's
    centred coordinates ``c − (W/2, H/2)``), and with

    ``a' = cos(a − sy)/cos(sy)``, ``b' = −(a'·tan(sx) + sin(a))``, ``c' = sin(a − sy)/cos(sy)``,
    ``d' = cos(a) − c'·tan(sx)`` (a determinant-1 matrix),

    ``M⁻¹ = [[d', −b'], [−c', a']]/s`` with translation ``C − M⁻¹_lin·(C + T)``."""
    h, w = size
    ang = as_tensor(angle).to(torch.float64).reshape(-1)
    dev = ang.device
    tr = as_tensor(translate).to(device=dev, dtype=torch.float64, non_blocking=True).reshape(-1, 2)
    sc = as_tensor(scale).to(device=dev, dtype=torch.float64, non_blocking=True).reshape(-1)
    sh = as_tensor(shear).to(device=dev, dtype=torch.float64, non_blocking=True)
    sh = torch.stack([sh, torch.zeros_like(sh)], -1) if sh.dim() <= 1 else sh.reshape(-1, 2)
    if center is None:
        cx = cy = torch.zeros((), dtype=torch.float64, device=dev)
    else:
        c = as_tensor(center).to(device=dev, dtype=torch.float64, non_blocking=True).reshape(-1, 2)
        # torchvision turns a pixel centre into an offset from the image centre
        cx, cy = c[:, 0] - w * 0.5, c[:, 1] - h * 0.5
    rot = torch.deg2rad(ang)
    sx, sy = torch.deg2rad(sh[:, 0]), torch.deg2rad(sh[:, 1])
    cos_sy, tan_sx = torch.cos(sy), torch.tan(sx)
    a = torch.cos(rot - sy) / cos_sy
    b = -(a * tan_sx + torch.sin(rot))
    c_ = torch.sin(rot - sy) / cos_sy
    d = torch.cos(rot) - c_ * tan_sx
    m0, m1, m3, m4 = d / sc, -b / sc, -c_ / sc, a / sc
    cx_tx, cy_ty = cx + tr[:, 0], cy + tr[:, 1]
    m2 = cx - m0 * cx_tx - m1 * cy_ty
    m5 = cy - m3 * cx_tx - m4 * cy_ty
    n = max(t.shape[0] for t in (ang, tr, sc, sh, torch.atleast_1d(cx)))
    rows = [torch.broadcast_to(t, (n,)) for t in (m0, m1, m2, m3, m4, m5)]
    return torch.stack(rows, dim=-1).view(n, 2, 3)


def pil_affine_inverse(data: Tensor, *, size: tuple[int, int]) -> Tensor:
    r"""The ``inverse (n, 2, 3)`` for which :func:`affine` reproduces PIL's
    ``img.transform((W, H), Image.AFFINE, data)`` (timm's ``shear_x``, ``translate_x_abs``,
    ``rotate``, …), ``data (n, 6)`` = PIL's ``(a, b, c, d, e, f)``, ``size = (H, W)``.

    PIL maps output pixel ``(x, y)`` to the input point ``(a·X + b·Y + c, d·X + e·Y + f)`` with
    ``X = x + 0.5``, ``Y = y + 0.5`` (pixel centres at half-integers, origin at the image corner).
    torchvision's centred coordinates are ``u = X − W/2``, ``v = Y − H/2``, so with ``A`` the
    linear part, ``t = (c, f)`` and ``C = (W/2, H/2)``:

    ``inverse = [A | A·C + t − C]``.

    Identical sampling points; what differs is PIL's resampling at them (see the test file for
    the measured figures): NEAREST takes ``floor`` of the point where grid_sample rounds half to
    even (they differ on exact ties, and where PIL's 16.16 fixed-point nearest path drifts);
    BILINEAR truncates to uint8, clamps to the edge pixel inside the image box and uses the fill
    colour outside it, while torchvision blends the edge with the fill over half a pixel."""
    h, w = size
    a, b, c, d, e, f = as_tensor(data).to(torch.float64).reshape(-1, 6).unbind(-1)
    cx, cy = w * 0.5, h * 0.5
    rows = (a, b, a * cx + b * cy + c - cx, d, e, d * cx + e * cy + f - cy)
    return torch.stack(rows, dim=-1).view(-1, 2, 3)


def _fill_tensor(fill: Tensor | float | Sequence[float], x: Tensor) -> Tensor:
    """``fill`` as ``(1 or n, 1 or C, 1, 1)``: a number, a per-channel sequence / ``(C,)`` tensor,
    or a per-sample ``(n, C)`` (or ``(n, 1)``) tensor."""
    f = as_tensor(fill).to(device=x.device, dtype=x.dtype, non_blocking=True)
    if f.dim() <= 1:
        return f.reshape(1, -1, 1, 1)
    if f.dim() == 2:
        return f.reshape(f.shape[0], f.shape[1], 1, 1)
    raise ValueError(f"fill must be a number, a (C,) sequence or an (n, C) tensor, got shape {tuple(f.shape)}")


def affine_grid(theta: Tensor, h: int, w: int) -> Tensor:
    """torchvision's ``_affine_grid`` (output size = input size) for per-sample ``theta (n, 2, 3)``:
    ``(n, H, W, 2)`` normalised coordinates for grid_sample (``align_corners=False``).

    torchvision divides theta's rows by ``(W/2, H/2)`` and multiplies the centred base grid
    ``(u, v, 1)`` by it with ``bmm``; here the same products are summed elementwise (equal up to
    the last bit of the sum, and no matmul for TF32 to round)."""
    dtype, device = theta.dtype, theta.device
    u = torch.linspace((1.0 - w) * 0.5, (w - 1.0) * 0.5, steps=w, device=device).to(dtype).view(1, 1, w)
    v = torch.linspace((1.0 - h) * 0.5, (h - 1.0) * 0.5, steps=h, device=device).to(dtype).view(1, h, 1)
    rx = (theta[:, 0] / (0.5 * w)).reshape(-1, 3, 1, 1)
    ry = (theta[:, 1] / (0.5 * h)).reshape(-1, 3, 1, 1)
    gx = u * rx[:, 0] + v * rx[:, 1] + rx[:, 2]
    gy = u * ry[:, 0] + v * ry[:, 1] + ry[:, 2]
    return torch.stack((gx, gy), dim=-1)


def affine(img: Tensor, inverse: Tensor, *, interpolation: str = "nearest",
           fill: Tensor | float | Sequence[float] | None = None) -> Tensor:
    r"""Warp each sample by its ``inverse (n, 2, 3)`` (output → input, torchvision's centred
    pixel coordinates; see :func:`affine_matrix`, :func:`pil_affine_inverse`): torchvision's
    ``_affine_grid`` + ``_apply_grid_transform`` (what ``affine_image`` / ``rotate_image`` run),
    batched. Output size = input size.

    - ``interpolation``: ``"nearest"`` (rounds half to even), ``"bilinear"``, or ``"bicubic"``
      — grid_sample's cubic convolution with ``a = −0.75`` (timm's policies use PIL's own a = −1
      bicubic instead: :func:`dctnet.kernels.pil.pil_bicubic_affine`); torchvision refuses bicubic
      for tensor affine, so it has no reference; its output (and its mask, below) is clamped to [0, 1].
    - ``fill`` (on the [0, 1] scale): ``None`` → outside the image is 0 (grid_sample's zero
      padding, bilinear edges fade to 0). Otherwise a number, a per-channel ``(3,)`` sequence or
      tensor, or a per-sample ``(n, 3)`` tensor; as torchvision does, a ones channel is warped
      along with the image, and with that warped mask ``m``: nearest takes ``fill`` where
      ``m < 0.5``, bilinear / bicubic give ``(out − fill)·m + fill``. (So ``fill=0`` and
      ``fill=None`` differ along bilinear edges, as in torchvision.)

    The theta is cast to the image's dtype before the grid is built, as torchvision does."""
    mode = getattr(interpolation, "value", interpolation)
    if mode not in ("nearest", "bilinear", "bicubic"):
        raise ValueError(f"interpolation must be 'nearest', 'bilinear' or 'bicubic', got {interpolation!r}")
    x = as_compute_dtype(img)
    n, c, h, w = x.shape
    theta = as_tensor(inverse).to(device=x.device, dtype=x.dtype, non_blocking=True).reshape(-1, 2, 3)
    grid = affine_grid(theta, h, w).expand(n, h, w, 2)
    if fill is None:
        out = nnf.grid_sample(x, grid, mode=mode, padding_mode="zeros", align_corners=False)
    else:
        # one grid_sample for image and mask: the mask tells how much of each output is inside
        out = nnf.grid_sample(torch.cat([x, x.new_ones(n, 1, h, w)], dim=1), grid, mode=mode,
                              padding_mode="zeros", align_corners=False)
        out, mask = out[:, :c], out[:, c:]
        if mode == "bicubic":
            mask = mask.clamp(0.0, 1.0)  # cubic weights overshoot near the edge; keep m a blend weight
        f = _fill_tensor(fill, x)
        if mode == "nearest":
            out = torch.where(mask < 0.5, f, out)
        else:
            out = (out - f) * mask + f
    if mode == "bicubic":
        out = out.clamp(0.0, 1.0)
    return out.to(img.dtype)


def rotate(img: Tensor, angle: Tensor, *, interpolation: str = "nearest",
           fill: Tensor | float | Sequence[float] | None = None,
           center: Tensor | Sequence[float] | None = None) -> Tensor:
    """torchvision's ``rotate`` (``expand=False``) with a per-sample ``angle (n,)`` in degrees,
    counter-clockwise on screen; ``center`` ``None`` (image centre) or ``(2,)`` / ``(n, 2)`` pixel
    coordinates (x, y), corner origin; ``interpolation`` and ``fill`` as in :func:`affine`.

    torchvision's shortcuts for 0°, 180° (and 90°/270° on square images) copy or ``rot90`` the
    image; the warp samples the same pixel centres, so those angles agree to float rounding of the
    grid (exact for nearest, ≤ 1e-5 for bilinear)."""
    h, w = img.shape[-2:]
    a = torch.remainder(as_tensor(angle).to(torch.float64), 360.0)
    zeros = torch.zeros_like(a)
    inverse = affine_matrix(-a, torch.stack([zeros, zeros], -1), torch.ones_like(a), torch.stack([zeros, zeros], -1),
                            center, size=(h, w))
    return affine(img, inverse, interpolation=interpolation, fill=fill)
