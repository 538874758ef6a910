"""The transform base: parameters drawn on the host, execution batched, on pixels or coefficients.

A transform works on one of two representations of a batch and says which with :attr:`Transform.domain`:

- **pixels** — float RGB ``(B, 3, H, W)`` on the [0, 1] scale, what the device crop step
  (:func:`dctnet.transforms.crops_to_rgb`) gives; the ops of :mod:`dctnet.kernels.pixel`,
  clamped after each op as torchvision does;
- **coefficients** — a coefficient image ``(B, 3, Hb, Wb, 64)`` (see
  :mod:`dctnet.kernels.coefficients`), what DCT stems take.

``domain = "pixel"`` transforms (the policies, hue, …) need pixels, ``"coefficient"`` ones
(requantization, frequency dropout, per-(c,u,v) statistics) need coefficients, and ``"any"`` ones
(flips, grayscale, brightness/contrast/saturation, chroma rotation, mixing, erasing) have an exact
kernel in both (each pair is tested equal, up to torchvision's per-op clamp, which the coefficient
kernels of the colour ops leave out). Kernels are registered per representation with :func:`kernel`,
as torchvision v2 registers a functional's kernel per tensor type: the batch's representation is
read in one place and picks the kernel, and a kernel's code never asks which one it was given.
Called alone, a transform given the other representation converts, applies and converts back. A
:class:`Compose` converts only where the next transform needs it and stays there, so a list runs in
as few representation changes as possible; it returns the
representation it was given, unless it ends in a converter (:class:`ToRGB`, :class:`ToCoefficients`).

A call has two halves — the kornia split of *what* from *how*:

- :meth:`Transform.draw_params` draws the per-sample parameters on the host from a seeded CPU
  ``torch.Generator`` (cheap, reproducible, the same numbers whatever the device or representation:
  draws depend on the image size in pixels, never on the layout of the tensor) and returns them as a
  ``dict`` of CPU tensors with first dimension ``B`` (a :class:`Compose`: one such dict per
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
(``Normalize``, ``SelectFrequencies``, ``ToRGB``, ``FrequencyDropout``, ``Compose``, the policies,
the mixers, which take their own probabilities) have ``p = None``.

Labels are class indices ``(B,)`` (int) or soft targets ``(B, K)`` (float). Non-mixing transforms
return them unchanged (the same object); the mixing transforms (:mod:`dctnet.transforms.mixing`)
return soft ``(B, K)`` targets.

Reproducibility: a :class:`Compose` draws every parameter of its transforms from one generator —
its own (seeded by ``seed``) or the one passed per call. :func:`step_generator` (equivalently
``compose.generator_for(epoch, step, rank)``) makes a generator that is a pure function of
``(seed, epoch, step, rank)``: a trainer that passes it each step is bit-reproducible and resumes
exactly, whatever happened before the step.

Modules: transforms are ``nn.Module`` s, so statistics are buffers (``Normalize``'s mean/std are in
its ``state_dict`` and follow ``.to()`` / ``.double()``) and ``Compose`` holds an ``nn.ModuleList``.
Their output does not depend on ``train()`` / ``eval()``: use augmentation on the training batches only.

Recipes build transforms by name: :mod:`dctnet.transforms.registry`.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import math
import operator
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._pytree import tree_flatten

from dctnet.kernels import coefficients as TF
from dctnet.kernels.cache import select
from dctnet.readback import log_point
from dctnet.transforms.transfer import move_plan, pack_plan, unpack_plan

__all__ = ["Compose", "KERNEL_STAGES", "OVERFLOW", "Params", "REPRESENTATIONS", "Transform", "coefficient_shape",
           "CompiledHalf", "compile_step", "group_capacity", "group_chunks", "image_size", "kernel", "pixel_shape",
           "round_to_levels",
           "run_groups", "step_generator", "to_coefficients", "to_device", "to_pixels"]


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


def _representation(x: Tensor) -> str:
    """The batch's representation — the one place a batch is told apart by its shape, as torchvision
    v2's dispatchers tell theirs by type: ``(B, C, H, W)`` pixels, ``(B, 3, Hb, Wb, 64)`` coefficients."""
    return _shape_representation(x.shape)


def _shape_representation(shape: Sequence[int]) -> str:
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


#: the chance that more samples of a batch draw one kind of op (or erase) than the group of rows
#: sized for it holds; then the group runs a second chunk: exact all the same, but the step's shapes
#: change for that batch
OVERFLOW = 1e-6


