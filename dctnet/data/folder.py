"""The image-folder sources (:mod:`dctnet.data.sources`): ``folder`` — ``root/<split>/<class>/*.jpg``,
torchvision's ImageFolder layout — and ``synthetic``, the same over a labelled folder of generated
JPEGs (:func:`dctnet.synthetic.make_labelled_dataset`, written under ``data.root`` first).

Which files are usable is decided once, by a full decode of each under ``data.warnings``
(:meth:`dctnet.data.ImageFolderDataset.check`), for every epoch, every rank and both arms: the
torchvision baseline decodes with Pillow, which reads PNG data under a .jpg name and fills in
corrupt data without a word.
"""

from __future__ import annotations

from dctnet.data.dataset import ImageFolderDataset
from dctnet.data.pillow import PillowFolder
from dctnet.data.sources import DataSource, SourceContext, register_source, training_data_exists
from dctnet.synthetic import make_labelled_dataset

__all__ = ["checked_folder"]


def checked_folder(ctx: SourceContext, split: str) -> ImageFolderDataset:
    """The split's image folder (its crop: ``ctx.crops[split]``), every file checked by a full decode."""
    ds = ImageFolderDataset(ctx.path(split), crop=ctx.crops.get(split), warnings=ctx.data.warnings, **ctx.policy)
    return ctx.checked(split, ds)


def _pillow_folder(ctx: SourceContext, split: str) -> PillowFolder:
    """The split's files that :func:`checked_folder` finds usable, read by Pillow."""
    usable = [p for p, _ in checked_folder(ctx, split).samples]
    return PillowFolder(ctx.path(split), ctx.data.warnings == "accept", usable)


def _generate(ctx: SourceContext) -> None:
    """The synthetic dataset written under ``data.root`` (then found as a folder is)."""
    d = ctx.data
    make_labelled_dataset(str(ctx.root), classes=d.synthetic_classes, train_per_class=d.synthetic_train_per_class,
                          val_per_class=d.synthetic_val_per_class, size=d.synthetic_size, seed=ctx.seed)
    training_data_exists(ctx)


register_source(DataSource("folder", coefficients=checked_folder, pillow=_pillow_folder))
register_source(DataSource("synthetic", fields=("synthetic_classes", "synthetic_train_per_class",
                                                "synthetic_val_per_class", "synthetic_size"),
                           coefficients=checked_folder, pillow=_pillow_folder, locate=_generate))
