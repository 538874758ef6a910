"""The kernels layer: pure batched tensor functions, below data, nn, models and transforms.

Every function here takes tensors (and per-sample parameter tensors) and returns tensors: no
random draws, no ``nn.Module``, nothing of the layers above. The modules:

- :mod:`dctnet.kernels.dct` — 8×8 block DCT/IDCT, zigzag, coefficient mosaics, DCT-domain up- and
  downsampling, libjpeg's chroma upsampling;
- :mod:`dctnet.kernels.color` — JFIF's YCbCr ↔ RGB, component planes in any JPEG colour space → RGB;
- :mod:`dctnet.kernels.coefficients` — augmentation kernels on coefficient images ``(B, 3, Hb, Wb, 64)``
  (flips, brightness, contrast, requantization, per-(channel, frequency) standardisation, …);
- :mod:`dctnet.kernels.pixel` — torchvision's colour and tone ops on RGB batches ``(B, 3, H, W)``;
- :mod:`dctnet.kernels.geometry` — affine matrices (torchvision's and PIL's), torchvision's sampling
  grid (per-sample canvases in a padded batch too), affine and perspective warps, rotations;
- :mod:`dctnet.kernels.pil` — PIL's geometry and posterize as timm calls them, exact;
- :mod:`dctnet.kernels.policy` — the augmentation policies' kernels: one warp for every geometric op,
  one blend for the tone ops, the per-pixel ops, rounding to 8-bit levels;
- :mod:`dctnet.kernels.boxes` — pixel boxes, snapped to the block grid, and their masks;
- :mod:`dctnet.kernels.normalization` — the RGB normalisation a model expects (a leaf: no tensors);
- :mod:`dctnet.kernels.cache` — the constants the kernels build once per dtype and device.

Whole images (planes → RGB and back) are :mod:`dctnet.image`, libjpeg's integer decode
:mod:`dctnet.exact`, antialiased resizing :mod:`dctnet.resize`: the same layer.
"""
