"""No host syncs in the device step: the GPU never waits for Python.

The device step (:meth:`dctnet.train.pipeline.Pipeline.train_step` / ``eval_step``: the decode of
the windows, crop/resize, the augmentation ``Compose``, the model input — ``ToRGB`` or
``ToCoefficients`` with native chroma and the per-(c,u,v) standardisation — and the cache's device
expansion, :func:`dctnet.batch.as_jpeg_batch`) must never read a device tensor's *values* on the
host. What the host needs (output sizes, group sizes, which samples drew what) comes from the host
batch: tensor shapes, and the drawn parameters, which are CPU tensors by design.

These tests run on the CPU, where no read is ever a sync, so they *simulate* the device with
:class:`DeviceTracer`: taint tracking over ``__torch_function__`` and ``__torch_dispatch__``. The
batch's tensors and the pipeline's module buffers are marked as device memory; every op output with
a marked input is device memory too; and any op that reads device values on the host (``item()``,
``bool()``, ``nonzero``, a boolean-mask index, ``tolist()``, ``.cpu()``, …) or any blocking
host↔device copy fails the test, naming the op and where it was called from. A CUDA machine checks
the same with ``torch.cuda.set_sync_debug_mode("error")`` (``tests/test_device_step.py``); this
runs everywhere, on every shipped recipe.
"""

from __future__ import annotations

import io
import os
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from dctnet import data as D
from dctnet.kernels import cache as kernel_cache
from dctnet import transforms as T
from dctnet.batch import PackedJpegBatch, SparseJpegBatch
from dctnet.synthetic import make_labelled_dataset, synthetic_image

from conftest import ROOT

aten = torch.ops.aten

#: the simulated accelerator: what a marked (device) tensor reports as its ``.device`` (and
#: ``is_cuda``), so the code under test takes its device paths — ``device.type == "cpu"`` branches
#: that read values only where reading is free are not taken, as on a GPU. Factories and moves
#: given this device run on the CPU (there is no GPU here) and give device memory; an unmarked
#: tensor reports the plain ``cpu`` (the host), so ``.to(x.device)`` (to the device) and
#: ``.to("cpu")`` / ``.cpu()`` (to the host) are told apart.
SIM_DEVICE = torch.device("cuda", 0)

# ---------------------------------------------------------------------- the tracer
#: ops that read device values on the host whatever their arguments (beyond what the aten tags say)
_ALWAYS_SYNC = {aten._local_scalar_dense, aten.item, aten.is_nonzero, aten.nonzero, aten.nonzero_numpy,
                aten.argwhere, aten._unique, aten._unique2, aten.unique_dim, aten.unique_consecutive,
                aten.masked_select, aten.bincount, aten.equal, aten.allclose}
#: ops whose boolean (mask) index tensors are turned into positions with ``nonzero`` (a sync)
_MASK_INDEXED = {aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_, aten._unsafe_index_put}
#: host reads at the Python level (``tolist`` and ``numpy`` never reach the dispatcher)
_READS = {Tensor.tolist, Tensor.numpy, Tensor.item, Tensor.__bool__, Tensor.__int__, Tensor.__float__,
          Tensor.__index__, Tensor.__complex__, Tensor.__array__, Tensor.__format__, Tensor.__repr__, Tensor.__str__}
#: constructors that copy host data to the device they are given, blocking (``non_blocking=False``)
_COPYING_CONSTRUCTORS = {torch.tensor, torch.as_tensor, torch.asarray}


class HostSyncError(AssertionError):
    """A device tensor's values were read on the host, or a blocking host↔device copy was made."""


def _is_device(d: Any) -> bool:
    return d is not None and torch.device(d) == SIM_DEVICE


def _where() -> str:
    """The caller's stack, without torch's and this module's frames: where the sync was written."""
    here = os.path.abspath(__file__)
    frames = [f for f in traceback.extract_stack()[:-2]
              if os.path.abspath(f.filename) != here and f"{os.sep}torch{os.sep}" not in f.filename
              and f"{os.sep}_pytest{os.sep}" not in f.filename and f"{os.sep}pluggy{os.sep}" not in f.filename]
    return "".join(traceback.format_list(frames[-6:]))


