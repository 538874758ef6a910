"""DCT-domain augmentations as ``nn.Module`` s: parameters drawn on the host, execution batched.

Every transform works on a float coefficient image ``x (B, 3, Hb, Wb, 64)`` (see
:mod:`dctnet.transforms.functional`, whose pure kernels do the work; the classes here only draw
parameters and call them). A call has two halves — the kornia split of *what* from *how*:

- :meth:`Transform.draw_params` draws the per-sample parameters on the host from a seeded CPU
  ``torch.Generator`` (cheap, reproducible, the same numbers whatever the device) and returns them
  as a ``dict`` of CPU tensors with first dimension ``B`` (a :class:`Compose`: one such dict per
  transform, keyed ``"0"``, ``"1"``, …);
- :meth:`Transform.apply_transform` applies them batched on ``x``'s device (they are copied there
  with ``non_blocking=True``: no host sync, no Python loop over samples).

Call forms, all of ``forward(x, labels=None, params=None, *, generator=None, return_params=False)``::

    t(x)                                  -> x
    t(x, labels)                          -> (x, labels)
    t(x, labels, generator=g)             draws from g instead of t.generator
    t(x, labels, return_params=True)      -> (x, labels, params)      ((x, params) without labels)
    t(x2, labels2, params=params)         replays exactly the same augmentation (bit for bit):
                                          the same draws on a second view, or a step again

Probability ``p`` is handled once, by the base class: a transform built with ``p`` applies to each
sample independently with probability ``p``. :meth:`Transform.draw_params` draws the coin after the
transform's own parameters (``params["apply"]``, ``(B,)`` bool) and the result keeps the input where
it is False; ``p = 1`` draws no coin, ``p = 0`` computes nothing. Transforms that always apply
(``Normalize``, ``SelectFrequencies``, ``ToRGB``, ``FrequencyDropout``, ``Compose``) have ``p = None``.

Labels are class indices ``(B,)`` (int) or soft targets ``(B, K)`` (float). Non-mixing transforms
return them unchanged (the same object); :class:`Mixup` and :class:`CutMix` return soft ``(B, K)``
targets: integer labels become one-hot given ``num_classes`` (float32), soft ones keep their dtype.

Reproducibility: a :class:`Compose` draws every parameter of its transforms from one generator —
its own (seeded by ``seed``) or the one passed per call. :func:`step_generator` (equivalently
``compose.generator_for(epoch, step, rank)``) makes a generator that is a pure function of
``(seed, epoch, step, rank)``: a trainer that passes it each step is bit-reproducible and resumes
exactly, whatever happened before the step.

Modules: transforms are ``nn.Module`` s, so statistics are buffers (``Normalize``'s mean/std are in
its ``state_dict`` and follow ``.to()`` / ``.double()``) and ``Compose`` holds an ``nn.ModuleList``.
Their output does not depend on ``train()`` / ``eval()``: use augmentation on the training batches only.

Recipes: :data:`TRANSFORMS` maps names to classes; :func:`build_transform` builds one from a dict
such as ``{"name": "RandAugment", "num_ops": 2, "magnitude": 9}``, validated against the class's
signature; :func:`describe_transforms` lists every transform's arguments and defaults.
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import math
import operator
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Union

import torch
from torch import Tensor, nn

from dctnet.transforms import functional as TF

__all__ = [
    "ColorJitter", "Compose", "CutMix", "FrequencyDropout", "IMAGENET_MEAN", "IMAGENET_STD", "Mixup",
    "Normalize", "RandAugment", "RandomErasing", "RandomGrayscale", "RandomHorizontalFlip", "RandomRequantize",
    "RandomTranspose", "RandomVerticalFlip", "SelectFrequencies", "TRANSFORMS", "ToRGB", "Transform",
    "build_transform", "describe_transforms", "step_generator",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: drawn parameters: name → host tensor with first dimension B (a ``Compose``: ``"i"`` → its i-th
#: transform's parameters)
Params = dict[str, Any]


def step_generator(seed: int, epoch: int, step: int, rank: int = 0) -> torch.Generator:
    """A CPU ``torch.Generator`` that is a pure function of ``(seed, epoch, step, rank)``.

    Pass it as ``generator=`` each training step (``aug(x, labels, generator=step_generator(seed,
    epoch, step, rank))``): the augmentation of a step then depends on nothing else, so runs are
    bit-reproducible and a resumed run repeats its draws exactly. The seed is a keyed BLAKE2b hash
    of the four integers — the same on every platform, Python version and process (unlike
    ``hash()``), and unrelated streams for neighbouring steps or ranks."""
    values = []
    for name, v in (("seed", seed), ("epoch", epoch), ("step", step), ("rank", rank)):
        if isinstance(v, bool):
            raise TypeError(f"step_generator: {name} must be an int, got {v!r}")
        try:
            values.append(operator.index(v))  # ints, numpy ints, 0-d integer tensors
        except TypeError:
            raise TypeError(f"step_generator: {name} must be an int, got {v!r}") from None
    digest = hashlib.blake2b(repr(tuple(values)).encode(), digest_size=8, person=b"dctnet.augment").digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)  # 63 bits: any seed torch takes


class Transform(nn.Module):
    """Base class: :meth:`draw` (host, per-sample parameters) + :meth:`apply_transform` (device, batched).

    Subclasses implement :meth:`draw` (their own parameters, default none) and
    :meth:`apply_transform` (the batched kernel, applied to the whole batch); the base class adds
    the per-sample probability ``p``, the host → device copy of the parameters, replay and the call
    forms (module docstring). ``seed`` seeds :attr:`generator`, used when a call passes none (a
    random seed when ``None``)."""

    def __init__(self, seed: int | None = None, *, p: float | None = None) -> None:
        super().__init__()
        if p is not None:
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
                raise ValueError(f"{type(self).__name__}: p must be a probability in [0, 1], got {p!r}")
            p = float(p)
        self.p = p
        self.seed = int(seed) if seed is not None else int(torch.randint(0, 2**62, ()).item())
        self.generator = torch.Generator().manual_seed(self.seed)

    # ------------------------------------------------------------------ subclass hooks
    def draw(self, shape: torch.Size, gen: torch.Generator) -> dict[str, Tensor]:
        """The transform's own parameters for a batch of ``shape`` (host tensors, first dim B).
        The key ``"apply"`` is the base class's (the coin of ``p``)."""
        return {}

    def apply_transform(self, x: Tensor, labels: Tensor | None,
                        params: dict[str, Tensor]) -> tuple[Tensor, Tensor | None]:
        """Apply ``params`` (already on ``x``'s device) to the whole batch: ``(x', labels')``."""
        raise NotImplementedError

    def _prepare_labels(self, labels: Tensor | None) -> Tensor | None:
        """Labels as :meth:`apply_transform` takes them (mixing transforms: soft targets)."""
        return labels

    def _out_shape(self, shape: torch.Size) -> torch.Size:
        """Shape of the output for an input of ``shape`` (what the next transform of a Compose draws for)."""
        return shape

    # ------------------------------------------------------------------ public API
    def draw_params(self, shape: Sequence[int], generator: torch.Generator | None = None) -> Params:
        """Parameters for a batch of ``shape`` (e.g. ``x.shape``) drawn from ``generator`` (default
        :attr:`generator`): host tensors, to pass as ``params=`` (once or many times). Drawing here
        and then calling with ``params=`` is the same as one call with ``generator=``."""
        shape = torch.Size(shape)
        gen = generator if generator is not None else self.generator
        params = self.draw(shape, gen)
        if self.p is not None and self.p < 1.0:  # p = 1: always applied, no coin (the stream is not consumed)
            params["apply"] = torch.rand(shape[0], generator=gen) < self.p
        return params

    def forward(self, x: Tensor, labels: Tensor | None = None, params: Params | None = None, *,
                generator: torch.Generator | None = None, return_params: bool = False) -> Any:
        """Augment ``x (B, 3, Hb, Wb, 64)`` (and ``labels``, ``(B,)`` indices or ``(B, K)`` soft).

        ``params=None`` draws fresh parameters from ``generator`` (default :attr:`generator`);
        a ``params`` dict that a previous call returned (``return_params=True``) or
        :meth:`draw_params` made replays that augmentation exactly, drawing nothing. Returns
        ``x``, or ``(x, labels)`` when labels are given, plus ``params`` last when ``return_params``."""
        _check_input(self, x)
        out, out_labels, params = self._run(x, labels, params, generator if generator is not None else self.generator)
        result = (out,) if labels is None else (out, out_labels)
        if return_params:
            result += (params,)
        return result[0] if len(result) == 1 else result

    def generator_for(self, epoch: int, step: int, rank: int = 0) -> torch.Generator:
        """:func:`step_generator` of this transform's ``seed`` and ``(epoch, step, rank)``."""
        return step_generator(self.seed, epoch, step, rank)

    # ------------------------------------------------------------------ machinery
    def _run(self, x: Tensor, labels: Tensor | None, params: Params | None,
             gen: torch.Generator) -> tuple[Tensor, Tensor | None, Params]:
        if params is None:
            params = self.draw_params(x.shape, gen)
        labels = self._prepare_labels(labels)
        if self.p == 0.0:  # the coin is False everywhere: nothing to compute
            return x, labels, params
        dev = {k: v.to(x.device, non_blocking=True) for k, v in params.items()}
        out, out_labels = self.apply_transform(x, labels, dev)
        mask = dev.get("apply")
        if mask is not None:  # keep the input where the sample's coin said no
            out = torch.where(mask.reshape(-1, *([1] * (x.dim() - 1))), out, x)
            if out_labels is not None and out_labels is not labels:
                out_labels = torch.where(mask.reshape(-1, *([1] * (labels.dim() - 1))), out_labels, labels)
        return out, out_labels, params

    def extra_repr(self) -> str:
        parts = []
        for name in inspect.signature(type(self).__init__).parameters:
            if name in ("self", "seed") or not hasattr(self, name):
                continue
            v = getattr(self, name)
            if isinstance(v, nn.Module):
                continue  # shown as a child
            if isinstance(v, Tensor):
                v = v.tolist() if v.dim() == 1 and v.numel() <= 64 else f"<{tuple(v.shape)} {v.dtype}>"
                parts.append(f"{name}={v}")
            else:
                parts.append(f"{name}={v!r}")
        return ", ".join(parts)


