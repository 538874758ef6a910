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

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from dctnet import data as D
from dctnet import transforms as T
from dctnet.transforms import functional as TF
from dctnet.transforms.normalization import data_config, input_mean_std
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
        #: (split, path, reason) of files left out before training (a full decode found them
        #: unusable under data.warnings; data.on_error: skip), and (split, path, warnings) of
        #: files used that read with warnings that lost nothing — the same on every rank
        self.excluded: list[tuple[str, str, str]] = []
        self.warned: list[tuple[str, str, str]] = []
        mean, std = input_mean_std(r.model.arch)
        #: coefficient image or pixels → the unchanged model's normalised RGB (device-rgb), by the one rule
        self.to_rgb = T.ToRGB(mean, std).to(self.device)
        #: the model's eval transform (timm's resolve_data_config rule; recipe fields override)
        self.eval_config = eval_config(r)
        self.eval_fill = D.ResizeCenterCrop.from_config(self.eval_config).fill(self.eval_config["mean"])
        #: the recipe's augmentation on the device (None: no augment list): the recipe's list in its
        #: order on the pixel crops, then what the model takes — ToRGB (device-rgb) or ToCoefficients
        #: (dct), so the batch changes representation only where an op needs it
        self.augment: T.Compose | None = None
        if r.augment and r.model.input != "rgb":
            ops = T.build_transform(r.augment, num_classes=self.num_classes, seed=r.train.seed, mean=mean, std=std,
                                    label_smoothing=r.optim.label_smoothing, interpolation=r.data.interpolation)
            last = self.to_rgb if r.model.input == "device-rgb" else T.ToCoefficients()
            self.augment = T.Compose([*ops.transforms, last], seed=r.train.seed).to(self.device)
        #: the torchvision/timm baseline's batch-level mixing (input rgb)
        self.rgb_mixing = _baseline_mixing(r, self.num_classes) if r.model.input == "rgb" else []
        #: labels come out of the augmentation already smoothed (timm's Mixup folds optim.label_smoothing
        #: into its targets, as timm's train.py does): the loss must not smooth them again
        mixers = list(self.augment.modules()) if self.augment is not None else self.rgb_mixing
        self.targets_smoothed = any(type(m).__name__ == "Mixup" and getattr(m, "label_smoothing", 0) for m in mixers)
        #: seconds the training loop spent blocked on the host loaders (see :class:`_TimedLoader`)
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
                     f"crop: {self.crop_description()}", f"device augmentation: {self.augment!r}"]
        return "\n".join(lines) + "\n"

    def crop_description(self) -> str:
        r, c = self.recipe, self.eval_config
        return (f"train RandomResizedCrop(size={r.data.image_size}, scale={tuple(r.data.scale)}, "
                f"interpolation={r.data.interpolation}, antialias=True); eval resize to "
                f"floor({r.data.image_size}/{c['crop_pct']}) ({c['crop_mode']}, {c['interpolation']}) + centre crop")

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

    def device_step(self, batch, augment: T.Transform | None, generator: torch.Generator | None):
        """``JpegBatch`` → ``(inputs, targets, labels)``, one representation change a stage: decode and
        resize the crops to pixels, run the augmentation there (pixel ops clamped as torchvision does;
        labels become soft targets under mixing), then what the model takes — normalised RGB for
        ``device-rgb`` (no DCT round trip), or one forward DCT, the coefficient-only ops and the
        per-(c,u,v) standardisation for ``dct``."""
        r = self.recipe
        size, exact = (r.data.image_size, r.data.image_size), r.data.decode == "exact"
        labels = batch.labels
        # eval batches carry the resize of the model's eval crop (batch.resize); training crops do not
        evaluating = getattr(batch, "resize", None) is not None
        interpolation = self.eval_config["interpolation"] if evaluating else r.data.interpolation
        fill = self.eval_fill if evaluating else 0.0
        if augment is None:
            if r.model.input == "device-rgb":
                rgb = T.crops_to_rgb(batch, size, exact=exact, interpolation=interpolation, fill=fill)
                return self.rgb_normalize(rgb), labels, labels
            x, target = T.crops_to_coefficients(batch, size, exact=exact, interpolation=interpolation, fill=fill), labels
        else:
            x = T.crops_to_rgb(batch, size, exact=exact, interpolation=interpolation)
            x, target = augment(x, labels, generator=generator)
            if r.model.input == "device-rgb":
                return x, target, labels
        if r.model.chroma == "native":  # after the augmentation: every transform acts on the full chroma grid
            x = T.native_chroma(x)
        if self.normalize is not None:
            x = normalize_input(x, self.normalize.mean, self.normalize.std)
        return x, target, labels

    def rgb_normalize(self, rgb: Tensor) -> Tensor:
        """``(rgb − mean) / std`` with the model's normalisation (:meth:`ToRGB.for_model`'s)."""
        return (rgb - self.to_rgb.mean.to(rgb)) / self.to_rgb.std.to(rgb)


