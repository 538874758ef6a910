"""Model surgery: DCT stems into torchvision / timm models, models by name, checkpoint conversion.

- :mod:`dctnet.models.surgery` — :func:`swap_stem` (first conv → one of the :data:`STEMS`:
  ``dct-patch``, ``idct``, ``dct8``, ``dct-up``), :func:`stems_for`, :func:`default_stem`,
  :func:`stem_modules`, :func:`first_conv`;
- :mod:`dctnet.models.adapters`, :mod:`dctnet.models.torchvision_vit` — the interfaces a model's
  forward expects of its first layer (timm's ``PatchEmbed``, torchvision's ViT), on coefficients;
- :mod:`dctnet.models.build` — :func:`build_model` from a torchvision name or ``timm:NAME``;
- :mod:`dctnet.models.checkpoint` — reading checkpoints and their metadata, fit checks;
- :mod:`dctnet.models.conversion` — :func:`convert` (``dctnet convert``): RGB checkpoint → DCT model;
- :mod:`dctnet.models.flops` — :func:`count_flops`.

The layers are :mod:`dctnet.nn`; the normalisation rule is
:mod:`dctnet.kernels.normalization` (re-exported here), shared with ``ToRGB.for_model``.
"""

from dctnet.models.build import build_model
from dctnet.models.checkpoint import (
    check_state_dict,
    checkpoint_mean_std,
    load_checkpoint,
    load_state_dict,
    num_classes_of,
)
from dctnet.models.conversion import Conversion, convert, convert_checkpoint, load_hint
from dctnet.models.flops import count_flops
from dctnet.models.surgery import (
    CONVERTED_STEMS,
    LEARNED_STEMS,
    STEMS,
    default_stem,
    first_conv,
    stem_modules,
    stems_for,
    swap_stem,
)
from dctnet.kernels.normalization import IMAGENET_MEAN, IMAGENET_STD, input_mean_std, resolve_mean_std

__all__ = ["CONVERTED_STEMS", "IMAGENET_MEAN", "IMAGENET_STD", "LEARNED_STEMS", "STEMS", "Conversion", "build_model",
           "check_state_dict", "checkpoint_mean_std", "convert", "convert_checkpoint", "count_flops", "default_stem",
           "first_conv", "input_mean_std", "load_checkpoint", "load_hint", "load_state_dict", "num_classes_of",
           "resolve_mean_std", "stem_modules", "stems_for", "swap_stem"]
