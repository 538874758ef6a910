"""Device-side transforms on coefficient batches (policy on the host, execution batched).

- :mod:`dctnet.transforms.functional` — kernels on coefficient images ``(B, 3, Hb, Wb, 64)``;
- :mod:`dctnet.transforms.augment` — transform objects (draw + apply), ``Compose``, ``RandAugment``;
- :mod:`dctnet.transforms.crops` — the crop/resize step on a :class:`dctnet.batch.JpegBatch` (what loaders produce).
"""

from dctnet.transforms.augment import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    TRANSFORMS,
    ColorJitter,
    Compose,
    CutMix,
    FrequencyDropout,
    Mixup,
    Normalize,
    RandAugment,
    RandomErasing,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomRequantize,
    RandomTranspose,
    RandomVerticalFlip,
    SelectFrequencies,
    ToRGB,
    Transform,
    build_transform,
    describe_transforms,
    step_generator,
)
from dctnet.batch import (  # the batch contract, re-exported where users meet it
    SAMPLING_420,
    JpegBatch,
    PackedJpegBatch,
    PlaneGroup,
    SparseJpegBatch,
    as_jpeg_batch,
    expand_packed,
    expand_sparse,
)
from dctnet.transforms.crops import crops_to_coefficients, crops_to_rgb, native_chroma

__all__ = [
    "TRANSFORMS", "build_transform", "describe_transforms", "step_generator",
    "IMAGENET_MEAN", "IMAGENET_STD", "SAMPLING_420", "ColorJitter", "Compose", "CutMix", "FrequencyDropout",
    "JpegBatch", "Mixup", "PlaneGroup", "Normalize", "RandAugment", "RandomErasing", "RandomGrayscale", "RandomHorizontalFlip",
    "RandomRequantize", "RandomTranspose", "RandomVerticalFlip", "SelectFrequencies", "ToRGB", "Transform",
    "PackedJpegBatch", "SparseJpegBatch", "as_jpeg_batch", "crops_to_coefficients", "crops_to_rgb",
    "expand_packed", "expand_sparse", "native_chroma",
]
