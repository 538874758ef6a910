"""Building a cache: decode every source once (folders or tar shards, local processes or torchrun
ranks, resumable) and write parts, index, tables and ``meta.json`` atomically."""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import xxhash

from dctnet.codec import DEFAULT_MAX_PIXELS, JpegError, libjpeg_version, read_coefficients, warn_mode
from dctnet.data import sparse as S
from dctnet.data.dataset import ImageFolderDataset
from dctnet.data.hf import HFDataset, hf_files
from dctnet.data.plan import COLOR_SPACES
from dctnet.data.tar import IMAGE_EXTS, key_of
from dctnet.distributed import placement
from dctnet.data.cache.format import (BAD, CHECKSUM, FORMAT_VERSION, INDEX_DTYPE, CacheError, file_hash, part_name,
                                      read_member, index_checksum)


CHUNK = 64  # samples between progress records


def _encode_sample(coeffs, fmt: str) -> tuple[list[bytes], np.ndarray, int, int]:
    """(chunks to write, tables (4, 64), nvalues, nescapes)."""
    tables = np.zeros((4, 64), np.uint16)
    if fmt == "dense":
        tables[: coeffs.num_components] = coeffs.quant_tables.reshape(-1, 64)
        return [p.tobytes() for p in coeffs.planes], tables, 0, 0
    rec = S.encode(coeffs.planes, coeffs.quant_tables)
    tables[: coeffs.num_components] = rec.tables
    return S.record_bytes(rec), tables, len(rec.values), len(rec.escapes)


def _build_range(src: list[tuple[str, int]], out: Path, fmt: str, rank: int, world: int, resume: bool,
                 on_error: str, max_pixels: int | None, progress: bool, warnings: str = "raise",
                 hf: HFDataset | None = None) -> None:
    """Decode samples [lo, hi) of ``src`` into this rank's part files (append, resumable);
    ``hf``: the Hugging Face dataset whose rows they are."""
    n = len(src)
    lo, hi = rank * n // world, (rank + 1) * n // world
    name = part_name(rank, world)
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
        # drop whatever was written after the last progress record (a crash mid-chunk)
        for f, size in ((fd, offset), (fi, done * INDEX_DTYPE.itemsize), (ft, done * 4 * 64 * 2)):
            f.truncate(size)
            f.seek(size)
        t0 = time.time()
        rec = np.zeros(1, INDEX_DTYPE)
        for i in range(lo + done, hi):
            path, label = src[i][0], src[i][1]
            name_i = f"{path}:{src[i][4]}" if len(src[i]) > 2 and hf is None else path
            rec[:] = 0
            rec["part"], rec["label"], rec["offset"] = rank, label, offset
            try:
                coeffs = _read_sample(src, i, name_i, hf, max_pixels, warnings)
            except (JpegError, OSError) as exc:
                if on_error == "raise":
                    raise
                rec["status"] = BAD
                with (out / f"{name}.bad.jsonl").open("a") as bad:
                    bad.write(json.dumps({"index": i, "path": name_i, "reason": str(exc)}) + "\n")
                tables = np.zeros((4, 64), np.uint16)
            else:
                tables, written = _write_sample(fd, rec, coeffs, fmt)
                offset += written
            fi.write(rec.tobytes())
            ft.write(tables.tobytes())
            done += 1
            if done % CHUNK == 0 or i == hi - 1:
                _save_progress((fd, fi, ft), prog_path, done, offset)
                if progress and rank == 0:
                    rate = (i + 1 - lo) / max(time.time() - t0, 1e-9)
                    print(f"\r  rank 0: {done}/{hi - lo} images, {rate:.0f}/s", end="", file=sys.stderr, flush=True)
    (out / f"{name}.done").write_text("")
    if progress and rank == 0:
        print(file=sys.stderr)


def _read_sample(src: list[tuple], i: int, name_i: str, hf: HFDataset | None, max_pixels: int | None,
                 warnings: str):
    """The DCT coefficients of sample ``i`` of ``src`` (named ``name_i`` in errors): a Hugging
    Face row, a tar-shard member or an image file."""
    if hf is not None:  # a Hugging Face dataset's row: its stored bytes (or path)
        data, _ = hf.image_source(i)
        if data is None:
            raise JpegError("no image bytes", name_i)
        return read_coefficients(data, max_pixels=max_pixels, name=name_i, warnings=warnings)
    if len(src[i]) > 2:  # a tar-shard member: (shard, label, offset, size, key)
        return read_coefficients(read_member(src[i][0], src[i][2], src[i][3]), max_pixels=max_pixels,
                                 name=name_i, warnings=warnings)
    return read_coefficients(src[i][0], max_pixels=max_pixels, warnings=warnings)


