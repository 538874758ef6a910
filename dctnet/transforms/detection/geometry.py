"""Host geometry of a detection sample: its per-sample generator, the stages its image goes through
(:class:`Geometry`), the masks' index maps, and torchvision's box maths (clamp, IoU, resize, affine,
perspective). The names the package's other modules use are public here (no module of the package
imports another's private name)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor


#: per-box fields of a target, dropped together with their boxes
BOX_FIELDS = ("boxes", "labels", "masks", "iscrowd", "area")


def sample_generator(seed: int, epoch: int, index: int, stream: str = "") -> torch.Generator:
    """A CPU ``torch.Generator`` that is a pure function of ``(seed, epoch, index)``: one sample's
    draws, whatever the batch, worker or thread it is drawn in (a keyed BLAKE2b hash of the three).
    ``stream`` names another, independent stream of the same sample (copy-paste's draw)."""
    key = (int(seed), int(epoch), int(index)) + ((stream,) if stream else ())
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8, person=b"dctnet.detect").digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)


# ---------------------------------------------------------------------------------------------- geometry
@dataclass
class Stage:
    """One resampling: the ``box`` ``(top, left, h, w)`` of the input canvas ``src`` (h, w) — the
    whole canvas, or a crop made before the resize (torchvision's ``resized_crop``) — resized to
    ``resized`` (h, w), the window ``(top, left, h, w)`` of that kept (outside ``[0, resized)``:
    ``fill``), then mirrored if ``flip``."""

    src: tuple[int, int]
    resized: tuple[int, int]
    window: tuple[int, int, int, int]
    box: tuple[int, int, int, int] = (0, 0, 0, 0)
    flip: bool = False
    fill: tuple[float, float, float] | None = None
    #: antialiased resampling (torchvision's ``resize``), or torch's plain bilinear (a detector's own)
    antialias: bool = True
    #: a warp of this stage's output (:meth:`Geometry.warp`, :meth:`Geometry.perspective`): its ``kind``
    #: (``"affine"``, ``"perspective"``), ``matrix``, ``mode``, ``fill``, ``input`` and output ``size``;
    #: it seals the stage
    warp: dict[str, Any] | None = None
    #: colour ops applied to this stage's output (after its warp; :class:`RandomPhotometricDistort`'s
    #: drawn parameters); a stage with them is sealed: later geometry resamples its result
    photometric: dict[str, Any] | None = None

    @classmethod
    def identity(cls, size: tuple[int, int]) -> "Stage":
        return cls(src=size, resized=size, window=(0, 0, *size), box=(0, 0, *size))

    @property
    def is_identity(self) -> bool:
        return (self.resized == self.src and self.window == (0, 0, *self.src) and not self.flip
                and self.box == (0, 0, *self.src))

    @property
    def is_crop(self) -> bool:
        """Nothing but a crop so far (no resampling, padding or flip): a resize can take the crop as its box."""
        t, lft, h, w = self.window
        return (self.resized == self.src and self.box == (0, 0, *self.src) and not self.flip and self.fill is None
                and t >= 0 and lft >= 0 and t + h <= self.src[0] and lft + w <= self.src[1])

    @property
    def canvas(self) -> tuple[int, int]:
        """The stage's output size: its window, or its warp's output (a rotation with ``expand``)."""
        if self.warp is not None:
            return self.warp["size"]
        return self.window[2], self.window[3]


