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

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import tarfile
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dctnet import _jpeg
from dctnet.codec import DEFAULT_MAX_PIXELS, JpegError, libjpeg_version, read_coefficients, open_regular_file
from dctnet.data import sparse as S
from dctnet.data.crop import draw_boxes
from dctnet.data.loader import collate
from dctnet.data.plan import COLOR_SPACES, BatchPlan, batch_storage, gather_collated, gather_items, plan_batch
from dctnet.data.shards import IMAGE_EXTS, _key_of
from dctnet.batch import JpegBatch, PackedJpegBatch, SparseJpegBatch
from dctnet.data.dataset import CoefficientSample, CropDataset, ImageFolderDataset, sample_from_coefficients

__all__ = ["CacheDataset", "CacheError", "CachedCoefficients", "INDEX_DTYPE", "build_cache", "open_cache",
           "source_bytes"]

FORMAT_VERSION = 1
INDEX_DTYPE = np.dtype([
    ("part", "<u2"), ("status", "u1"), ("ncomp", "u1"), ("color", "u1"), ("orient", "u1"), ("_pad", "u2"),
    ("offset", "<u8"), ("nbytes", "<u8"), ("label", "<i4"), ("height", "<i4"), ("width", "<i4"),
    ("sampling", "u1", (4, 2)), ("blocks", "<i4", (4, 2)), ("nvalues", "<u4"), ("nescapes", "<u4"),
])
OK, BAD = 0, 1
CHUNK = 64  # samples between progress records


class CacheError(ValueError):
    """A cache that must not be used as it is: incomplete, stale, or built with other parameters."""


def _file_hash(path: str) -> str | None:
    """blake2b of a regular file; ``None`` for anything else (never blocks on a FIFO)."""
    h = hashlib.blake2b(digest_size=16)
    try:
        with open_regular_file(path) as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def _part_name(rank: int, world: int) -> str:
    return f"part-{rank:05d}-of-{world:05d}"


def _dist_env() -> tuple[int, int]:
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


# ------------------------------------------------------------------------------------------ build

def _encode_sample(coeffs, fmt: str) -> tuple[list[bytes], np.ndarray, int, int]:
    """(chunks to write, tables (4, 64), nvalues, nescapes)."""
    tables = np.zeros((4, 64), np.uint16)
    if fmt == "dense":
        tables[: coeffs.num_components] = coeffs.quant_tables.reshape(-1, 64)
        return [p.tobytes() for p in coeffs.planes], tables, 0, 0
    rec = S.encode(coeffs.planes, coeffs.quant_tables)
    tables[: coeffs.num_components] = rec.tables
    pad = b"\0" * (-(rec.masks.nbytes + rec.values.nbytes) % 2)
    return [rec.masks.tobytes(), rec.values.tobytes(), pad, rec.escapes.tobytes()], tables, len(rec.values), len(
        rec.escapes)