def group_capacity(batch: int, p: float, tail: float = OVERFLOW) -> int:
    """The smallest ``c`` with ``P(Binomial(batch, p) > c) ≤ tail``, at least 1: how many samples a
    group of ops is given room for when each sample draws it with probability ``p``."""
    if p <= 0.0:
        return 1
    if p >= 1.0:
        return max(1, batch)
    log_p, log_q = math.log(p), math.log1p(-p)
    cdf = 0.0
    for c in range(batch + 1):
        cdf += math.exp(math.lgamma(batch + 1) - math.lgamma(c + 1) - math.lgamma(batch - c + 1)
                        + c * log_p + (batch - c) * log_q)
        if 1.0 - cdf <= tail:
            return max(1, c)
    return batch


def group_chunks(rows: Tensor, batch: int, capacity: int | None) -> list[tuple[Tensor, Tensor]]:
    """Host: the ``rows`` (int64, on the host) of a batch of ``batch`` that drew one kind of op, as
    groups of ``capacity`` rows: per group ``(members, index)``, ``index`` = the members padded with
    the scratch rows ``batch, batch + 1, …`` (distinct, so writes never collide). One group when the
    rows fit, even none (all padding); more in the rare batch where they do not. ``capacity=None``:
    exact groups — the rows alone, and no group when there are none."""
    if capacity is None:
        cap, total = max(len(rows), 1), len(rows)
    else:
        cap, total = max(1, min(batch, capacity)), max(len(rows), 1)
    chunks = []
    for start in range(0, total, cap):
        members = rows[start:start + cap]
        pad = cap - len(members)
        chunks.append((members, torch.cat([members, torch.arange(batch, batch + pad)]) if pad else members))
    return chunks


#: per thread, the (transform, input) a running Compose lets write into its input (:func:`may_overwrite`)
_OWNED = threading.local()


def may_overwrite(transform: "Transform", x: Tensor) -> bool:
    """Whether ``transform.execute`` may write into its input ``x``: a :class:`Compose` is running
    ``transform`` itself (not a transform nested in it, whose caller may still read ``x``) on one of
    its intermediates (made by an earlier transform of the list, sharing no memory with the list's
    input, which is the caller's), nothing wants its gradient, and no ``torch.compile`` trace is
    running. A transform that asks must not read ``x`` after writing it."""
    if torch.compiler.is_compiling():  # checked first: dynamo does not trace the thread-local
        return False
    return getattr(_OWNED, "step", None) == (id(transform), id(x)) and not (torch.is_grad_enabled() and x.requires_grad)


def run_groups(x: Tensor, groups: Sequence[tuple[Any, dict[str, Tensor]]],
               kernel: Callable[[Tensor, Any, dict[str, Tensor]], Tensor], *, overwrite: bool = False) -> Tensor:
    """Device: for each ``(key, group)`` in order, ``kernel(rows of x, key, group)`` on the rows
    ``group["rows"]`` (:func:`group_chunks`' index), written back; padding rows land in scratch rows
    past the batch. The shapes are the groups', whatever the values. A group that says
    ``group["padded"] = False`` (a host bool: exact groups, every row in the batch) needs no
    scratch row: when none is padded the batch is copied without the scratch rows' zeros, and with
    ``overwrite`` (:func:`may_overwrite`) not copied at all — the rows are written into ``x``."""
    if not groups:
        return x
    scratch = max((len(g["rows"]) for _, g in groups if g.get("padded", True)), default=0)
    buf = torch.cat([x, x.new_zeros(scratch, *x.shape[1:])]) if scratch else x if overwrite else x.clone()
    for key, g in groups:
        rows = g["rows"]
        buf.index_copy_(0, rows, kernel(buf.index_select(0, rows), key, g).to(buf.dtype))
    return buf[:x.shape[0]]


def to_device(tree, device: torch.device | str):
    """A plan (nested lists and dicts of host tensors) copied to ``device`` with ``non_blocking=True``;
    strings, numbers and booleans in it (what a kernel decides on the host) stay as they are."""
    if isinstance(tree, Tensor):
        return tree.to(device, non_blocking=True)
    if tree is None or isinstance(tree, (str, bool, int, float)):
        return tree
    if isinstance(tree, dict):
        return {k: to_device(v, device) for k, v in tree.items()}
    return [to_device(v, device) for v in tree]


#: every op a recipe can name, in declaration order: a :class:`Transform` subclass registers itself by
#: declaring its own ``summary`` (its row of the op table)
RECIPE_OPS: dict[str, type[Transform]] = {}


