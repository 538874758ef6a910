"""torchvision's detectors and segmenters by name, prepared for dctnet's detection device step.

A torchvision detector resizes and normalises its input itself (``model.transform``, a
``GeneralizedRCNNTransform``): the device step does the resize instead
(:class:`dctnet.transforms.detection.DetectorResize`, the same rule and weights), so
:func:`prepare_detector` turns the model's own resize off — its transform then only normalises and
batches, and its input size is its output size. Predictions come back in the step's canvas, masks
unpasted; the caller maps them to the file's pixels (:func:`detections_to_image`), as the model's
own ``postprocess`` would have.
"""

from __future__ import annotations

import math
import types
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from dctnet.nn import IDCTStem, MosaicToCoefficients, ResNetDCTStem

__all__ = ["DETECTORS", "DETECTOR_STEMS", "RESNET_FPN_BUILDERS", "backbone_state", "boxes_to_image", "build_detector",
           "build_segmenter", "dct_detector", "detections_to_image", "detector_names", "prepare_detector",
           "roi_pool_scales", "segmenter_names", "set_roi_pool_scales"]

#: torchvision's detection and segmentation builders dctnet has been checked with
DETECTORS = ("fasterrcnn_mobilenet_v3_large_320_fpn", "fasterrcnn_mobilenet_v3_large_fpn", "fasterrcnn_resnet50_fpn",
             "fasterrcnn_resnet50_fpn_v2", "retinanet_resnet50_fpn", "fcos_resnet50_fpn", "ssdlite320_mobilenet_v3_large",
             "maskrcnn_resnet50_fpn")


def detector_names() -> list[str]:
    """torchvision's detection and instance-segmentation builders (``list_models``)."""
    import torchvision  # optional dependency (torchvision's detectors)

    return list(torchvision.models.list_models(module=torchvision.models.detection))


def segmenter_names() -> list[str]:
    """torchvision's semantic segmentation builders (``list_models``)."""
    import torchvision  # optional dependency (torchvision's segmentation models)

    return list(torchvision.models.list_models(module=torchvision.models.segmentation))


def build_segmenter(name: str, num_classes: int, **kwargs: Any) -> nn.Module:
    """torchvision's segmentation model ``name`` (DeepLabV3, FCN, LR-ASPP) with ``num_classes`` and no
    downloaded weights; ``kwargs`` reach the builder (``aux_loss`` …)."""
    import torchvision  # optional dependency (torchvision's segmentation models)

    if name not in segmenter_names():
        raise ValueError(f"unknown torchvision segmentation model {name!r} (torchvision has: {', '.join(segmenter_names())})")
    kwargs.setdefault("weights", None)
    kwargs.setdefault("weights_backbone", None)
    return torchvision.models.get_model(name, num_classes=int(num_classes), **kwargs)


#: the builders whose ResNet-50 backbone ``build_detector(..., backbone=...)`` can replace
RESNET_FPN_BUILDERS = ("fasterrcnn_resnet50_fpn", "maskrcnn_resnet50_fpn")


def build_detector(name: str, num_classes: int, *, backbone: str | None = None,
                   returned_layers: Sequence[int] | None = None, anchor_sizes: Sequence[int] | None = None,
                   **kwargs: Any) -> nn.Module:
    """torchvision's detector ``name`` (``torchvision.models.get_model``) with ``num_classes``
    (background included) and no downloaded weights (``weights=None``, ``weights_backbone=None``
    unless given); ``kwargs`` reach the builder (``min_size``, ``max_size``, ``box_detections_per_img``,
    ``rpn_batch_size_per_image`` …).

    Args:
        backbone: another torchvision ResNet (``resnet18``, ``resnet34``, ``resnet101`` …) for the
            ResNet-50 of :data:`RESNET_FPN_BUILDERS`, built as their builders build theirs
            (``_resnet_fpn_extractor``, BatchNorm, every layer trainable: there are no weights).
        returned_layers: the ResNet stages (1–4) the FPN reads (torchvision's default: all four);
            with ``backbone`` only.
        anchor_sizes: the smallest anchor of each feature map, one per map (the FPN's levels and
            its pool); each map's other sizes keep their ratios to it (RetinaNet's octaves), its
            aspect ratios stay. Small objects (tree crowns of 40 px) need smaller anchors than
            COCO's 32–512.
    """
    import torchvision  # optional dependency (torchvision's detectors)

    if name not in detector_names():
        raise ValueError(f"unknown torchvision detector {name!r} (torchvision has: {', '.join(detector_names())})")
    kwargs.setdefault("weights", None)
    kwargs.setdefault("weights_backbone", None)
    if backbone is None:
        if returned_layers is not None:
            raise ValueError("returned_layers: give the backbone too (it rebuilds the FPN)")
        model = torchvision.models.get_model(name, num_classes=int(num_classes), **kwargs)
    else:
        model = _with_backbone(name, int(num_classes), backbone, returned_layers, kwargs)
    if anchor_sizes is not None:
        _set_anchor_sizes(model, anchor_sizes)
    return model