def _build_range(src: list[tuple[str, int]], out: Path, fmt: str, rank: int, world: int, resume: bool,
                 on_error: str, max_pixels: int | None, progress: bool) -> None:
    """Decode samples [lo, hi) of ``src`` into this rank's part files (append, resumable)."""
    n = len(src)
    lo, hi = rank * n // world, (rank + 1) * n // world
    name = _part_name(rank, world)
    data_path, idx_path, tab_path, prog_path = (out / f"{name}.bin", out / f"{name}.idx", out / f"{name}.tab",
                                                out / f"{name}.progress.json")
    done, offset = 0, 0
    if resume and prog_path.exists():
        state = json.loads(prog_path.read_text())
        done, offset = state["done"], state["offset"]
    if done == hi - lo and (out / f"{name}.done").exists():
        return
    mode = "r+b" if resume and data_path.exists() else "wb"
    with open(data_path, mode) as fd, open(idx_path, mode) as fi, open(tab_path, mode) as ft:
        for f, size in ((fd, offset), (fi, done * INDEX_DTYPE.itemsize), (ft, done * 4 * 64 * 2)):
            f.truncate(size)
            f.seek(size)
        t0 = time.time()
        rec = np.zeros(1, INDEX_DTYPE)
        for i in range(lo + done, hi):
            path, label = src[i][0], src[i][1]
            name_i = f"{path}:{src[i][4]}" if len(src[i]) > 2 else path
            rec[:] = 0
            rec["part"], rec["label"], rec["offset"] = rank, label, offset
            try:
                if len(src[i]) > 2:  # a tar-shard member: (shard, label, offset, size, key)
                    coeffs = read_coefficients(_read_member(path, src[i][2], src[i][3]), max_pixels=max_pixels,
                                               name=name_i)
                else:
                    coeffs = read_coefficients(path, max_pixels=max_pixels)
            except (JpegError, OSError) as exc:
                if on_error == "raise":
                    raise
                rec["status"] = BAD
                with (out / f"{name}.bad.jsonl").open("a") as bad:
                    bad.write(json.dumps({"index": i, "path": name_i, "reason": str(exc)}) + "\n")
                tables = np.zeros((4, 64), np.uint16)
            else:
                chunks, tables, nv, ne = _encode_sample(coeffs, fmt)
                nbytes = 0
                for ch in chunks:
                    fd.write(ch)
                    nbytes += len(ch)
                pad = -nbytes % 8
                fd.write(b"\0" * pad)
                rec["nbytes"], rec["nvalues"], rec["nescapes"] = nbytes, nv, ne
                rec["ncomp"], rec["color"] = coeffs.num_components, COLOR_SPACES.index(coeffs.color_space)
                rec["orient"] = coeffs.exif_orientation or 0
                rec["height"], rec["width"] = coeffs.height, coeffs.width
                for c, ((h, v), blk) in enumerate(zip(coeffs.sampling, coeffs.blocks)):
                    rec["sampling"][0, c] = (h, v)
                    rec["blocks"][0, c] = blk
                offset += nbytes + pad
            fi.write(rec.tobytes())
            ft.write(tables.tobytes())
            done += 1
            if done % CHUNK == 0 or i == hi - 1:
                for f in (fd, fi, ft):
                    f.flush()
                    os.fsync(f.fileno())
                tmp = prog_path.with_suffix(".tmp")
                tmp.write_text(json.dumps({"done": done, "offset": offset}))
                os.replace(tmp, prog_path)  # progress never claims more than is on disk
                if progress and rank == 0:
                    rate = (i + 1 - lo) / max(time.time() - t0, 1e-9)
                    print(f"\r  rank 0: {done}/{hi - lo} images, {rate:.0f}/s", end="", file=sys.stderr, flush=True)
    (out / f"{name}.done").write_text("")
    if progress and rank == 0:
        print(file=sys.stderr)


def _read_member(shard: str, offset: int, size: int) -> bytes:
    with open(shard, "rb") as f:
        return os.pread(f.fileno(), size, offset)


def _shard_list(src: Any) -> list[str] | None:
    """The tar shards ``src`` names (a list, a glob, one .tar, or a folder of .tar files), or None."""
    if isinstance(src, (list, tuple)):
        return [str(s) for s in src]
    text = str(src)
    if any(ch in text for ch in "*?["):
        return sorted(glob.glob(text))
    p = Path(text)
    if p.is_file() and p.suffix == ".tar":
        return [text]
    if p.is_dir() and not any(d.is_dir() for d in p.iterdir()):
        tars = sorted(str(t) for t in p.glob("*.tar"))
        return tars or None
    return None


def _shard_pattern(src: Any, root: str) -> str | None:
    """The glob (relative to ``root``) that names a shard cache's sources when it is checked for
    new shards: the pattern it was built from, ``*.tar`` for a folder of shards, ``None`` for an
    explicit list or file (only those shards belong to it)."""
    if isinstance(src, (list, tuple, ImageFolderDataset)):
        return None
    text = str(src)
    if any(ch in text for ch in "*?["):
        return os.path.relpath(os.path.abspath(text), root)
    return "*.tar" if Path(text).is_dir() else None


def _scan_shards(shards: list[str]) -> list[tuple[str, int, int, int, str]]:
    """(shard, label, data offset, size, key) of every image member, WebDataset grouping by key
    (see :mod:`dctnet.data.shards`); labels from the ``.cls`` member (−1 without one)."""
    items = []
    for shard in shards:
        try:
            tar = tarfile.open(shard, "r:")  # uncompressed: members are read in place by offset
        except tarfile.ReadError as exc:
            raise CacheError(f"{shard}: not an uncompressed tar ({exc}); compressed shards cannot be cached in place")
        with tar:
            groups: dict[str, dict[str, Any]] = {}
            for m in tar.getmembers():
                if not m.isfile():
                    continue
                key, ext = _key_of(m.name)
                g = groups.setdefault(key, {})
                if ext in IMAGE_EXTS:
                    g["image"] = (m.offset_data, m.size)
                elif ext == "cls":
                    g["label"] = int(tar.extractfile(m).read())  # type: ignore[union-attr]
            for key, g in groups.items():
                if "image" in g:
                    items.append((shard, g.get("label", -1), g["image"][0], g["image"][1], key))
    if not items:
        raise CacheError(f"no JPEG members in {len(shards)} shard(s)")
    return items


