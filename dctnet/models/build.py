"""Models by architecture name, randomly initialised, nothing downloaded."""

from __future__ import annotations

from torch import nn

__all__ = ["build_model"]


def build_model(arch: str, *, image_size: int | None = None, num_classes: int | None = None,
                drop_path_rate: float = 0.0) -> nn.Module:
    """Randomly initialised ``arch``: a torchvision model name (``vit_b_16``, ``resnet50``,
    ``convnext_tiny``, ...) or ``timm:NAME``. ``image_size`` goes to the models that fix it at
    construction (torchvision ViTs, timm models that take ``img_size``: ViT, Swin, ...; the others,
    ConvNeXt or ResNet, take any size and are built without it); ``num_classes`` to the head;
    ``drop_path_rate`` (stochastic depth) to timm's ``drop_path_rate`` or torchvision's
    ``stochastic_depth_prob`` (ConvNeXt, Swin, EfficientNet, MaxViT). ``ValueError`` for an unknown
    name, or a drop-path rate the model does not take."""
    if arch.startswith("timm:"):
        import timm  # optional and slow to import (~1 s): only for timm architectures

        kwargs = {"num_classes": num_classes} if num_classes else {}
        if drop_path_rate:
            kwargs["drop_path_rate"] = drop_path_rate
        try:
            if image_size:
                try:
                    return timm.create_model(arch[5:], pretrained=False, img_size=image_size, **kwargs)
                except TypeError as exc:  # a model whose constructor has no img_size: any size fits it
                    if "img_size" not in str(exc):
                        raise
            return timm.create_model(arch[5:], pretrained=False, **kwargs)
        except RuntimeError as exc:  # timm: "Unknown model (...)"
            raise ValueError(f"unknown architecture {arch!r}: {exc}") from exc
        except TypeError as exc:
            if "drop_path_rate" in str(exc):
                raise ValueError(f"{arch} takes no drop-path rate (timm's drop_path_rate)") from exc
            raise
    import torchvision  # slow to import: only when a torchvision architecture is built

    try:
        builder = torchvision.models.get_model_builder(arch)
    except ValueError as exc:
        raise ValueError(f"unknown architecture {arch!r} (torchvision name, or timm:NAME)") from exc
    kwargs = {"image_size": image_size} if image_size and arch.startswith("vit") else {}
    if num_classes:
        kwargs["num_classes"] = num_classes
    if drop_path_rate:
        kwargs["stochastic_depth_prob"] = drop_path_rate
    try:
        return builder(weights=None, **kwargs)
    except TypeError as exc:
        if "stochastic_depth_prob" in str(exc):
            raise ValueError(f"torchvision's {arch} takes no drop-path rate (stochastic_depth_prob)") from exc
        raise
