"""Colour maths on samples: JFIF's YCbCr ↔ RGB, and component planes in any JPEG colour space → RGB.

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

from collections.abc import Sequence

import torch
from torch import Tensor

from dctnet.kernels.cache import plain_eager

__all__ = ["CENTRED_COMPONENTS", "RGB_TO_YCC", "YCC_TO_RGB", "rgb_to_ycbcr", "ycbcr_to_rgb"]

#: JFIF's YCbCr → RGB matrix (rows R, G, B; columns Y, Cb − 128, Cr − 128)
YCC_TO_RGB = ((1.0, 0.0, 1.402), (1.0, -0.344136, -0.714136), (1.0, 1.772, 0.0))

#: JFIF's RGB → YCbCr matrix (rows Y, Cb, Cr; add 128 to the chroma rows)
RGB_TO_YCC = ((0.299, 0.587, 0.114), (-0.168735892, -0.331264108, 0.5), (0.5, -0.418687589, -0.081312411))


def ycbcr_to_rgb(ycc: Tensor, dim: int = -3) -> Tensor:
    """JFIF YCbCr → RGB on samples (0..255 scale), channels along ``dim``; no clamping."""
    y, cb, cr = ycc.unbind(dim)
    return centred_ycc_to_rgb(y, cb - 128.0, cr - 128.0, dim)


def centred_ycc_to_rgb(y: Tensor, cb: Tensor, cr: Tensor, dim: int) -> Tensor:
    """JFIF's matrix on planes with centred chroma (``Cb − 128``, ``Cr − 128`` in the planes' scale),
    stacked along ``dim`` of the result. Per-plane multiply-adds (a 3×3 matmul over a channels-last
    copy would move every sample twice for three products each)."""
    (_, _, rv), (_, gu, gv), (_, bu, _) = YCC_TO_RGB
    if plain_eager(y):
        # written into the output's planes, each a multiply-add with its scalar: no products held, no stack
        shape = list(y.shape)
        shape.insert(dim if dim >= 0 else y.dim() + 1 + dim, 3)
        out = y.new_empty(shape)
        r, g, b = out.unbind(dim)
        torch.add(y, cr, alpha=rv, out=r)
        torch.add(y, cb, alpha=gu, out=g).add_(cr, alpha=gv)
        torch.add(y, cb, alpha=bu, out=b)
        return out
    # the same multiply-adds, stacked: autograd and torch.compile take no out= into a tensor's planes
    return torch.stack([torch.add(y, cr, alpha=rv), torch.add(y, cb, alpha=gu).add_(cr, alpha=gv),
                        torch.add(y, cb, alpha=bu)], dim)


def rgb_to_ycbcr(rgb: Tensor, dim: int = -3) -> Tensor:
    """RGB → JFIF YCbCr on samples (0..255 scale), channels along ``dim``."""
    r, g, b = rgb.unbind(dim)
    rows = [r.mul(m0).add_(g, alpha=m1).add_(b, alpha=m2) for m0, m1, m2 in RGB_TO_YCC]
    return torch.stack([rows[0], rows[1].add_(128.0), rows[2].add_(128.0)], dim)


#: the components each colour space stores centred (``s − 128``: :func:`unit_samples`)
CENTRED_COMPONENTS = {"YCbCr": (1, 2), "YCCK": (1, 2)}


def unit_planes_to_rgb(comps: Sequence[Tensor], color_space: str, clamp: bool) -> Tensor:
    """Upsampled component planes ``(B, H, W)`` in units of 255 (chroma centred where
    :data:`CENTRED_COMPONENTS` says; clamped to the 8-bit range when ``clamp``) in ``color_space`` →
    RGB ``(B, 3, H, W)`` in [0, 1] (clamped when ``clamp``; CMYK and YCCK always, as Pillow's)."""
    if color_space == "gray":
        return comps[0][:, None].expand(-1, 3, -1, -1).contiguous()
    if color_space == "YCbCr":
        rgb = centred_ycc_to_rgb(comps[0], comps[1], comps[2], 1)
        return rgb.clamp_(0.0, 1.0) if clamp else rgb
    if color_space == "RGB":
        return torch.stack(list(comps[:3]), 1)
    if color_space in ("CMYK", "YCCK"):
        if color_space == "YCCK":  # libjpeg's CMYK: C = 255 − R(Y, Cb, Cr), …, K as it is
            cmy = 1.0 - centred_ycc_to_rgb(comps[0], comps[1], comps[2], 1).clamp(0.0, 1.0)
        else:
            cmy = torch.stack(list(comps[:3]), 1).clamp(0.0, 1.0)
        return cmy * comps[3].clamp(0.0, 1.0)[:, None]
    raise ValueError(f"cannot convert colour space {color_space!r} to RGB")