def _described(obj) -> str:
    """``repr`` of a transform, or its public attributes where the class has no repr of its own (timm's Mixup)."""
    text = repr(obj)
    if " object at 0x" in text:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(obj).items() if not k.startswith("_"))
        text = f"{type(obj).__module__}.{type(obj).__name__}({fields})"
    return text


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


def _pillow12_posterize(img, bits_to_keep, **__):
    """timm's posterize as it ran on Pillow < 13, where ``ImageOps.posterize(img, 0)`` gave black:
    Pillow 13 refuses 0 bits, which timm's ``-inc1`` policies draw (about 1 sample in 500 of
    DeiT's list). dctnet's ``TimmAugment`` keeps 0 bits as black too."""
    from PIL import ImageOps

    if bits_to_keep >= 8:
        return img
    if bits_to_keep <= 0:
        return img.point(lambda i: 0)
    return ImageOps.posterize(img, bits_to_keep)


def _with_pillow12_posterize(transform):
    """``transform`` (timm's RandAugment / AutoAugment) with its posterize ops on
    :func:`_pillow12_posterize`; every other op, probability and magnitude unchanged."""
    from timm.data import auto_augment as timm_aa

    ops = list(getattr(transform, "ops", []))
    for sub in getattr(transform, "policy", []):  # AutoAugment: a list of sub-policies
        ops.extend(sub)
    for op in ops:
        if getattr(op, "aug_fn", None) is timm_aa.posterize:
            op.aug_fn = _pillow12_posterize
    return transform


class _PilLoader:
    """torchvision's default loader (Pillow, RGB); ``accept_truncated`` reads a cut file as Pillow
    can (the rest grey), as ``data.warnings: accept`` has dctnet train on libjpeg's fill-in."""

    def __init__(self, accept_truncated: bool) -> None:
        self.accept_truncated = accept_truncated

    def __call__(self, path: str):
        from PIL import Image, ImageFile

        with open(path, "rb") as f:
            img = Image.open(f)
            if not self.accept_truncated:
                return img.convert("RGB")
            before, ImageFile.LOAD_TRUNCATED_IMAGES = ImageFile.LOAD_TRUNCATED_IMAGES, True  # Pillow's only switch
            try:
                return img.convert("RGB")
            finally:
                ImageFile.LOAD_TRUNCATED_IMAGES = before


def _jpeg_image_folder(root: str, transform, on_error: str, accept_truncated: bool = False,
                       usable: list[str] | None = None):
    """torchvision's ImageFolder over the files dctnet's datasets read (JPEG names only, empty
    classes kept, so labels match; only ``usable`` ones when given), with bad files under
    ``on_error`` as everywhere else: a :class:`dctnet.JpegError` naming the file, or a skipped
    sample that the collate reports."""
    import torchvision
    from dctnet import JpegError
    from dctnet.data.dataset import IMG_EXTENSIONS

    class JpegImageFolder(torchvision.datasets.ImageFolder):
        def __getitem__(self, index: int):
            path, target = self.samples[index]
            try:
                sample = self.loader(path)
            except (OSError, ValueError, SyntaxError) as exc:  # what Pillow raises for bad image data
                reason = f"{type(exc).__name__}: {exc}"
                if on_error == "raise":
                    raise JpegError(reason, path) from None
                return _Skipped((index, path, reason))
            # a transform's error is not the file's (it is raised, not blamed on the file)
            sample = self.transform(sample) if self.transform is not None else sample
            target = self.target_transform(target) if self.target_transform is not None else target
            return sample, target

    ds = JpegImageFolder(root, transform=transform, allow_empty=True, loader=_PilLoader(accept_truncated),
                         is_valid_file=lambda p: p.lower().endswith(IMG_EXTENSIONS))
    if usable is not None:
        keep = {os.path.normpath(p) for p in usable}
        ds.samples = ds.imgs = [s for s in ds.samples if os.path.normpath(s[0]) in keep]
        ds.targets = [t for _, t in ds.samples]
    return ds


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


