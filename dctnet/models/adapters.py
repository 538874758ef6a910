"""Interface adapters: a DCT stem behind the interface a model's forward expects of its first layer.

A model's forward often does more with its input than pass it to the first conv: timm's
``PatchEmbed`` reads ``B, C, H, W = x.shape`` and checks the image size, torchvision's
``VisionTransformer._process_input`` does the same before flattening the patches to tokens. On a
coefficient image ``(B, 3, Hb, Wb, 64)`` those checks are made on the block grid (pixels = 8 ×
blocks) and fail as a ``ValueError`` naming both sizes; the rest of the forward is unchanged.
"""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["TimmDCTPatchEmbed", "block_grid", "grid_error", "is_timm_patch_embed"]


def block_grid(x: object, what: str) -> tuple[int, int]:
    """``(Hb, Wb)`` of a coefficient image ``(B, C, Hb, Wb, 64)`` or a native pair ``(y, c)``
    (``y (B, Hb, Wb, 64)``); a ``ValueError`` naming ``what`` for anything else (RGB pixels)."""
    if isinstance(x, Tensor) and x.dim() == 5:
        return int(x.shape[2]), int(x.shape[3])
    if isinstance(x, (tuple, list)) and len(x) == 2 and isinstance(x[0], Tensor) and x[0].dim() == 4:
        return int(x[0].shape[1]), int(x[0].shape[2])
    got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
    raise ValueError(f"{what} takes a coefficient image (B, 3, Hb, Wb, 64) from dctnet.transforms.crops_to_coefficients "
                     f"(or (y, c) with chroma='native'), got {got}")


def grid_error(what: str, expected_px: tuple[int, int], got: tuple[int, int], patch: int | None) -> ValueError:
    """The error for a block grid ``got`` that is not the ``expected_px`` pixel size: both sizes in
    pixels, blocks and (with ``patch``) patches."""
    eh, ew = expected_px
    tokens = f", {eh // patch}x{ew // patch} patches" if patch else ""
    return ValueError(f"{what} expects {eh}x{ew} pixels = a {eh / 8:g}x{ew / 8:g} block grid{tokens}; got a "
                      f"{got[0]}x{got[1]} block grid ({8 * got[0]}x{8 * got[1]} pixels"
                      + (f", {8 * got[0] / patch:g}x{8 * got[1] / patch:g} patches" if patch else "") + ")")


def is_timm_patch_embed(module: nn.Module) -> bool:
    """timm's ``PatchEmbed`` (ViT, Swin, ...): its forward reads ``B, C, H, W = x.shape`` before
    the conv, so a DCT stem goes into :class:`TimmDCTPatchEmbed` instead of its ``proj``."""
    return type(module).__name__ == "PatchEmbed" and all(hasattr(module, a) for a in ("proj", "norm", "img_size"))


class TimmDCTPatchEmbed(nn.Module):
    """timm's ``PatchEmbed`` interface around a DCT stem ``proj``: the original's size checks (on
    the block grid), its output format (tokens ``(B, N, C)``, or NHWC for Swin) and its norm.

    Input: a coefficient image ``(B, 3, Hb, Wb, 64)`` or a native pair ``(y, c)``, whatever
    ``proj`` takes; ``proj`` gives ``(B, C, H, W)``. State_dict keys stay ``proj.*`` / ``norm.*``."""

    def __init__(self, original: nn.Module, proj: nn.Module) -> None:
        super().__init__()
        self.proj = proj
        self.norm = original.norm
        for attr in ("patch_size", "img_size", "grid_size", "num_patches", "flatten", "output_fmt",
                     "dynamic_img_pad", "strict_img_size", "dynamic_img_size"):
            if hasattr(original, attr):
                setattr(self, attr, getattr(original, attr))

    def feat_ratio(self, as_scalar: bool = True) -> int | tuple[int, int]:
        return max(self.patch_size) if as_scalar else self.patch_size

    def dynamic_feat_size(self, img_size: tuple[int, int]) -> tuple[int, int]:
        return img_size[0] // self.patch_size[0], img_size[1] // self.patch_size[1]

    def forward(self, x: Tensor | tuple[Tensor, Tensor | None]) -> Tensor:
        hb, wb = block_grid(x, "this model")
        p = self.patch_size[0]
        img = getattr(self, "img_size", None)
        if img is not None and getattr(self, "strict_img_size", True):
            if (8 * hb, 8 * wb) != tuple(img):
                raise grid_error("this model", tuple(img), (hb, wb), p)
        elif (8 * hb) % self.patch_size[0] or (8 * wb) % self.patch_size[1]:
            # a conv would pad with normalised zeros (the mean colour): no block-grid equivalent
            raise ValueError(f"this model's {self.patch_size[0]}x{self.patch_size[1]} patches need a pixel size that "
                             f"they divide; got a {hb}x{wb} block grid ({8 * hb}x{8 * wb} pixels)")
        x = self.proj(x)                                                         # (B, C, H, W)
        fmt = getattr(getattr(self, "output_fmt", "NCHW"), "value", getattr(self, "output_fmt", "NCHW"))
        if getattr(self, "flatten", False) or fmt == "NLC":
            x = x.flatten(2).transpose(1, 2)
        elif fmt == "NHWC":
            x = x.permute(0, 2, 3, 1)
        elif fmt == "NCL":
            x = x.flatten(2)
        return self.norm(x)
