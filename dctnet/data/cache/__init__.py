"""Coefficient cache: entropy-decode a dataset once, read it back memory-mapped.

Layout of a cache directory ``OUT/``::

    meta.json                  sidecar: format, parameters, versions, the absolute source root,
                               sources (path, size, mtime, blake2b), bad files, classes, parts,
                               the index's checksum — written last
    index.npy                  one record per sample (part, offset, sizes, layout, label, status,
                               checksum of the record's bytes and its tables row)
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

Checksums (format version 2): every record's XXH3-64 is checked each time it is read (``checksums=True``,
the default; ``data.cache_checksums`` in a recipe), the index's when the cache is opened. A record
that fails is a bad sample (:class:`CacheRecordError`, under the datasets' ``on_error``); ``dctnet
verify CACHE`` checks them all. Version-1 caches (none) are refused unless checksums are off.

Parallel/distributed: the samples are split into contiguous ranges by rank (``torchrun`` ranks,
or ``workers`` local processes); each rank decodes and writes only its range; rank 0 writes the
index once all have finished.
"""

from dctnet.data.cache.build import build_cache
from dctnet.data.cache.format import INDEX_DTYPE, CacheError, CacheRecordError, validate_index
from dctnet.data.cache.read import Cache, CachedCoefficients
from dctnet.data.cache.dataset import CacheDataset, open_cache, source_bytes

__all__ = ["Cache", "CacheDataset", "CacheError", "CacheRecordError", "CachedCoefficients", "INDEX_DTYPE", "build_cache",
           "open_cache", "source_bytes", "validate_index"]
