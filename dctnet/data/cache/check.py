"""A cache against its sources: re-decode a random sample of the samples it holds and compare
bit for bit (``dctnet cache verify``)."""

from __future__ import annotations

import numpy as np

from dctnet.codec import read_coefficients
from dctnet.data.cache import Cache, source_bytes

__all__ = ["compare_with_sources"]


def compare_with_sources(cache: Cache, samples: int, seed: int = 0) -> tuple[int, list[str]]:
    """``(checked, different)``: how many of the cache's readable samples were re-decoded from
    their sources (``samples`` drawn with ``seed``, or all of them when fewer), and the source
    paths of those whose planes differ from the cache's."""
    rng = np.random.default_rng(seed)
    good = [i for i in range(len(cache)) if not cache.is_bad(i)]
    pick = sorted(rng.choice(good, size=min(samples, len(good)), replace=False).tolist()) if good else []
    root = cache.meta["root"]
    mismatched = []
    for i in pick:
        ref = read_coefficients(source_bytes(cache.meta, root, i))
        got = cache.coefficients(i)
        if len(ref.planes) != len(got.planes) or not all(np.array_equal(a, b) for a, b in zip(ref.planes, got.planes)):
            mismatched.append(cache.meta["sources"][i]["path"])
    return len(pick), mismatched