class DeviceTracer:
    """Simulates device memory on the CPU and fails on every host read of it.

    **Taint.** :meth:`mark` makes tensors device memory (a batch's tensors, a module's buffers and
    parameters). Every op with a marked input marks its outputs — results, and for in-place and
    ``out=`` ops the mutated arguments (read off the op schema's write aliases). ``.to(device)`` of a
    host tensor (``device`` a marked tensor's ``.device``, or a marked tensor as ``other``) returns a
    marked copy, as a real host → device copy does; factories given that device
    (``torch.zeros(..., device=x.device)``) make device memory. Host-drawn parameters are never
    marked, so reading them is fine.

    **Keys.** Taint belongs to *memory*, not to a Python object: a view (``x[0]``, ``x.view(...)``)
    and the in-place results share their base's storage. So a tensor is keyed by its untyped
    storage's ``data_ptr()``; the tracer keeps a strong reference to each marked storage so that
    its memory cannot be freed and handed to a new, unmarked tensor at the same address while the
    tracer lives. A storage of 0 bytes has no address of its own (``data_ptr()`` may be 0 for
    all of them): such a tensor is keyed by ``id()`` and kept alive instead.

    **Failures** (:class:`HostSyncError`, naming the op and the Python stack that called it), on
    marked inputs only:

    - ops tagged ``data_dependent_output`` or ``dynamic_output_shape`` (``_local_scalar_dense``,
      i.e. ``item()`` / ``bool()`` / ``int()``; ``nonzero``, ``unique``, ``masked_select``,
      ``equal`` …) and :data:`_ALWAYS_SYNC`; ``index`` / ``index_put`` only with a marked boolean
      index (a mask, turned into positions by ``nonzero``: a long index needs no read);
      ``repeat_interleave`` only without ``output_size``; ``histc`` only with ``min == max`` (which
      reads the input's range);
    - Python-level reads (:data:`_READS`: ``tolist``, ``numpy``, ``item``, ``__bool__`` …), and
      ``.cpu()`` / ``.to(<host>)`` of device memory (device → host copies; on this machine ``.cpu()``
      of a CPU tensor is a no-op that never reaches the dispatcher, so it is caught here);
    - blocking host → device copies (``.to(device)`` without ``non_blocking=True``, ``copy_`` of
      host memory into device memory, ``torch.tensor(data, device=...)``): PyTorch waits for the
      stream after each (``cudaStreamSynchronize``), which ``set_sync_debug_mode`` also reports;
    - an op on device memory given a host tensor that is not 0-dim: a device mismatch on a GPU (an
      index: an implicit blocking copy), and host memory the simulation would wrongly treat as free
      to read.

    Each failure is also recorded in :attr:`syncs`, and leaving the ``with`` block raises if any
    was (a ``try``/``except`` in the traced code cannot swallow one)."""

    def __init__(self, *, collect: bool = False) -> None:
        self._marked: dict[tuple[str, int], object] = {}  # key → the storage (or 0-byte tensor) kept alive
        self.syncs: list[str] = []
        #: record the syncs and go on instead of raising at the first (to list them all)
        self.collect = collect
        #: host → device copies made (blocking or not): what a plan's transfer costs in driver calls
        self.copies_to_device = 0
        self._modes: list[Any] = []
        # the maths layer's constant cache (dctnet.kernels.cache.cached): what an earlier traced run
        # built for the simulated device is device memory
        self.mark(*(t for k, t in kernel_cache._cache.items() if str(SIM_DEVICE) in k))

    # ------------------------------------------------------------------ taint
    @staticmethod
    def _key(t: Tensor) -> tuple[tuple[str, int], object]:
        with torch._C.DisableTorchFunction():
            storage = t.untyped_storage()
            if storage.nbytes() == 0:
                return ("id", id(t)), t
            return ("ptr", storage.data_ptr()), storage

    def is_device(self, t: object) -> bool:
        """Whether ``t`` is a tensor in (simulated) device memory."""
        return isinstance(t, Tensor) and self._key(t)[0] in self._marked

    def mark(self, *objs: Any) -> Any:
        """Mark as device memory every tensor in ``objs``: tensors, modules (buffers and parameters),
        batches (:meth:`JpegBatch.tensors`), and lists/tuples/dicts of them. Returns the first."""
        for obj in objs:
            if obj is None:
                continue
            if isinstance(obj, Tensor):
                key, keep = self._key(obj)
                self._marked[key] = keep
            elif isinstance(obj, nn.Module):
                self.mark(*obj.buffers(), *obj.parameters())
            elif hasattr(obj, "tensors") and callable(obj.tensors):
                self.mark(*obj.tensors())
            elif isinstance(obj, dict):
                self.mark(*obj.values())
            elif isinstance(obj, (list, tuple)):
                self.mark(*obj)
        return objs[0] if objs else None

    def fail(self, what: str) -> None:
        message = f"host sync: {what}\n{_where()}"
        self.syncs.append(message)
        if not self.collect:
            raise HostSyncError(message)

    # ------------------------------------------------------------------ modes
    def __enter__(self) -> DeviceTracer:
        self._modes = [_FunctionMode(self), _DispatchMode(self)]
        for m in self._modes:
            m.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for m in reversed(self._modes):
            m.__exit__(None, None, None)
        self._modes = []
        if exc[0] is None and self.syncs and not self.collect:
            raise HostSyncError(f"{len(self.syncs)} host sync(s), caught and swallowed by the traced code:\n"
                                + "\n".join(self.syncs))


def _mask_index(tracer: DeviceTracer, indices: Any) -> bool:
    return any(isinstance(i, Tensor) and i.dtype in (torch.bool, torch.uint8) and tracer.is_device(i)
               for i in tree_leaves(indices))


