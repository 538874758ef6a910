"""Boxes on a batch of pixels or coefficient images, shared by mixing (CutMix) and erasing:
the image geometry in pixels, pixel boxes snapped to the 8×8 block grid, and box masks."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["box_mask", "image_geometry", "snap_to_blocks"]


def image_geometry(shape: Sequence[int], name: str) -> tuple[bool, int, int]:
    """``(is a coefficient image, H, W)`` with H, W in pixels (``8·Hb, 8·Wb`` for a coefficient image)."""
    if len(shape) == 4:
        return False, int(shape[2]), int(shape[3])
    if len(shape) == 5 and shape[-1] == 64:
        return True, 8 * int(shape[2]), 8 * int(shape[3])
    raise ValueError(f"{name} takes pixels (B, C, H, W) or a coefficient image (B, 3, Hb, Wb, 64), "
                     f"got shape {tuple(shape)}")


def snap_to_blocks(top: Tensor, left: Tensor, h: Tensor, w: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Pixel boxes snapped to the 8-pixel grid: every edge to the nearest multiple of 8 (halves up)."""
    def r(v: Tensor) -> Tensor:
        return torch.div(v + 4, 8, rounding_mode="floor") * 8

    t, b, lft, rgt = r(top), r(top + h), r(left), r(left + w)
    return t, lft, b - t, rgt - lft


def box_mask(x: Tensor, boxes: Tensor, *, coefficients: bool) -> Tensor:
    """Bool mask of the pixels (blocks) inside ``boxes (B, 4)`` = (top, left, height, width) in pixels:
    ``(B, 1, H, W)`` for pixels, ``(B, 1, Hb, Wb, 1)`` for a coefficient image (``coefficients``: the
    caller's kernel says which; boxes block-aligned)."""
    if coefficients:
        boxes = torch.div(boxes, 8, rounding_mode="floor")
        hh, ww = x.shape[2], x.shape[3]
    else:
        hh, ww = x.shape[-2], x.shape[-1]
    top, left, h, w = boxes.unbind(-1)
    r = torch.arange(hh, device=x.device)
    c = torch.arange(ww, device=x.device)
    rows = (r >= top[:, None]) & (r < (top + h)[:, None])
    cols = (c >= left[:, None]) & (c < (left + w)[:, None])
    m = rows[:, :, None] & cols[:, None, :]
    return m[:, None, :, :, None] if coefficients else m[:, None]
