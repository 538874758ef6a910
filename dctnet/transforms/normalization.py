"""Moved: :mod:`dctnet.kernels.normalization`. Re-exported here for ``dctnet.train.detection``, which
still imports this path; new code imports :mod:`dctnet.kernels.normalization`."""

from dctnet.kernels.normalization import *  # noqa: F401,F403