@dataclass(frozen=True)
class BaselineContext:
    """What an op's torchvision/timm counterpart needs besides the recipe's arguments for it
    (:meth:`Transform.counterpart`): the model's normalisation, the training crop's size and
    interpolation, the label smoothing and the class count (0 where a per-sample op is built)."""

    mean: tuple[float, ...]
    std: tuple[float, ...]
    image_size: int
    interpolation: str
    label_smoothing: float = 0.0
    num_classes: int = 0


class Transform(nn.Module):
    """Base class: :meth:`draw` (host, per-sample parameters) + :meth:`apply_transform` (device, batched).

    Subclasses implement :meth:`draw` (their own parameters, default none) and
    :meth:`apply_transform` (the batched kernel, applied to the whole batch, in the representation
    :attr:`domain` names); the base class adds the per-sample probability ``p``, the host → device
    copy of the parameters, the representation changes, replay and the call forms (module
    docstring). ``seed`` seeds :attr:`generator`, used when a call passes none (a random seed when
    ``None``)."""

    #: the representation :meth:`apply_transform` takes: "pixel", "coefficient" or "any" (both); set
    #: by the class's registered kernels (:func:`kernel`) unless it or a base sets it explicitly
    domain: str = "coefficient"
    #: converters (ToRGB, ToCoefficients) define their output representation
    converter: bool = False
    #: every batch of a size runs the same kernels on the same shapes (:meth:`prepare` pads the groups
    #: of samples that drew an op to a fixed size): what CUDA graphs and ``torch.compile`` need. Off
    #: (:meth:`set_fixed_shapes`), groups hold exactly the samples that drew the op — less work for
    #: eager runs, where shapes that follow the draws cost nothing (the CPU)
    fixed_shapes: bool = True
    #: ``None``: float pixels. 256: the ops that the RGB arm runs on 8-bit PIL images round their
    #: pixel results to ``k/255`` (:meth:`set_pixel_levels`; only the transforms that declare
    #: :attr:`eight_bit_op` do)
    pixel_levels: int | None = None
    #: an op PIL runs on 8-bit images in a torchvision/timm pipeline (policies, ColorJitter, grayscale):
    #: with ``pixel_levels`` set, its pixel results are rounded to those levels after each op
    eight_bit_op: bool = False
    #: False where a coefficient output is no longer the image's coefficients (a standardisation):
    #: the public call then hands back a plain tensor, not a ``DCTImage`` (:func:`_as_public`)
    keeps_coefficients: bool = True
    #: a container (RandomChoice, RandomApply, RandomOrder): its first argument is a list of transforms,
    #: in a recipe a list of specs
    takes_transforms: bool = False
    #: the op's row in the recipes' op table (``recipes/README.md``, generated by
    #: :func:`dctnet.transforms.registry.op_table`): what it does, in markdown, and where it runs —
    #: ``"pixels"``, ``"coefficients"``, ``"either"`` or a phrase
    summary: str = ""
    runs_on: str = "either"

    #: the methods registered with :func:`kernel`, ``{(stage, representation): method name}``, over the
    #: class and its bases (filled in when a subclass is defined)
    kernels: dict[tuple[str, str], str] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        registered: dict[tuple[str, str], str] = {}
        for klass in reversed(cls.__mro__):  # bases first: a subclass's registration wins
            for name, member in vars(klass).items():
                mark = getattr(member, "__dctnet_kernel__", None)
                if mark is not None:
                    registered[mark] = name
        cls.kernels = registered
        applies = [rep for rep in REPRESENTATIONS if ("apply", rep) in registered]
        # the domain follows from the kernels unless a class says otherwise: the nearest class that sets
        # it (a string or a property, as ColorJitter's) is kept, save the base's default or a value
        # derived here for a base (its subclass may register other kernels)
        owner = next(k for k in cls.__mro__ if "domain" in vars(k))
        if applies and (owner is Transform or vars(owner).get("_derived_domain", False)):
            cls.domain = "any" if len(applies) == 2 else applies[0]
            cls._derived_domain = True
        if cls.__dict__.get("summary"):
            RECIPE_OPS[cls.__name__] = cls

    @classmethod
    def for_model(cls, model: Any, *args: Any, **kwargs: Any) -> "Transform":
        """This transform with the normalisation ``model`` expects (an ``nn.Module`` or an architecture
        name: its timm ``pretrained_cfg`` mean/std, else ImageNet's;
        :func:`~dctnet.kernels.normalization.input_mean_std`) for the arguments that follow it —
        ``mean`` / ``std`` where the class takes them (TimmAugment's fill, RandomErasing's values and
        noise, ToRGB) — unless given. ``vit_small_patch16_224`` normalises with 0.5/0.5: built plainly,
        these classes assume ImageNet's statistics."""
        from dctnet.kernels.normalization import input_mean_std  # (no cycle: a leaf module)

        mean, std = input_mean_std(model)
        params = inspect.signature(cls.__init__).parameters
        if "mean" in params:
            kwargs.setdefault("mean", tuple(mean))
        if "std" in params:
            kwargs.setdefault("std", tuple(std))
        return cls(*args, **kwargs)

    @classmethod
    def counterpart(cls, args: dict[str, Any], ctx: BaselineContext) -> Any:
        """torchvision's or timm's own implementation of this op with the same arguments — what the
        ``rgb`` arm of a recipe runs in its place (``args``: the spec's, defaults filled in). Raises
        ``ValueError`` for an op neither library has (a DCT-domain transform)."""
        raise ValueError(f"augment: {cls.__name__} has no torchvision or timm counterpart for model.input 'rgb' (a "
                         "DCT-domain transform); use it with input 'dct' or 'device-rgb'")

    @classmethod
    def timm_kwargs(cls, args: dict[str, Any]) -> dict[str, Any] | None:
        """The keyword arguments of timm's ``create_transform(is_training=True, ...)`` that state this op
        (``dctnet bench``'s timm row), or ``None`` where ``create_transform`` has none."""
        return None

    def __init__(self, seed: int | None = None, *, p: float | None = None) -> None:
        super().__init__()
        if p is not None:
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
                raise ValueError(f"{type(self).__name__}: p must be a probability in [0, 1], got {p!r}")
            p = float(p)
        self.p = p
        # an OS seed when none is given: drawing it from torch's global RNG would shift the caller's stream
        self.seed = int(seed) if seed is not None else secrets.randbits(62)
        self.generator = torch.Generator().manual_seed(self.seed)

    # ------------------------------------------------------------------ subclass hooks
    def draw(self, shape: torch.Size, gen: torch.Generator) -> dict[str, Tensor]:
        """The transform's own parameters for a batch of ``shape`` (host tensors, first dim B).
        The key ``"apply"`` is the base class's (the coin of ``p``)."""
        return {}

    def apply_transform(self, x: Tensor, labels: Tensor | None,
                        params: dict[str, Tensor]) -> tuple[Tensor, Tensor | None]:
        """Apply ``params`` (already on ``x``'s device) to the whole batch: ``(x', labels')`` — the
        kernel registered for the batch's representation (:func:`kernel`)."""
        return self._kernel("apply", _representation(x))(x, labels, params)

    def _kernel(self, stage: str, representation: str) -> Callable:
        """The method registered for ``stage`` on ``representation`` (:func:`kernel`)."""
        name = self.kernels.get((stage, representation))
        if name is None:
            raise NotImplementedError(f"{type(self).__name__} has no {stage} kernel for {representation}s")
        return getattr(self, name)

    def _prepare_labels(self, labels: Tensor | None) -> Tensor | None:
        """Labels as :meth:`apply_transform` takes them (mixing transforms: soft targets)."""
        return labels

    def _out_shape(self, shape: torch.Size) -> torch.Size:
        """Shape of the output for an input of ``shape`` in this transform's domain (what the next
        transform of a Compose draws for)."""
        return shape

    def _domain_shape(self, shape: torch.Size) -> torch.Size:
        """The shape this transform works on, given an input of ``shape``."""
        if self.domain == "pixel":
            return pixel_shape(shape)
        if self.domain == "coefficient":
            return coefficient_shape(shape)
        return shape

    # ------------------------------------------------------------------ public API
    def draw_params(self, shape: Sequence[int], generator: torch.Generator | None = None) -> Params:
        """Parameters for a batch of ``shape`` (e.g. ``x.shape``) drawn from ``generator`` (default
        :attr:`generator`): host tensors, to pass as ``params=`` (once or many times). Drawing here
        and then calling with ``params=`` is the same as one call with ``generator=``."""
        shape = self._domain_shape(torch.Size(shape))
        gen = generator if generator is not None else self.generator
        params = self.draw(shape, gen)
        if self.p is not None and self.p < 1.0:  # p = 1: always applied, no coin (the stream is not consumed)
            params["apply"] = torch.rand(shape[0], generator=gen) < self.p
        return params

    def forward(self, x: Tensor, labels: Tensor | None = None, params: Params | None = None, *,
                generator: torch.Generator | None = None, return_params: bool = False) -> Any:
        """Augment ``x`` — pixels ``(B, 3, H, W)`` or a coefficient image ``(B, 3, Hb, Wb, 64)`` — and
        ``labels`` (``(B,)`` indices or ``(B, K)`` soft).

        ``params=None`` draws fresh parameters from ``generator`` (default :attr:`generator`);
        a ``params`` dict that a previous call returned (``return_params=True``) or
        :meth:`draw_params` made replays that augmentation exactly, drawing nothing. Returns
        ``x`` (in the representation it came in, unless this is a converter), or ``(x, labels)`` when
        labels are given, plus ``params`` last when ``return_params``."""
        _check_input(self, x)
        gen = generator if generator is not None else self.generator
        out, out_labels, params = self._run(x, labels, params, gen, keep_domain=False)
        if self.keeps_coefficients:
            out = _as_public(out, given=x, made_here=self.converter)
        result = (out,) if labels is None else (out, out_labels)
        if return_params:
            result += (params,)
        return result[0] if len(result) == 1 else result

    def set_fixed_shapes(self, fixed: bool = True) -> "Transform":
        """Fixed shapes (:attr:`fixed_shapes`) on or off for this transform and every transform in it;
        the values computed are the same either way. Returns ``self``."""
        for m in self.modules():
            if isinstance(m, Transform):
                m.fixed_shapes = bool(fixed)
        return self

    def set_pixel_levels(self, levels: int | None) -> "Transform":
        """Round the pixel results of every 8-bit op in this transform (:attr:`eight_bit_op`) to
        ``levels`` levels (256: ``k/255``, what an 8-bit PIL image holds), or ``None``: float.
        Returns ``self``."""
        if levels is not None and (isinstance(levels, bool) or not isinstance(levels, int) or levels < 2):
            raise ValueError(f"pixel levels must be an integer >= 2 or None, got {levels!r}")
        for m in self.modules():
            if isinstance(m, Transform):
                m.pixel_levels = levels if m.eight_bit_op else None
        return self

    def generator_for(self, epoch: int, step: int, rank: int = 0) -> torch.Generator:
        """:func:`step_generator` of this transform's ``seed`` and ``(epoch, step, rank)``."""
        return step_generator(self.seed, epoch, step, rank)

    # ------------------------------------------------------------------ machinery
    def _run(self, x: Tensor, labels: Tensor | None, params: Params | None, gen: torch.Generator, *,
             keep_domain: bool) -> tuple[Tensor, Tensor | None, Params]:
        """Convert ``x`` to :attr:`domain` if needed, run, and (unless ``keep_domain``, as inside a
        Compose) convert back."""
        given = _representation(x)
        out, labels, params = self._run_native(_in_domain(x, self.domain), labels, params, gen)
        if not keep_domain and not self.converter:
            out = _in_domain(out, given)
        return out, labels, params

    def _run_native(self, x: Tensor, labels: Tensor | None, params: Params | None,
                    gen: torch.Generator) -> tuple[Tensor, Tensor | None, Params]:
        if params is None:
            params = self.draw_params(x.shape, gen)
        out, out_labels = self.execute(x, labels, move_plan(self.prepare(params, x.shape, "cpu"), x.device))
        return out, out_labels, params

    def prepare(self, params: Params, shape: Sequence[int], device: torch.device | str) -> Any:
        """Host: drawn ``params`` as what :meth:`execute` takes on ``device`` for a batch of ``shape``
        (in this transform's :attr:`domain`) — a tree of device tensors, copied with
        ``non_blocking=True``, whose structure and shapes depend only on the batch's shape: the
        device half (:meth:`execute`) then runs the same kernels on the same shapes every batch,
        which is what ``torch.compile`` and CUDA graphs need (:func:`compile_step`). A transform that
        plans differently per representation registers a ``"prepare"`` kernel for each (:func:`kernel`).
        dctnet's own callers make the plan on the host (``device="cpu"``) and move it to the batch's
        device in one copy (:func:`dctnet.transforms.transfer.move_plan`), not tensor by tensor."""
        plan = self.kernels.get(("prepare", _shape_representation(shape)))
        if plan is not None:
            return getattr(self, plan)(params, shape, device)
        return {k: v.to(device, non_blocking=True) for k, v in params.items()}

    def execute(self, x: Tensor, labels: Tensor | None, prepared: Any) -> tuple[Tensor, Tensor | None]:
        """Device: apply :meth:`prepare`'s parameters to ``x`` (in this transform's domain): no host
        sync, no draw, no shape that depends on the values drawn."""
        labels = self._prepare_labels(labels)
        if self.p == 0.0:  # the coin is False everywhere: nothing to compute
            return x, labels
        out, out_labels = self.apply_transform(x, labels, prepared)
        mask = prepared.get("apply")
        if mask is not None:  # keep the input where the sample's coin said no
            fresh = (isinstance(out, Tensor) and out is not x and out.shape == x.shape  # the kernel's own tensor
                     and not _shares_memory(out, x))
            out = select(mask.reshape(-1, *([1] * (x.dim() - 1))), out, x, out=out if fresh else None)
            if out_labels is not None and out_labels is not labels:
                out_labels = torch.where(mask.reshape(-1, *([1] * (labels.dim() - 1))), out_labels, labels)
        return out, out_labels

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


