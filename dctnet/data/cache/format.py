"""The cache format and its validation: index dtype, part names, ``meta.json`` and index checks.

A cache directory is untrusted input: everything read from it is checked here before use.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from dctnet.codec import JpegError, open_regular_file
from dctnet.data.plan import COLOR_SPACES
from dctnet.data.sparse import record_layout


#: 2: every index record carries its record's checksum, meta.json the index's (version 1 had none)
FORMAT_VERSION = 2


#: version 1's index record: what a cache built before the checksums holds
INDEX_DTYPE_V1 = np.dtype([
    ("part", "<u2"), ("status", "u1"), ("ncomp", "u1"), ("color", "u1"), ("orient", "u1"), ("_pad", "u2"),
    ("offset", "<u8"), ("nbytes", "<u8"), ("label", "<i4"), ("height", "<i4"), ("width", "<i4"),
    ("sampling", "u1", (4, 2)), ("blocks", "<i4", (4, 2)), ("nvalues", "<u4"), ("nescapes", "<u4"),
])

#: one index record (92 bytes): version 1's fields and ``checksum``, the :func:`record_checksum`
#: of the record's bytes and its row of ``tables.npy`` (0 for a bad sample, which has neither)
INDEX_DTYPE = np.dtype(INDEX_DTYPE_V1.descr + [("checksum", "<u8")])

#: the checksum every record and the index carry: xxHash's XXH3, 64 bits — ~45 GB/s here against
#: zlib.crc32's ~3 GB/s, so checking a ~24 KB sparse record costs well under a microsecond
CHECKSUM = "xxh3_64"


OK, BAD = 0, 1


class CacheError(ValueError):
    """A cache that must not be used as it is: incomplete, stale, or built with other parameters."""


class CacheRecordError(CacheError, JpegError):
    """One record whose bytes are not what the build wrote (its checksum differs, or its streams
    do not fit its masks): a bad sample, so the datasets' ``on_error`` applies to it as to an
    unreadable JPEG. ``cache`` is the cache directory, ``record`` the sample's index in it,
    ``source`` its source path, ``where`` the part file and byte range that hold it."""

    def __init__(self, cache: str | os.PathLike, record: int, source: str, what: str, where: str = "") -> None:
        at = f" ({where})" if where else ""
        JpegError.__init__(self, f"cache {cache}, record {record}{at}: {what} (corrupt cache; rebuild it)", source)
        self.cache, self.record, self.where, self.what = str(cache), record, where, what

    def __str__(self) -> str:
        at = f" in {self.where}" if self.where else ""
        return f"{self.cache}: record {self.record} ({self.source}){at}: {self.what} (corrupt cache; rebuild it)"


def record_checksum(data: Any, table: Any) -> int:
    """The checksum of one record: XXH3-64 of its bytes (a contiguous buffer: the part file's
    ``nbytes`` bytes at ``offset``, without the alignment padding) seeded with the XXH3-64 of its
    ``tables.npy`` row (uint16 (4, 64), little-endian), so a flip in either changes it."""
    return xxhash.xxh3_64_intdigest(data, seed=xxhash.xxh3_64_intdigest(table))


def index_checksum(index: np.ndarray) -> str:
    """The hex checksum of a whole index (a contiguous :data:`INDEX_DTYPE` array), as ``meta.json``
    records it under ``checksums.index``."""
    return xxhash.xxh3_64_hexdigest(np.ascontiguousarray(index).view(np.uint8))


def file_hash(path: str) -> str | None:
    """blake2b of a regular file; ``None`` for anything else (never blocks on a FIFO)."""
    h = hashlib.blake2b(digest_size=16)
    try:
        with open_regular_file(path) as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def part_name(rank: int, world: int) -> str:
    return f"part-{rank:05d}-of-{world:05d}"


_PART_NAME = re.compile(r"part-\d{5}-of-\d{5}\.bin")


_MAX_SIDE = 65535  # JPEG's limit on either image dimension


_HEX64 = re.compile(r"[0-9a-f]{16}")


def load_meta(path: Path, checksums: bool = True) -> dict[str, Any]:
    """``meta.json``, checked for the fields and types the reader relies on. A version-1 cache (no
    checksums) is refused unless ``checksums`` is off, and the message says both ways out."""
    f = path / "meta.json"
    try:
        meta = json.loads(f.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CacheError(f"{f}: not readable as JSON ({exc})") from None

    def bad(what: str) -> CacheError:
        return CacheError(f"{f}: {what}")

    if not isinstance(meta, dict):
        raise bad("not a JSON object")
    version = meta.get("format_version")
    if type(version) is not int or version not in (1, FORMAT_VERSION):
        raise CacheError(f"{path}: cache format version {version}, this dctnet reads {FORMAT_VERSION} "
                         f"(and 1 without checksums): rebuild it (dctnet cache build SRC {path})")
    if version == 1 and checksums:
        raise CacheError(f"{path}: cache format version 1 has no checksums, so a flipped bit in it would train silently "
                         f"(this dctnet writes version {FORMAT_VERSION}, with a checksum on every record): rebuild it "
                         f"(dctnet cache build SRC {path}), or read it unchecked: `data.cache_checksums: false` in a "
                         "recipe, CacheDataset(..., checksums=False) / open_cache(..., checksums=False) in Python")
    if version == FORMAT_VERSION:
        sums = meta.get("checksums")
        if not (isinstance(sums, dict) and sums.get("algorithm") == CHECKSUM and isinstance(sums.get("index"), str)
                and _HEX64.fullmatch(sums["index"])):
            raise bad(f"'checksums' must be {{\"algorithm\": \"{CHECKSUM}\", \"index\": 16 hex digits}}")
    if meta.get("format") not in ("dense", "sparse"):
        raise bad(f"format {meta.get('format')!r} is not 'dense' or 'sparse'")
    parts, sources, classes = meta.get("parts"), meta.get("sources"), meta.get("classes")
    if not isinstance(parts, list) or not parts or not all(isinstance(p, str) and _PART_NAME.fullmatch(p) for p in parts):
        raise bad("'parts' must list part files named part-NNNNN-of-NNNNN.bin")  # never a path elsewhere
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        raise bad("'classes' must be a list of names")
    n = meta.get("num_samples")
    if not isinstance(n, int) or not isinstance(sources, list) or len(sources) != n:
        raise bad("'num_samples' must be an int matching the length of 'sources'")
    for i, src in enumerate(sources):
        ok = isinstance(src, dict) and isinstance(src.get("path"), str) and type(src.get("label")) is int and \
            -1 <= src["label"] < 2**31 and (("shard" not in src) or (isinstance(src["shard"], str) and all(
                type(src.get(k)) is int and src[k] >= 0 for k in ("offset", "size"))))
        if not ok:
            raise bad(f"sources[{i}] is not a {{path, label[, shard, offset, size]}} record")
    if not isinstance(meta.get("root"), str):
        raise bad("'root' must be a string")
    shards = meta.get("shards")
    if shards is not None and not (isinstance(shards, list) and all(
            isinstance(s, dict) and isinstance(s.get("path"), str) for s in shards)):
        raise bad("'shards' must be null or a list of {path, ...} records")
    pattern = meta.get("shard_pattern")
    if pattern is not None and not (isinstance(pattern, str) and pattern and not os.path.isabs(pattern)
                                    and ".." not in Path(pattern).parts):
        raise bad("'shard_pattern' must be null or a glob relative to the root")  # never a path elsewhere
    return meta


def load_array(f: Path, dtype: np.dtype, shape_tail: tuple[int, ...], n: int) -> np.ndarray:
    try:
        arr = np.load(f, mmap_mode="r", allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - a damaged header fails in many ways inside numpy's parser
        raise CacheError(f"{f}: not a readable .npy array ({type(exc).__name__}: {exc})") from None
    if arr.dtype != dtype or arr.shape != (n, *shape_tail):
        raise CacheError(f"{f}: expected {dtype} {(n, *shape_tail)}, found {arr.dtype} {arr.shape}")
    return arr


#: the colour spaces libjpeg reports for each component count the reader accepts
_COLOR_OF_NCOMP = {1: ("gray",), 3: ("YCbCr", "RGB"), 4: ("CMYK", "YCCK")}


def _color_fits(color: np.ndarray, ncomp: np.ndarray) -> np.ndarray:
    fits = np.zeros(len(color), bool)
    for n, names in _COLOR_OF_NCOMP.items():
        fits |= (ncomp == n) & np.isin(color, [COLOR_SPACES.index(c) for c in names])
    return fits


def validate_index(index: np.ndarray, fmt: str, part_sizes: Sequence[int]) -> tuple[int, str] | None:
    """The first record of ``index`` (a structured :data:`INDEX_DTYPE` array) that is not
    consistent with the format and the part files, as ``(record, reason)``; ``None`` when all are.

    Vectorised over the index (no data is read): status, layout fields in range, block counts
    equal to what height/width/sampling imply, record sizes equal to what the format implies,
    8-byte aligned offsets and ``offset <= size - nbytes`` in unsigned arithmetic (no wrap-around)."""
    rec = np.asarray(index)
    status = rec["status"]
    ok = status == OK
    ncomp = rec["ncomp"].astype(np.int64)
    comp = np.arange(4)[None, :]
    used = comp < ncomp[:, None]
    samp = rec["sampling"].astype(np.int64)
    blocks = rec["blocks"].astype(np.int64)
    h, w = rec["height"].astype(np.int64), rec["width"].astype(np.int64)
    hmax = np.where(used, samp[:, :, 0], 0).max(axis=1)
    vmax = np.where(used, samp[:, :, 1], 0).max(axis=1)
    mcu_r = -(-h // np.maximum(8 * vmax, 1))
    mcu_c = -(-w // np.maximum(8 * hmax, 1))
    want = np.stack([mcu_r[:, None] * samp[:, :, 1], mcu_c[:, None] * samp[:, :, 0]], axis=2)
    nblocks = np.where(used, blocks[:, :, 0] * blocks[:, :, 1], 0).sum(axis=1)
    nbytes, offset = rec["nbytes"].astype(np.uint64), rec["offset"].astype(np.uint64)
    nv, ne = rec["nvalues"].astype(np.int64), rec["nescapes"].astype(np.int64)
    sizes = np.asarray(list(part_sizes) + [0], np.uint64)
    part = rec["part"].astype(np.int64)
    in_part = part < len(part_sizes)
    size = sizes[np.where(in_part, part, len(part_sizes))]
    if fmt == "dense":
        size_ok = (nbytes == (128 * nblocks).astype(np.uint64)) & (nv == 0) & (ne == 0)
    else:
        _, _, record_size = record_layout(nblocks, nv, ne)
        size_ok = (nv <= 64 * nblocks) & (ne <= nv) & (nbytes == record_size.astype(np.uint64))
    checks = [
        (np.isin(status, (OK, BAD)), "status is neither ok nor bad"),
        (~ok | in_part, "part number beyond the part files"),
        (~ok | np.isin(ncomp, (1, 3, 4)), "component count not 1, 3 or 4"),
        (~ok | _color_fits(rec["color"], ncomp), "colour space does not fit the component count"),
        (~ok | (rec["orient"] <= 8), "EXIF orientation beyond 8"),
        (~ok | ((h >= 1) & (h <= _MAX_SIDE) & (w >= 1) & (w <= _MAX_SIDE)), "image size out of range"),
        (~ok | np.all(np.where(used[:, :, None], (samp >= 1) & (samp <= 4), samp == 0), axis=(1, 2)),
         "sampling factors out of range"),
        (~ok | np.all(np.where(used[:, :, None], blocks == want, blocks == 0), axis=(1, 2)),
         "block counts do not match height, width and sampling"),
        (~ok | size_ok, f"record size does not match its {fmt} layout"),
        (~ok | (offset % np.uint64(8) == 0), "offset not 8-byte aligned"),
        (~ok | ((nbytes <= size) & (offset <= size - np.minimum(nbytes, size))), "record extends past its part file"),
    ]
    first: tuple[int, str] | None = None
    for good, reason in checks:
        badi = np.flatnonzero(~good)
        if len(badi) and (first is None or badi[0] < first[0]):
            first = (int(badi[0]), reason)
    return first


def read_member(shard: str, offset: int, size: int) -> bytes:
    """One member of an uncompressed tar shard, by its data offset and size (as the index records)."""
    with open(shard, "rb") as f:
        return os.pread(f.fileno(), size, offset)