def _write_sample(fd, rec: np.ndarray, coeffs, fmt: str) -> tuple[np.ndarray, int]:
    """Append the encoded ``coeffs`` to the data file ``fd`` (padded to 8 bytes) and fill their
    index record ``rec``; returns the sample's quantisation tables and the bytes written."""
    chunks, tables, nv, ne = _encode_sample(coeffs, fmt)
    nbytes = 0
    # format.record_checksum of the bytes as written, streamed over the chunks
    digest = xxhash.xxh3_64(seed=xxhash.xxh3_64_intdigest(tables))
    for ch in chunks:
        fd.write(ch)
        digest.update(ch)
        nbytes += len(ch)
    rec["checksum"] = digest.intdigest()
    pad = -nbytes % 8
    fd.write(b"\0" * pad)
    rec["nbytes"], rec["nvalues"], rec["nescapes"] = nbytes, nv, ne
    rec["ncomp"], rec["color"] = coeffs.num_components, COLOR_SPACES.index(coeffs.color_space)
    rec["orient"] = coeffs.exif_orientation or 0
    rec["height"], rec["width"] = coeffs.height, coeffs.width
    for c, ((h, v), blk) in enumerate(zip(coeffs.sampling, coeffs.blocks)):
        rec["sampling"][0, c] = (h, v)
        rec["blocks"][0, c] = blk
    return tables, nbytes + pad


def _save_progress(files, prog_path: Path, done: int, offset: int) -> None:
    """Sync the part ``files`` to disk, then record ``done`` and ``offset`` in ``prog_path``."""
    for f in files:
        f.flush()
        os.fsync(f.fileno())
    tmp = prog_path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"done": done, "offset": offset}))
    os.replace(tmp, prog_path)  # progress never claims more than is on disk



def _is_glob(text: str) -> bool:
    return any(ch in text for ch in "*?[")


def _hf_source(src: Any) -> HFDataset | None:
    """The Hugging Face dataset ``src`` names, or None: an :class:`HFDataset`, a ``save_to_disk``
    directory, a parquet file or glob, or a folder with ``*.parquet`` or ``data/*.parquet``."""
    if isinstance(src, HFDataset):
        return src
    if isinstance(src, (list, tuple, ImageFolderDataset)):
        return None
    text, p = str(src), Path(str(src))
    named = text.endswith(".parquet") or (p.is_dir() and (
        (p / "state.json").is_file() or (p / "dataset_dict.json").is_file()
        or any(p.glob("*.parquet")) or any(p.glob("data/*.parquet"))))
    return HFDataset(src) if named else None


def _hf_meta(ds: HFDataset) -> tuple[str, dict[str, Any], str | None]:
    """``(root, meta["hf"], shard_pattern)`` of a cache of ``ds``: its data files relative to the
    root (checked like tar shards when the cache is opened), how to reopen it for ``cache verify``."""
    kind, files = "memory", []
    cache_files = [f["filename"] for f in getattr(ds.data, "cache_files", [])]
    if ds.name not in ("Dataset", ".") and (Path(ds.name).exists() or _is_glob(ds.name)):
        kind, files = hf_files(ds.name)
    elif cache_files and getattr(ds.data, "_indices", None) is None:  # rows in the order of its arrow files
        kind, files = "arrow", list(cache_files)
    if not files:
        raise CacheError("a cache of a Hugging Face dataset needs its files on disk: save_to_disk it, or build from "
                         "its parquet files")
    root = os.path.abspath(ds.name) if kind == "saved" else \
        os.path.commonpath([os.path.dirname(os.path.abspath(f)) for f in files])
    rel = [os.path.relpath(f, root) for f in files]
    pattern = None
    if kind == "saved":
        pattern = "*.arrow"
    elif kind == "parquet" and _is_glob(ds.name):
        pattern = os.path.relpath(os.path.abspath(ds.name), root)
    elif kind == "parquet" and Path(ds.name).is_dir() and all(os.sep not in f for f in rel):
        pattern = "*.parquet"
    return root, {"kind": kind, "files": rel, "image_column": ds.image_column}, pattern


