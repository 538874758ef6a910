"""What feeds the model: datasets, loaders and the device-side input transforms of a recipe.

Three input paths (``model.input``):

* ``rgb`` — the baseline users come from: the source's Pillow dataset (torchvision's ``ImageFolder``
  for folders) + ``v2`` RandomResizedCrop/flip/normalize in ``DataLoader`` worker processes
  (:mod:`dctnet.train.baseline`).
* ``device-rgb`` (plan A) — dctnet's reader delivers MCU windows of coefficients; the device
  decodes, crops and resizes them, runs the recipe's augmentation and hands the model normalised
  RGB (``ToRGB.for_model``); the model is unchanged.
* ``dct`` — as ``device-rgb`` up to the augmented crop, which is handed over as coefficients,
  after the optional per-(c,u,v) standardisation; the model's stem takes coefficients.

The augmentation is the recipe's ``augment`` list built into a :class:`dctnet.transforms.Compose`
(``build_transform``) and run in the device step a user would write
(``DevicePrefetcher(loader, device, transform=step)``); every draw comes from
``step_generator(seed, epoch, step, rank)``, so runs repeat bit for bit and ``--resume`` is exact.

Host CPU spent on the data (decode, crop windows, collate) is measured per epoch: loader-thread
CPU time for dctnet, worker-process CPU time for torchvision (:mod:`dctnet.train.accounting`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from dctnet import data as D
from dctnet.data.sources import SourceContext, get_source
from dctnet import transforms as T
from dctnet.train.accounting import TimedLoader, cpu_of
from dctnet.train.baseline import baseline_mixing, torchvision_loaders
from dctnet.train.inputs import data_root, eval_config, eval_description, limited_indices
from dctnet.train.recipe import Recipe, input_stats
from dctnet.kernels.normalization import input_mean_std

__all__ = ["Pipeline", "build_pipeline", "normalize_input"]


@dataclass
class Pipeline:
    """Loaders plus the device transforms of one recipe (see the module docstring)."""

    recipe: Recipe
    device: torch.device
    rank: int
    world_size: int
    train_loader: object
    val_loader: object
    num_classes: int
    classes: list[str]
    normalize: T.Normalize | None = None

    def __post_init__(self) -> None:
        r = self.recipe
        self.skipped: list[tuple[str, str, str]] = []
        #: (split, path, reason) of files left out before training (a full decode found them
        #: unusable under data.warnings; data.on_error: skip), and (split, path, warnings) of
        #: files used that read with warnings that lost nothing — the same on every rank
        self.excluded: list[tuple[str, str, str]] = []
        self.warned: list[tuple[str, str, str]] = []
        mean, std = input_mean_std(r.model.arch)
        #: the model's eval transform (timm's resolve_data_config rule; recipe fields override)
        self.eval_config = eval_config(r)
        self.eval_fill = D.ResizeCenterCrop.from_config(self.eval_config).fill(self.eval_config["mean"])
        #: the device step, one object for training, eval and the statistics: decode and crop, the
        #: recipe's augment list in its order on the pixel crops, then what the model takes — ToRGB with
        #: the model's normalisation (device-rgb), or ToCoefficients, native chroma and the per-(c,u,v)
        #: standardisation (dct) — so the batch changes representation only where an op needs it
        self.step: T.DeviceStep | None = None
        #: the training pixel stages (augment list + model input) as a Compose (None: no augment list)
        self.augment: T.Compose | None = None
        if r.model.input != "rgb":
            ops = None
            if r.augment:
                ops = T.build_transform(r.augment, num_classes=self.num_classes, seed=r.train.seed, mean=mean,
                                        std=std, label_smoothing=r.optim.label_smoothing,
                                        interpolation=r.data.interpolation)
            self.step = T.DeviceStep(
                (r.data.image_size, r.data.image_size), input="rgb" if r.model.input == "device-rgb" else "coefficients",
                augment=ops, mean=mean, std=std, chroma=r.model.chroma, exact=r.data.decode == "exact",
                interpolation=r.data.interpolation, eval_interpolation=self.eval_config["interpolation"],
                eval_fill=self.eval_fill, pixels=r.data.pixels, seed=r.train.seed,
                eval_size=tuple(self.eval_config["input_size"][1:])).to(self.device)
            # eager runs group exactly the samples that drew each op: shapes that follow the draws cost an
            # eager step nothing, on a CPU or a GPU, and fixed-size groups hold ~1.7x the rows; a compiled
            # step keeps one set of shapes per batch size (CUDA graphs, no recompiles)
            self.step.train_transform.set_fixed_shapes(r.train.compile)
            if r.augment:
                self.augment = self.step.train_transform
            if r.train.compile:
                self.step.compile(mode="reduce-overhead" if self.device.type == "cuda" else "default")
        #: the torchvision/timm baseline's batch-level mixing (input rgb)
        self.rgb_mixing = baseline_mixing(r, self.num_classes) if r.model.input == "rgb" else []
        #: labels come out of the augmentation already smoothed (timm's Mixup folds optim.label_smoothing
        #: into its targets, as timm's train.py does): the loss must not smooth them again
        mixers = list(self.augment.modules()) if self.augment is not None else self.rgb_mixing
        self.targets_smoothed = any(getattr(m, "label_smoothing", 0) for m in mixers)  # (only timm's Mixup smooths)
        #: seconds the training loop spent blocked on the host loaders (see :class:`dctnet.train.accounting.TimedLoader`)
        self.wait_seconds = 0.0
        self.set_epoch(0)

    def describe(self) -> str:
        """The training input pipeline this recipe built, as the objects' reprs (the run directory's
        ``pipeline.txt``): the host transform and batch mixing of the baseline, or the device Compose."""
        r = self.recipe
        if r.model.input == "rgb":
            tf = getattr(getattr(self.train_loader, "loader", None), "dataset", None)
            tf = getattr(getattr(tf, "dataset", tf), "transform", None)
            lines = [f"input: rgb (torchvision/timm, per sample in {r.data.workers} DataLoader workers)",
                     f"per-sample transform: {tf!r}", f"batch mixing: {[_described(m) for m in self.rgb_mixing]}"]
        else:
            lines = [f"input: {r.model.input} (dctnet: host reads coefficient windows; device step below)",
                     f"crop: {self.crop_description()}", f"device step: DeviceStep({self.step.extra_repr()})",
                     f"device augmentation: {self.augment!r}"]
        return "\n".join(lines) + "\n"

    def crop_description(self) -> str:
        r = self.recipe
        return (f"train RandomResizedCrop(size={r.data.image_size}, scale={tuple(r.data.scale)}, "
                f"interpolation={r.data.interpolation}, antialias=True); eval {eval_description(self.eval_config)}")

    # ------------------------------------------------------------------ epochs
    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        for loader in (self.train_loader, self.val_loader):
            if hasattr(loader, "set_epoch"):  # ThreadLoader: its sampler or its iterable dataset
                loader.set_epoch(epoch)
            elif hasattr(getattr(loader, "sampler", None), "set_epoch"):
                loader.sampler.set_epoch(epoch)
        self.step_index = 0

    def data_wait_seconds(self) -> float:
        """Seconds spent blocked on the next host batch so far. The device step (crop, resize,
        augmentation) is not part of it: on a CPU device it runs on the training cores, and
        counting it as waiting would blame the loader for the model's own input work."""
        return self.wait_seconds

    def data_cpu_seconds(self) -> float:
        """Host CPU seconds spent producing batches so far (loader threads or worker processes)."""
        return cpu_of(self.train_loader) + cpu_of(self.val_loader)

    def batches(self, train: bool) -> Iterator[tuple[Tensor | tuple[Tensor, Tensor], Tensor, Tensor]]:
        """``(inputs, targets, labels)`` on the device: model inputs after the device step, the
        loss targets (soft under mixup/cutmix) and the class indices (for accuracy)."""
        loader = TimedLoader(self.train_loader if train else self.val_loader, self)
        split = "train" if train else "val"
        self.step_index = 0
        if self.recipe.model.input == "rgb":
            for x, y, (_, _, skipped) in loader:  # (worker, CPU seconds, skipped samples)
                self._note_skipped(split, skipped)
                x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
                yield (*self._mix_rgb(x, y), y) if train else (x, y, y)
            return
        step = self.train_step if train else self.eval_step
        for x, target, labels in D.DevicePrefetcher(loader, self.device, transform=step):
            yield x, target, labels

    def _generator(self) -> torch.Generator:
        """This step's augmentation draws: a function of (seed, epoch, step, rank) only."""
        gen = T.step_generator(self.recipe.train.seed, self.epoch, self.step_index, self.rank)
        self.step_index += 1
        return gen

    def _mix_rgb(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """The baseline's batch-level mixing (its per-sample ops ran in the workers)."""
        for mix in self.rgb_mixing:
            x, y = mix(x, y)
        return x, y.float() if y.dim() == 2 else y

    def _note_skipped(self, split: str, skipped) -> None:
        """Remember the samples a loader dropped under ``data.on_error: skip`` (the trainer
        counts them per epoch and writes their names to ``skipped.txt``)."""
        if skipped:
            self.skipped.extend((split, str(name), str(reason)) for _, name, reason in skipped)

    def take_skipped(self) -> list[tuple[str, str, str]]:
        """``(split, name, reason)`` of the samples skipped since the last call."""
        out, self.skipped = self.skipped, []
        return out

    # ------------------------------------------------------------------ device steps
    def train_step(self, batch) -> tuple[Tensor | tuple[Tensor, Tensor], Tensor, Tensor]:
        """The device step of a training batch: :meth:`device_step` with the augmentation."""
        self._note_skipped("train", batch.skipped)
        return self.device_step(batch, self.augment, self._generator())

    def eval_step(self, batch) -> tuple[Tensor | tuple[Tensor, Tensor], Tensor, Tensor]:
        self._note_skipped("val", batch.skipped)
        return self.device_step(batch, None, None)

    def device_step(self, batch, augment: T.Compose | None, generator: torch.Generator | None):
        """``JpegBatch`` → ``(inputs, targets, labels)`` through :attr:`step` (:class:`dctnet.transforms.DeviceStep`),
        with ``augment`` (the pixel stages through the model input, as :attr:`augment`) in place of
        the training ones, or ``None``: no augmentation (eval, and recipes without an augment list
        outside training), with the eval crop's interpolation and fill where the batch is an eval
        batch. The standardisation is :attr:`normalize` as it is now (``None`` while the statistics
        pass computes it)."""
        self.step.normalize = self.normalize
        if augment is None and getattr(batch, "resize", None) is None and self.augment is None:
            augment = self.step.train_transform  # a training batch without an augment list: the model input alone
        return self.step.run(batch, augment, generator)


def _described(obj) -> str:
    """``repr`` of a transform, or its public attributes where the class has no repr of its own (timm's Mixup)."""
    text = repr(obj)
    if " object at 0x" in text:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(obj).items() if not k.startswith("_"))
        text = f"{type(obj).__module__}.{type(obj).__name__}({fields})"
    return text


