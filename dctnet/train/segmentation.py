"""The semantic segmentation task (torchvision's segmentation references, ``data.source: coco`` with
class-index PNGs): the detection task's data, arms and device step with the references' presets, the
ImageNet-normalised batch their models take, their loss (cross-entropy ignoring 255 on ``out``, plus
half of it on ``aux``), and the evaluation (mIoU and pixel accuracy from confusion matrices summed over
ranks, counted on the device)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dctnet.kernels.cache import constant
from dctnet.kernels.normalization import IMAGENET_MEAN, IMAGENET_STD
from dctnet.models.detection import build_segmenter
from dctnet.readback import log_point
from dctnet.train.coco_eval import mean_iou
from dctnet.train.detection import DetectionTask
from dctnet.train.recipe import Recipe
from dctnet.transforms import detection as TD

__all__ = ["SegmentationTask"]


class SegmentationTask(DetectionTask):
    """A torchvision segmentation model over a COCO set's class maps."""

    kind = "segmentation"

    def _network(self, r: Recipe, name: str, num_classes: int) -> nn.Module:
        return build_segmenter(name, num_classes)

    def _build_ops(self, r: Recipe) -> tuple[list, list]:
        """The segmentation references' presets; the model takes the batch as it is."""
        self.prepared = False
        self.model_resize_cpu = [0.0]  # (no model resize to time: the model takes the crops)
        return (TD.segmentation_preset(r.detect.base_size, r.detect.crop_size, r.detect.hflip_prob),
                TD.segmentation_preset(r.detect.base_size, train=False))

    def rgb_transform(self, r: Recipe, train: bool) -> Any:
        return TD.torchvision_segmentation_preset(r.detect.base_size, r.detect.crop_size, r.detect.hflip_prob,
                                                  train=train)

    def _normalised(self, images: list[torch.Tensor]) -> torch.Tensor:
        """A segmentation batch: the images (one size: the crop) stacked, ImageNet-normalised as the
        segmentation references' ``Normalize``."""
        x = torch.stack(images)
        # built once per device and dtype (a torch.tensor(..., device=) per step is a blocking copy)
        mean = constant("imagenet_mean", IMAGENET_MEAN, x).reshape(1, 3, 1, 1)
        std = constant("imagenet_std", IMAGENET_STD, x).reshape(1, 3, 1, 1)
        return (x - mean) / std

    def _losses(self, net: nn.Module, images: list[torch.Tensor], targets: list[dict]) -> dict[str, torch.Tensor]:
        """The segmentation references' criterion: cross-entropy ignoring 255 on ``out``, plus half
        of it on ``aux`` when the model has an auxiliary head."""
        out = net(self._normalised(images))
        y = torch.stack([t["semantic"] for t in targets]).long()
        losses = {"loss_out": nn.functional.cross_entropy(out["out"], y, ignore_index=255)}
        if "aux" in out:
            losses["loss_aux"] = 0.5 * nn.functional.cross_entropy(out["aux"], y, ignore_index=255)
        return losses

    @torch.no_grad()
    def evaluate(self, model: nn.Module, suffix: str = "") -> dict[str, float]:
        """mIoU and pixel accuracy of the val split at the eval size (the references' ``Resize(base)``,
        compared with the resized class map, 255 ignored), confusion matrices summed over ranks."""
        model.eval()
        k = self.num_classes
        # one bin past the k·k cells takes the ignored pixels: counted with index_add_ (a masked index or
        # bincount would read the device's values back for every image)
        counts = torch.zeros(k * k + 1, dtype=torch.int64, device=self.device)
        cost = {"cpu": 0.0, "n": 0.0}
        for images, targets in self.batches(self.val_loader, self.eval_step, 0, cost, "val"):
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
        result["val_data_cpu_us_per_sample"] = cost["cpu"] / max(cost["n"], 1) * 1e6
        return {f"{key}{suffix}": v for key, v in result.items()}

    def epoch_line(self, record: dict[str, Any]) -> str:
        miou = f", val mIoU {record['mIoU']:.3f}" if "mIoU" in record else ""
        miou += f" (EMA {record['mIoU_ema']:.3f})" if "mIoU_ema" in record else ""
        return (f"loss {record['train_loss']:.3f}{miou} | {record['images_per_s']:.1f} img/s, "
                f"data CPU {record['data_cpu_us_per_sample']:.0f} µs/sample")