@dataclass
class Geometry:
    """One sample's image geometry so far: its stages (the last one open)."""

    stages: list[Stage]

    @classmethod
    def of(cls, height: int, width: int) -> "Geometry":
        return cls([Stage.identity((int(height), int(width)))])

    @property
    def canvas(self) -> tuple[int, int]:
        """The current image size (h, w)."""
        return self.stages[-1].canvas

    def _open(self) -> Stage:
        """The stage geometry joins: the last one, unless a warp or colour ops sealed it."""
        last = self.stages[-1]
        return last if last.photometric is None and last.warp is None else self._new_stage()

    def _new_stage(self) -> Stage:
        self.stages.append(Stage.identity(self.canvas))
        return self.stages[-1]

    def resize(self, height: int, width: int, antialias: bool = True) -> None:
        """torchvision's ``resize`` of the current canvas to ``(height, width)`` (``antialias=False``:
        torch's plain bilinear, as a detector's ``GeneralizedRCNNTransform`` resizes)."""
        if (height, width) == self.canvas:  # torchvision returns the input unchanged
            return
        # stage 0 decodes with antialiased weights: a plain resize of the image is a stage of its own;
        # a crop so far becomes the box the resize reads (torchvision's resized_crop: one resampling)
        s = self._open()
        if not (s.is_crop and (antialias or len(self.stages) > 1)):
            s = self._new_stage()
        s.box = s.window
        s.resized, s.window, s.antialias = (height, width), (0, 0, height, width), antialias

    def crop(self, top: int, left: int, height: int, width: int) -> None:
        """``crop`` of the current canvas; the box lies inside it (the ops here only crop inside)."""
        h, w = self.canvas
        if top < 0 or left < 0 or top + height > h or left + width > w or height <= 0 or width <= 0:
            raise ValueError(f"crop ({top}, {left}, {height}, {width}) outside the canvas {h}×{w}")
        s = self._open()
        if s.flip:  # the window is kept in unmirrored coordinates: mirror the crop's columns
            left = w - left - width
        t0, l0 = s.window[:2]
        s.window = (t0 + top, l0 + left, height, width)

    def pad(self, left: int, top: int, right: int, bottom: int, fill: tuple[float, float, float]) -> None:
        """``pad`` of the current canvas with ``fill`` (RGB in [0, 1])."""
        if not (left or top or right or bottom):
            return
        s = self._open()
        # the window is unmirrored: on a flipped stage, the canvas's left is the window's right
        wl, wr = (right, left) if s.flip else (left, right)
        t0, l0, h, w = s.window
        rh, rw = s.resized
        # padding joins this stage only where the window still reaches the resized canvas's edge
        # (beyond it is this stage's fill) and the fill is the same; else it pads a new stage's
        # canvas (unflipped: the flip happened in the stage before)
        joins = ((not top or t0 <= 0) and (not bottom or t0 + h >= rh) and (not wl or l0 <= 0)
                 and (not wr or l0 + w >= rw) and (s.fill is None or s.fill == fill))
        if not joins:
            s = self._new_stage()
            t0, l0, h, w = s.window
            wl, wr = left, right
        s.window = (t0 - top, l0 - wl, h + top + bottom, w + wl + wr)
        s.fill = fill

    def hflip(self) -> None:
        s = self._open()
        s.flip = not s.flip

    def warp(self, inverse: Sequence[float], mode: str, fill: tuple[float, float, float],
             size: tuple[int, int] | None = None) -> None:
        """torchvision's ``affine`` of the current canvas: ``inverse`` the 6 numbers of
        ``_get_inverse_affine_matrix`` in its centred coordinates; ``size`` the output (h, w)
        (``None``: the canvas's; a rotation with ``expand``: larger)."""
        self._seal_warp("affine", inverse, mode, fill, size)

    def perspective(self, coefficients: Sequence[float], mode: str, fill: tuple[float, float, float]) -> None:
        """torchvision's ``perspective`` of the current canvas: its 8 ``coefficients`` (output pixel
        coordinates to input ones, corner origin: :mod:`dctnet.kernels.geometry`), same size."""
        self._seal_warp("perspective", coefficients, mode, fill, None)

    def _seal_warp(self, kind: str, matrix: Sequence[float], mode: str, fill: tuple[float, float, float],
                   size: tuple[int, int] | None) -> None:
        """A warp of the current canvas (``kind`` ``"affine"``: ``matrix`` its inverse (2, 3);
        ``"perspective"``: its coefficients (8,)) onto ``size`` (``None``: the canvas's); it seals the stage."""
        s = self.stages[-1]
        if s.warp is not None or s.photometric is not None:
            s = self._new_stage()
        canvas = (s.window[2], s.window[3])
        s.warp = {"kind": kind, "matrix": [float(v) for v in matrix], "mode": mode, "fill": fill,
                  "size": size or canvas, "input": canvas}

    def photometric(self, params: dict[str, Any]) -> None:
        """Colour ops on the current canvas (after everything so far), drawn as ``params``."""
        s = self.stages[-1]
        if s.photometric is not None:  # two distortions in a row: the second on a stage of its own
            s = self._new_stage()
        s.photometric = params

    def mask_maps(self) -> list[tuple]:
        """How masks move, as a short program: ``("maps", rows, cols)`` — row and column index maps
        ``int64 (h,)``, ``(w,)`` into the previous canvas, torchvision's nearest resizes, crops, pads
        (−1: padding) and flips composed over consecutive stages — and ``("warp", kind, matrix,
        (h, w))``, a warp (nearest) of the canvas at that point: ``kind`` ``"affine"`` (``matrix`` its
        inverse, 6 numbers) or ``"perspective"`` (its 8 coefficients)."""
        program: list[tuple] = []
        rows = cols = None
        for s in self.stages:
            r = _nearest_map(s.box[0], s.box[2], s.resized[0], s.window[0], s.window[2], False)
            c = _nearest_map(s.box[1], s.box[3], s.resized[1], s.window[1], s.window[3], s.flip)
            rows = r if rows is None else _compose(rows, r)
            cols = c if cols is None else _compose(cols, c)
            if s.warp is not None:
                program += [("maps", rows, cols), ("warp", s.warp["kind"], s.warp["matrix"], s.warp["size"])]
                rows = cols = None
        if rows is not None:
            program.append(("maps", rows, cols))
        return program


