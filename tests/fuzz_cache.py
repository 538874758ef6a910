#!/usr/bin/env python3
"""Mutation fuzzer for coefficient caches: a cache directory is untrusted input (copied between
machines, shared on network storage, half-written by a crashed job), so every file in it is
tampered with here — ``index.npy`` (field edits with negative, huge, misaligned and wrapping
values; byte flips; truncation), ``tables.npy`` (fewer rows, other dtypes, flips), ``meta.json``
(wrong types, hostile part names, missing keys, byte damage) and the data parts (flips,
truncation, zeroed ranges, appended bytes) — then the cache is opened and read through every
read path: the batch gather (dense copy / sparse expansion in C), the per-sample path and the
device-expansion batch. Half the reads check checksums (the index's at open, each record's as it is
read), half do not, so the C walks still meet the damaged records and index fields that the
checksums would have refused first.

Allowed outcomes: the reads succeed (a mutation can leave a valid cache with other values), or
``CacheError`` is raised (the device expansion, which cannot name a file, raises ValueError
"corrupt sparse records", counted as a refusal at read). A crash kills this process (the caller sees the signal), any other
exception is a finding: it is printed and the exit code is 1.

    python tests/fuzz_cache.py --cases 3000 --seed 1      # what `make test` runs
    python tests/fuzz_cache.py --cases 100000             # `make fuzz`, under ASan+UBSan
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

import guarded as G
from dctnet import _jpeg
from dctnet.data import CacheDataset, CenterCrop, RandomResizedCrop
from dctnet.data.cache import INDEX_DTYPE, CacheError, build_cache
from dctnet.batch import expand_torch
from dctnet.synthetic import synthetic_jpeg
from dctnet.transforms import PackedJpegBatch, expand_packed
from guarded import install as guard_c_inputs

#: the C gathers as the extension has them, before guarded.install wraps them
_UNGUARDED = {name: getattr(_jpeg, name) for name in ("gather_planes", "gather_packed", "copy_ranges",
                                                       "record_checksums")}


def guard_checked_calls() -> None:
    """guarded.install wraps the gathers with their unchecked signatures; the cache reads call them
    with the records' checksums too (``sums``; copy_ranges' ``tables, items, sums``). These wrappers
    take both forms through the same guards: every record a call hashes and walks is copied flush
    against a guard page (copy_ranges' ranges move with the record that holds them, so the C check
    that they lie inside it sees the same offsets), and so are the tables its hash seeds read."""
    orig = _UNGUARDED

    def gather_planes(parts, tables, items, fmt, outs, *sums):
        parts, items = G._rehome(parts, items)
        return orig["gather_planes"](parts, G.guarded(tables), items, fmt, outs, *sums)

    def gather_packed(parts, tables, items, fmt, out, offsets, *sums):
        parts, items = G._rehome(parts, items)
        return orig["gather_packed"](parts, G.guarded(tables), items, fmt, out, offsets, *sums)

    def copy_ranges(parts, ranges, out, *checks):
        if len(checks) != 3:
            parts, ranges = G._rehome(parts, ranges, ("part", "src", "size"))
            return orig["copy_ranges"](parts, ranges, out, *checks)
        tables, items, sums = checks
        parts = [memoryview(p).cast("B") for p in parts]
        items, ranges = np.array(items, copy=True), np.array(ranges, copy=True)
        per = len(ranges) // len(items) if len(items) and len(ranges) % len(items) == 0 else 0
        moved = list(parts)
        for j, row in enumerate(items.reshape(-1)):
            p, o, n = int(row["part"]), int(row["offset"]), int(row["nbytes"])
            if 0 <= p < len(parts) and 0 <= o and 0 <= n and o + n <= len(parts[p]):
                moved.append(G.guarded(parts[p][o:o + n]))
                for r in ranges.reshape(-1)[j * per:(j + 1) * per]:
                    if int(r["part"]) == p:
                        r["part"], r["src"] = len(moved) - 1, int(r["src"]) - o
                row["part"], row["offset"] = len(moved) - 1, 0
        return orig["copy_ranges"](moved, ranges, out, G.guarded(tables), items, sums)

    def record_checksums(parts, tables, items, out):
        parts, items = G._rehome(parts, items)
        return orig["record_checksums"](parts, G.guarded(tables), items, out)

    for name, fn in (("gather_planes", gather_planes), ("gather_packed", gather_packed), ("copy_ranges", copy_ranges),
                     ("record_checksums", record_checksums)):
        fn.__doc__ = orig[name].__doc__
        setattr(_jpeg, name, fn)


# every input the C code walks (JPEG buffers, sparse streams, each record and byte range a gather
# names) flush against an inaccessible page: a read past one is a segfault, not a read of its neighbour
guard_c_inputs()
guard_checked_calls()

# Values a tampered field takes: negative, zero, off by one, odd (misaligned), at the edges of
# the signed/unsigned ranges, and products that wrap.
SPECIALS = [-1, -2, -(1 << 31), -(1 << 20), 0, 1, 3, 7, 9, 255, 256, 4095, 65535, 65536, (1 << 31) - 1, 1 << 31,
            (1 << 32) - 1, 1 << 32, (1 << 62), (1 << 63) - 1, 1 << 63, (1 << 64) - 1, (1 << 61) + 8]


def make_source(folder: Path) -> None:
    """Two classes of small files in the layouts a cache meets, and one unreadable file."""
    kinds = [(40, 56, {}), (17, 33, {}), (64, 64, {"gray": True}), (48, 40, {"subsampling": "4:4:4"}),
             (30, 50, {"subsampling": "4:2:2"}), (56, 48, {"progressive": True}), (16, 16, {}), (72, 24, {})]
    for i, (h, w, kw) in enumerate(kinds):
        d = folder / f"c{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i}.jpg").write_bytes(synthetic_jpeg(100 + i, h, w, **kw))
    (folder / "c1" / "bad.jpg").write_bytes(b"\xff\xd8 not a jpeg")


def mutate_index(rng: np.random.Generator, raw: bytes) -> bytes:
    kind = int(rng.integers(4))
    if kind == 0:  # field edits on decoded records, re-saved as a valid .npy
        import io

        arr = np.load(io.BytesIO(raw), allow_pickle=False).copy()
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(len(arr)))
            field = str(rng.choice(list(INDEX_DTYPE.names)))
            view = arr[field][i]
            info = np.iinfo(arr.dtype[field].base)
            v = int(rng.choice(SPECIALS)) if rng.random() < 0.7 else int(rng.integers(-1000, 1000))
            v = int(np.array(v % (1 << 64), np.uint64).astype(arr.dtype[field].base)) if not (
                info.min <= v <= info.max) else v
            if np.ndim(view):
                flat = arr[field][i].reshape(-1)
                flat[int(rng.integers(flat.size))] = v
                arr[field][i] = flat.reshape(arr[field][i].shape)
            else:
                arr[field][i] = v
        buf = io.BytesIO()
        np.save(buf, arr)
        return buf.getvalue()
    return mutate_bytes(rng, raw, header=128 if kind == 1 else None)


def mutate_tables(rng: np.random.Generator, raw: bytes) -> bytes:
    import io

    kind = int(rng.integers(4))
    arr = np.load(io.BytesIO(raw), allow_pickle=False)
    buf = io.BytesIO()
    if kind == 0:  # fewer (or more) rows than the index
        np.save(buf, arr[: int(rng.integers(len(arr)))] if rng.random() < 0.7 else np.concatenate([arr, arr]))
    elif kind == 1:  # another dtype or shape
        variants = [arr.astype(np.int16), arr.astype(np.uint8), arr.reshape(len(arr), -1), arr.astype(">u2"), arr[:, :3]]
        np.save(buf, variants[int(rng.integers(len(variants)))])
    elif kind == 2:  # wild table values (zeros and 65535 included)
        arr = arr.copy()
        arr.reshape(-1)[rng.integers(arr.size, size=8)] = rng.choice([0, 1, 65535, 32768], 8)
        np.save(buf, arr)
    else:
        return mutate_bytes(rng, raw)
    return buf.getvalue()


def mutate_meta(rng: np.random.Generator, raw: bytes) -> bytes:
    if rng.random() < 0.3:
        return mutate_bytes(rng, raw)
    meta = json.loads(raw)
    hostile = [None, -1, 0, 1 << 70, "x", [], {}, [None], ["../../../etc/passwd"], ["/etc/passwd"],
               ["part-00000-of-00001.bin", "part-00000-of-00001.bin"], ["index.npy"], True, 1.5]
    kind = int(rng.integers(5))
    if kind == 0:
        key = str(rng.choice(list(meta)))
        meta[key] = hostile[int(rng.integers(len(hostile)))]
    elif kind == 1:
        meta.pop(str(rng.choice(list(meta))))
    elif kind == 2 and meta["sources"]:
        s = meta["sources"][int(rng.integers(len(meta["sources"])))]
        s[str(rng.choice(["path", "label", "size", "offset", "shard"]))] = hostile[int(rng.integers(len(hostile)))]
    elif kind == 3:
        meta["parts"] = hostile[int(rng.integers(len(hostile)))]
    else:
        meta["num_samples"] = int(rng.choice(SPECIALS))
    return json.dumps(meta).encode()


def mutate_part(rng: np.random.Generator, raw: bytes) -> bytes:
    buf = bytearray(raw)
    kind = int(rng.integers(4))
    if kind == 0 and buf:  # zero a range (masks/values/escapes of a sparse record, or planes)
        a = int(rng.integers(len(buf)))
        buf[a: a + int(rng.integers(1, 512))] = bytes(min(len(buf) - a, 512))
    elif kind == 1:
        buf += bytes(int(rng.integers(1, 4096)))
    else:
        return mutate_bytes(rng, raw)
    return bytes(buf)


def mutate_bytes(rng: np.random.Generator, raw: bytes, header: int | None = None) -> bytes:
    buf = bytearray(raw)
    if rng.random() < 0.3 and buf:
        return bytes(buf[: int(rng.integers(len(buf)))])  # truncation
    end = min(len(buf), header) if header else len(buf)
    for _ in range(int(rng.integers(1, 9))):
        if end:
            i = int(rng.integers(end))
            buf[i] = int(rng.integers(256)) if rng.random() < 0.3 else buf[i] ^ (1 << int(rng.integers(8)))
    return bytes(buf)


MUTATORS = {"index.npy": mutate_index, "tables.npy": mutate_tables, "meta.json": mutate_meta}


def read_everything(path: Path, fast_keys: list[int], rng: np.random.Generator) -> None:
    """Open and read through every read path; raises CacheError for a refused cache. Each path runs
    even when one before it refused the cache (the first refusal is raised at the end), so a
    corrupt record also reaches the batch paths after the per-sample one, each with its own checks."""
    crop = RandomResizedCrop() if rng.random() < 0.5 else CenterCrop(16)
    ds = CacheDataset(path, crop=crop, seed=int(rng.integers(1 << 30)), verify="none", on_error="skip",
                      checksums=bool(rng.random() < 0.5))
    n = len(ds)
    keys = [(0, i) for i in fast_keys if i < n]
    refusals: list[CacheError] = []

    def host_gather():                          # the C batch gather (dense copy / sparse expansion)
        ds.load_collated(keys)

    def per_sample():                           # the per-sample path (numpy views / C sparse_expand)
        for i in range(n):
            if not ds.cache.is_bad(i):
                ds.cache.coefficients(i)

    def packed_or_compressed():                 # packed windows (dense) / compressed records (sparse) in C
        ds.device_expand = True
        raw = ds.load_collated(keys)
        ds.device_expand = False
        if ds.cache.format == "dense" and isinstance(raw, PackedJpegBatch):
            expand_packed(raw)

    def device_expansion():                     # device expansion: host concatenation + torch
        sb = ds.cache.gather_compressed(keys, crop, 0, ds.targets)
        if sb is not None:
            counts = (sb.blocks[:, :, 0] * sb.blocks[:, :, 1]).reshape(-1)
            tables = sb.tables.reshape(-1, 64).repeat_interleave(counts, dim=0)
            try:
                expand_torch(sb.masks, sb.values, sb.escapes, tables)
            except ValueError as exc:  # the device step checks the streams; it cannot name the file
                if "corrupt sparse records" not in str(exc):
                    raise
                raise CacheError(f"device expansion: {exc}") from None

    stages = [host_gather, per_sample, packed_or_compressed] if keys else [per_sample]
    if keys and ds.cache.format == "sparse":
        stages.append(device_expansion)
    for stage in stages:
        try:
            stage()
        except CacheError as exc:
            refusals.append(exc)
    if refusals:
        raise refusals[0]


def run(cases: int, seed: int, workdir: Path) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    src = workdir / "src"
    make_source(src)
    caches = {}
    for fmt, workers in (("dense", 1), ("sparse", 2)):
        caches[fmt] = build_cache(src, workdir / fmt, format=fmt, workers=workers, progress=False, hash_sources=False,
                                 on_error="skip")
    originals = {fmt: {f.name: f.read_bytes() for f in sorted(p.iterdir())} for fmt, p in caches.items()}
    fast = {}
    for fmt, p in caches.items():  # the samples the C gather takes (4:2:0 YCbCr / gray), from the pristine cache
        idx = np.load(p / "index.npy")
        is_fast = ((idx["ncomp"] == 3) & np.all(idx["sampling"][:, :3].reshape(-1, 6) == [2, 2, 1, 1, 1, 1], axis=1)) | \
            (idx["ncomp"] == 1)
        fast[fmt] = [int(i) for i in np.flatnonzero(is_fast & (idx["status"] == 0))]
        read_everything(p, fast[fmt], rng)  # the pristine caches read cleanly
    scratch = {fmt: workdir / f"scratch-{fmt}" for fmt in caches}
    for fmt in caches:
        shutil.copytree(caches[fmt], scratch[fmt])
    counts = {"read": 0, "refused at open": 0, "refused at read": 0, "findings": 0}
    for case in range(cases):
        fmt = "dense" if case % 2 == 0 else "sparse"
        names = list(originals[fmt])
        name = str(rng.choice(names))
        raw = originals[fmt][name]
        mutator = MUTATORS.get(name, mutate_part)
        target = scratch[fmt] / name
        try:
            target.write_bytes(mutator(rng, raw))
            try:
                read_everything(scratch[fmt], fast[fmt], rng)
                counts["read"] += 1
            except CacheError as exc:
                counts["refused at open" if _at_open(exc) else "refused at read"] += 1
        except Exception:  # noqa: BLE001 - a finding: anything but CacheError
            counts["findings"] += 1
            print(f"FINDING case {case} ({fmt}, {name}):\n{traceback.format_exc()}", flush=True)
        finally:
            target.write_bytes(raw)
    return counts


def _at_open(exc: CacheError) -> bool:
    """Refused by the checks at open (index, tables, meta), not by the C/stream checks of a read."""
    return "does not match the index" not in str(exc) and "sparse streams" not in str(exc) and \
        "checksum mismatch" not in str(exc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dctnet-fuzz-cache-") as tmp:
        counts = run(args.cases, args.seed, Path(tmp))
    dt = time.perf_counter() - t0
    print(f"fuzz-cache: {args.cases} cases in {dt:.1f}s, seed {args.seed}: " +
          ", ".join(f"{k} {v}" for k, v in counts.items()))
    raise SystemExit(1 if counts["findings"] else 0)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
