"""What feeds the model: datasets, loaders and the device-side input transforms of a recipe.

Three input paths (``model.input``):

* ``rgb`` — the baseline users come from: torchvision ``ImageFolder`` + Pillow decode +
  ``v2`` RandomResizedCrop/flip/normalize in ``DataLoader`` worker processes.
* ``device-rgb`` (plan A) — dctnet's reader delivers MCU windows of coefficients; the device
  decodes, crops, resizes (``crops_to_rgb``), flips and normalizes; the model is unchanged.
* ``dct`` — as ``device-rgb`` up to the resized crop, which is handed over as coefficients
  (``crops_to_coefficients``); flips and colour jitter act in the DCT domain, then the optional
  per-(c,u,v) standardisation; the model's stem takes coefficients.

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
        self.skipped: list[tuple[str, str, str]] = []
        self.set_epoch(0)

    # ------------------------------------------------------------------ epochs
    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        for loader in (self.train_loader, self.val_loader):
            if hasattr(loader, "set_epoch"):  # ThreadLoader: its sampler or its iterable dataset
                loader.set_epoch(epoch)
            elif hasattr(getattr(loader, "sampler", None), "set_epoch"):
                loader.sampler.set_epoch(epoch)
        # augmentation draws: a function of (seed, epoch, rank), so a resumed run repeats them
        self.generator = torch.Generator().manual_seed(hash((self.recipe.train.seed, epoch, self.rank)) & (2**62 - 1))

    def data_cpu_seconds(self) -> float:
        """Host CPU seconds spent producing batches so far (loader threads or worker processes)."""
        return _cpu_of(self.train_loader) + _cpu_of(self.val_loader)

    def batches(self, train: bool) -> Iterator[tuple[Tensor, Tensor]]:
        """Host batches moved to the device: ``(raw, labels)``; call :meth:`inputs` on ``raw``."""
        loader = self.train_loader if train else self.val_loader
        split = "train" if train else "val"
        if self.recipe.model.input == "rgb":
            for x, y, (_, _, skipped) in loader:  # (worker, CPU seconds, skipped samples)
                self._note_skipped(split, skipped)
                yield x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            return
        for batch in D.DevicePrefetcher(loader, self.device):
            self._note_skipped(split, batch.skipped)
            yield batch, batch.labels

    def _note_skipped(self, split: str, skipped) -> None:
        """Remember the samples a loader dropped under ``data.on_error: skip`` (the trainer
        counts them per epoch and writes their names to ``skipped.txt``)."""
        if skipped:
            self.skipped.extend((split, str(name), str(reason)) for _, name, reason in skipped)

    def take_skipped(self) -> list[tuple[str, str, str]]:
        """``(split, name, reason)`` of the samples skipped since the last call."""
        out, self.skipped = self.skipped, []
        return out

    # ------------------------------------------------------------------ device transforms
    def inputs(self, raw, labels: Tensor, train: bool) -> tuple[Tensor, Tensor]:
        """Model inputs and (possibly soft) targets from a device batch; augmentation when ``train``."""
        r, a = self.recipe, self.recipe.augment
        size = (r.data.image_size, r.data.image_size)
        kind = r.model.input
        if kind == "rgb":
            x = raw  # already cropped, flipped and normalized by torchvision in the workers
        elif kind == "device-rgb":
            x = T.crops_to_rgb(raw, size, exact=r.data.decode == "exact")
            if train:
                x = self._augment_rgb(x)
            mean, std = (torch.tensor(v, device=x.device).reshape(1, 3, 1, 1) for v in input_mean_std(r.model.arch))
            x = (x - mean) / std
        else:
            x = T.crops_to_coefficients(raw, size, exact=r.data.decode == "exact")
            if train:
                x = self._augment_dct(x)
            if r.model.chroma == "native":  # after the augmentation: flips and jitter commute with it
                x = T.native_chroma(x)
            if self.normalize is not None:
                x = normalize_input(x, self.normalize.mean.to(labels.device), self.normalize.std.to(labels.device))
        target = labels.long()
        if train and a.mixup > 0:
            parts = x if isinstance(x, tuple) else (x,)
            lam = torch.distributions.Beta(a.mixup, a.mixup).sample((parts[0].shape[0],)).to(labels.device)
            perm = torch.randperm(parts[0].shape[0], generator=self.generator).to(labels.device)
            onehot = torch.nn.functional.one_hot(target, self.num_classes).float()

            def mix(t: Tensor) -> Tensor:
                shape = (-1,) + (1,) * (t.dim() - 1)
                return lam.reshape(shape) * t + (1 - lam.reshape(shape)) * t[perm]

            x = tuple(mix(p) for p in parts) if isinstance(x, tuple) else mix(x)
            target = lam[:, None] * onehot + (1 - lam[:, None]) * onehot[perm]
        return x, target

    def _flip_mask(self, n: int, device: torch.device) -> Tensor:
        return (torch.rand(n, generator=self.generator) < self.recipe.augment.hflip).to(device, non_blocking=True)

    def _jitter(self, n: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        s = self.recipe.augment.color_jitter
        f = 1 + s * (2 * torch.rand(3, n, generator=self.generator) - 1)
        f = f.to(device, non_blocking=True)
        return f[0], f[1], f[2]

    def _augment_rgb(self, x: Tensor) -> Tensor:
        a = self.recipe.augment
        if a.hflip > 0:
            m = self._flip_mask(x.shape[0], x.device).reshape(-1, 1, 1, 1)
            x = torch.where(m, x.flip(-1), x)
        if a.color_jitter > 0:
            from torchvision.transforms.v2 import functional as TVF

            b, c, s = self._jitter(x.shape[0], x.device)
            x = (x * b.reshape(-1, 1, 1, 1)).clamp(0, 1)
            gray = TVF.rgb_to_grayscale(x).mean(dim=(-3, -2, -1), keepdim=True)
            x = ((x - gray) * c.reshape(-1, 1, 1, 1) + gray).clamp(0, 1)
            g = TVF.rgb_to_grayscale(x)
            x = ((x - g) * s.reshape(-1, 1, 1, 1) + g).clamp(0, 1)
        return x

    def _augment_dct(self, x: Tensor) -> Tensor:
        a = self.recipe.augment
        if a.hflip > 0:
            x = TF.hflip(x, self._flip_mask(x.shape[0], x.device))
        if a.color_jitter > 0:
            b, c, s = self._jitter(x.shape[0], x.device)
            x = TF.adjust_saturation(TF.adjust_contrast(TF.adjust_brightness(x, b), c), s)
        return x


# ---------------------------------------------------------------------- CPU accounting
class _WorkerCpu:
    """Collate for torchvision DataLoaders that stamps each batch with its worker's CPU time and
    the samples :class:`_JpegImageFolder` skipped: ``(x, y, (worker, cpu_seconds, skipped))``."""

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


def _torchvision_loaders(r: Recipe, root: Path, rank: int, world_size: int):
    import torchvision
    from torchvision.transforms import v2

    size = r.data.image_size
    # the model's own normalisation (timm ViTs: 0.5/0.5), which `dctnet convert` folds into the stem
    norm = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(*input_mean_std(r.model.arch))]
    train_tf = v2.Compose([v2.RandomResizedCrop(size, scale=r.data.scale, antialias=True),
                           v2.RandomHorizontalFlip(r.augment.hflip)]
                          + ([v2.ColorJitter(r.augment.color_jitter, r.augment.color_jitter, r.augment.color_jitter)]
                             if r.augment.color_jitter > 0 else []) + norm)
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

