"""DCT-domain stems: patch embeddings over coefficient blocks, exact conversion of pretrained
weights, and stem swapping for torchvision and timm models (ViT, Swin, ConvNeXt, ResNet,
EfficientNet, MobileNetV3, RegNet, ...)."""

from dctnet.nn.normalization import input_mean_std, resolve_mean_std
from dctnet.nn.patch_embed import DCTPatchEmbed, frequency_index, is_patchify
from dctnet.nn.stems import DCTToRGB, IDCTStem, ResNetDCTStem, count_flops, param_groups, stem_modules, swap_stem

__all__ = ["DCTPatchEmbed", "DCTToRGB", "IDCTStem", "ResNetDCTStem", "count_flops", "frequency_index",
           "input_mean_std", "is_patchify", "param_groups", "resolve_mean_std", "stem_modules", "swap_stem"]
