"""DCT-domain layers (``nn.Module`` classes only): patch embeddings over coefficient blocks with
exact conversion of pretrained patchify convs, the IDCT stem, and learned ResNet stems.

Putting them into torchvision / timm models (``swap_stem``), model building, checkpoint
conversion and FLOP counting are :mod:`dctnet.models`; optimizer groups are
:mod:`dctnet.train.optim`. Nothing here imports those layers.
"""

from dctnet.nn.patch_embed import DCTPatchEmbed, block_aligned, frequency_index, is_patchify
from dctnet.nn.stems import DCTToRGB, IDCTStem, MosaicToCoefficients, ResNetDCTStem

__all__ = ["DCTPatchEmbed", "DCTToRGB", "IDCTStem", "MosaicToCoefficients", "ResNetDCTStem", "block_aligned", "frequency_index",
           "is_patchify"]
