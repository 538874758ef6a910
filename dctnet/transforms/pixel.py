"""Moved: :mod:`dctnet.kernels.pixel`. Re-exported here for the detection transforms, which still
import this path; new code imports :mod:`dctnet.kernels.pixel`."""

from dctnet.kernels.pixel import *  # noqa: F401,F403
