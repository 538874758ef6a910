"""The per-sample augmentations: those with an exact kernel on coefficients (flips, colour jitter,
grayscale, the Cb/Cr rotation, requantization, frequency dropout) and torchvision's
``RandomPerspective`` (a pixel warp: a coefficient image is decoded and encoded back, as for the
policies' warps): :class:`Transform` s (see :mod:`dctnet.transforms.base` for the draw/apply split,
``p`` and the two representations).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from dctnet.kernels import coefficients as TF
from dctnet.kernels import geometry as G
from dctnet.kernels import pixel as P
from dctnet.kernels.color import rgb_to_ycbcr, ycbcr_to_rgb
from dctnet.transforms import policy_base as PB
from dctnet.transforms.auto_augment import pil_fill
from dctnet.transforms.base import (Transform, group_capacity, group_chunks, image_size, kernel, may_overwrite,
                                    representation, round_to_levels, run_groups, to_device)

__all__ = ["ColorJitter", "FrequencyDropout", "RandomChromaRotation", "RandomGrayscale", "RandomHorizontalFlip",
           "RandomPerspective", "RandomRequantize", "RandomTranspose", "RandomVerticalFlip", "perspective_points"]


def _uniform(n: int, lo: float, hi: float, gen: torch.Generator) -> Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=gen, dtype=torch.float64)


class RandomHorizontalFlip(Transform):
    """Horizontal flip of each sample with probability ``p``. Exact in both representations
    (coefficients: :func:`~dctnet.kernels.coefficients.hflip`)."""

    summary = "torchvision's `RandomHorizontalFlip`"
    runs_on = "either (exact on coefficients)"

    @classmethod
    def counterpart(cls, args, ctx):
        from torchvision.transforms import v2  # optional dependency (the baseline's)

        return getattr(v2, cls.__name__)(p=args["p"])

    @classmethod
    def timm_kwargs(cls, args):
        return {"hflip": args["p"]}

    def __init__(self, p: float = 0.5, seed: int | None = None) -> None:
        super().__init__(seed, p=p)

    @kernel("pixel")
    def _pixels(self, x, labels, params):
        return x.flip(-1), labels

    @kernel("coefficient")
    def _coefficients(self, x, labels, params):
        return TF.hflip(x), labels


class RandomVerticalFlip(RandomHorizontalFlip):
    """Vertical flip of each sample with probability ``p``. Exact."""

    summary = "torchvision's `RandomVerticalFlip`"

    @classmethod
    def timm_kwargs(cls, args):
        return {"vflip": args["p"]}

    def _pixels(self, x, labels, params):
        return x.flip(-2), labels

    def _coefficients(self, x, labels, params):
        return TF.vflip(x), labels


class RandomTranspose(RandomHorizontalFlip):
    """Swap rows and columns with probability ``p`` (square images). With the flips this
    generates all eight rot90/flip symmetries."""

    summary = "swap rows and columns (square crops)"
    runs_on = "either"

    @classmethod
    def counterpart(cls, args, ctx):
        return Transform.counterpart.__func__(cls, args, ctx)

    @classmethod
    def timm_kwargs(cls, args):
        return None

    def apply_transform(self, x, labels, params):
        h, w = image_size(x.shape)
        if h != w:
            raise ValueError(f"RandomTranspose needs a square image, got {h}×{w}")
        return super().apply_transform(x, labels, params)

    def _pixels(self, x, labels, params):
        return x.transpose(-1, -2), labels

    def _coefficients(self, x, labels, params):
        return TF.transpose(x), labels


#: ColorJitter's ops, in torchvision's index order (its ``fn_idx`` permutes these)
_JITTER_OPS = ("brightness", "contrast", "saturation", "hue")


class ColorJitter(Transform):
    """torchvision's ``v2.ColorJitter``, per sample: factors uniform in ``[max(0, 1 − a), 1 + a]`` for
    ``brightness``, ``contrast``, ``saturation`` (a number ``a`` or a ``(lo, hi)`` range), ``hue`` uniform
    in ``[−h, h]`` (h ≤ 0.5, a fraction of the HSV hue circle), applied in a random order per sample
    (torchvision's ``randperm(4)``), each clamped to [0, 1] on pixels. Applied to each sample with
    probability ``p`` (torchvision's ``ColorJitter`` is ``p = 1``).

    On a coefficient image without hue the three linear ops run as their exact DCT kernels
    (without the clamps between them); hue is an HSV operation and needs pixels. The linear (Cb, Cr)
    rotation that is exact on coefficients is :class:`RandomChromaRotation`."""

    eight_bit_op = True
    summary = ("torchvision's `v2.ColorJitter`: factors in [max(0, 1 − a), 1 + a] (or a `[lo, hi]` pair), hue in "
               "[−h, h] (HSV, h ≤ 0.5), in a random order per sample, clamped after each")
    runs_on = "pixels (without hue: either)"

    @classmethod
    def counterpart(cls, args, ctx):
        from torchvision.transforms import v2  # optional dependency (the baseline's)

        op = v2.ColorJitter(args["brightness"], args["contrast"], args["saturation"], args["hue"])
        return v2.RandomApply([op], p=args["p"]) if args["p"] < 1.0 else op

    @classmethod
    def timm_kwargs(cls, args):
        # timm's create_transform takes one number per factor (the upper end of a range)
        kw = {"color_jitter": tuple(v[1] if isinstance(v, tuple) else float(v) for v in
                                    (args["brightness"], args["contrast"], args["saturation"], args["hue"]))}
        if args["p"] < 1:
            kw["color_jitter_prob"] = args["p"]
        return kw

    def __init__(self, brightness: float | tuple[float, float] = 0.0, contrast: float | tuple[float, float] = 0.0,
                 saturation: float | tuple[float, float] = 0.0, hue: float | tuple[float, float] = 0.0,
                 seed: int | None = None, *, p: float = 1.0) -> None:
        super().__init__(seed, p=p)
        self.brightness = self._range("brightness", brightness, 1.0, (0.0, math.inf))
        self.contrast = self._range("contrast", contrast, 1.0, (0.0, math.inf))
        self.saturation = self._range("saturation", saturation, 1.0, (0.0, math.inf))
        self.hue = self._range("hue", hue, 0.0, (-0.5, 0.5))

    @property
    def domain(self) -> str:  # type: ignore[override]
        return "pixel" if self.hue is not None else "any"

    @staticmethod
    def _range(name: str, value, center: float, bound: tuple[float, float]) -> tuple[float, float] | None:
        """torchvision's ``_check_input``: a number ``a`` → ``[center − a, center + a]`` (clipped at 0
        for the factors), a pair as given; None when it is the neutral ``[center, center]``."""
        if isinstance(value, bool):
            raise ValueError(f"ColorJitter: {name} must be a number or a (lo, hi) pair, got {value!r}")
        if isinstance(value, (int, float)):
            if value < 0:
                raise ValueError(f"ColorJitter: {name} must be non-negative, got {value!r}")
            lo, hi = center - float(value), center + float(value)
            if name != "hue":
                lo = max(lo, 0.0)
        elif isinstance(value, (tuple, list)) and len(value) == 2:
            lo, hi = float(value[0]), float(value[1])
        else:
            raise ValueError(f"ColorJitter: {name} must be a number or a (lo, hi) pair, got {value!r}")
        if not bound[0] <= lo <= hi <= bound[1]:
            raise ValueError(f"ColorJitter: {name} values must lie in [{bound[0]}, {bound[1]}], got ({lo}, {hi})")
        return None if lo == hi == center else (lo, hi)

    def draw(self, shape, gen):
        n = shape[0]
        # torchvision draws the order first, then each factor from its range
        order = torch.argsort(torch.rand(n, 4, generator=gen), dim=1)
        factors = torch.zeros(n, 4, dtype=torch.float64)
        present = torch.zeros(4, dtype=torch.bool)
        for k, name in enumerate(_JITTER_OPS):
            r = getattr(self, name)
            if r is not None:
                factors[:, k] = _uniform(n, r[0], r[1], gen)
                present[k] = True
        op = torch.where(present[order], order, -1)          # (B, 4): the op in each position, −1 if absent
        arg = torch.gather(factors, 1, order.clamp(min=0))
        return {"op": op, "arg": arg}

    def _names(self) -> tuple[str, ...]:
        """The policy-kernel names of brightness, contrast, saturation, hue ("Identity" where absent)."""
        return tuple(n if getattr(self, name) is not None else "Identity"
                     for n, name in zip(("Brightness", "Contrast", "Color", "Hue"), _JITTER_OPS))

    @kernel("pixel", "prepare")
    def _plan_pixels(self, params, shape, device):
        # the three blends of a position run as one blend pass, hue masked (policy_base)
        dev = {k: v.to(device, non_blocking=True) for k, v in params.items() if k == "apply"}
        names = self._names()
        cap = PB.capacities(names, lambda n, g: self.draw(torch.Size((n, *shape[1:])), g)["op"], shape[0],
                            self.__dict__.setdefault("_capacity_cache", {})) if self.fixed_shapes else None
        dev["slots"] = PB.to_device(PB.plan_slots(names, params["op"], params["arg"], tuple(shape[-2:]), cap), device)
        return dev

    @kernel("coefficient", "prepare")
    def _plan_coefficients(self, params, shape, device):
        dev = {k: v.to(device, non_blocking=True) for k, v in params.items() if k == "apply"}
        dev["slots"] = PB.plan_masked(params["op"], params["arg"], 3, device)
        return dev

    @kernel("pixel")
    def _pixels(self, x, labels, prepared):
        return PB.run_planned_slots(x, prepared["slots"], self._names(),
                                    PB.Context("nearest", None, self.pixel_levels)), labels

    @kernel("coefficient")
    def _coefficients(self, x, labels, prepared):
        present = [getattr(self, name) is not None for name in _JITTER_OPS]
        ops = [k if keep else None for k, keep in
               zip((TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation), present)]
        return PB.run_masked(x, prepared["slots"], ops), labels


class RandomChromaRotation(Transform):
    """Rotate the (Cb, Cr) plane of each sample by an angle uniform in ``[−degrees, degrees]`` (degrees),
    with probability ``p``: a linear hue-like shift that keeps luma and chroma magnitude, exact on
    coefficients (:func:`~dctnet.kernels.coefficients.rotate_chroma`). Not torchvision's HSV hue
    (``ColorJitter(hue=...)``). On pixels: RGB → YCbCr, rotate, back, clamped to [0, 1]."""

    summary = ("rotate the Cb/Cr plane by an angle in [−degrees, degrees] (degrees): a linear hue-like shift, not "
               "torchvision's HSV hue")
    runs_on = "either (exact on coefficients)"

    def __init__(self, degrees: float = 30.0, p: float = 1.0, seed: int | None = None) -> None:
        super().__init__(seed, p=p)
        if isinstance(degrees, bool) or not isinstance(degrees, (int, float)) or not 0 <= degrees <= 180:
            raise ValueError(f"RandomChromaRotation: degrees must be in [0, 180], got {degrees!r}")
        self.degrees = float(degrees)

    def draw(self, shape, gen):
        return {"angle": _uniform(shape[0], -self.degrees, self.degrees, gen)}

    @kernel("coefficient")
    def _coefficients(self, x, labels, params):
        return TF.rotate_chroma(x, torch.deg2rad(params["angle"])), labels

    @kernel("pixel")
    def _pixels(self, x, labels, params):
        ycc = rgb_to_ycbcr(x * 255.0, dim=1) - 128.0
        # (B, 3, H, W, 1): the chroma rotates per pixel
        ycc = TF.rotate_chroma(ycc.unsqueeze(-1), torch.deg2rad(params["angle"])).squeeze(-1)
        return (ycbcr_to_rgb(ycc + 128.0, dim=1) / 255.0).clamp(0.0, 1.0), labels


class RandomGrayscale(RandomHorizontalFlip):
    """Grey RGB (R = G = B) for each sample with probability ``p``: torchvision's ``rgb_to_grayscale``
    on pixels; zero chroma on coefficients (JFIF's Y weights 0.299/0.587/0.114 against torchvision's
    0.2989/0.587/0.114: ≤ 0.03 grey levels apart)."""

    eight_bit_op = True
    summary = "torchvision's `RandomGrayscale`"
    runs_on = "either"

    @classmethod
    def timm_kwargs(cls, args):
        return {"grayscale_prob": args["p"]}

    def __init__(self, p: float = 0.1, seed: int | None = None) -> None:
        super().__init__(p, seed)

    def _pixels(self, x, labels, params):
        return round_to_levels(P.rgb_to_grayscale(x), self.pixel_levels), labels

    def _coefficients(self, x, labels, params):
        return TF.grayscale(x), labels


class RandomRequantize(Transform):
    """JPEG re-compression at an IJG quality uniform in ``quality`` (inclusive), with probability ``p``."""

    summary = ("JPEG re-compression with libjpeg's tables at a quality drawn from `quality` (torchvision's `v2.JPEG` "
               "on the baseline)")
    runs_on = "coefficients"

    @classmethod
    def counterpart(cls, args, ctx):
        from torchvision.transforms import v2  # optional dependency (the baseline's)

        op = v2.JPEG(args["quality"])
        return v2.RandomApply([op], p=args["p"]) if args["p"] < 1.0 else op

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


class FrequencyDropout(Transform):
    """Drop each AC frequency (all channels) with probability ``rate``, independently per sample;
    DC is kept. ``rate`` is a per-frequency rate, not the per-sample probability ``p`` of the
    other transforms, which this one does not take."""

    summary = "drop each AC frequency with probability `rate` (DC kept)"
    runs_on = "coefficients"

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


def perspective_points(n: int, height: int, width: int, distortion_scale: float,
                       gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """torchvision v2's ``RandomPerspective`` draw (its ``make_params``) for ``n`` images of
    ``height × width``: ``startpoints (4, 2)``, the corners (top-left, top-right, bottom-right,
    bottom-left), and ``endpoints (n, 4, 2)`` int64, pixel coordinates (x, y), each corner moved
    inward on each axis by a uniform integer in ``[0, int(distortion_scale · ⌊side/2⌋)]``. Its eight
    ``randint`` calls in its order, each for the batch: for ``n = 1``, torchvision's numbers from a
    generator seeded alike (the detection op's draw)."""
    bh = int(distortion_scale * (height // 2)) + 1
    bw = int(distortion_scale * (width // 2)) + 1

    def draw(lo: int, hi: int) -> Tensor:
        return torch.randint(lo, hi, (n,), generator=gen)

    corners = [(draw(0, bw), draw(0, bh)), (draw(width - bw, width), draw(0, bh)),
               (draw(width - bw, width), draw(height - bh, height)), (draw(0, bw), draw(height - bh, height))]
    end = torch.stack([torch.stack(xy, -1) for xy in corners], 1)
    start = torch.tensor([[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]])
    return start, end


class RandomPerspective(Transform):
    """torchvision's ``v2.RandomPerspective``, per sample: with probability ``p``, the four corners'
    end points drawn as torchvision draws them (:func:`perspective_points`: each moved inward by up
    to ``distortion_scale`` × half the side), the image warped by the homography that takes each end
    point back to its corner (torchvision's coefficients and grid:
    :func:`~dctnet.kernels.geometry.perspective`); ``interpolation`` ``"bilinear"`` or
    ``"nearest"``; ``fill`` RGB on the [0, 1] scale (a number, three, or ``None``: grid_sample's
    zeros, as torchvision's ``fill=None``). Pixels only: a coefficient image is decoded, warped and
    encoded back (within float rounding of the pixel result, as the policies' warps)."""

    eight_bit_op = True
    summary = ("torchvision's `v2.RandomPerspective`: each corner moved inward by up to `distortion_scale` × half "
               "the side, per sample; `fill` RGB on [0, 1]")
    runs_on = "pixels"

    @classmethod
    def counterpart(cls, args, ctx):
        from torchvision.transforms import v2  # optional dependency (the baseline's)

        return v2.RandomPerspective(args["distortion_scale"], args["p"],
                                    interpolation=v2.InterpolationMode(args["interpolation"]), fill=pil_fill(args["fill"]))

    def __init__(self, distortion_scale: float = 0.5, p: float = 0.5, interpolation: str = "bilinear",
                 fill: float | tuple[float, float, float] | None = 0.0, seed: int | None = None) -> None:
        super().__init__(seed, p=p)
        interpolation = getattr(interpolation, "value", interpolation)  # (torchvision's InterpolationMode too)
        if isinstance(distortion_scale, bool) or not isinstance(distortion_scale, (int, float)) \
                or not 0.0 <= distortion_scale <= 1.0:
            raise ValueError(f"RandomPerspective: distortion_scale must be in [0, 1], got {distortion_scale!r}")
        if interpolation not in ("nearest", "bilinear"):
            raise ValueError(f"RandomPerspective: interpolation must be 'nearest' or 'bilinear', got {interpolation!r}")
        if fill is not None and not (isinstance(fill, (int, float)) or len(fill) == 3):
            raise ValueError(f"RandomPerspective: fill must be a number, three (RGB) or None, got {fill!r}")
        self.distortion_scale, self.interpolation = float(distortion_scale), interpolation
        self.fill = fill if fill is None or isinstance(fill, (int, float)) else tuple(float(v) for v in fill)

    def draw(self, shape, gen):
        h, w = image_size(shape)
        start, end = perspective_points(shape[0], h, w, self.distortion_scale, gen)
        return {"startpoints": start.expand(shape[0], 4, 2).clone(), "endpoints": end}

    @kernel("pixel", "prepare")
    def _plan(self, params, shape, device):
        """The coefficients, solved on the host as torchvision solves them (float64 least squares, then
        float32); with ``p < 1``, for the samples that drew the warp alone, in groups of a fixed size
        (:func:`~dctnet.transforms.base.group_capacity` rows, padded with scratch rows that the identity
        warps; a second group only in the rare batch where more samples drew it): the device warps
        those rows, about ``p`` of the batch, at the same shapes every batch."""
        coefficients = G.perspective_coefficients(params["startpoints"], params["endpoints"])
        if "apply" not in params:  # p = 1: every sample
            return to_device({"coefficients": coefficients}, device)
        batch = int(shape[0])
        cap = group_capacity(batch, self.p) if self.fixed_shapes else None
        identity = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
        groups = []
        for rows, index in group_chunks(params["apply"].nonzero().squeeze(1), batch, cap):
            pad = identity.expand(len(index) - len(rows), 8)
            groups.append({"rows": index, "padded": cap is not None, "coefficients": torch.cat([coefficients[rows], pad])})
        return to_device(groups, device)

    def execute(self, x, labels, prepared):
        labels = self._prepare_labels(labels)
        if self.p == 0.0:
            return x, labels
        warp = self._kernel("apply", representation(x))
        if isinstance(prepared, dict):  # every sample
            return warp(x, labels, prepared)
        return run_groups(x, [(None, g) for g in prepared], lambda sub, _, g: warp(sub, None, g)[0],
                          overwrite=may_overwrite(self, x)), labels

    @kernel("pixel")
    def _pixels(self, x, labels, prepared):
        out = G.perspective(x, prepared["coefficients"], interpolation=self.interpolation, fill=self.fill)
        return round_to_levels(out, self.pixel_levels), labels
