"""ModelEma.step with multi-tensor kernels (issue 40 item 5): one ``torch._foreach_lerp_`` over the
floating-point state and one ``_foreach_copy_`` over the rest, no ``state_dict()`` per step — and
bit for bit the per-tensor update it replaces (timm ``ModelEmaV3.apply_update_``)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from dctnet.train.ema import ModelEma


class Net(nn.Module):
    """Parameters, BatchNorm's running stats and its int64 ``num_batches_tracked``, and a
    non-persistent buffer (a constant, outside the state_dict: not averaged, as in timm)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.head = nn.Linear(6, 4)
        self.register_buffer("scale", torch.ones(1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.bn(self.conv(x * self.scale)).mean((2, 3)))


def reference_step(ema: nn.Module, model: nn.Module, d: float) -> None:
    """The update as written before: per state_dict entry, ``lerp_`` floats by ``1 − d``, copy the rest."""
    with torch.no_grad():
        for e, v in zip(ema.state_dict().values(), model.state_dict().values()):
            if e.is_floating_point():
                e.lerp_(v.to(dtype=e.dtype), 1.0 - d)
            else:
                e.copy_(v)


def train_step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    loss = model(torch.randn(8, 3, 6, 6)).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        model.scale.add_(0.25)  # a non-persistent buffer the model changes: the EMA leaves it


def assert_same_state(a: nn.Module, b: nn.Module, step: int) -> None:
    for (k, x), (k2, y) in zip(a.named_buffers(), b.named_buffers()):
        assert k == k2 and x.dtype == y.dtype and torch.equal(x, y), (step, k)
    for (k, x), (k2, y) in zip(a.named_parameters(), b.named_parameters()):
        assert k == k2 and torch.equal(x, y), (step, k)


@pytest.mark.parametrize("warmup", [False, True])
@pytest.mark.parametrize("every", [1, 2])
def test_foreach_step_is_the_per_tensor_update_bit_for_bit(warmup, every):
    torch.manual_seed(0)
    model = Net()
    ema = ModelEma(model, 0.9, warmup=warmup, every=every)
    ref = copy.deepcopy(ema.module)
    opt = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
    updates = 0
    for step in range(1, 13):  # the last is an update for every = 1 and 2
        model.train()
        train_step(model, opt)
        ema.step(model, step)
        if step % every == 0:
            updates += 1
            reference_step(ref, model, ema.decay_at(updates))
        assert ema.updates == updates
        assert_same_state(ema.module, ref, step)
    assert ema.module.bn.num_batches_tracked.item() == model.bn.num_batches_tracked.item() > 0
    assert ema.module.scale.item() == 1.0 and model.scale.item() > 1.0


def test_step_uses_foreach_kernels_and_no_state_dict(monkeypatch):
    """One ``_foreach_lerp_`` per update, and no ``state_dict()`` (its detached copy of every tensor)."""
    model = Net()
    ema = ModelEma(model, 0.9)
    lerps = []
    real = torch._foreach_lerp_
    monkeypatch.setattr(torch, "_foreach_lerp_", lambda *a, **k: lerps.append(len(a[0])) or real(*a, **k))

    def no_state_dict(*args, **kwargs):
        raise AssertionError("state_dict() called in ModelEma.step")

    monkeypatch.setattr(nn.Module, "state_dict", no_state_dict)
    for step in range(1, 4):
        ema.step(model, step)
    floats = sum(1 for _ in model.parameters()) + 2  # + running_mean, running_var
    assert lerps == [floats] * 3


def test_step_follows_tensors_replaced_after_construction():
    """``.to(dtype)`` (new buffer tensors) and ``load_state_dict(assign=True)`` (new parameters) after the
    EMA was made: the step averages the tensors the modules hold now, not ones cached before."""
    torch.manual_seed(1)
    model = Net()
    ema = ModelEma(model, 0.5)
    ref = copy.deepcopy(ema.module)
    opt = torch.optim.SGD(model.parameters(), lr=0.3)
    train_step(model, opt)
    ema.step(model, 1)
    reference_step(ref, model, ema.decay_at(1))
    model.double()
    ema.module.double()
    ref.double()
    fresh = {k: v.clone() + 1.0 if v.is_floating_point() else v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(fresh, assign=True)
    for step in (2, 3):
        ema.step(model, step)
        reference_step(ref, model, ema.decay_at(step))
        assert_same_state(ema.module, ref, step)
    assert ema.module.conv.weight.dtype == torch.float64


def test_step_takes_wrapped_models_and_refuses_another_model():
    torch.manual_seed(2)
    model = Net()
    ema = ModelEma(model, 0.5)
    ref = copy.deepcopy(ema.module)
    with torch.no_grad():
        model.head.weight.add_(1.0)
    ema.step(torch.compile(model), 1)  # names under "_orig_mod."; nothing is compiled (no call)
    reference_step(ref, model, ema.decay_at(1))
    assert_same_state(ema.module, ref, 1)
    with pytest.raises(ValueError, match="not the model the EMA was made from"):
        ema.step(nn.Sequential(nn.Linear(2, 2)), 2)