def _with_backbone(name: str, num_classes: int, backbone: str, returned_layers: Sequence[int] | None,
                   kwargs: dict[str, Any]) -> nn.Module:
    from torchvision.models import get_model, list_models  # optional dependency (as above)
    from torchvision.models.detection import FasterRCNN, MaskRCNN  # (as above)
    from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor  # (as above)

    if name not in RESNET_FPN_BUILDERS:
        raise ValueError(f"backbone: {name!r} keeps its own; a ResNet backbone replaces the ResNet-50 of "
                         f"{', '.join(RESNET_FPN_BUILDERS)}")
    resnets = [n for n in list_models() if n.startswith(("resnet", "wide_resnet", "resnext"))]
    if backbone not in resnets:
        raise ValueError(f"backbone: {backbone!r} is not a torchvision ResNet ({', '.join(resnets)})")
    layers = list(returned_layers) if returned_layers is not None else [1, 2, 3, 4]
    if not layers or sorted(set(layers)) != layers or not set(layers) <= {1, 2, 3, 4}:
        raise ValueError(f"returned_layers: increasing stages among 1, 2, 3, 4, got {returned_layers!r}")
    if kwargs.pop("weights", None) is not None or kwargs.pop("weights_backbone", None) is not None:
        raise ValueError("backbone: weights for a replaced backbone come from model.init, not from torchvision")
    kwargs.pop("trainable_backbone_layers", None)
    body = get_model(backbone, weights=None, norm_layer=nn.BatchNorm2d)
    cls = MaskRCNN if name.startswith("maskrcnn") else FasterRCNN
    if len(layers) != 4 and "rpn_anchor_generator" not in kwargs:
        from torchvision.models.detection.anchor_utils import AnchorGenerator  # (as above)

        # torchvision's default generator has 5 maps; fewer stages read → fewer maps (the largest kept)
        sizes = ((32,), (64,), (128,), (256,), (512,))[5 - (len(layers) + 1):]
        kwargs["rpn_anchor_generator"] = AnchorGenerator(sizes, ((0.5, 1.0, 2.0),) * len(sizes))
    return cls(_resnet_fpn_extractor(body, 5, returned_layers=layers), num_classes=num_classes, **kwargs)


def _set_anchor_sizes(model: nn.Module, anchor_sizes: Sequence[int]) -> None:
    gen = getattr(getattr(model, "rpn", None), "anchor_generator", None) or getattr(model, "anchor_generator", None)
    if gen is None or not hasattr(gen, "sizes"):
        raise ValueError(f"anchor_sizes: {type(model).__name__} has no AnchorGenerator to resize (SSD's are "
                         "DefaultBoxGenerator scales)")
    sizes = [int(v) for v in anchor_sizes]
    if len(sizes) != len(gen.sizes) or min(sizes) < 1:
        raise ValueError(f"anchor_sizes: {type(model).__name__} has {len(gen.sizes)} feature maps "
                         f"(anchors now {[list(s) for s in gen.sizes]}); give one positive size per map, got {anchor_sizes!r}")
    gen.sizes = tuple(tuple(int(round(new * s / level[0])) for s in level) for new, level in zip(sizes, gen.sizes))
    gen.cell_anchors = [gen.generate_anchors(size, ratios) for size, ratios in zip(gen.sizes, gen.aspect_ratios)]


def _no_resize(self: nn.Module, image: Tensor, target: dict[str, Tensor] | None = None):
    return image, target


def _unpasted(self: nn.Module, result: list[dict[str, Tensor]], image_shapes: Any, original_image_sizes: Any):
    return result