def _sources(src: Any) -> tuple[list[tuple], list[str], str, list[str] | None]:
    """(samples, classes, root, shards): samples are (path, label) for folders and
    (shard, label, offset, size, key) for tar shards."""
    if isinstance(src, ImageFolderDataset):
        return src.samples, src.classes, str(src.root), None
    shards = _shard_list(src)
    if shards is None:
        ds = ImageFolderDataset(src)
        return ds.samples, ds.classes, str(ds.root), None
    if not shards:
        raise CacheError(f"no tar shards match {src!r}")
    items = _scan_shards(shards)
    root = os.path.commonpath([os.path.dirname(os.path.abspath(s)) for s in shards])
    classes = [str(c) for c in sorted({label for _, label, *_ in items})]
    return items, classes, root, shards


def build_cache(src: str | os.PathLike | ImageFolderDataset, out: str | os.PathLike, *, format: str = "sparse",
                workers: int = 1, resume: bool = False, on_error: str = "raise",
                max_pixels: int | None = DEFAULT_MAX_PIXELS, progress: bool = True,
                hash_sources: bool = True) -> Path:
    """Build a cache of an image folder (``root/<class>/<image>``) or of uncompressed WebDataset tar
    shards (a list, a glob, or a folder of ``.tar`` files; ``KEY.jpg`` + ``KEY.cls`` members). See
    the module docstring.

    Under ``torchrun`` (``RANK``/``WORLD_SIZE`` set, ``torch.distributed`` initialised or
    initialisable with gloo) every rank builds its range and rank 0 finalises; otherwise
    ``workers`` local processes split the work. Returns the cache path (on every rank)."""
    if format not in ("dense", "sparse"):
        raise ValueError(f"format must be 'dense' or 'sparse', not {format!r}")
    out = Path(out)
    partial = out.with_name(out.name + ".partial")
    samples, classes, root, shards = _sources(src)
    rank, world = _dist_env()
    distributed = world > 1
    if distributed and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("gloo")
    if out.exists():
        raise CacheError(f"{out} exists; remove it to rebuild")
    if rank == 0:
        if partial.exists() and not resume:
            shutil.rmtree(partial)
        partial.mkdir(parents=True, exist_ok=True)
        params = {"format": format, "world": world if distributed else workers, "n": len(samples), "root": root}
        pfile = partial / "build.json"
        if resume and pfile.exists() and json.loads(pfile.read_text()) != params:
            raise CacheError(f"cannot resume {partial}: it was started with {pfile.read_text()}, now {params}")
        pfile.write_text(json.dumps(params))
    if distributed:
        torch.distributed.barrier()
        _build_range(samples, partial, format, rank, world, resume, on_error, max_pixels, progress)
        torch.distributed.barrier()
        parts = world
    elif workers > 1:
        import multiprocessing as mp

        # fork where the platform has it (as torch's DataLoader does): spawn would re-run the
        # caller's unguarded __main__ in every worker
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        procs = [ctx.Process(target=_build_range, args=(samples, partial, format, r, workers, resume, on_error,
                                                         max_pixels, progress and r == 0)) for r in range(workers)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode != 0 for p in procs):
            raise RuntimeError(f"a build worker failed; {partial} is left for --resume")
        parts = workers
    else:
        _build_range(samples, partial, format, 0, 1, resume, on_error, max_pixels, progress)
        parts = 1
    if rank == 0:
        _finalize(partial, out, samples, classes, root, format, parts, hash_sources, shards,
                  _shard_pattern(src, root) if shards is not None else None)
    if distributed:
        torch.distributed.barrier()
    return out


