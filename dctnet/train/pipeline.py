"""What feeds the model: datasets, loaders and the device-side input transforms of a recipe.

Three input paths (``model.input``):

* ``rgb`` — the baseline users come from: torchvision ``ImageFolder`` + Pillow decode +
  ``v2`` RandomResizedCrop/flip/normalize in ``DataLoader`` worker processes.
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
CPU time for dctnet, worker-process CPU time for torchvision.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from dctnet import data as D
from dctnet import transforms as T
from dctnet.transforms import functional as TF
from dctnet.transforms.normalization import input_mean_std
from dctnet.train.recipe import Recipe

__all__ = ["Pipeline", "build_pipeline", "data_root"]


def data_root(recipe: Recipe) -> Path:
    """The dataset root, generating the synthetic dataset first when the recipe asks for it."""
    root = Path(recipe.data.root)
    if recipe.data.source == "synthetic":
        from dctnet.synthetic import make_labelled_dataset

        d = recipe.data
        make_labelled_dataset(str(root), classes=d.synthetic_classes, train_per_class=d.synthetic_train_per_class,
                              val_per_class=d.synthetic_val_per_class, size=d.synthetic_size, seed=recipe.train.seed)
    if recipe.data.source == "shards":
        import glob

        if not glob.glob(str(root / recipe.data.train)):
            raise FileNotFoundError(f"no training shards match {root / recipe.data.train} (data.root / data.train, "
                                    "a glob such as train-*.tar)")
    elif not (root / recipe.data.train).exists():
        raise FileNotFoundError(f"training data not found: {root / recipe.data.train} (data.root / data.train; "
                                "for Imagenette set DCTNET_DATA)")
    return root


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
        #: the recipe's augmentation (None: no augment list); built with the trainer's public API
        self.augment: T.Transform | None = (T.build_transform(r.augment, num_classes=self.num_classes, seed=r.train.seed)
                                            .to(self.device) if r.augment and r.model.input != "rgb" else None)
        #: coefficient image → the unchanged model's normalised RGB (device-rgb), by the one rule
        self.to_rgb = T.ToRGB.for_model(r.model.arch).to(self.device)
        #: the torchvision baseline's batch-level mixing (MixUp / CutMix of torchvision v2)
        self.rgb_mixing = _torchvision_mixing(r, self.num_classes) if r.model.input == "rgb" else []
        #: seconds the training loop spent blocked on the host loaders (see :class:`_TimedLoader`)
        self.wait_seconds = 0.0
        self.set_epoch(0)

    # ------------------------------------------------------------------ epochs
    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        for loader in (self.train_loader, self.val_loader):
            if hasattr(loader, "set_epoch"):  # ThreadLoader: its sampler or its iterable dataset
                loader.set_epoch(epoch)
            elif hasattr(getattr(loader, "sampler", None), "set_epoch"):
                loader.sampler.set_epoch(epoch)
        self.step = 0

    def data_wait_seconds(self) -> float:
        """Seconds spent blocked on the next host batch so far. The device step (crop, resize,
        augmentation) is not part of it: on a CPU device it runs on the training cores, and
        counting it as waiting would blame the loader for the model's own input work."""
        return self.wait_seconds

    def data_cpu_seconds(self) -> float:
        """Host CPU seconds spent producing batches so far (loader threads or worker processes)."""
        return _cpu_of(self.train_loader) + _cpu_of(self.val_loader)

    def batches(self, train: bool) -> Iterator[tuple[Tensor | tuple[Tensor, Tensor], Tensor, Tensor]]:
        """``(inputs, targets, labels)`` on the device: model inputs after the device step, the
        loss targets (soft under mixup/cutmix) and the class indices (for accuracy)."""
        loader = _TimedLoader(self.train_loader if train else self.val_loader, self)
        split = "train" if train else "val"
        self.step = 0
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
        gen = T.step_generator(self.recipe.train.seed, self.epoch, self.step, self.rank)
        self.step += 1
        return gen

    def _mix_rgb(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """The torchvision baseline's batch-level mixing (its per-sample ops ran in the workers)."""
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

    def device_step(self, batch, augment: T.Transform | None, generator: torch.Generator | None):
        """``JpegBatch`` → ``(inputs, targets, labels)``: the resized crops as coefficients, the
        augmentation (DCT-domain transforms; labels become soft targets under mixing), then what
        the model takes — normalised RGB for ``device-rgb``, coefficients (native chroma,
        per-(c,u,v) standardisation as the recipe says) for ``dct``."""
        r = self.recipe
        size, exact = (r.data.image_size, r.data.image_size), r.data.decode == "exact"
        labels = batch.labels
        if r.model.input == "device-rgb" and augment is None:  # no augmentation: no round trip through the DCT
            return self.rgb_normalize(T.crops_to_rgb(batch, size, exact=exact)), labels, labels
        x, target = T.crops_to_coefficients(batch, size, exact=exact), labels
        if augment is not None:
            x, target = augment(x, labels, generator=generator)
        if r.model.input == "device-rgb":
            return self.to_rgb(x), target, labels
        if r.model.chroma == "native":  # after the augmentation: every transform acts on the full chroma grid
            x = T.native_chroma(x)
        if self.normalize is not None:
            x = normalize_input(x, self.normalize.mean.to(labels.device), self.normalize.std.to(labels.device))
        return x, target, labels

    def rgb_normalize(self, rgb: Tensor) -> Tensor:
        """``(rgb − mean) / std`` with the model's normalisation (:meth:`ToRGB.for_model`'s)."""
        return (rgb - self.to_rgb.mean.to(rgb)) / self.to_rgb.std.to(rgb)


# ---------------------------------------------------------------------- CPU accounting
class _WorkerCpu:
    """Collate for torchvision DataLoaders that stamps each batch with its worker's CPU time and
    the samples :func:`_jpeg_image_folder` skipped: ``(x, y, (worker, cpu_seconds, skipped))``."""

    def __call__(self, samples):
        skipped = tuple(tuple(s) for s in samples if isinstance(s, _Skipped))
        good = [s for s in samples if not isinstance(s, _Skipped)]
        if good:
            x, y = torch.utils.data.default_collate(good)
        else:  # every sample of the batch was bad
            x, y = torch.zeros(0), torch.zeros(0, dtype=torch.int64)
        info = torch.utils.data.get_worker_info()
        return x, y, (info.id if info else -1, time.process_time(), skipped)


class _Skipped(tuple):
    """``(index, path, reason)`` of a sample the torchvision baseline could not read."""


def _jpeg_image_folder(root: str, transform, on_error: str):
    """torchvision's ImageFolder over the files dctnet's datasets read (JPEG names only, empty
    classes kept, so labels match), with bad files under ``on_error`` as everywhere else: a
    :class:`dctnet.JpegError` naming the file, or a skipped sample that the collate reports."""
    import torchvision
    from dctnet import JpegError
    from dctnet.data.dataset import IMG_EXTENSIONS

    class JpegImageFolder(torchvision.datasets.ImageFolder):
        def __getitem__(self, index: int):
            try:
                return super().__getitem__(index)
            except (OSError, ValueError, SyntaxError) as exc:  # what Pillow raises for bad image data
                path = self.samples[index][0]
                reason = f"{type(exc).__name__}: {exc}"
                if on_error == "raise":
                    raise JpegError(reason, path) from None
                return _Skipped((index, path, reason))

    return JpegImageFolder(root, transform=transform, allow_empty=True,
                           is_valid_file=lambda p: p.lower().endswith(IMG_EXTENSIONS))


class _RgbLoader:
    """torchvision DataLoader whose worker CPU seconds are read off the batches it yields."""

    def __init__(self, loader: torch.utils.data.DataLoader) -> None:
        self.loader, self.sampler = loader, loader.sampler
        self.seen: dict[int, float] = {}

    @property
    def cpu_seconds(self) -> float:
        return sum(self.seen.values())

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for x, y, (wid, cpu, skipped) in self.loader:
            if wid >= 0:
                self.seen[wid] = max(self.seen.get(wid, 0.0), cpu)
            yield x, y, (wid, cpu, skipped)


class _TimedLoader:
    """Iterates ``loader`` and adds the time each ``next`` blocks to ``owner.wait_seconds``.

    The device prefetcher pulls host batches from the training thread itself, so this is exactly
    the time the step waited for data, whatever the prefetcher then does on the device."""

    def __init__(self, loader, owner, clock=time.perf_counter) -> None:
        self.loader, self.owner, self.clock = loader, owner, clock

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        it = iter(self.loader)
        while True:
            t = self.clock()
            try:
                batch = next(it)
            except StopIteration:
                return
            finally:
                self.owner.wait_seconds += self.clock() - t
            yield batch


def _cpu_of(loader) -> float:
    return float(getattr(loader, "cpu_seconds", 0.0))


# ---------------------------------------------------------------------- building
def _limited(n: int, limit: int) -> list[int]:
    """All of ``range(n)``, or ``limit`` indices spread evenly over it (every class represented:
    folder datasets are sorted by class)."""
    if not limit or limit >= n:
        return list(range(n))
    return [int(i * n / limit) for i in range(limit)]


def build_pipeline(recipe: Recipe, device: torch.device, rank: int = 0, world_size: int = 1) -> Pipeline:
    """Datasets and loaders for ``recipe`` on this rank (training split by rank, drop_last;
    validation split by rank without padding, so summed counts cover it exactly once)."""
    r = recipe
    root = data_root(r)
    if r.model.input == "rgb":
        train, val, classes = _torchvision_loaders(r, root, rank, world_size)
        n_classes = r.model.num_classes or len(classes)
        return Pipeline(r, device, rank, world_size, train, val, n_classes, classes)
    crop = D.RandomResizedCrop(scale=r.data.scale)
    center = D.CenterCrop(r.data.crop_fraction)
    policy = dict(seed=r.train.seed, on_error=r.data.on_error)
    pin = device.type == "cuda"
    if r.data.source == "cache":
        # on a GPU the cache's batches are padded (dense) or expanded (sparse) on the device: the
        # host moves only each window's blocks, or only the compressed records
        train_ds = D.CacheDataset(root / r.data.train, crop=crop, verify=r.data.verify, device_expand=pin, **policy)
        val_ds = D.CacheDataset(root / r.data.val, crop=center, verify=r.data.verify, device_expand=pin, **policy)
    elif r.data.source == "shards":
        train_ds = D.TarShardDataset(str(root / r.data.train), crop=crop, rank=rank, world_size=world_size, **policy)
        val_ds = D.TarShardDataset(str(root / r.data.val), crop=center, shuffle=False, rank=rank,
                                   world_size=world_size, **policy)
    else:
        train_ds = D.ImageFolderDataset(root / r.data.train, crop=crop, **policy)
        val_ds = D.ImageFolderDataset(root / r.data.val, crop=center, **policy)
    if r.data.source == "shards":
        if r.data.limit_train or r.data.limit_val:
            raise ValueError("data.limit_train / limit_val need indexable data; shards are streamed (use a cache)")
        classes = [str(c) for c in range(r.model.num_classes)] if r.model.num_classes else None
        if classes is None:
            raise ValueError("data.source: shards needs model.num_classes (shards carry labels, not class names)")
        train = D.ThreadLoader(train_ds, r.data.batch_size, threads=r.data.threads, drop_last=True, pin_memory=pin)
        val = D.ThreadLoader(val_ds, r.data.batch_size, threads=r.data.threads, pin_memory=pin)
    else:
        if list(getattr(val_ds, "classes", train_ds.classes)) != list(train_ds.classes):
            raise ValueError(f"train and val splits have different classes under {root}")
        classes = list(train_ds.classes)
        train_sampler = D.SubsetSampler(_limited(len(train_ds), r.data.limit_train), seed=r.train.seed, rank=rank,
                                        world_size=world_size, drop_last=True)
        val_sampler = D.SubsetSampler(_limited(len(val_ds), r.data.limit_val), shuffle=False, rank=rank,
                                      world_size=world_size)
        train = D.ThreadLoader(train_ds, r.data.batch_size, sampler=train_sampler, threads=r.data.threads,
                               drop_last=True, pin_memory=pin)
        val = D.ThreadLoader(val_ds, r.data.batch_size, sampler=val_sampler, threads=r.data.threads, pin_memory=pin)
    pipe = Pipeline(r, device, rank, world_size, train, val, r.model.num_classes or len(classes), classes)
    if r.model.input == "dct" and "vit" in r.model.arch and r.model.normalize == "stats":
        pipe.normalize = _coefficient_stats(r, train_ds, device)
    return pipe


def _coefficient_stats(r: Recipe, ds, device: torch.device) -> T.Normalize:
    """Per-(c,u,v) statistics of the training crops — the same on every rank (fixed sampler)."""
    if isinstance(ds, D.TarShardDataset):  # every rank reads the same stream: rank 0's view of all shards
        ds = D.TarShardDataset(ds.shards, crop=ds.decode.crop, seed=r.train.seed + 1, rank=0, world_size=1,
                               on_error=r.data.on_error)
        loader = D.ThreadLoader(ds, r.data.batch_size, threads=r.data.threads, pin_memory=False)
    else:
        sampler = D.SubsetSampler(_limited(len(ds), r.data.limit_train), seed=r.train.seed + 1, rank=0, world_size=1)
        loader = D.ThreadLoader(ds, r.data.batch_size, sampler=sampler, threads=r.data.threads, pin_memory=False)
    size, exact = (r.data.image_size, r.data.image_size), r.data.decode == "exact"
    # over the inputs the model is fed: native (y, c) when the stem takes native chroma
    return D.compute_stats((T.as_jpeg_batch(b.to(device)) for b in loader),
                           lambda b: T.crops_to_coefficients(b, size, exact=exact, chroma=r.model.chroma),
                           max_batches=r.model.stats_batches)


def normalize_input(x: Tensor | tuple[Tensor, Tensor], mean: Tensor, std: Tensor) -> Tensor | tuple[Tensor, Tensor]:
    """Per-(c,u,v) standardisation of a coefficient image, or of native ``(y, c)`` (channel 0's
    statistics for y, channels 1–2's for c)."""
    if isinstance(x, tuple):
        y, c = x
        return TF.normalize(y.unsqueeze(1), mean[:1], std[:1]).squeeze(1), TF.normalize(c, mean[1:], std[1:])
    return TF.normalize(x, mean, std)


#: the torchvision baseline's counterpart of each dctnet transform a recipe can name: (torchvision
#: v2 class, the arguments both take); the others are DCT-only
_TORCHVISION_OPS = {
    "RandomHorizontalFlip": ("RandomHorizontalFlip", ("p",)),
    "RandomVerticalFlip": ("RandomVerticalFlip", ("p",)),
    "RandomGrayscale": ("RandomGrayscale", ("p",)),
    "ColorJitter": ("ColorJitter", ("brightness", "contrast", "saturation")),
    "RandAugment": ("RandAugment", ("num_ops", "magnitude", "num_magnitude_bins")),
    "RandomRequantize": ("JPEG", ("quality",)),
    "RandomErasing": ("RandomErasing", ("p", "scale", "ratio")),
    "Mixup": ("MixUp", ("alpha",)),
    "CutMix": ("CutMix", ("alpha",)),
}
#: transforms whose ``p`` torchvision's class lacks: a RandomApply gives it
_RANDOM_APPLY = ("ColorJitter", "RandomRequantize", "Mixup", "CutMix")
#: batch-level mixers (applied to the collated batch, not in the workers)
_MIXERS = ("Mixup", "CutMix")


def _torchvision_op(spec: dict, num_classes: int):
    """One augment entry as its torchvision v2 op, with dctnet's defaults for what it leaves out
    (so both pipelines draw from the same ranges)."""
    import inspect

    from torchvision.transforms import v2

    name = spec["name"]
    if name not in _TORCHVISION_OPS:
        raise ValueError(f"augment: {name} has no torchvision counterpart for model.input 'rgb' (a DCT-domain "
                         "transform); use it with input 'dct' or 'device-rgb'")
    cls, shared = _TORCHVISION_OPS[name]
    extra = [k for k, v in spec.items() if k not in ("name", *shared)
             and not (k == "p" and (v == 1.0 or name in _RANDOM_APPLY))]
    if extra:
        raise ValueError(f"augment: {name}'s {', '.join(extra)} has no torchvision counterpart for model.input 'rgb'")
    args = {k: v.default for k, v in inspect.signature(T.TRANSFORMS[name]).parameters.items()
            if v.default is not inspect.Parameter.empty}
    args.update({k: v for k, v in spec.items() if k != "name"})
    kwargs = {k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in args.items() if k in shared}
    op = getattr(v2, cls)(**kwargs, **({"num_classes": num_classes} if name in _MIXERS else {}))
    p = args.get("p", 1.0)
    return v2.RandomApply([op], p=p) if name in _RANDOM_APPLY and p != 1.0 else op


def _torchvision_augment(r: Recipe) -> tuple[list, list]:
    """Per-sample torchvision ops for the workers: (before normalisation, after it — erasing)."""
    ops = [(s["name"], _torchvision_op(s, 0)) for s in r.augment if s["name"] not in _MIXERS]
    return [op for n, op in ops if n != "RandomErasing"], [op for n, op in ops if n == "RandomErasing"]


def _torchvision_mixing(r: Recipe, num_classes: int) -> list:
    """Batch-level MixUp / CutMix for the torchvision baseline (with the data's class count)."""
    from torchvision.transforms import v2

    out = [_torchvision_op(s, num_classes) for s in r.augment if s["name"] in _MIXERS]
    # torchvision's mixers take class indices, not each other's soft targets: one of them per batch
    return [v2.RandomChoice(out)] if len(out) > 1 else out


def _torchvision_loaders(r: Recipe, root: Path, rank: int, world_size: int):
    from torchvision.transforms import v2

    size = r.data.image_size
    # the model's own normalisation (timm ViTs: 0.5/0.5), which `dctnet convert` folds into the stem
    norm = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(*input_mean_std(r.model.arch))]
    before, after = _torchvision_augment(r)
    # crop and augment the PIL image (Pillow's resize is ~1.5x faster than a tensor resize of the
    # full photo), then tensor, normalise and erase: torchvision's and timm's ImageNet order
    train_tf = v2.Compose([v2.RandomResizedCrop(size, scale=r.data.scale, antialias=True), *before, *norm, *after])
    # evaluation: the centre square of side crop_fraction·min(H, W), resized to the input size in
    # float — the geometry and arithmetic dctnet's CenterCrop + device resize give the other input
    # paths, so every row of a comparison sees the same pixels up to the decoders' rounding.
    # (Resize(size/fraction) + CenterCrop(size) shifts the crop by ~½ output pixel, and a uint8
    # resize rounds every pixel: measured, those alone flip 14% and 1.1% of a weak ViT's predictions.)
    val_tf = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True), _CentreSquare(r.data.crop_fraction),
                         v2.Resize((size, size), antialias=True), v2.Normalize(*input_mean_std(r.model.arch))])
    train_ds = _jpeg_image_folder(str(root / r.data.train), train_tf, r.data.on_error)
    val_ds = _jpeg_image_folder(str(root / r.data.val), val_tf, r.data.on_error)
    if r.data.limit_train:
        train_ds = torch.utils.data.Subset(train_ds, _limited(len(train_ds), r.data.limit_train))
    if r.data.limit_val:
        val_ds = torch.utils.data.Subset(val_ds, _limited(len(val_ds), r.data.limit_val))
    train_sampler = torch.utils.data.DistributedSampler(train_ds, num_replicas=world_size, rank=rank, shuffle=True,
                                                        seed=r.train.seed, drop_last=True)
    val_sampler = _RankSlice(len(val_ds), rank, world_size)
    common = {"batch_size": r.data.batch_size, "num_workers": r.data.workers, "collate_fn": _WorkerCpu(),
              "pin_memory": torch.cuda.is_available(), "persistent_workers": r.data.workers > 0}
    if r.data.workers > 0:
        common["prefetch_factor"] = 2
    train = torch.utils.data.DataLoader(train_ds, sampler=train_sampler, drop_last=True, **common)
    val = torch.utils.data.DataLoader(val_ds, sampler=val_sampler, **common)
    classes = train_ds.dataset.classes if isinstance(train_ds, torch.utils.data.Subset) else train_ds.classes
    return _RgbLoader(train), _RgbLoader(val), list(classes)


class _CentreSquare(torch.nn.Module):
    """torchvision transform: the centred square of side ``fraction · min(H, W)`` (rounded as
    :class:`dctnet.data.CenterCrop` rounds it)."""

    def __init__(self, fraction: float) -> None:
        super().__init__()
        self.fraction = fraction

    def forward(self, img):
        from torchvision.transforms.v2 import functional as TVF

        h, w = TVF.get_size(img)
        top, left, side, _ = D.CenterCrop(self.fraction).box(h, w)
        return TVF.crop(img, top, left, side, side)


class _RankSlice(torch.utils.data.Sampler):
    """Indices rank, rank+world, … (no padding: every validation image counted exactly once)."""

    def __init__(self, n: int, rank: int, world_size: int) -> None:
        self.n, self.rank, self.world_size = n, rank, world_size

    def __iter__(self):
        return iter(range(self.rank, self.n, self.world_size))

    def __len__(self) -> int:
        return len(range(self.rank, self.n, self.world_size))