def _as_public(out: Tensor, given: Tensor, made_here: bool) -> Tensor:
    """What a public call hands back: a coefficient image ``(B, 3, Hb, Wb, 64)`` that this call made
    (a converter: :class:`ToCoefficients`, a Compose ending in one) or that came in as one, as
    torchvision's tensor type :class:`dctnet.transforms.tv.DCTImage` — on which torchvision v2's ops
    run dctnet's DCT-domain kernels or raise, instead of treating coefficients as pixels and
    altering them silently. Pixels, and everything without torchvision, stay plain tensors. (The
    device half, :meth:`Transform.execute`, stays plain: what a compiled step feeds a model.)"""
    if out.dim() != 5 or out.shape[1] != 3 or out.shape[-1] != 64:
        return out
    try:
        from dctnet.transforms.tv import DCTImage  # optional dependency (torchvision); registers its kernels
    except ImportError:
        return out
    if made_here or isinstance(given, DCTImage):
        return out.as_subclass(DCTImage)
    return out


def _check_input(t: Transform, x: object) -> None:
    """A clear TypeError for what loaders hand out before the device crop (a ``JpegBatch`` and its
    packed/sparse forms) or anything else that is not a pixel or coefficient batch."""
    if isinstance(x, Tensor):
        if x.dim() not in (4, 5):
            raise ValueError(f"{type(t).__name__} takes pixels (B, 3, H, W) or a coefficient image (B, 3, Hb, Wb, 64), "
                             f"got shape {tuple(x.shape)}")
        return
    name = type(x).__name__
    if name in ("JpegBatch", "PackedJpegBatch", "SparseJpegBatch"):
        raise TypeError(f"{type(t).__name__} takes pixels (B, 3, H, W) or a coefficient image (B, 3, Hb, Wb, 64), got a "
                        f"{name} (the loader's undecoded crops): call dctnet.transforms.crops_to_rgb(batch, size) first "
                        "(or crops_to_coefficients(batch, size))")
    raise TypeError(f"{type(t).__name__} takes pixels (B, 3, H, W) or a coefficient image (B, 3, Hb, Wb, 64), got {name}")