def _check_input(t: Transform, x: object) -> None:
    """A clear TypeError for what loaders hand out before the device crop (a ``JpegBatch`` and its
    packed/sparse forms) or anything else that is not a coefficient tensor."""
    if isinstance(x, Tensor):
        return
    name = type(x).__name__
    if name in ("JpegBatch", "PackedJpegBatch", "SparseJpegBatch"):
        raise TypeError(f"{type(t).__name__} takes a coefficient image tensor (B, 3, Hb, Wb, 64), got a {name} (the "
                        "loader's undecoded crops): call dctnet.transforms.crops_to_coefficients(batch, size) first "
                        "(or crops_to_rgb(batch, size) for RGB transforms)")
    raise TypeError(f"{type(t).__name__} takes a coefficient image tensor (B, 3, Hb, Wb, 64), got {name}")


def _uniform(n: int, lo: float, hi: float, gen: torch.Generator) -> Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=gen, dtype=torch.float64)


class RandomHorizontalFlip(Transform):
    """Horizontal flip of each sample with probability ``p``. Exact (:func:`~dctnet.transforms.functional.hflip`)."""

    def __init__(self, p: float = 0.5, seed: int | None = None) -> None:
        super().__init__(seed, p=p)

    def apply_transform(self, x, labels, params):
        return TF.hflip(x), labels


