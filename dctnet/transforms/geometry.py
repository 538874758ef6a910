"""Moved: :mod:`dctnet.kernels.geometry`. Re-exported here for the detection transforms, which still
import this path; new code imports :mod:`dctnet.kernels.geometry`."""

from dctnet.kernels.geometry import *  # noqa: F401,F403
