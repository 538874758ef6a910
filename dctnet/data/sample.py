"""One cropped sample on the host: its coefficient window in the file's own layout, with the
metadata collate needs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dctnet.batch import Sampling
from dctnet.data.crop import Box

__all__ = ["CoefficientSample"]


@dataclass
class CoefficientSample:
    """One cropped sample (host, numpy), in its file's own layout.

    Attributes:
        planes: per component an ``int16 (R·v_c, C·h_c, 64)`` window of the component's plane
            (views into the decoded planes) for a window of ``R × C`` MCUs.
        sampling: per component ``(h_c, v_c)`` sampling factors.
        color_space: ``"gray"``, ``"YCbCr"``, ``"RGB"``, ``"CMYK"`` or ``"YCCK"``.
        valid: (height, width) in pixels of image content in the window.
        box: (top, left, height, width) crop box in pixels relative to the window.
        label, index: class index and dataset index.
        resize: (height, width, top, left) of a resize-then-crop policy, or ``None``
            (:attr:`dctnet.batch.JpegBatch.resize`; ``box`` is then the whole image).
    """

    planes: tuple[np.ndarray, ...]
    sampling: Sampling
    color_space: str
    valid: tuple[int, int]
    box: Box
    label: int
    index: int
    resize: tuple[int, int, int, int] | None = None

    @property
    def layout(self) -> tuple[str, Sampling]:
        """What samples must share to be decoded together: ``(color_space, sampling)``."""
        return self.color_space, self.sampling

    @property
    def mcu(self) -> tuple[int, int]:
        """Window size in MCUs ``(R, C)``."""
        h, v = self.sampling[0]
        return self.planes[0].shape[0] // v, self.planes[0].shape[1] // h
