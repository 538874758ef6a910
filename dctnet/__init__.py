"""dctnet: train image models on JPEG DCT coefficients.

The CPU reads quantized DCT coefficients with libjpeg (:mod:`dctnet.codec`); everything else —
reconstruction, augmentation, normalization, DCT-domain stems — is batched torch code
(:mod:`dctnet.functional` and up).
"""

from dctnet.codec import (
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

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_PIXELS",
    "JpegCoefficients",
    "JpegError",
    "JpegHeader",
    "__version__",
    "libjpeg_version",
    "read_coefficients",
    "read_coefficients_batch",
    "read_header",
]
