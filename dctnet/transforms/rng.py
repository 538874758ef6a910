"""The augmentation RNG: a CPU ``torch.Generator`` that is a pure function of ``(seed, epoch, step,
rank)`` (:func:`step_generator`). Every transform draws its parameters on the host from such a
generator (:meth:`dctnet.transforms.transform.Transform.draw_params`), so a trainer that passes one
each step is bit-reproducible and resumes exactly."""

from __future__ import annotations

import hashlib
import operator

import torch

__all__ = ["step_generator"]


def step_generator(seed: int, epoch: int, step: int, rank: int = 0) -> torch.Generator:
    """A CPU ``torch.Generator`` that is a pure function of ``(seed, epoch, step, rank)``.

    Pass it as ``generator=`` each training step (``aug(x, labels, generator=step_generator(seed,
    epoch, step, rank))``): the augmentation of a step then depends on nothing else, so runs are
    bit-reproducible and a resumed run repeats its draws exactly. The seed is a keyed BLAKE2b hash
    of the four integers — the same on every platform, Python version and process (unlike
    ``hash()``), and unrelated streams for neighbouring steps or ranks."""
    values = []
    for name, v in (("seed", seed), ("epoch", epoch), ("step", step), ("rank", rank)):
        if isinstance(v, bool):
            raise TypeError(f"step_generator: {name} must be an int, got {v!r}")
        try:
            values.append(operator.index(v))  # ints, numpy ints, 0-d integer tensors
        except TypeError:
            raise TypeError(f"step_generator: {name} must be an int, got {v!r}") from None
    digest = hashlib.blake2b(repr(tuple(values)).encode(), digest_size=8, person=b"dctnet.augment").digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)  # 63 bits: any seed torch takes