class Compose(Transform):
    """Apply ``transforms`` in order, every draw from one generator: :attr:`generator` (seeded by
    ``seed``) or the ``generator=`` of the call (e.g. :meth:`generator_for` ``(epoch, step, rank)``);
    the transforms' own generators are not used. Parameters are ``{"0": params of transforms[0],
    "1": …}``; they are drawn transform by transform as the batch goes through, in the same order as
    :meth:`draw_params`.

    The batch changes representation only where the next transform needs the other one, and stays
    there; the result is in the representation the Compose was given, unless its last transform is
    a converter (:class:`ToRGB`, :class:`ToCoefficients`)."""

    domain = "any"

    def __init__(self, transforms: Sequence[Transform], seed: int | None = None) -> None:
        super().__init__(seed)
        transforms = list(transforms)
        for t in transforms:
            if not isinstance(t, Transform):
                raise TypeError(f"Compose takes dctnet transforms (dctnet.transforms.Transform), got {type(t).__name__}")
        self.transforms = nn.ModuleList(transforms)

    @property
    def converter(self) -> bool:  # type: ignore[override]
        return bool(len(self.transforms)) and self.transforms[-1].converter

    @property
    def keeps_coefficients(self) -> bool:  # type: ignore[override]
        return all(t.keeps_coefficients for t in self.transforms)

    def draw_params(self, shape: Sequence[int], generator: torch.Generator | None = None) -> Params:
        shape = torch.Size(shape)
        gen = generator if generator is not None else self.generator
        params = {}
        for i, t in enumerate(self.transforms):
            params[str(i)] = t.draw_params(shape, gen)
            shape = t._out_shape(t._domain_shape(shape))
        return params

    def _out_shape(self, shape):
        for t in self.transforms:
            shape = t._out_shape(t._domain_shape(shape))
        return shape

    def _run_native(self, x, labels, params, gen):
        if params is None:
            params = self.draw_params(x.shape, gen)
        elif sorted(params) != sorted(str(i) for i in range(len(self.transforms))):
            raise ValueError(f"params have keys {sorted(params)}, this Compose has {len(self.transforms)} transforms")
        x, labels = self.execute(x, labels, move_plan(self.prepare(params, x.shape, "cpu"), x.device))
        return x, labels, params

    def prepare(self, params, shape, device):
        """Each transform's :meth:`Transform.prepare`, for the shape the batch has when it reaches it."""
        shape = torch.Size(shape)
        prepared = []
        for i, t in enumerate(self.transforms):
            shape = t._domain_shape(shape)
            prepared.append(t.prepare(params[str(i)], shape, device))
            shape = t._out_shape(shape)
        return prepared

    def execute(self, x, labels, prepared):
        """The transforms in order, each on the representation it needs (converting only there). Each
        intermediate is the list's own: a transform may write into it (:func:`may_overwrite`) rather
        than copy the batch, but never into the caller's input or a view of it."""
        if torch.compiler.is_compiling():  # a traced step writes nothing in place (no thread-local in the graph)
            for t, p in zip(self.transforms, prepared):
                x, labels = t.execute(_in_domain(x, t.domain), labels, p)
            return x, labels
        given = x
        for t, p in zip(self.transforms, prepared):
            x = _in_domain(x, t.domain)
            owned = isinstance(x, Tensor) and x is not given and not _shares_memory(x, given)
            before = getattr(_OWNED, "step", None)
            _OWNED.step = (id(t), id(x)) if owned else None
            try:
                x, labels = t.execute(x, labels, p)
            finally:
                _OWNED.step = before
        return x, labels


