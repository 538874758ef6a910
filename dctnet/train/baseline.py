"""The torchvision/timm baseline (``model.input: rgb``): what users come from, built from the same
recipe — the data source's Pillow dataset (:mod:`dctnet.data.sources`; image folders: torchvision's
``ImageFolder``) + Pillow decode, the recipe's augment list mapped one to one
to torchvision's and timm's own classes (:func:`baseline_op`), ``v2`` RandomResizedCrop, flip and
normalise in ``DataLoader`` worker processes, batch mixing on the training device.

``dctnet bench`` times the same transforms (:func:`train_transform`, :func:`baseline_op`).

torchvision and Pillow are optional dependencies (the test extras) and timm is slow to import:
they are imported inside the functions that use them, so ``dctnet train`` needs them only for
this arm.
"""

from __future__ import annotations

from pathlib import Path

import torch

from dctnet import transforms as T
from dctnet.codec import JpegError
from dctnet.data.loader import RepeatedAugSampler
from dctnet.data.pillow import PillowFolder
from dctnet.data.sources import SourceContext, get_source
from dctnet.train.accounting import RgbLoader, Skipped, WorkerCpu
from dctnet.train.inputs import eval_config, limited_indices
from dctnet.train.recipe import Recipe
from dctnet.train.rng import EpochKeys, SeededDraws
from dctnet.kernels.normalization import input_mean_std
from dctnet.transforms.timm_augment import pillow12_posterize, with_pillow12_posterize

__all__ = ["PillowSamples", "RankSlice", "baseline_augment", "baseline_mixing", "baseline_op", "jpeg_image_folder",
           "pillow12_posterize", "torchvision_loaders", "train_transform", "with_pillow12_posterize"]


# ---------------------------------------------------------------------- the recipe's list, mapped

def baseline_op(spec: dict, r: Recipe, num_classes: int):
    """One augment entry as torchvision's or timm's own implementation, mapped one to one (same
    arguments, same probabilities — a RandomApply only where dctnet's class has a ``p`` that the
    library's lacks): the class's declared counterpart (:func:`dctnet.transforms.counterpart`). Per-sample
    ops run on the PIL image in the workers; the mixers on the batch."""
    mean, std = input_mean_std(r.model.arch)
    ctx = T.BaselineContext(mean=tuple(mean), std=tuple(std), image_size=r.data.image_size,
                            interpolation=r.data.interpolation, label_smoothing=r.optim.label_smoothing,
                            num_classes=num_classes)
    return T.counterpart(spec, ctx)


def baseline_augment(r: Recipe) -> tuple[list, list]:
    """Per-sample ops for the workers: (on the PIL crop, after normalisation — erasing, which timm and
    torchvision run on the normalised tensor)."""
    ops = [(s["name"], baseline_op(s, r, 0)) for s in r.augment if not T.is_mixer_spec(s)]
    return [op for n, op in ops if n != "RandomErasing"], [op for n, op in ops if n == "RandomErasing"]


def baseline_mixing(r: Recipe, num_classes: int) -> list:
    """Batch-level mixing for the baseline (with the data's class count): timm's ``Mixup`` or
    torchvision's ``MixUp`` / ``CutMix`` (a recipe names at most one mixer)."""
    return [baseline_op(s, r, num_classes) for s in r.augment if T.is_mixer_spec(s)]


def train_transform(r: Recipe):
    """The baseline's per-sample training transform: crop and augment the PIL image (Pillow's
    resize is ~1.5x faster than a tensor resize of the full photo), then tensor, normalise and
    erase — torchvision's and timm's ImageNet order."""
    from torchvision.transforms import v2  # optional dependency (see the module docstring)

    # the model's own normalisation (timm ViTs: 0.5/0.5), which `dctnet convert` folds into the stem
    norm = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(*input_mean_std(r.model.arch))]
    before, after = baseline_augment(r)
    crop = v2.RandomResizedCrop(r.data.image_size, scale=tuple(r.data.scale),
                                interpolation=v2.InterpolationMode(r.data.interpolation), antialias=True)
    return v2.Compose([crop, *before, *norm, *after])


# ---------------------------------------------------------------------- datasets and loaders
class PillowSamples(torch.utils.data.Dataset):
    """A source's Pillow dataset (:mod:`dctnet.data.pillow`: ``(image, label)``) with the baseline's
    per-sample transform, and bad images under ``on_error`` as everywhere else: a
    :class:`dctnet.JpegError` naming the sample, or a skipped sample that the collate reports. A
    transform's error is not the image's: it is raised, not blamed on the file."""

    def __init__(self, dataset, transform, on_error: str) -> None:
        self.dataset, self.transform, self.on_error = dataset, transform, on_error

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        try:
            sample, target = self.dataset[index]
        except (OSError, ValueError, SyntaxError) as exc:  # what Pillow raises for bad image data
            reason, name = f"{type(exc).__name__}: {exc}", self.dataset.sample_name(index)
            if self.on_error == "raise":
                raise JpegError(reason, name) from None
            return Skipped((index, name, reason))
        return (self.transform(sample) if self.transform is not None else sample), target

    def __getattr__(self, name: str):  # the source dataset's own attributes (classes, samples, targets, …)
        if name.startswith("__") or "dataset" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["dataset"], name)