# ---------------------------------------------------------------------- building
def build_pipeline(recipe: Recipe, device: torch.device, rank: int = 0, world_size: int = 1) -> Pipeline:
    """Datasets and loaders for ``recipe`` on this rank (training split by rank, drop_last;
    validation split by rank without padding, so summed counts cover it exactly once). The
    datasets are the data source's (:mod:`dctnet.data.sources`): its Pillow datasets for the
    ``rgb`` baseline, its coefficient datasets for dctnet's arms."""
    r = recipe
    source = get_source(r.data.source)
    root = data_root(r)
    crops = {"train": D.RandomResizedCrop(scale=r.data.scale), "val": D.ResizeCenterCrop.from_config(eval_config(r))}
    # (split, path, reason) of files left out before training, (split, path, warnings) of files used that read
    # with warnings: a source's full-decode check fills them, the same on every rank and in both arms
    ctx = SourceContext(r.data, root, seed=r.train.seed, rank=rank, world_size=world_size, crops=crops,
                        pin=device.type == "cuda")
    if r.model.input == "rgb":
        train, val, classes = torchvision_loaders(r, root, rank, world_size, source.datasets("pillow", ctx))
        pipe = Pipeline(r, device, rank, world_size, train, val, r.model.num_classes or len(classes), classes)
        pipe.excluded, pipe.warned = ctx.excluded, ctx.warned
        return pipe
    train_ds, val_ds = source.datasets("coefficients", ctx)
    if source.streamed(r.data):
        train, val, classes = _stream_loaders(r, root, train_ds, val_ds, ctx.pin)
    else:
        train, val, classes = _indexed_loaders(r, root, train_ds, val_ds, rank, world_size, ctx.pin)
    pipe = Pipeline(r, device, rank, world_size, train, val, r.model.num_classes or len(classes), classes)
    pipe.excluded, pipe.warned = ctx.excluded, ctx.warned
    if input_stats(r):
        pipe.normalize = _coefficient_stats(pipe, train_ds, source.streamed(r.data)).to(device)  # on the device once
        for op in _noise_erasers(pipe.augment):  # their noise: N(0, 1) in what the model is fed
            op.noise_in(pipe.normalize)
    return pipe


