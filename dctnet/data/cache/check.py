"""A cache against its checksums (every record: ``dctnet verify CACHE``) and against its sources
(re-decode a random sample of the samples it holds and compare bit for bit: ``dctnet cache verify``)."""

from __future__ import annotations

import numpy as np

from dctnet.codec import read_coefficients
from dctnet.data.cache import Cache, source_bytes
from dctnet.data.cache.format import BAD, CacheRecordError

__all__ = ["check_records", "compare_with_sources"]


def check_records(cache: Cache, chunk: int = 4096) -> dict[str, object]:
    """Every record of ``cache`` against its checksum (whatever ``cache.checksums`` says; the index's
    own checksum was checked when it was opened with checksums on).

    Returns ``{"records", "unreadable_at_build", "corrupt", "bytes"}``: how many records, how many
    were bad sources at build time (they hold no data), the corrupt ones as
    ``{"record", "source", "where"}`` dicts in record order, and the data bytes checked."""
    n = len(cache)
    corrupt: list[dict[str, object]] = []
    nbytes = 0
    for lo in range(0, n, chunk):  # the index a chunk at a time: a plain copy of ~370 KB
        idx = np.arange(lo, min(lo + chunk, n), dtype=np.int64)
        rec = np.asarray(cache.index[lo:lo + len(idx)])
        nbytes += int(rec["nbytes"][rec["status"] != BAD].sum())
        for j in cache._corrupt(idx, rec).tolist():
            err = cache._record_error(int(idx[j]), "checksum mismatch")
            corrupt.append({"record": err.record, "source": err.source, "where": err.where})
    bad = int((np.asarray(cache.index["status"]) == BAD).sum())
    return {"records": n, "unreadable_at_build": bad, "corrupt": corrupt, "bytes": nbytes}


def compare_with_sources(cache: Cache, samples: int, seed: int = 0) -> tuple[int, list[str]]:
    """``(checked, different)``: how many of the cache's readable samples were re-decoded from
    their sources (``samples`` drawn with ``seed``, or all of them when fewer), and the source
    paths of those whose planes differ from the cache's (a record that fails its checksum is one,
    with the reason after its path)."""
    rng = np.random.default_rng(seed)
    good = [i for i in range(len(cache)) if not cache.is_bad(i)]
    pick = sorted(rng.choice(good, size=min(samples, len(good)), replace=False).tolist()) if good else []
    mismatched = []
    for i in pick:
        try:
            got = cache.coefficients(i)
        except CacheRecordError as exc:
            mismatched.append(f"{exc.source} ({exc.what})")
            continue
        ref = read_coefficients(source_bytes(cache.meta, cache.root, i))
        if len(ref.planes) != len(got.planes) or not all(np.array_equal(a, b) for a, b in zip(ref.planes, got.planes)):
            mismatched.append(cache.meta["sources"][i]["path"])
    return len(pick), mismatched