class RandomVerticalFlip(RandomHorizontalFlip):
    """Vertical flip of each sample with probability ``p``. Exact."""

    def apply_transform(self, x, labels, params):
        return TF.vflip(x), labels


class RandomTranspose(RandomHorizontalFlip):
    """Swap rows and columns with probability ``p`` (square block grids). With the flips this
    generates all eight rot90/flip symmetries."""

    def apply_transform(self, x, labels, params):
        if x.shape[2] != x.shape[3]:
            raise ValueError(f"RandomTranspose needs a square block grid, got {tuple(x.shape[2:4])}")
        return TF.transpose(x), labels


class ColorJitter(Transform):
    """Brightness, contrast, saturation as torchvision (factors uniform in ``[max(0, 1−a), 1+a]``
    per sample), applied in that fixed order, plus an optional (Cb, Cr) rotation of up to
    ``chroma_rotation`` radians — a linear chroma shift, *not* torchvision's HSV hue. Applied to
    each sample with probability ``p`` (torchvision's ``ColorJitter`` is ``p = 1``)."""

    def __init__(self, brightness: float = 0.0, contrast: float = 0.0, saturation: float = 0.0,
                 chroma_rotation: float = 0.0, seed: int | None = None, *, p: float = 1.0) -> None:
        super().__init__(seed, p=p)
        self.brightness, self.contrast, self.saturation = brightness, contrast, saturation
        self.chroma_rotation = chroma_rotation

    def draw(self, shape, gen):
        n = shape[0]
        p = {}
        for name in ("brightness", "contrast", "saturation"):
            a = getattr(self, name)
            if a:
                p[name] = _uniform(n, max(0.0, 1.0 - a), 1.0 + a, gen)
        if self.chroma_rotation:
            p["angle"] = _uniform(n, -self.chroma_rotation, self.chroma_rotation, gen)
        return p

    def apply_transform(self, x, labels, params):
        if "brightness" in params:
            x = TF.adjust_brightness(x, params["brightness"])
        if "contrast" in params:
            x = TF.adjust_contrast(x, params["contrast"])
        if "saturation" in params:
            x = TF.adjust_saturation(x, params["saturation"])
        if "angle" in params:
            x = TF.rotate_chroma(x, params["angle"])
        return x, labels