class _DispatchMode(TorchDispatchMode):
    """The aten-level half of :class:`DeviceTracer`: data-dependent ops on device memory, blocking
    copies, and taint propagation."""

    def __init__(self, tracer: DeviceTracer) -> None:
        super().__init__()
        self.tracer = tracer

    def _sync_reason(self, func: Any, args: tuple, kwargs: dict) -> str | None:
        """Why ``func`` on these arguments (some of them device memory) stalls the host, or None."""
        packet = func.overloadpacket
        tr = self.tracer
        if packet is aten.copy_:
            dst, src = args[0], args[1]
            blocking = not (args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
            if tr.is_device(src) and not tr.is_device(dst):
                return f"{func}: device → host copy"
            if tr.is_device(dst) and not tr.is_device(src):
                tr.copies_to_device += 1
                if blocking:
                    return f"{func}: blocking host → device copy"
            return None
        if any(isinstance(t, Tensor) and t.dim() > 0 and not tr.is_device(t) for t in tree_leaves((args, kwargs))):
            # on a GPU a device mismatch, or for an index an implicit blocking copy: either way the
            # simulation would be unsound (host memory standing in for device memory), so it fails
            return f"{func} mixes host memory (not 0-dim) with device memory"
        if packet in _MASK_INDEXED:
            return f"{func} with a device boolean mask (nonzero)" if _mask_index(tr, args[1:2]) else None
        if packet is aten.repeat_interleave:
            return f"{func} without output_size" if kwargs.get("output_size") is None else None
        if packet is aten.histc:
            lo, hi = (list(args[2:4]) + [kwargs.get("min", 0), kwargs.get("max", 0)][len(args[2:4]):])[:2]
            return f"{func} with min == max (reads the range)" if lo == hi else None
        if packet in _ALWAYS_SYNC or torch.Tag.data_dependent_output in func.tags \
                or torch.Tag.dynamic_output_shape in func.tags:
            return str(func)
        return None

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        tr = self.tracer
        with torch._C.DisableTorchFunction():
            hot = any(tr.is_device(t) for t in tree_leaves((args, kwargs)))
            if hot:
                reason = self._sync_reason(func, args, kwargs)
                if reason:
                    tr.fail(reason)
        out = func(*args, **kwargs)
        if hot:
            with torch._C.DisableTorchFunction():
                tr.mark(*(t for t in tree_leaves(out) if isinstance(t, Tensor)))
                for i, a in enumerate(func._schema.arguments):  # in-place and out= results
                    if a.alias_info is not None and a.alias_info.is_write:
                        v = args[i] if i < len(args) and not a.kwarg_only else kwargs.get(a.name)
                        tr.mark(*(t for t in tree_leaves(v) if isinstance(t, Tensor)))
        return out


class _FunctionMode(TorchFunctionMode):
    """The Python-level half of :class:`DeviceTracer`: reads that never reach the dispatcher
    (``tolist``, ``numpy``, ``.cpu()`` of a CPU tensor), host ↔ device moves, factories on the
    device, and what device memory reports as its device."""

    def __init__(self, tracer: DeviceTracer) -> None:
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        tr = self.tracer
        if func == Tensor.device.__get__:
            return SIM_DEVICE if tr.is_device(args[0]) else func(*args)
        if func == Tensor.is_cuda.__get__:
            return tr.is_device(args[0]) or func(*args)
        if func == Tensor.is_cpu.__get__:
            return not tr.is_device(args[0]) and func(*args)
        if func in _READS and tr.is_device(args[0]):
            tr.fail(f"Tensor.{func.__name__} of device memory")
        if func is Tensor.cpu and tr.is_device(args[0]):
            tr.fail("Tensor.cpu: device → host copy")
        if func is Tensor.to:
            return self._to(args[0], args[1:], kwargs)
        if func is Tensor.cuda:
            return self._to(args[0], (SIM_DEVICE, *args[1:]), kwargs)
        if not _is_device(kwargs.get("device")):
            return func(*args, **kwargs)
        # a factory on the device: it runs on the CPU here, and what it makes is device memory
        if func in _COPYING_CONSTRUCTORS and not tr.is_device(args[0] if args else kwargs.get("data")):
            tr.fail(f"torch.{func.__name__}(..., device=<device>): a blocking host → device copy")
        if func is Tensor.new_tensor:
            tr.fail("Tensor.new_tensor(..., device=<device>): a blocking host → device copy")
        out = func(*args, **{**kwargs, "device": "cpu"})
        tr.mark(*(t for t in tree_leaves(out) if isinstance(t, Tensor)))
        return out

    def _to(self, src: Tensor, rest: tuple, kwargs: dict) -> Tensor:
        """``src.to(*rest, **kwargs)``: a move to the device (``device`` the simulated one, or
        ``other`` a device tensor), to the host, or a conversion that stays where it is."""
        tr = self.tracer
        kwargs = dict(kwargs)
        copy = bool(kwargs.pop("copy", False))
        other = rest[0] if rest and isinstance(rest[0], Tensor) else kwargs.pop("other", None)
        memory_format = None
        if other is not None:  # to(other, non_blocking, copy)
            rest = rest[1:] if rest and rest[0] is other else rest
            device = "dev" if tr.is_device(other) else "host"
            dtype, non_blocking = other.dtype, bool(rest[0] if rest else kwargs.get("non_blocking", False))
            copy = bool(rest[1]) if len(rest) > 1 else copy
        else:  # to(dtype, non_blocking, copy) or to(device, dtype, non_blocking, copy): copy is not _parse_to's
            slot = 2 if rest and isinstance(rest[0], torch.dtype) else 3
            if len(rest) > slot:
                rest, copy = rest[:slot], bool(rest[slot])
            parsed, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*rest, **kwargs)
            device = None if parsed is None else "dev" if _is_device(parsed) else "host"
        convert: dict[str, Any] = {"dtype": dtype or src.dtype}
        if memory_format is not None:
            convert["memory_format"] = memory_format
        on_device = tr.is_device(src)
        if device == "host" and on_device:
            tr.fail("Tensor.to(<host>): device → host copy")
        if device is None or (device == "dev") == on_device:  # a conversion in place (host or device)
            return src.to(**convert, copy=copy)
        if device == "dev":
            if not non_blocking:
                tr.fail("Tensor.to(<device>) of host memory without non_blocking=True: a blocking host → device copy")
            tr.copies_to_device += 1
            return tr.mark(src.to(**convert, copy=True))  # a real copy, in device memory
        return src.to(**convert, copy=True)  # device → host (collect mode): host memory


