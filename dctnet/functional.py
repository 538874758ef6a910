"""Moved to the kernels layer: :mod:`dctnet.kernels.dct` (DCT maths, chroma upsampling),
:mod:`dctnet.kernels.color` (colour) and :mod:`dctnet.kernels.cache` (the constants). Re-exported
here for the code that still imports this path (the detection transforms, ``dctnet.train.detection``);
new code imports :mod:`dctnet.kernels`."""

from dctnet.kernels.cache import constant as _constant  # noqa: F401  (dctnet.train.detection)
from dctnet.kernels.color import *  # noqa: F401,F403
from dctnet.kernels.dct import *  # noqa: F401,F403