class RandomGrayscale(RandomHorizontalFlip):
    """Zero the chroma (grey RGB, R = G = B = Y) of each sample with probability ``p``."""

    def __init__(self, p: float = 0.1, seed: int | None = None) -> None:
        super().__init__(p, seed)

    def apply_transform(self, x, labels, params):
        return TF.rgb_to_grayscale(x), labels


class RandomRequantize(Transform):
    """JPEG re-compression at an IJG quality uniform in ``quality`` (inclusive), with probability ``p``."""

    def __init__(self, quality: tuple[int, int] = (30, 95), p: float = 0.5, seed: int | None = None) -> None:
        super().__init__(seed, p=p)
        lo, hi = quality
        if not 1 <= lo <= hi <= 100:
            raise ValueError(f"RandomRequantize: quality must be (lo, hi) with 1 <= lo <= hi <= 100, got {quality!r}")
        self.quality = (int(lo), int(hi))

    def draw(self, shape, gen):
        q = torch.randint(self.quality[0], self.quality[1] + 1, (shape[0],), generator=gen)
        return {"tables": TF.ijg_tables(q)}

    def apply_transform(self, x, labels, params):
        return TF.requantize(x, params["tables"]), labels


def _block_boxes(n: int, hb: int, wb: int, area: Tensor, log_ratio: Tensor, gen: torch.Generator) -> Tensor:
    """Block-aligned boxes ``(n, 4)`` of ~``area`` (fraction of the grid) and aspect exp(log_ratio)."""
    ratio = torch.exp(log_ratio)
    h = torch.clamp(torch.round(torch.sqrt(area * ratio) * hb), 1, hb).long()
    w = torch.clamp(torch.round(torch.sqrt(area / ratio) * wb), 1, wb).long()
    top = (torch.rand(n, generator=gen, dtype=torch.float64) * (hb - h + 1)).long()
    left = (torch.rand(n, generator=gen, dtype=torch.float64) * (wb - w + 1)).long()
    return torch.stack([top, left, h, w], dim=1)


class RandomErasing(Transform):
    """Erase a block-aligned box (area fraction in ``scale``, aspect in ``ratio``) with
    probability ``p``; ``value="random"`` fills with N(0, σ) coefficients, else a constant
    coefficient value (0 = mid grey)."""

    def __init__(self, p: float = 0.25, scale: tuple[float, float] = (0.02, 0.33),
                 ratio: tuple[float, float] = (0.3, 3.3), value: float | str = 0.0, sigma: float = 100.0,
                 seed: int | None = None) -> None:
        super().__init__(seed, p=p)
        if isinstance(value, str) and value != "random":
            raise ValueError(f"RandomErasing: value must be a number or 'random', got {value!r}")
        self.scale, self.ratio, self.value, self.sigma = tuple(scale), tuple(ratio), value, sigma

    def draw(self, shape, gen):
        n, hb, wb = shape[0], shape[2], shape[3]
        area = _uniform(n, *self.scale, gen)
        log_ratio = _uniform(n, math.log(self.ratio[0]), math.log(self.ratio[1]), gen)
        p = {"boxes": _block_boxes(n, hb, wb, area, log_ratio, gen)}
        if self.value == "random":
            p["value"] = torch.randn(n, 3, 64, generator=gen) * self.sigma
        return p

    def apply_transform(self, x, labels, params):
        value = params.get("value", float(self.value) if self.value != "random" else 0.0)
        return TF.erase(x, params["boxes"], value), labels