def _shares_memory(a: Tensor, b: Any) -> bool:
    """Whether ``a`` may share memory with ``b`` (the same storage; yes when it cannot tell: a layout
    without one storage, or ``b`` not a tensor)."""
    if not isinstance(b, Tensor) or torch.compiler.is_compiling():  # a storage's address is no graph value
        return True
    try:
        return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # sparse and other storage-less layouts
        return True


def round_to_levels(x: Tensor, levels: int | None) -> Tensor:
    """Pixels in [0, 1] rounded to ``k/(levels − 1)`` (256 levels: an 8-bit image's values); ``None``:
    as they are."""
    if levels is None:
        return x
    scale = float(levels - 1)
    return torch.round(x * scale).div_(scale)  # k / 255, as to_tensor divides (k · (1/255) is 1 ulp off for half of k)


def _in_domain(x: Tensor, domain: str) -> Tensor:
    """``x`` in the representation ``domain`` names (``"any"``: as it is)."""
    if domain == "pixel":
        return to_pixels(x)
    if domain == "coefficient":
        return to_coefficients(x)
    return x


def plan_signature(x: Tensor, labels: Tensor | None, prepared: Any) -> tuple[Any, ...]:
    """What a compiled device half specialises on: the batch's and labels' shapes and dtypes, the
    plan's structure, its tensors' shapes and dtypes, and its host values (strings, bools, numbers).
    Two batches with equal signatures run the same graph; any other plan would recompile it."""
    leaves, spec = tree_flatten(prepared)
    described = tuple((tuple(v.shape), v.dtype, v.device.type) if isinstance(v, Tensor) else v for v in leaves)
    lab = None if labels is None else (tuple(labels.shape), labels.dtype)
    return (tuple(x.shape), x.dtype, x.device.type, lab, spec, described)


