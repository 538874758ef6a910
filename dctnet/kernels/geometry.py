"""torchvision v2's geometric ops on RGB batches ``(n, C, H, W)``, batched with per-sample
parameters: affine matrices (torchvision's centre and sign conventions, its forward map of points,
and PIL's inverse matrices for timm's ops), torchvision's sampling grids (:func:`affine_grid`,
:func:`perspective_grid`, with per-sample canvases in a padded batch for detection) and its
``_apply_grid_transform`` (:func:`grid_transform`: grid_sample with the fill and mask blending),
:func:`affine`, :func:`rotate`, :func:`perspective` and its coefficients
(:func:`perspective_coefficients`). The colour and tone ops are
:mod:`dctnet.kernels.pixel` (its conventions hold here too); PIL's own bicubic warp (timm's) is
:mod:`dctnet.kernels.pil`.

torchvision samples a warped image on *centred pixel coordinates*: pixel ``(i, j)`` (row, column)
sits at ``u = j − (W − 1)/2``, ``v = i − (H − 1)/2``. An ``inverse (n, 2, 3)`` maps output
``(u, v, 1)`` to input ``(u', v')``; grid_sample (``align_corners=False``) then reads the input at
pixel ``(v' + (H − 1)/2, u' + (W − 1)/2)``. :func:`pil_affine_inverse` turns PIL's
``Image.transform(AFFINE)`` data (timm's shear / translate / rotate) into that ``inverse``.

A perspective is torchvision's 8 ``coefficients`` ``(a, b, c, d, e, f, g, h)``: output pixel centre
``(x, y) = (j + ½, i + ½)`` (corner origin) reads the input at ``((a·x + b·y + c)/(g·x + h·y + 1),
(d·x + e·y + f)/(g·x + h·y + 1))``, in the same corner-origin coordinates.

**Padded batches** (detection: each sample's canvas ``in_sizes[b] = (h, w)`` at the top left of a
batch padded to ``(H, W)``): the grids read each sample's own canvas (the normalisation is the
padded tensor's, the centre the sample's), and :func:`grid_transform` treats the padding as outside
the image (the fill); with one canvas the size of the tensor, both are torchvision's own formulas
(up to the last bit of a sum: elementwise here, ``bmm`` there). Padded, the normalisation by the
batch's size moves a sampling point by a few float32 ulps: bilinear values by ≤ 3e-5, and the rare
exact nearest tie may round the other way (``tests/test_perspective.py``, ``test_detection_geometry.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as nnf
from torch import Tensor

from dctnet.kernels.pixel import as_compute_dtype, as_tensor

__all__ = ["affine", "affine_grid", "affine_matrix", "grid_transform", "perspective", "perspective_coefficients",
           "perspective_grid", "pil_affine_inverse", "rotate"]


# -- geometry -------------------------------------------------------------------------------------------------------
def affine_matrix(angle: Tensor, translate: Tensor, scale: Tensor, shear: Tensor,
                  center: Tensor | Sequence[float] | None = None, *, size: tuple[int, int],
                  inverted: bool = True) -> Tensor:
    r"""torchvision's ``_get_inverse_affine_matrix`` for a batch: ``(n, 2, 3)`` float64.

    ``angle (n,)`` degrees (clockwise on screen, torchvision's ``affine``), ``translate (n, 2)``
    pixels (x, y), ``scale (n,)`` > 0, ``shear (n, 2)`` degrees (x, y) (or ``(n,)``: x only),
    ``center`` ``None`` (the image centre) or ``(2,)`` / ``(n, 2)`` pixel coordinates (x, y) with
    ``(0, 0)`` the top-left *corner* of the image (torchvision's RandAugment shears about
    ``[0, 0]``); ``size = (H, W)``.

    The forward map is ``M = T·C·R(a)·S(s)·SHy(sy)·SHx(sx)·C⁻¹`` (C the centre), and with

    ``a' = cos(a − sy)/cos(sy)``, ``b' = −(a'·tan(sx) + sin(a))``, ``c' = sin(a − sy)/cos(sy)``,
    ``d' = cos(a) − c'·tan(sx)`` (a determinant-1 matrix):

    - ``inverted=True`` (as ``affine_image`` calls it): the ``inverse`` that :func:`affine` takes,
      in torchvision's centred coordinates (C = ``center − (W/2, H/2)``):
      ``M⁻¹ = [[d', −b'], [−c', a']]/s`` with translation ``C − M⁻¹_lin·(C + T)``;
    - ``inverted=False`` (as ``affine_bounding_boxes`` calls it): the forward map of points (box
      corners) in pixel coordinates about ``center`` (default ``(W/2, H/2)``):
      ``[[a', b'], [c', d']]·s`` with translation ``C + T − M_lin·C``."""
    h, w = size
    ang = as_tensor(angle).to(torch.float64).reshape(-1)
    dev = ang.device
    tr = as_tensor(translate).to(device=dev, dtype=torch.float64, non_blocking=True).reshape(-1, 2)
    sc = as_tensor(scale).to(device=dev, dtype=torch.float64, non_blocking=True).reshape(-1)
    sh = as_tensor(shear).to(device=dev, dtype=torch.float64, non_blocking=True)
    sh = torch.stack([sh, torch.zeros_like(sh)], -1) if sh.dim() <= 1 else sh.reshape(-1, 2)
    if center is None:
        px = torch.full((), w * 0.5, dtype=torch.float64, device=dev)
        py = torch.full((), h * 0.5, dtype=torch.float64, device=dev)
        cx = cy = torch.zeros((), dtype=torch.float64, device=dev)
    else:
        c = as_tensor(center).to(device=dev, dtype=torch.float64, non_blocking=True).reshape(-1, 2)
        # torchvision turns a pixel centre into an offset from the image centre (for the inverse)
        px, py = c[:, 0], c[:, 1]
        cx, cy = px - w * 0.5, py - h * 0.5
    rot = torch.deg2rad(ang)
    sx, sy = torch.deg2rad(sh[:, 0]), torch.deg2rad(sh[:, 1])
    cos_sy, tan_sx = torch.cos(sy), torch.tan(sx)
    a = torch.cos(rot - sy) / cos_sy
    b = -(a * tan_sx + torch.sin(rot))
    c_ = torch.sin(rot - sy) / cos_sy
    d = torch.cos(rot) - c_ * tan_sx
    if inverted:
        m0, m1, m3, m4 = d / sc, -b / sc, -c_ / sc, a / sc
        cx_tx, cy_ty = cx + tr[:, 0], cy + tr[:, 1]
        m2 = cx - m0 * cx_tx - m1 * cy_ty
        m5 = cy - m3 * cx_tx - m4 * cy_ty
    else:  # points in pixel coordinates: the centre as given
        m0, m1, m3, m4 = a * sc, b * sc, c_ * sc, d * sc
        m2 = m0 * -px + m1 * -py + (px + tr[:, 0])
        m5 = m3 * -px + m4 * -py + (py + tr[:, 1])
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


def affine_grid(theta: Tensor, h: int, w: int, *, in_sizes: Tensor | None = None, out_sizes: Tensor | None = None,
                in_shape: tuple[int, int] | None = None) -> Tensor:
    """torchvision's ``_affine_grid`` for per-sample ``theta (n, 2, 3)`` (output centred coordinates
    to input centred coordinates): ``(n, h, w, 2)`` normalised coordinates for grid_sample
    (``align_corners=False``) of an ``h × w`` output read from an input of the same size.

    Detection's padded batches (and a rotation with ``expand``, whose output is larger than its
    input): ``out_sizes (n, 2)`` each sample's output canvas (h, w), whose centre its coordinates
    are taken from (default ``(h, w)``); ``in_sizes (n, 2)`` its input canvas, at the top left of an
    input tensor of ``in_shape = (H, W)`` (default ``(h, w)``; ``in_sizes`` default: the tensor).

    torchvision divides theta's rows by the input's ``(W/2, H/2)`` and multiplies the centred base
    grid ``(u, v, 1)`` by it with ``bmm``; here the same products are summed elementwise (equal up
    to the last bit of the sum, and no matmul for TF32 to round). A canvas narrower than the tensor
    first shifts theta's translation by ``(w − W)/2`` (exactly 0 for a canvas the tensor's size)."""
    dtype, device = theta.dtype, theta.device
    ih, iw = (h, w) if in_shape is None else (int(in_shape[0]), int(in_shape[1]))
    if out_sizes is None:
        u = torch.linspace((1.0 - w) * 0.5, (w - 1.0) * 0.5, steps=w, device=device).to(dtype).view(1, 1, w)
        v = torch.linspace((1.0 - h) * 0.5, (h - 1.0) * 0.5, steps=h, device=device).to(dtype).view(1, h, 1)
    else:  # each sample's own centre
        o = out_sizes.to(device=device, non_blocking=True).to(dtype)
        u = torch.arange(w, device=device, dtype=dtype).view(1, 1, w) - (o[:, 1] - 1).reshape(-1, 1, 1) * 0.5
        v = torch.arange(h, device=device, dtype=dtype).view(1, h, 1) - (o[:, 0] - 1).reshape(-1, 1, 1) * 0.5
    if in_sizes is not None:  # each sample's input canvas at the tensor's top left
        c = in_sizes.to(device=device, non_blocking=True).to(dtype)
        shift = torch.stack([(c[:, 1] - iw) * 0.5, (c[:, 0] - ih) * 0.5], -1)
        theta = torch.cat([theta[:, :, :2], theta[:, :, 2:] + shift[:, :, None]], -1)
    rx = (theta[:, 0] / (0.5 * iw)).reshape(-1, 3, 1, 1)
    ry = (theta[:, 1] / (0.5 * ih)).reshape(-1, 3, 1, 1)
    gx = u * rx[:, 0] + v * rx[:, 1] + rx[:, 2]
    gy = u * ry[:, 0] + v * ry[:, 1] + ry[:, 2]
    return torch.stack((gx, gy), dim=-1)


def perspective_grid(coefficients: Tensor, h: int, w: int, *, in_shape: tuple[int, int] | None = None) -> Tensor:
    """torchvision's ``_perspective_grid`` for per-sample ``coefficients (n, 8)`` (module
    docstring): ``(n, h, w, 2)`` normalised coordinates for grid_sample (``align_corners=False``) of
    an ``h × w`` output read from an input of the same size, or, in a padded batch, from an input
    tensor of ``in_shape = (H, W)`` (each canvas at its top left: the point a sample reads does not
    depend on its canvas size, only its normalisation does).

    torchvision divides ``(a, b, c)`` by ``W/2`` and ``(d, e, f)`` by ``H/2`` and multiplies the base
    grid ``(x, y, 1)`` by them and by ``(g, h, 1)`` with ``bmm``; here the products are summed
    elementwise (equal up to the last bit of each sum), then divided, less 1, as there."""
    dtype, device = coefficients.dtype, coefficients.device
    ih, iw = (h, w) if in_shape is None else (int(in_shape[0]), int(in_shape[1]))
    c = coefficients.reshape(-1, 8, 1, 1)
    x = torch.linspace(0.5, w - 0.5, steps=w, device=device, dtype=dtype).view(1, 1, w)
    y = torch.linspace(0.5, h - 0.5, steps=h, device=device, dtype=dtype).view(1, h, 1)
    rx = c[:, 0:3] / (0.5 * iw)  # (a half-integer: exact in any float dtype, as torchvision's tensor of it)
    ry = c[:, 3:6] / (0.5 * ih)
    den = x * c[:, 6] + y * c[:, 7] + 1.0
    gx = (x * rx[:, 0] + y * rx[:, 1] + rx[:, 2]) / den - 1.0
    gy = (x * ry[:, 0] + y * ry[:, 1] + ry[:, 2]) / den - 1.0
    return torch.stack((gx, gy), dim=-1)


def perspective_coefficients(startpoints: Tensor, endpoints: Tensor) -> Tensor:
    """torchvision's ``_get_perspective_coeffs`` for a batch: ``(n, 8)`` float32, the coefficients
    (module docstring) that take each output point to its input point — the ``endpoints`` to the
    ``startpoints``, ``(n, 4, 2)`` (or ``(4, 2)``, shared) pixel coordinates (x, y) of the corners
    (top-left, top-right, bottom-right, bottom-left). As there: the 8 × 8 system solved by least
    squares in float64 (LAPACK's ``gels``), the solution rounded to float32. Host or device."""
    s = as_tensor(startpoints).to(torch.float64).reshape(-1, 4, 2)
    e = as_tensor(endpoints).to(device=s.device, dtype=torch.float64).reshape(-1, 4, 2)
    n = max(s.shape[0], e.shape[0])
    s, e = s.expand(n, 4, 2), e.expand(n, 4, 2)
    ex, ey, sx, sy = e[..., 0], e[..., 1], s[..., 0], s[..., 1]
    zero, one = torch.zeros_like(ex), torch.ones_like(ex)
    row_x = torch.stack([ex, ey, one, zero, zero, zero, -sx * ex, -sx * ey], -1)      # (n, 4, 8)
    row_y = torch.stack([zero, zero, zero, ex, ey, one, -sy * ex, -sy * ey], -1)
    a = torch.stack([row_x, row_y], 2).reshape(n, 8, 8)                                # rows x0, y0, x1, y1, …
    b = s.reshape(n, 8, 1)
    return torch.linalg.lstsq(a, b, driver="gels").solution[..., 0].to(torch.float32)


def grid_transform(img: Tensor, grid: Tensor, *, interpolation: str = "nearest",
                   fill: Tensor | float | Sequence[float] | None = None, in_sizes: Tensor | None = None) -> Tensor:
    r"""torchvision's ``_apply_grid_transform``, batched: ``img (n, C, H, W)`` sampled at ``grid
    (n, h, w, 2)`` (:func:`affine_grid`, :func:`perspective_grid`) by grid_sample
    (``align_corners=False``, zero padding): ``(n, C, h, w)``.

    - ``interpolation``: ``"nearest"`` (rounds half to even), ``"bilinear"``, or ``"bicubic"``
      — grid_sample's cubic convolution with ``a = −0.75``, which torchvision refuses for tensors
      (so no reference); its output (and its mask, below) is clamped to [0, 1].
    - ``fill`` (on the [0, 1] scale): ``None`` → outside the image is 0 (grid_sample's zero
      padding, bilinear edges fade to 0). Otherwise a number, a per-channel ``(C,)`` sequence or
      tensor, or a per-sample ``(n, C)`` tensor; as torchvision does, a ones channel is sampled
      along with the image, and with that mask ``m``: nearest takes ``fill`` where ``m < 0.5``,
      bilinear / bicubic give ``(out − fill)·m + fill``. (So ``fill=0`` and ``fill=None`` differ
      along bilinear edges, as in torchvision.)
    - ``in_sizes (n, 2)``: each sample's canvas (h, w) at the top left of ``img``; the batch's
      padding past it reads as outside the image (zeroed, and 0 in the mask)."""
    mode = getattr(interpolation, "value", interpolation)
    if mode not in ("nearest", "bilinear", "bicubic"):
        raise ValueError(f"interpolation must be 'nearest', 'bilinear' or 'bicubic', got {interpolation!r}")
    x = as_compute_dtype(img)
    n, c, h, w = x.shape
    grid = grid.to(x.dtype).expand(n, *grid.shape[1:])
    mask = None
    if in_sizes is not None:
        s = in_sizes.to(x.device, non_blocking=True)
        rows = torch.arange(h, device=x.device)[None, :, None] < s[:, 0, None, None]
        cols = torch.arange(w, device=x.device)[None, None, :] < s[:, 1, None, None]
        mask = (rows & cols)[:, None].to(x.dtype)                                   # (n, 1, H, W): the canvas
        x = x * mask
    if fill is None:
        out = nnf.grid_sample(x, grid, mode=mode, padding_mode="zeros", align_corners=False)
    else:
        # one grid_sample for image and mask: the mask tells how much of each output is inside
        mask = x.new_ones(n, 1, h, w) if mask is None else mask
        out = nnf.grid_sample(torch.cat([x, mask], dim=1), grid, mode=mode, padding_mode="zeros", align_corners=False)
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


def affine(img: Tensor, inverse: Tensor, *, interpolation: str = "nearest",
           fill: Tensor | float | Sequence[float] | None = None) -> Tensor:
    r"""Warp each sample by its ``inverse (n, 2, 3)`` (output → input, torchvision's centred
    pixel coordinates; see :func:`affine_matrix`, :func:`pil_affine_inverse`): torchvision's
    ``_affine_grid`` + ``_apply_grid_transform`` (what ``affine_image`` / ``rotate_image`` run),
    batched (:func:`affine_grid`, :func:`grid_transform`: ``interpolation`` and ``fill`` as there;
    timm's policies use PIL's own a = −1 bicubic instead: :func:`dctnet.kernels.pil.pil_bicubic_affine`).
    Output size = input size.

    The theta is cast to the image's dtype before the grid is built, as torchvision does."""
    x = as_compute_dtype(img)
    n, _, h, w = x.shape
    theta = as_tensor(inverse).to(device=x.device, dtype=x.dtype, non_blocking=True).reshape(-1, 2, 3)
    grid = affine_grid(theta, h, w).expand(n, h, w, 2)
    return grid_transform(x, grid, interpolation=interpolation, fill=fill).to(img.dtype)


def perspective(img: Tensor, coefficients: Tensor, *, interpolation: str = "bilinear",
                fill: Tensor | float | Sequence[float] | None = None) -> Tensor:
    """torchvision's ``perspective_image`` with per-sample ``coefficients (n, 8)``
    (:func:`perspective_coefficients`; a ``(8,)`` is shared): :func:`perspective_grid` +
    :func:`grid_transform`, ``interpolation`` ``"nearest"`` or ``"bilinear"`` (torchvision's two for
    tensors), ``fill`` as there. Output size = input size; the coefficients are cast to the image's
    dtype, as torchvision builds its thetas in it."""
    mode = getattr(interpolation, "value", interpolation)
    if mode not in ("nearest", "bilinear"):
        raise ValueError(f"perspective: interpolation must be 'nearest' or 'bilinear', got {interpolation!r}")
    x = as_compute_dtype(img)
    n, _, h, w = x.shape
    coeffs = as_tensor(coefficients).to(device=x.device, dtype=x.dtype, non_blocking=True).reshape(-1, 8)
    grid = perspective_grid(coeffs, h, w).expand(n, h, w, 2)
    return grid_transform(x, grid, interpolation=mode, fill=fill).to(img.dtype)


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