class Mixup(Transform):
    """mixup (Zhang et al. 2018): λ ~ Beta(α, α) per sample, partner = a random permutation of the
    batch; applied to each sample with probability ``p``. Labels come out soft ``(B, K)``
    (``λ·y + (1 − λ)·y[perm]``; integer labels are one-hot over ``num_classes`` first)."""

    def __init__(self, alpha: float = 0.2, num_classes: int | None = None, seed: int | None = None, *,
                 p: float = 1.0) -> None:
        super().__init__(seed, p=p)
        if not alpha > 0:
            raise ValueError(f"{type(self).__name__}: alpha must be > 0, got {alpha!r}")
        self.alpha, self.num_classes = alpha, num_classes

    def draw(self, shape, gen):
        n = shape[0]
        # Beta(α, α) = G1 / (G1 + G2) with Gi ~ Gamma(α): torch.distributions.Beta takes no
        # generator, the gamma sampler does, which keeps the draw seeded.
        g1 = torch._standard_gamma(torch.full((n,), float(self.alpha), dtype=torch.float64), generator=gen)
        g2 = torch._standard_gamma(torch.full((n,), float(self.alpha), dtype=torch.float64), generator=gen)
        return {"lam": g1 / (g1 + g2), "perm": torch.randperm(n, generator=gen)}

    def _prepare_labels(self, labels):
        if labels is None:
            raise ValueError(f"{type(self).__name__} needs labels: call it as t(x, labels)")
        if labels.dim() == 2:  # soft targets stay soft (and keep a floating dtype)
            if self.num_classes is not None and labels.shape[1] != self.num_classes:
                raise ValueError(f"{type(self).__name__}: soft targets have {labels.shape[1]} classes, "
                                 f"num_classes is {self.num_classes}")
            return labels if labels.is_floating_point() else labels.float()
        if self.num_classes is None:
            raise ValueError(f"{type(self).__name__} needs num_classes for integer labels")
        # with num_classes given one_hot checks nothing on the host on CUDA (no sync)
        return torch.nn.functional.one_hot(labels.long(), self.num_classes).float()

    def apply_transform(self, x, labels, params):
        return TF.mixup(x, labels, params["lam"], params["perm"])


class CutMix(Mixup):
    """CutMix (Yun et al. 2019) with block-aligned boxes of area fraction ~1 − λ, λ ~ Beta(α, α);
    labels mixed by the pasted area exactly. Applied to each sample with probability ``p``."""

    def __init__(self, alpha: float = 1.0, num_classes: int | None = None, seed: int | None = None, *,
                 p: float = 1.0) -> None:
        super().__init__(alpha, num_classes, seed, p=p)

    def draw(self, shape, gen):
        n = shape[0]
        p = super().draw(shape, gen)
        p["boxes"] = _block_boxes(n, shape[2], shape[3], 1 - p.pop("lam"), torch.zeros(n, dtype=torch.float64), gen)
        return p

    def apply_transform(self, x, labels, params):
        return TF.cutmix(x, labels, params["boxes"], params["perm"])


class FrequencyDropout(Transform):
    """Drop each AC frequency (all channels) with probability ``rate``, independently per sample;
    DC is kept. (``rate`` was called ``p``: it is a per-frequency rate, not the per-sample
    probability ``p`` of the other transforms, which this one does not take.)"""

    def __init__(self, rate: float = 0.1, seed: int | None = None) -> None:
        super().__init__(seed)
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"FrequencyDropout: rate must be in [0, 1], got {rate!r}")
        self.rate = rate

    def draw(self, shape, gen):
        keep = torch.rand(shape[0], 64, generator=gen) >= self.rate
        keep[:, 0] = True
        return {"keep": keep}

    def apply_transform(self, x, labels, params):
        return TF.frequency_dropout(x, params["keep"]), labels