def prepare_detector(model: nn.Module) -> nn.Module:
    """Turn off ``model.transform``'s resize (train and eval) — the device step's
    :class:`~dctnet.transforms.detection.DetectorResize` has done it — so the transform only
    normalises and pads the batch, and its ``postprocess``: predictions stay in the input's canvas,
    a Mask R-CNN's ``masks`` the mask head's ``(N, 1, M, M)`` probabilities in each box, for
    :func:`detections_to_image` to paste at the file's size. (Pasted in the canvas and then resampled
    to the file, small masks lose pixels at their edges; torchvision's evaluation pastes once, at the
    file's size.) Returns ``model`` (changed in place; idempotent)."""
    t = getattr(model, "transform", None)
    if t is None or not all(hasattr(t, a) for a in ("resize", "min_size", "postprocess")):
        raise ValueError(f"{type(model).__name__} has no GeneralizedRCNNTransform (model.transform) to prepare")
    t.resize = types.MethodType(_no_resize, t)
    t.postprocess = types.MethodType(_unpasted, t)
    return model


def detections_to_image(detection: dict[str, Tensor], canvas: tuple[int, int],
                        image: tuple[int, int]) -> dict[str, Tensor]:
    """A prepared detector's prediction for one image (:func:`prepare_detector`) in the image's
    ``(H, W)`` pixels, as the model's own ``postprocess`` gives it: ``boxes (N, 4)`` XYXY scaled from
    the ``canvas (h, w)`` (:func:`boxes_to_image`) and, with ``masks (N, 1, M, M)``, the masks pasted
    into those boxes at ``(H, W)``: ``masks (N, 1, H, W)`` float probabilities (torchvision's
    ``paste_masks_in_image``). Other keys are kept."""
    from torchvision.models.detection.roi_heads import paste_masks_in_image  # optional dependency (as the detectors)

    out = dict(detection)
    out["boxes"] = boxes_to_image(detection["boxes"], canvas, image)
    if "masks" in detection:
        out["masks"] = paste_masks_in_image(detection["masks"], out["boxes"], (int(image[0]), int(image[1])))
    return out


#: the DCT stems a detector's ResNet body takes: ``idct`` is converted (exactly the RGB detector),
#: ``dct-up`` is learned (a 1×1 projection of each block's coefficients, pixel-shuffled to layer1's
#: 1/4 resolution, so every feature map keeps its stride)
DETECTOR_STEMS = ("idct", "dct-up")


def _resnet_body(model: nn.Module) -> nn.Module | None:
    body = getattr(getattr(model, "backbone", None), "body", None)
    if body is not None and all(hasattr(body, n) for n in ("conv1", "bn1", "relu", "maxpool", "layer1")):
        return body
    return None


def dct_detector(model: nn.Module, stem: str = "idct", keep: Any = None) -> nn.Module:
    """Make a torchvision detector with a ResNet backbone (Faster / Mask R-CNN, RetinaNet, FCOS
    ``*_resnet*_fpn*``) take DCT coefficients: a list of coefficient mosaics ``(3, H, W)``, H and W
    multiples of 8 (:func:`dctnet.transforms.detection.coefficient_mosaics`). Returns ``model``,
    changed in place.

    A mosaic has the image's shape, so the detector's batching, padding and anchors (all in pixels)
    run unchanged; its transform's resize is turned off (:func:`prepare_detector`) and its
    normalisation becomes the identity, the stem taking both over. The backbone body's ``conv1``
    becomes ``Sequential(MosaicToCoefficients(), stem)``:

    - ``idct`` (default): :class:`~dctnet.nn.IDCTStem` — block IDCT, colour, the transform's
      ``(rgb − image_mean)/image_std``, then the model's own conv1: exactly the RGB detector
      (weights loaded before the call carry over unchanged), wherever the batch is not padded.
    - ``dct-up``: :class:`~dctnet.nn.ResNetDCTStem` (learned; ``bn1``, ReLU and max-pool become
      identities): layer1 still sees 1/4 resolution, so every feature map keeps its stride.

    ``keep`` selects frequencies as :func:`dctnet.nn.frequency_index` takes them.

    Raises:
        ValueError: the detector has no ResNet backbone body (MobileNetV3, SSD's VGG: their first
            layers are not a ResNet stem; train them with ``input: device-rgb``), or an unknown stem.
    """
    if stem not in DETECTOR_STEMS:
        raise ValueError(f"unknown detector stem {stem!r} (a detector's ResNet backbone takes: {', '.join(DETECTOR_STEMS)})")
    body = _resnet_body(model)
    if body is None:
        raise ValueError(f"{type(model).__name__}'s backbone is not a ResNet body (conv1, bn1, maxpool, layer1…): "
                         "input 'dct' for detectors swaps the stem of a ResNet backbone (torchvision's *_resnet*_fpn "
                         "Faster R-CNN, Mask R-CNN, RetinaNet, FCOS); train this one with input 'device-rgb'")
    if isinstance(body.conv1, nn.Sequential) and isinstance(body.conv1[0], MosaicToCoefficients):
        raise ValueError(f"{type(model).__name__} already takes coefficients (stem {getattr(model, 'dctnet_stem', '?')})")
    prepare_detector(model)
    t = model.transform
    conv = body.conv1
    if stem == "idct":
        new: nn.Module = IDCTStem(conv, tuple(float(v) for v in t.image_mean), tuple(float(v) for v in t.image_std), keep)
        ref = next(iter(conv.parameters()))
        new[0].to(device=ref.device, dtype=ref.dtype)
    else:
        new = ResNetDCTStem(conv.out_channels, "dct-up", keep).to(next(iter(conv.parameters())).device)
        body.bn1, body.relu, body.maxpool = nn.Identity(), nn.Identity(), nn.Identity()
    body.conv1 = nn.Sequential(MosaicToCoefficients(), new)
    t.image_mean, t.image_std = [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]
    model.dctnet_stem = stem
    return model


