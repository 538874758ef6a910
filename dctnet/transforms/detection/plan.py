"""A batch's drawn geometry: :class:`DetectionCompose` draws each sample's ops, :func:`plan_of`
stacks their geometries into a :class:`DetectionPlan` (host tensors the device apply reads)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dctnet.transforms.detection.geometry import Geometry, Stage, sample_generator
from dctnet.transforms.detection.ops import DetectionOp


#: the identity warps: an affine inverse (2, 3) and perspective coefficients (8,)
_IDENTITY = {"affine": (1.0, 0.0, 0.0, 0.0, 1.0, 0.0), "perspective": (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)}


@dataclass
class StageWarp:
    """The warps of one stage that share an interpolation and a fill, per sample (host tensors):
    an affine warp (:meth:`Geometry.warp`: ``inverse``, torchvision's centred coordinates) or a
    perspective (:meth:`Geometry.perspective`: ``coefficients``), of each sample's input canvas
    ``ins[b]`` onto its output canvas ``outs[b]`` (h, w); samples with ``on`` False keep their image.

    Attributes:
        inverse: ``float64 (B, 2, 3)``, identity where a sample has no affine warp.
        coefficients: ``float64 (B, 8)``, identity where a sample has no perspective.
        perspective: ``bool (B,)``: which of the two a sample's warp is.
        mode: ``"nearest"`` or ``"bilinear"``. fill: the fill (RGB in [0, 1]; a mask's: one value).
        on: ``bool (B,)``. ins, outs: ``int64 (B, 2)``.
    """

    inverse: Tensor
    coefficients: Tensor
    perspective: Tensor
    mode: str
    fill: tuple[float, ...]
    on: Tensor
    ins: Tensor
    outs: Tensor

    @classmethod
    def of(cls, warps: Sequence[tuple[str, Sequence[float]] | None], mode: str, fill: tuple[float, ...],
           ins: Tensor, outs: Tensor) -> "StageWarp":
        """From each sample's ``(kind, matrix)`` (``None``: no warp) of :meth:`Geometry.warp` /
        :meth:`Geometry.perspective`."""
        def matrices(kind: str) -> Tensor:
            return torch.tensor([w[1] if w is not None and w[0] == kind else _IDENTITY[kind] for w in warps],
                                dtype=torch.float64)

        return cls(inverse=matrices("affine").reshape(-1, 2, 3), coefficients=matrices("perspective").reshape(-1, 8),
                   perspective=torch.tensor([w is not None and w[0] == "perspective" for w in warps]),
                   mode=mode, fill=tuple(fill), on=torch.tensor([w is not None for w in warps]), ins=ins, outs=outs)


@dataclass
class DetectionPlan:
    """A batch's drawn geometry (host).

    Attributes:
        sizes: ``int64 (B, 2)`` each sample's output (h, w).
        stages: ``int64 (S, B, 10)`` per stage and sample: ``(resized_h, resized_w, top, left,
            out_h, out_w, box_top, box_left, box_h, box_w)``: the box of the input canvas (the
            previous stage's ``out``; stage 0: the image) resized, the window kept.
        flips: ``bool (S, B)``.
        antialias: ``bool (S, B)``: antialiased resampling, or torch's plain bilinear.
        fills: per stage, ``(B, 3)`` RGB in [0, 1] of each sample's padding (samples may pad a
            stage with different fills: which ops join a stage depends on each sample's draws).
        targets: per sample, the target moved (boxes float32 XYXY; ``_kept``: the indices of the
            source boxes that remain, in order).
        mask_maps: per sample, how its masks move (:meth:`Geometry.mask_maps`).
        warps: per stage, ``None`` or its warps per sample (:class:`StageWarp`), one for each
            (interpolation, fill) its samples drew.
    """

    sizes: Tensor
    stages: Tensor
    flips: Tensor
    antialias: Tensor
    fills: list[Tensor]
    #: per stage: ``None`` (no colour ops), or host tensors of the drawn :class:`RandomPhotometricDistort`
    #: parameters per sample — ``factors (B, 4)`` (brightness, contrast, saturation, hue; identities 1,
    #: 1, 1, 0), ``on (B, 4)``, ``before (B,)``, ``permutation (B, 3)``, ``permute (B,)``
    photometric: list[dict[str, Tensor] | None]
    targets: list[dict[str, Any]]
    mask_maps: list[list[tuple]] = field(repr=False)
    warps: list[list[StageWarp] | None] = field(default_factory=list)
    #: per stage, ``int64 (B, 2)``: each sample's canvas after the stage (its window, or its warp's output)
    canvas: list[Tensor] = field(default_factory=list)
    #: :class:`SimpleCopyPaste`'s draw: per sample, the indices of the previous sample's objects
    #: pasted onto it (``None``: no copy-paste)
    paste: list[Tensor] | None = None


class DetectionCompose:
    """torchvision-style ``Compose`` of detection ops, drawn per sample from
    :func:`sample_generator` ``(seed, epoch, index)``."""

    def __init__(self, ops: Sequence[DetectionOp], seed: int = 0) -> None:
        ops = list(ops)
        if not all(isinstance(o, DetectionOp) for o in ops):
            raise TypeError("DetectionCompose takes dctnet.transforms.detection ops")
        self.ops, self.seed = ops, int(seed)

    def __repr__(self) -> str:
        return "DetectionCompose(\n" + "".join(f"    {o!r}\n" for o in self.ops) + ")"

    def draw_one(self, size: tuple[int, int], target: dict[str, Any],
                 gen: torch.Generator) -> tuple[Geometry, dict[str, Any]]:
        """One sample: its geometry and its moved target (a copy; the input is not changed)."""
        # masks and semantic maps: gathered on the device by apply_plan
        t = {k: v for k, v in target.items() if k not in ("masks", "semantic")}
        # float32, as torchvision's detection references and the rgb arm carry boxes: every op's arithmetic
        # then rounds where theirs does — a box on the border stays on it after a resize (81 · float32(256/81)
        # is 256 in float32 and 256.0000019 in float64, past the canvas: sanitize dropped it)
        t["boxes"] = torch.as_tensor(t.get("boxes", torch.zeros(0, 4))).to(torch.float32).reshape(-1, 4)
        t["_kept"] = torch.arange(t["boxes"].shape[0])
        geom = Geometry.of(*size)
        for op in self.ops:
            op(geom, t, gen)
        return geom, t

    def draw(self, sizes: Sequence[tuple[int, int]], targets: Sequence[dict[str, Any]], indices: Sequence[int],
             epoch: int = 0) -> DetectionPlan:
        """The plan of a batch: ``sizes`` (h, w) of the images, their ``targets``, dataset ``indices``."""
        geoms, moved = [], []
        for size, target, index in zip(sizes, targets, indices):
            g, t = self.draw_one(tuple(size), target, sample_generator(self.seed, epoch, index))
            geoms.append(g)
            moved.append(t)
        return plan_of(geoms, moved)


def plan_of(geoms: Sequence[Geometry], targets: Sequence[dict[str, Any]]) -> DetectionPlan:
    """Stack per-sample geometries into a :class:`DetectionPlan` (samples with fewer stages get
    identity stages at the end)."""
    n = max(len(g.stages) for g in geoms)
    stages, flips, antialias, fills = _stack_stages(geoms, n)
    photometric = [_stack_photometric([g.stages[s].photometric if s < len(g.stages) else None for g in geoms])
                   for s in range(n)]
    warps = [_stack_warps([g.stages[s].warp if s < len(g.stages) else None for g in geoms], stages[s])
             for s in range(n)]
    return DetectionPlan(sizes=torch.tensor([g.canvas for g in geoms], dtype=torch.int64).reshape(-1, 2),
                         stages=torch.from_numpy(stages), flips=torch.from_numpy(flips),
                         antialias=torch.from_numpy(antialias),
                         fills=list(torch.from_numpy(fills)), photometric=photometric, targets=list(targets),
                         mask_maps=[g.mask_maps() for g in geoms], warps=warps,
                         canvas=[torch.tensor([(seq[s].canvas if s < len(seq) else g.canvas)
                                               for g, seq in zip(geoms, (g.stages for g in geoms))],
                                              dtype=torch.int64).reshape(-1, 2) for s in range(n)])


def _stack_stages(geoms: Sequence[Geometry], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The plan's ``stages (n, B, 10)``, ``flips (n, B)``, ``antialias (n, B)`` and ``fills (n, B, 3)``,
    identity stages after a sample's own."""
    stages = np.zeros((n, len(geoms), 10), np.int64)
    flips = np.zeros((n, len(geoms)), bool)
    antialias = np.ones((n, len(geoms)), bool)
    fills = np.zeros((n, len(geoms), 3), np.float64)
    for b, g in enumerate(geoms):
        seq = g.stages + [Stage.identity(g.canvas) for _ in range(n - len(g.stages))]
        for s, st in enumerate(seq):
            stages[s, b] = (*st.resized, *st.window, *st.box)
            flips[s, b] = st.flip
            antialias[s, b] = st.antialias
            if st.fill is not None:
                fills[s, b] = st.fill
    return stages, flips, antialias, fills


def _stack_photometric(drawn: Sequence[dict[str, Any] | None]) -> dict[str, Tensor] | None:
    """One stage's drawn colour ops per sample (``None``: none) as :attr:`DetectionPlan.photometric`'s
    host tensors; ``None`` when no sample has any."""
    if all(d is None for d in drawn):
        return None
    keys = ("brightness", "contrast", "saturation", "hue")
    identity = {"brightness": 1.0, "contrast": 1.0, "saturation": 1.0, "hue": 0.0}
    on = torch.tensor([[d is not None and d[k] is not None for k in keys] for d in drawn])
    factors = torch.tensor([[d[k] if d is not None and d[k] is not None else identity[k] for k in keys]
                            for d in drawn], dtype=torch.float64)
    return {
        "factors": factors, "on": on,
        "before": torch.tensor([bool(d is not None and d["contrast_before"]) for d in drawn]),
        "permute": torch.tensor([d is not None and d["permutation"] is not None for d in drawn]),
        "permutation": torch.tensor([d["permutation"] if d is not None and d["permutation"] is not None
                                     else [0, 1, 2] for d in drawn], dtype=torch.int64)}


def _stack_warps(drawn: Sequence[dict[str, Any] | None], stages: np.ndarray) -> list[StageWarp] | None:
    """A stage's drawn warps per sample (``None``: none; ``stages (B, 10)`` its rows of the plan) as
    :attr:`DetectionPlan.warps`' entry: one :class:`StageWarp` per (interpolation, fill) drawn (the
    samples of a batch may reach a stage through different ops: a coin skipped, a vertical flip's
    nearest warp beside a bilinear one); ``None`` when no sample warps."""
    kinds = sorted({(d["mode"], d["fill"]) for d in drawn if d is not None})
    if not kinds:
        return None
    # each sample's warp input (its window) and output canvas; identity where it has no warp
    window = [tuple(int(v) for v in stages[b, 4:6]) for b in range(len(drawn))]
    ins = torch.tensor([d["input"] if d is not None else window[b] for b, d in enumerate(drawn)], dtype=torch.int64)
    outs = torch.tensor([d["size"] if d is not None else window[b] for b, d in enumerate(drawn)], dtype=torch.int64)
    groups = []
    for mode, fill in kinds:
        mine = [d if d is not None and (d["mode"], d["fill"]) == (mode, fill) else None for d in drawn]
        groups.append(StageWarp.of([None if d is None else (d["kind"], d["matrix"]) for d in mine], mode, fill,
                                   ins, outs))
    return groups