def _shard_list(src: Any) -> list[str] | None:
    """The tar shards ``src`` names (a list, a glob, one .tar, or a folder of .tar files), or None."""
    if isinstance(src, (list, tuple)):
        return [str(s) for s in src]
    text = str(src)
    if _is_glob(text):
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
    if _is_glob(text):
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
                key, ext = key_of(m.name)
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
    # roots are absolute: a root relative to the working directory of the build would name other
    # files (or none) from any other directory
    if isinstance(src, ImageFolderDataset):
        return src.samples, src.classes, os.path.abspath(src.root), None
    shards = _shard_list(src)
    if shards is None:
        ds = ImageFolderDataset(src)
        return ds.samples, ds.classes, os.path.abspath(ds.root), None
    if not shards:
        raise CacheError(f"no tar shards match {src!r}")
    items = _scan_shards(shards)
    root = os.path.commonpath([os.path.dirname(os.path.abspath(s)) for s in shards])
    classes = [str(c) for c in sorted({label for _, label, *_ in items})]
    return items, classes, root, shards


def build_cache(src: str | os.PathLike | ImageFolderDataset, out: str | os.PathLike, *, format: str = "sparse",
                workers: int = 1, resume: bool = False, on_error: str = "raise",
                max_pixels: int | None = DEFAULT_MAX_PIXELS, progress: bool = True,
                hash_sources: bool = True, warnings: str = "raise") -> Path:
    """Build a cache of an image folder (``root/<class>/<image>``) or of uncompressed WebDataset tar
    shards (a list, a glob, or a folder of ``.tar`` files; ``KEY.jpg`` + ``KEY.cls`` members). See
    the module docstring.

    Under ``torchrun`` (``RANK``/``WORLD_SIZE`` set, ``torch.distributed`` initialised or
    initialisable with gloo) every rank builds its range and rank 0 finalises; otherwise
    ``workers`` local processes split the work. Returns the cache path (on every rank).

    A file that lost data (truncated, corrupt entropy-coded data) is a bad sample under
    ``on_error`` unless ``warnings="accept"`` (:data:`dctnet.codec.WARNING_POLICIES`)."""
    warn_mode(warnings)
    if format not in ("dense", "sparse"):
        raise ValueError(f"format must be 'dense' or 'sparse', not {format!r}")
    out = Path(out)
    partial = out.with_name(out.name + ".partial")
    hf = _hf_source(src)
    if hf is not None:
        root, hf_meta, pattern = _hf_meta(hf)
        # (name, label, row): a row's name says the dataset, the row and its stored file name
        samples = [(hf.image_source(i)[1], int(label), int(row)) for i, (label, row) in
                   enumerate(zip(hf.targets.tolist(), hf.rows.tolist()))]
        classes, shards = list(hf.classes), [os.path.join(root, f) for f in hf_meta["files"]]
    else:
        samples, classes, root, shards = _sources(src)
        hf_meta, pattern = None, _shard_pattern(src, root) if shards is not None else None
    rank, world, _ = placement()
    distributed = world > 1
    if distributed and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("gloo")
    if out.exists():
        raise CacheError(f"{out} exists; remove it to rebuild")
    if rank == 0:
        if partial.exists() and not resume:
            shutil.rmtree(partial)
        partial.mkdir(parents=True, exist_ok=True)
        params = {"format": format, "world": world if distributed else workers, "n": len(samples), "root": root,
                  "warnings": warnings, "format_version": FORMAT_VERSION}  # an older build's records differ
        pfile = partial / "build.json"
        if resume and pfile.exists() and json.loads(pfile.read_text()) != params:
            raise CacheError(f"cannot resume {partial}: it was started with {pfile.read_text()}, now {params}")
        pfile.write_text(json.dumps(params))
    if distributed:
        torch.distributed.barrier()
        _build_range(samples, partial, format, rank, world, resume, on_error, max_pixels, progress, warnings, hf)
        torch.distributed.barrier()
        parts = world
    elif workers > 1:
        import multiprocessing as mp  # only for local build workers

        # fork where the platform has it (as torch's DataLoader does): spawn would re-run the
        # caller's unguarded __main__ in every worker
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        procs = [ctx.Process(target=_build_range, args=(samples, partial, format, r, workers, resume, on_error,
                                                         max_pixels, progress and r == 0, warnings, hf))
                 for r in range(workers)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode != 0 for p in procs):
            raise RuntimeError(f"a build worker failed; {partial} is left for --resume")
        parts = workers
    else:
        _build_range(samples, partial, format, 0, 1, resume, on_error, max_pixels, progress, warnings, hf)
        parts = 1
    if rank == 0:
        _finalize(partial, out, samples, classes, root, format, parts, hash_sources, shards, pattern, hf_meta)
    if distributed:
        torch.distributed.barrier()
    return out