class Normalize(Transform):
    """Per-(channel, frequency) standardisation with statistics ``(3, 64)`` — from
    :func:`dctnet.data.compute_stats`, or a file saved by :meth:`save`. ``mean`` and ``std`` are
    buffers (float32 by default): in the ``state_dict``, moved and cast by ``.to()``."""

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
    [0, 1] values (clamped like a decoder).

    Normalisation rule (the same as :func:`dctnet.models.swap_stem` folds into a DCT stem): a model's
    normalisation is :func:`dctnet.transforms.normalization.input_mean_std` of it — its timm
    ``pretrained_cfg`` mean/std, else ImageNet's. ``ToRGB.for_model(model)`` applies that rule;
    ``ToRGB(mean, std)`` takes explicit statistics; ``ToRGB()`` is ImageNet's
    (:data:`IMAGENET_MEAN`, :data:`IMAGENET_STD`), right for torchvision models and timm models with
    ImageNet statistics; ``mean=None``, ``std=None`` gives plain [0, 1]."""

    def __init__(self, mean: Sequence[float] | None = IMAGENET_MEAN, std: Sequence[float] | None = IMAGENET_STD) -> None:
        super().__init__(0)
        if (mean is None) != (std is None):
            raise ValueError("ToRGB takes mean and std together (or neither, for plain [0, 1] RGB)")
        # (1, 3, 1, 1) buffers (or None), not in the state_dict: they are the constructor's arguments
        self.register_buffer("mean", None if mean is None else torch.tensor(mean, dtype=torch.float32).reshape(1, 3, 1, 1),
                             persistent=False)
        self.register_buffer("std", None if std is None else torch.tensor(std, dtype=torch.float32).reshape(1, 3, 1, 1),
                             persistent=False)

    @classmethod
    def for_model(cls, model: Any) -> "ToRGB":
        """``ToRGB`` with the normalisation ``model`` expects (an ``nn.Module`` or an architecture
        name such as ``"resnet50"`` / ``"timm:vit_small_patch16_224"``):
        :func:`dctnet.transforms.normalization.input_mean_std`."""
        # same layer, imported here because dctnet.transforms.normalization takes its ImageNet
        # constants from this module
        from dctnet.transforms.normalization import input_mean_std

        return cls(*input_mean_std(model))

    def _out_shape(self, shape):
        return torch.Size((shape[0], 3, 8 * shape[2], 8 * shape[3]))

    def apply_transform(self, x, labels, params):
        rgb = TF.to_rgb(x)
        if self.mean is not None:
            rgb = (rgb - self.mean.to(rgb)) / self.std.to(rgb)
        return rgb, labels


class Compose(Transform):
    """Apply ``transforms`` in order, every draw from one generator: :attr:`generator` (seeded by
    ``seed``) or the ``generator=`` of the call (e.g. :meth:`generator_for` ``(epoch, step, rank)``);
    the transforms' own generators are not used. Parameters are ``{"0": params of transforms[0],
    "1": …}``; they are drawn transform by transform as the batch goes through, in the same order as
    :meth:`draw_params`."""

    def __init__(self, transforms: Sequence[Transform], seed: int | None = None) -> None:
        super().__init__(seed)
        transforms = list(transforms)
        for t in transforms:
            if not isinstance(t, Transform):
                raise TypeError(f"Compose takes dctnet transforms (dctnet.transforms.Transform), got {type(t).__name__}")
        self.transforms = nn.ModuleList(transforms)

    def draw_params(self, shape: Sequence[int], generator: torch.Generator | None = None) -> Params:
        shape = torch.Size(shape)
        gen = generator if generator is not None else self.generator
        params = {}
        for i, t in enumerate(self.transforms):
            params[str(i)] = t.draw_params(shape, gen)
            shape = t._out_shape(shape)
        return params

    def _out_shape(self, shape):
        for t in self.transforms:
            shape = t._out_shape(shape)
        return shape

    def _run(self, x, labels, params, gen):
        if params is not None and sorted(params) != sorted(str(i) for i in range(len(self.transforms))):
            raise ValueError(f"params have keys {sorted(params)}, this Compose has {len(self.transforms)} transforms")
        drawn = {}
        for i, t in enumerate(self.transforms):
            x, labels, drawn[str(i)] = t._run(x, labels, None if params is None else params[str(i)], gen)
        return x, labels, drawn


class RandAugment(Transform):
    """RandAugment-style policy over the DCT ops: each sample gets ``num_ops`` ops drawn
    uniformly from the list, at a strength set by ``magnitude`` (0..30 as in torchvision).
    Batched: every op runs on the whole batch and is kept only where a sample chose it. The whole
    policy applies to each sample with probability ``p``."""

    OPS = ("identity", "hflip", "brightness", "contrast", "saturation", "chroma_rotation", "grayscale",
           "requantize", "frequency_dropout")

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31,
                 seed: int | None = None, *, p: float = 1.0) -> None:
        super().__init__(seed, p=p)
        if num_ops < 0 or not 0 <= magnitude < num_magnitude_bins:
            raise ValueError(f"RandAugment: need num_ops >= 0 and 0 <= magnitude < num_magnitude_bins, got "
                             f"num_ops={num_ops}, magnitude={magnitude}, num_magnitude_bins={num_magnitude_bins}")
        self.num_ops, self.magnitude, self.num_magnitude_bins = num_ops, magnitude, num_magnitude_bins

    def draw(self, shape, gen):
        n = shape[0]
        strength = self.magnitude / max(self.num_magnitude_bins - 1, 1)
        chosen = torch.zeros(n, len(self.OPS), dtype=torch.bool)
        for _ in range(self.num_ops):  # a loop over ops drawn per call, not over samples
            chosen[torch.arange(n), torch.randint(len(self.OPS), (n,), generator=gen)] = True
        sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).double()
        quality = torch.clamp(torch.round(torch.full((n,), 95 - 85 * strength)), 5, 95).long()
        keep = torch.rand(n, 64, generator=gen) >= 0.3 * strength
        keep[:, 0] = True
        return {"chosen": chosen, "factor": 1.0 + 0.9 * strength * sign, "angle": sign * strength * 1.0,
                "tables": TF.ijg_tables(quality), "keep": keep}

    def apply_transform(self, x, labels, params):
        chosen, f = params["chosen"], params["factor"]
        ops = {
            "hflip": lambda t: TF.hflip(t),
            "brightness": lambda t: TF.adjust_brightness(t, f),
            "contrast": lambda t: TF.adjust_contrast(t, f),
            "saturation": lambda t: TF.adjust_saturation(t, f),
            "chroma_rotation": lambda t: TF.rotate_chroma(t, params["angle"]),
            "grayscale": lambda t: TF.rgb_to_grayscale(t),
            "requantize": lambda t: TF.requantize(t, params["tables"]),
            "frequency_dropout": lambda t: TF.frequency_dropout(t, params["keep"]),
        }
        for i, name in enumerate(self.OPS):
            if name in ops:  # every op on the whole batch, kept where the sample chose it
                x = torch.where(chosen[:, i].reshape(-1, 1, 1, 1, 1), ops[name](x), x)
        return x, labels


# ---------------------------------------------------------------------- registry (recipes)
#: every transform a recipe can name → its class (``Normalize`` takes tensors and is not here;
#: ``Compose`` is a list of specs, see :func:`build_transform`)
TRANSFORMS: dict[str, type[Transform]] = {cls.__name__: cls for cls in (
    RandomHorizontalFlip, RandomVerticalFlip, RandomTranspose, ColorJitter, RandomGrayscale, RandomRequantize,
    RandomErasing, FrequencyDropout, RandAugment, Mixup, CutMix, SelectFrequencies, ToRGB)}

_INJECTED = ("seed", "num_classes")  # set by build_transform's arguments, never by a spec


def _recipe_parameters(cls: type[Transform]) -> dict[str, inspect.Parameter]:
    """The constructor arguments a spec may set (not ``self``, ``seed``, ``num_classes``)."""
    return {name: p for name, p in inspect.signature(cls.__init__).parameters.items()
            if name != "self" and name not in _INJECTED and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _did_you_mean(word: Any, choices: Sequence[str]) -> str:
    lower = {c.lower(): c for c in choices}
    match = difflib.get_close_matches(str(word).lower(), list(lower), n=1)
    return f"; did you mean {lower[match[0]]!r}?" if match else ""


def _type_name(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union or origin is types.UnionType:
        return " or ".join(_type_name(a) for a in args)
    if hint is type(None):
        return "None"
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {_type_name(args[0])}"
        return f"a list of {len(args)} ({', '.join(_type_name(a) for a in args)})"
    if origin in (Sequence, list):
        return f"a list of {_type_name(args[0]) if args else 'values'}"
    return getattr(hint, "__name__", str(hint))


def _coerce(what: str, value: Any, hint: Any) -> Any:
    """``value`` checked against the annotation ``hint`` (JSON/YAML-friendly: lists for tuples,
    ints for floats); ValueError naming ``what`` otherwise."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    bad = ValueError(f"{what} must be {_type_name(hint)}, got {value!r}")
    if hint is Any:
        return value
    if origin is Union or origin is types.UnionType:
        for a in args:  # the first alternative that takes it (``float | str``: 3 → 3.0)
            try:
                return _coerce(what, value, a)
            except ValueError:
                pass
        raise bad
    if hint is type(None):
        if value is None:
            return None
        raise bad
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise bad
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise bad
    if hint is str:
        if isinstance(value, str):
            return value
        raise bad
    if origin is tuple or origin in (Sequence, list):
        if not isinstance(value, (list, tuple)):
            raise bad
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                raise bad
            return tuple(_coerce(what, v, a) for v, a in zip(value, args))
        item = args[0] if args else Any
        items = [_coerce(what, v, item) for v in value]
        return tuple(items) if origin is tuple else items
    if isinstance(hint, type):
        if isinstance(value, hint):
            return value
        raise bad
    return value


