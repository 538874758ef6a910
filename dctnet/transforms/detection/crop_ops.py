"""The detection ops that crop and pad: fixed-size, random and IoU crops, padding, zoom-out."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from dctnet.transforms.detection.geometry import box_iou, clamp_boxes, keep_boxes, resize_boxes
from dctnet.transforms.detection.ops import DetectionOp, fill_rgb


class FixedSizeCrop(DetectionOp):
    """torchvision's detection references' ``FixedSizeCrop(size, fill)`` (their LSJ preset): a crop
    of at most ``size`` at a random offset (one draw for both axes, as theirs), boxes shifted, clamped
    and the empty ones dropped with their labels and masks; then padding at the bottom and right up
    to ``size`` with ``fill`` (8-bit levels; masks 0)."""

    def __init__(self, size: int | Sequence[int], fill: float | Sequence[float] = 0) -> None:
        size = (size, size) if isinstance(size, int) else tuple(size)
        self.size = (int(size[0]), int(size[1]))
        self.fill = fill
        self._fill = fill_rgb(fill)

    def __call__(self, geom, target, gen):
        h, w = geom.canvas
        ch, cw = self.size
        nh, nw = min(h, ch), min(w, cw)
        if (nh, nw) != (h, w):
            r = torch.rand(1, generator=gen)
            top, left = int(max(h - ch, 0) * r), int(max(w - cw, 0) * r)
            b = target["boxes"].clone()
            b[:, 0::2] -= left
            b[:, 1::2] -= top
            b[:, 0::2] = b[:, 0::2].clamp(0, nw)
            b[:, 1::2] = b[:, 1::2].clamp(0, nh)
            target["boxes"] = b
            keep_boxes(target, (b[:, 0] < b[:, 2]) & (b[:, 1] < b[:, 3]))
            geom.crop(top, left, nh, nw)
        geom.pad(0, 0, max(cw - nw, 0), max(ch - nh, 0), self._fill)


class RandomResizedCrop(DetectionOp):
    """torchvision v2's ``RandomResizedCrop(size, scale, ratio)`` on a detection sample: its crop
    draw (10 tries of area and log-uniform aspect, else the central crop), the crop resized to
    ``size`` with antialiasing in one resampling, boxes shifted, clamped to the crop and scaled."""

    def __init__(self, size: int | Sequence[int], scale: Sequence[float] = (0.08, 1.0),
                 ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0)) -> None:
        size = (size, size) if isinstance(size, int) else tuple(size)
        self.size = (int(size[0]), int(size[1]))
        self.scale, self.ratio = (float(scale[0]), float(scale[1])), (float(ratio[0]), float(ratio[1]))
        self._log_ratio = torch.log(torch.tensor(self.ratio))  # float32, as torchvision's

    def _draw(self, height: int, width: int, gen: torch.Generator) -> tuple[int, int, int, int]:
        area = height * width
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(self.scale[0], self.scale[1], generator=gen).item()
            aspect = torch.exp(torch.empty(1).uniform_(float(self._log_ratio[0]), float(self._log_ratio[1]),
                                                       generator=gen)).item()
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                i = int(torch.randint(0, height - h + 1, size=(1,), generator=gen).item())
                j = int(torch.randint(0, width - w + 1, size=(1,), generator=gen).item())
                return i, j, h, w
        in_ratio = float(width) / float(height)
        if in_ratio < min(self.ratio):
            w, h = width, int(round(width / min(self.ratio)))
        elif in_ratio > max(self.ratio):
            h, w = height, int(round(height * max(self.ratio)))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, geom, target, gen):
        i, j, h, w = self._draw(*geom.canvas, gen)
        b = target["boxes"] - torch.tensor([j, i, j, i], dtype=target["boxes"].dtype)
        target["boxes"] = clamp_boxes(b, (h, w))
        geom.crop(i, j, h, w)
        resize_boxes(target, (h, w), self.size)
        geom.resize(*self.size)


class PadIfSmaller(DetectionOp):
    """torchvision's segmentation references' ``PadIfSmaller(size, fill)``: pad the bottom and
    right up to ``size`` on each side shorter than it, the image with ``fill`` (8-bit levels;
    their default 0) and masks with 255 (the ignore index)."""

    def __init__(self, size: int, fill: float | Sequence[float] = 0) -> None:
        self.size, self.fill = int(size), fill
        self._fill = fill_rgb(fill)

    def __call__(self, geom, target, gen):
        h, w = geom.canvas
        geom.pad(0, 0, max(self.size - w, 0), max(self.size - h, 0), self._fill)


class RandomCrop(DetectionOp):
    """torchvision v2's ``RandomCrop(size, pad_if_needed, fill)`` (``padding=None``): a crop at a
    uniformly drawn offset, boxes shifted and clamped. ``pad_if_needed``: a side shorter than the
    crop is first padded on both ends by the shortfall (torchvision's rule: the canvas grows by
    twice it), the image with ``fill`` (8-bit levels), masks with 0; without it a short side is an
    error, as torchvision's (the segmentation references put :class:`PadIfSmaller` first)."""

    def __init__(self, size: int | Sequence[int], pad_if_needed: bool = False, fill: float | Sequence[float] = 0) -> None:
        size = (size, size) if isinstance(size, int) else tuple(size)
        self.size = (int(size[0]), int(size[1]))
        self.pad_if_needed, self.fill = bool(pad_if_needed), fill
        self._fill = fill_rgb(fill)

    def __call__(self, geom, target, gen):
        h, w = geom.canvas
        ch, cw = self.size
        dy = ch - h if self.pad_if_needed and h < ch else 0
        dx = cw - w if self.pad_if_needed and w < cw else 0
        if dy or dx:
            geom.pad(dx, dy, dx, dy, self._fill)
            target["boxes"] = clamp_boxes(target["boxes"] + torch.tensor([dx, dy, dx, dy], dtype=target["boxes"].dtype),
                                     (h + 2 * dy, w + 2 * dx))
            h, w = h + 2 * dy, w + 2 * dx
        if h < ch or w < cw:
            raise ValueError(f"Required crop size {self.size} is larger than input image size {(h, w)}.")
        top = int(torch.randint(0, h - ch + 1, size=(), generator=gen)) if h > ch else 0
        left = int(torch.randint(0, w - cw + 1, size=(), generator=gen)) if w > cw else 0
        target["boxes"] = clamp_boxes(target["boxes"] - torch.tensor([left, top, left, top], dtype=target["boxes"].dtype),
                                 (ch, cw))
        geom.crop(top, left, ch, cw)