def _nearest_map(start: int, in_size: int, resized: int, offset: int, length: int, flip: bool) -> np.ndarray:
    """Output k of a stage's window → source index: torch's ``interpolate(mode="nearest")``
    (``min(floor(j·scale), in − 1)``, ``scale = in/out`` in float32; same size: identity; twice:
    ``j >> 1``) of resized index ``j = offset + k`` (mirrored if ``flip``) into the box
    ``[start, start + in_size)``, −1 outside."""
    k = np.arange(length, dtype=np.int64)
    j = offset + (length - 1 - k if flip else k)
    if resized == in_size:
        src = j.copy()
    elif resized == 2 * in_size:
        src = j >> 1
    else:
        scale = np.float32(in_size) / np.float32(resized)
        src = np.minimum(np.floor(j.astype(np.float32) * scale).astype(np.int64), in_size - 1)
    return np.where((j >= 0) & (j < resized), start + src, -1)


def _compose(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Index map of ``second`` applied after ``first`` (−1 stays −1)."""
    return np.where(second >= 0, first[np.clip(second, 0, None)], -1)


# ---------------------------------------------------------------------------------------------- boxes
def clamp_boxes(boxes: Tensor, canvas: tuple[int, int]) -> Tensor:
    """torchvision's ``clamp_bounding_boxes`` for XYXY: x to [0, W], y to [0, H]."""
    out = boxes.clone()
    out[:, 0::2] = out[:, 0::2].clamp(0, canvas[1])
    out[:, 1::2] = out[:, 1::2].clamp(0, canvas[0])
    return out


def keep_boxes(target: dict[str, Any], keep: Tensor) -> None:
    """Drop the boxes (and their per-box fields) where ``keep`` is False."""
    for k in BOX_FIELDS:
        if k in target and target[k] is not None:
            target[k] = target[k][keep]
    target["_kept"] = target["_kept"][keep]


def box_iou(a: Tensor, b: Tensor) -> Tensor:
    """IoU of XYXY boxes ``a (N, 4)`` with ``b (M, 4)``: ``(N, M)``."""
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[:, None] + area_b[None, :] - inter)


def resized_output_size(canvas: tuple[int, int], size: int | Sequence[int] | None,
                        max_size: int | None = None) -> tuple[int, int]:
    """torchvision's ``Resize`` output size ``(h, w)``: ``size`` (h, w), or an int (one-element
    sequence) for the shorter side — ``int(size·long/short)`` for the longer, then capped at
    ``max_size`` (``int(max_size·short/long)``) — or ``None`` with ``max_size``: the longer side."""
    h, w = canvas
    short, long = (w, h) if w <= h else (h, w)
    if size is None:
        if not isinstance(max_size, int):
            raise ValueError(f"max_size must be an int when size is None, got {max_size!r}")
        new_short, new_long = int(max_size * short / long), max_size
    else:
        size = [size] if isinstance(size, int) else list(size)
        if len(size) == 2:
            return int(size[0]), int(size[1])
        new_short, new_long = size[0], int(size[0] * long / short)
        if max_size is not None:
            if max_size <= size[0]:
                raise ValueError(f"max_size = {max_size} must be greater than the shorter side's size {size[0]}")
            if new_long > max_size:
                new_short, new_long = int(max_size * new_short / new_long), max_size
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    return new_h, new_w


