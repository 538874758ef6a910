"""torchvision ``transforms.v2`` integration: coefficient images as a ``TVTensor``.

``import dctnet.transforms.tv`` registers DCT-domain kernels for :class:`DCTImage` with
``torchvision.transforms.v2.functional.register_kernel``, so existing v2 pipelines dispatch to them:

===========================  ===================================================
v2 functional / transform    DCT-domain kernel
===========================  ===================================================
horizontal_flip, vertical_flip  exact flips (:func:`dctnet.kernels.coefficients.hflip` …)
adjust_brightness / contrast / saturation  exact up to torchvision's clamp (ColorJitter)
rgb_to_grayscale (3 channels) zero chroma (Grayscale(num_output_channels=3))
jpeg                         requantization with libjpeg's tables (v2.JPEG)
crop                         block slicing, for 8-pixel-aligned boxes
get_size / get_dimensions    sizes in pixels (8 per block)
===========================  ===================================================

Every other v2 functional (rotate, affine, resize, hue, normalize, …) raises a ``TypeError``
naming the dctnet alternative, instead of torchvision's default for unknown tensor types
(silently passing the input through unchanged). torchvision's policies (``RandAugment``,
``TrivialAugmentWide``, ``AutoAugment``, ``AugMix``) look for an image among their own types
before any kernel runs; for a ``DCTImage`` they raise a ``TypeError`` naming dctnet's class of the
same policy (per sample, on the device) instead of torchvision's "Found no image in the sample".
Transforms that first query the image size or channels through torchvision's own type list
(``RandomCrop``, ``RandomResizedCrop``, ``RandomGrayscale``) stop with torchvision's "No image … was
found" ``TypeError``: crops belong to the loader (``dctnet.data``), and dctnet's
``RandomGrayscale`` is the per-sample op. Every v2 transform is held to this in
``tests/test_tv_tensor.py``: it raises, passes the input through, or computes what it computes on
the pixels.
"""

from __future__ import annotations

from typing import Any

import torch
from torchvision import tv_tensors
from torchvision.transforms.v2 import _auto_augment as _tv_auto_augment
from torchvision.transforms.v2 import functional as TVF
from torchvision.transforms.v2.functional import _utils as _tv_utils

from dctnet.kernels import coefficients as TF

__all__ = ["DCTImage"]


class DCTImage(tv_tensors.TVTensor):
    """A coefficient image ``(..., 3, Hb, Wb, 64)`` (Y, Cb, Cr on the luma grid; see
    :mod:`dctnet.kernels.coefficients`) that torchvision v2 transforms dispatch on."""

    @classmethod
    def _wrap(cls, tensor: torch.Tensor) -> "DCTImage":
        return tensor.as_subclass(cls)

    def __new__(cls, data: Any, *, dtype: torch.dtype | None = None, device: Any = None,
                requires_grad: bool | None = None) -> "DCTImage":
        tensor = cls._to_tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)
        if tensor.dim() < 4 or tensor.shape[-1] != 64 or tensor.shape[-4] != 3:
            raise ValueError(f"DCTImage expects (..., 3, Hb, Wb, 64), got {tuple(tensor.shape)}")
        return cls._wrap(tensor)

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return self._make_repr()


