"""The detection device step (:class:`DetectionStep`: the host plan, then the device apply) and the
coefficient mosaics a DCT detector takes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from dctnet.kernels.dct import coefficient_mosaic
from dctnet.transforms.base import to_coefficients
from dctnet.transforms.detection.apply import gather_masks, apply_plan
from dctnet.transforms.detection.copy_paste import SimpleCopyPaste
from dctnet.transforms.detection.ops import DetectionOp
from dctnet.transforms.detection.plan import DetectionCompose, DetectionPlan
from dctnet.transforms.transfer import move_plan


def coefficient_mosaics(images: Sequence[Tensor]) -> list[Tensor]:
    """The step's images (``(3, h_b, w_b)`` in [0, 1], sizes may differ) as what a DCT detector
    takes (:func:`dctnet.models.detection.dct_detector`): coefficient mosaics ``(3, H_b, W_b)``,
    ``H_b, W_b`` = ``h_b, w_b`` rounded up to multiples of 8 (the new rows and columns repeat the
    edge, as JPEG encoders pad), block DCT of YCbCr (:func:`dctnet.kernels.dct.coefficient_mosaic`).

    Each image is padded to its own blocks (a handful of small copies, like the detector's own
    batching), then one forward DCT runs over the batch padded to its largest image."""
    if not images:
        return []
    sizes = [(8 * -(-im.shape[-2] // 8), 8 * -(-im.shape[-1] // 8)) for im in images]
    h, w = max(s[0] for s in sizes), max(s[1] for s in sizes)
    batch = images[0].new_zeros(len(images), 3, h, w)
    for b, (im, (hb, wb)) in enumerate(zip(images, sizes)):
        padded = torch.nn.functional.pad(im[None], (0, wb - im.shape[-1], 0, hb - im.shape[-2]), mode="replicate")
        batch[b, :, :hb, :wb] = padded[0]
    mosaic = coefficient_mosaic(to_coefficients(batch))
    return [mosaic[b, :, :hb, :wb] for b, (hb, wb) in enumerate(sizes)]


class DetectionStep:
    """The detection device step: the batch's geometry drawn on the host from its targets, then the
    images (and instance masks) decoded and transformed on the batch's device.

    ``step(batch, targets, epoch)`` → ``(images, targets)``: ``images[b]`` float ``(3, h_b, w_b)`` in
    [0, 1] — the list torchvision's detectors take — and ``targets[b]`` on the batch's device with
    ``boxes`` float32 XYXY in those pixels, ``labels`` int64, ``masks`` uint8 ``(N_b, h_b, w_b)``
    (when the input target has masks), ``iscrowd``/``area`` where given (``area`` as the file
    states it, not rescaled), ``image_id``. Each sample's draws come from
    :func:`sample_generator` ``(seed, epoch, key)``, ``key`` its ``image_id`` (else its position
    ``index`` in the batch's dataset order, ``targets[b]["index"]``). ``targets[b]["size"]`` (h, w)
    is the image's size, a host value (:class:`dctnet.data.CocoDataset` sets it): the step reads
    nothing back from the device."""

    def __init__(self, ops: Sequence[DetectionOp] | DetectionCompose, seed: int = 0, *, exact: bool = False,
                 copy_paste: SimpleCopyPaste | None = None) -> None:
        self.compose = ops if isinstance(ops, DetectionCompose) else DetectionCompose(ops, seed)
        self.exact = bool(exact)
        self.seed = int(seed)
        #: a batch-level op after the per-sample geometry (torchvision's references apply it in their
        #: collate function, after the preset)
        self.copy_paste = copy_paste

    def __repr__(self) -> str:
        paste = f", {self.copy_paste!r}" if self.copy_paste is not None else ""
        return f"DetectionStep(exact={self.exact}, {self.compose!r}{paste})"

    def plan(self, targets: Sequence[dict[str, Any]], epoch: int = 0) -> DetectionPlan | None:
        """The host half: the batch's geometry and moved targets (``None`` for an empty batch)."""
        if not targets:
            return None
        keys = []
        for b, t in enumerate(targets):
            key = t.get("image_id", t.get("index"))
            if key is None or "size" not in t:
                raise ValueError(f"DetectionStep: target {b} needs 'size' (h, w) and an 'image_id' or 'index' "
                                 "(dctnet.data.CocoDataset's targets have both)")
            keys.append(int(key))
        plan = self.compose.draw([tuple(t["size"]) for t in targets], targets, keys, epoch)
        if self.copy_paste is not None:
            plan.paste = self.copy_paste.draw([len(t["labels"]) for t in plan.targets], keys, self.seed, epoch)
        return plan

    def __call__(self, batch: Any, targets: Sequence[dict[str, Any]],
                 epoch: int = 0) -> tuple[list[Tensor], list[dict[str, Any]]]:
        return self.apply(batch, targets, self.plan(targets, epoch))

    def apply(self, batch: Any, targets: Sequence[dict[str, Any]],
              plan: DetectionPlan | None) -> tuple[list[Tensor], list[dict[str, Any]]]:
        """The device half: ``plan`` (:meth:`plan` of these ``targets``) applied to ``batch``."""
        if plan is None:  # an empty batch (every sample skipped under on_error="skip")
            return [], []
        device = batch.valid.device
        has_masks = [t.get("masks") is not None for t in targets]
        # every host tensor the targets need, in one copy from pinned memory (transfer.move_plan), not a
        # pageable copy per field per image
        host = {"masks": [t["masks"] if m else None for t, m in zip(targets, has_masks)],
                "semantic": [t.get("semantic") for t in targets],
                "targets": [{"boxes": t["boxes"].to(torch.float32),
                             "labels": torch.as_tensor(t["labels"], dtype=torch.int64),
                             **{k: t[k] for k in ("iscrowd", "area") if t.get(k) is not None}}
                            for t in plan.targets]}
        on_device = move_plan(host, device)
        masks = on_device["masks"]
        images, out_masks = apply_plan(batch, plan, masks if any(has_masks) else None, exact=self.exact)
        out = []
        for b, t in enumerate(plan.targets):
            moved = dict(on_device["targets"][b])
            if out_masks[b] is not None:
                moved["masks"] = out_masks[b]
            if on_device["semantic"][b] is not None:
                moved["semantic"] = gather_masks(on_device["semantic"][b], plan.mask_maps[b], 255)  # padding: ignore index
            if "image_id" in t:
                moved["image_id"] = t["image_id"]
            out.append(moved)
        if plan.paste is not None:
            if self.copy_paste is None:
                raise ValueError("this plan was drawn with copy-paste; apply it with the step that drew it")
            images, out = self.copy_paste.apply(images, out, plan.paste)
        return images, out
