"""torchvision's detection references' ``SimpleCopyPaste``, batched on the device."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dctnet.transforms.detection.geometry import BOX_FIELDS, sample_generator


class SimpleCopyPaste:
    """torchvision's detection references' ``SimpleCopyPaste`` (``--use-copypaste``, with the
    ``lsj`` preset), on the batch the geometry leaves: sample ``b`` gets a random subset of the
    objects of sample ``b − 1`` (the batch rolled by one) pasted onto it.

    The references' rule (their ``_copy_paste``), step by step:

    - the subset: ``unique(randint(0, n, (n,)))`` of the ``n`` objects of the paste sample
      (drawn on the host, per sample, from its own generator; nothing is pasted when ``n = 0``);
    - the paste mask ``α`` = the union of their masks; ``blending`` passes it through their
      ``gaussian_blur(α, 5, σ=2)`` of a boolean mask, which comes back boolean and true wherever
      the blur is non-zero — a 5×5 dilation with reflected borders, computed as that;
    - image ← ``image·¬α + paste_image·α``; each own mask ← ``mask·¬α``; own objects whose mask
      is now empty are dropped; their boxes become ``masks_to_boxes`` of the occluded masks
      (inclusive pixel extents, as torchvision's); the pasted objects keep their boxes; ``area``
      (when present) becomes the masks' pixel counts; ``iscrowd`` is concatenated; degenerate
      boxes are dropped last. A sample whose paste sample has no objects is left as it was.

    The images must share one size (the references' LSJ pipeline crops every image to it; their
    resize of a differently sized paste image is not reproduced) and every target needs masks.

    Host syncs: which occluded objects survive depends on mask pixels, so :meth:`apply` ends with
    one device → host read of the batch's survival flags — the only synchronisation of a step with
    copy-paste (torchvision's detectors read the boxes back right after, in their degenerate-box
    test) — and keeps the survivors by index. The pixel and mask work is batched over the batch's
    objects; the per-sample loop only concatenates each target's fields."""

    def __init__(self, blending: bool = True) -> None:
        self.blending = bool(blending)

    def __repr__(self) -> str:
        return f"SimpleCopyPaste(blending={self.blending})"

    def draw(self, counts: Sequence[int], keys: Sequence[int], seed: int, epoch: int) -> list[Tensor]:
        """Per sample ``b``, the indices (sorted, unique) of the objects of sample ``b − 1`` pasted
        onto it; ``counts[b]`` is sample ``b``'s number of objects after the geometry."""
        out = []
        for b, key in enumerate(keys):
            n = int(counts[b - 1])
            g = sample_generator(seed, epoch, int(key), "copy-paste")  # apart from the geometry's stream
            out.append(torch.unique(torch.randint(0, n, (n,), generator=g)) if n else torch.zeros(0, dtype=torch.int64))
        return out

    def apply(self, images: Sequence[Tensor], targets: Sequence[dict[str, Any]],
              paste: Sequence[Tensor]) -> tuple[list[Tensor], list[dict[str, Any]]]:
        """``images[b]`` ``(3, h, w)`` and ``targets[b]`` (``boxes``, ``labels``, ``masks``
        ``(N_b, h, w)``, optionally ``area``, ``iscrowd``) on one device; ``paste`` from :meth:`draw`."""
        B = len(images)
        if B == 0:
            return [], []
        sizes = {tuple(im.shape[-2:]) for im in images}
        if len(sizes) != 1 or any(t.get("masks") is None for t in targets):
            raise ValueError("SimpleCopyPaste pastes between images of one size (the lsj preset crops every image to "
                             f"it; got sizes {sorted(sizes)}) and needs every target's instance masks")
        h, w = sizes.pop()
        device = images[0].device
        counts = [len(t["labels"]) for t in targets]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        masks = torch.cat([t["masks"] for t in targets]) if sum(counts) else images[0].new_zeros((0, h, w),
                                                                                                 dtype=torch.uint8)
        x, own = self._paste(images, masks, paste, offsets, counts)
        boxes = _masks_to_boxes(own)
        alive = (own != 0).flatten(1).any(1)
        out = []
        for b, t in enumerate(targets):  # host bookkeeping of the concatenation; device work is above
            o = slice(int(offsets[b]), int(offsets[b + 1]))
            if not len(paste[b]):  # nothing to paste (the previous sample has no objects): unchanged, as theirs
                out.append({**t, "_valid": torch.ones(counts[b], dtype=torch.bool, device=device)})
                x[b] = images[b]
                continue
            out.append(_pasted_target(t, targets[(b - 1) % B], paste[b], own[o], boxes[o], alive[o]))
        _keep_survivors(out, device)
        return list(x.unbind(0)), out

    def _paste(self, images: Sequence[Tensor], masks: Tensor, paste: Sequence[Tensor], offsets: np.ndarray,
               counts: Sequence[int]) -> tuple[Tensor, Tensor]:
        """The device work: the images with the previous sample's picked objects pasted on ``(B, 3, h, w)``,
        and every object's own mask occluded by what was pasted onto its image ``(N, h, w)`` (``masks``:
        the batch's masks concatenated, sample ``b``'s from ``offsets[b]``)."""
        B, (h, w), device = len(images), images[0].shape[-2:], images[0].device
        owner = np.repeat(np.arange(B), counts)
        # the pasted objects: global indices into ``masks`` and the sample each lands on
        picked = [paste[b].numpy() + offsets[(b - 1) % B] for b in range(B)]
        src = torch.from_numpy(np.concatenate(picked).astype(np.int64)).to(device, non_blocking=True)
        dst = torch.from_numpy(np.repeat(np.arange(B), [len(p) for p in picked])).to(device, non_blocking=True)
        pasted = masks.index_select(0, src)
        alpha = images[0].new_zeros((B, h, w)).index_add_(0, dst, pasted.to(images[0].dtype)) > 0
        if self.blending:  # gaussian_blur of a boolean mask → non-zero anywhere in the 5×5 reach
            alpha = torch.nn.functional.max_pool2d(
                torch.nn.functional.pad(alpha[:, None].to(images[0].dtype), (2, 2, 2, 2), mode="reflect"), 5, 1)[:, 0] > 0
        x = torch.stack(list(images))
        rolled = x.roll(1, 0)
        x = torch.where(alpha[:, None], rolled, x)
        own = masks * (~alpha).index_select(0, torch.from_numpy(owner).to(device, non_blocking=True))
        return x, own


def _pasted_target(t: dict[str, Any], prev: dict[str, Any], p: Tensor, own: Tensor, boxes: Tensor,
                   alive: Tensor) -> dict[str, Any]:
    """Target ``t`` with the objects ``p`` of ``prev`` (the previous sample's target) pasted on: its own
    objects' occluded masks ``own``, their ``boxes`` and whether they are ``alive`` (non-empty), then
    the pasted ones; ``_valid`` marks the objects that survive (alive, non-degenerate boxes)."""
    device = own.device
    dev_p = p.to(device, non_blocking=True)
    t2 = dict(t)
    t2["masks"] = torch.cat([own, prev["masks"].index_select(0, dev_p)])
    t2["boxes"] = torch.cat([boxes, prev["boxes"].index_select(0, dev_p).to(boxes.dtype)])
    t2["labels"] = torch.cat([t["labels"], prev["labels"].index_select(0, dev_p)])
    valid = torch.cat([alive, torch.ones(len(p), dtype=torch.bool, device=device)])
    if "area" in t:
        t2["area"] = t2["masks"].flatten(1).sum(1).to(torch.float32)
    if "iscrowd" in t and "iscrowd" in prev and len(t["iscrowd"]) == len(own):
        t2["iscrowd"] = torch.cat([t["iscrowd"], prev["iscrowd"].index_select(0, dev_p)])
    elif "iscrowd" in t2:
        del t2["iscrowd"]
    bx = t2["boxes"]
    t2["_valid"] = valid & (bx[:, 2:] > bx[:, :2]).all(1)
    return t2


def _keep_survivors(out: list[dict[str, Any]], device: torch.device) -> None:
    """Each target of ``out`` keeps the objects its ``_valid`` flags mark (popped), every per-box field."""
    # the one host read: which objects survive (their count sizes every target)
    flags = torch.cat([t.pop("_valid") for t in out]).cpu().numpy()
    ends = np.cumsum([len(t["labels"]) for t in out])
    for t, f in zip(out, np.split(flags, ends[:-1])):
        keep = torch.from_numpy(np.flatnonzero(f)).to(device, non_blocking=True)
        for k in BOX_FIELDS:
            if isinstance(t.get(k), Tensor):
                t[k] = t[k].index_select(0, keep)


def _masks_to_boxes(masks: Tensor) -> Tensor:
    """torchvision's ``ops.masks_to_boxes`` (XYXY, inclusive extents: the first and last pixel
    index along each axis) without its per-mask loop or host sync; an empty mask gives a
    degenerate box, dropped by the caller."""
    n, h, w = masks.shape
    rows, cols = (masks != 0).any(2), (masks != 0).any(1)
    ar_h = torch.arange(h, device=masks.device)
    ar_w = torch.arange(w, device=masks.device)
    y0 = torch.where(rows, ar_h, h).amin(1)
    y1 = torch.where(rows, ar_h, -1).amax(1)
    x0 = torch.where(cols, ar_w, w).amin(1)
    x1 = torch.where(cols, ar_w, -1).amax(1)
    return torch.stack([x0, y0, x1, y1], 1).to(torch.float32)
