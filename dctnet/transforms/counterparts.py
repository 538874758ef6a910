"""A recipe's augment entry with its class's defaults filled in (:func:`spec_arguments`), and its
torchvision or timm counterpart (:func:`counterpart`), read from the op's declaration on its class.
Below both the registry (:mod:`dctnet.transforms.registry`, which re-exports them) and the
containers (:mod:`dctnet.transforms.choice`, whose counterparts map each child's): it needs only the
live registry of op classes, :data:`dctnet.transforms.recipe_ops.RECIPE_OPS`."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from dctnet.transforms.recipe_ops import RECIPE_OPS, BaselineContext

__all__ = ["counterpart", "spec_arguments"]


def spec_arguments(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A spec's arguments with its class's defaults filled in (lists as tuples): what both arms of a
    recipe use."""
    cls = RECIPE_OPS[spec["name"]]
    args = {k: v.default for k, v in inspect.signature(cls).parameters.items() if v.default is not inspect.Parameter.empty}
    args.update({k: tuple(v) if isinstance(v, list) else v for k, v in spec.items() if k != "name"})
    return args


def counterpart(spec: Mapping[str, Any], ctx: BaselineContext) -> Any:
    """torchvision's or timm's own implementation of a recipe's augment entry (its class's
    :meth:`~dctnet.transforms.base.Transform.counterpart`), the arguments as
    :func:`~dctnet.transforms.registry.build_transform` resolves them (the class's defaults;
    ``interpolation`` from the crop where the class takes it from there). ``ValueError`` for an op
    neither library has."""
    cls = RECIPE_OPS[spec["name"]]
    args = spec_arguments(spec)
    if cls.takes_transforms:
        args["transforms"] = list(spec["transforms"])  # specs: the container's counterpart maps each
    if getattr(cls, "interpolation_from_crop", False) and "interpolation" not in spec:
        args["interpolation"] = ctx.interpolation
    return cls.counterpart(args, ctx)