def _finalize(partial: Path, out: Path, samples: list[tuple], classes: list[str], root: str, fmt: str,
              parts: int, hash_sources: bool, shards: list[str] | None = None, shard_pattern: str | None = None) -> None:
    index = np.concatenate([np.fromfile(partial / f"{_part_name(r, parts)}.idx", INDEX_DTYPE) for r in range(parts)])
    tables = np.concatenate([np.fromfile(partial / f"{_part_name(r, parts)}.tab", np.uint16) for r in range(parts)])
    if len(index) != len(samples):
        raise CacheError(f"build incomplete: {len(index)} of {len(samples)} samples in {partial}")
    np.save(partial / "index.npy", index)
    np.save(partial / "tables.npy", tables.reshape(-1, 4, 64))
    bad = []
    for r in range(parts):
        f = partial / f"{_part_name(r, parts)}.bad.jsonl"
        if f.exists():
            bad += [json.loads(line) for line in f.read_text().splitlines()]
    sources, shard_meta = [], None
    if shards is None:
        for path, label in samples:
            st = os.stat(path)
            sources.append({"path": os.path.relpath(path, root), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                            "label": label, "hash": _file_hash(path) if hash_sources else None})
    else:
        shard_meta = []
        for shard in shards:
            st = os.stat(shard)
            shard_meta.append({"path": os.path.relpath(shard, root), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                               "hash": _file_hash(shard) if hash_sources else None})
        for shard, label, offset, size, key in samples:
            sources.append({"path": f"{os.path.relpath(shard, root)}:{key}", "shard": os.path.relpath(shard, root),
                            "offset": offset, "size": size, "label": label})
    src_bytes = sum(s["size"] for s in sources)
    data_bytes = sum((partial / f"{_part_name(r, parts)}.bin").stat().st_size for r in range(parts))
    import dctnet

    meta = {"format_version": FORMAT_VERSION, "format": fmt, "dctnet": dctnet.__version__, "libjpeg": libjpeg_version(),
            "root": root, "classes": classes, "parts": [f"{_part_name(r, parts)}.bin" for r in range(parts)],
            "num_samples": len(samples), "bad": sorted(bad, key=lambda b: b["index"]), "sources": sources,
            "source_bytes": src_bytes, "data_bytes": data_bytes, "created": time.time(), "shards": shard_meta,
            "shard_pattern": shard_pattern}
    for r in range(parts):  # build bookkeeping is not part of the cache
        for suffix in (".idx", ".tab", ".progress.json", ".done", ".bad.jsonl"):
            (partial / f"{_part_name(r, parts)}{suffix}").unlink(missing_ok=True)
    (partial / "build.json").unlink(missing_ok=True)
    tmp = partial / "meta.json.tmp"
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, partial / "meta.json")
    os.replace(partial, out)  # the cache appears whole or not at all
    print(f"cache {out}: {len(samples)} samples ({len(bad)} bad), {fmt}, {data_bytes / 2**20:.1f} MiB "
          f"= {data_bytes / max(src_bytes, 1):.2f}x the {src_bytes / 2**20:.1f} MiB of JPEG", file=sys.stderr)


# ------------------------------------------------------------------------------------------ read

@dataclass
class CachedCoefficients:
    """What a cache hands back per image: the parts of :class:`dctnet.JpegCoefficients` the data
    pipeline uses (planes bit-identical to a direct read)."""

    planes: tuple[np.ndarray, ...]
    sampling: tuple[tuple[int, int], ...]
    color_space: str
    height: int
    width: int
    exif_orientation: int | None
    quant_tables: np.ndarray

    @property
    def num_components(self) -> int:
        return len(self.planes)

    @property
    def subsampling(self) -> str:
        return "gray" if len(self.planes) == 1 else ",".join(f"{h}x{v}" for h, v in self.sampling)

    def to_torch(self) -> tuple[torch.Tensor, ...]:
        return tuple(torch.from_numpy(p) for p in self.planes)


_PART_NAME = re.compile(r"part-\d{5}-of-\d{5}\.bin")
_MAX_SIDE = 65535  # JPEG's limit on either image dimension