class CompiledHalf:
    """A device half ``fn(x, labels, prepared)`` run compiled by ``torch.compile`` for one plan
    signature per batch shape (:func:`plan_signature`), eagerly otherwise.

    - The **first batch of a shape runs eagerly**: it builds the constants the step uses
      (:func:`dctnet.kernels.cache.cached` never stores while dynamo traces), so the graph reads them as
      inputs instead of building them inside itself — under CUDA graphs an output kept across calls
      would be overwritten at the next replay, and a store would change the next call's guards (a
      recompile). The graph is compiled for a signature that two batches in a row share (normally
      the first two: the second batch compiles), so a first batch that overflowed pins nothing.
    - A batch whose plan has **another signature** (a group that overflowed its capacity, p ≈ 1e-6 a
      batch: a second chunk) runs eagerly too, the same values, instead of recompiling the step (a
      minute each, and after dynamo's recompile limit an eager step for the rest of the run).

    :attr:`eager_batches` counts the batches run eagerly (warm-ups and overflows). The first two
    compiled calls of a shape (compiling; under CUDA graphs, warming up and recording, which
    synchronise the device) run inside :func:`dctnet.readback.log_point`: a run under
    ``torch.cuda.set_sync_debug_mode("error")`` checks every call after them."""

    def __init__(self, fn: Callable[[Tensor, Any, Any], Any], **compile_kwargs: Any) -> None:
        self.fn = fn
        self.compiled = torch.compile(fn, **compile_kwargs)
        # on an accelerator the graph takes the plan as one buffer (transfer.py), unpacked inside it
        self.compiled_packed = torch.compile(
            lambda x, labels, buffer, layout, resident: fn(x, labels, unpack_plan(buffer, layout, resident)),
            **compile_kwargs)
        self.static_buffers: dict[tuple[Any, ...], Tensor] = {}  # CUDA: each shape's plan buffer, a static input
        self.signatures: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # batch shape etc. → the compiled plan's
        self.compiled_calls: dict[tuple[Any, ...], int] = {}
        self._candidates: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # batch shape → the last eager signature
        self.eager_batches = 0

    def __call__(self, x: Tensor, labels: Tensor | None, prepared: Any) -> Any:
        """``fn(x, labels, prepared)``; ``prepared`` is the plan as :meth:`Transform.prepare` made it on
        the host (``device="cpu"``), moved to ``x``'s device here in one copy (:mod:`~dctnet.transforms.transfer`)."""
        sig = plan_signature(x, labels, prepared)
        key = sig[:4]
        pinned = self.signatures.get(key)
        if pinned is None and self._candidates.get(key) == sig:  # a signature seen twice in a row: compile it
            pinned = self.signatures[key] = sig
        if pinned is None or pinned != sig:  # the warm-up, or a plan it was not compiled for
            if pinned is None:
                self._candidates[key] = sig
            self.eager_batches += 1
            return self.fn(x, labels, move_plan(prepared, x.device))
        calls = self.compiled_calls[key] = self.compiled_calls.get(key, 0) + 1
        # compiling, then (CUDA graphs) warming up and recording: one-time waits on the device
        with log_point(x.device) if calls <= 2 else contextlib.nullcontext():
            if x.device.type == "cpu":
                return self.compiled(x, labels, prepared)
            packed = pack_plan(prepared, x.device, intern=True)  # (the compiled signature's: one layout)
            buffer = self.static_buffers.get(key)
            if buffer is None or buffer.shape[0] != packed.layout.nbytes:
                buffer = torch.empty(packed.layout.nbytes, dtype=torch.uint8, device=x.device)
                if x.device.type == "cuda":  # one address for every replay: CUDA graphs read it in place
                    torch._dynamo.mark_static_address(buffer)
                self.static_buffers[key] = buffer
            # after the previous batch's graph in stream order; its pinned source is kept until the copy is done
            buffer.copy_(packed.buffer, non_blocking=True)
            return self.compiled_packed(x, labels, buffer, packed.layout, packed.resident)


