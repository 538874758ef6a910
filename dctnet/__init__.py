"""dctnet: train image models on JPEG DCT coefficients.

The CPU reads quantized DCT coefficients with libjpeg (:mod:`dctnet.codec`); everything else —
reconstruction, augmentation, normalization, DCT-domain stems — is batched torch code
(:mod:`dctnet.kernels` and up).
"""

from dctnet import codec as _codec
from dctnet.codec import (  # noqa: F401  (re-exported: __all__ below)
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_PIXELS,
    JpegCoefficients,
    JpegError,
    JpegHeader,
    libjpeg_version,
    read_coefficients,
    read_coefficients_batch,
    read_header,
)

__version__ = "0.1.0"

# the reader's public names (its Source type alias aside), plus the version
__all__ = [name for name in _codec.__all__ if name != "Source"] + ["__version__"]