def eval_config(r: Recipe) -> dict:
    """The model's eval transform (:func:`dctnet.transforms.normalization.data_config`) at the
    recipe's image size, with the recipe's ``data.crop_pct`` / ``crop_mode`` / ``eval_interpolation``
    where set."""
    s = r.data.image_size
    return data_config(r.model.arch, input_size=(3, s, s), crop_pct=r.data.crop_pct, crop_mode=r.data.crop_mode,
                       interpolation=r.data.eval_interpolation)


def build_pipeline(recipe: Recipe, device: torch.device, rank: int = 0, world_size: int = 1) -> Pipeline:
    """Datasets and loaders for ``recipe`` on this rank (training split by rank, drop_last;
    validation split by rank without padding, so summed counts cover it exactly once)."""
    r = recipe
    root = data_root(r)
    crop = D.RandomResizedCrop(scale=r.data.scale)
    center = D.ResizeCenterCrop.from_config(eval_config(r))
    policy = dict(seed=r.train.seed, on_error=r.data.on_error)
    excluded: list[tuple[str, str, str]] = []  # (split, path, reason): files left out before training
    warned: list[tuple[str, str, str]] = []    # (split, path, warnings): files used, read with warnings
    if r.data.source not in ("cache", "shards"):  # an image folder (or the generated synthetic one)
        # which files are usable is decided once, by a full decode of each under data.warnings, for
        # every epoch, every rank and both arms (the torchvision baseline decodes with Pillow, which
        # reads PNG data under a .jpg name and fills in corrupt data without a word)
        threads = max(1, len(os.sched_getaffinity(0)) // world_size)
        folders = {}
        for split, box in (("train", crop), ("val", center)):
            folders[split] = D.ImageFolderDataset(root / getattr(r.data, split), crop=box, warnings=r.data.warnings,
                                                  **policy)
            excluded += [(split, path, reason) for path, reason in folders[split].check(threads=threads)]
            warned += [(split, path, "; ".join(w)) for path, w in folders[split].warned.items()]
    if r.model.input == "rgb":
        usable = None
        if r.data.source not in ("cache", "shards"):
            usable = {split: [p for p, _ in ds.samples] for split, ds in folders.items()}
        train, val, classes = _torchvision_loaders(r, root, rank, world_size, usable)
        n_classes = r.model.num_classes or len(classes)
        pipe = Pipeline(r, device, rank, world_size, train, val, n_classes, classes)
        pipe.excluded, pipe.warned = excluded, warned
        return pipe
    pin = device.type == "cuda"
    if r.data.source == "cache":
        # on a GPU the cache's batches are padded (dense) or expanded (sparse) on the device: the
        # host moves only each window's blocks, or only the compressed records
        train_ds = D.CacheDataset(root / r.data.train, crop=crop, verify=r.data.verify, device_expand=pin, **policy)
        val_ds = D.CacheDataset(root / r.data.val, crop=center, verify=r.data.verify, device_expand=pin, **policy)
    elif r.data.source == "shards":
        train_ds = D.TarShardDataset(str(root / r.data.train), crop=crop, rank=rank, world_size=world_size,
                                     warnings=r.data.warnings, **policy)
        val_ds = D.TarShardDataset(str(root / r.data.val), crop=center, shuffle=False, rank=rank,
                                   world_size=world_size, warnings=r.data.warnings, **policy)
    else:
        train_ds, val_ds = folders["train"], folders["val"]
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
    pipe.excluded, pipe.warned = excluded, warned
    if r.model.input == "dct" and "vit" in r.model.arch and r.model.normalize == "stats":
        pipe.normalize = _coefficient_stats(r, train_ds, device).to(device)  # on the device once, not per step
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
                           lambda b: T.crops_to_coefficients(b, size, exact=exact, chroma=r.model.chroma,
                                                             interpolation=r.data.interpolation),
                           max_batches=r.model.stats_batches)


