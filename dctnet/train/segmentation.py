"""What a semantic segmentation recipe adds to the detection trainer (torchvision's segmentation
references): the ImageNet-normalised batch its models take, their loss (cross-entropy ignoring 255 on
``out``, plus half of it on ``aux``), and the evaluation (mIoU and pixel accuracy from confusion
matrices summed over ranks, counted on the device)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from dctnet.kernels.cache import constant
from dctnet.kernels.normalization import IMAGENET_MEAN, IMAGENET_STD
from dctnet.readback import log_point
from dctnet.train.coco_eval import mean_iou

__all__ = ["SegmentationTask"]


class SegmentationTask:
    """The segmentation task's methods of :class:`~dctnet.train.detection.DetectionTrainer` (which
    supplies ``net``, ``model``, ``num_classes``, ``device``, ``val_loader``, ``eval_step`` and
    ``_batches``)."""

    def _normalised(self, images: list[torch.Tensor]) -> torch.Tensor:
        """A segmentation batch: the images (one size: the crop) stacked, ImageNet-normalised as the
        segmentation references' ``Normalize``."""
        x = torch.stack(images)
        # built once per device and dtype (a torch.tensor(..., device=) per step is a blocking copy)
        mean = constant("imagenet_mean", IMAGENET_MEAN, x).reshape(1, 3, 1, 1)
        std = constant("imagenet_std", IMAGENET_STD, x).reshape(1, 3, 1, 1)
        return (x - mean) / std

    def _segmentation_losses(self, images, targets) -> dict[str, torch.Tensor]:
        """The segmentation references' criterion: cross-entropy ignoring 255 on ``out``, plus half
        of it on ``aux`` when the model has an auxiliary head."""
        out = self.net(self._normalised(images))
        y = torch.stack([t["semantic"] for t in targets]).long()
        losses = {"loss_out": nn.functional.cross_entropy(out["out"], y, ignore_index=255)}
        if "aux" in out:
            losses["loss_aux"] = 0.5 * nn.functional.cross_entropy(out["aux"], y, ignore_index=255)
        return losses

    @torch.no_grad()
    def _evaluate_segmentation(self, model: nn.Module) -> dict[str, float]:
        """mIoU and pixel accuracy of the val split at the eval size (the references' ``Resize(base)``,
        compared with the resized class map, 255 ignored), confusion matrices summed over ranks."""
        k = self.num_classes
        # one bin past the k·k cells takes the ignored pixels: counted with index_add_ (a masked index or
        # bincount would read the device's values back for every image)
        counts = torch.zeros(k * k + 1, dtype=torch.int64, device=self.device)
        cost = {"cpu": 0.0, "n": 0.0}
        for images, targets in self._batches(self.val_loader, self.eval_step, 0, cost, "val"):
            for image, target in zip(images, targets):  # one at a time: eval sizes differ
                pred = model(self._normalised([image]))["out"].argmax(1)[0]
                truth = target["semantic"].long()
                cell = torch.where(truth != 255, truth * k + pred, k * k).reshape(-1)
                counts.index_add_(0, cell, torch.ones_like(cell))
        confusion = counts[:k * k].reshape(k, k)
        if dist.is_initialized():
            dist.all_reduce(confusion)
        with log_point(self.device):  # the evaluation's result
            confusion = confusion.cpu()
            total = confusion.sum().clamp(min=1)
            result = {"mIoU": mean_iou(confusion), "pixel_acc": float(confusion.diag().sum() / total)}
        return {**result, "val_data_cpu_us_per_sample": cost["cpu"] / max(cost["n"], 1) * 1e6}