# ---------------------------------------------------------------------- the tracer fires
def _reads(t: Tensor) -> dict[str, Any]:
    """Each way of reading ``t``'s values on the host, as a thunk."""
    return {
        "int(max)": lambda: int(t.max()),
        "item": lambda: t.sum().item(),
        "bool(any)": lambda: bool(t.any()),
        "if tensor": lambda: 1 if (t > 0).all() else 0,
        "nonzero": lambda: t.nonzero(),
        "unique": lambda: torch.unique(t),
        "masked_select": lambda: t.masked_select(t > 0),
        "mask index": lambda: t[t > 0],
        "mask assign": lambda: t.clone().__setitem__(t > 0, 0.0),
        "tolist": lambda: t.tolist(),
        "numpy": lambda: t.numpy(),
        "cpu": lambda: t.cpu(),
        "to cpu": lambda: t.to("cpu"),
        "format": lambda: f"{t.sum():.3f}",
        "equal": lambda: torch.equal(t, t),
        "repeat_interleave": lambda: torch.repeat_interleave(torch.ones(3, dtype=torch.long) + (t[:3] > 9)),
    }


def test_the_tracer_fires_on_every_read_of_device_memory():
    """A tracer that cannot fail is a defect: each host read of a marked tensor raises, the same
    reads of an unmarked (host) tensor do not, and taint follows ops, views and in-place writes."""
    host = torch.arange(1.0, 7.0)
    for name, read in _reads(host).items():
        with DeviceTracer():
            read()  # host memory: reading it is free
    for name in _reads(host):
        tracer = DeviceTracer()
        dev = tracer.mark(torch.arange(1.0, 7.0))
        with pytest.raises(HostSyncError, match="host sync"):
            with tracer:
                _reads(dev)[name]()
        assert tracer.syncs, name
    # taint propagates: through ops, views, in-place writes into host memory's device copy, factories
    tracer = DeviceTracer()
    dev = tracer.mark(torch.arange(1.0, 7.0))
    with tracer:
        y = (dev * 2)[1:3].reshape(2, 1)
        z = torch.zeros(4).to(dev.device, non_blocking=True)
        z.add_(dev[:4])
        w = torch.zeros(2, device=dev.device)
        kept = torch.ones(3)
        assert not tracer.is_device(kept) and tracer.is_device(y) and tracer.is_device(z) and tracer.is_device(w)
        assert kept.tolist() == [1.0, 1.0, 1.0]  # host memory stays readable
        # long indices, output_size, non_blocking copies, shapes: no read
        dev[torch.tensor([0, 2]).to(dev.device, non_blocking=True)] = 0.0
        torch.repeat_interleave(dev.long(), torch.ones_like(dev, dtype=torch.long), output_size=6)
        assert dev.shape[0] == 6
    for blocking in (lambda d: torch.ones(2).to(d.device), lambda d: torch.tensor([1.0], device=d.device),
                     lambda d: d.copy_(torch.ones(6)), lambda d: torch.ones(6).copy_(d), lambda d: d + torch.ones(6),
                     lambda d: d[torch.tensor([0, 1])], lambda d: repr(d)):
        tracer = DeviceTracer()
        dev = tracer.mark(torch.arange(1.0, 7.0))
        with pytest.raises(HostSyncError):
            with tracer:
                blocking(dev)
    # a read swallowed by the traced code still fails when the block ends
    tracer = DeviceTracer()
    dev = tracer.mark(torch.arange(1.0, 7.0))
    with pytest.raises(HostSyncError, match="swallowed"):
        with tracer:
            try:
                int(dev.max())
            except AssertionError:
                pass


