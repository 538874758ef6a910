"""Datasets, collate, samplers, loaders and statistics (the CPU side of training).

Data flows: files → :mod:`dctnet.codec` → native coefficient planes → crop window (host) →
:func:`collate` → :class:`dctnet.transforms.JpegBatch` → device (prefetcher) → transforms.

Bad files follow one rule everywhere (datasets, shard readers, the webdataset step, cache builds,
recipes' ``data.on_error``): ``on_error="raise"`` by default — a :class:`dctnet.JpegError` naming
the file and the reason — or ``"skip"``, which drops the sample and reports it (each batch's
``skipped``, the trainer's counts and ``skipped.txt``, a cache's list of bad files).

The sources a recipe's ``data.source`` names are registered in :mod:`dctnet.data.sources`.
"""

# the data sources register on import (dctnet.data.sources): folder and synthetic here, the others
# with their datasets below
from dctnet.data import folder  # noqa: F401
from dctnet.data.cache import CacheDataset, CacheError, CacheRecordError, build_cache, open_cache
from dctnet.data.crop import (
    CenterCrop,
    FullImage,
    RandomResizedCrop,
    ResizeCenterCrop,
    crop_frames,
    draw_boxes,
    mcu_window,
    mcu_windows,
)
from dctnet.data.sample import CoefficientSample
from dctnet.data.dataset import (
    ImageFolderDataset,
    UnusedFilesWarning,
    apply_orientation,
    sample_from_coefficients,
)
from dctnet.data.coco import CocoDataset, collate_detection
from dctnet.data.csv_list import CsvImageDataset
from dctnet.data.folds import Folds, SubsetSampler, all_reduce_metric, kfold
from dctnet.data.collate import collate
from dctnet.data.loader import DevicePrefetcher, EpochSampler, RepeatedAugSampler, ThreadLoader, make_dataloader
from dctnet.data.shards import TarShardDataset, WdsDecode, wds_decode, write_shards
from dctnet.data.shuffle_quality import ShuffleQuality, shards_quality, stream_quality
from dctnet.data.hf import HFDataset, HFStreamDataset
from dctnet.data.usable import CheckedFiles, check_files, data_kind
from dctnet.data.verify import format_report, verify_dataset
from dctnet.data.stats import CoefficientStats, compute_stats

__all__ = [
    "crop_frames",
    "draw_boxes",
    "mcu_windows",
    "Folds",
    "SubsetSampler",
    "all_reduce_metric",
    "format_report",
    "kfold",
    "CheckedFiles",
    "check_files",
    "data_kind",
    "verify_dataset",
    "CacheDataset",
    "CacheError",
    "CacheRecordError",
    "build_cache",
    "open_cache",
    "CenterCrop",
    "CocoDataset",
    "CsvImageDataset",
    "CoefficientSample",
    "DevicePrefetcher",
    "EpochSampler",
    "RepeatedAugSampler",
    "FullImage",
    "HFDataset",
    "HFStreamDataset",
    "ImageFolderDataset",
    "RandomResizedCrop",
    "ResizeCenterCrop",
    "TarShardDataset",
    "ShuffleQuality",
    "shards_quality",
    "stream_quality",
    "write_shards",
    "ThreadLoader",
    "UnusedFilesWarning",
    "WdsDecode",
    "apply_orientation",
    "collate",
    "collate_detection",
    "CoefficientStats",
    "compute_stats",
    "make_dataloader",
    "mcu_window",
    "sample_from_coefficients",
    "wds_decode",
]
