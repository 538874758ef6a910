"""The recipe's schema: its five sections as dataclasses, every field with its default and, for a
numeric field, the range the recipe check holds it to (the field's ``metadata["range"]``: low, high,
low excluded, high excluded). ``recipes/README.md`` gives every field with its meaning; reading,
coercion and the checks are :mod:`dctnet.train.recipe`'s, :mod:`dctnet.train.recipe_coerce`'s and
:mod:`dctnet.train.recipe_check`'s.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from dctnet.data.sources import SOURCES, source_names
from dctnet.transforms.detection.presets import DETECTION_PRESETS

__all__ = ["DEFAULT_AUGMENT", "DataConfig", "DetectConfig", "EmaConfig", "ModelConfig", "OptimConfig", "Recipe",
           "RecipeError", "TrainConfig"]

_INF = float("inf")


def _within(default: Any, lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> Any:
    """A numeric field whose values lie between ``lo`` and ``hi`` (each included unless open)."""
    return field(default=default, metadata={"range": (lo, hi, lo_open, hi_open)})


def _at_least(default: Any, lo: float) -> Any:
    """A numeric field of values ``lo`` or more."""
    return _within(default, lo, _INF, hi_open=True)


class RecipeError(ValueError):
    """A recipe that cannot be used; the message names the file, the key and the reason."""


@dataclass
class DataConfig:
    # the registered data sources (dctnet.data.sources): folder, synthetic, csv, cache, shards, hf, coco and any
    # registered since (the annotation is read when a recipe is built)
    source: Literal[source_names()] = "folder"
    root: str = "${DCTNET_DATA:../shared/data/imagenette}"  # folder root, or synthetic output dir
    # under root: subfolder, cache directory, or shard glob (train-*.tar); source hf: a save_to_disk
    # directory, or a parquet file, glob or folder; source csv: a CSV table of image paths and class names;
    # source coco: {images: DIR, annotations: FILE.json}
    # (relative to root unless absolute)
    train: str | dict[str, str] = "train"
    val: str | dict[str, str] = "val"
    # source hf (Hugging Face datasets): the image column (JPEG bytes, read undecoded) and the label
    # column (ClassLabel names become the classes) — ImageNet-1k's names on the Hub; streaming: read
    # the data as a stream (split and mixed as tar shards are) instead of by row
    image_column: str = "image"
    label_column: str = "label"
    streaming: bool = False
    on_error: Literal["raise", "skip"] = "raise"  # unreadable files: stop naming the file, or skip and report them
    # which libjpeg warnings make a file unreadable: raise = those that lost data (truncated, corrupt
    # entropy-coded data), accept = none (train on libjpeg's fill-in), strict = all
    warnings: Literal["raise", "accept", "strict"] = "raise"
    verify: Literal["stat", "hash", "none"] = "stat"  # source: cache — how the cache's sources are checked
    cache_checksums: bool = True      # source: cache — check each record's checksum as it is read (false: skip)
    # streamed sources (shards, hf with streaming): shards each reader keeps open at once, read front to back, drawn
    # from at random before the shuffle buffer — class-sorted shards mix ~2 classes per open shard
    interleave: int = _within(32, 1, 4096)
    buffer: int = _at_least(1000, 1)  # streamed sources: the shuffle buffer each reader draws from
    image_size: int = _within(224, 16, 8192)  # side of the square crops fed to the model
    batch_size: int = _at_least(64, 1)  # per process
    threads: int = _within(2, 1, 1024)  # dctnet loader threads (input dct / device-rgb)
    workers: int = _within(2, 0, 1024)  # DataLoader worker processes (input rgb: torchvision pipeline)
    scale: tuple[float, float] = (0.08, 1.0)   # RandomResizedCrop area range
    interpolation: Literal["bilinear", "bicubic"] = "bilinear"  # the training crop's antialiased resize (timm, DeiT: bicubic)
    # the eval transform: the model's own (timm's resolve_data_config over its pretrained_cfg;
    # torchvision models: Resize(size/0.875) + CenterCrop, bilinear), each field overridable
    crop_pct: float | None = _within(None, 0, 4, lo_open=True)  # resize to floor(eval crop / crop_pct), then the centre crop
    # torchvision's --val-resize-size / --val-crop-size: resize the shorter side to eval_resize, then the
    # eval_crop centre crop (e.g. train at 176, eval 232 → 224); eval_crop alone keeps the crop_pct rule.
    # Neither set: image_size, or the model's test_input_size / test_crop_pct where its timm config has one
    eval_resize: int | None = _within(None, 16, 8192)
    eval_crop: int | None = _within(None, 16, 8192)
    crop_mode: Literal["center", "squash", "border"] | None = None
    eval_interpolation: Literal["bilinear", "bicubic"] | None = None
    decode: Literal["float", "exact"] = "float"  # device decode: float maths, or libjpeg's integer decode (= Pillow's pixels)
    # the pixel stages' values: float, or 8bit — rounded to 1/255 levels after the crop and after each op
    # the RGB arm runs on 8-bit PIL images (policies, ColorJitter, grayscale), as Pillow hands them over
    pixels: Literal["float", "8bit"] = "float"
    # repeated augmentation (DeiT's --repeated-aug: 3; torchvision's --ra-sampler --ra-reps 4): each image N
    # times an epoch, spread over the ranks, each repeat its own crop and draws; 1: off
    repeated_aug: int = _within(1, 1, 4095)
    limit_train: int = _at_least(0, 0)  # use only the first N training samples (0: all), for smoke tests
    limit_val: int = _at_least(0, 0)
    synthetic_classes: int = _within(6, 2, 100_000)  # source: synthetic — classes, images per class, JPEG side range
    synthetic_train_per_class: int = _at_least(400, 1)
    synthetic_val_per_class: int = _at_least(100, 1)
    synthetic_size: tuple[int, int] = (64, 112)


@dataclass
class ModelConfig:
    arch: str = "resnet18"            # torchvision name (resnet18, resnet50, vit_b_16, …) or timm:NAME
    input: Literal["rgb", "device-rgb", "dct"] = "dct"  # (detection recipes, data.source coco: device-rgb)
    # rgb: torchvision CPU pipeline (Pillow decode, v2 transforms in DataLoader workers) — the baseline
    # device-rgb: dctnet reads coefficients; decode/crop/resize on the device; unchanged model (plan A)
    # dct: dctnet reads coefficients; the model's first layer is replaced by a DCT stem
    # input dct: the DCT stem, a name of dctnet.models.STEMS as swap_stem and `dctnet convert` take them —
    # dct-patch (ViT, Swin, ConvNeXt), idct (any model), dct8 / dct-up (learned, ResNets); null: the
    # model's default, swap_stem's (dct-patch where the first conv is a block-aligned patchify conv, else idct)
    stem: str | None = None
    keep: int | None = _within(None, 1, 64)  # frequencies kept per block (zigzag order); None: all 64
    chroma: Literal["upsampled", "native"] = "upsampled"  # DCT ViTs: chroma on the luma grid, or native 4:2:0 (y, c)
    normalize: Literal["stats", "none"] = "stats"  # input dct + ViT: per-(c,u,v) standardisation from data
    stats_batches: int = _at_least(20, 1)  # batches used for those statistics
    num_classes: int = _at_least(0, 0)  # 0: from the data
    # stochastic depth: timm's --drop-path, torchvision's stochastic_depth_prob
    drop_path_rate: float = _within(0.0, 0, 1, hi_open=True)
    # weights to start from: a state_dict (timm / torchvision, or a dctnet run's last.pt); for input dct
    # an RGB checkpoint is loaded into the RGB model and converted into the stem (exact where the stem is);
    # a head of another class count is left at its init
    init: str | None = None


@dataclass
class OptimConfig:
    optimizer: Literal["sgd", "adamw"] = "sgd"
    lr: float = _within(0.1, 0, _INF, lo_open=True, hi_open=True)  # peak learning rate for the global batch of lr_batch samples
    lr_batch: int = _at_least(256, 1)  # lr scales linearly with (global batch / lr_batch)
    momentum: float = _within(0.9, 0, 1, hi_open=True)
    weight_decay: float = _at_least(5e-5, 0)  # not applied to biases and norm parameters
    epochs: int = _at_least(10, 1)
    warmup_epochs: float = _at_least(1.0, 0)  # linear warm-up, then cosine to zero
    label_smoothing: float = _within(0.1, 0, 1, hi_open=True)
    stem_lr_mult: float = _at_least(1.0, 0)  # learning-rate multiplier of the DCT stem's parameters
    grad_clip: float = _at_least(0.0, 0)  # max gradient norm (0: off)
    # timm's --min-lr / --warmup-lr (absolute, not scaled with the batch): the warm-up climbs linearly from
    # warmup_lr, the cosine decays to min_lr
    min_lr: float = _at_least(0.0, 0)
    warmup_lr: float = _at_least(0.0, 0)


#: the training augmentation when a recipe names none: a horizontal flip of half the samples
DEFAULT_AUGMENT: tuple[dict[str, Any], ...] = ({"name": "RandomHorizontalFlip", "p": 0.5},)


@dataclass
class EmaConfig:
    decay: float = 0.0                # 0: no EMA; timm's --model-ema-decay (0.9998), torchvision's (0.99998)
    every: int = 1                    # average every N optimizer updates (torchvision's --model-ema-steps: 32)
    warmup: bool = False              # timm ModelEmaV3's warm-up of the decay (--model-ema-warmup)
    adjust: bool = False              # torchvision's rescaling of the decay by world size, batch, every and epochs


@dataclass
class TrainConfig:
    seed: int = _within(0, 0, 2**63 - 1)
    out: str = "runs/${name}"         # run directory: metrics.jsonl, plot.png, last.pt, recipe.yaml
    amp: Literal["auto", "off", "bf16", "fp16"] = "auto"   # auto: bf16 on CUDA, off on CPU
    compile: bool = False             # torch.compile the model
    # CUDA: convolutional models (and their pixel inputs) in channels_last, cudnn.benchmark on (detection:
    # the detector's weights only, no benchmark: its image sizes vary); nothing on a CPU
    channels_last: bool = True
    # auto: cuda:LOCAL_RANK when available, else cpu; cuda (and cuda:N under torchrun): cuda:LOCAL_RANK
    device: str = "auto"
    eval_every: int = _at_least(1, 1)  # epochs between evaluations (the last epoch always evaluates)
    checkpoint: bool = True           # write last.pt after every epoch (resume with --resume)
    progress: bool = True             # progress bars (rank 0)
    log_every: int = _at_least(20, 1)  # steps between step records in metrics.jsonl
    torch_threads: int = _within(0, 0, 4096)  # intra-op threads (0: torch's default)
    max_steps: int = _at_least(0, 0)  # stop each epoch after N steps (0: full epochs), for smoke tests
    # model EMA (timm's --model-ema, torchvision's --model-ema): evaluated each epoch beside the model
    # (val_top1_ema), saved in the checkpoint and resumed
    ema: EmaConfig = field(default_factory=EmaConfig)


@dataclass
class DetectConfig:
    """Detection recipes (``data.source: coco``): the training geometry and the detector's own resize."""

    # torchvision's --data-augmentation: a name of dctnet.transforms.detection's preset table (its DETECTION_PRESETS)
    preset: Literal[DETECTION_PRESETS] = "hflip"
    hflip_prob: float = _within(0.5, 0, 1)
    masks: bool = False               # instance masks in the targets (Mask R-CNN)
    # torchvision's references' --use-copypaste: SimpleCopyPaste over each training batch (lsj preset;
    # the instance masks are read for it, whatever the model)
    copy_paste: bool = False
    # instead of a preset: the training ops by torchvision's names with their arguments, in order
    # (dctnet.transforms.detection; SanitizeBoundingBoxes is appended as the presets end)
    ops: list[dict[str, Any]] = field(default_factory=list)
    # leave out training images without a usable box (no annotation, or every box at most 1 px wide or
    # tall), as torchvision's detection and segmentation references always do; false trains on them as
    # background-only images. The val split is evaluated whole either way
    drop_unannotated: bool = True
    # the detector: another ResNet for the ResNet-50 of fasterrcnn/maskrcnn_resnet50_fpn, the stages its
    # FPN reads, the smallest anchor per feature map, and any other argument of torchvision's builder
    backbone: str | None = None
    returned_layers: list[int] | None = None
    anchor_sizes: list[int] | None = None
    model_args: dict[str, Any] = field(default_factory=dict)
    # the detector's GeneralizedRCNNTransform: shorter side / longer side cap; 0 keeps the model's default
    min_size: int = _within(0, 0, 8192)
    max_size: int = _within(0, 0, 8192)
    # false: no detector resize at all — images reach the model at the size the ops leave them (train
    # crops and whole eval images at the files' scale); both arms turn the model's own resize off
    resize: bool = True
    # segmentation models (torchvision's segmentation references): train RandomResize(0.5-2 x base_size),
    # flip, PadIfSmaller + RandomCrop(crop_size); eval Resize(base_size)
    base_size: int = _within(520, 16, 8192)
    crop_size: int = _within(480, 16, 8192)


@dataclass
class Recipe:
    name: str = "run"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    # training augmentation on the device: dctnet.transforms by name with their arguments, in order
    augment: list[dict[str, Any]] = field(default_factory=lambda: [dict(t) for t in DEFAULT_AUGMENT])
    train: TrainConfig = field(default_factory=TrainConfig)
    detect: DetectConfig = field(default_factory=DetectConfig)

    @property
    def detection(self) -> bool:
        """A detection or segmentation recipe (COCO data, a torchvision detector or segmentation model)."""
        source = SOURCES.get(self.data.source)
        return source is not None and source.task == "detection"

    @property
    def segmentation(self) -> bool:
        """A semantic segmentation recipe (a torchvision segmentation model on class-index PNGs)."""
        from dctnet.models.detection import segmenter_names  # (torchvision: the detection recipes' dependency)

        return self.detection and self.model.arch.split(":", 1)[-1] in segmenter_names()

    def to_dict(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x