def test_the_known_sync_is_caught_and_out_size_removes_it():
    """The sync this file was written for: ``to_rgb`` given per-sample sizes and no ``out_size``
    reads their maximum back (documented; the tracer sees it); with a host-known ``out_size`` (what
    the device step passes) it reads nothing and gives the same pixels."""
    from dctnet import image as IM

    planes = IM.from_rgb(torch.rand(2, 3, 24, 40), ((2, 2), (1, 1), (1, 1)))
    sampling = ((2, 2), (1, 1), (1, 1))
    tracer = DeviceTracer()
    planes, valid = tracer.mark([p.round() for p in planes]), tracer.mark(torch.tensor([[20, 33], [24, 40]]))
    with pytest.raises(HostSyncError, match="__int__|_local_scalar_dense"):
        with tracer:
            IM.to_rgb(planes, sampling, valid)
    tracer = DeviceTracer()
    tracer.mark(planes, valid)
    with tracer:
        out = IM.to_rgb(planes, sampling, valid, out_size=(24, 40))
        grid = IM.to_rgb(planes, sampling, valid, out_size=IM.grid_size(planes, sampling))
    assert tracer.is_device(out) and IM.grid_size(planes, sampling) == (32, 48)
    assert torch.equal(out, IM.to_rgb(planes, sampling, valid)) and torch.equal(grid[:, :, :24, :40], out)
    with pytest.raises(ValueError, match="grid"):
        IM.to_rgb(planes, sampling, valid, out_size=(40, 40))


# ---------------------------------------------------------------------- shipped recipes
def _shipped_recipes() -> list[Path]:
    """Every shipped recipe with a device step (``rgb`` inputs run torchvision's pipeline instead)."""
    from dctnet.train import load_recipe

    paths = [ROOT / "recipes" / "quickstart.yaml", *sorted((ROOT / "recipes" / "imagenette").glob("*.yaml")),
             *sorted((ROOT / "recipes" / "reference").glob("*.yaml"))]
    return [p for p in paths if load_recipe(p).model.input != "rgb"]


RECIPES = _shipped_recipes()


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> str:
    """A tiny generated dataset: 3 classes, mixed JPEG settings (4:2:0, 4:2:2, 4:4:4, gray, progressive)."""
    root = tmp_path_factory.mktemp("shapes")
    return make_labelled_dataset(str(root), classes=3, train_per_class=6, val_per_class=3, size=(40, 64), seed=1)


def recipe_pipeline(path: Path, root: str, tmp_path: Path):
    """The recipe's pipeline on the CPU at test size (32×32 crops, batches of 8, one statistics
    batch); its augment list, input, stem, chroma, normalisation and decode as shipped."""
    from dctnet.train import load_recipe
    from dctnet.train.pipeline import build_pipeline

    over = [f"data.root={root}", "data.image_size=32", "data.batch_size=8", "data.threads=1", "data.workers=0",
            "model.stats_batches=1", "train.torch_threads=1", f"train.out={tmp_path / 'run'}"]
    if load_recipe(path).data.source == "synthetic":  # quickstart generates its own data: a tiny set of it
        over = [f"data.root={tmp_path / 'synthetic'}", "data.synthetic_classes=3", "data.synthetic_train_per_class=6",
                "data.synthetic_val_per_class=3", "data.synthetic_size=[40, 64]", *over[1:]]
    return build_pipeline(load_recipe(path, over), torch.device("cpu"))


def device_modules(pipe) -> list[nn.Module]:
    """What would live on the device besides the batch: the transforms' and normalisation's buffers."""
    return [m for m in (pipe.step, pipe.normalize) if m is not None]  # the device step: augment list and model input


def moved(tracer: DeviceTracer, batch: Any) -> Any:
    """The host batch copied to the (simulated) device as the prefetcher copies it: every tensor with
    ``non_blocking=True``; the host copy stays host memory."""
    with tracer:
        return batch.to(SIM_DEVICE, non_blocking=True)


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipe_device_step_makes_no_host_sync(shapes, tmp_path, path):
    """Each shipped recipe's train and eval device steps: no read of device memory, no blocking
    copy. The batch (mixed 4:2:0, 4:2:2, 4:4:4, gray and progressive files: several layout groups)
    and the transforms' buffers are device memory; the augmentation's draws are host tensors."""
    pipe = recipe_pipeline(path, shapes, tmp_path)
    tracer = DeviceTracer()
    tracer.mark(*device_modules(pipe))
    train = moved(tracer, next(iter(pipe.train_loader)))
    assert len(train.groups) > 1 and train.extents is not None
    with tracer:
        for _ in range(2):  # two steps, two different draws
            x, target, labels = pipe.train_step(train)
    val = moved(tracer, next(iter(pipe.val_loader)))
    assert val.resize is not None  # the model's eval crop: resize, then centre crop
    with tracer:
        xv, target_v, labels_v = pipe.eval_step(val)
    outputs = [*(x if isinstance(x, tuple) else (x,)), target, *(xv if isinstance(xv, tuple) else (xv,)), target_v]
    assert all(tracer.is_device(t) for t in outputs)  # the taint went all the way through
    assert not tracer.syncs


# ---------------------------------------------------------------------- layouts, eval crops, exact, caches
#: (name, Pillow save arguments, mode the RGB photo is converted to first): one group each
LAYOUTS = [("420", {"subsampling": "4:2:0"}, "RGB"), ("444", {"subsampling": "4:4:4"}, "RGB"),
           ("422", {"subsampling": "4:2:2"}, "RGB"), ("gray", {}, "L"), ("cmyk", {}, "CMYK"),
           ("progressive", {"subsampling": "4:2:0", "progressive": True}, "RGB")]

