"""Transforms by name, for recipes: :data:`TRANSFORMS` maps names to classes; :func:`build_transform`
builds one from a dict such as ``{"name": "RandAugment", "num_ops": 2, "magnitude": 9}``, validated
against the class's signature; :func:`describe_transforms` lists every transform's arguments and
defaults.

Each op is declared once, on its class: its signature (the recipe's arguments and defaults), its
``draw`` (the parameter law), its kernels, its torchvision/timm counterpart with the argument
translation (:meth:`~dctnet.transforms.base.Transform.counterpart`, and
:meth:`~dctnet.transforms.base.Transform.timm_kwargs` for timm's ``create_transform``) and its row of
the op table (``summary``, ``runs_on``). The recipe registry, the ``rgb`` arm's mapping
(:func:`counterpart`), ``dctnet bench``'s timm row (:func:`timm_kwargs`) and the op table of
``recipes/README.md`` (:func:`op_table`; :func:`write_op_table` regenerates it) all read those declarations.

Names mean what they mean in torchvision and timm: ``RandAugment``, ``TrivialAugmentWide``,
``AutoAugment``, ``ColorJitter``, ``RandomErasing``, ``MixUp`` and ``CutMix`` are torchvision's;
``Mixup`` (with ``mixup_alpha``, ``cutmix_alpha``, ``switch_prob``, …) and ``TimmAugment`` (timm's
``auto_augment`` strings) are timm's.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dctnet.coerce import coerce, did_you_mean
from dctnet.transforms.base import RECIPE_OPS, Compose, Transform
from dctnet.transforms.counterparts import counterpart, spec_arguments

__all__ = ["MIXERS", "TRANSFORMS", "build_transform", "counterpart", "describe_transforms", "import_op_modules",
           "is_mixer_spec", "op_table", "spec_arguments", "timm_kwargs"]

#: every transform a recipe can name → its class: the classes that declare a ``summary`` (the live
#: registry :data:`~dctnet.transforms.base.RECIPE_OPS`; ``Normalize`` takes tensors and
#: ``ToCoefficients`` no arguments, and are not here; ``Compose`` is a list of specs, see
#: :func:`build_transform`). Filled as the op modules are imported — the package's ``__init__``
#: imports the public ones, then :func:`import_op_modules` every other module of the package, so an
#: op declared in a new module is registered without a list to update — and put in the op table's
#: order (:data:`TABLE_ORDER`).
TRANSFORMS: dict[str, type[Transform]] = RECIPE_OPS

#: modules of the package that declare no op and stay unimported until used: torchvision's tensor
#: type (an optional dependency, imported on first use). A test checks that no module declares an op
#: the registry lacks, these included.
LAZY_MODULES = ("dctnet.transforms.tv",)


def import_op_modules(path: Iterable[str] | None = None, prefix: str = "dctnet.transforms.") -> list[str]:
    """Import every module of a package (default :mod:`dctnet.transforms`; ``path`` its ``__path__``,
    ``prefix`` its dotted name and a dot), in name order, but not its subpackages (the detection ops
    have their own registry) nor :data:`LAZY_MODULES`: each op class registers itself in
    :data:`TRANSFORMS` as it is defined. Returns the names of the modules imported."""
    names = [m.name for m in pkgutil.iter_modules([os.path.dirname(__file__)] if path is None else list(path), prefix)
             if not m.ispkg and m.name not in LAZY_MODULES]
    for name in names:
        importlib.import_module(name)
    return names


#: the op table's order of the op modules (the table of ``recipes/README.md`` reads as the package's
#: ``__init__`` lists them): within a module its ops keep their declaration order, and the ops of a
#: module not named here follow, by module name. Only the order: every op registers itself wherever
#: it is declared.
TABLE_ORDER = ("augment", "model_input", "auto_augment", "timm_augment", "erasing", "mixing", "choice")


def _sort_registry() -> None:
    """:data:`TRANSFORMS` in the op table's order (:data:`TABLE_ORDER`), whatever order the modules
    were imported in (one op module may import another)."""
    def rank(item: tuple[str, type]) -> tuple[int, str]:
        module = item[1].__module__.rsplit(".", 1)[-1]
        return (TABLE_ORDER.index(module), "") if module in TABLE_ORDER else (len(TABLE_ORDER), item[1].__module__)

    ordered = sorted(RECIPE_OPS.items(), key=rank)  # stable: declaration order within a module
    RECIPE_OPS.clear()
    RECIPE_OPS.update(ordered)


def _mixer_names() -> tuple[str, ...]:
    return tuple(name for name, cls in TRANSFORMS.items() if cls.acts_on_batch)


def is_mixer_spec(spec: Mapping[str, Any]) -> bool:
    """Whether a recipe's augment entry acts on the batch: a mixer (a class that declares
    :attr:`~dctnet.transforms.transform.Transform.acts_on_batch`), or a RandomChoice / RandomApply of
    mixers (torchvision's reference: ``RandomChoice([MixUp, CutMix])`` on the collated batch)."""
    name = spec.get("name") if isinstance(spec, Mapping) else None
    cls = TRANSFORMS.get(name) if isinstance(name, str) else None
    if cls is not None and cls.acts_on_batch:
        return True
    inner = spec.get("transforms")
    return bool(cls is not None and cls.takes_transforms and isinstance(inner, Sequence) and inner
                and all(is_mixer_spec(s) for s in inner))


#: set by build_transform's arguments, never by a spec (a recipe states label smoothing once, in
#: optim.label_smoothing, as timm's train.py passes --smoothing to its Mixup)
_INJECTED = ("seed", "num_classes", "label_smoothing", "mean", "std")
#: defaulted from build_transform's arguments unless the spec sets them: the training crop's
#: interpolation, for the transforms that follow it (timm's policies: their affine ops use
#: create_transform's train interpolation)
_DEFAULTED = ("interpolation",)


def _recipe_parameters(cls: type[Transform]) -> dict[str, inspect.Parameter]:
    """The constructor arguments a spec may set (not ``self`` nor the injected ones)."""
    return {name: p for name, p in inspect.signature(cls.__init__).parameters.items()
            if name != "self" and name not in _INJECTED and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _did_you_mean(word: Any, choices: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices`` (:func:`dctnet.coerce.did_you_mean`), or ``""``."""
    close = did_you_mean(word, choices)
    return f"; {close}" if close else ""


def build_transform(spec: Mapping[str, Any] | Sequence[Mapping[str, Any]], *, num_classes: int | None,
                    seed: int, mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                    label_smoothing: float | None = None, interpolation: str | None = None) -> Transform:
    """A transform from a recipe spec: ``{"name": "RandAugment", "num_ops": 2, "magnitude": 9}``.

    ``name`` is a key of :data:`TRANSFORMS`; the other keys are constructor arguments, checked
    against its signature and annotations (lists are accepted for tuples, ints for floats). A list
    of specs (or ``{"name": "Compose", "transforms": [...]}``) builds a :class:`Compose`. ``seed``
    seeds every transform built (a Compose draws everything from its own); ``num_classes`` goes to
    the mixing transforms (``Mixup``, ``MixUp``, ``CutMix``), ``label_smoothing`` to timm's ``Mixup``
    (its targets carry the smoothing), ``mean`` / ``std`` (the model's normalisation) to the
    transforms that take them (erasing fills, timm's fill colour), so both arms of a recipe agree;
    ``interpolation`` (the training crop's) is the default of timm's policies. An unknown name or
    argument, a missing or ill-typed argument, or an injected argument in the spec raise
    ``ValueError`` naming it (with a "did you mean" for near misses)."""
    inject = dict(num_classes=num_classes, seed=seed, mean=mean, std=std, label_smoothing=label_smoothing,
                  interpolation=interpolation)
    if isinstance(spec, Sequence) and not isinstance(spec, (str, bytes)):
        return Compose([build_transform(s, **inject) for s in spec], seed=seed)
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
        return Compose([build_transform(s, **inject) for s in inner], seed=seed)
    if not isinstance(name, str) or name not in TRANSFORMS:
        raise ValueError(f"unknown transform {name!r}{_did_you_mean(name, [*TRANSFORMS, 'Compose'])} "
                         f"(known: {', '.join(TRANSFORMS)}, Compose)")
    cls = TRANSFORMS[name]
    allowed = _recipe_parameters(cls)
    hints = typing.get_type_hints(cls.__init__)
    kwargs = {}
    if cls.takes_transforms:  # RandomChoice / RandomApply / RandomOrder: a list of specs, built alike
        inner = spec.pop("transforms", None)
        if not isinstance(inner, Sequence) or isinstance(inner, (str, bytes)) or not inner:
            raise ValueError(f"{name}: argument 'transforms' must be a non-empty list of specs, got {inner!r}")
        kwargs["transforms"] = [build_transform(s, **inject) for s in inner]
    for arg, value in spec.items():
        if arg in _INJECTED:
            where = {"label_smoothing": "optim.label_smoothing", "mean": "the model's normalisation",
                     "std": "the model's normalisation"}.get(arg, f"build_transform({arg}=...)")
            raise ValueError(f"{name}: argument {arg!r} comes from {where}, not from the spec")
        if arg not in allowed:
            raise ValueError(f"{name}: unknown argument {arg!r}{_did_you_mean(arg, list(allowed))} "
                             f"(takes: {', '.join(allowed) or 'no arguments'})")
        kwargs[arg] = coerce(value, hints.get(arg, Any), f"{name} argument {arg!r}")
    missing = [a for a, p in allowed.items() if p.default is p.empty and a not in kwargs]
    if missing:
        raise ValueError(f"{name}: missing argument {missing[0]!r}")
    params = inspect.signature(cls.__init__).parameters
    for arg in _INJECTED:
        if arg in params and inject[arg] is not None:
            kwargs[arg] = tuple(float(v) for v in inject[arg]) if arg in ("mean", "std") else inject[arg]
    if "num_classes" in params:
        kwargs["num_classes"] = num_classes
    for arg in _DEFAULTED:
        if getattr(cls, f"{arg}_from_crop", False) and arg not in kwargs and inject[arg] is not None:
            kwargs[arg] = inject[arg]
    return cls(**kwargs)


def describe_transforms() -> list[tuple[str, list[tuple[str, Any]]]]:
    """``[(name, [(argument, default), ...]), ...]`` for every entry of :data:`TRANSFORMS`: the
    arguments a spec may set, in signature order (``inspect.Parameter.empty`` for a required one;
    the injected arguments of :func:`build_transform` are not listed)."""
    return [(name, [(a, p.default) for a, p in _recipe_parameters(cls).items()]) for name, cls in TRANSFORMS.items()]


# ---------------------------------------------------------------------- generated from the declarations
def timm_kwargs(spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """timm's ``create_transform(is_training=True, ...)`` keyword arguments for a recipe's augment
    entry, or ``None`` where ``create_transform`` cannot state it."""
    return TRANSFORMS[spec["name"]].timm_kwargs(spec_arguments(spec))


def _yaml(v: Any) -> str:
    """A default as a recipe writes it."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(_yaml(x) for x in v) + ")"
    return str(v)


def op_table() -> str:
    """The op table of ``recipes/README.md`` (markdown): per entry of :data:`TRANSFORMS`, its recipe
    arguments with their defaults, its ``summary`` and ``runs_on``."""
    rows = ["| name | arguments (defaults) | what it does | runs on |", "|---|---|---|---|"]
    for name, args in describe_transforms():
        cls = TRANSFORMS[name]
        shown = ", ".join(f"`{a}`" if d is inspect.Parameter.empty else f"`{a}`={_yaml(d)}" for a, d in args)
        if getattr(cls, "interpolation_from_crop", False):
            shown += " (`interpolation`: the crop's unless set)"
        rows.append(f"| `{name}` | {shown or '—'} | {cls.summary} | {cls.runs_on} |")
    return "\n".join(rows) + "\n"


#: the markers between which ``recipes/README.md`` holds :func:`op_table`
OP_TABLE_MARKERS = ("<!-- op table: generated from the transforms' declarations by "
                    "dctnet.transforms.registry.write_op_table('recipes/README.md') -->", "<!-- end of op table -->")


def write_op_table(path: str) -> None:
    """Replace the op table between :data:`OP_TABLE_MARKERS` in the markdown file ``path``."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    begin, end = OP_TABLE_MARKERS
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"{path}: expected the op table's markers once each")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    with open(path, "w", encoding="utf-8") as f:
        f.write(head + begin + "\n" + op_table() + end + tail)


import_op_modules()  # every op of the package registered (those the package's __init__ did not import yet)
_sort_registry()

#: the batch-level mixers (the classes that declare ``acts_on_batch``): they act on the collated batch
#: and come last in an augment list (after erasing, as timm and torchvision run them)
MIXERS: tuple[str, ...] = _mixer_names()
