"""The data sources a recipe's ``data.source`` names, in one registry.

A source is its module plus one :func:`register_source` call in it: a :class:`DataSource` with its
name, its task, the ``data.*`` recipe fields it reads, whether it streams, how its data is found,
and its dataset factory for each arm — ``coefficients`` for dctnet's reader (``model.input`` dct
and device-rgb), ``pillow`` for the torchvision/timm baseline (``rgb``). The recipe's
``data.source`` choices are the registered names; the training pipeline
(:mod:`dctnet.train.pipeline`) and the baseline (:mod:`dctnet.train.baseline`) ask the registry for
the datasets and never name a source themselves.

A factory takes a :class:`SourceContext` (the recipe's data section, its root, the rank and the
crops) and a split (``"train"`` or ``"val"``) and returns the split's dataset:

- ``coefficients``: a dataset of :class:`dctnet.data.CoefficientSample` as
  :class:`dctnet.data.ImageFolderDataset` gives them — indexable (``load_batch(keys)`` or
  ``load_collated(keys)``, ``classes``) or, for a streaming source, iterable (``iter_split``,
  ``set_epoch``; :meth:`single_reader` for the statistics pass);
- ``pillow``: ``dataset[index] -> (PIL RGB image, label)`` raising Pillow's error for a bad
  image, with ``classes`` and ``sample_name(index)`` (the baseline applies the transforms and
  ``data.on_error``).

The built-in sources register on ``import dctnet.data``: ``folder`` and ``synthetic``
(:mod:`dctnet.data.folder`), ``cache`` (:mod:`dctnet.data.cache.dataset`), ``shards``
(:mod:`dctnet.data.shards`), ``hf`` (:mod:`dctnet.data.hf`), ``csv`` (:mod:`dctnet.data.csv_list`)
and ``coco`` (:mod:`dctnet.data.coco`; trained by :mod:`dctnet.train.detection`, which reads it
itself: a detection source is COCO's for now, and a source registered with ``task="detection"``
other than ``coco`` is refused).

Adding a source: its module under ``dctnet/data/`` (its datasets and one :func:`register_source`
call), one import of it in ``dctnet/data/__init__.py``, and its test. A source of your own
registers the same way from any module imported before the recipe is loaded. Only a recipe field
of its own takes more: the field in :class:`dctnet.train.recipe.DataConfig`, its row in
:data:`dctnet.train.recipe_tasks.FIELD_TASKS` and in ``recipes/README.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dctnet.codec import available_cpus
from dctnet.coerce import did_you_mean

__all__ = ["SOURCES", "DataSource", "SourceContext", "get_source", "register_source", "source_names",
           "training_data_exists"]



@dataclass
class SourceContext:
    """What a source's factories get: the recipe's ``data`` section (read by attribute, as
    :class:`dctnet.train.recipe.DataConfig`), the data root, the run's seed, this rank, the crop
    policy of each split (the coefficient arm), whether batches go to a CUDA device, and the lists
    a source's full-decode check adds to (``(split, name, reason)`` of samples left out before
    training, ``(split, name, warnings)`` of samples read with harmless warnings)."""

    data: Any
    root: Path
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    crops: dict[str, Any] = field(default_factory=dict)
    pin: bool = False
    excluded: list[tuple[str, str, str]] = field(default_factory=list)
    warned: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def policy(self) -> dict[str, Any]:
        """The datasets' randomness and bad-sample policy: ``seed``, ``on_error``."""
        return dict(seed=self.seed, on_error=self.data.on_error)

    def path(self, split: str) -> Path:
        """``data.root / data.<split>``."""
        return self.root / getattr(self.data, split)

    @property
    def check_threads(self) -> int:
        """Threads a full-decode check uses on this rank (the host's CPUs shared by the ranks)."""
        return max(1, available_cpus() // self.world_size)

    def checked(self, split: str, dataset: Any) -> Any:
        """``dataset`` after its full-decode check (``dataset.check(threads=)``: every sample
        decoded once under ``data.warnings``, the unusable ones left out or raised under
        ``data.on_error``), its findings added to :attr:`excluded` and :attr:`warned`."""
        self.excluded += [(split, name, reason) for name, reason in dataset.check(threads=self.check_threads)]
        self.warned += [(split, name, "; ".join(w)) for name, w in dataset.warned.items()]
        return dataset


def training_data_exists(ctx: SourceContext) -> None:
    """The default :attr:`DataSource.locate`: ``data.root / data.train`` exists."""
    path = ctx.path("train")
    if not path.exists():
        raise FileNotFoundError(f"training data not found: {path} (data.root / data.train; "
                                "for Imagenette set DCTNET_DATA)")


@dataclass(frozen=True)
class DataSource:
    """One data source (module docstring).

    Attributes:
        name: its ``data.source`` name.
        task: ``"classification"`` (trained by :mod:`dctnet.train.pipeline`'s loaders) or
            ``"detection"`` (COCO: :mod:`dctnet.train.detection` reads it itself).
        fields: the ``data.*`` recipe fields it reads beyond those every source reads (root,
            train, val, on_error, warnings and the loader's and crop's fields).
        refused_elsewhere: fields of ``fields`` that the recipe check refuses under another source
            when set away from their default, with what the refusal says after ``"data.KEY is for
            data.source: NAME "`` (``{source!r}``: the recipe's source).
        streams: whether its training data is streamed (no index: no ``data.limit_*`` or
            ``repeated_aug``), or a function of the data section saying it.
        coefficients, pillow: the dataset factories, ``(ctx, split) -> dataset``, of dctnet's
            arm and of the ``rgb`` baseline arm; ``None``: the arm is refused.
        rgb_refusal: why the ``rgb`` arm is refused (``pillow`` is ``None``), in the recipe
            check's words after ``"data.source: 'NAME' "``.
        locate: ``(ctx) -> None``: raise ``FileNotFoundError`` where the data is not there (and
            make it first, for a generated source); default :func:`training_data_exists`.
        check: ``(data, bad) -> None``: the recipe check of its own fields (``bad(message)`` refuses).
    """

    name: str
    task: str = "classification"
    fields: tuple[str, ...] = ()
    refused_elsewhere: dict[str, str] = field(default_factory=dict)
    streams: bool | Callable[[Any], bool] = False
    coefficients: Callable[[SourceContext, str], Any] | None = None
    pillow: Callable[[SourceContext, str], Any] | None = None
    rgb_refusal: str = "has no Pillow dataset for the torchvision baseline"
    locate: Callable[[SourceContext], None] = training_data_exists
    check: Callable[[Any, Callable[[str], None]], None] | None = None

    def __post_init__(self) -> None:
        if self.task not in ("classification", "detection"):
            raise ValueError(f"data source {self.name!r}: task must be 'classification' or 'detection', not "
                             f"{self.task!r}")
        if self.task == "detection" and self.name != "coco":  # (the detection task reads COCO sets itself)
            raise ValueError(f"data source {self.name!r}: a detection source other than coco is not supported: the "
                             "detection task reads COCO sets (dctnet.data.CocoDataset)")
        extra = set(self.refused_elsewhere) - set(self.fields)
        if extra:
            raise ValueError(f"data source {self.name!r}: refused_elsewhere names fields it does not read: "
                             f"{', '.join(sorted(extra))}")

    def streamed(self, data: Any) -> bool:
        """Whether the training data of a recipe's ``data`` section is streamed."""
        return bool(self.streams(data)) if callable(self.streams) else bool(self.streams)

    def datasets(self, arm: str, ctx: SourceContext) -> tuple[Any, Any]:
        """The ``(train, val)`` datasets of ``arm`` (``"coefficients"`` or ``"pillow"``)."""
        make = getattr(self, arm)
        if make is None:
            raise ValueError(f"data.source: {self.name!r} has no {arm} datasets (task {self.task})")
        return make(ctx, "train"), make(ctx, "val")


#: every registered source by name, in registration order
SOURCES: dict[str, DataSource] = {}


def register_source(source: DataSource, *, replace: bool = False) -> DataSource:
    """Add ``source`` to the registry (a second source of one name is an error unless ``replace``)."""
    if source.name in SOURCES and not replace:
        raise ValueError(f"data source {source.name!r} is registered already")
    SOURCES[source.name] = source
    return source


def source_names() -> tuple[str, ...]:
    """The registered names: the recipe's ``data.source`` choices."""
    return tuple(SOURCES)


def get_source(name: str) -> DataSource:
    """The source registered as ``name``; an unknown name is a ``ValueError`` with a "did you mean"."""
    try:
        return SOURCES[name]
    except KeyError:
        close = did_you_mean(name, list(SOURCES))
        hint = f"; {close}" if close else f" (known: {', '.join(SOURCES)})"
        raise ValueError(f"unknown data source {name!r}{hint}") from None