#: the crops: training (RandomResizedCrop) and eval (ResizeCenterCrop, timm's "border" mode: a
#: resized image smaller than the crop, padded with a fill — every branch of the eval resize)
CROPS = {"train": D.RandomResizedCrop(), "eval": D.ResizeCenterCrop(48, crop_pct=1.2, crop_mode="border")}


@pytest.fixture(scope="module")
def layout_folder(tmp_path_factory) -> Path:
    """Three generated photos, odd sizes, each written in every layout of :data:`LAYOUTS`."""
    root = tmp_path_factory.mktemp("layouts")
    (root / "all").mkdir()
    rng = np.random.default_rng(0)
    for k in range(3):
        rgb = synthetic_image(rng, 61 + 13 * k, 83 - 9 * k)
        for name, kwargs, mode in LAYOUTS:
            buf = io.BytesIO()
            Image.fromarray(rgb).convert(mode).save(buf, "JPEG", **{"quality": 90, **kwargs})
            (root / "all" / f"{k}-{name}.jpg").write_bytes(buf.getvalue())
    return root


def host_batch(ds: Any, epoch: int = 0) -> Any:
    """Every sample of ``ds`` in one collated host batch."""
    return ds.load_collated([(epoch, i) for i in range(len(ds))])


def device_step(tracer: DeviceTracer, batch: Any, augment: T.Compose | None, normalize: T.Normalize,
                crop: str, exact: bool) -> list[Tensor]:
    """The device step's kernels on ``batch`` under ``tracer``: the decode and crop (float and
    exact), ``augment`` on the pixels then one DCT, native chroma and the per-(c,u,v)
    standardisation — what a ``dct`` recipe with ``chroma: native`` runs."""
    from dctnet.train.pipeline import normalize_input

    fill = CROPS[crop].fill((0.5, 0.4, 0.3)) if crop == "eval" else 0.0
    with tracer:
        rgb = T.crops_to_rgb(batch, (48, 48), exact=exact, interpolation="bicubic", fill=fill)
        coef = T.crops_to_coefficients(batch, (48, 48), exact=exact, chroma="native", fill=fill)
        out = [rgb, *normalize_input(coef, normalize.mean, normalize.std)]
        if augment is not None:
            x, target = augment(rgb, T.as_jpeg_batch(batch).labels, generator=T.step_generator(0, 0, 0))
            out += [*normalize_input(T.native_chroma(x), normalize.mean, normalize.std), target]
    return out


def deit_augment(num_classes: int) -> T.Compose:
    """vit_s16_dct_gpu's list (DeiT's: flip, RandAugment m9, pixel erasing, Mixup/CutMix), then the DCT."""
    from dctnet.train import load_recipe

    spec = load_recipe(ROOT / "recipes" / "imagenette" / "vit_s16_dct_gpu.yaml").augment
    ops = T.build_transform(spec, num_classes=num_classes, seed=0, label_smoothing=0.1)
    return T.Compose([*ops.transforms, T.ToCoefficients()], seed=0)


@pytest.mark.parametrize("crop", sorted(CROPS))
def test_mixed_layout_batch_makes_no_host_sync(layout_folder, crop):
    """One batch with 4:2:0, 4:4:4, 4:2:2, gray, CMYK and progressive samples (five plane groups),
    training crops and the eval resize-then-crop (``batch.resize``, fill), float and exact
    decode, DeiT's augmentation, native chroma and the standardisation: no host sync."""
    ds = D.ImageFolderDataset(layout_folder, crop=CROPS[crop], seed=3)
    tracer = DeviceTracer()
    augment = tracer.mark(deit_augment(num_classes=1))
    normalize = tracer.mark(T.Normalize(torch.rand(3, 64), 1 + torch.rand(3, 64)))
    host = host_batch(ds)
    batch = moved(tracer, host)
    assert len(batch.groups) == 5 and (batch.resize is not None) == (crop == "eval")  # progressive: 4:2:0's group
    for exact in (False, True):
        out = device_step(tracer, batch, augment if not exact else None, normalize, crop, exact)
        assert all(tracer.is_device(t) for t in out)
        # the crops are those of the host batch, decoded on the host (no tracer), up to float rounding: the
        # simulated device resizes a training crop with the dense matrices, the host's CPU with their sparse band
        torch.testing.assert_close(out[0], T.crops_to_rgb(host, (48, 48), exact=exact, interpolation="bicubic",
                                                          fill=CROPS[crop].fill((0.5, 0.4, 0.3)) if crop == "eval" else 0.0),
                                   atol=1e-6, rtol=0)