def build_transform(spec: Mapping[str, Any] | Sequence[Mapping[str, Any]], *, num_classes: int | None,
                    seed: int) -> Transform:
    """A transform from a recipe spec: ``{"name": "RandAugment", "num_ops": 2, "magnitude": 9}``.

    ``name`` is a key of :data:`TRANSFORMS`; the other keys are constructor arguments, checked
    against its signature and annotations (lists are accepted for tuples, ints for floats). A list
    of specs (or ``{"name": "Compose", "transforms": [...]}``) builds a :class:`Compose`. ``seed``
    seeds every transform built (a Compose draws everything from its own); ``num_classes`` goes to
    the mixing transforms (``Mixup``, ``CutMix``). An unknown name or argument, a missing or
    ill-typed argument, or ``seed`` / ``num_classes`` in the spec raise ``ValueError`` naming it
    (with a "did you mean" for near misses)."""
    if isinstance(spec, Sequence) and not isinstance(spec, (str, bytes)):
        return Compose([build_transform(s, num_classes=num_classes, seed=seed) for s in spec], seed=seed)
    if not isinstance(spec, Mapping):
        raise ValueError(f"a transform spec is a dict with a 'name' (or a list of them), got {spec!r}")
    spec = dict(spec)
    if "name" not in spec:
        raise ValueError(f"transform spec {spec!r} has no 'name' (one of {', '.join(TRANSFORMS)})")
    name = spec.pop("name")
    if name == "Compose":
        extra = set(spec) - {"transforms"}
        if extra:
            raise ValueError(f"Compose: unknown argument {sorted(extra)[0]!r}{_did_you_mean(sorted(extra)[0], ['transforms'])}"
                             " (takes: transforms)")
        inner = spec.get("transforms", [])
        if not isinstance(inner, Sequence) or isinstance(inner, (str, bytes)):
            raise ValueError(f"Compose: argument 'transforms' must be a list of specs, got {inner!r}")
        return Compose([build_transform(s, num_classes=num_classes, seed=seed) for s in inner], seed=seed)
    if not isinstance(name, str) or name not in TRANSFORMS:
        raise ValueError(f"unknown transform {name!r}{_did_you_mean(name, [*TRANSFORMS, 'Compose'])} "
                         f"(known: {', '.join(TRANSFORMS)}, Compose)")
    cls = TRANSFORMS[name]
    allowed = _recipe_parameters(cls)
    hints = typing.get_type_hints(cls.__init__)
    kwargs = {}
    for arg, value in spec.items():
        if arg in _INJECTED:
            raise ValueError(f"{name}: argument {arg!r} comes from build_transform({arg}=...), not from the spec")
        if arg not in allowed:
            raise ValueError(f"{name}: unknown argument {arg!r}{_did_you_mean(arg, list(allowed))} "
                             f"(takes: {', '.join(allowed) or 'no arguments'})")
        kwargs[arg] = _coerce(f"{name}: argument {arg!r}", value, hints.get(arg, Any))
    missing = [a for a, p in allowed.items() if p.default is p.empty and a not in kwargs]
    if missing:
        raise ValueError(f"{name}: missing argument {missing[0]!r}")
    params = inspect.signature(cls.__init__).parameters
    if "seed" in params:
        kwargs["seed"] = seed
    if "num_classes" in params:
        kwargs["num_classes"] = num_classes
    return cls(**kwargs)


def describe_transforms() -> list[tuple[str, list[tuple[str, Any]]]]:
    """``[(name, [(argument, default), ...]), ...]`` for every entry of :data:`TRANSFORMS`: the
    arguments a spec may set, in signature order (``inspect.Parameter.empty`` for a required one;
    ``seed`` and ``num_classes`` are injected by :func:`build_transform` and not listed)."""
    return [(name, [(a, p.default) for a, p in _recipe_parameters(cls).items()]) for name, cls in TRANSFORMS.items()]