def _load_meta(path: Path) -> dict[str, Any]:
    """``meta.json``, checked for the fields and types the reader relies on."""
    f = path / "meta.json"
    try:
        meta = json.loads(f.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CacheError(f"{f}: not readable as JSON ({exc})") from None

    def bad(what: str) -> CacheError:
        return CacheError(f"{f}: {what}")

    if not isinstance(meta, dict):
        raise bad("not a JSON object")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CacheError(f"{path}: cache format version {meta.get('format_version')}, this dctnet reads {FORMAT_VERSION}")
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


def _load_array(f: Path, dtype: np.dtype, shape_tail: tuple[int, ...], n: int) -> np.ndarray:
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
    n = len(rec)
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
        vbytes = np.zeros(n, np.int64)
        size_ok = (nbytes == (128 * nblocks).astype(np.uint64)) & (nv == 0) & (ne == 0)
    else:
        vbytes = 8 * nblocks + nv
        size_ok = (nv <= 64 * nblocks) & (ne <= nv) & (nbytes == (vbytes + vbytes % 2 + 2 * ne).astype(np.uint64))
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


class Cache:
    """An opened, validated cache (see :func:`open_cache`).

    The part files are memory-mapped when the cache is opened (and again when it is unpickled in
    another process), never lazily: a mapping created on first use could be created by two loader
    threads at once, one replacing — and unmapping — the other's while its C gather reads it."""

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        self.path, self.meta = path, meta
        self.format = meta["format"]
        n = meta["num_samples"]
        self.index = _load_array(path / "index.npy", INDEX_DTYPE, (), n)
        self.tables = _load_array(path / "tables.npy", np.dtype("<u2"), (4, 64), n)
        self._map_parts()
        found = validate_index(self.index, self.format, [len(p) for p in self._parts])
        if found is not None:
            i, reason = found
            raise CacheError(f"{path / 'index.npy'}: record {i} ({self.meta['sources'][i]['path']}): {reason} "
                             "(corrupt or tampered cache; rebuild it)")

    def _map_parts(self) -> None:
        parts = []
        for name in self.meta["parts"]:
            f = self.path / name
            try:
                size = f.stat().st_size
                # a plain ndarray over the map (it keeps the map alive): slicing a np.memmap costs
                # ~5 µs in its subclass hooks, once per record of a batch
                parts.append(np.asarray(np.memmap(f, np.uint8, mode="r")) if size else np.zeros(0, np.uint8))
            except (OSError, ValueError) as exc:
                raise CacheError(f"{f}: cannot be mapped ({exc})") from None
        self._parts: tuple[np.ndarray, ...] = tuple(parts)

    def __len__(self) -> int:
        return len(self.index)

    def _data(self, part: int) -> np.ndarray:
        return self._parts[part]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_parts"] = None  # mappings belong to one process: remapped by __setstate__
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._map_parts()

    def _record_error(self, i: int, what: str) -> CacheError:
        return CacheError(f"{self.path}: record {i} ({self.meta['sources'][i]['path']}): {what} (corrupt cache; "
                          "rebuild it)")

    def _plan(self, keys: Sequence[tuple[int, int]], crop: Any, seed: int, grid: tuple[int, int] | None,
              exif: str = "ignore") -> tuple[np.ndarray, np.ndarray, BatchPlan] | None:
        """``(idx, records, plan)`` for any layout (:func:`dctnet.data.plan.plan_batch`); ``None``
        when a sample is bad or needs an EXIF rotation (the per-sample path handles those)."""
        if not keys:
            return None
        epochs = np.array([e for e, _ in keys], np.int64)
        idx = np.array([i for _, i in keys], np.int64)
        rec = np.asarray(self.index[idx])  # a plain array: field access on a memmap view is slow
        if (rec["status"] != OK).any() or (exif == "apply" and (rec["orient"] > 1).any()):
            return None
        h, w = rec["height"].astype(np.int64), rec["width"].astype(np.int64)
        boxes = draw_boxes(crop, h, w, seed, epochs, idx)
        return idx, rec, plan_batch(rec["color"], rec["ncomp"], rec["sampling"], h, w, boxes, grid)

    def gather(self, keys: Sequence[tuple[int, int]], crop: Any, seed: int, targets: Sequence[int], *,
               grid: tuple[int, int] | None = None, pin_memory: bool = False, exif: str = "ignore") -> JpegBatch | None:
        """Fast path of :meth:`CacheDataset.load_collated`, every layout: one C call per layout
        group copies (dense) or expands (sparse) each plane's window straight into the batch.
        ``None`` when the batch needs the per-sample path (bad samples, EXIF rotations)."""
        planned = self._plan(keys, crop, seed, grid, exif)
        if planned is None:
            return None
        idx, rec, plan = planned
        items = gather_items(rec["part"], rec["ncomp"], rec["blocks"].astype(np.int64),
                             offset=rec["offset"].astype(np.int64),  # validated < 2^63 when the cache was opened
                             nbytes=rec["nbytes"].astype(np.int64), table=idx, nvalues=rec["nvalues"],
                             nescapes=rec["nescapes"])
        try:  # the C side checks every item against the part files, tables and outputs it is handed
            fmt = 1 if self.format == "sparse" else 0
            return gather_collated(plan, lambda _, it, outs: _jpeg.gather_planes(self._parts, self.tables, it, fmt, outs),
                                   items, np.asarray(targets, np.int64)[idx], idx, pin_memory=pin_memory)
        except ValueError as exc:  # args: (message, batch position) for a bad record
            j = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], int) else 0
            raise self._record_error(int(idx[j]), "its data does not match the index") from None

    def gather_packed(self, keys: Sequence[tuple[int, int]], crop: Any, seed: int, targets: Sequence[int], *,
                      grid: tuple[int, int] | None = None, pin_memory: bool = False,
                      exif: str = "ignore") -> PackedJpegBatch | None:
        """:meth:`gather` without the padding, for padding on the device
        (:func:`dctnet.transforms.expand_packed`): one C call per layout group copies (dense) or
        expands (sparse) each plane's window into one packed block array. ``None`` when the batch
        needs the per-sample path."""
        planned = self._plan(keys, crop, seed, grid, exif)
        if planned is None:
            return None
        idx, rec, plan = planned
        n = len(idx)
        items = gather_items(rec["part"], rec["ncomp"], rec["blocks"].astype(np.int64),
                             offset=rec["offset"].astype(np.int64), nbytes=rec["nbytes"].astype(np.int64), table=idx,
                             nvalues=rec["nvalues"], nescapes=rec["nescapes"])
        items[:, 15:31] = plan.pwin.reshape(n, 16)
        sizes = np.stack([plan.pwin[:, 1] - plan.pwin[:, 0], plan.pwin[:, 3] - plan.pwin[:, 2]], axis=2)  # (B, 4, 2)
        sizes[np.arange(4)[None, :] >= rec["ncomp"].astype(np.int64)[:, None]] = 0
        counts = (sizes[:, :, 0] * sizes[:, :, 1]).reshape(-1)
        offsets = (np.cumsum(counts) - counts).reshape(n, 4)
        blocks = batch_storage((int(counts.sum()), 64), pin_memory)
        fmt = 1 if self.format == "sparse" else 0
        for (_, sampling), rows in zip(plan.layouts, plan.rows):
            try:
                _jpeg.gather_packed(self._parts, self.tables, np.ascontiguousarray(items[rows]), fmt, blocks.numpy(),
                                    np.ascontiguousarray(offsets[rows, :len(sampling)]))
            except ValueError as exc:
                j = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], int) else 0
                raise self._record_error(int(idx[rows[j]]), "its data does not match the index") from None
        t = torch.from_numpy
        meta = t(np.concatenate([offsets, sizes.reshape(n, 8), plan.valid, plan.rel,
                                 np.asarray(targets, np.int64)[idx][:, None], idx[:, None]], axis=1))
        rows_t = tuple(t(r) for r in plan.rows)
        if pin_memory:
            meta, rows_t = meta.pin_memory(), tuple(r.pin_memory() for r in rows_t)
        return PackedJpegBatch(blocks=blocks, offsets=meta[:, 0:4], sizes=meta[:, 4:12].view(n, 4, 2),
                               valid=meta[:, 12:14], boxes=meta[:, 14:18], labels=meta[:, 18], index=meta[:, 19],
                               layouts=tuple((cs, sampling, g) for (cs, sampling), g in zip(plan.layouts, plan.grids)),
                               group_rows=rows_t)

    def gather_compressed(self, keys: Sequence[tuple[int, int]], crop: Any, seed: int, targets: Sequence[int], *,
                          grid: tuple[int, int] | None = None, pin_memory: bool = False,
                          exif: str = "ignore") -> SparseJpegBatch | None:
        """The batch in compressed form for device expansion (:func:`dctnet.transforms.expand_sparse`),
        every layout: the host only concatenates records (their extents were checked when the
        cache was opened; their streams are checked by the expansion, which raises ``ValueError``
        on a mismatch). Sparse caches only; ``None`` when the batch needs the per-sample path."""
        planned = self._plan(keys, crop, seed, grid, exif) if self.format == "sparse" else None
        if planned is None:
            return None
        idx, rec, plan = planned
        blocks = rec["blocks"].astype(np.int64)                                    # (B, 4, 2)
        nb = (blocks[:, :, 0] * blocks[:, :, 1]).sum(axis=1)
        nv, ne = rec["nvalues"].astype(np.int64), rec["nescapes"].astype(np.int64)
        # one buffer: every record's masks, then values, then (2-aligned) escapes; one C call
        # copies the 3 ranges of each record (a Python loop over records cost ~20 µs a sample)
        start, part = rec["offset"].astype(np.int64), rec["part"].astype(np.int64)
        vb = 8 * nb + nv
        m_end = 8 * int(nb.sum())
        v_end = m_end + int(nv.sum())
        e_start = v_end + v_end % 2
        total = e_start + 2 * int(ne.sum())
        ranges = np.empty((len(idx), 3, 4), np.int64)
        ranges[:, :, 0] = part[:, None]
        ranges[:, 0, 1], ranges[:, 0, 2] = start, 8 * nb
        ranges[:, 1, 1], ranges[:, 1, 2] = start + 8 * nb, nv
        ranges[:, 2, 1], ranges[:, 2, 2] = start + vb + vb % 2, 2 * ne
        for k, base in enumerate((0, m_end, e_start)):
            ranges[:, k, 3] = base + np.cumsum(ranges[:, k, 2]) - ranges[:, k, 2]
        buf = batch_storage((-(-total // 2),), pin_memory).view(torch.uint8)
        _jpeg.copy_ranges(self._parts, ranges.reshape(-1, 4), buf.numpy())
        masks, values, escapes = buf[:m_end].view(torch.int64), buf[m_end:v_end].view(torch.int8), \
            buf[e_start:total].view(torch.int16)
        counts = blocks[:, :, 0] * blocks[:, :, 1]
        first = np.concatenate([[0], np.cumsum(nb)[:-1]])
        offsets = first[:, None] + np.concatenate([np.zeros((len(idx), 1), np.int64), np.cumsum(counts, axis=1)[:, :-1]],
                                                  axis=1)
        t = torch.from_numpy
        batch = SparseJpegBatch(
            masks=masks, values=values, escapes=escapes,
            tables=t(np.asarray(self.tables[idx], dtype=np.int32)), blocks=t(blocks), offsets=t(offsets),
            windows=t(np.ascontiguousarray(plan.pwin)), valid=t(plan.valid), boxes=t(plan.rel),
            labels=t(np.asarray(targets, np.int64)[idx]), index=t(idx),
            layouts=tuple((cs, sampling, grid_) for (cs, sampling), grid_ in zip(plan.layouts, plan.grids)),
            group_rows=tuple(t(r) for r in plan.rows))
        return batch.pin_memory() if pin_memory else batch

    def is_bad(self, i: int) -> bool:
        return int(self.index[i]["status"]) == BAD

    def coefficients(self, i: int) -> CachedCoefficients:
        """Sample ``i``'s planes (views of the mmap for dense; expanded in C for sparse)."""
        r = self.index[i]
        if int(r["status"]) == BAD:
            raise JpegError("unreadable when the cache was built", self.meta["sources"][i]["path"])
        nc = int(r["ncomp"])
        blocks = [tuple(int(v) for v in r["blocks"][c]) for c in range(nc)]
        counts = [h * w for h, w in blocks]
        raw = self._data(int(r["part"]))[int(r["offset"]): int(r["offset"]) + int(r["nbytes"])]
        if self.format == "dense":
            flat = raw.view(np.int16).reshape(-1, 64)
        else:
            nb = sum(counts)
            nv, ne = int(r["nvalues"]), int(r["nescapes"])
            masks = raw[: 8 * nb].view(np.uint64)
            values = raw[8 * nb: 8 * nb + nv].view(np.int8)
            start = 8 * nb + nv + (8 * nb + nv) % 2
            escapes = raw[start: start + 2 * ne].view(np.int16)
            rec = S.SparseRecord(masks, values, escapes, np.ascontiguousarray(self.tables[i, :nc]))
            try:
                flat = S.expand(rec, counts)
            except ValueError:
                raise self._record_error(i, "its sparse streams do not match its masks") from None
        planes, start = [], 0
        for (h, w), n in zip(blocks, counts):
            planes.append(flat[start:start + n].reshape(h, w, 64))
            start += n
        return CachedCoefficients(
            planes=tuple(planes), sampling=tuple(tuple(int(v) for v in r["sampling"][c]) for c in range(nc)),
            color_space=COLOR_SPACES[int(r["color"])], height=int(r["height"]), width=int(r["width"]),
            exif_orientation=int(r["orient"]) or None, quant_tables=np.asarray(self.tables[i, :nc]).reshape(nc, 8, 8))


def source_bytes(meta: dict[str, Any], root: str | os.PathLike, i: int) -> bytes | str:
    """What sample ``i`` was built from: a file path, or a tar member's bytes."""
    s = meta["sources"][i]
    if "offset" in s:
        return _read_member(os.path.join(root, s["shard"]), s["offset"], s["size"])
    return os.path.join(root, s["path"])


def open_cache(path: str | os.PathLike, *, source: str | os.PathLike | None = None, verify: str = "stat",
               format: str | None = None) -> Cache:
    """Open and validate a cache.

    Args:
        path: the cache directory.
        source: the image folder it must match (default: the one recorded at build time).
        verify: ``"stat"`` (sizes and mtimes), ``"hash"`` (also content hashes) or ``"none"``.
        format: require this format.

    Raises:
        CacheError: incomplete build, changed/missing/new sources or other parameters — the
            message says which (first few paths and counts)."""
    path = Path(path)
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        hint = " (an unfinished build: rerun it with resume=True / --resume)" if path.name.endswith(".partial") or \
            path.with_name(path.name + ".partial").exists() else ""
        raise CacheError(f"{path} is not a finished dctnet cache: no meta.json{hint}")
    meta = _load_meta(path)
    if format is not None and meta["format"] != format:
        raise CacheError(f"{path}: built as {meta['format']!r}, {format!r} requested")
    root = Path(source) if source is not None else Path(meta["root"])
    if verify != "none":
        changed, missing = [], []
        files = meta.get("shards") or meta["sources"]  # tar-shard caches check the shard files
        for s in files:
            p = root / s["path"]
            try:
                st = p.stat()
            except FileNotFoundError:
                missing.append(s["path"])
                continue
            if st.st_size != s["size"] or st.st_mtime_ns != s["mtime_ns"]:
                if verify == "hash" and s["hash"] and st.st_size == s["size"] and _file_hash(str(p)) == s["hash"]:
                    continue  # touched but identical
                what = f"size {s['size']} -> {st.st_size}" if st.st_size != s["size"] else "modified time"
                changed.append(f"{s['path']} ({what})")
            elif verify == "hash" and s["hash"] and _file_hash(str(p)) != s["hash"]:
                changed.append(f"{s['path']} (content)")
        known = {s["path"] for s in files}
        if not root.is_dir():
            current: set[str] = set()
        elif meta.get("shards"):
            # the shards the cache was built from: its glob (train-*.tar leaves val-*.tar out), a
            # folder's *.tar (caches built before the pattern was recorded), or only those listed
            pattern = meta["shard_pattern"] if "shard_pattern" in meta else "*.tar"
            current = {os.path.relpath(p, root) for p in glob.glob(str(root / pattern))} if pattern else set()
        else:
            current = {os.path.relpath(p, root) for p, _ in ImageFolderDataset(root).samples}
        added = sorted(current - known)
        if changed or missing or added:
            parts = []
            for label, items in (("changed", changed), ("missing", missing), ("new", added)):
                if items:
                    parts.append(f"{len(items)} {label} (e.g. {', '.join(items[:3])})")
            hint = "" if verify == "hash" or not any(c.endswith("(modified time)") for c in changed) else \
                " (a file whose only change is its modified time is accepted by open_cache(..., verify='hash')," \
                " and by `dctnet cache verify`, when its content hash is unchanged)"
            raise CacheError(f"{path} is stale against {root}: " + "; ".join(parts) + ". Rebuild it" + hint + ".")
    return Cache(path, meta)


class CacheDataset(CropDataset):
    """A cache as a dataset for the pipeline's loaders: same samples, crops and randomness as
    :class:`ImageFolderDataset` over the source folder (``(seed, epoch, index)`` draws).

    Indexing takes ``index`` or ``(epoch, index)``; bad samples follow ``on_error``.
    ``device_expand=True`` (for training on a GPU): batches leave the host packed or compressed and
    are padded / expanded on the device (see :meth:`load_collated`); the host then moves about
    half the bytes (dense) or only the compressed records (sparse)."""

    cheap_batches = True  # a batch is one C gather (~1 ms): loaders keep one ahead per thread

    def __init__(self, path: str | os.PathLike, *, crop: Callable | None = None, seed: int = 0, on_error: str = "raise",
                 exif: str = "ignore", verify: str = "stat", source: str | os.PathLike | None = None,
                 device_expand: bool = False) -> None:
        super().__init__(crop, seed, on_error, exif)
        self.cache = open_cache(path, source=source, verify=verify)
        self.device_expand = bool(device_expand)
        meta = self.cache.meta
        self.classes = meta["classes"]
        self.targets = np.array([s["label"] for s in meta["sources"]], np.int64)

    def __len__(self) -> int:
        return len(self.cache)

    def load(self, index: int, epoch: int) -> CoefficientSample | tuple[int, str, str]:
        try:
            coeffs = self.cache.coefficients(index)
        except JpegError as exc:
            if self.on_error == "raise":
                raise
            return index, str(exc.source), exc.reason
        return sample_from_coefficients(coeffs, self.crop, int(self.targets[index]), index, seed=self.seed, epoch=epoch,
                                        exif=self.exif)

    def load_batch(self, keys: Sequence[tuple[int, int]]) -> list:
        return [self.load(i, e) for e, i in keys]

    def load_collated(self, keys: Sequence[tuple[int, int]], *, grid: tuple[int, int] | None = None,
                      pin_memory: bool = False) -> JpegBatch | PackedJpegBatch | SparseJpegBatch:
        """The collated batch for ``keys`` — the same batch as ``collate(load_batch(keys))`` —
        built by one C call per layout group that copies (dense) or expands (sparse) only each
        sample's windows straight into the batch. With ``device_expand``, the host does less
        and the device finishes (:func:`dctnet.transforms.as_jpeg_batch`, which
        :class:`DevicePrefetcher` and ``crops_to_rgb`` apply): a dense cache delivers its windows
        packed without padding (:class:`PackedJpegBatch`), a sparse cache its compressed records
        (:class:`SparseJpegBatch`). Batches with bad samples or EXIF rotations take the
        per-sample path (a :class:`JpegBatch`)."""
        kw = dict(grid=grid, pin_memory=pin_memory, exif=self.exif)
        if not self.device_expand:
            batch = self.cache.gather(keys, self.crop, self.seed, self.targets, **kw)
        elif self.cache.format == "dense":
            batch = self.cache.gather_packed(keys, self.crop, self.seed, self.targets, **kw)
        else:
            batch = self.cache.gather_compressed(keys, self.crop, self.seed, self.targets, **kw)
        if batch is None:
            return collate(self.load_batch(keys), grid=grid, pin_memory=pin_memory)
        return batch

    def __getitems__(self, keys: Sequence[tuple[int, int] | int]) -> JpegBatch:
        """Batched fetch for ``DataLoader`` (its collate passes a JpegBatch through)."""
        return self.load_collated(self._keys(keys))