@pytest.mark.parametrize("fmt", ["dense", "sparse"])
@pytest.mark.parametrize("crop", sorted(CROPS))
def test_cache_device_expansion_makes_no_host_sync(layout_folder, tmp_path, fmt, crop):
    """``CacheDataset(device_expand=True)``: packed windows (dense) and compressed records (sparse)
    leave the host, :func:`dctnet.batch.as_jpeg_batch` expands them on the device and the decode
    follows, with no host sync — the same batch as the host's own gather, bit for bit, and the same
    crops up to float rounding."""
    cache = D.build_cache(layout_folder, tmp_path / fmt, format=fmt, progress=False)
    raw = host_batch(D.CacheDataset(cache, crop=CROPS[crop], seed=3, device_expand=True))
    assert isinstance(raw, PackedJpegBatch if fmt == "dense" else SparseJpegBatch) and raw.extents is not None
    ref = host_batch(D.CacheDataset(cache, crop=CROPS[crop], seed=3))
    tracer = DeviceTracer()
    normalize = tracer.mark(T.Normalize(torch.rand(3, 64), 1 + torch.rand(3, 64)))
    dev = moved(tracer, raw)
    with tracer:
        expanded = T.as_jpeg_batch(dev)
    assert expanded.extents == ref.extents and [g.layout for g in expanded.groups] == [g.layout for g in ref.groups]
    assert all(tracer.is_device(t) and torch.equal(t, r) for t, r in zip(expanded.tensors(), ref.tensors()))
    for exact in (False, True):
        out = device_step(tracer, dev, None, normalize, crop, exact)  # crops_to_* expand on arrival
        assert all(tracer.is_device(t) for t in out)
        # up to float rounding: dense matrices on the (simulated) device, their sparse band on the host
        torch.testing.assert_close(out[0], T.crops_to_rgb(ref, (48, 48), exact=exact, interpolation="bicubic",
                                                          fill=CROPS[crop].fill((0.5, 0.4, 0.3)) if crop == "eval" else 0.0),
                                   atol=1e-6, rtol=0)


def test_a_batch_built_on_the_device_decodes_its_grid(layout_folder):
    """Extents are read where the batch is built on the host, and travel with it. A batch built on a
    device without them (nothing to read them from without a sync) decodes each group's whole MCU
    grid: no host sync, the same crops up to float rounding (the resize sums over more, zero-weight,
    padding pixels)."""
    import dataclasses

    ds = D.ImageFolderDataset(layout_folder, crop=CROPS["train"], seed=4)
    host = host_batch(ds)
    tracer = DeviceTracer()
    batch = moved(tracer, host)
    assert batch.extents == host.extents and all(e is not None for e in host.extents)
    with tracer:
        bare = dataclasses.replace(batch, extents=None)  # on the device: kept as given
        grid = T.crops_to_rgb(bare, (48, 48))
    assert bare.extents is None and tracer.is_device(grid)
    torch.testing.assert_close(grid, T.crops_to_rgb(host, (48, 48)), atol=1e-6, rtol=0)
    # on the host they are always those of valid, whatever a replace passed
    smaller = dataclasses.replace(host, valid=host.valid.clamp(max=16), extents=None)
    assert smaller.extents == tuple((16, 16) for _ in host.groups)
    assert dataclasses.replace(host, extents=((1, 1),)).extents == host.extents


def test_sparse_expansion_checks_its_streams_without_waiting():
    """``expand_torch``: the counts checked and a ``ValueError`` raised (``check=True``, a read-back),
    or the same test queued on the device (``check=False``, the device step's: no read; on the CPU
    it raises at once) — and the gathers never read out of bounds."""
    from dctnet.batch import expand_torch

    masks = torch.tensor([0b1011, 0, -(1 << 63)], dtype=torch.int64)  # 3 + 0 + 1 coefficients (bit 63: the sign)
    values = torch.tensor([5, -128, -3, 7], dtype=torch.int8)
    escapes = torch.tensor([300], dtype=torch.int16)
    tables = torch.arange(1, 193, dtype=torch.int32).reshape(3, 64)
    want = torch.zeros(3, 64, dtype=torch.int16)
    want[0, [0, 1, 3]] = torch.tensor([5 * 1, 300 * 2, -3 * 4], dtype=torch.int16)
    want[2, 63] = 7 * 192
    tracer = DeviceTracer()
    args = tracer.mark([masks, values, escapes, tables])
    with tracer:
        out = expand_torch(*args, check=False)
    assert tracer.is_device(out) and torch.equal(out, want) and torch.equal(expand_torch(masks, values, escapes, tables), want)
    with pytest.raises(HostSyncError):
        with DeviceTracer() as t:
            expand_torch(*t.mark([masks, values, escapes, tables]))  # the checked form reads the counts
    for bad in (values[:3], torch.tensor([5, 9, -3, 7], dtype=torch.int8)):  # a value short; an escape unmarked
        with pytest.raises(ValueError, match="corrupt sparse records"):
            expand_torch(masks, bad, escapes, tables)
        with pytest.raises(RuntimeError, match="corrupt sparse records"):
            expand_torch(masks, bad, escapes, tables, check=False)