def normalize_input(x: Tensor | tuple[Tensor, Tensor], mean: Tensor, std: Tensor) -> Tensor | tuple[Tensor, Tensor]:
    """Per-(c,u,v) standardisation of a coefficient image, or of native ``(y, c)`` (channel 0's
    statistics for y, channels 1–2's for c)."""
    if isinstance(x, tuple):
        y, c = x
        return TF.normalize(y.unsqueeze(1), mean[:1], std[:1]).squeeze(1), TF.normalize(c, mean[1:], std[1:])
    return TF.normalize(x, mean, std)


def _spec_args(spec: dict) -> dict:
    """A spec's arguments with the dctnet class's defaults filled in (what both arms then use)."""
    import inspect

    cls = T.TRANSFORMS[spec["name"]]
    args = {k: v.default for k, v in inspect.signature(cls).parameters.items() if v.default is not inspect.Parameter.empty}
    args.update({k: tuple(v) if isinstance(v, list) else v for k, v in spec.items() if k != "name"})
    return args


def _baseline_op(spec: dict, r: Recipe, num_classes: int):
    """One augment entry as torchvision's or timm's own implementation, mapped one to one (same
    arguments, same probabilities — a RandomApply only where dctnet's class has a ``p`` that the
    library's lacks). Per-sample ops run on the PIL image in the workers; the mixers on the batch."""
    from torchvision.transforms import v2

    name, a = spec["name"], _spec_args(spec)
    mean, std = input_mean_std(r.model.arch)

    def pil_fill(fill):  # dctnet's fills are on the [0, 1] scale; torchvision's PIL ops take 0..255
        return None if fill is None else [round(255 * v) for v in ((fill,) * 3 if isinstance(fill, (int, float)) else fill)]

    def maybe(op, p):
        return v2.RandomApply([op], p=p) if p < 1.0 else op

    if name in ("RandomHorizontalFlip", "RandomVerticalFlip", "RandomGrayscale"):
        return getattr(v2, name)(p=a["p"])
    if name == "ColorJitter":
        return maybe(v2.ColorJitter(a["brightness"], a["contrast"], a["saturation"], a["hue"]), a["p"])
    if name == "RandAugment":
        return v2.RandAugment(a["num_ops"], a["magnitude"], a["num_magnitude_bins"], interpolation=a["interpolation"],
                              fill=pil_fill(a["fill"]))
    if name == "TrivialAugmentWide":
        return v2.TrivialAugmentWide(a["num_magnitude_bins"], interpolation=a["interpolation"], fill=pil_fill(a["fill"]))
    if name == "AutoAugment":
        return v2.AutoAugment(v2.AutoAugmentPolicy.IMAGENET, interpolation=a["interpolation"], fill=pil_fill(a["fill"]))
    if name in ("TimmAugment", "ThreeAugment"):
        from timm.data.auto_augment import auto_augment_transform, rand_augment_transform
        from timm.data.transforms import str_to_pil_interp

        policy = a.get("policy", "3a")
        # timm's create_transform: fill = the normalisation mean in 8 bits, translate_const from the crop
        hparams = dict(translate_const=int(r.data.image_size * 0.45), img_mean=tuple(min(255, round(255 * m)) for m in mean),
                       interpolation=str_to_pil_interp(spec.get("interpolation", r.data.interpolation)),
                       translate_pct=a.get("translate_pct", 0.45))
        op = (rand_augment_transform if policy.startswith("rand") else auto_augment_transform)(policy, hparams)
        return _with_pillow12_posterize(op)
    if name == "RandomErasing":
        scale = a["scale"] or ((0.02, 0.33) if a["mode"] is None else (0.02, 1.0 / 3.0))
        ratio = a["ratio"] or ((0.3, 3.3) if a["mode"] is None else (0.3, 1.0 / 0.3))
        if a["mode"] is None:
            return v2.RandomErasing(p=a["p"], scale=scale, ratio=ratio, value=a["value"])
        from timm.data.random_erasing import RandomErasing

        return RandomErasing(probability=a["p"], min_area=scale[0], max_area=scale[1],
                             min_aspect=ratio[0], max_aspect=ratio[1], mode=a["mode"],
                             min_count=a["min_count"], max_count=a["max_count"], device="cpu")
    if name == "RandomRequantize":
        return maybe(v2.JPEG(a["quality"]), a["p"])
    if name == "Mixup":
        from timm.data import Mixup

        return Mixup(mixup_alpha=a["mixup_alpha"], cutmix_alpha=a["cutmix_alpha"], cutmix_minmax=a["cutmix_minmax"],
                     prob=a["prob"], switch_prob=a["switch_prob"], mode=a["mode"], correct_lam=a["correct_lam"],
                     label_smoothing=r.optim.label_smoothing, num_classes=num_classes)
    if name in ("MixUp", "CutMix"):
        return getattr(v2, name)(alpha=a["alpha"], num_classes=num_classes)
    raise ValueError(f"augment: {name} has no torchvision or timm counterpart for model.input 'rgb' (a DCT-domain "
                     "transform); use it with input 'dct' or 'device-rgb'")


