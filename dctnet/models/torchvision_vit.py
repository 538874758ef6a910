"""torchvision's ``VisionTransformer`` with a DCT stem in ``conv_proj``.

``VisionTransformer.forward`` calls ``self._process_input(x)``, which reads ``n, c, h, w =
x.shape`` and checks the pixel size before ``conv_proj``; a coefficient image ``(B, 3, Hb, Wb, 64)``
fails there. :class:`DCTVisionTransformer` is a subclass whose ``_process_input`` makes the same
check on the block grid and flattens the stem's output to tokens; everything else (class token,
position embeddings, encoder, heads) is the inherited forward. Importing this module imports
torchvision, which is why :mod:`dctnet.models.surgery` loads it only for a torchvision ViT.
"""

from __future__ import annotations

from torch import Tensor
from torchvision.models.vision_transformer import VisionTransformer

from dctnet.models.adapters import block_grid, grid_error

__all__ = ["DCTVisionTransformer", "to_dct_vision_transformer"]


class DCTVisionTransformer(VisionTransformer):
    """A ``VisionTransformer`` whose ``conv_proj`` is a DCT stem. Input: a coefficient image
    ``(B, 3, Hb, Wb, 64)`` (or ``(y, c)`` with native chroma) with ``8·Hb = 8·Wb = image_size``;
    output: the logits ``(B, num_classes)``.

    Not built directly: :func:`to_dct_vision_transformer` turns a built model into one in place
    (it adds no state, so weights, state_dict keys and the rest of the forward are the model's)."""

    def _process_input(self, x: Tensor | tuple[Tensor, Tensor | None]) -> Tensor:
        """Coefficients → tokens ``(B, N, hidden_dim)``, after torchvision's size check (on the
        block grid, as a ``ValueError`` naming both sizes)."""
        hb, wb = block_grid(x, "this model")
        if (8 * hb, 8 * wb) != (self.image_size, self.image_size):
            raise grid_error("this model", (self.image_size, self.image_size), (hb, wb), self.patch_size)
        x = self.conv_proj(x)                                                    # (B, C, H, W)
        n, c, h, w = x.shape
        return x.reshape(n, c, h * w).permute(0, 2, 1)


def to_dct_vision_transformer(model: VisionTransformer) -> DCTVisionTransformer:
    """Make ``model`` (its ``conv_proj`` already a DCT stem) a :class:`DCTVisionTransformer` in
    place and return it. A subclass of ``VisionTransformer`` gets a subclass of both, so its own
    methods stay and the coefficient ``_process_input`` comes first."""
    cls = type(model)
    if not issubclass(cls, DCTVisionTransformer):
        model.__class__ = (DCTVisionTransformer if cls is VisionTransformer
                           else type(f"DCT{cls.__name__}", (DCTVisionTransformer, cls), {"__module__": cls.__module__}))
    return model
