"""Reading a cache: its index and parts mapped, records checked and gathered into batches (host
or device expansion). Opening one against its sources and serving it as a dataset:
:mod:`dctnet.data.cache.dataset`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np
import torch
import xxhash

from dctnet.batch import JpegBatch, PackedJpegBatch, SparseJpegBatch
from dctnet.codec import JpegError
from dctnet.data import sparse as S
from dctnet.data.crop import crop_frames, draw_boxes
from dctnet.data.plan import (COLOR_SPACES, COPY_RANGE, GATHER_ITEM, BatchPlan, batch_storage, gather_collated,
                              gather_items, plan_batch, set_windows)
from dctnet.data.cache.format import (BAD, INDEX_DTYPE, INDEX_DTYPE_V1, OK, CacheError, CacheRecordError, load_array,
                                      index_checksum, validate_index)
from dctnet.data.cache.gather import (copy_records_checked, gather_packed_checked, gather_planes_checked,  # noqa: F401
                                      record_checksums)  # (record_checksums: read by benchmarks/cache.py from here)

__all__ = ["Cache", "CachedCoefficients"]


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


class Cache:
    """An opened, validated cache (see :func:`open_cache`).

    The part files are memory-mapped when the cache is opened (and again when it is unpickled in
    another process), never lazily: a mapping created on first use could be created by two loader
    threads at once, one replacing — and unmapping — the other's while its C gather reads it.

    ``checksums`` (default on): the index's checksum is checked here, and every record's checksum
    each time the record is read — by the C gathers as they copy it, or :meth:`check_record` on the
    per-sample path; a mismatch raises :class:`CacheRecordError` naming the record. ``root``: the
    source root the cache's source paths are relative to (default: the one ``meta.json`` records)."""

    def __init__(self, path: Path, meta: dict[str, Any], *, checksums: bool = True,
                 root: str | os.PathLike | None = None) -> None:
        self.path, self.meta = path, meta
        self.format = meta["format"]
        self.root = Path(meta["root"] if root is None else root)
        self.checksums = bool(checksums)
        n = meta["num_samples"]
        if meta["format_version"] == 1:  # no checksums (refused by load_meta unless they are off)
            old = load_array(path / "index.npy", INDEX_DTYPE_V1, (), n)
            self.index = np.zeros(n, INDEX_DTYPE)
            for name in INDEX_DTYPE_V1.names:
                self.index[name] = old[name]
            self.checksums = False
        else:
            self.index = load_array(path / "index.npy", INDEX_DTYPE, (), n)
        self.tables = load_array(path / "tables.npy", np.dtype("<u2"), (4, 64), n)
        self._map_parts()
        found = validate_index(self.index, self.format, [len(p) for p in self._parts])
        if found is not None:
            i, reason = found
            raise CacheError(f"{path / 'index.npy'}: record {i} ({self.meta['sources'][i]['path']}): {reason} "
                             "(corrupt or tampered cache; rebuild it)")
        if self.checksums and index_checksum(self.index) != meta["checksums"]["index"]:
            # after validate_index, which names the record when a field is out of range
            raise CacheError(f"{path / 'index.npy'}: its checksum differs from the one meta.json records: changed since "
                             "the build (corrupt or tampered cache; rebuild it)")
        labels = np.array([s["label"] for s in meta["sources"]], np.int64)
        if len(labels) and (wrong := np.flatnonzero(labels != self.index["label"])).size:
            # the datasets take their targets from meta.json: a flipped digit there is a wrong label
            i = int(wrong[0])
            raise CacheError(f"{path / 'meta.json'}: sources[{i}] ({meta['sources'][i]['path']}) has label {labels[i]}, "
                             f"index.npy {int(self.index['label'][i])}: corrupt or tampered cache; rebuild it")

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
        # what the checksums read, as memoryviews: slicing one costs ~0.1 µs, a numpy slice ~0.3 µs
        # and a row of a np.memmap microseconds, once per record read
        self._part_bytes = tuple(memoryview(p) for p in self._parts)
        self._table_bytes = memoryview(np.ascontiguousarray(self.tables).reshape(-1).view(np.uint8))

    def __len__(self) -> int:
        return len(self.index)

    def _data(self, part: int) -> np.ndarray:
        return self._parts[part]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        # mappings belong to one process: remapped by __setstate__
        state["_parts"] = state["_part_bytes"] = state["_table_bytes"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._map_parts()

    def _record_error(self, i: int, what: str) -> CacheRecordError:
        r = self.index[i]
        part, start = int(r["part"]), int(r["offset"])
        where = f"{self.meta['parts'][part]}, bytes {start}-{start + int(r['nbytes'])}"
        return CacheRecordError(self.path, i, self.meta["sources"][i]["path"], what, where)

    def _corrupt(self, idx: np.ndarray, rec: np.ndarray) -> np.ndarray:
        """Positions in ``idx`` (int64 (B,) record numbers; ``rec`` their index rows) of the readable
        records whose bytes or table row no longer give their checksum: int64 (K,), ascending."""
        # record_checksum inlined: the call per record is a tenth of a sparse record's check
        bad, data, tables, row, xxh3 = [], self._part_bytes, self._table_bytes, 4 * 64 * 2, xxhash.xxh3_64_intdigest
        for j, (i, part, start, nbytes, status, want) in enumerate(zip(
                idx.tolist(), rec["part"].tolist(), rec["offset"].tolist(), rec["nbytes"].tolist(),
                rec["status"].tolist(), rec["checksum"].tolist())):
            if status == OK and xxh3(data[part][start:start + nbytes], seed=xxh3(tables[i * row:(i + 1) * row])) != want:
                bad.append(j)
        return np.array(bad, np.int64)

    def check_record(self, i: int) -> None:
        """Raise :class:`CacheRecordError` naming record ``i`` (its source path, part file and
        bytes) when its checksum does not match; nothing for a good or a bad (unreadable at
        build) record."""
        if len(self._corrupt(np.array([i], np.int64), np.asarray(self.index[i:i + 1]))):
            raise self._record_error(i, "checksum mismatch: its bytes or quantization table changed since the build")

    def _plan(self, keys: Sequence[tuple[int, int]], crop: Any, seed: int, grid: tuple[int, int] | None,
              exif: str = "ignore") -> tuple[np.ndarray, np.ndarray, BatchPlan] | None:
        """``(idx, records, plan)`` for any layout (:func:`dctnet.data.plan.plan_batch`); ``None``
        when a sample is bad or needs an EXIF rotation (the per-sample path handles those). The
        checksums are checked by the gathers that follow, in C."""
        if not keys:
            return None
        epochs = np.array([e for e, _ in keys], np.int64)
        idx = np.array([i for _, i in keys], np.int64)
        rec = np.asarray(self.index[idx])  # a plain array: field access on a memmap view is slow
        if (rec["status"] != OK).any() or (exif == "apply" and (rec["orient"] > 1).any()):
            return None
        h, w = rec["height"].astype(np.int64), rec["width"].astype(np.int64)
        boxes = draw_boxes(crop, h, w, seed, epochs, idx)
        return idx, rec, plan_batch(rec["color"], rec["ncomp"], rec["sampling"], h, w, boxes, grid, crop_frames(crop, h, w))

    def gather(self, keys: Sequence[tuple[int, int]], crop: Any, seed: int, targets: Sequence[int], *,
               grid: tuple[int, int] | None = None, pin_memory: bool = False, exif: str = "ignore") -> JpegBatch | None:
        """Fast path of :meth:`CacheDataset.load_collated`, every layout: one C call per layout
        group copies (dense) or expands (sparse) each plane's window straight into the batch.
        ``None`` when the batch needs the per-sample path (bad samples, corrupt records, EXIF rotations)."""
        planned = self._plan(keys, crop, seed, grid, exif)
        if planned is None:
            return None
        idx, rec, plan = planned
        items, fmt, sums, failed = self._items(idx, rec), self._fmt, self._sums(rec), []

        def copy(rows: np.ndarray, it: np.ndarray, outs: list) -> None:
            bad = gather_planes_checked(self._parts, self.tables, it, fmt, outs, None if sums is None else sums[rows])
            failed.extend(bad)

        try:  # the C side checks every item against the part files, tables and outputs it is handed
            batch = gather_collated(plan, copy, items, np.asarray(targets, np.int64)[idx], idx, pin_memory=pin_memory)
        except ValueError as exc:
            raise self._mismatch(exc, idx) from None
        return None if failed else batch  # the per-sample path raises for each corrupt record, under on_error

    def _sums(self, rec: np.ndarray) -> np.ndarray | None:
        """The records' expected checksums for the C gathers (uint64 (B,)), ``None`` when unchecked."""
        return np.ascontiguousarray(rec["checksum"], np.uint64) if self.checksums else None

    @property
    def _fmt(self) -> int:
        """The C gathers' record format code: 0 dense, 1 sparse."""
        return 1 if self.format == "sparse" else 0

    def _items(self, idx: np.ndarray, rec: np.ndarray) -> np.ndarray:
        """The C gathers' item rows for index records ``rec`` (plane windows filled in later)."""
        return gather_items(rec["part"], rec["ncomp"], rec["blocks"].astype(np.int64),
                            offset=rec["offset"].astype(np.int64),  # validated < 2^63 when the cache was opened
                            nbytes=rec["nbytes"].astype(np.int64), table=idx, nvalues=rec["nvalues"],
                            nescapes=rec["nescapes"])

    def _mismatch(self, exc: ValueError, positions: np.ndarray) -> CacheError:
        """A C gather's ``ValueError(message, position)`` as the error naming the bad record;
        ``positions`` maps the call's positions to dataset indices."""
        j = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], int) else 0
        return self._record_error(int(positions[j]), "its data does not match the index")

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
        items = self._items(idx, rec)
        set_windows(items, plan.pwin)
        sizes = np.stack([plan.pwin[:, 1] - plan.pwin[:, 0], plan.pwin[:, 3] - plan.pwin[:, 2]], axis=2)  # (B, 4, 2)
        sizes[np.arange(4)[None, :] >= rec["ncomp"].astype(np.int64)[:, None]] = 0
        counts = (sizes[:, :, 0] * sizes[:, :, 1]).reshape(-1)
        offsets = (np.cumsum(counts) - counts).reshape(n, 4)
        blocks = batch_storage((int(counts.sum()), 64), pin_memory)
        sums = self._sums(rec)
        for (_, sampling), rows in zip(plan.layouts, plan.rows):
            try:
                failed = gather_packed_checked(self._parts, self.tables, np.ascontiguousarray(items[rows]), self._fmt,
                                               blocks.numpy(), np.ascontiguousarray(offsets[rows, :len(sampling)]),
                                               None if sums is None else sums[rows])
            except ValueError as exc:
                raise self._mismatch(exc, idx[rows]) from None
            if failed:
                return None  # the per-sample path raises for each corrupt record, under on_error
        t = torch.from_numpy
        extra = [] if plan.resize is None else [plan.resize]
        meta = t(np.concatenate([offsets, sizes.reshape(n, 8), plan.valid, plan.rel,
                                 np.asarray(targets, np.int64)[idx][:, None], idx[:, None], *extra], axis=1))
        rows_t = tuple(t(r) for r in plan.rows)
        if pin_memory:
            meta, rows_t = meta.pin_memory(), tuple(r.pin_memory() for r in rows_t)
        return PackedJpegBatch(blocks=blocks, offsets=meta[:, 0:4], sizes=meta[:, 4:12].view(n, 4, 2),
                               valid=meta[:, 12:14], boxes=meta[:, 14:18], labels=meta[:, 18], index=meta[:, 19],
                               resize=meta[:, 20:24] if extra else None,
                               layouts=tuple((cs, sampling, g) for (cs, sampling), g in zip(plan.layouts, plan.grids)),
                               group_rows=rows_t)

    def gather_compressed(self, keys: Sequence[tuple[int, int]], crop: Any, seed: int, targets: Sequence[int], *,
                          grid: tuple[int, int] | None = None, pin_memory: bool = False,
                          exif: str = "ignore") -> SparseJpegBatch | None:
        """The batch in compressed form for device expansion (:func:`dctnet.transforms.expand_sparse`),
        every layout: the host only concatenates records (their extents were checked when the
        cache was opened, their checksums as they are copied; their streams are checked by the
        expansion, which raises ``ValueError`` on a mismatch). Sparse caches only; ``None`` when the
        batch needs the per-sample path."""
        planned = self._plan(keys, crop, seed, grid, exif) if self.format == "sparse" else None
        if planned is None:
            return None
        idx, rec, plan = planned
        blocks = rec["blocks"].astype(np.int64)                                    # (B, 4, 2)
        counts = blocks[:, :, 0] * blocks[:, :, 1]                                 # (B, 4) blocks per plane
        nb = counts.sum(axis=1)
        nv, ne = rec["nvalues"].astype(np.int64), rec["nescapes"].astype(np.int64)
        # one buffer laid out as one record of all the batch's blocks: every record's masks, then
        # values, then (2-aligned) escapes; one C call copies the 3 ranges of each record (a Python
        # loop over records cost ~20 µs a sample)
        start, part = rec["offset"].astype(np.int64), rec["part"].astype(np.int64)
        values_at, escapes_at, _ = S.record_layout(nb, nv, ne)
        m_end, e_start, total = S.record_layout(int(nb.sum()), int(nv.sum()), int(ne.sum()))
        v_end = m_end + int(nv.sum())
        ranges = np.empty((len(idx), 3), COPY_RANGE)
        ranges["part"] = part[:, None]
        src, size = ranges["src"], ranges["size"]  # views: writing them fills the rows
        src[:, 0], size[:, 0] = start, 8 * nb
        src[:, 1], size[:, 1] = start + values_at, nv
        src[:, 2], size[:, 2] = start + escapes_at, 2 * ne
        for k, base in enumerate((0, m_end, e_start)):
            ranges["dst"][:, k] = base + np.cumsum(size[:, k]) - size[:, k]
        buf = batch_storage((-(-total // 2),), pin_memory).view(torch.uint8)
        checked = np.zeros(len(idx), GATHER_ITEM)  # the records of the 3 ranges each: copied, then hashed
        checked["part"], checked["offset"], checked["nbytes"], checked["table"] = part, start, rec["nbytes"], idx
        try:
            failed = copy_records_checked(self._parts, ranges.reshape(-1), buf.numpy(), self.tables, checked,
                                          self._sums(rec))
        except ValueError as exc:  # with checksums on the C side names the record, without it the range
            raise self._mismatch(exc, idx if self.checksums else np.repeat(idx, 3)) from None
        if failed:
            return None  # the per-sample path raises for each corrupt record, under on_error
        masks, values, escapes = buf[:m_end].view(torch.int64), buf[m_end:v_end].view(torch.int8), \
            buf[e_start:total].view(torch.int16)
        flat = counts.reshape(-1)  # planes follow each other, record after record
        offsets = (np.cumsum(flat) - flat).reshape(counts.shape)
        t = torch.from_numpy
        batch = SparseJpegBatch(
            masks=masks, values=values, escapes=escapes,
            tables=t(np.asarray(self.tables[idx], dtype=np.int32)), blocks=t(blocks), offsets=t(offsets),
            windows=t(np.ascontiguousarray(plan.pwin)), valid=t(plan.valid), boxes=t(plan.rel),
            labels=t(np.asarray(targets, np.int64)[idx]), index=t(idx),
            resize=None if plan.resize is None else t(np.ascontiguousarray(plan.resize)),
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
        if self.checksums:
            self.check_record(i)
        nc = int(r["ncomp"])
        blocks = [tuple(int(v) for v in r["blocks"][c]) for c in range(nc)]
        counts = [h * w for h, w in blocks]
        raw = self._data(int(r["part"]))[int(r["offset"]): int(r["offset"]) + int(r["nbytes"])]
        if self.format == "dense":
            flat = raw.view(np.int16).reshape(-1, 64)
        else:
            rec = S.record_from_bytes(raw, sum(counts), int(r["nvalues"]), int(r["nescapes"]),
                                      np.ascontiguousarray(self.tables[i, :nc]))
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
