"""The transform engine's names in one place: every module of :mod:`dctnet.transforms` and every
user may import them from here (``from dctnet.transforms.base import Transform, Compose, kernel``).
The engine itself lives by role:

- :mod:`~dctnet.transforms.transform` — :class:`Transform` (draw on the host, apply batched; the
  call forms, ``p``, replay) and its kernel registration (:func:`kernel`, per representation);
- :mod:`~dctnet.transforms.representation` — pixels and coefficient images, told apart and converted;
- :mod:`~dctnet.transforms.rng` — :func:`step_generator`, the per-step generator;
- :mod:`~dctnet.transforms.groups` — groups of rows of a fixed size and in-place writes;
- :mod:`~dctnet.transforms.compose` — :class:`Compose`;
- :mod:`~dctnet.transforms.compiled` — :func:`compile_step`, :class:`CompiledHalf`;
- :mod:`~dctnet.transforms.recipe_ops` — :data:`RECIPE_OPS` and :class:`BaselineContext`;
- :mod:`~dctnet.transforms.slots` — the policies' slot scheduler (:mod:`~dctnet.transforms.policy_base`).
"""

from __future__ import annotations

from dctnet.kernels.policy import round_to_levels
from dctnet.transforms.compiled import CompiledHalf, compile_step, plan_signature
from dctnet.transforms.compose import Compose
from dctnet.transforms.groups import (OVERFLOW, group_capacity, group_chunks, may_overwrite, owning, run_groups,
                                      shares_memory, to_device)
from dctnet.transforms.recipe_ops import RECIPE_OPS, BaselineContext
from dctnet.transforms.representation import (KERNEL_STAGES, REPRESENTATIONS, coefficient_shape, image_size, in_domain,
                                              kernel, pixel_shape, representation, shape_representation,
                                              to_coefficients, to_pixels)
from dctnet.transforms.rng import step_generator
from dctnet.transforms.transform import Params, Transform, check_input

__all__ = ["Compose", "KERNEL_STAGES", "OVERFLOW", "Params", "RECIPE_OPS", "REPRESENTATIONS", "BaselineContext",
           "CompiledHalf", "Transform", "check_input", "coefficient_shape", "compile_step", "group_capacity",
           "group_chunks", "image_size", "in_domain", "kernel", "may_overwrite", "owning", "pixel_shape",
           "plan_signature", "representation", "round_to_levels", "run_groups", "shape_representation",
           "shares_memory", "step_generator", "to_coefficients", "to_device", "to_pixels"]
