r"""Random erasing with the reference libraries' semantics: torchvision v2's ``RandomErasing``
(``mode=None``) and timm's ``RandomErasing`` (``mode="const" | "rand" | "pixel"``), per sample and
batched.

Representations (a kernel registered for each, :func:`~dctnet.transforms.base.kernel`): pixels
``(B, C, H, W)`` in [0, 1], or a coefficient image ``(B, 3, Hb, Wb, 64)``. On a coefficient image
the box is drawn in pixels as the reference
would for an ``8·Hb × 8·Wb`` image, then snapped to the 8-pixel block grid (each edge to the nearest
multiple of 8, halves up; a box can snap to nothing). The fill becomes coefficients exactly: a
constant colour is the DC of its YCbCr value (AC zero), pixel noise is the block DCT of the noise
image — so erasing ``from_rgb(x)`` equals ``from_rgb`` of erasing ``x`` with the same aligned box.

**Units.** Both references erase a *normalised* tensor (after ``Normalize(mean, std)``): their fill
values (``value``, N(0, 1) noise) are in normalised units. dctnet erases [0, 1] pixels (or their
coefficients) before the model's normalisation, so a fill ``v`` is written as ``mean_c + std_c·v``:
after normalisation the tensor holds exactly what the reference's would. Nothing is clamped — the
values are those of the normalised tensor (noise goes outside [0, 1]). ``mean`` / ``std`` are the
model's normalisation (``None`` for both: values written as given).

**A coefficient model's input.** The references' noise is N(0, 1) in the model's normalised input.
For a model fed standardised coefficients (a DCT ViT: ``(x − mean_cuv) / std_cuv`` per channel and
frequency), :meth:`RandomErasing.noise_in` makes the noise N(0, 1) per standardised coefficient —
``mean_cuv + std_cuv·z`` per block, written back as pixels when the batch is pixels (the block IDCT
and colour map are affine, nothing clamped) — so the erased blocks look to the model as timm's
erased pixels look to an RGB model. Per-pixel RGB noise would not: white noise has the same spread
at every frequency, while photos have almost none in the high (chroma) frequencies, so after the
standardisation it stands thousands of σ out and a DCT ViT trained with it stops learning.

**Noise.** ``value="random"`` (torchvision) and ``mode="pixel"`` (timm) fill with per-pixel N(0, 1).
Drawing it on the host means a ``(B, C, H, W)`` normal draw and its host → device copy every step:
measured ~0.11 s for 64×3×224² on two busy CPU cores (so ~0.45 s and 154 MB for a batch of 256), on
the loader's critical path. Instead the host draws one 62-bit key per sample and the device computes
the noise as a counter-based hash of (key, channel, row, column) (:func:`normal_noise`: Wellons'
``lowbias32`` integer mixer, two 24-bit uniforms per Box–Muller pair). The noise is thus a pure
function of the host generator, replays bit for bit, needs no per-sample loop and no host sync;
its integers are the same on every device (the float Box–Muller may differ in the last ulp between
CPU and CUDA). It is elementwise int64 arithmetic meant for the device; on the CPU it costs more
than a host draw (~1.8 s for 64×3×224² on the same two busy cores). One noise image a sample covers
the whole input and every box of the sample shows its part of it: each erased pixel is still one
N(0, 1) draw independent of every other pixel, the law of timm's per-box patches and torchvision's
``(C, h, w)`` patch (where boxes overlap, the pixel keeps the shared image's value).

Parameters (host tensors, first dimension ``B``; ``K = max_count``, 1 for torchvision):

- ``boxes`` ``(B, K, 4)`` long — ``(top, left, height, width)`` in pixels (multiples of 8 on a
  coefficient image), applied in order k = 0, 1, … (a later box overwrites an earlier one, as in
  timm's loop);
- ``active`` ``(B, K)`` bool — box k exists (k < the sample's count and one of the 10 attempts fit);
- ``fill`` ``(B, K, C)`` float64 — the constant written, in [0, 1] pixel units (``mean + std·v``);
  for the noise modes the noise's offset (``mean``);
- noise modes only: ``noise_key`` ``(B,)`` int64 (the sample's noise image) and ``noise_scale``
  ``(B, K, C)`` float64 (``std``): box k holds ``fill + noise_scale · noise``;
- ``apply`` ``(B,)`` bool — the base class's coin of ``p`` (when ``p < 1``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch
from torch import Tensor

from dctnet.kernels import coefficients as TF
from dctnet.kernels.boxes import box_mask, image_geometry, snap_to_blocks
from dctnet.kernels.cache import cached, select
from dctnet.kernels.dct import block_dct
from dctnet.kernels.normalization import IMAGENET_MEAN, IMAGENET_STD
from dctnet.transforms.base import (Transform, group_capacity, group_chunks, kernel, may_overwrite,
                                    representation, run_groups, to_device)
from dctnet.transforms.model_input import Normalize

__all__ = ["RandomErasing"]

_F64 = torch.float64
_MODES = (None, "const", "rand", "pixel")
_ATTEMPTS = 10

# ---------------------------------------------------------------------- counter-based noise
_M32 = 0xFFFFFFFF


def _mul32(x: Tensor, m: int) -> Tensor:
    """``x·m mod 2³²`` for ``x`` in [0, 2³²) held in int64. The int64 product may pass 2⁶³: torch's
    integer multiply wraps (two's complement, on the CPU and on CUDA), which keeps the low 32 bits
    exact — one multiply and one mask, where splitting ``m`` into 16-bit halves took six launches."""
    return (x * m) & _M32


def _mix32(x: Tensor) -> Tensor:
    """Wellons' ``lowbias32`` integer hash (a bijection of 32-bit integers)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def _mix32_lanes(x: Tensor) -> Tensor:
    """:func:`_mix32` in int32 lanes (``x`` the 32-bit pattern as int32): the multiplies wrap modulo
    2³² by themselves and each right shift is masked to a logical one — the same bits, in half the
    memory and with 32-bit multiplies (a CPU multiplies int64 lanes in three instructions): ~3× faster
    there, for one launch more per round. Written into ``x`` (a temporary of the caller's) with one
    scratch tensor: two live buffers instead of a new one per op keep the rounds in a CPU's caches
    (~1.6× faster again)."""
    t = x >> 16
    x ^= t.bitwise_and_(0xFFFF)
    x.mul_(_as_i32(0x7FEB352D))
    x ^= torch.bitwise_right_shift(x, 15, out=t).bitwise_and_(0x1FFFF)
    x.mul_(_as_i32(0x846CA68B))
    x ^= torch.bitwise_right_shift(x, 16, out=t).bitwise_and_(0xFFFF)
    return x


def _as_i32(v: int) -> int:
    """A 32-bit pattern as the int32 value with those bits."""
    return v - (1 << 32) if v >= (1 << 31) else v


def split_keys(keys: Tensor, lanes: torch.dtype = torch.int64) -> Tensor:
    """int64 keys ``(N,)`` → their 32-bit halves ``(N, 2)`` (low, high), what :func:`normal_noise` hashes
    (split on the host, where the keys are drawn: three fewer device launches). ``lanes=torch.int32``:
    the halves' bit patterns as int32, which has :func:`normal_noise` hash in 32-bit lanes."""
    halves = torch.stack([keys & _M32, (keys >> 32) & _M32], 1)
    return halves if lanes == torch.int64 else (halves - ((halves >> 31) << 32)).to(torch.int32)


def normal_noise(keys: Tensor, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> Tensor:
    """Standard normal noise ``(N, *shape)`` on ``keys``' device, a pure function of the int64
    ``keys (N,)`` (one independent stream per key; or their halves ``(N, 2)``, :func:`split_keys`).
    Elements ``2c`` and ``2c + 1`` (row-major) of key ``k`` are the Box–Muller pair ``r·cos θ``,
    ``r·sin θ`` (``cos θ`` as ``sin(θ + π/2)``) of two 24-bit uniforms: ``h1 = mix(mix(c ^ k_lo) ^ k_hi)``
    and ``h2 = mix(h1 ^ 0x9E3779B9)``, ``mix`` Wellons' ``lowbias32`` and ``k_lo``, ``k_hi`` the
    32-bit halves of ``k``. Elementwise torch only (int64 arithmetic): no host sync, the same integers
    on every device."""
    n = math.prod(shape)
    pairs = (n + 1) // 2
    if pairs >= 2**32:
        raise ValueError(f"normal_noise: {n} elements per key is too many (2^33 at most)")
    halves = keys if keys.dim() == 2 else split_keys(keys)
    if halves.dtype == torch.int32 and pairs >= 2**31:  # past int32's counters: the halves' patterns in int64
        halves = halves.long() & _M32
    if halves.dtype == torch.int32:  # the same hash in 32-bit lanes (split_keys' lanes)
        ctr = torch.arange(pairs, device=keys.device, dtype=torch.int32)
        h1 = _mix32_lanes(ctr ^ halves[:, :1])  # each round into its own temporary (_mix32_lanes)
        h1 ^= halves[:, 1:]
        h1 = _mix32_lanes(h1)
        h2 = _mix32_lanes(h1 ^ _as_i32(0x9E3779B9))
        top1 = h1.bitwise_right_shift_(8).bitwise_and_(0xFFFFFF)  # logical shifts of the 32-bit patterns
        top2 = h2.bitwise_right_shift_(8).bitwise_and_(0xFFFFFF)
    else:
        ctr = torch.arange(pairs, device=keys.device, dtype=torch.long)
        h1 = _mix32(_mix32(ctr ^ halves[:, :1]) ^ halves[:, 1:])
        h2 = _mix32(h1 ^ 0x9E3779B9)
        top1, top2 = h1 >> 8, h2 >> 8
    u1 = top1.to(torch.float32).add_(0.5).mul_(1.0 / 2**24)  # in (0, 1): log finite
    r = u1.log_().mul_(-2.0).sqrt_()  # in place: each a new tensor would cost a CPU ~3x the pass
    # (θ + π/2, θ) in one op: the pair's angles, θ = 2π·h2/2²⁴, as two rows (N, 2, pairs) interleaved by
    # the last copy: broadcast over an inner dim of 2, a CPU runs the add and the multiply unvectorised
    # (the same values: one rounding each, either way)
    angles = torch.add(_angle_offsets(keys.device)[:, None], top2.to(torch.float32)[:, None, :],
                       alpha=2.0 * math.pi / 2**24)
    z = angles.sin_().mul_(r[:, None, :]).transpose(1, 2).reshape(halves.shape[0], 2 * pairs)
    return z[:, :n].to(dtype).reshape(halves.shape[0], *shape)


def _angle_offsets(device: torch.device) -> Tensor:
    return cached(("noise_offsets", str(device)),
                     lambda: torch.tensor([math.pi / 2, 0.0], dtype=torch.float32).to(device, non_blocking=True))


def _ycc_dc(rgb: Tensor) -> Tensor:
    """DC coefficients ``(..., 3)`` of constant blocks of RGB ``rgb (..., 3)`` in [0, 1]: ``8·(YCbCr − 128)``
    with JFIF's matrix (that of :func:`dctnet.kernels.color.rgb_to_ycbcr`), as scalar arithmetic (no
    constant tensors copied to the device)."""
    r, g, b = (rgb[..., i] * 255.0 for i in range(3))
    y = 0.299 * r + 0.587 * g + 0.114 * b - 128.0
    cb = -0.168735892 * r - 0.331264108 * g + 0.5 * b
    cr = 0.5 * r - 0.418687589 * g - 0.081312411 * b
    return 8.0 * torch.stack([y, cb, cr], -1)


def _rgb_to_coefficients(rgb: Tensor) -> Tensor:
    """:func:`dctnet.kernels.coefficients.coefficient_image_from_rgb` with the colour matrix as scalars."""
    r, g, b = (rgb[:, i] * 255.0 for i in range(3))
    ycc = torch.stack([0.299 * r + 0.587 * g + 0.114 * b - 128.0,
                       -0.168735892 * r - 0.331264108 * g + 0.5 * b,
                       0.5 * r - 0.418687589 * g - 0.081312411 * b], 1)
    return block_dct(ycc)


# ---------------------------------------------------------------------- the transform
def _pair(name: str, arg: str, v: object) -> tuple[float, float]:
    if (isinstance(v, (str, bytes)) or not isinstance(v, Sequence) or len(v) != 2
            or not all(isinstance(a, numbers.Real) and not isinstance(a, bool) and math.isfinite(a) for a in v)):
        raise ValueError(f"{name}: {arg} must be a pair (lo, hi), got {v!r}")
    return float(v[0]), float(v[1])


class RandomErasing(Transform):
    """Erase a box of each sample with probability ``p`` (the base class's per-sample coin).

    ``mode=None`` — **torchvision v2**: up to 10 attempts at a box of area ``H·W·U(scale)`` and aspect
    ``exp(U(log ratio))``, ``h = int(round(sqrt(a·r)))``, ``w = int(round(sqrt(a/r)))``, kept if
    ``h < H`` and ``w < W``; position uniform in ``0..H − h`` / ``0..W − w``; no erasing when all 10
    fail. ``value``: a number, a per-channel sequence (1 or C values) or ``"random"`` (per-pixel
    N(0, 1)).

    ``mode="const" | "rand" | "pixel"`` — **timm**: ``p`` ↔ ``probability``, ``scale`` ↔
    ``(min_area, max_area)``, ``ratio`` ↔ ``(min_aspect, max_aspect)`` (defaults ``None``: each library's —
    torchvision (0.02, 0.33) and (0.3, 3.3), timm (0.02, 1/3) and (0.3, 1/0.3)), ``ratio`` ↔
    ``(min_aspect, max_aspect)``; a count uniform in
    ``min_count..max_count`` (``max_count=None``: ``min_count``), each box of area
    ``H·W·U(scale) / count`` with 10 attempts as above, position uniform in ``0..H − h`` (timm's
    inclusive ``randint``); fill 0 (``const``), per-box per-channel N(0, 1) (``rand``) or per-pixel
    N(0, 1) (``pixel``). ``value`` is torchvision's and must stay 0 here.

    Fill values are in normalised units, written as ``mean + std·v`` on [0, 1] pixels (module
    docstring); ``mean`` / ``std``: the model's normalisation (``None`` for both: none)."""

    summary = ("`mode` null: torchvision's `v2.RandomErasing` (`value` a number, 3 numbers or `\"random\"`; `scale`, "
               "`ratio` null: (0.02, 0.33), (0.3, 3.3)); `mode` `const`/`rand`/`pixel`: timm's (`min_count`/`max_count` "
               "boxes; `scale`, `ratio` null: (0.02, 1/3), (0.3, 1/0.3)). Values are in normalised units, as both "
               "write them after `Normalize`; for a DCT ViT with "
               "`normalize: stats` the `pixel` / `\"random\"` noise is N(0, 1) per standardised coefficient, its "
               "normalised input")
    runs_on = "either (boxes snap to blocks on coefficients)"

    @classmethod
    def counterpart(cls, args, ctx):
        """torchvision's ``v2.RandomErasing`` (``mode`` None), else timm's (per-pixel / per-channel noise)."""
        scale = args["scale"] or ((0.02, 0.33) if args["mode"] is None else (0.02, 1.0 / 3.0))
        ratio = args["ratio"] or ((0.3, 3.3) if args["mode"] is None else (0.3, 1.0 / 0.3))
        if args["mode"] is None:
            from torchvision.transforms import v2  # optional dependency (the baseline's)

            return v2.RandomErasing(p=args["p"], scale=scale, ratio=ratio, value=args["value"])
        from timm.data.random_erasing import RandomErasing as TimmRandomErasing  # slow to import

        return TimmRandomErasing(probability=args["p"], min_area=scale[0], max_area=scale[1],
                                 min_aspect=ratio[0], max_aspect=ratio[1], mode=args["mode"],
                                 min_count=args["min_count"], max_count=args["max_count"], device="cpu")

    @classmethod
    def timm_kwargs(cls, args):
        if args["mode"] is None:
            return None
        return {"re_prob": args["p"], "re_mode": args["mode"], "re_count": args["max_count"] or args["min_count"]}

    def __init__(self, p: float = 0.5, scale: tuple[float, float] | None = None,
                 ratio: tuple[float, float] | None = None, value: float | str | tuple[float, ...] = 0.0,
                 mode: str | None = None, min_count: int = 1, max_count: int | None = None,
                 mean: tuple[float, ...] | None = IMAGENET_MEAN, std: tuple[float, ...] | None = IMAGENET_STD,
                 seed: int | None = None) -> None:
        super().__init__(seed, p=p)
        name = type(self).__name__
        if scale is None:  # each library's default: torchvision's (0.02, 0.33), timm's min_area 0.02, max_area 1/3
            scale = (0.02, 0.33) if mode is None else (0.02, 1.0 / 3.0)
        if ratio is None:  # torchvision's (0.3, 3.3); timm's min_aspect 0.3, max_aspect = 1 / min_aspect
            ratio = (0.3, 3.3) if mode is None else (0.3, 1.0 / 0.3)
        lo, hi = _pair(name, "scale", scale)
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(f"{name}: scale must be (lo, hi) with 0 <= lo <= hi <= 1, got {scale!r}")
        rlo, rhi = _pair(name, "ratio", ratio)
        if not 0.0 < rlo <= rhi:
            raise ValueError(f"{name}: ratio must be (lo, hi) with 0 < lo <= hi, got {ratio!r}")
        if mode not in _MODES:
            raise ValueError(f"{name}: mode must be None (torchvision) or 'const', 'rand', 'pixel' (timm), got {mode!r}")
        if isinstance(value, str):
            if value != "random":
                raise ValueError(f"{name}: value must be a number, a per-channel sequence or 'random', got {value!r}")
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            value = float(value)
        elif (isinstance(value, Sequence) and len(value) > 0
              and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value)):
            value = tuple(float(v) for v in value)
        else:
            raise ValueError(f"{name}: value must be a number, a per-channel sequence or 'random', got {value!r}")
        for arg, v in (("min_count", min_count), ("max_count", max_count)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1):
                raise ValueError(f"{name}: {arg} must be an int >= 1, got {v!r}")
        if max_count is not None and max_count < min_count:
            raise ValueError(f"{name}: max_count ({max_count}) < min_count ({min_count})")
        if mode is None and (min_count != 1 or max_count not in (None, 1)):
            raise ValueError(f"{name}: min_count / max_count are timm's (mode='const', 'rand' or 'pixel'); "
                             "torchvision's mode=None erases one box")
        if mode is not None and value != 0.0:
            raise ValueError(f"{name}: value is torchvision's (mode=None); timm's mode {mode!r} sets the fill")
        if (mean is None) != (std is None):
            raise ValueError(f"{name}: give mean and std together (or neither)")
        if mean is not None:
            mean, std = tuple(float(v) for v in mean), tuple(float(v) for v in std)
            if len(mean) != len(std) or not mean or not all(s > 0 for s in std):
                raise ValueError(f"{name}: mean and std must have the same length with std > 0, got {mean}, {std}")
        self.scale, self.ratio, self.value, self.mode = (lo, hi), (rlo, rhi), value, mode
        self.min_count = int(min_count)
        self.max_count = None if max_count is None else int(max_count)
        self.mean, self.std = mean, std
        # a Normalize read at apply time (not a child module: it belongs to the pipeline, and --resume
        # replaces its statistics in place); set by noise_in
        self.__dict__["coefficient_input"] = None

    @property
    def noise(self) -> bool:
        """Whether the fill is per-pixel N(0, 1) noise (``mode="pixel"`` or ``value="random"``)."""
        return self.mode == "pixel" or (self.mode is None and self.value == "random")

    def noise_in(self, normalize: Normalize | None) -> RandomErasing:
        """Draw the noise in a coefficient model's input: N(0, 1) per coefficient after
        ``normalize`` (a :class:`dctnet.transforms.Normalize`, statistics ``(3, 64)``), i.e.
        ``normalize.mean + normalize.std·z`` per block (module docstring). ``None``: per-pixel noise
        in the RGB normalisation (``mean`` / ``std``), the references' own. Returns ``self``."""
        if normalize is not None and not isinstance(normalize, Normalize):
            raise TypeError(f"{type(self).__name__}.noise_in takes a dctnet.transforms.Normalize or None, "
                            f"not {type(normalize).__name__}")
        self.__dict__["coefficient_input"] = normalize
        return self

    def extra_repr(self) -> str:
        text = super().extra_repr()
        return text + ", noise_in=<standardised coefficients>" if self.coefficient_input is not None else text

    # ------------------------------------------------------------------ draws
    def _boxes(self, batch: int, height: int, width: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        """Boxes ``(B, K, 4)`` (top, left, h, w) in pixels and ``active (B, K)``: all attempts drawn at
        once, the first that fits kept per (sample, box)."""
        kmax = self.max_count or self.min_count
        shape = (batch, kmax, _ATTEMPTS)
        frac = self.scale[0] + (self.scale[1] - self.scale[0]) * torch.rand(shape, generator=gen, dtype=_F64)
        llo, lhi = math.log(self.ratio[0]), math.log(self.ratio[1])
        log_r = llo + (lhi - llo) * torch.rand(shape, generator=gen, dtype=_F64)
        u_top = torch.rand(batch, kmax, generator=gen, dtype=_F64)
        u_left = torch.rand(batch, kmax, generator=gen, dtype=_F64)
        if kmax > self.min_count:
            count = self.min_count + (torch.rand(batch, generator=gen, dtype=_F64)
                                      * (kmax - self.min_count + 1)).long()
        else:
            count = torch.full((batch,), self.min_count)
        area = frac * float(height * width) / count[:, None, None].to(_F64)
        ratio = torch.exp(log_r)
        h = torch.round(torch.sqrt(area * ratio)).long()
        w = torch.round(torch.sqrt(area / ratio)).long()
        fits = (h < height) & (w < width)
        first = fits.long().argmax(-1, keepdim=True)  # the first attempt that fits (0 when none does)
        h, w = h.gather(-1, first)[..., 0], w.gather(-1, first)[..., 0]
        active = fits.any(-1) & (torch.arange(kmax)[None] < count[:, None])
        h, w = torch.where(active, h, 0), torch.where(active, w, 0)
        top = (u_top * (height - h + 1)).long()
        left = (u_left * (width - w + 1)).long()
        return torch.stack([top, left, h, w], -1), active

    def draw(self, shape, gen):
        coef, height, width = image_geometry(shape, type(self).__name__)
        batch, chans = int(shape[0]), int(shape[1])
        boxes, active = self._boxes(batch, height, width, gen)
        if coef:
            boxes = torch.stack(snap_to_blocks(*boxes.unbind(-1)), -1)
        kmax = boxes.shape[1]
        if self.mean is not None and len(self.mean) != chans:
            raise ValueError(f"{type(self).__name__}: mean/std have {len(self.mean)} channels, the input has {chans}")
        mean = torch.tensor(self.mean if self.mean is not None else (0.0,) * chans, dtype=_F64)
        std = torch.tensor(self.std if self.std is not None else (1.0,) * chans, dtype=_F64)
        params = {"boxes": boxes, "active": active}
        if self.noise:
            params["fill"] = mean.expand(batch, kmax, chans).clone()
            params["noise_scale"] = std.expand(batch, kmax, chans).clone()
            params["noise_key"] = torch.randint(0, 2**62, (batch,), generator=gen)
            return params
        if self.mode == "rand":
            v = torch.randn(batch, kmax, chans, generator=gen, dtype=_F64)
        elif self.mode == "const":
            v = torch.zeros(batch, kmax, chans, dtype=_F64)
        else:
            value = (self.value,) if isinstance(self.value, float) else self.value
            if len(value) not in (1, chans):
                raise ValueError(f"{type(self).__name__}: value has {len(value)} entries; 1 or {chans} "
                                 "(the input's channels) expected")
            v = torch.tensor(value, dtype=_F64).expand(batch, kmax, chans)
        params["fill"] = mean + std * v
        return params

    # ------------------------------------------------------------------ apply
    def prepare(self, params, shape, device):
        """The samples that erase something, planned on the host (no device read) into groups of a
        fixed size: ``group_capacity(B, p)`` rows (padded with scratch rows ``B, B + 1, …`` that erase
        nothing), a second group only in the rare batch where more samples erase. The device then
        computes boxes and noise for those rows alone: with ``p = 0.25`` about a quarter of the
        batch, at the same shapes every batch."""
        batch = int(shape[0])
        erases = params["active"].any(1)
        if "apply" in params:
            erases = erases & params["apply"]
        rows = erases.nonzero().squeeze(1)
        cap = group_capacity(batch, 1.0 if self.p is None else self.p) if self.fixed_shapes else None
        chunks = []
        for r, idx in group_chunks(rows, batch, cap):
            pad = len(idx) - len(r)
            chunk = {"rows": idx, "padded": cap is not None}
            for k, v in params.items():
                if k != "apply":
                    chunk[k] = torch.cat([v[r], v.new_zeros((pad, *v.shape[1:]))])
            if "noise_key" in chunk:  # exact groups (a CPU's) hash in 32-bit lanes: the same noise, faster
                chunk["noise_key"] = split_keys(chunk["noise_key"], torch.int64 if cap is not None else torch.int32)
            chunks.append(chunk)
        return to_device(chunks, device)

    def execute(self, x, labels, prepared):
        if self.p == 0.0:
            return x, labels
        erase = self._kernel("apply", representation(x))
        groups = [(None, ch) for ch in prepared]
        # each group's rows are run_groups' own copy: erased where they lie
        return run_groups(x, groups, lambda sub, _, ch: erase(sub, None, ch, inplace=True)[0],
                          overwrite=may_overwrite(self, x)), labels

    @kernel("pixel")
    def _pixels(self, x, labels, params, inplace: bool = False):
        return self._erase(x, params, inplace, coef=False), labels

    @kernel("coefficient")
    def _coefficients(self, x, labels, params, inplace: bool = False):
        return self._erase(x, params, inplace, coef=True), labels

    def _erase(self, x: Tensor, params: dict[str, Tensor], inplace: bool, coef: bool) -> Tensor:
        """The boxes of ``params`` erased in ``x`` (written into ``x`` itself when ``inplace``), a
        coefficient image when ``coef``."""
        boxes, active, fill = params["boxes"], params["active"], params["fill"]
        batch = x.shape[0]
        view = (batch,) + (1,) * (x.dim() - 1)
        noise = model_noise = None
        norm = self.coefficient_input
        if "noise_key" in params and norm is not None:  # N(0, 1) per standardised coefficient
            _, height, width = image_geometry(x.shape, type(self).__name__)
            if height % 8 or width % 8:
                raise ValueError(f"{type(self).__name__}: noise in coefficients needs an image size that is a "
                                 f"multiple of 8, got {height}x{width}")
            z = normal_noise(params["noise_key"], (3, height // 8, width // 8, 64), x.dtype)
            model_noise = norm.mean.to(x)[None, :, None, None, :] + norm.std.to(x)[None, :, None, None, :] * z
            if not coef:
                model_noise = TF.coefficient_image_to_rgb(model_noise, clamp=False)
        elif "noise_key" in params:  # one noise image a sample, shared by its boxes (see the module docstring)
            noise = normal_noise(params["noise_key"], (3, 8 * x.shape[2], 8 * x.shape[3]) if coef else tuple(x.shape[1:]),
                                 x.dtype)
        for k in range(boxes.shape[1]):  # a loop over the boxes of a sample (max_count), not over samples
            inside = box_mask(x, boxes[:, k], coefficients=coef) & active[:, k].reshape(view)
            if model_noise is not None:
                value = model_noise
            elif noise is not None:
                scale = params["noise_scale"][:, k].to(x.dtype)[:, :, None, None]
                # the noise image is this call's own: scaled where it lies when no other box reads it
                pix = (noise.mul_(scale) if boxes.shape[1] == 1 else scale * noise).add_(fill[:, k].to(x.dtype)[:, :, None, None])
                value = _rgb_to_coefficients(pix) if coef else pix
            elif coef:
                dc = _ycc_dc(fill[:, k]).to(x.dtype)  # (B, 3)
                value = torch.cat([dc[:, :, None], dc.new_zeros(batch, 3, 63)], -1)[:, :, None, None, :]
            else:
                value = fill[:, k].to(x.dtype)[:, :, None, None]
            # select: where with a broadcast mask is not vectorised on a CPU
            x = select(inside, value, x, out=x if inplace else None)
        return x
