"""DCT-domain stems: patch embeddings over coefficient blocks, exact conversion of pretrained
weights, and stem swapping for torchvision and timm models."""

from dctnet.nn.patch_embed import DCTPatchEmbed, frequency_index
from dctnet.nn.stems import DCTToRGB, ResNetDCTStem, count_flops, param_groups, stem_modules, swap_stem

__all__ = ["DCTPatchEmbed", "DCTToRGB", "ResNetDCTStem", "count_flops", "frequency_index", "param_groups",
           "stem_modules", "swap_stem"]
