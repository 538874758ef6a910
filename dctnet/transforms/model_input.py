"""What a model takes, as :class:`Transform` s: :class:`ToRGB` (normalised RGB for an unchanged
model), :class:`ToCoefficients` (a coefficient image for a DCT stem), per-(c,u,v)
:class:`Normalize` and :class:`SelectFrequencies`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from dctnet.kernels import coefficients as TF
from dctnet.kernels.normalization import IMAGENET_MEAN, IMAGENET_STD
from dctnet.transforms.base import (Transform, coefficient_shape, kernel, may_overwrite, pixel_shape, to_coefficients,
                                    to_pixels)

__all__ = ["Normalize", "SelectFrequencies", "ToCoefficients", "ToRGB"]


class Normalize(Transform):
    """Per-(channel, frequency) standardisation with statistics ``(3, 64)`` — from
    :func:`dctnet.data.compute_stats` (``Normalize(*stats)``), or a file saved by :meth:`save`. ``mean`` and ``std`` are
    buffers (float32 by default): in the ``state_dict``, moved and cast by ``.to()``."""

    keeps_coefficients = False  # standardised values: torchvision's DCT-domain kernels no longer apply

    def __init__(self, mean: Tensor, std: Tensor) -> None:
        super().__init__(0)
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32).reshape(3, 64).clone())
        self.register_buffer("std", torch.as_tensor(std, dtype=torch.float32).reshape(3, 64).clamp(min=1e-6))

    @classmethod
    def load(cls, path: str | Path) -> "Normalize":
        stats = torch.load(path, map_location="cpu", weights_only=True)
        return cls(stats["mean"], stats["std"])

    def save(self, path: str | Path) -> None:
        torch.save({"mean": self.mean.detach().cpu(), "std": self.std.detach().cpu()}, path)

    def apply_transform(self, x, labels, params):
        return TF.normalize(x, self.mean, self.std), labels


class SelectFrequencies(Transform):
    """Keep a subset of frequencies: ``zigzag=K`` (first K in zigzag order), ``square=K`` (top-left
    K×K) or an explicit ``index`` list (natural order). Output ``(B, 3, Hb, Wb, K)``."""

    summary = "keep frequencies (`zigzag` K, `square` K×K or an `index` list)"
    runs_on = "coefficients"

    def __init__(self, *, zigzag: int | None = None, square: int | None = None,
                 index: Sequence[int] | None = None) -> None:
        super().__init__(0)
        if sum(a is not None for a in (zigzag, square, index)) != 1:
            raise ValueError("give exactly one of zigzag=, square=, index=")
        if zigzag is not None:
            idx = TF.zigzag_first(zigzag)
        elif square is not None:
            idx = TF.square_indices(square)
        else:
            idx = torch.as_tensor(list(index), dtype=torch.long)
        if idx.numel() == 0 or idx.min() < 0 or idx.max() > 63:
            raise ValueError(f"frequency indices must be in 0..63, got {idx.tolist()}")
        # configuration, not state: moves with .to() but stays out of the state_dict
        self.register_buffer("index", idx, persistent=False)

    def _out_shape(self, shape):
        return torch.Size((*shape[:-1], self.index.numel()))

    def apply_transform(self, x, labels, params):
        return TF.select_frequencies(x, self.index), labels


class ToRGB(Transform):
    """Plan A output: RGB ``(B, 3, H, W)`` normalised like torchvision, ``(rgb − mean) / std`` on
    [0, 1] values — a coefficient image decoded (clamped like a decoder), or pixels as they are
    (normalised only: erasing may have written values outside [0, 1] on purpose).

    Normalisation rule (the same as :func:`dctnet.models.swap_stem` folds into a DCT stem): a model's
    normalisation is :func:`dctnet.kernels.normalization.input_mean_std` of it — its timm
    ``pretrained_cfg`` mean/std, else ImageNet's. ``ToRGB.for_model(model)`` applies that rule;
    ``ToRGB(mean, std)`` takes explicit statistics; ``ToRGB()`` is ImageNet's
    (:data:`IMAGENET_MEAN`, :data:`IMAGENET_STD`), right for torchvision models and timm models with
    ImageNet statistics; ``mean=None``, ``std=None`` gives plain [0, 1]."""

    summary = "RGB normalised with the model's mean and std"
    runs_on = "converter"

    converter = True

    def __init__(self, mean: Sequence[float] | None = IMAGENET_MEAN, std: Sequence[float] | None = IMAGENET_STD) -> None:
        super().__init__(0)
        if (mean is None) != (std is None):
            raise ValueError("ToRGB takes mean and std together (or neither, for plain [0, 1] RGB)")
        # (1, 3, 1, 1) buffers (or None), not in the state_dict: they are the constructor's arguments
        self.register_buffer("mean", None if mean is None else torch.tensor(mean, dtype=torch.float32).reshape(1, 3, 1, 1),
                             persistent=False)
        self.register_buffer("std", None if std is None else torch.tensor(std, dtype=torch.float32).reshape(1, 3, 1, 1),
                             persistent=False)

    def _out_shape(self, shape):
        return pixel_shape(shape)

    @kernel("pixel")
    def _pixels(self, x, labels, params):
        # the Compose's own batch is normalised where it lies
        return self._normalised(x, owned=may_overwrite(self, x)), labels

    @kernel("coefficient")
    def _coefficients(self, x, labels, params):
        # the decode's new tensor, written into unless autograd records the decode
        return self._normalised(to_pixels(x), owned=not (torch.is_grad_enabled() and x.requires_grad)), labels

    def _normalised(self, rgb: Tensor, owned: bool) -> Tensor:
        """torchvision's ``Normalize`` of ``rgb`` (written into it when ``owned``)."""
        if self.mean is None:
            return rgb
        if owned:
            return rgb.sub_(self.mean.to(rgb)).div_(self.std.to(rgb))
        return (rgb - self.mean.to(rgb)).div_(self.std.to(rgb))  # one temporary


class ToCoefficients(Transform):
    """Pixels ``(B, 3, H, W)`` in [0, 1] (H, W multiples of 8) → coefficient image
    ``(B, 3, H/8, W/8, 64)``: the forward DCT a coefficient model's input takes, once, after the
    pixel ops (a coefficient image passes unchanged).

    Called directly (or as the end of a :class:`Compose`), it returns a
    :class:`dctnet.transforms.tv.DCTImage` when torchvision is installed: torchvision v2's ops on it
    run dctnet's DCT-domain kernels (flips, ColorJitter's brightness/contrast/saturation, grayscale,
    JPEG, aligned crops) or raise a ``TypeError`` naming dctnet's op — never treat the coefficients as
    pixels. Models take it as any tensor (torch ops on it return plain tensors)."""

    converter = True

    def __init__(self) -> None:
        super().__init__(0)

    def _out_shape(self, shape):
        return coefficient_shape(shape)

    @kernel("pixel")
    def _pixels(self, x, labels, params):
        return to_coefficients(x), labels

    @kernel("coefficient")
    def _coefficients(self, x, labels, params):
        return x, labels
