"""The batch contract: what the loaders hand to the device, and its expansion there.

A :class:`JpegBatch` holds int16 coefficient planes exactly as read, **in each file's own
layout**: samples are grouped by layout (colour space and sampling factors — 4:2:0, 4:4:4, 4:2:2,
gray, CMYK, …) into plane groups (:class:`PlaneGroup`), each with one plane tensor per component,
every sample sliced on the host to an MCU-aligned window around its crop box and zero-padded to
the group's grid. Per-sample metadata (valid size, box, label, index) is in batch order; a group's
``rows`` say which batch positions its samples hold. The crop box is exact (torchvision's), in
pixels relative to the window.

Two forms leave the host before they are a :class:`JpegBatch` (``CacheDataset(device_expand=True)``):
:class:`PackedJpegBatch` (windows without padding) and :class:`SparseJpegBatch` (a sparse cache's
compressed records). :func:`as_jpeg_batch` expands either on the batch's device, bit-identical to
the host gather. This module depends on torch only: the data layer builds these batches and the
transforms consume them (``dctnet.transforms.crops_to_rgb``), and neither imports the other for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

__all__ = ["JpegBatch", "PackedJpegBatch", "PlaneGroup", "SAMPLING_420", "Sampling", "SparseJpegBatch",
           "as_jpeg_batch", "expand_packed", "expand_sparse", "expand_torch"]

SAMPLING_420 = ((2, 2), (1, 1), (1, 1))

Sampling = tuple[tuple[int, int], ...]


class _TensorFields:
    """``tensors`` / ``pin_memory`` / ``to`` over the tensor fields named in ``_TENSORS``."""

    _TENSORS: tuple[str, ...] = ()

    def tensors(self) -> list[Tensor]:
        return [t for t in (getattr(self, n) for n in self._TENSORS) if t is not None]

    def _map(self, fn: Callable[[Tensor], Tensor]):  # optional fields (None) stay None
        return replace(self, **{n: fn(t) for n in self._TENSORS if (t := getattr(self, n)) is not None})

    def pin_memory(self):
        """Page-locked copies (``DataLoader(pin_memory=True)`` calls this)."""
        return self._map(lambda t: t.pin_memory())

    def to(self, device: torch.device | str, non_blocking: bool = False):
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))


@dataclass
class PlaneGroup(_TensorFields):
    """The samples of one layout within a :class:`JpegBatch`.

    Attributes:
        color_space: ``"gray"``, ``"YCbCr"``, ``"RGB"``, ``"CMYK"`` or ``"YCCK"``.
        sampling: per component ``(h, v)`` sampling factors.
        planes: per component ``int16 (n, R·v_c, C·h_c, 64)``: windows of ``R × C`` MCUs
            (the group's grid), zero-padded.
        rows: ``int64 (n,)`` the batch positions of the group's samples.
    """

    color_space: str
    sampling: Sampling
    planes: tuple[Tensor, ...]
    rows: Tensor

    def tensors(self) -> list[Tensor]:
        return [*self.planes, self.rows]

    def _map(self, fn: Callable[[Tensor], Tensor]) -> PlaneGroup:
        return replace(self, planes=tuple(fn(p) for p in self.planes), rows=fn(self.rows))

    @property
    def layout(self) -> tuple[str, Sampling]:
        return self.color_space, self.sampling

    def __len__(self) -> int:
        return self.rows.shape[0]


@dataclass
class JpegBatch(_TensorFields):
    """A collated batch of cropped coefficient planes (host or device), grouped by layout.

    Attributes:
        groups: one :class:`PlaneGroup` per layout present, in order of first appearance.
        valid: ``int64 (B, 2)`` (height, width) in pixels of real image content in each window
            (the image edge, where decoders replicate samples); the rest is padding.
        boxes: ``int64 (B, 4)`` crop box (top, left, height, width) in pixels relative to the
            window: the region resized. Without ``resize`` it lies in the window. With it, it is
            the whole image, and may start before the window and end past it.
        labels: ``int64 (B,)`` class indices.
        index: ``int64 (B,)`` dataset indices of the samples (for bookkeeping and tests).
        skipped: ``(index, name, reason)`` of samples the loader dropped under ``on_error="skip"``.
        resize: ``None`` (training crops): each box is resized straight to the output size. Or
            ``int64 (B, 4)`` = (height, width, top, left) (an eval crop,
            :class:`dctnet.data.ResizeCenterCrop`): each box is resized to height × width and the
            output-size crop at (top, left) of that is kept — timm's and torchvision's
            ``Resize`` + ``CenterCrop``. A negative top/left or a crop past the end is padding.
            The window still holds every pixel the kept crop reads.
    """

    groups: tuple[PlaneGroup, ...]
    valid: Tensor
    boxes: Tensor
    labels: Tensor
    index: Tensor
    skipped: tuple = field(default=())
    resize: Tensor | None = None

    _TENSORS = ("valid", "boxes", "labels", "index", "resize")

    def tensors(self) -> list[Tensor]:
        return [t for g in self.groups for t in g.tensors()] + super().tensors()

    def _map(self, fn: Callable[[Tensor], Tensor]) -> JpegBatch:
        return replace(super()._map(fn), groups=tuple(g._map(fn) for g in self.groups))

    def __len__(self) -> int:
        return self.labels.shape[0]

    def group(self, color_space: str, sampling: Sampling) -> PlaneGroup | None:
        """The group of one layout, or None."""
        for g in self.groups:
            if g.layout == (color_space, tuple(tuple(f) for f in sampling)):
                return g
        return None


@dataclass(kw_only=True)
class _GroupedRows(_TensorFields):
    """What a batch that still has to be expanded on its device shares with :class:`JpegBatch`:
    per-sample metadata, the layout groups and their batch rows (keyword-only fields, so each
    subclass lists its own data first)."""

    valid: Tensor
    boxes: Tensor
    labels: Tensor
    index: Tensor
    layouts: tuple = ()
    group_rows: tuple = ()
    skipped: tuple = field(default=())
    resize: Tensor | None = None

    _META = ("valid", "boxes", "labels", "index", "resize")

    def tensors(self) -> list[Tensor]:
        return super().tensors() + list(self.group_rows)

    def _map(self, fn: Callable[[Tensor], Tensor]):
        return replace(super()._map(fn), group_rows=tuple(fn(r) for r in self.group_rows))

    def __len__(self) -> int:
        return self.labels.shape[0]


@dataclass(kw_only=True)
class SparseJpegBatch(_GroupedRows):
    """A batch still in the cache's sparse form (see :mod:`dctnet.data.sparse`): the host only
    concatenates compressed records; :func:`expand_sparse` builds the :class:`JpegBatch` on the
    device. Records are whole images of any layout (up to 4 components).

    Attributes:
        masks ``int64 (NB,)``, values ``int8 (NV,)``, escapes ``int16 (NE,)``: concatenated records.
        tables: ``int32 (B, 4, 64)`` per-sample component tables.
        blocks: ``int64 (B, 4, 2)`` plane sizes (zero for absent components); offsets:
            ``int64 (B, 4)`` first block of each plane.
        windows: ``int64 (B, 4, 4)`` each plane's window in blocks: rows ``[0]..[1]``, columns
            ``[2]..[3]``, per component.
        valid, boxes, labels, index, skipped, resize: as :class:`JpegBatch`.
        layouts: per group ``(color_space, sampling, (R, C))``: layout and grid in MCUs.
        group_rows: per group ``int64 (n,)`` batch positions.
    """

    masks: Tensor
    values: Tensor
    escapes: Tensor
    tables: Tensor
    blocks: Tensor
    offsets: Tensor
    windows: Tensor

    _TENSORS = ("masks", "values", "escapes", "tables", "blocks", "offsets", "windows", *_GroupedRows._META)



def _window_blocks(dense: Tensor, offset: Tensor, bh: Tensor, bw: Tensor, r0: Tensor, rows: Tensor, c0: Tensor,
                   cols: Tensor, out_h: int, out_w: int) -> Tensor:
    """Gather each sample's window of a plane from the expanded blocks: ``(B, out_h, out_w, 64)``,
    zero outside the window and the plane."""
    r = torch.arange(out_h, device=dense.device)[None, :]
    c = torch.arange(out_w, device=dense.device)[None, :]
    src_r, src_c = r0[:, None] + r, c0[:, None] + c
    ok_r = (r < rows[:, None]) & (src_r < bh[:, None])
    ok_c = (c < cols[:, None]) & (src_c < bw[:, None])
    ok = ok_r[:, :, None] & ok_c[:, None, :]
    idx = offset[:, None, None] + src_r[:, :, None] * bw[:, None, None] + src_c[:, None, :]
    idx = torch.where(ok, idx, torch.zeros_like(idx))
    return dense[idx] * ok[..., None].to(dense.dtype)


def expand_sparse(batch: SparseJpegBatch) -> JpegBatch:
    """Expand a :class:`SparseJpegBatch` on its device into the :class:`JpegBatch` the host path
    would have built (bit-identical): batched torch, one gather per plane of each layout group,
    no per-sample loop."""
    nb = batch.masks.shape[0]
    b = len(batch)
    counts = (batch.blocks[:, :, 0] * batch.blocks[:, :, 1])                      # (B, 4)
    owner = torch.repeat_interleave(torch.arange(b * 4, device=batch.masks.device), counts.reshape(-1), output_size=nb)
    dense = expand_torch(batch.masks, batch.values, batch.escapes, batch.tables.reshape(b * 4, 64)[owner])
    groups = []
    for (color_space, sampling, (gr, gc)), rows in zip(batch.layouts, batch.group_rows):
        win, blocks, offsets = batch.windows[rows], batch.blocks[rows], batch.offsets[rows]
        planes = tuple(_window_blocks(dense, offsets[:, c], blocks[:, c, 0], blocks[:, c, 1], win[:, 0, c],
                                      win[:, 1, c] - win[:, 0, c], win[:, 2, c], win[:, 3, c] - win[:, 2, c], gr * v,
                                      gc * h) for c, (h, v) in enumerate(sampling))
        groups.append(PlaneGroup(color_space, tuple(sampling), planes, rows))
    return JpegBatch(groups=tuple(groups), valid=batch.valid, boxes=batch.boxes, labels=batch.labels,
                     index=batch.index, skipped=batch.skipped, resize=batch.resize)


@dataclass(kw_only=True)
class PackedJpegBatch(_GroupedRows):
    """A batch whose windows are packed without padding (a dense cache's ``device_expand``
    delivery): the host copies only the blocks inside each plane's window, and
    :func:`expand_packed` builds the zero-padded :class:`JpegBatch` on the device. The host then
    writes only the window (about half of a padded RandomResizedCrop batch) and the transfer
    moves only the window.

    Attributes:
        blocks: ``int16 (NB, 64)`` every sample's windows, component by component, row-major.
        offsets: ``int64 (B, 4)`` first block of each component's window in ``blocks``.
        sizes: ``int64 (B, 4, 2)`` each component's window (rows, columns) in blocks (zero for
            absent components).
        valid, boxes, labels, index, skipped, resize: as :class:`JpegBatch`.
        layouts, group_rows: as :class:`SparseJpegBatch`.
    """

    blocks: Tensor
    offsets: Tensor
    sizes: Tensor

    _TENSORS = ("blocks", "offsets", "sizes", *_GroupedRows._META)



def expand_packed(batch: PackedJpegBatch) -> JpegBatch:
    """Build the zero-padded :class:`JpegBatch` of a :class:`PackedJpegBatch` on its device
    (bit-identical to the host gather): one batched gather per plane of each layout group."""
    groups = []
    for (color_space, sampling, (gr, gc)), rows in zip(batch.layouts, batch.group_rows):
        offsets, sizes = batch.offsets[rows], batch.sizes[rows]
        planes = []
        for c, (h, v) in enumerate(sampling):
            out_h, out_w = gr * v, gc * h
            if batch.blocks.shape[0] == 0:  # every window empty: nothing to gather from
                planes.append(batch.blocks.new_zeros((len(rows), out_h, out_w, 64)))
                continue
            zero = torch.zeros_like(offsets[:, c])
            rh, rw = sizes[:, c, 0], sizes[:, c, 1]
            planes.append(_window_blocks(batch.blocks, offsets[:, c], rh, rw, zero, rh, zero, rw, out_h, out_w))
        groups.append(PlaneGroup(color_space, tuple(sampling), tuple(planes), rows))
    return JpegBatch(groups=tuple(groups), valid=batch.valid, boxes=batch.boxes, labels=batch.labels,
                     index=batch.index, skipped=batch.skipped, resize=batch.resize)


def as_jpeg_batch(batch: JpegBatch | PackedJpegBatch | SparseJpegBatch) -> JpegBatch:
    """The :class:`JpegBatch` of any batch a loader delivers, expanded on the batch's device
    (call it after the move): packed windows are padded, sparse records expanded."""
    if isinstance(batch, PackedJpegBatch):
        return expand_packed(batch)
    if isinstance(batch, SparseJpegBatch):
        return expand_sparse(batch)
    if isinstance(batch, JpegBatch):
        return batch
    raise TypeError(f"expected a JpegBatch, PackedJpegBatch or SparseJpegBatch, got {type(batch).__name__}")


def expand_torch(masks: Tensor, values: Tensor, escapes: Tensor, block_tables: Tensor) -> Tensor:
    """Batched expansion in torch (any device): concatenated records of many images at once.

    Args:
        masks: ``int64 (NB,)`` — the uint64 masks reinterpreted (bit 63 is the sign bit).
        values: ``int8 (NV,)``, escapes: ``int16 (NE,)`` — concatenated in the same record order.
        block_tables: ``(NB, 64)`` table of each block.

    Returns ``int16 (NB, 64)``, identical to :func:`dctnet.data.sparse.expand` (the host's, in C).

    Raises:
        ValueError: the masks' set bits do not match the number of values, or the escapes do not
            match the number of escaped values (a corrupt record; checked before any scatter)."""
    k = torch.arange(64, device=masks.device)
    bits = ((masks[:, None] >> k) & 1).bool()
    # boolean-mask scatters below synchronise with the host anyway: checking their sizes is free
    if int(bits.sum()) != values.numel() or int((values == -128).sum()) != escapes.numel():
        raise ValueError(f"corrupt sparse records: {int(bits.sum())} coefficients marked, {values.numel()} values, "
                         f"{int((values == -128).sum())} escapes marked, {escapes.numel()} escapes")
    v = values.to(torch.int32)
    v[values == -128] = escapes.to(torch.int32)
    out = torch.zeros(masks.shape[0], 64, dtype=torch.int32, device=masks.device)
    out[bits] = v * block_tables.to(torch.int32)[bits]
    return out.to(torch.int16)
