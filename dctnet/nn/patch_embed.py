r"""Patch embeddings over DCT coefficient blocks, with exact conversion of pretrained convs.

A patchify stem (a ViT's patch embedding, the 4×4 stride-4 stem of ConvNeXt and Swin) is a conv
with kernel = stride = p on normalised RGB. Everything between the JPEG's coefficients and that
conv is affine, so the conv folds into a linear layer on coefficients whenever its patches and
the 8×8 blocks nest:

* ``p = 8k`` (ViT-B/16, ViT-B/32, ...): each patch covers k×k blocks; one linear map of their
  ``3·k²·64`` coefficients gives the patch's ``E`` outputs;
* ``p`` divides 8 (``p = 4``: ConvNeXt, Swin): each block holds ``r×r`` patches (``r = 8/p``);
  one linear map of its ``3·64`` coefficients gives all ``r²·E`` outputs, and a depth-to-space
  (pixel shuffle by ``r``) puts them on the stride-p grid.

The algebra, per output:

* samples: :math:`s_k = \mathrm{IDCT}(S_k)` for k ∈ {Y, Cb, Cr} (level-shifted, 0..255 scale);
* colour: :math:`\mathrm{rgb} = A s + 128` with JFIF's matrix ``A``;
* normalisation: :math:`n_c = (\mathrm{rgb}_c/255 − μ_c)/σ_c`;
* conv: :math:`o = Σ_{c,i,j} W_{c,ij} n_c(i,j) + b`.

So :math:`o = Σ_k Σ_{ij} W'_{k,ij} s_k(ij) + b'` with :math:`W'_k = Σ_c A_{ck} W_c/(255 σ_c)` and
:math:`b' = b + Σ_c (128/255 − μ_c)/σ_c · Σ_{ij} W_{c,ij}`, and by Parseval (orthonormal DCT)
:math:`Σ_{ij} W'_{ij} s(ij) = Σ_f \mathrm{DCT}(W')_f S_f` block by block. Chroma stored at lower
resolution (``chroma="native"``) is handled by pushing ``W'`` through nearest upsampling: it is
sum-pooled by the chroma factor and placed where the patch sits inside the chroma blocks that
cover it (for patch 8 and 2× chroma, four patches share a chroma block with four weight sets).
Dropping frequencies (``keep``) drops weight columns: exact when the dropped coefficients are zero.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from dctnet.kernels import dct as F
from dctnet.kernels import coefficients as TF

__all__ = ["DCTPatchEmbed", "JFIF_YCC_TO_RGB", "block_aligned", "frequency_index", "is_patchify"]

#: RGB (0..255) = A · (Y, Cb, Cr) level-shifted samples + 128.
JFIF_YCC_TO_RGB = ((1.0, 0.0, 1.402), (1.0, -0.344136, -0.714136), (1.0, 1.772, 0.0))


def frequency_index(keep: int | str | Sequence[int] | None) -> Tensor:
    """Natural indices of kept frequencies: ``None`` (all 64), ``K`` / ``"zigzag:K"`` (first K in
    zigzag order), ``"square:K"`` (top-left K×K) or an explicit list."""
    if keep is None:
        return torch.arange(64)
    if isinstance(keep, int):
        return TF.zigzag_first(keep)
    if isinstance(keep, str):
        kind, _, k = keep.partition(":")
        if kind == "zigzag":
            return TF.zigzag_first(int(k))
        if kind == "square":
            return TF.square_indices(int(k))
        raise ValueError(f"keep must be an int, 'zigzag:K', 'square:K' or a list, not {keep!r}")
    idx = torch.as_tensor(list(keep), dtype=torch.long)
    if idx.numel() == 0 or idx.min() < 0 or idx.max() > 63:
        raise ValueError(f"frequency indices must be in 0..63, got {idx.tolist()}")
    return idx


def block_aligned(p: int) -> bool:
    """Whether p×p patches and 8×8 blocks nest (``p`` a multiple of 8, or a divisor of 8)."""
    return p >= 1 and (p % 8 == 0 or 8 % p == 0)


def is_patchify(conv: nn.Module) -> bool:
    """Whether ``conv`` is a block-aligned patchify conv that :meth:`DCTPatchEmbed.from_conv`
    converts exactly: ``nn.Conv2d`` with 3 input channels, square kernel = stride = p
    (:func:`block_aligned`), no padding, no dilation, one group."""
    if not isinstance(conv, nn.Conv2d):
        return False
    p = conv.kernel_size[0]
    return (conv.kernel_size == (p, p) and conv.stride == (p, p) and conv.in_channels == 3 and conv.groups == 1
            and conv.dilation == (1, 1) and conv.padding in ((0, 0), "valid") and block_aligned(p))


def _blocks_of(w: Tensor) -> Tensor:
    """``(..., 8a, 8b)`` spatial weights → ``(..., a, b, 64)`` DCT coefficients per block."""
    return F.block_dct(w)


class DCTPatchEmbed(nn.Module):
    """Linear patch embedding over coefficient blocks; output ``(B, embed_dim, H/p, W/p)`` like
    the conv it replaces.

    Inputs:
        ``chroma="upsampled"``: a coefficient image ``(B, 3, Hb, Wb, 64)`` (Y, Cb, Cr on the luma
        grid — :func:`dctnet.transforms.crops_to_coefficients`), or ``(B, 1, Hb, Wb, 64)`` for
        grayscale.
        ``chroma="native"``: a pair ``(y, c)`` — ``y (B, Hb, Wb, 64)``, ``c (B, 2, Hb/fv, Wb/fh, 64)``
        with the chroma factors ``(fh, fv)`` given at construction (``c=None``: grayscale).

    Args:
        patch_size: a multiple of 8 (8, 16, 32, ...) or a divisor of 8 (1, 2, 4). Below 8 the layer
            maps each block to its ``(8/p)²`` patches and pixel-shuffles them: output
            ``(B, E, Hb·8/p, Wb·8/p)``. Such a layer holds ``(8/p)²·E·3·64`` weights — 4× the conv's
            FLOPs for p = 4 — the price of being exact without an IDCT.
        embed_dim: output channels.
        chroma: ``"upsampled"`` or ``"native"`` (native needs ``p ≥ 8`` and patches that nest with
            the chroma blocks: ``p`` = 8 or a multiple of ``8·factor``).
        chroma_factor: ``(fh, fv)`` of the native chroma grid (``(2, 2)`` for 4:2:0).
        keep: frequencies to use (see :func:`frequency_index`).
    """

    def __init__(self, patch_size: int = 16, embed_dim: int = 768, *, chroma: str = "upsampled",
                 chroma_factor: tuple[int, int] = (2, 2), keep: int | str | Sequence[int] | None = None,
                 bias: bool = True) -> None:
        super().__init__()
        if not block_aligned(patch_size):
            raise ValueError(f"patch_size must be a multiple of 8 (8, 16, 32, ...) or divide 8 (1, 2, 4), "
                             f"got {patch_size}")
        if chroma not in ("upsampled", "native"):
            raise ValueError(f"chroma must be 'upsampled' or 'native', not {chroma!r}")
        fh, fv = chroma_factor
        if fh not in (1, 2) or fv not in (1, 2):
            raise ValueError(f"chroma_factor must be 1 or 2 per axis, got {chroma_factor}")
        if chroma == "native":
            if patch_size < 8:
                raise ValueError(f"chroma='native' needs a patch size of at least 8, got {patch_size}")
            for f in (fh, fv):  # a patch must cover whole chroma blocks, or a chroma block whole patches
                if patch_size % (8 * f) and (8 * f) % patch_size:
                    raise ValueError(f"chroma='native' with chroma factor {f}: patch size {patch_size} does not nest "
                                     f"with {8 * f}-pixel chroma blocks (use 8 or a multiple of {8 * f})")
        self.patch_size, self.embed_dim, self.chroma = patch_size, embed_dim, chroma
        self.chroma_factor = (fh, fv)
        self.register_buffer("index", frequency_index(keep), persistent=False)
        k = self.index.numel()
        n = max(1, patch_size // 8)                       # blocks per patch side (p ≥ 8)
        self._shuffle = max(1, 8 // patch_size)           # patches per block side (p < 8)
        out = embed_dim * self._shuffle ** 2
        # the patch's coefficients → embedding: Y, Cb, Cr ("upsampled"), or Y alone ("native",
        # chroma through chroma_weight)
        self.linear = nn.Linear((3 if chroma == "upsampled" else 1) * n * n * k, out, bias=bias)
        if chroma == "native":
            # chroma footprint of a patch, in chroma blocks, and patches per chroma block
            self._foot = (max(1, patch_size // (8 * fv)), max(1, patch_size // (8 * fh)))
            self._classes = (max(1, 8 * fv // patch_size), max(1, 8 * fh // patch_size))
            cv, ch = self._classes
            nr, nc = self._foot
            self.chroma_weight = nn.Parameter(torch.zeros(cv, ch, embed_dim, 2 * nr * nc * k))

    # ------------------------------------------------------------------ forward
    def _patches(self, x: Tensor, n: int) -> Tensor:
        """``(B, C, Hb, Wb, K)`` → ``(B, Hb/n, Wb/n, C·n·n·K)``: the blocks under each patch."""
        b, c, hb, wb, k = x.shape
        x = x.reshape(b, c, hb // n, n, wb // n, n, k).permute(0, 2, 4, 1, 3, 5, 6)
        return x.reshape(b, hb // n, wb // n, c * n * n * k)

    def _check_grid(self, hb: int, wb: int, k: int) -> None:
        n = max(1, self.patch_size // 8)
        if k != 64:
            raise ValueError(f"DCTPatchEmbed takes all 64 coefficients per block (it selects its own), got {k}")
        if hb % n or wb % n:
            raise ValueError(f"DCTPatchEmbed(patch_size={self.patch_size}) needs a block grid divisible by {n}, "
                             f"got {hb}x{wb} blocks")

    def forward(self, x: Tensor | tuple[Tensor, Tensor | None]) -> Tensor:
        n = max(1, self.patch_size // 8)
        if self.chroma == "upsampled":
            if not isinstance(x, Tensor) or x.dim() != 5 or x.shape[1] not in (1, 3):
                got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
                raise ValueError(f"chroma='upsampled' takes a coefficient image (B, 3, Hb, Wb, 64) "
                                 f"(dctnet.transforms.crops_to_coefficients), got {got}")
            self._check_grid(x.shape[2], x.shape[3], x.shape[4])
            if x.shape[1] == 1:  # grayscale: zero chroma
                x = torch.cat([x, x.new_zeros(x.shape[0], 2, *x.shape[2:])], dim=1)
            x = x.index_select(-1, self.index).to(self.linear.weight.dtype)
            out = self.linear(self._patches(x, n)).permute(0, 3, 1, 2)    # (B, E·r², Hp, Wp)
            if self._shuffle > 1:  # rows are ordered (E, r, r): depth-to-space puts them on the stride-p grid
                out = nn.functional.pixel_shuffle(out, self._shuffle)
            return out
        if not isinstance(x, (tuple, list)) or len(x) != 2 or not isinstance(x[0], Tensor) or x[0].dim() != 4:
            raise ValueError("chroma='native' takes a pair (y (B, Hb, Wb, 64), c (B, 2, Hc, Wc, 64) or None)")
        y, c = x
        self._check_grid(y.shape[1], y.shape[2], y.shape[3])
        y = y.index_select(-1, self.index).to(self.linear.weight.dtype).unsqueeze(1)
        out = self.linear(self._patches(y, n))                                       # (B, Hp, Wp, E)
        if c is not None:
            c = c.index_select(-1, self.index).to(self.linear.weight.dtype)
            nr, nc = self._foot
            cv, ch = self._classes
            b, _, hc, wc, k = c.shape
            cp = c.reshape(b, 2, hc // nr, nr, wc // nc, nc, k).permute(0, 2, 4, 1, 3, 5, 6)
            cp = cp.reshape(b, hc // nr, wc // nc, 2 * nr * nc * k)
            contrib = torch.einsum("bhwi,pqei->bhpwqe", cp, self.chroma_weight)
            contrib = contrib.reshape(b, (hc // nr) * cv, (wc // nc) * ch, self.embed_dim)
            out = out + contrib
        return out.permute(0, 3, 1, 2)

    # ------------------------------------------------------------------ conversion
    @classmethod
    def from_conv(cls, conv: nn.Conv2d, mean: Sequence[float] = (0.0, 0.0, 0.0), std: Sequence[float] = (1.0, 1.0, 1.0),
                  *, chroma: str = "upsampled", chroma_factor: tuple[int, int] = (2, 2),
                  keep: int | str | Sequence[int] | None = None) -> "DCTPatchEmbed":
        """Exact conversion of an RGB patchify conv (3 input channels, square kernel = stride = p
        with p a multiple of 8 or a divisor of 8, no padding) whose input is
        ``(rgb/255 − mean)/std`` (``rgb`` in [0, 1]). See the module docstring."""
        if not is_patchify(conv):
            raise ValueError("not a block-aligned patch embedding (3 channels, square kernel = stride = p with p a "
                             f"multiple of 8 or a divisor of 8, no padding, groups 1): {conv}")
        p = conv.kernel_size[0]
        out = cls(p, conv.out_channels, chroma=chroma, chroma_factor=chroma_factor, keep=keep, bias=True)
        out = out.to(device=conv.weight.device, dtype=conv.weight.dtype)  # before loading: no float32 detour
        w = conv.weight.detach().to(torch.float64)                              # (E, 3, p, p)
        b = conv.bias.detach().to(torch.float64) if conv.bias is not None else torch.zeros(conv.out_channels,
                                                                                             dtype=torch.float64)
        mean_t = torch.tensor(mean, dtype=torch.float64)
        std_t = torch.tensor(std, dtype=torch.float64)
        a = torch.tensor(JFIF_YCC_TO_RGB, dtype=torch.float64)                    # [c, k]
        w_ycc = torch.einsum("ecij,ck,c->ekij", w, a, 1.0 / (255.0 * std_t))      # W'_k
        bias = b + torch.einsum("ecij,c->e", w, (128.0 / 255.0 - mean_t) / std_t)
        out.load_spatial(w_ycc, bias)
        return out

    @torch.no_grad()
    def load_spatial(self, w_ycc: Tensor, bias: Tensor | None = None) -> None:
        """Set the weights from a spatial kernel ``(E, 3, p, p)`` acting on level-shifted
        (Y, Cb, Cr) samples (0..255 scale) — the conv this layer is equivalent to."""
        e, p, idx = self.embed_dim, self.patch_size, self.index
        w = w_ycc.to(torch.float64)
        r = self._shuffle
        if r > 1:
            # each block holds r×r patches: place the kernel at every patch position of an 8×8
            # canvas (rows ordered (E, i, j) for the pixel shuffle) and transform the canvases
            canvas = torch.zeros(e, r, r, 3, 8, 8, dtype=torch.float64, device=w.device)
            for i in range(r):       # at most 8×8 positions, once at conversion time
                for j in range(r):
                    canvas[:, i, j, :, i * p:(i + 1) * p, j * p:(j + 1) * p] = w
            coef = _blocks_of(canvas)[..., idx]                                  # (E, r, r, 3, 1, 1, K)
            self.linear.weight.copy_(coef.reshape(e * r * r, -1))
            if bias is not None and self.linear.bias is not None:
                self.linear.bias.copy_(bias.to(torch.float64).repeat_interleave(r * r))
            return
        coef = _blocks_of(w)[..., idx]                                           # (E, 3, p/8, p/8, K)
        if self.chroma == "upsampled":
            self.linear.weight.copy_(coef.reshape(e, -1))
        else:
            self.linear.weight.copy_(coef[:, :1].reshape(e, -1))
            fh, fv = self.chroma_factor
            nr, nc = self._foot
            cv, ch = self._classes
            pooled = w[:, 1:].reshape(e, 2, p // fv, fv, p // fh, fh).sum(dim=(3, 5))  # W' through nearest up
            weights = torch.zeros(cv, ch, e, 2 * nr * nc * len(idx), dtype=torch.float64)
            for a in range(cv):          # the patch's position inside its chroma block(s); at most 2×2
                for c in range(ch):
                    canvas = torch.zeros(e, 2, 8 * nr, 8 * nc, dtype=torch.float64)
                    canvas[:, :, a * (p // fv):(a + 1) * (p // fv), c * (p // fh):(c + 1) * (p // fh)] = pooled
                    weights[a, c] = _blocks_of(canvas)[..., idx].reshape(e, -1)
            self.chroma_weight.copy_(weights)
        if bias is not None and self.linear.bias is not None:
            self.linear.bias.copy_(bias)

    @torch.no_grad()
    def init_from_spatial(self, generator: torch.Generator | None = None) -> None:
        """Initialise as a spatial conv with Kaiming-uniform init would be (``nn.Conv2d``'s
        default), transformed to the DCT domain — the right scale for training from scratch."""
        conv = nn.Conv2d(3, self.embed_dim, self.patch_size, self.patch_size)
        if generator is not None:
            bound = 1.0 / (3 * self.patch_size ** 2) ** 0.5
            conv.weight.uniform_(-bound, bound, generator=generator)
            conv.bias.uniform_(-bound, bound, generator=generator)
        self.load_spatial(conv.weight.double() / 255.0, conv.bias.double())