def _stream_loaders(r: Recipe, root, train_ds, val_ds, pin: bool) -> tuple[D.ThreadLoader, D.ThreadLoader, list[str]]:
    """Loaders over streamed datasets (tar shards, streamed Hugging Face data) and their class
    names; the options that need indexable data are refused."""
    if r.data.limit_train or r.data.limit_val:
        raise ValueError("data.limit_train / limit_val need indexable data; shards are streamed (use a cache)")
    if r.data.repeated_aug > 1:
        raise ValueError("data.repeated_aug needs indexable data (a folder or a cache); shards are streamed")
    classes = [str(c) for c in range(r.model.num_classes)] if r.model.num_classes else None
    if getattr(train_ds, "classes", None):  # a streamed HF dataset's ClassLabel names
        if list(getattr(val_ds, "classes", [])) != list(train_ds.classes):
            raise ValueError(f"train and val splits have different classes under {root}")
        classes = list(train_ds.classes)
    if classes is None:
        raise ValueError(f"data.source: {r.data.source} needs model.num_classes (the data carry labels, not class names)")
    train = D.ThreadLoader(train_ds, r.data.batch_size, threads=r.data.threads, drop_last=True, pin_memory=pin)
    val = D.ThreadLoader(val_ds, r.data.batch_size, threads=r.data.threads, pin_memory=pin)
    return train, val, classes