def _finalize(partial: Path, out: Path, samples: list[tuple], classes: list[str], root: str, fmt: str,
              parts: int, hash_sources: bool, shards: list[str] | None = None, shard_pattern: str | None = None,
              hf: dict[str, Any] | None = None) -> None:
    index = np.concatenate([np.fromfile(partial / f"{part_name(r, parts)}.idx", INDEX_DTYPE) for r in range(parts)])
    tables = np.concatenate([np.fromfile(partial / f"{part_name(r, parts)}.tab", np.uint16) for r in range(parts)])
    if len(index) != len(samples):
        raise CacheError(f"build incomplete: {len(index)} of {len(samples)} samples in {partial}")
    np.save(partial / "index.npy", index)
    np.save(partial / "tables.npy", tables.reshape(-1, 4, 64))
    bad = []
    for r in range(parts):
        f = partial / f"{part_name(r, parts)}.bad.jsonl"
        if f.exists():
            bad += [json.loads(line) for line in f.read_text().splitlines()]
    sources, shard_meta = [], None
    if shards is None:
        for path, label in samples:
            st = os.stat(path)
            sources.append({"path": os.path.relpath(path, root), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                            "label": label, "hash": file_hash(path) if hash_sources else None})
    else:
        shard_meta = []
        for shard in shards:
            st = os.stat(shard)
            shard_meta.append({"path": os.path.relpath(shard, root), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                               "hash": file_hash(shard) if hash_sources else None})
        for shard, label, *rest in samples:
            if hf is not None:  # a Hugging Face dataset's row i (its bytes are in the data files above)
                sources.append({"path": shard, "label": label, "row": rest[0], "size": 0})
                continue
            offset, size, key = rest
            sources.append({"path": f"{os.path.relpath(shard, root)}:{key}", "shard": os.path.relpath(shard, root),
                            "offset": offset, "size": size, "label": label})
    src_bytes = sum(s["size"] for s in (shard_meta if hf is not None else sources))
    data_bytes = sum((partial / f"{part_name(r, parts)}.bin").stat().st_size for r in range(parts))
    import dctnet  # the package's version: dctnet/__init__ imports this module's layer

    meta = {"format_version": FORMAT_VERSION, "format": fmt, "dctnet": dctnet.__version__, "libjpeg": libjpeg_version(),
            "checksums": {"algorithm": CHECKSUM, "index": index_checksum(index)}, "root": root, "classes": classes,
            "parts": [f"{part_name(r, parts)}.bin" for r in range(parts)],
            "num_samples": len(samples), "bad": sorted(bad, key=lambda b: b["index"]), "sources": sources,
            "source_bytes": src_bytes, "data_bytes": data_bytes, "created": time.time(), "shards": shard_meta,
            "shard_pattern": shard_pattern, "hf": hf}
    for r in range(parts):  # build bookkeeping is not part of the cache
        for suffix in (".idx", ".tab", ".progress.json", ".done", ".bad.jsonl"):
            (partial / f"{part_name(r, parts)}{suffix}").unlink(missing_ok=True)
    (partial / "build.json").unlink(missing_ok=True)
    tmp = partial / "meta.json.tmp"
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, partial / "meta.json")
    os.replace(partial, out)  # the cache appears whole or not at all
    print(f"cache {out}: {len(samples)} samples ({len(bad)} bad), {fmt}, {data_bytes / 2**20:.1f} MiB "
          f"= {data_bytes / max(src_bytes, 1):.2f}x the {src_bytes / 2**20:.1f} MiB of JPEG", file=sys.stderr)