def _batched(fn):
    """Run a (B, 3, Hb, Wb, 64) kernel on (..., 3, Hb, Wb, 64) input and re-wrap the result."""

    def kernel(inpt: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        x = inpt.as_subclass(torch.Tensor)
        lead = x.shape[:-4]
        out = fn(x.reshape(-1, *x.shape[-4:]), *args, **kwargs)
        return tv_tensors.wrap(out.reshape(*lead, *out.shape[1:]), like=inpt)

    return kernel


def _factor(x: torch.Tensor, f: float) -> torch.Tensor:
    return torch.full((x.shape[0],), float(f), dtype=torch.float64, device=x.device)


def _grayscale(x: torch.Tensor, num_output_channels: int = 1) -> torch.Tensor:
    if num_output_channels != 3:
        raise TypeError("a DCTImage keeps three channels: use Grayscale(num_output_channels=3) "
                        "(chroma is zeroed; R = G = B = Y)")
    return TF.grayscale(x)


def _jpeg(x: torch.Tensor, quality: int) -> torch.Tensor:
    q = torch.full((x.shape[0],), int(quality), dtype=torch.long)
    return TF.requantize(x, TF.ijg_tables(q).to(x.device))


def _crop(x: torch.Tensor, top: int, left: int, height: int, width: int) -> torch.Tensor:
    if any(v % 8 for v in (top, left, height, width)) or top < 0 or left < 0:
        raise TypeError(f"DCTImage crops must be 8-pixel aligned and inside the image, got "
                        f"top={top} left={left} height={height} width={width}; crop arbitrary boxes on the "
                        "JpegBatch with dctnet.transforms.crops_to_coefficients")
    if top + height > 8 * x.shape[-3] or left + width > 8 * x.shape[-2]:
        raise TypeError("DCTImage crop box exceeds the image (padding is not supported)")
    return x[..., top // 8:(top + height) // 8, left // 8:(left + width) // 8, :]


_KERNELS = {
    TVF.horizontal_flip: _batched(lambda x: TF.hflip(x)),
    TVF.vertical_flip: _batched(lambda x: TF.vflip(x)),
    TVF.adjust_brightness: _batched(lambda x, brightness_factor: TF.adjust_brightness(x, _factor(x, brightness_factor))),
    TVF.adjust_contrast: _batched(lambda x, contrast_factor: TF.adjust_contrast(x, _factor(x, contrast_factor))),
    TVF.adjust_saturation: _batched(
        lambda x, saturation_factor: TF.adjust_saturation(x, _factor(x, saturation_factor))),
    TVF.rgb_to_grayscale: _batched(_grayscale),
    TVF.jpeg: _batched(_jpeg),
    TVF.crop: _batched(_crop),
}

_ALTERNATIVES = {
    "resize": "dctnet.transforms.crops_to_coefficients (resizes crop boxes of a JpegBatch)",
    "resized_crop": "dctnet.data.RandomResizedCrop boxes + dctnet.transforms.crops_to_coefficients",
    "center_crop": "dctnet.data.ResizeCenterCrop (the model's eval crop: timm's crop_pct and interpolation) "
                   "+ dctnet.transforms.crops_to_coefficients",
    "normalize": "dctnet.transforms.Normalize (per channel and frequency) or ToRGB (torchvision-style)",
    "adjust_hue": "dctnet.transforms.ColorJitter(hue=...) (torchvision's HSV hue, on pixels) or "
                  "RandomChromaRotation(degrees=...) (a linear Cb/Cr rotation, exact on coefficients)",
    "erase": "dctnet.transforms.RandomErasing (torchvision's and timm's semantics)",
    "rotate": "dctnet.transforms.RandAugment / TrivialAugmentWide / AutoAugment / TimmAugment (per-sample policies)",
    "affine": "dctnet.transforms.RandAugment / TrivialAugmentWide / AutoAugment / TimmAugment (per-sample policies)",
    "to_dtype": "plain tensor .to(dtype) (coefficients are not pixel values)",
}


def _unsupported(name: str):
    def kernel(inpt: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        hint = _ALTERNATIVES.get(name, "dctnet.transforms.ToRGB first (then any RGB transform), or a dctnet transform")
        raise TypeError(f"torchvision's {name} has no DCT-domain kernel for DCTImage; use {hint}")

    return kernel


def _sizes() -> None:
    TVF.register_kernel(TVF.get_size, DCTImage)(lambda x: [8 * x.shape[-3], 8 * x.shape[-2]])
    TVF.register_kernel(TVF.get_dimensions, DCTImage)(lambda x: [3, 8 * x.shape[-3], 8 * x.shape[-2]])
    TVF.register_kernel(TVF.get_num_channels, DCTImage)(lambda x: 3)


def _register() -> None:
    for functional, kernel in _KERNELS.items():
        TVF.register_kernel(functional, DCTImage)(kernel)
    _sizes()
    done = set(_KERNELS) | {TVF.get_size, TVF.get_dimensions, TVF.get_num_channels}
    for functional in list(_tv_utils._KERNEL_REGISTRY):
        if functional not in done:
            TVF.register_kernel(functional, DCTImage)(_unsupported(functional.__name__))


#: dctnet's class for each torchvision policy class (dctnet has no AugMix)
_POLICIES = {"RandAugment": "dctnet.transforms.RandAugment", "TrivialAugmentWide": "dctnet.transforms.TrivialAugmentWide",
             "AutoAugment": "dctnet.transforms.AutoAugment"}


def _point_policies_to_dctnet() -> None:
    """torchvision's policies find their image before any kernel dispatch, so a registered kernel
    cannot answer for them; the one hook is the base class's image lookup. Wrapped (when it exists
    under this name) to name dctnet's class for a DCTImage, and otherwise unchanged."""
    base = getattr(_tv_auto_augment, "_AutoAugmentBase", None)
    lookup = getattr(base, "_flatten_and_extract_image_or_video", None)
    if lookup is None or getattr(lookup, "_dctnet", False):
        return

    def flatten_and_extract(self, inputs: Any, *args: Any, **kwargs: Any):
        if any(isinstance(x, DCTImage) for x in torch.utils._pytree.tree_leaves(inputs)):
            name = type(self).__name__
            if name in _POLICIES:
                alt = f"use {_POLICIES[name]} (the same policy, drawn per sample and applied batched on the device)"
            else:
                alt = ("dctnet has no such policy; its per-sample policies are dctnet.transforms.RandAugment, "
                       "TrivialAugmentWide, AutoAugment and TimmAugment")
            raise TypeError(f"torchvision's {name} runs on pixels and has no DCT-domain form for DCTImage: {alt}; "
                            "or dctnet.transforms.ToRGB first")
        return lookup(self, inputs, *args, **kwargs)

    flatten_and_extract._dctnet = True  # type: ignore[attr-defined]
    base._flatten_and_extract_image_or_video = flatten_and_extract


_register()
_point_policies_to_dctnet()
