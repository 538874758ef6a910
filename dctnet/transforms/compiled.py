"""A transform's device half compiled by ``torch.compile`` (:func:`compile_step`,
:class:`CompiledHalf`): the host draws and plans eagerly, the device half runs one graph per batch
size, specialised on the plan's signature (:func:`plan_signature`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten

from dctnet.readback import log_point
from dctnet.transforms.representation import in_domain, representation
from dctnet.transforms.transfer import move_plan, pack_plan, unpack_plan
from dctnet.transforms.transform import Params, Transform, check_input

__all__ = ["CompiledHalf", "compile_step", "plan_signature"]


def plan_signature(x: Tensor, labels: Tensor | None, prepared: Any) -> tuple[Any, ...]:
    """What a compiled device half specialises on: the batch's and labels' shapes and dtypes, the
    plan's structure, its tensors' shapes and dtypes, and its host values (strings, bools, numbers).
    Two batches with equal signatures run the same graph; any other plan would recompile it."""
    leaves, spec = tree_flatten(prepared)
    described = tuple((tuple(v.shape), v.dtype, v.device.type) if isinstance(v, Tensor) else v for v in leaves)
    lab = None if labels is None else (tuple(labels.shape), labels.dtype)
    return (tuple(x.shape), x.dtype, x.device.type, lab, spec, described)


class CompiledHalf:
    """A device half ``fn(x, labels, prepared)`` run compiled by ``torch.compile`` for one plan
    signature per batch shape (:func:`plan_signature`), eagerly otherwise.

    - The **first batch of a shape runs eagerly**: it builds the constants the step uses
      (:func:`dctnet.kernels.cache.cached` never stores while dynamo traces), so the graph reads them as
      inputs instead of building them inside itself — under CUDA graphs an output kept across calls
      would be overwritten at the next replay, and a store would change the next call's guards (a
      recompile). The graph is compiled for a signature that two batches in a row share (normally
      the first two: the second batch compiles), so a first batch that overflowed pins nothing.
    - A batch whose plan has **another signature** (a group that overflowed its capacity, p ≈ 1e-6 a
      batch: a second chunk) runs eagerly too, the same values, instead of recompiling the step (a
      minute each, and after dynamo's recompile limit an eager step for the rest of the run).

    :attr:`eager_batches` counts the batches run eagerly (warm-ups and overflows). The first two
    compiled calls of a shape (compiling; under CUDA graphs, warming up and recording, which
    synchronise the device) run inside :func:`dctnet.readback.log_point`: a run under
    ``torch.cuda.set_sync_debug_mode("error")`` checks every call after them."""

    def __init__(self, fn: Callable[[Tensor, Any, Any], Any], **compile_kwargs: Any) -> None:
        self.fn = fn
        self.compiled = torch.compile(fn, **compile_kwargs)
        # on an accelerator the graph takes the plan as one buffer (transfer.py), unpacked inside it
        self.compiled_packed = torch.compile(
            lambda x, labels, buffer, layout, resident: fn(x, labels, unpack_plan(buffer, layout, resident)),
            **compile_kwargs)
        self.static_buffers: dict[tuple[Any, ...], Tensor] = {}  # CUDA: each shape's plan buffer, a static input
        self.signatures: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # batch shape etc. → the compiled plan's
        self.compiled_calls: dict[tuple[Any, ...], int] = {}
        self._candidates: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # batch shape → the last eager signature
        self.eager_batches = 0

    def __call__(self, x: Tensor, labels: Tensor | None, prepared: Any) -> Any:
        """``fn(x, labels, prepared)``; ``prepared`` is the plan as :meth:`Transform.prepare` made it on
        the host (``device="cpu"``), moved to ``x``'s device here in one copy (:mod:`~dctnet.transforms.transfer`)."""
        sig = plan_signature(x, labels, prepared)
        key = sig[:4]
        pinned = self.signatures.get(key)
        if pinned is None and self._candidates.get(key) == sig:  # a signature seen twice in a row: compile it
            pinned = self.signatures[key] = sig
        if pinned is None or pinned != sig:  # the warm-up, or a plan it was not compiled for
            if pinned is None:
                self._candidates[key] = sig
            self.eager_batches += 1
            return self.fn(x, labels, move_plan(prepared, x.device))
        calls = self.compiled_calls[key] = self.compiled_calls.get(key, 0) + 1
        # compiling, then (CUDA graphs) warming up and recording: one-time waits on the device
        with log_point(x.device) if calls <= 2 else contextlib.nullcontext():
            if x.device.type == "cpu":
                return self.compiled(x, labels, prepared)
            packed = pack_plan(prepared, x.device, intern=True)  # (the compiled signature's: one layout)
            buffer = self.static_buffers.get(key)
            if buffer is None or buffer.shape[0] != packed.layout.nbytes:
                buffer = torch.empty(packed.layout.nbytes, dtype=torch.uint8, device=x.device)
                if x.device.type == "cuda":  # one address for every replay: CUDA graphs read it in place
                    torch._dynamo.mark_static_address(buffer)
                self.static_buffers[key] = buffer
            # after the previous batch's graph in stream order; its pinned source is kept until the copy is done
            buffer.copy_(packed.buffer, non_blocking=True)
            return self.compiled_packed(x, labels, buffer, packed.layout, packed.resident)


def compile_step(transform: Transform, **compile_kwargs: Any) -> Callable[..., Any]:
    """``transform`` (a :class:`Compose`, typically the whole device step's list) with its device half
    compiled by ``torch.compile``: the returned ``step(x, labels=None, *, generator=None,
    params=None)`` draws on the host (eagerly: seeded CPU generators), :meth:`~Transform.prepare` s
    the parameters, and runs the compiled :meth:`~Transform.execute`, which sees the same shapes every
    batch of a size (its fixed shapes are switched on), so it compiles once per batch size and
    never again (:class:`CompiledHalf`: the first batch of a size runs eagerly and builds the
    constants; a rare plan that overflowed a group's capacity runs eagerly instead of recompiling).
    Returns ``(x, labels)`` (``x`` alone without labels), the same values as ``transform(x, labels,
    generator=...)``.

    ``compile_kwargs`` go to ``torch.compile`` (default: inductor; on CUDA pass
    ``mode="reduce-overhead"`` for CUDA graphs)."""
    transform.set_fixed_shapes(True)  # one set of shapes per batch size (as DeviceStep.compile)
    executed = CompiledHalf(transform.execute, **compile_kwargs)

    def step(x: Tensor, labels: Tensor | None = None, *, generator: torch.Generator | None = None,
             params: Params | None = None) -> Any:
        check_input(transform, x)
        gen = generator if generator is not None else transform.generator
        given = representation(x)
        x = in_domain(x, transform.domain)
        if params is None:
            params = transform.draw_params(x.shape, gen)
        out, out_labels = executed(x, labels, transform.prepare(params, x.shape, "cpu"))
        if not transform.converter:
            out = in_domain(out, given)
        return out if labels is None else (out, out_labels)

    return step