class RandomZoomOut(DetectionOp):
    """torchvision v2's ``RandomZoomOut(fill, side_range, p)``: with probability ``p``, the image is
    placed at a random offset on a canvas ``U(side_range)`` times its size, filled with ``fill``
    (8-bit levels; masks 0); boxes shifted."""

    def __init__(self, fill: float | Sequence[float] = 0, side_range: Sequence[float] = (1.0, 4.0),
                 p: float = 0.5) -> None:
        if side_range[0] < 1.0 or side_range[0] > side_range[1]:
            raise ValueError(f"Invalid side range provided {side_range}.")
        self.fill, self.side_range, self.p = fill, (float(side_range[0]), float(side_range[1])), float(p)
        self._fill = fill_rgb(fill)

    def __call__(self, geom, target, gen):
        if torch.rand(1, generator=gen) >= self.p:
            return
        h, w = geom.canvas
        r = self.side_range[0] + torch.rand(1, generator=gen) * (self.side_range[1] - self.side_range[0])
        canvas_w, canvas_h = int(w * r), int(h * r)
        r = torch.rand(2, generator=gen)
        left, top = int((canvas_w - w) * r[0]), int((canvas_h - h) * r[1])
        right, bottom = canvas_w - (left + w), canvas_h - (top + h)
        b = target["boxes"] + torch.tensor([left, top, left, top], dtype=target["boxes"].dtype)
        target["boxes"] = clamp_boxes(b, (canvas_h, canvas_w))
        geom.pad(left, top, right, bottom, self._fill)


class RandomIoUCrop(DetectionOp):
    """torchvision v2's ``RandomIoUCrop`` (SSD's sampler): draws a minimum IoU among
    ``sampler_options`` (1.0 or more: no crop), then up to ``trials`` crops of scale
    ``U(min_scale, max_scale)`` per side within the aspect range, until one contains a box centre
    and overlaps a contained box by at least that IoU; boxes whose centre left the crop become
    ``(0, 0, 0, 0)`` (for :class:`SanitizeBoundingBoxes` to drop)."""

    def __init__(self, min_scale: float = 0.3, max_scale: float = 1.0, min_aspect_ratio: float = 0.5,
                 max_aspect_ratio: float = 2.0, sampler_options: Sequence[float] | None = None,
                 trials: int = 40) -> None:
        self.min_scale, self.max_scale = float(min_scale), float(max_scale)
        self.min_aspect_ratio, self.max_aspect_ratio = float(min_aspect_ratio), float(max_aspect_ratio)
        self.sampler_options = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0] if sampler_options is None else list(sampler_options)
        self.trials = int(trials)

    def __call__(self, geom, target, gen):
        h, w = geom.canvas
        boxes = target["boxes"]
        while True:
            idx = int(torch.randint(low=0, high=len(self.sampler_options), size=(1,), generator=gen))
            min_iou = self.sampler_options[idx]
            if min_iou >= 1.0:
                return
            for _ in range(self.trials):
                r = self.min_scale + (self.max_scale - self.min_scale) * torch.rand(2, generator=gen)
                new_w, new_h = int(w * r[0]), int(h * r[1])
                if not (self.min_aspect_ratio <= new_w / new_h <= self.max_aspect_ratio):
                    continue
                r = torch.rand(2, generator=gen)
                left, top = int((w - new_w) * r[0]), int((h - new_h) * r[1])
                right, bottom = left + new_w, top + new_h
                if left == right or top == bottom:
                    continue
                cx = 0.5 * (boxes[:, 0] + boxes[:, 2])
                cy = 0.5 * (boxes[:, 1] + boxes[:, 3])
                inside = (left < cx) & (cx < right) & (top < cy) & (cy < bottom)
                if not inside.any():
                    continue
                crop = torch.tensor([[left, top, right, bottom]], dtype=boxes.dtype)
                if box_iou(boxes[inside], crop).max() < min_iou:
                    continue
                b = boxes - torch.tensor([left, top, left, top], dtype=boxes.dtype)
                b = clamp_boxes(b, (new_h, new_w))
                b[~inside] = 0
                target["boxes"] = b
                geom.crop(top, left, new_h, new_w)
                return
