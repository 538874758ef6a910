"""A list of transforms run as one (:class:`Compose`): every draw from one generator, the batch
converted between pixels and coefficients only where the next transform needs the other, and each
intermediate the list's own, which a transform may write into (:func:`dctnet.transforms.groups.owning`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from dctnet.transforms.groups import owning, shares_memory
from dctnet.transforms.representation import in_domain
from dctnet.transforms.transfer import move_plan
from dctnet.transforms.transform import Params, Transform

__all__ = ["Compose"]


class Compose(Transform):
    """Apply ``transforms`` in order, every draw from one generator: :attr:`generator` (seeded by
    ``seed``) or the ``generator=`` of the call (e.g. :meth:`generator_for` ``(epoch, step, rank)``);
    the transforms' own generators are not used. Parameters are ``{"0": params of transforms[0],
    "1": …}``; they are drawn transform by transform as the batch goes through, in the same order as
    :meth:`draw_params`.

    The batch changes representation only where the next transform needs the other one, and stays
    there; the result is in the representation the Compose was given, unless its last transform is
    a converter (:class:`ToRGB`, :class:`ToCoefficients`)."""

    domain = "any"

    def __init__(self, transforms: Sequence[Transform], seed: int | None = None) -> None:
        super().__init__(seed)
        transforms = list(transforms)
        for t in transforms:
            if not isinstance(t, Transform):
                raise TypeError(f"Compose takes dctnet transforms (dctnet.transforms.Transform), got {type(t).__name__}")
        self.transforms = nn.ModuleList(transforms)

    @property
    def converter(self) -> bool:  # type: ignore[override]
        return bool(len(self.transforms)) and self.transforms[-1].converter

    @property
    def keeps_coefficients(self) -> bool:  # type: ignore[override]
        return all(t.keeps_coefficients for t in self.transforms)

    def draw_params(self, shape: Sequence[int], generator: torch.Generator | None = None) -> Params:
        shape = torch.Size(shape)
        gen = generator if generator is not None else self.generator
        params = {}
        for i, t in enumerate(self.transforms):
            params[str(i)] = t.draw_params(shape, gen)
            shape = t._out_shape(t._domain_shape(shape))
        return params

    def _out_shape(self, shape):
        for t in self.transforms:
            shape = t._out_shape(t._domain_shape(shape))
        return shape

    def _run_native(self, x, labels, params, gen):
        if params is None:
            params = self.draw_params(x.shape, gen)
        elif sorted(params) != sorted(str(i) for i in range(len(self.transforms))):
            raise ValueError(f"params have keys {sorted(params)}, this Compose has {len(self.transforms)} transforms")
        x, labels = self.execute(x, labels, move_plan(self.prepare(params, x.shape, "cpu"), x.device))
        return x, labels, params

    def prepare(self, params, shape, device):
        """Each transform's :meth:`Transform.prepare`, for the shape the batch has when it reaches it."""
        shape = torch.Size(shape)
        prepared = []
        for i, t in enumerate(self.transforms):
            shape = t._domain_shape(shape)
            prepared.append(t.prepare(params[str(i)], shape, device))
            shape = t._out_shape(shape)
        return prepared

    def execute(self, x, labels, prepared):
        """The transforms in order, each on the representation it needs (converting only there). Each
        intermediate is the list's own: a transform may write into it (:func:`may_overwrite`) rather
        than copy the batch, but never into the caller's input or a view of it."""
        if torch.compiler.is_compiling():  # a traced step writes nothing in place (no thread-local in the graph)
            for t, p in zip(self.transforms, prepared):
                x, labels = t.execute(in_domain(x, t.domain), labels, p)
            return x, labels
        given = x
        for t, p in zip(self.transforms, prepared):
            x = in_domain(x, t.domain)
            owned = isinstance(x, Tensor) and x is not given and not shares_memory(x, given)
            with owning(t, x, owned):
                x, labels = t.execute(x, labels, p)
        return x, labels
