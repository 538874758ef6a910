"""The Transform class: parameters drawn on the host, execution batched, on pixels or coefficients.

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

import inspect
import secrets
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from dctnet.kernels.cache import select
from dctnet.transforms.groups import shares_memory
from dctnet.transforms.recipe_ops import RECIPE_OPS, BaselineContext
from dctnet.transforms.representation import (REPRESENTATIONS, coefficient_shape, in_domain, pixel_shape,
                                              representation, shape_representation)
from dctnet.transforms.rng import step_generator
from dctnet.transforms.transfer import move_plan

__all__ = ["Params", "Transform", "check_input"]


#: drawn parameters: name → host tensor with first dimension B (a ``Compose``: ``"i"`` → its i-th
#: transform's parameters)
Params = dict[str, Any]


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
    #: a batch-level op (a mixer: timm's and torchvision's call it on the collated batch, so it comes
    #: last in an augment list, after erasing); a container of mixers says so per instance
    acts_on_batch: bool = False
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
        return self._kernel("apply", representation(x))(x, labels, params)

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
        check_input(self, x)
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
        given = representation(x)
        out, labels, params = self._run_native(in_domain(x, self.domain), labels, params, gen)
        if not keep_domain and not self.converter:
            out = in_domain(out, given)
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
        plan = self.kernels.get(("prepare", shape_representation(shape)))
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
                     and not shares_memory(out, x))
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


def check_input(t: Transform, x: object) -> None:
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
