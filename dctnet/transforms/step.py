"""The device step as one object: a loader batch → what the model takes.

:class:`DeviceStep` holds the three stages every user of the device path runs, in the order that
changes representation as few times as possible:

1. **decode and crop** (:func:`~dctnet.transforms.crops_to_rgb`): each window decoded, its box cut and
   resized to ``size`` — the batch says which geometry (training crops, or eval's resize then centre
   crop, :attr:`dctnet.batch.JpegBatch.resize`);
2. **augmentation** (training batches only): a :class:`~dctnet.transforms.Compose` on the pixel crops,
   drawn per sample on the host from the step's generator;
3. **the model input**: ``input="rgb"`` — ``ToRGB(mean, std)``, the unchanged RGB model's normalised
   pixels; ``input="coefficients"`` — one forward DCT (``ToCoefficients``), native 4:2:0 chroma when
   the stem takes it, and the per-(c,u,v) standardisation (``normalize``) when set.

Training, eval, the statistics pass, ``dctnet bench`` and users' own loops call the same object.
Stages 2–3 are a fixed-shape device computation (:meth:`~dctnet.transforms.Transform.prepare` /
:meth:`~dctnet.transforms.Transform.execute`) and :meth:`DeviceStep.compile` compiles them; the decode
stays eager (its groups follow the layouts a batch holds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from dctnet.transforms.base import CompiledHalf, Compose, Transform, round_to_levels, to_coefficients
from dctnet.transforms.device_crop import crops_to_rgb, native_chroma
from dctnet.transforms.transfer import move_plan
from dctnet.transforms.model_input import Normalize, ToCoefficients, ToRGB
from dctnet.kernels import coefficients as TF
from dctnet.kernels.normalization import IMAGENET_MEAN, IMAGENET_STD, input_mean_std

__all__ = ["DeviceStep", "normalize_input"]


def normalize_input(x: Tensor | tuple[Tensor, Tensor], mean: Tensor, std: Tensor) -> Tensor | tuple[Tensor, Tensor]:
    """Per-(c,u,v) standardisation of a coefficient image, or of native ``(y, c)`` (channel 0's
    statistics for y, channels 1–2's for c)."""
    if isinstance(x, tuple):
        y, c = x
        return TF.normalize(y.unsqueeze(1), mean[:1], std[:1]).squeeze(1), TF.normalize(c, mean[1:], std[1:])
    return TF.normalize(x, mean, std)


class DeviceStep(nn.Module):
    """``step(batch, generator=None)`` → ``(inputs, targets, labels)`` on the batch's device.

    Args:
        size: the crops' ``(h, w)`` in pixels (multiples of 8, of 16 with native chroma, for
            coefficients).
        eval_size: the eval crops' ``(h, w)`` (the eval batches, those with ``batch.resize``); default
            ``size`` (torchvision's recipe trains at 176 and evaluates at 224).
        input: ``"rgb"`` (normalised pixels for an unchanged RGB model) or ``"coefficients"``
            (a coefficient image ``(B, 3, h/8, w/8, 64)``, or ``(y, c)`` with ``chroma="native"``).
        augment: the training augmentation — transforms (or a :class:`Compose`) on the pixel crops;
            ``None`` for none. Eval batches (those with ``batch.resize``) are not augmented.
        mean, std: the RGB model's normalisation (``input="rgb"``; ImageNet's by default).
        normalize: per-(c,u,v) statistics for coefficient models (a :class:`Normalize`, or set
            :attr:`normalize` later, once they are computed); ``None``: none.
        chroma: ``"upsampled"`` or ``"native"`` (4:2:0 chroma computed in the DCT domain).
        exact: decode in libjpeg's integer arithmetic (Pillow's very pixels).
        interpolation / eval_interpolation: the training crops' and eval crops' resampling.
        eval_fill: RGB in [0, 1] padding an eval crop larger than the resized image.
        pixels: ``"float"``, or ``"8bit"``: the crops and the results of every op an RGB pipeline runs on
            8-bit PIL images (policies, ColorJitter, grayscale) rounded to ``k/255``, as Pillow hands
            them over (erasing and mixing act on float tensors there too and are not rounded).
        seed: seeds the augmentation's generator when no generator is passed.

    ``inputs``: the model's input; ``targets``: the loss targets (soft ``(B, K)`` under mixing, else the
    labels); ``labels``: the class indices ``(B,)``."""

    def __init__(self, size: tuple[int, int], *, input: str = "rgb",
                 augment: Sequence[Transform] | Compose | None = None,
                 mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
                 normalize: Normalize | None = None, chroma: str = "upsampled", exact: bool = False,
                 interpolation: str = "bilinear", eval_interpolation: str | None = None,
                 eval_fill: float | tuple[float, float, float] = 0.0, pixels: str = "float", seed: int = 0,
                 eval_size: tuple[int, int] | None = None) -> None:
        super().__init__()
        if input not in ("rgb", "coefficients"):
            raise ValueError(f"DeviceStep: input must be 'rgb' or 'coefficients', got {input!r}")
        if chroma not in ("upsampled", "native"):
            raise ValueError(f"DeviceStep: chroma must be 'upsampled' or 'native', got {chroma!r}")
        if chroma == "native" and input != "coefficients":
            raise ValueError("DeviceStep: chroma='native' is for input='coefficients'")
        if pixels not in ("float", "8bit"):
            raise ValueError(f"DeviceStep: pixels must be 'float' or '8bit', got {pixels!r}")
        self.size = (int(size[0]), int(size[1]))
        self.eval_size = self.size if eval_size is None else (int(eval_size[0]), int(eval_size[1]))
        #: 256 with ``pixels="8bit"``: crops and the 8-bit ops' results rounded to k/255 (None: float)
        self.pixel_levels = 256 if pixels == "8bit" else None
        self.input, self.chroma, self.exact = input, chroma, bool(exact)
        self.interpolation = interpolation
        self.eval_interpolation = eval_interpolation or interpolation
        self.eval_fill = eval_fill
        self.seed = int(seed)
        #: the model input of pixels: ToRGB (the model's normalisation) or ToCoefficients
        self.to_input = ToRGB(mean, std) if input == "rgb" else ToCoefficients()
        ops = [] if augment is None else list(augment.transforms if isinstance(augment, Compose) else augment)
        #: the training stages 2–3 on the pixel crops: the augmentation, then the model input
        self.train_transform = Compose([*ops, self.to_input], seed=self.seed).set_pixel_levels(self.pixel_levels)
        self.augmented = bool(ops)
        self.normalize = normalize
        self._compiled: Any = None

    @classmethod
    def for_model(cls, model: Any, size: tuple[int, int], **kwargs: Any) -> "DeviceStep":
        """A step with the normalisation ``model`` expects (an ``nn.Module`` or an architecture name):
        its timm ``pretrained_cfg`` mean/std, else ImageNet's
        (:func:`dctnet.kernels.normalization.input_mean_std`) — ``input="rgb"`` unless given."""
        mean, std = input_mean_std(model)
        return cls(size, **{"input": "rgb", "mean": mean, "std": std, **kwargs})

    # ------------------------------------------------------------------ running
    def forward(self, batch: Any, generator: torch.Generator | None = None, *,
                train: bool | None = None) -> tuple[Any, Tensor, Tensor]:
        """The step of ``batch`` (a :class:`~dctnet.batch.JpegBatch`, packed or sparse). ``train``: augment
        it (True) or not (False); ``None`` tells from the batch — an eval batch of
        :class:`~dctnet.data.ResizeCenterCrop` (the model's eval transform) carries ``batch.resize``,
        anything else counts as training. Pass ``train=False`` for eval crops of another policy
        (``CenterCrop``, ``FullImage``), which carry no ``resize``."""
        if train is None:
            train = getattr(batch, "resize", None) is None
        return self.run(batch, self.train_transform if train else None, generator)

    def run(self, batch: Any, transform: Compose | None, generator: torch.Generator | None) -> tuple[Any, Tensor, Tensor]:
        """The step with ``transform`` (the pixel stages up to and including the model input, as
        :attr:`train_transform`) in place of the training one; ``None``: the eval step (no
        augmentation, the eval geometry's interpolation and fill)."""
        labels = batch.labels
        if transform is None:
            evaluating = getattr(batch, "resize", None) is not None
            interpolation = self.eval_interpolation if evaluating else self.interpolation
            rgb = round_to_levels(crops_to_rgb(batch, self.eval_size if evaluating else self.size, exact=self.exact,
                                               interpolation=interpolation,
                                               fill=self.eval_fill if evaluating else 0.0), self.pixel_levels)
            x = self.to_input(rgb) if self.input == "rgb" else to_coefficients(rgb)
            return self._finish(x), labels, labels
        rgb = round_to_levels(crops_to_rgb(batch, self.size, exact=self.exact, interpolation=self.interpolation),
                              self.pixel_levels)
        gen = generator if generator is not None else transform.generator
        params = transform.draw_params(rgb.shape, gen)
        prepared = transform.prepare(params, rgb.shape, "cpu")  # the plan, made on the host
        if self._compiled is not None and transform is self.train_transform:
            x, target = self._compiled(rgb, labels, prepared)  # (moves it: one copy, a static buffer on CUDA)
        else:
            x, target = self._tail(transform, rgb, labels, move_plan(prepared, rgb.device))  # one copy
        return x, target, labels

    def _finish(self, x: Tensor) -> Any:
        """Coefficient models: native chroma and the standardisation (pixels: as they are)."""
        if self.input == "rgb":
            return x
        if self.chroma == "native":  # after the augmentation: every transform acts on the full chroma grid
            x = native_chroma(x)
        if self.normalize is not None:
            x = normalize_input(x, self.normalize.mean, self.normalize.std)
        return x

    def _tail(self, transform: Compose, rgb: Tensor, labels: Tensor, prepared: Any) -> tuple[Any, Tensor]:
        """The device half after the decode: fixed shapes for a batch size, no draw, no sync."""
        x, target = transform.execute(rgb, labels, prepared)
        return self._finish(x), target

    def compile(self, **compile_kwargs: Any) -> "DeviceStep":
        """Compile the training step's device half (augmentation → model input) with
        ``torch.compile`` (``compile_kwargs``: e.g. ``mode="reduce-overhead"`` for CUDA graphs) — one
        graph, no break (tested with ``torch._dynamo.explain``). It compiles once per batch size:
        every batch of a size runs the same kernels on the same shapes
        (:attr:`~dctnet.transforms.Transform.fixed_shapes` is switched on); the first batch of a size
        runs eagerly and builds the step's constants, and a batch whose plan overflowed a group's
        capacity runs eagerly instead of recompiling (:class:`~dctnet.transforms.CompiledHalf`).
        Returns ``self``."""
        self.train_transform.set_fixed_shapes(True)
        transform = self.train_transform
        self._compiled = CompiledHalf(lambda rgb, labels, prepared: self._tail(transform, rgb, labels, prepared),
                                      **compile_kwargs)
        return self

    def extra_repr(self) -> str:
        return (f"size={self.size}, eval_size={self.eval_size}, input={self.input!r}, chroma={self.chroma!r}, "
                f"exact={self.exact}, "
                f"interpolation={self.interpolation!r}, eval_interpolation={self.eval_interpolation!r}, "
                f"pixels={'8bit' if self.pixel_levels else 'float'}, "
                f"compiled={self._compiled is not None}")
