"""The two representations of a batch and the moves between them: pixels ``(B, 3, H, W)`` in [0, 1]
and coefficient images ``(B, 3, Hb, Wb, 64)``. :func:`representation` is the one place a batch is
told apart by its shape; :func:`kernel` registers a transform's method per representation (as
torchvision v2 registers a functional's kernel per tensor type); :func:`to_pixels`,
:func:`to_coefficients` and :func:`in_domain` convert, and :func:`pixel_shape`,
:func:`coefficient_shape` and :func:`image_size` do the same for shapes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from dctnet.kernels import coefficients as TF

__all__ = ["KERNEL_STAGES", "REPRESENTATIONS", "coefficient_shape", "image_size", "in_domain", "kernel", "pixel_shape",
           "representation", "shape_representation", "to_coefficients", "to_pixels"]


def image_size(shape: Sequence[int]) -> tuple[int, int]:
    """``(H, W)`` in pixels of a batch of ``shape``: pixels ``(B, C, H, W)`` or a coefficient image
    ``(B, C, Hb, Wb, K)`` (8 pixels a block)."""
    if len(shape) == 4:
        return int(shape[2]), int(shape[3])
    if len(shape) == 5:
        return 8 * int(shape[2]), 8 * int(shape[3])
    raise ValueError(f"a batch is (B, C, H, W) pixels or (B, C, Hb, Wb, 64) coefficients, got shape {tuple(shape)}")


#: the two representations of a batch: what kernels are registered for (:func:`kernel`)
REPRESENTATIONS = ("pixel", "coefficient")
#: the stages of a transform that may have one implementation per representation: the device kernel
#: (``"apply"``, what :meth:`Transform.apply_transform` runs) and the host plan (``"prepare"``)
KERNEL_STAGES = ("apply", "prepare")


def representation(x: Tensor) -> str:
    """The batch's representation — the one place a batch is told apart by its shape, as torchvision
    v2's dispatchers tell theirs by type: ``(B, C, H, W)`` pixels, ``(B, 3, Hb, Wb, 64)`` coefficients."""
    return shape_representation(x.shape)


def shape_representation(shape: Sequence[int]) -> str:
    return "pixel" if len(shape) == 4 else "coefficient"


def kernel(representation: str, stage: str = "apply") -> Callable[[Callable], Callable]:
    """Register the decorated method as its transform's implementation of ``stage`` for one
    representation, as torchvision v2 registers a functional's kernel per tensor type
    (``register_kernel``): ``"apply"`` methods take ``(x, labels, params)`` and return
    ``(x', labels')`` — :meth:`Transform.apply_transform` runs the one registered for the batch's
    representation — and ``"prepare"`` ones take :meth:`Transform.prepare`'s ``(params, shape,
    device)``. A transform's :attr:`~Transform.domain` follows from its ``"apply"`` kernels (both
    representations: ``"any"``), so an op that runs on both has one kernel for each and no branch on
    the batch's shape. A subclass inherits its bases' registrations; a method it overrides under the
    same name replaces the kernel, and one it registers for the same (stage, representation) wins."""
    if representation not in REPRESENTATIONS:
        raise ValueError(f"kernel: representation must be one of {REPRESENTATIONS}, got {representation!r}")
    if stage not in KERNEL_STAGES:
        raise ValueError(f"kernel: stage must be one of {KERNEL_STAGES}, got {stage!r}")

    def register(method: Callable) -> Callable:
        method.__dctnet_kernel__ = (stage, representation)
        return method

    return register


def _full_precision(x: Tensor) -> Tensor:
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def to_pixels(x: Tensor) -> Tensor:
    """A coefficient image as RGB ``(B, 3, 8·Hb, 8·Wb)`` in [0, 1] (clamped as a decoder does);
    pixels unchanged. Computed in float32 at least, outside autocast (bf16 would be ~2 grey levels off)."""
    if x.dim() != 5:
        return x
    with torch.autocast(x.device.type, enabled=False):
        return TF.coefficient_image_to_rgb(_full_precision(x))


def to_coefficients(x: Tensor) -> Tensor:
    """RGB ``(B, 3, H, W)`` (H, W multiples of 8) as a coefficient image; coefficients unchanged."""
    if x.dim() == 5:
        return x
    if x.shape[-2] % 8 or x.shape[-1] % 8:
        raise ValueError(f"pixels go to the DCT domain in 8×8 blocks: H and W must be multiples of 8, got "
                         f"{tuple(x.shape[-2:])}")
    with torch.autocast(x.device.type, enabled=False):  # float32 at least, as to_pixels
        return TF.coefficient_image_from_rgb(_full_precision(x))


def pixel_shape(shape: torch.Size) -> torch.Size:
    return torch.Size((shape[0], shape[1], 8 * shape[2], 8 * shape[3])) if len(shape) == 5 else shape


def coefficient_shape(shape: torch.Size) -> torch.Size:
    return torch.Size((shape[0], shape[1], shape[2] // 8, shape[3] // 8, 64)) if len(shape) == 4 else shape



def in_domain(x: Tensor, domain: str) -> Tensor:
    """``x`` in the representation ``domain`` names (``"any"``: as it is)."""
    if domain == "pixel":
        return to_pixels(x)
    if domain == "coefficient":
        return to_coefficients(x)
    return x