def _baseline_augment(r: Recipe) -> tuple[list, list]:
    """Per-sample ops for the workers: (on the PIL crop, after normalisation — erasing, which timm and
    torchvision run on the normalised tensor)."""
    ops = [(s["name"], _baseline_op(s, r, 0)) for s in r.augment if s["name"] not in T.MIXERS]
    return [op for n, op in ops if n != "RandomErasing"], [op for n, op in ops if n == "RandomErasing"]


def _baseline_mixing(r: Recipe, num_classes: int) -> list:
    """Batch-level mixing for the baseline (with the data's class count): timm's ``Mixup`` or
    torchvision's ``MixUp`` / ``CutMix`` (a recipe names at most one mixer)."""
    return [_baseline_op(s, r, num_classes) for s in r.augment if s["name"] in T.MIXERS]


def _torchvision_loaders(r: Recipe, root: Path, rank: int, world_size: int,
                         usable: dict[str, list[str]] | None = None):
    """The torchvision baseline's loaders; ``usable``: per split, the files dctnet decided are
    usable (the others are left out here too)."""
    from torchvision.transforms import v2

    size = r.data.image_size
    # the model's own normalisation (timm ViTs: 0.5/0.5), which `dctnet convert` folds into the stem
    norm = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(*input_mean_std(r.model.arch))]
    before, after = _baseline_augment(r)
    # crop and augment the PIL image (Pillow's resize is ~1.5x faster than a tensor resize of the
    # full photo), then tensor, normalise and erase: torchvision's and timm's ImageNet order
    crop = v2.RandomResizedCrop(size, scale=r.data.scale, interpolation=v2.InterpolationMode(r.data.interpolation),
                                antialias=True)
    train_tf = v2.Compose([crop, *before, *norm, *after])
    # evaluation: the model's eval transform as timm builds it (resize the shorter side to
    # floor(size / crop_pct) with the model's interpolation, centre crop, normalise) — the same
    # data config dctnet's eval crop reproduces on the device
    from timm.data import create_transform

    cfg = eval_config(r)
    val_tf = create_transform(input_size=cfg["input_size"], interpolation=cfg["interpolation"], crop_pct=cfg["crop_pct"],
                              crop_mode=cfg["crop_mode"], mean=cfg["mean"], std=cfg["std"], is_training=False)
    accept = r.data.warnings == "accept"
    train_ds = _jpeg_image_folder(str(root / r.data.train), train_tf, r.data.on_error, accept,
                                  usable["train"] if usable else None)
    val_ds = _jpeg_image_folder(str(root / r.data.val), val_tf, r.data.on_error, accept,
                                usable["val"] if usable else None)
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


class _RankSlice(torch.utils.data.Sampler):
    """Indices rank, rank+world, … (no padding: every validation image counted exactly once)."""

    def __init__(self, n: int, rank: int, world_size: int) -> None:
        self.n, self.rank, self.world_size = n, rank, world_size

    def __iter__(self):
        return iter(range(self.rank, self.n, self.world_size))

    def __len__(self) -> int:
        return len(range(self.rank, self.n, self.world_size))