# ---------------------------------------------------------------------- beyond the shipped recipes
#: constructor arguments for the registered transforms that need some (the rest: defaults)
_ARGS = {"Mixup": {"num_classes": 3, "cutmix_alpha": 1.0}, "MixUp": {"num_classes": 3}, "CutMix": {"num_classes": 3},
         "SelectFrequencies": {"zigzag": 10}, "TimmAugment": {"policy": "rand-m9-mstd0.5-inc1"},
         "ColorJitter": {"brightness": 0.3, "contrast": 0.3, "saturation": 0.3, "hue": 0.1},
         "RandomErasing": {"p": 1.0, "mode": "pixel", "max_count": 2}}


def _registered() -> list:
    from dctnet.transforms.registry import TRANSFORMS

    return [pytest.param(name, rep, id=f"{name}-{rep}") for name, cls in TRANSFORMS.items()
            for rep in ("pixel", "coefficient")
            if not (rep == "coefficient" and cls.domain == "pixel") and not (rep == "pixel" and name == "SelectFrequencies")]


@pytest.mark.parametrize("name,rep", _registered())
def test_every_registered_transform_makes_no_host_sync(name, rep):
    """Every transform a recipe can name, on pixels and (where it takes them) on coefficients."""
    from dctnet.transforms.registry import TRANSFORMS

    if TRANSFORMS[name].takes_transforms:  # containers: of per-sample ops, and of mixers (where they take them)
        per_sample = TRANSFORMS[name]([T.RandomHorizontalFlip(), T.RandomGrayscale(p=0.5)])
        mixers = [] if name == "RandomOrder" else [TRANSFORMS[name]([T.MixUp(num_classes=3), T.CutMix(num_classes=3)])]
        t = T.Compose([per_sample, *mixers], seed=0)
    else:
        t = TRANSFORMS[name](**_ARGS.get(name, {}))
    tracer = DeviceTracer()
    tracer.mark(t)
    x = torch.rand(6, 3, 32, 32)
    x = tracer.mark(x if rep == "pixel" else T.ToCoefficients()(x))
    labels = tracer.mark(torch.tensor([0, 1, 2, 0, 1, 2]))
    with tracer:
        for step in range(2):
            out, _ = t(x, labels, generator=T.step_generator(0, 0, step))
    assert tracer.is_device(out)


@pytest.mark.parametrize("sampling,color_space", [
    (((3, 2), (2, 1), (2, 1)), "YCbCr"),          # non-integer ratios: nearest, fractional
    (((1, 2), (1, 1), (1, 1)), "YCbCr"),          # 4:4:0, libjpeg's h1v2 fancy
    (((2, 2), (1, 1), (1, 1), (2, 2)), "YCCK"),   # four components
    (((1, 1),), "gray")])
def test_every_decode_path_makes_no_host_sync(sampling, color_space):
    """``to_rgb`` with a host-known ``out_size`` on every upsampling path (float and, where libjpeg
    decodes the ratios, exact)."""
    from dctnet import image as IM

    tracer = DeviceTracer()
    planes = tracer.mark([torch.randint(-60, 60, (2, 2 * v, 3 * h, 64), dtype=torch.int16) for h, v in sampling])
    valid = tracer.mark(torch.tensor([[10, 12], [16, 20]]))
    integer = all(max(s[0] for s in sampling) % h == 0 and max(s[1] for s in sampling) % v == 0 for h, v in sampling)
    with tracer:
        for exact in (False, True) if integer else (False,):
            out = IM.to_rgb(planes, sampling, valid, color_space=color_space, exact=exact, out_size=(16, 20))
            assert out.shape == (2, 3, 16, 20) and tracer.is_device(out)


@pytest.mark.parametrize("name", ["vit_s16_dct_gpu", "deit_s"])
def test_a_training_batch_copies_its_plan_once(shapes, tmp_path, name):
    """DeiT's list (flip, RandAugment, pixel erasing, Mixup/CutMix) plans ~44 small tensors a batch on the
    host; they reach the device as one packed buffer (:mod:`dctnet.transforms.transfer`): at most 2 host →
    device copies per training batch after the batch itself (the constants' first copies are made by the
    first batch), where copying the plan tensor by tensor made one per tensor."""
    path = next(p for p in RECIPES if p.stem == name)
    pipe = recipe_pipeline(path, shapes, tmp_path)
    pipe.step.train_transform.set_fixed_shapes(True)  # as compiled: every group (and constant) every batch
    tracer = DeviceTracer()
    tracer.mark(*device_modules(pipe))
    batch = moved(tracer, next(iter(pipe.train_loader)))
    with tracer:
        pipe.train_step(batch)  # the first batch: constants built and copied once per device
        copies = []
        for _ in range(3):
            before = tracer.copies_to_device
            pipe.train_step(batch)
            copies.append(tracer.copies_to_device - before)
    assert all(1 <= c <= 2 for c in copies), copies
    # the same plan, tensor by tensor, is what the one copy replaced
    from torch.utils._pytree import tree_leaves as leaves

    transform = pipe.step.train_transform
    x = torch.rand(len(batch.labels), 3, 32, 32)
    plan = transform.prepare(transform.draw_params(x.shape, T.step_generator(0, 0, 0)), x.shape, "cpu")
    assert sum(isinstance(v, Tensor) for v in leaves(plan)) >= 20