def resize_boxes(target: dict[str, Any], old: tuple[int, int], new: tuple[int, int]) -> None:
    """torchvision's ``resize_bounding_boxes``: x·(new_w/old_w), y·(new_h/old_h), the ratios as
    torchvision builds them (a float32 tensor), no clamp."""
    if new == old:
        return
    ratios = torch.tensor([new[1] / old[1], new[0] / old[0]] * 2)  # float32, as torchvision's
    target["boxes"] = target["boxes"].mul(ratios).to(target["boxes"].dtype)


def expanded_size(inverse: Sequence[float], w: int, h: int) -> tuple[int, int]:
    """torchvision's ``_compute_affine_output_size``: the (w, h) a rotation with ``expand`` makes
    (float32 corners, 1e-4 tolerance before floor/ceil)."""
    half_w, half_h = 0.5 * w, 0.5 * h
    pts = torch.tensor([[-half_w, -half_h, 1.0], [-half_w, half_h, 1.0], [half_w, half_h, 1.0], [half_w, -half_h, 1.0]])
    new = pts @ torch.tensor(list(inverse), dtype=torch.float).view(2, 3).T
    lo, hi = new.aminmax(dim=0)
    halfs = torch.tensor((half_w, half_h))
    size = (hi + halfs - 1e-4).ceil() - (lo + halfs + 1e-4).floor()
    return int(size[0]), int(size[1])


def affine_boxes(target: dict[str, Any], forward: list[float], canvas: tuple[int, int],
                 expanded: tuple[int, int] | None = None) -> None:
    """torchvision's ``affine_bounding_boxes``: the 4 corners mapped, their bounding box, clamped to
    the canvas — with ``expanded`` (h, w) (a rotation with ``expand``), shifted by the mapped canvas's
    top-left first and clamped to the new canvas."""
    b = target["boxes"]
    if not len(b):
        return
    m = torch.tensor(forward, dtype=b.dtype).reshape(2, 3).T
    pts = b[:, [[0, 1], [2, 1], [2, 3], [0, 3]]].reshape(-1, 2)
    pts = torch.cat([pts, torch.ones(pts.shape[0], 1, dtype=b.dtype)], 1)
    out = (pts @ m).reshape(-1, 4, 2)
    lo, hi = torch.aminmax(out, dim=1)
    boxes = torch.cat([lo, hi], 1)
    if expanded is not None:
        h, w = canvas
        corners = torch.tensor([[0.0, 0.0, 1.0], [0.0, float(h), 1.0], [float(w), float(h), 1.0], [float(w), 0.0, 1.0]],
                               dtype=b.dtype)
        boxes = boxes - torch.amin(corners @ m, dim=0, keepdim=True).repeat(1, 2)
        canvas = expanded
    target["boxes"] = clamp_boxes(boxes, canvas)


def perspective_boxes(target: dict[str, Any], coefficients: Sequence[float], canvas: tuple[int, int]) -> None:
    """torchvision's ``perspective_bounding_boxes`` (XYXY): the coefficients inverted as there (in
    Python floats, then the box dtype), the 4 corners mapped, their bounding box, clamped to the canvas."""
    b = target["boxes"]
    if not len(b):
        return
    c = [float(v) for v in coefficients]
    denom = c[0] * c[4] - c[1] * c[3]
    if denom == 0:
        raise RuntimeError(f"perspective coefficients {c} cannot be inverted to move the boxes")
    inv = [(c[4] - c[5] * c[7]) / denom, (-c[1] + c[2] * c[7]) / denom, (c[1] * c[5] - c[2] * c[4]) / denom,
           (-c[3] + c[5] * c[6]) / denom, (c[0] - c[2] * c[6]) / denom, (-c[0] * c[5] + c[2] * c[3]) / denom,
           (-c[4] * c[6] + c[3] * c[7]) / denom, (-c[0] * c[7] + c[1] * c[6]) / denom]
    theta1 = torch.tensor([inv[0:3], inv[3:6]], dtype=b.dtype)
    theta2 = torch.tensor([[inv[6], inv[7], 1.0]] * 2, dtype=b.dtype)
    pts = b[:, [[0, 1], [2, 1], [2, 3], [0, 3]]].reshape(-1, 2)
    pts = torch.cat([pts, torch.ones(pts.shape[0], 1, dtype=b.dtype)], 1)
    out = torch.matmul(pts, theta1.T).div_(torch.matmul(pts, theta2.T)).reshape(-1, 4, 2)
    lo, hi = torch.aminmax(out, dim=1)
    target["boxes"] = clamp_boxes(torch.cat([lo, hi], 1), canvas)