def compile_step(transform: Transform, **compile_kwargs: Any) -> Callable[..., Any]:
    """``transform`` (a :class:`Compose`, typically the whole device step's list) with its device half
    compiled by ``torch.compile``: the returned ``step(x, labels=None, *, generator=None,
    params=None)`` draws on the host (eagerly: seeded CPU generators), :meth:`~Transform.prepare` s
    the parameters, and runs the compiled :meth:`~Transform.execute`, which sees the same shapes every
    batch of a size (its fixed shapes are switched on), so it compiles once per batch size and
    never again (:class:`CompiledHalf`: the first batch of a size runs eagerly and builds the
    constants; a rare plan that overflowed a group's capacity runs eagerly instead of recompiling).
    Returns ``(x, labels)`` (``x`` alone without labels), the same values as ``transform(x, labels,
    generator=...)``.

    ``compile_kwargs`` go to ``torch.compile`` (default: inductor; on CUDA pass
    ``mode="reduce-overhead"`` for CUDA graphs)."""
    transform.set_fixed_shapes(True)  # one set of shapes per batch size (as DeviceStep.compile)
    executed = CompiledHalf(transform.execute, **compile_kwargs)

    def step(x: Tensor, labels: Tensor | None = None, *, generator: torch.Generator | None = None,
             params: Params | None = None) -> Any:
        _check_input(transform, x)
        gen = generator if generator is not None else transform.generator
        given = _representation(x)
        x = _in_domain(x, transform.domain)
        if params is None:
            params = transform.draw_params(x.shape, gen)
        out, out_labels = executed(x, labels, transform.prepare(params, x.shape, "cpu"))
        if not transform.converter:
            out = _in_domain(out, given)
        return out if labels is None else (out, out_labels)

    return step
