r"""Detection and segmentation geometry: torchvision's ops on images, boxes and masks, drawn per
sample on the host and applied batched on the device.

A detection sample is a whole image with a target (``boxes`` XYXY in pixels, ``labels``, and
optionally ``masks (N, H, W)``, ``iscrowd``, ``area``). Its augmentation is geometric — flips,
resizes, crops, padding — so it is a short per-sample program, not a per-pixel op:

1. **Host, per sample** (boxes are few): each op draws its parameters from the sample's own
   generator exactly as torchvision's class draws them from torch's global one (the same calls in
   the same order: seeded alike, the two give the same parameters), moves the boxes with
   torchvision's rules (``tv_tensors.BoundingBoxes``: flips, resizes scale, crops and pads shift
   and clamp to the canvas; :class:`RandomIoUCrop` zeroes the boxes whose centre left the crop;
   :class:`SanitizeBoundingBoxes` drops degenerate ones with their labels and masks), and folds
   the image geometry into **stages**. A stage is one resampling of its input canvas — resize the
   whole canvas to ``resized`` (antialiased bilinear, torchvision's ``resize``), keep the window
   ``(top, left, height, width)`` of that (outside the resized canvas: ``fill``), then mirror the
   window if flipped. Crops, pads and flips join the current stage; a resize after any of them
   starts a new one, because torchvision resamples the already cropped pixels again. A warp
   (:class:`RandomAffine`, :class:`RandomRotation`, :class:`RandomPerspective`, a vertical flip)
   seals its stage: torchvision's grid over the stage's output, one pass per (interpolation, fill)
   that the batch's samples drew there (:mod:`dctnet.kernels.geometry`, per-sample canvases).
2. **Device, batched**: stage 1 decodes every window and resamples it in one pass
   (:func:`dctnet.transforms.crops_to_rgb` with the stage's per-sample resize), later stages
   resample the previous output (:func:`dctnet.resize.resized_crop`: dense matrices on a GPU,
   their bands on a CPU). A flip — and a vertical flip's warp — permutes the rows of its stage's
   resampling matrices (no pass of its own); a first stage that only selects pixels (crops, pads
   with 0, flips) is read through by the next stage's resampling, never written out. Masks follow
   torchvision's nearest-neighbour resize (``interpolate(mode="nearest")``: source
   ``min(floor(k·in/out), in − 1)`` in float32), their pads are 0, and every stage's index map is
   composed on the host into one gather per axis: the masks are gathered once.

Shapes: images come out as a list of ``(3, h_b, w_b)`` float tensors in [0, 1] — what
torchvision's detectors take — views into one batch tensor padded to the batch's largest canvas.
``fill`` values are in 8-bit levels (0–255), as torchvision's detection references state them
(``fill=mean`` with ``mean = (123, 117, 104)``); masks are always padded with 0, as the references'
``{tv_tensors.Mask: 0}`` fill does.

The package, by role: :mod:`.geometry` (host geometry, box maths), :mod:`.ops` and :mod:`.crop_ops`
(the ops), :mod:`.plan` (a batch's drawn plan), :mod:`.apply` (the device half), :mod:`.copy_paste`,
:mod:`.step` (the device step), :mod:`.presets` (each preset once, as an op list that builds both arms)
and :mod:`.bridge` (op lists into dctnet's ops or torchvision v2's). An op registers itself by being
declared (:class:`DetectionOp`'s subclasses, in :data:`.ops.RECIPE_OPS`).
"""

from __future__ import annotations

from dctnet.transforms.detection.apply import apply_plan, semantic_maps
from dctnet.transforms.detection.bridge import (ReferencePadIfSmaller, build_detection_ops, per_box_fields,
                                                torchvision_ops, torchvision_sanitize)
from dctnet.transforms.detection.copy_paste import SimpleCopyPaste
from dctnet.transforms.detection.crop_ops import (FixedSizeCrop, PadIfSmaller, RandomCrop, RandomIoUCrop,
                                                  RandomResizedCrop, RandomZoomOut)
from dctnet.transforms.detection.geometry import BOX_FIELDS, Geometry, resized_output_size, sample_generator
from dctnet.transforms.detection.ops import (DetectionOp, DetectorResize, RandomAffine, RandomHorizontalFlip,
                                             RandomPerspective, RandomPhotometricDistort, RandomResize, RandomRotation,
                                             RandomShortestSize, RandomVerticalFlip, Resize, SanitizeBoundingBoxes,
                                             ScaleJitter)
from dctnet.transforms.detection.plan import DetectionCompose, DetectionPlan, plan_of
from dctnet.transforms.detection.presets import (DETECTION_PRESETS, PRESETS, detection_preset, preset_specs,
                                                 segmentation_preset, torchvision_detection_preset,
                                                 torchvision_segmentation_preset)
from dctnet.transforms.detection.step import DetectionStep, coefficient_mosaics

__all__ = [
    "BOX_FIELDS", "DETECTION_PRESETS", "PRESETS", "DetectionCompose", "DetectionOp", "DetectionPlan",
    "DetectionStep", "DetectorResize", "FixedSizeCrop", "Geometry", "PadIfSmaller", "RandomAffine",
    "RandomCrop", "RandomHorizontalFlip", "RandomIoUCrop", "RandomPerspective", "RandomPhotometricDistort", "RandomResize",
    "RandomResizedCrop", "RandomRotation", "RandomShortestSize", "RandomVerticalFlip", "RandomZoomOut",
    "ReferencePadIfSmaller", "Resize", "SanitizeBoundingBoxes", "ScaleJitter", "SimpleCopyPaste", "apply_plan",
    "build_detection_ops", "coefficient_mosaics", "detection_preset", "per_box_fields", "plan_of",
    "preset_specs", "resized_output_size", "sample_generator", "segmentation_preset", "semantic_maps",
    "torchvision_detection_preset", "torchvision_ops", "torchvision_sanitize",
    "torchvision_segmentation_preset",
]


def _import_op_modules() -> None:
    """Every module of the package, imported for the ops it declares (a :class:`DetectionOp` subclass
    registers itself): an op in a new module is registered with no list to edit."""
    import importlib  # (used once, at import)
    import pkgutil  # (as above)

    for module in pkgutil.iter_modules(__path__, __name__ + "."):
        importlib.import_module(module.name)


_import_op_modules()
