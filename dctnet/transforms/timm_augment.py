"""timm's policy strings (``rand-m9-mstd0.5-inc1``, ``original``, ``v0``, ``3a``, …) drawn per sample
and applied batched (how: :mod:`dctnet.transforms.policy_base`).

``rand``: ``n`` ops uniform with replacement (or timm's weights), each applied with probability
``p`` (0.5), magnitude ``m`` plus N(0, ``mstd``) noise (uniform in [0, m] for ``mstd`` > 100),
clipped to [0, ``mmax``]; timm's level functions (``inc1``: the increasing variants); PIL's
geometry (shear and translate about the corner, rotate about the centre, fractional translations,
PIL's own bicubic); fill = the dataset mean rounded to 8 bits, as timm's ``create_transform`` sets
it; interpolation ``bicubic`` as DeiT's ``--train-interpolation``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from dctnet.transforms.base import image_size
from dctnet.kernels.normalization import IMAGENET_MEAN
from dctnet.transforms.policy_base import Policy

__all__ = ["ThreeAugment", "TimmAugment", "TimmConfig"]


# ---------------------------------------------------------------------- timm
_LEVEL_DENOM = 10.0

#: timm's op name → (kernel name, level function over a magnitude tensor (n,) → argument (n,),
#: whether the level is negated with probability ½ (timm's ``_randomly_negate``))
def _timm_levels(translate_pct: float, translate_const: float) -> dict[str, tuple[str, Callable[[Tensor], Tensor], bool]]:
    lv = lambda m: m / _LEVEL_DENOM  # noqa: E731
    enhance = lambda m: lv(m) * 1.8 + 0.1  # noqa: E731
    posterize = lambda m: torch.floor(lv(m) * 4)  # noqa: E731  (int() of a non-negative value)
    solarize = lambda m: torch.clamp(torch.floor(lv(m) * 256), max=256)  # noqa: E731
    return {
        "AutoContrast": ("AutoContrast", lambda m: m * 0, False),
        "Equalize": ("Equalize", lambda m: m * 0, False),
        "Invert": ("Invert", lambda m: m * 0, False),
        "Rotate": ("PilRotate", lambda m: lv(m) * 30.0, True),
        "Posterize": ("PilPosterize", posterize, False),
        "PosterizeIncreasing": ("PilPosterize", lambda m: 4 - posterize(m), False),
        "PosterizeOriginal": ("PilPosterize", lambda m: posterize(m) + 4, False),
        # thresholds and additions of timm's uint8 LUTs, on the [0, 1] scale
        "Solarize": ("Solarize", lambda m: solarize(m) / 255.0, False),
        "SolarizeIncreasing": ("Solarize", lambda m: (256 - solarize(m)) / 255.0, False),
        "SolarizeAdd": ("SolarizeAdd", lambda m: torch.clamp(torch.floor(lv(m) * 110), max=128) / 255.0, False),
        "Color": ("Color", enhance, False),
        "Contrast": ("Contrast", enhance, False),
        "Brightness": ("Brightness", enhance, False),
        "Sharpness": ("Sharpness", enhance, False),
        # the increasing variants: 1 ± 0.9·level, kept >= 0.1 (the sign is folded in by TimmAugment.draw)
        "ColorIncreasing": ("Color", lambda m: lv(m) * 0.9, True),
        "ContrastIncreasing": ("Contrast", lambda m: lv(m) * 0.9, True),
        "BrightnessIncreasing": ("Brightness", lambda m: lv(m) * 0.9, True),
        "SharpnessIncreasing": ("Sharpness", lambda m: lv(m) * 0.9, True),
        "ShearX": ("PilShearX", lambda m: lv(m) * 0.3, True),
        "ShearY": ("PilShearY", lambda m: lv(m) * 0.3, True),
        "TranslateX": ("PilTranslateX", lambda m: lv(m) * translate_const, True),
        "TranslateY": ("PilTranslateY", lambda m: lv(m) * translate_const, True),
        "TranslateXRel": ("PilTranslateX", lambda m: lv(m) * translate_pct, True),
        "TranslateYRel": ("PilTranslateY", lambda m: lv(m) * translate_pct, True),
        "Desaturate": ("Color", lambda m: torch.clamp(1.0 - torch.clamp(0.5 + 0.5 * lv(m), 0.5, 1.0), 0.0, 1.0), False),
        "GaussianBlur": ("GaussianBlur", lambda m: torch.clamp(0.1 + 1.9 * lv(m), 0.1, 2.0), False),
        "GaussianBlurRand": ("GaussianBlur", lambda m: torch.clamp(lv(m), 0.0, 1.0), False),  # radius U(0.1, 2·level)
    }


_INCREASING = ("ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing")

_RAND_TRANSFORMS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd", "Color",
                    "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")
_RAND_INCREASING_TRANSFORMS = ("AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing",
                               "SolarizeIncreasing", "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing",
                               "BrightnessIncreasing", "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel",
                               "TranslateYRel")
_RAND_3A = ("SolarizeIncreasing", "Desaturate", "GaussianBlur")
_RAND_WEIGHTED_3A = {"SolarizeIncreasing": 6, "Desaturate": 6, "GaussianBlur": 6, "Rotate": 3, "ShearX": 2, "ShearY": 2,
                     "PosterizeIncreasing": 1, "AutoContrast": 1, "ColorIncreasing": 1, "SharpnessIncreasing": 1,
                     "ContrastIncreasing": 1, "BrightnessIncreasing": 1, "Equalize": 1, "Invert": 1}
_RAND_WEIGHTED_0 = {"Rotate": 3, "ShearX": 2, "ShearY": 2, "TranslateXRel": 1, "TranslateYRel": 1,
                    "ColorIncreasing": .25, "SharpnessIncreasing": 0.25, "AutoContrast": 0.25,
                    "SolarizeIncreasing": .05, "SolarizeAdd": .05, "ContrastIncreasing": .05,
                    "BrightnessIncreasing": .05, "Equalize": .05, "PosterizeIncreasing": 0.05, "Invert": 0.05}

#: timm's AutoAugment policies: (op, probability, magnitude) pairs
_TIMM_POLICIES: dict[str, tuple[tuple[tuple[str, float, int], ...], ...]] = {
    "v0": (
        (("Equalize", 0.8, 1), ("ShearY", 0.8, 4)), (("Color", 0.4, 9), ("Equalize", 0.6, 3)),
        (("Color", 0.4, 1), ("Rotate", 0.6, 8)), (("Solarize", 0.8, 3), ("Equalize", 0.4, 7)),
        (("Solarize", 0.4, 2), ("Solarize", 0.6, 2)), (("Color", 0.2, 0), ("Equalize", 0.8, 8)),
        (("Equalize", 0.4, 8), ("SolarizeAdd", 0.8, 3)), (("ShearX", 0.2, 9), ("Rotate", 0.6, 8)),
        (("Color", 0.6, 1), ("Equalize", 1.0, 2)), (("Invert", 0.4, 9), ("Rotate", 0.6, 0)),
        (("Equalize", 1.0, 9), ("ShearY", 0.6, 3)), (("Color", 0.4, 7), ("Equalize", 0.6, 0)),
        (("Posterize", 0.4, 6), ("AutoContrast", 0.4, 7)), (("Solarize", 0.6, 8), ("Color", 0.6, 9)),
        (("Solarize", 0.2, 4), ("Rotate", 0.8, 9)), (("Rotate", 1.0, 7), ("TranslateYRel", 0.8, 9)),
        (("ShearX", 0.0, 0), ("Solarize", 0.8, 4)), (("ShearY", 0.8, 0), ("Color", 0.6, 4)),
        (("Color", 1.0, 0), ("Rotate", 0.6, 2)), (("Equalize", 0.8, 4), ("Equalize", 0.0, 8)),
        (("Equalize", 1.0, 4), ("AutoContrast", 0.6, 2)), (("ShearY", 0.4, 7), ("SolarizeAdd", 0.6, 7)),
        (("Posterize", 0.8, 2), ("Solarize", 0.6, 10)), (("Solarize", 0.6, 8), ("Equalize", 0.6, 1)),
        (("Color", 0.8, 6), ("Rotate", 0.4, 5)),
    ),
    "original": (
        (("PosterizeOriginal", 0.4, 8), ("Rotate", 0.6, 9)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, 5)),
        (("Equalize", 0.8, 8), ("Equalize", 0.6, 3)), (("PosterizeOriginal", 0.6, 7), ("PosterizeOriginal", 0.6, 6)),
        (("Equalize", 0.4, 7), ("Solarize", 0.2, 4)), (("Equalize", 0.4, 4), ("Rotate", 0.8, 8)),
        (("Solarize", 0.6, 3), ("Equalize", 0.6, 7)), (("PosterizeOriginal", 0.8, 5), ("Equalize", 1.0, 2)),
        (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)), (("Equalize", 0.6, 8), ("PosterizeOriginal", 0.4, 6)),
        (("Rotate", 0.8, 8), ("Color", 0.4, 0)), (("Rotate", 0.4, 9), ("Equalize", 0.6, 2)),
        (("Equalize", 0.0, 7), ("Equalize", 0.8, 8)), (("Invert", 0.6, 4), ("Equalize", 1.0, 8)),
        (("Color", 0.6, 4), ("Contrast", 1.0, 8)), (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
        (("Color", 0.8, 8), ("Solarize", 0.8, 7)), (("Sharpness", 0.4, 7), ("Invert", 0.6, 8)),
        (("ShearX", 0.6, 5), ("Equalize", 1.0, 9)), (("Color", 0.4, 0), ("Equalize", 0.6, 3)),
        (("Equalize", 0.4, 7), ("Solarize", 0.2, 4)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, 5)),
        (("Invert", 0.6, 4), ("Equalize", 1.0, 8)), (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
        (("Equalize", 0.8, 8), ("Equalize", 0.6, 3)),
    ),
    "3a": ((("Solarize", 1.0, 5),), (("Desaturate", 1.0, 10),), (("GaussianBlurRand", 1.0, 10),)),
}
# the "r" variants replace the posterize ops by the increasing one
_TIMM_POLICIES["v0r"] = tuple(tuple(("PosterizeIncreasing" if o == "Posterize" else o, p, m) for o, p, m in sp)
                              for sp in _TIMM_POLICIES["v0"])
_TIMM_POLICIES["originalr"] = tuple(tuple(("PosterizeIncreasing" if o == "PosterizeOriginal" else o, p, m)
                                          for o, p, m in sp) for sp in _TIMM_POLICIES["original"])


@dataclass(frozen=True)
class TimmConfig:
    """A parsed timm ``auto_augment`` string (timm's ``rand_augment_transform`` /
    ``auto_augment_transform`` grammar)."""

    kind: str                         # "rand" or an AutoAugment policy name
    magnitude: float = 10.0
    num_layers: int = 2
    prob: float = 0.5
    magnitude_std: float = 0.0
    magnitude_max: float | None = None
    increasing: bool = False
    transforms: str | None = None     # rand's 't' section: "weights", "3a", "3aw"

    @classmethod
    def parse(cls, config: str) -> "TimmConfig":
        if not isinstance(config, str) or not config:
            raise ValueError(f"a timm augmentation string such as 'rand-m9-mstd0.5-inc1', 'original', 'v0' or '3a', "
                             f"got {config!r}")
        head, *sections = config.split("-")
        if head != "rand" and head not in _TIMM_POLICIES:
            raise ValueError(f"unknown timm augmentation {head!r} in {config!r}: 'rand-…', or one of "
                             f"{', '.join(sorted(_TIMM_POLICIES))} ('augmix' is not provided)")
        kw: dict = {"kind": head}
        for section in sections:
            if head == "rand" and section.startswith("t"):
                kw["transforms"] = section[1:]
                continue
            parts = re.split(r"(\d.*)", section)
            if len(parts) < 2:
                raise ValueError(f"timm augmentation {config!r}: section {section!r} has no value")
            key, val = parts[:2]
            try:
                if key == "mstd":
                    mstd = float(val)
                    kw["magnitude_std"] = math.inf if mstd > 100 else mstd
                elif head != "rand":
                    raise ValueError(f"timm augmentation {config!r}: AutoAugment takes only 'mstd', not {key!r}")
                elif key == "mmax":
                    kw["magnitude_max"] = float(int(val))
                elif key == "inc":
                    kw["increasing"] = bool(int(val))
                elif key == "m":
                    kw["magnitude"] = float(int(val))
                elif key == "n":
                    kw["num_layers"] = int(val)
                elif key == "p":
                    kw["prob"] = float(val)
                else:
                    raise ValueError(f"timm augmentation {config!r}: unknown section {section!r} (m, n, p, mstd, mmax, "
                                     "inc, t)")
            except ValueError as exc:
                if "timm augmentation" in str(exc):
                    raise
                raise ValueError(f"timm augmentation {config!r}: bad value in section {section!r}") from None
        if kw.get("transforms") not in (None, "weights", "3a", "3aw"):
            raise ValueError(f"timm augmentation {config!r}: transform set must be 'weights', '3a' or '3aw', "
                             f"got {kw['transforms']!r}")
        if not 0.0 <= kw.get("prob", 0.5) <= 1.0:
            raise ValueError(f"timm augmentation {config!r}: p must be a probability in [0, 1], got {kw['prob']}")
        if kw.get("num_layers", 2) < 0:
            raise ValueError(f"timm augmentation {config!r}: n must be >= 0, got {kw['num_layers']}")
        if kw.get("magnitude_max") is not None and kw["magnitude_max"] <= 0:
            raise ValueError(f"timm augmentation {config!r}: mmax must be > 0, got {kw['magnitude_max']}")
        return cls(**kw)


class TimmAugment(Policy):
    """timm's augmentation policies (``timm.data.create_transform(auto_augment=...)``), drawn per sample
    and run batched: ``rand-m9-mstd0.5-inc1`` (RandAugment), ``original``, ``originalr``, ``v0``,
    ``v0r`` (AutoAugment, ``-mstd`` allowed) and ``3a`` (DeiT III's 3-Augment: solarize, grayscale or
    Gaussian blur, one of the three per sample).

    ``mean`` is the model's normalisation mean: timm fills the area a geometric op uncovers with it,
    rounded to 8 bits (``img_mean``), and sets ``translate_const = int(0.45·min(H, W))`` from the image
    size. ``interpolation`` is timm's ``train_interpolation`` (DeiT: ``bicubic``; timm's ``random``,
    a bilinear/bicubic coin per op, is not provided); recipes default it to ``data.interpolation``."""

    #: a recipe's build defaults ``interpolation`` to the training crop's, as timm's create_transform does
    interpolation_from_crop = True
    summary = ("timm's `auto_augment` strings: `rand-mM-nN-pP-mstdS-mmaxX-incB-tSET`, `original`, `originalr`, `v0`, "
               "`v0r` (with `-mstdS`), `3a`; fill = the model's mean in 8 bits, as timm's `create_transform`")
    runs_on = "pixels"

    @classmethod
    def counterpart(cls, args, ctx):
        """timm's RandAugment / AutoAugment with the hyper-parameters timm's ``create_transform`` gives
        it (fill = the normalisation mean in 8 bits, ``translate_const`` from the crop size),
        posterizing as on Pillow < 13 (:func:`with_pillow12_posterize`)."""
        from timm.data.auto_augment import auto_augment_transform, rand_augment_transform  # slow to import
        from timm.data.transforms import str_to_pil_interp  # (timm: as above)

        policy = args.get("policy", "3a")
        hparams = dict(translate_const=int(ctx.image_size * 0.45), img_mean=tuple(min(255, round(255 * m)) for m in ctx.mean),
                       interpolation=str_to_pil_interp(args["interpolation"]), translate_pct=args.get("translate_pct", 0.45))
        op = (rand_augment_transform if policy.startswith("rand") else auto_augment_transform)(policy, hparams)
        return with_pillow12_posterize(op)

    @classmethod
    def timm_kwargs(cls, args):
        return {"auto_augment": args.get("policy", "3a")}

    def __init__(self, policy: str = "rand-m9-mstd0.5-inc1", interpolation: str = "bicubic",
                 mean: tuple[float, float, float] = IMAGENET_MEAN, translate_pct: float = 0.45,
                 seed: int | None = None) -> None:
        fill = tuple(min(255, round(255 * float(m))) / 255.0 for m in mean)
        super().__init__(seed, interpolation, fill)
        self.policy, self.mean, self.translate_pct = policy, tuple(float(m) for m in mean), float(translate_pct)
        self.config = TimmConfig.parse(policy)
        c = self.config
        if c.kind == "rand":
            if c.transforms == "weights":
                names, weights = tuple(_RAND_WEIGHTED_0), tuple(_RAND_WEIGHTED_0.values())
            elif c.transforms == "3aw":
                names, weights = tuple(_RAND_WEIGHTED_3A), tuple(_RAND_WEIGHTED_3A.values())
            elif c.transforms == "3a":
                names, weights = _RAND_3A, None
            else:
                names, weights = (_RAND_INCREASING_TRANSFORMS if c.increasing else _RAND_TRANSFORMS), None
            self.timm_ops = names
            self._weights = None if weights is None else torch.tensor(weights, dtype=torch.float64)
            if weights is not None and c.num_layers > len(names):  # timm draws a weighted set without replacement
                raise ValueError(f"timm augmentation {policy!r}: n={c.num_layers} ops without replacement from a "
                                 f"weighted set of {len(names)}")
        else:
            policy_ops = _TIMM_POLICIES[c.kind]
            self.timm_ops = tuple(dict.fromkeys(o for sp in policy_ops for o, _, _ in sp))
            index = {name: k for k, name in enumerate(self.timm_ops)}
            width = max(len(sp) for sp in policy_ops)
            self._sub_op = torch.tensor([[index[o] for o, _, _ in sp] + [-1] * (width - len(sp)) for sp in policy_ops])
            self._sub_p = torch.tensor([[p for _, p, _ in sp] + [0.0] * (width - len(sp)) for sp in policy_ops],
                                       dtype=torch.float64)
            self._sub_m = torch.tensor([[m for _, _, m in sp] + [0] * (width - len(sp)) for sp in policy_ops],
                                       dtype=torch.float64)
        # the kernels the timm ops map to, in one table (op ids of the params index it)
        levels = _timm_levels(self.translate_pct, 0.0)
        self.ops = tuple(dict.fromkeys(levels[o][0] for o in self.timm_ops))

    def _levels(self, shape):
        h, w = image_size(shape)
        # timm's create_transform: translate_const = int(0.45 · min(H, W)); relative translations
        # are fractions of the image width (x) or height (y) — resolved per op below
        return _timm_levels(self.translate_pct, float(int(min(h, w) * 0.45))), h, w

    def draw(self, shape, gen):
        n, c = shape[0], self.config
        if c.kind == "rand":
            slots = c.num_layers
            if slots == 0:
                which = torch.zeros(n, 0, dtype=torch.long)
            elif self._weights is None:
                which = torch.randint(len(self.timm_ops), (n, slots), generator=gen)
            else:  # timm: np.random.choice(ops, n, replace=False, p=weights)
                which = torch.multinomial(self._weights.expand(n, -1), slots, replacement=False, generator=gen)
            fire = torch.rand(n, slots, generator=gen, dtype=torch.float64) <= c.prob if c.prob < 1.0 else \
                torch.ones(n, slots, dtype=torch.bool)
            magnitude = torch.full((n, slots), c.magnitude, dtype=torch.float64)
        else:
            sub = torch.randint(len(self._sub_op), (n,), generator=gen)
            which = self._sub_op[sub].clamp(min=0)
            slots = which.shape[1]
            fire = (torch.rand(n, slots, generator=gen, dtype=torch.float64) <= self._sub_p[sub]) & (self._sub_op[sub] >= 0)
            magnitude = self._sub_m[sub]
        if c.magnitude_std == math.inf:
            magnitude = torch.rand(n, slots, generator=gen, dtype=torch.float64) * magnitude
        elif c.magnitude_std > 0:
            magnitude = magnitude + c.magnitude_std * torch.randn(n, slots, generator=gen, dtype=torch.float64)
        upper = c.magnitude_max or _LEVEL_DENOM
        magnitude = magnitude.clamp(0.0, upper)
        negate = torch.rand(n, slots, generator=gen, dtype=torch.float64) > 0.5
        blur_u = torch.rand(n, slots, generator=gen, dtype=torch.float64)
        levels, h, w = self._levels(shape)
        op = torch.full((n, slots), -1, dtype=torch.long)
        arg = torch.zeros(n, slots, dtype=torch.float64)
        kernel_index = {name: k for k, name in enumerate(self.ops)}
        for t, name in enumerate(self.timm_ops):  # a loop over the op table, not over samples
            m = (which == t) & fire
            kernel, level, signed = levels[name]
            a = level(magnitude)
            if signed:
                a = torch.where(negate, -a, a)
            if name in _INCREASING:
                a = torch.clamp(1.0 + a, min=0.1)
            elif name == "TranslateXRel":
                a = a * w
            elif name == "TranslateYRel":
                a = a * h
            elif name == "GaussianBlurRand":  # radius uniform in [0.1, 2·level]
                a = 0.1 + blur_u * (2.0 * a - 0.1)
            op = torch.where(m, kernel_index[kernel], op)
            arg = torch.where(m, a, arg)
        return {"op": op, "arg": arg}


class ThreeAugment(TimmAugment):
    """DeiT III's 3-Augment (timm's ``3a``): per sample one of grayscale, solarize (threshold 128)
    and Gaussian blur (σ uniform in [0.1, 2]), always applied. timm's ``create_transform`` keeps its
    ColorJitter on with ``3a`` (DeiT III: 0.3): list a :class:`~dctnet.transforms.ColorJitter` after it."""

    summary = "DeiT III's 3-Augment (timm's `3a`): grayscale, solarize or Gaussian blur, one per sample"

    def __init__(self, interpolation: str = "bicubic", mean: tuple[float, float, float] = IMAGENET_MEAN,
                 seed: int | None = None) -> None:
        super().__init__("3a", interpolation, mean, seed=seed)


# ---------------------------------------------------------------------- Pillow 13's posterize
def pillow12_posterize(img, bits_to_keep, **__):
    """timm's posterize as it ran on Pillow < 13, where ``ImageOps.posterize(img, 0)`` gave black:
    Pillow 13 refuses 0 bits, which timm's ``-inc1`` policies draw (about 1 sample in 500 of
    DeiT's list). dctnet's ``TimmAugment`` keeps 0 bits as black too."""
    from PIL import ImageOps  # optional dependency (the baseline's)

    if bits_to_keep >= 8:
        return img
    if bits_to_keep <= 0:
        return img.point(lambda i: 0)
    return ImageOps.posterize(img, bits_to_keep)


def with_pillow12_posterize(transform):
    """``transform`` (timm's RandAugment / AutoAugment) with its posterize ops on
    :func:`pillow12_posterize`; every other op, probability and magnitude unchanged."""
    from timm.data import auto_augment as timm_aa  # slow to import

    ops = list(getattr(transform, "ops", []))
    for sub in getattr(transform, "policy", []):  # AutoAugment: a list of sub-policies
        ops.extend(sub)
    for op in ops:
        if getattr(op, "aug_fn", None) is timm_aa.posterize:
            op.aug_fn = pillow12_posterize
    return transform
