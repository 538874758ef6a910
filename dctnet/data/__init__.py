"""Datasets, collate, samplers, loaders and statistics (the CPU side of training).

Data flows: files → :mod:`dctnet.codec` → canonical 4:2:0 planes → crop window (host) →
:func:`collate` → :class:`dctnet.transforms.JpegBatch` → device (prefetcher) → transforms.
"""

from dctnet.data.cache import CacheDataset, CacheError, build_cache, open_cache
from dctnet.data.crop import CenterCrop, FullImage, RandomResizedCrop, draw_boxes, mcu_window, mcu_windows
from dctnet.data.dataset import (
    CoefficientSample,
    ImageFolderDataset,
    apply_orientation,
    sample_from_coefficients,
)
from dctnet.data.folds import Folds, SubsetSampler, all_reduce_metric, kfold
from dctnet.data.loader import DevicePrefetcher, EpochSampler, ThreadLoader, collate, make_dataloader
from dctnet.data.shards import TarShardDataset, WdsDecode, wds_decode
from dctnet.data.verify import format_report, verify_dataset
from dctnet.data.stats import compute_stats

__all__ = [
    "draw_boxes",
    "mcu_windows",
    "Folds",
    "SubsetSampler",
    "all_reduce_metric",
    "format_report",
    "kfold",
    "verify_dataset",
    "CacheDataset",
    "CacheError",
    "build_cache",
    "open_cache",
    "CenterCrop",
    "CoefficientSample",
    "DevicePrefetcher",
    "EpochSampler",
    "FullImage",
    "ImageFolderDataset",
    "RandomResizedCrop",
    "TarShardDataset",
    "ThreadLoader",
    "WdsDecode",
    "apply_orientation",
    "collate",
    "compute_stats",
    "make_dataloader",
    "mcu_window",
    "sample_from_coefficients",
    "wds_decode",
]
