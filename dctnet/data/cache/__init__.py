"""Coefficient cache: entropy-decode a dataset once, read it back memory-mapped.

Layout of a cache directory ``OUT/``::

    meta.json                  sidecar: format, parameters, versions, sources (path, size, mtime,
                               blake2b), bad files, classes, parts — written last
    index.npy                  one record per sample (part, offset, sizes, layout, label, status)
    tables.npy                 uint16 (N, 4, 64) per-sample component tables
    part-00000-of-00002.bin    sample-major ragged data, one file per build rank

Formats: ``dense`` — the int16 planes as read (no decode work on read); ``sparse`` — the record
of :mod:`dctnet.data.sparse` (masks + int8 quantized values + escapes), expanded in C on the host
or in torch on the device. Either reads back bit-identical to :func:`dctnet.read_coefficients`.

Trust: a build writes into ``OUT.partial/`` and renames it to ``OUT`` only when every rank has
finished and the index and sidecar are written, so a build killed at any moment never leaves a
cache that opens. Each rank appends to its own part and index files and records its progress
after every flushed chunk; ``resume=True`` truncates to the last recorded state and continues.
Opening checks the sources against the sidecar (sizes and mtimes; hashes with ``verify="hash"``)
and the build parameters, and fails saying what changed.

Parallel/distributed: the samples are split into contiguous ranges by rank (``torchrun`` ranks,
or ``workers`` local processes); each rank decodes and writes only its range; rank 0 writes the
index once all have finished.
"""

from dctnet.data.cache.build import build_cache
from dctnet.data.cache.format import INDEX_DTYPE, CacheError, validate_index
from dctnet.data.cache.read import Cache, CacheDataset, CachedCoefficients, open_cache, source_bytes

__all__ = ["Cache", "CacheDataset", "CacheError", "CachedCoefficients", "INDEX_DTYPE", "build_cache", "open_cache",
           "source_bytes", "validate_index"]
