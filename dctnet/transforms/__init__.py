"""Device-side transforms (policy on the host, execution batched).

- the kernels they run are :mod:`dctnet.kernels`: :mod:`~dctnet.kernels.pixel` on RGB batches
  ``(B, 3, H, W)`` (torchvision's ops, per sample), :mod:`~dctnet.kernels.coefficients` on coefficient
  images ``(B, 3, Hb, Wb, 64)``, :mod:`~dctnet.kernels.geometry` and :mod:`~dctnet.kernels.pil` for the warps;
- the engine, by role (every name re-exported by :mod:`dctnet.transforms.base`):
  :mod:`~dctnet.transforms.transform` (``Transform``: draw + apply, kernels registered per
  representation), :mod:`~dctnet.transforms.representation` (pixels and coefficient images),
  :mod:`~dctnet.transforms.rng` (the per-step generator), :mod:`~dctnet.transforms.groups` (fixed-size
  groups of rows, in-place writes), :mod:`~dctnet.transforms.compose` (``Compose``),
  :mod:`~dctnet.transforms.compiled` (``compile_step``), :mod:`~dctnet.transforms.recipe_ops` (the live
  registry of op classes);
- :mod:`dctnet.transforms.augment` — flips, colour, grayscale, chroma rotation, perspective,
  requantization, frequency dropout;
- :mod:`dctnet.transforms.model_input` — what the model takes: ``ToRGB``, ``ToCoefficients``,
  per-(c,u,v) ``Normalize``, ``SelectFrequencies``;
- :mod:`dctnet.transforms.auto_augment`, :mod:`dctnet.transforms.timm_augment` — torchvision's and
  timm's policies, per sample (their base :mod:`dctnet.transforms.policy_base`, the slot scheduler
  :mod:`dctnet.transforms.slots`, the kernels :mod:`dctnet.kernels.policy`);
- :mod:`dctnet.transforms.mixing`, :mod:`dctnet.transforms.erasing` — timm's / torchvision's mixing and
  erasing (boxes: :mod:`dctnet.kernels.boxes`);
- :mod:`dctnet.transforms.registry` — transforms by name, for recipes, and what is generated from each
  op's declaration (its torchvision/timm counterpart, the recipes' op table);
- :mod:`dctnet.transforms.device_crop` — the crop/resize step on a :class:`dctnet.batch.JpegBatch` (what loaders produce).
"""

from dctnet.kernels.normalization import IMAGENET_MEAN, IMAGENET_STD, data_config, input_mean_std
from dctnet.transforms.base import BaselineContext, CompiledHalf, Compose, Transform, compile_step, step_generator
from dctnet.transforms.augment import (
    ColorJitter,
    FrequencyDropout,
    RandomChromaRotation,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomRequantize,
    RandomTranspose,
    RandomVerticalFlip,
)
from dctnet.transforms.model_input import Normalize, SelectFrequencies, ToCoefficients, ToRGB
from dctnet.transforms.auto_augment import AutoAugment, RandAugment, TrivialAugmentWide
from dctnet.transforms.timm_augment import ThreeAugment, TimmAugment
from dctnet.transforms.erasing import RandomErasing
from dctnet.transforms.mixing import CutMix, MixUp, Mixup
from dctnet.transforms.choice import RandomApply, RandomChoice, RandomOrder
from dctnet.transforms.registry import (
    MIXERS,
    TRANSFORMS,
    build_transform,
    counterpart,
    describe_transforms,
    is_mixer_spec,
    op_table,
    spec_arguments,
    timm_kwargs,
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
from dctnet.transforms.device_crop import crops_to_coefficients, crops_to_rgb, native_chroma
from dctnet.transforms.step import DeviceStep, normalize_input

__all__ = [
    "MIXERS", "TRANSFORMS", "BaselineContext", "CompiledHalf", "build_transform", "compile_step", "counterpart",
    "describe_transforms",
    "op_table", "spec_arguments", "step_generator", "timm_kwargs", "data_config", "input_mean_std", "is_mixer_spec",
    "RandomApply", "RandomChoice", "RandomOrder",
    "IMAGENET_MEAN", "IMAGENET_STD", "SAMPLING_420", "AutoAugment", "ColorJitter", "Compose", "CutMix",
    "FrequencyDropout", "JpegBatch", "MixUp", "Mixup", "PlaneGroup", "Normalize", "RandAugment", "RandomChromaRotation",
    "RandomErasing", "RandomGrayscale", "RandomHorizontalFlip", "RandomRequantize", "RandomTranspose",
    "RandomVerticalFlip", "SelectFrequencies", "ThreeAugment", "TimmAugment", "ToCoefficients", "ToRGB", "Transform",
    "TrivialAugmentWide", "PackedJpegBatch", "SparseJpegBatch", "as_jpeg_batch", "crops_to_coefficients",
    "crops_to_rgb", "expand_packed", "expand_sparse", "native_chroma", "DeviceStep", "normalize_input",
]

# every op a recipe can name is importable from here, those of a module not listed above included
# (the registry found them by walking the package)
globals().update({name: cls for name, cls in TRANSFORMS.items() if name not in globals()})
__all__ += [name for name in TRANSFORMS if name not in __all__]