def jpeg_image_folder(root: str, transform, on_error: str, accept_truncated: bool = False,
                      usable: list[str] | None = None) -> PillowSamples:
    """torchvision's ImageFolder over the files dctnet's datasets read (JPEG names only, empty
    classes kept, so labels match; only ``usable`` ones when given), with bad files under
    ``on_error`` (:class:`PillowSamples`)."""
    return PillowSamples(PillowFolder(root, accept_truncated, usable), transform, on_error)


def _eval_transform(r: Recipe):
    """The model's eval transform as timm builds it (resize the shorter side to floor(size / crop_pct)
    with the model's interpolation, centre crop, normalise) — the same data config dctnet's eval crop
    reproduces on the device — or torchvision's reference's Resize + CenterCrop (``data.eval_resize``)."""
    from timm.data import create_transform  # slow to import (see the module docstring)

    cfg = eval_config(r)
    if cfg["resize"] is not None:  # torchvision's reference: Resize(val_resize_size) + CenterCrop(val_crop_size)
        from torchvision.transforms import v2  # optional dependency (see the module docstring)

        return v2.Compose([v2.Resize(cfg["resize"], interpolation=v2.InterpolationMode(cfg["interpolation"]),
                                     antialias=True), v2.CenterCrop(list(cfg["input_size"][1:])), v2.ToImage(),
                           v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(cfg["mean"]), list(cfg["std"]))])
    return create_transform(input_size=cfg["input_size"], interpolation=cfg["interpolation"],
                            crop_pct=cfg["crop_pct"], crop_mode=cfg["crop_mode"], mean=cfg["mean"], std=cfg["std"],
                            is_training=False)


def torchvision_loaders(r: Recipe, root: Path, rank: int, world_size: int, datasets: tuple | None = None):
    """The torchvision baseline's loaders over ``datasets``, the ``(train, val)`` Pillow datasets of
    the recipe's data source (:mod:`dctnet.data.sources`; default: asked of the registry here, its
    files checked as the pipeline checks them)."""
    if datasets is None:
        datasets = get_source(r.data.source).datasets(
            "pillow", SourceContext(r.data, Path(root), seed=r.train.seed, rank=rank, world_size=world_size))
    train_ds = PillowSamples(datasets[0], train_transform(r), r.data.on_error)
    val_ds = PillowSamples(datasets[1], _eval_transform(r), r.data.on_error)
    if r.data.limit_train:
        train_ds = torch.utils.data.Subset(train_ds, limited_indices(len(train_ds), r.data.limit_train))
    if r.data.limit_val:
        val_ds = torch.utils.data.Subset(val_ds, limited_indices(len(val_ds), r.data.limit_val))
    if r.data.repeated_aug > 1:  # torchvision's / DeiT's RASampler (its key tells the repeats' draws apart)
        train_sampler = RepeatedAugSampler(len(train_ds), r.data.repeated_aug, seed=r.train.seed, rank=rank,
                                           world_size=world_size, keys=True)
    else:
        train_sampler = EpochKeys(torch.utils.data.DistributedSampler(
            train_ds, num_replicas=world_size, rank=rank, shuffle=True, seed=r.train.seed, drop_last=True))
    val_sampler = RankSlice(len(val_ds), rank, world_size)
    common = {"batch_size": r.data.batch_size, "num_workers": r.data.workers, "collate_fn": WorkerCpu(),
              "pin_memory": torch.cuda.is_available(), "persistent_workers": r.data.workers > 0,
              # the workers' base seed from the loader's own generator, not the main process's torch
              # stream (which batch mixing and dropout draw from, and the checkpoint restores)
              "generator": torch.Generator().manual_seed(r.train.seed)}
    if r.data.workers > 0:
        common["prefetch_factor"] = 2
    # each sample's transform draws from (seed, epoch, index): the same crops whatever the workers, and
    # after --resume (the transforms' own generators would restart elsewhere)
    train = torch.utils.data.DataLoader(SeededDraws(train_ds, r.train.seed), sampler=train_sampler, drop_last=True,
                                        **common)
    val = torch.utils.data.DataLoader(SeededDraws(val_ds, r.train.seed), sampler=val_sampler, **common)
    classes = train_ds.dataset.classes if isinstance(train_ds, torch.utils.data.Subset) else train_ds.classes
    return RgbLoader(train), RgbLoader(val), list(classes)


class RankSlice(torch.utils.data.Sampler):
    """Indices rank, rank+world, … (no padding: every validation image counted exactly once)."""

    def __init__(self, n: int, rank: int, world_size: int) -> None:
        self.n, self.rank, self.world_size = n, rank, world_size

    def __iter__(self):
        return iter(range(self.rank, self.n, self.world_size))

    def __len__(self) -> int:
        return len(range(self.rank, self.n, self.world_size))
