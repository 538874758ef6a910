"""DCT-domain layers (``nn.Module`` classes only): patch embeddings over coefficient blocks with
exact conversion of pretrained patchify convs, the IDCT stem, and learned ResNet stems.

Putting them into torchvision / timm models (``swap_stem``), model building, checkpoint
conversion and FLOP counting are :mod:`dctnet.models`; optimizer groups are
:mod:`dctnet.train.optim`. Nothing here imports those layers.
"""

from dctnet.nn.patch_embed import DCTPatchEmbed, block_aligned, frequency_index, is_patchify
from dctnet.nn.stems import DCTToRGB, IDCTStem, ResNetDCTStem

__all__ = ["DCTPatchEmbed", "DCTToRGB", "IDCTStem", "ResNetDCTStem", "block_aligned", "frequency_index",
           "is_patchify"]

#: names that lived here before model surgery got its own package: where they are now
_MOVED = {name: "dctnet.models" for name in ("swap_stem", "stem_modules", "count_flops", "input_mean_std",
                                             "resolve_mean_std", "convert")}
_MOVED.update(normalization="dctnet.transforms", param_groups="dctnet.train.optim")


def __getattr__(name: str) -> object:
    # a clear break, not a shim: importing dctnet.models from here would be an upward import
    if name in _MOVED:
        raise AttributeError(f"dctnet.nn.{name} moved: use {_MOVED[name]}.{name}")
    raise AttributeError(f"module 'dctnet.nn' has no attribute {name!r}")
