"""What a recipe knows of its ops: the live registry :data:`RECIPE_OPS` (every op class that declares
its row of the op table, in declaration order) and :class:`BaselineContext` (what an op's
torchvision/timm counterpart needs). Filled by :class:`dctnet.transforms.transform.Transform` as
its subclasses are defined; read by :mod:`dctnet.transforms.counterparts` and
:mod:`dctnet.transforms.registry`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RECIPE_OPS", "BaselineContext"]


#: every op a recipe can name, in declaration order: a :class:`Transform` subclass registers itself by
#: declaring its own ``summary`` (its row of the op table)
RECIPE_OPS: dict[str, type] = {}  # (Transform subclasses: this module lies below theirs)


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
