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

No expansion reads a device tensor's values back (a host sync): what the host must know — output
shapes, each group's size — comes from tensor shapes and from the host batch. Each group's extent
(its samples' largest valid size, :attr:`JpegBatch.extents`) is read off ``valid`` where the batch is
built, on the host, and travels with the batch as plain ints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

__all__ = ["Extents", "JpegBatch", "PackedJpegBatch", "PlaneGroup", "SAMPLING_420", "Sampling", "SparseJpegBatch",
           "as_jpeg_batch", "expand_packed", "expand_sparse", "expand_torch", "group_extents"]

SAMPLING_420 = ((2, 2), (1, 1), (1, 1))

Sampling = tuple[tuple[int, int], ...]

#: per layout group, the largest valid ``(height, width)`` in pixels among its samples (``None`` for a
#: group without samples)
Extents = tuple[tuple[int, int] | None, ...]


def group_extents(valid: Tensor, rows: Sequence[Tensor]) -> Extents | None:
    """Each group's extent — the largest ``valid`` ``(height, width)`` among the samples at ``rows``
    — read off ``valid (B, 2)`` where that is free, on the host. ``None`` when ``valid`` or a group's
    rows are on a device: reading them there would stall the host until the device caught up."""
    if valid.device.type != "cpu" or any(r.device.type != "cpu" for r in rows):
        return None
    out: list[tuple[int, int] | None] = []
    for r in rows:
        if r.numel() == 0:
            out.append(None)
            continue
        h, w = valid.index_select(0, r.long()).amax(0).tolist()
        out.append((int(h), int(w)))
    return tuple(out)


def _checked_extents(extents: Extents | None, groups: int) -> Extents | None:
    if extents is not None and len(extents) != groups:
        raise ValueError(f"extents has {len(extents)} entries for {groups} layout groups")
    return extents


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
        extents: per group, the largest ``valid`` (height, width) among its samples (:data:`Extents`),
            host ints: the size the device step decodes each group to without reading ``valid``
            back. Computed from ``valid`` whenever the batch is built or replaced on the host (a
            value given there is ignored); on a device, kept as given (:meth:`to` carries the host's
            over). ``None`` (a batch built on a device without them): the device step decodes each
            group's whole MCU grid instead — the same crops up to float rounding.
    """

    groups: tuple[PlaneGroup, ...]
    valid: Tensor
    boxes: Tensor
    labels: Tensor
    index: Tensor
    skipped: tuple = field(default=())
    resize: Tensor | None = None
    extents: Extents | None = None

    _TENSORS = ("valid", "boxes", "labels", "index", "resize")

    def __post_init__(self) -> None:
        host = group_extents(self.valid, [g.rows for g in self.groups])
        self.extents = host if host is not None else _checked_extents(self.extents, len(self.groups))

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
    extents: Extents | None = None

    _META = ("valid", "boxes", "labels", "index", "resize")

    def __post_init__(self) -> None:  # as JpegBatch's: from the host's valid, carried to the device
        host = group_extents(self.valid, self.group_rows)
        self.extents = host if host is not None else _checked_extents(self.extents, len(self.group_rows))

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
        valid, boxes, labels, index, skipped, resize, extents: as :class:`JpegBatch`.
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
    dense = expand_torch(batch.masks, batch.values, batch.escapes, batch.tables.reshape(b * 4, 64)[owner], check=False)
    groups = []
    for (color_space, sampling, (gr, gc)), rows in zip(batch.layouts, batch.group_rows):
        win, blocks, offsets = batch.windows[rows], batch.blocks[rows], batch.offsets[rows]
        planes = tuple(_window_blocks(dense, offsets[:, c], blocks[:, c, 0], blocks[:, c, 1], win[:, 0, c],
                                      win[:, 1, c] - win[:, 0, c], win[:, 2, c], win[:, 3, c] - win[:, 2, c], gr * v,
                                      gc * h) for c, (h, v) in enumerate(sampling))
        groups.append(PlaneGroup(color_space, tuple(sampling), planes, rows))
    return JpegBatch(groups=tuple(groups), valid=batch.valid, boxes=batch.boxes, labels=batch.labels,
                     index=batch.index, skipped=batch.skipped, resize=batch.resize, extents=batch.extents)


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
        valid, boxes, labels, index, skipped, resize, extents: as :class:`JpegBatch`.
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
                     index=batch.index, skipped=batch.skipped, resize=batch.resize, extents=batch.extents)


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


def expand_torch(masks: Tensor, values: Tensor, escapes: Tensor, block_tables: Tensor, *, check: bool = True) -> Tensor:
    """Batched expansion in torch (any device): concatenated records of many images at once.

    Args:
        masks: ``int64 (NB,)`` — the uint64 masks reinterpreted (bit 63 is the sign bit).
        values: ``int8 (NV,)``, escapes: ``int16 (NE,)`` — concatenated in the same record order.
        block_tables: ``(NB, 64)`` table of each block.
        check: count the coefficients the masks mark and the escapes the values mark against the
            streams before anything is gathered, and raise ``ValueError`` on a mismatch. The counts
            are read back: a host sync on an accelerator. ``False`` (the device step's
            :func:`expand_sparse`): the same test is queued on the device
            (``torch._assert_async``), which stops the process on a mismatch (a ``RuntimeError`` on
            the CPU, a device-side assert on CUDA) instead of waiting for the answer; a corrupt record
            never makes the gathers read out of bounds either way (their positions are clamped).

    Returns ``int16 (NB, 64)``, identical to :func:`dctnet.data.sparse.expand` (the host's, in C).

    Raises:
        ValueError: (``check``) the masks' set bits do not match the number of values, or the
            escapes do not match the number of escaped values (a corrupt record)."""
    nb, nv, ne = masks.shape[0], values.numel(), escapes.numel()
    k = torch.arange(64, device=masks.device)
    bits = ((masks[:, None] >> k) & 1).bool().reshape(-1)                   # (NB·64,) in record order
    escaped = values == -128
    marked, n_escaped = bits.sum(), escaped.sum()
    if check:
        if int(marked) != nv or int(n_escaped) != ne:
            raise ValueError(f"corrupt sparse records: {int(marked)} coefficients marked, {nv} values, "
                             f"{int(n_escaped)} escapes marked, {ne} escapes")
    else:
        torch._assert_async((marked == nv) & (n_escaped == ne), "corrupt sparse records: the masks or escapes do not "
                            "match the values")
    if nv == 0:  # nothing marked (shapes are host-known): every coefficient is zero
        return torch.zeros(nb, 64, dtype=torch.int16, device=masks.device)
    # gathers instead of boolean-mask scatters (a mask's positions need a nonzero, read back by the
    # host): the i-th marked coefficient takes values[i], the j-th escaped value escapes[j], their
    # positions running counts of the marks (int32 where the counts fit: half the memory of int64)
    count = torch.int32 if bits.numel() < 2**31 else torch.int64
    v = values.to(torch.int32)
    if ne:
        slot = (torch.cumsum(escaped, 0, dtype=count) - 1).clamp_(0, ne - 1)
        v = torch.where(escaped, escapes.to(torch.int32).index_select(0, slot), v)
    pos = torch.cumsum(bits, 0, dtype=count).sub_(1).clamp_(0, nv - 1)
    out = v.index_select(0, pos)
    del pos  # in place from here: the batch's (NB·64,) int32 temporaries are the memory peak
    out.mul_(block_tables.to(torch.int32).reshape(-1)).masked_fill_(~bits, 0)
    return out.to(torch.int16).reshape(nb, 64)
