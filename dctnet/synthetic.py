"""Photo-like synthetic JPEGs, generated locally (no downloads).

Used by the tests when ``../shared`` is absent and by ``make demo`` as its built-in data. The
images have what real photos have and flat test patterns lack: smooth gradients, hard edges,
saturated colours and fine texture, so every DCT frequency and the chroma path get exercised.
Encoding uses Pillow (libjpeg-turbo), so the files are ordinary JPEGs.
"""

from __future__ import annotations

import io

import numpy as np

__all__ = ["encode_jpeg", "synthetic_image", "synthetic_jpeg"]


def synthetic_image(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """``uint8 (height, width, 3)`` RGB: gradient background, random shapes, texture, noise."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    scale = float(max(height, width, 1))
    corners = rng.uniform(0, 255, size=(3, 3)).astype(np.float32)
    img = corners[0] + (corners[1] - corners[0]) * (xx / scale)[..., None] + (corners[2] - corners[0]) * (yy / scale)[..., None]
    for _ in range(int(rng.integers(2, 6))):
        cy, cx = rng.uniform(0, height), rng.uniform(0, width)
        ry, rx = rng.uniform(0.05, 0.4) * scale, rng.uniform(0.05, 0.4) * scale
        colour = rng.uniform(0, 255, size=3).astype(np.float32)
        if rng.random() < 0.5:
            mask = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0
        else:
            mask = (np.abs(yy - cy) <= ry / 2) & (np.abs(xx - cx) <= rx / 2)
        img[mask] = colour
    fy, fx = rng.uniform(0.05, 0.6, size=2)
    texture = np.sin(yy * fy + rng.uniform(0, 6)) * np.cos(xx * fx + rng.uniform(0, 6))
    img += (rng.uniform(5, 30) * texture)[..., None]
    img += rng.normal(0, rng.uniform(1, 6), size=img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def encode_jpeg(img: np.ndarray, *, quality: int = 75, subsampling: str = "4:2:0", progressive: bool = False,
                gray: bool = False, optimize: bool = False) -> bytes:
    """Encode ``uint8 (H, W, 3)`` RGB with Pillow. ``subsampling``: "4:4:4", "4:2:2" or "4:2:0"."""
    from PIL import Image

    im = Image.fromarray(img, "RGB")
    if gray:
        im = im.convert("L")
    buf = io.BytesIO()
    kwargs = {"quality": quality, "progressive": progressive, "optimize": optimize}
    if not gray:
        kwargs["subsampling"] = subsampling
    im.save(buf, "JPEG", **kwargs)
    return buf.getvalue()


def synthetic_jpeg(seed: int, height: int = 96, width: int = 128, **encode_kwargs: object) -> bytes:
    """One synthetic photo encoded as JPEG; the same seed always gives the same bytes."""
    return encode_jpeg(synthetic_image(np.random.default_rng(seed), height, width), **encode_kwargs)  # type: ignore[arg-type]