def _indexed_loaders(r: Recipe, root, train_ds, val_ds, rank: int, world_size: int,
                     pin: bool) -> tuple[D.ThreadLoader, D.ThreadLoader, list[str]]:
    """Loaders over indexable datasets (a cache, an image folder, Hugging Face rows), sampled by
    rank within ``data.limit_train`` / ``limit_val``, and their class names."""
    if list(getattr(val_ds, "classes", train_ds.classes)) != list(train_ds.classes):
        raise ValueError(f"train and val splits have different classes under {root}")
    classes = list(train_ds.classes)
    if r.data.repeated_aug > 1:  # DeiT's / torchvision's RASampler: every repeat its own crop
        train_sampler = D.RepeatedAugSampler(limited_indices(len(train_ds), r.data.limit_train), r.data.repeated_aug,
                                             seed=r.train.seed, rank=rank, world_size=world_size)
    else:
        train_sampler = D.SubsetSampler(limited_indices(len(train_ds), r.data.limit_train), seed=r.train.seed,
                                        rank=rank, world_size=world_size, drop_last=True)
    val_sampler = D.SubsetSampler(limited_indices(len(val_ds), r.data.limit_val), shuffle=False, rank=rank,
                                  world_size=world_size)
    train = D.ThreadLoader(train_ds, r.data.batch_size, sampler=train_sampler, threads=r.data.threads,
                           drop_last=True, pin_memory=pin)
    val = D.ThreadLoader(val_ds, r.data.batch_size, sampler=val_sampler, threads=r.data.threads, pin_memory=pin)
    return train, val, classes


def _noise_erasers(augment: T.Compose | None) -> list[T.RandomErasing]:
    """The erasing ops of ``augment`` that fill with per-pixel noise (timm's ``pixel``, torchvision's ``random``)."""
    return [op for op in (augment.transforms if augment is not None else []) if isinstance(op, T.RandomErasing) and op.noise]


def _coefficient_stats(pipe: Pipeline, ds, streamed: bool) -> T.Normalize:
    """Per-(c,u,v) statistics of what the model is fed: training crops through the device step
    with the recipe's augmentation, before standardisation — the same on every rank (fixed
    sampler, draws from ``step_generator(seed + 1, 0, batch)``).

    The augmentation belongs in them. Pixel-space ops put energy where photos have almost none:
    timm's per-pixel erasing noise, posterize and solarize edges land in the high (chroma)
    frequencies, whose spread over clean crops is tiny. Standardised by clean-crop statistics those
    coefficients reach ~2,000 σ (a ViT-S/16 with DeiT-style erasing then stopped learning); with
    the statistics of the augmented crops they stay within the ~30 σ of clean photos.

    Erasing with noise is left out of them: its noise is drawn in the standardised coefficients
    these statistics define (:meth:`dctnet.transforms.RandomErasing.noise_in`), so it has their
    spread by construction."""
    r, device = pipe.recipe, pipe.device
    augment = pipe.augment
    if augment is not None:
        noisy = _noise_erasers(augment)
        augment = T.Compose([op for op in augment.transforms if op not in noisy], seed=r.train.seed)
    if streamed:  # every rank reads the same stream: rank 0's view, with the statistics' seed
        loader = D.ThreadLoader(ds.single_reader(r.train.seed + 1), r.data.batch_size, threads=r.data.threads,
                                pin_memory=False)
    else:
        sampler = D.SubsetSampler(limited_indices(len(ds), r.data.limit_train), seed=r.train.seed + 1, rank=0, world_size=1)
        loader = D.ThreadLoader(ds, r.data.batch_size, sampler=sampler, threads=r.data.threads, pin_memory=False)
    assert pipe.normalize is None, "statistics of the inputs before standardisation"
    # the training device step (native (y, c) when the stem takes native chroma), unstandardised
    fed = (pipe.device_step(T.as_jpeg_batch(b.to(device)), augment, T.step_generator(r.train.seed + 1, 0, i))[0]
           for i, b in enumerate(loader))
    return T.Normalize(*D.compute_stats(fed, max_batches=r.model.stats_batches))


#: per-(c,u,v) standardisation (the device step's, :func:`dctnet.transforms.step.normalize_input`)
normalize_input = T.normalize_input
