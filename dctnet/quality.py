"""JPEG quality: libjpeg's (IJG) standard quantization tables and the quality a file's tables
were scaled from. numpy only (``dctnet info`` uses it without loading torch); the DCT-domain
requantization builds its tables from these (:func:`dctnet.kernels.coefficients.ijg_tables`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["IJG_STD_TABLES", "estimate_quality"]

#: libjpeg's (IJG) standard quantization tables (Annex K): luminance, chrominance; natural order
IJG_STD_TABLES = np.array([
    [16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55, 14, 13, 16, 24, 40, 57, 69, 56,
     14, 17, 22, 29, 51, 87, 80, 62, 18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
     49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99],
    [17, 18, 24, 47, 99, 99, 99, 99, 18, 21, 26, 66, 99, 99, 99, 99, 24, 26, 56, 99, 99, 99, 99, 99,
     47, 66, 99, 99, 99, 99, 99, 99] + [99] * 32], dtype=np.float64)


def estimate_quality(table: np.ndarray, chroma: bool = False) -> float:
    """IJG quality (1..100) whose scaled standard table (luminance, or chrominance when
    ``chroma``) is closest to ``table`` (64 entries, natural order): :func:`dctnet.kernels.coefficients.ijg_tables` inverted.

    libjpeg scales the standard table by ``s = 5000/q`` (q < 50) or ``200 − 2q`` percent; we invert
    that from the mean ratio. Approximate for tables not made by libjpeg's scaling."""
    t = np.asarray(table).reshape(64).astype(np.float64)
    ref = IJG_STD_TABLES[1 if chroma else 0]
    keep = (t > 1) & (t < 255)  # entries libjpeg clamped (to 1 or 255) say nothing about the scale
    if not keep.any():
        return 100.0 if t.max() <= 1 else 1.0
    scale = float(np.mean(t[keep] / ref[keep])) * 100.0
    q = 5000.0 / scale if scale > 100 else (200.0 - scale) / 2.0
    return float(min(100.0, max(1.0, q)))