def boxes_to_image(boxes: Tensor, canvas: tuple[int, int], image: tuple[int, int]) -> Tensor:
    """Boxes ``(N, 4)`` XYXY in a resized canvas ``(h, w)`` back in the image's ``(H, W)`` pixels
    (what the model's own ``postprocess`` does: float32 ratios)."""
    ratios = [torch.tensor(s, dtype=torch.float32) / torch.tensor(c, dtype=torch.float32)
              for s, c in zip(image, canvas)]
    ratio_h, ratio_w = (float(r) for r in ratios)
    return boxes * torch.tensor([ratio_w, ratio_h, ratio_w, ratio_h], dtype=boxes.dtype, device=boxes.device)


def roi_pool_scales(model: nn.Module) -> dict[str, list[float]]:
    """The feature-map scales each of ``model``'s ``MultiScaleRoIAlign`` inferred from its first
    batch (torchvision sets them on the first forward and keeps them; they are not in the
    ``state_dict``), by module name: what a checkpoint must carry for a resumed run to pool as the
    stopped one did (another first batch can infer other scales)."""
    return {name: [float(v) for v in m.scales] for name, m in model.named_modules()
            if getattr(m, "scales", None) is not None and hasattr(m, "canonical_scale")}


def set_roi_pool_scales(model: nn.Module, scales: dict[str, list[float]]) -> None:
    """Put back what :func:`roi_pool_scales` saved: each pooler's scales and the level mapper
    torchvision derives from them (``_setup_scales``' rule). ``ValueError`` for anything but a
    mapping of names to lists of powers of two in (0, 1] (the scales come from a checkpoint file)."""
    from torchvision.ops.poolers import initLevelMapper  # optional dependency (as the detectors)

    if not isinstance(scales, dict):
        raise ValueError(f"RoI pooler scales must be a dict of name -> scales, not {type(scales).__name__}")
    modules = dict(model.named_modules())
    for name, values in scales.items():
        m = modules.get(name)
        if m is None or not hasattr(m, "canonical_scale") or not values:
            continue
        try:
            floats = [float(v) for v in values]
        except (TypeError, ValueError):
            raise ValueError(f"RoI pooler {name}: scales must be numbers, got {values!r}") from None
        if not all(0 < v <= 1 and math.log2(v).is_integer() for v in floats):
            raise ValueError(f"RoI pooler {name}: scales must be powers of two in (0, 1], got {floats}")
        m.scales = floats
        m.map_levels = initLevelMapper(int(-math.log2(m.scales[0])), int(-math.log2(m.scales[-1])),
                                       canonical_scale=m.canonical_scale, canonical_level=m.canonical_level)


def backbone_state(state: dict[str, Tensor], model: nn.Module) -> dict[str, Tensor]:
    """A classifier's ``state_dict`` (torchvision's ResNet ``conv1 … layer4``, MobileNetV3
    ``features.N``, or a dctnet run's) as the keys of ``model``'s backbone body
    (``backbone.body.*``, the detectors; ``backbone.*``, the segmentation models) — what users do with
    a pretrained backbone. Keys already named as ``model``'s are kept; the classifier's head and
    anything without a counterpart of the same shape are dropped."""
    own = model.state_dict()
    body_prefix = "backbone.body." if any(k.startswith("backbone.body.") for k in own) else "backbone."
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        if key in own:
            out[key] = value
            continue
        for name in (key, key[len("features."):] if key.startswith("features.") else None):
            target = None if name is None else body_prefix + name
            if target in own and tuple(own[target].shape) == tuple(value.shape):
                out[target] = value
                break
    return out
