#!/usr/bin/env python3
"""Hand-built inputs that lie about their counts, each placed flush against a guard page
(:mod:`guarded`), through the C entry points that walk them. Every case must be refused
(``ValueError`` / ``JpegError``) or decode what is there, without reading one byte outside its
buffer: a read past a record's end is a segfault of this process. Each case's name is printed
before it runs, so the caller (``tests/test_guarded.py``) can name the one that crashed.

    python tests/guarded_cases.py              # every case; exit 0 when all are refused in bounds
    python tests/guarded_cases.py --self-test  # reads one byte past a guarded buffer: must crash
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np

import dctnet
from dctnet import _jpeg  # noqa: F401  (loaded by dctnet under its dlopen flags)
from dctnet.data.plan import COPY_RANGE, GATHER_ITEM
from dctnet.synthetic import synthetic_jpeg
from guarded import Guarded, guarded, guarded_array

ALL_BITS = (1 << 64) - 1


def sparse_record(masks: list[int], values: list[int], escapes: list[int]) -> bytes:
    """A sparse record's bytes (csrc/sparse.h): masks, values, the pad to 2 bytes, escapes."""
    body = np.array(masks, np.uint64).tobytes() + np.array(values, np.int8).tobytes()
    body += b"\0" * (len(body) % 2)
    return body + np.array(escapes, np.int16).tobytes()


def item(bh: int, bw: int, window: tuple[int, int, int, int], nbytes: int, nvalues: int = 0, nescapes: int = 0,
         table: int = 0) -> np.ndarray:
    """One gather item, one component, its record at offset 0 of part 0."""
    it = np.zeros(1, GATHER_ITEM)
    it["part"], it["offset"], it["nbytes"], it["table"], it["ncomp"] = 0, 0, nbytes, table, 1
    it["bh"][0, 0], it["bw"][0, 0] = bh, bw
    it["nvalues"], it["nescapes"] = nvalues, nescapes
    it["r0"][0, 0], it["r1"][0, 0], it["c0"][0, 0], it["c1"][0, 0] = window
    return it


def tables(n: int = 1) -> np.ndarray:
    return np.ones((n, 4, 64), np.uint16)


def gather(fmt: int, record: bytes, it: np.ndarray, out_shape: tuple[int, int]) -> None:
    """``gather_planes`` and ``gather_packed`` on one item whose record is the whole part, the
    part ending at a guard page (and the tables too)."""
    part = guarded(record)
    out = np.zeros((1, *out_shape, 64), np.int16)
    _jpeg.gather_planes([part], guarded_array(tables()), it, fmt, [out])
    window = int((it["r1"] - it["r0"])[0, 0] * (it["c1"] - it["c0"])[0, 0])
    packed = np.zeros((max(window, 1), 64), np.int16)
    _jpeg.gather_packed([part], guarded_array(tables()), it, fmt, packed, np.zeros((1, 1), np.int64))


def refused(fn) -> None:
    try:
        fn()
    except (ValueError, dctnet.JpegError):
        return
    raise AssertionError("accepted")


# ---------------------------------------------------------------------- the cases
def sparse_more_mask_bits_than_values():
    """64 mask bits, 1 value: expand_block's value bound (vi < nvalues) is all that stops the walk."""
    gather(1, sparse_record([ALL_BITS], [5], []), item(1, 1, (0, 1, 0, 1), 10, nvalues=1), (1, 1))


def sparse_escape_past_the_end():
    """A value of −128 (an escape) with no escapes: expand_block's escape bound (ei < nescapes)."""
    gather(1, sparse_record([1], [-128], []), item(1, 1, (0, 1, 0, 1), 10, nvalues=1), (1, 1))


def sparse_skipped_blocks_claim_values():
    """Outside the window, a block of 64 mask bits and no values left: skip_blocks' bound
    (nv ≤ nvalues − vi) is all that stops it counting escapes past the record."""
    gather(1, sparse_record([0, ALL_BITS], [], []), item(1, 2, (0, 1, 0, 1), 16), (1, 1))


def sparse_skipped_rows_claim_values():
    """The same for rows above the window (skip_blocks over whole rows)."""
    gather(1, sparse_record([ALL_BITS, 0], [], []), item(2, 1, (1, 2, 0, 1), 16), (1, 1))


def sparse_escapes_counted_past_values():
    """Skipped values that are all escapes, with fewer escapes stored: skip_blocks' escape bound."""
    gather(1, sparse_record([0, 0b111], [-128, -128, -128], [7]), item(1, 2, (0, 1, 0, 1), 22, nvalues=3, nescapes=1),
           (1, 1))


def sparse_table_past_the_tables():
    gather(1, sparse_record([1], [3], []), item(1, 1, (0, 1, 0, 1), 10, nvalues=1, table=1), (1, 1))


def sparse_record_longer_than_its_part():
    gather(1, sparse_record([1], [3], []), item(1, 1, (0, 1, 0, 1), 18, nvalues=1), (1, 1))


def dense_record_longer_than_its_part():
    """A dense record of 2 blocks (256 bytes) in a part of 128: the part range check."""
    it = item(1, 2, (0, 1, 0, 2), 256)
    gather(0, bytes(128), it, (1, 2))


def dense_size_not_the_planes():
    """nbytes 128 for a 1 × 2-block plane (256 bytes): the dense size check."""
    gather(0, bytes(128), item(1, 2, (0, 1, 0, 2), 128), (1, 2))


def copy_range_past_its_part():
    r = np.zeros(1, COPY_RANGE)
    r["part"], r["src"], r["size"], r["dst"] = 0, 8, 64, 0
    _jpeg.copy_ranges([guarded(bytes(64))], r, np.zeros(64, np.uint8))


def expand_more_mask_bits_than_values():
    _jpeg.sparse_expand(guarded(np.array([ALL_BITS], np.uint64)), guarded(np.array([5], np.int8)),
                        guarded(b""), guarded_array(np.ones(64, np.uint16)), guarded(b"\0"), np.zeros(64, np.int16))


def expand_escape_past_the_end():
    _jpeg.sparse_expand(guarded(np.array([1], np.uint64)), guarded(np.array([-128], np.int8)),
                        guarded(b""), guarded_array(np.ones(64, np.uint16)), guarded(b"\0"), np.zeros(64, np.int16))


def expand_table_index_past_the_tables():
    _jpeg.sparse_expand(guarded(np.array([1], np.uint64)), guarded(np.array([3], np.int8)),
                        guarded(b""), guarded_array(np.ones(64, np.uint16)), guarded(b"\x01"), np.zeros(64, np.int16))


def jpeg_marker_longer_than_the_file():
    """An APP2 segment (one libjpeg skips: dctnet keeps only APP1) claiming 4 KB in a 16-byte buffer:
    the memory source's skip must stop at the end."""
    dctnet.read_coefficients(guarded(b"\xff\xd8\xff\xe2\x10\x00" + b"x" * 10))


def jpeg_header_cut_in_a_marker():
    dctnet.read_header(guarded(synthetic_jpeg(1, 32, 32)[:21]))


CASES = [sparse_more_mask_bits_than_values, sparse_escape_past_the_end, sparse_skipped_blocks_claim_values,
         sparse_skipped_rows_claim_values, sparse_escapes_counted_past_values, sparse_table_past_the_tables,
         sparse_record_longer_than_its_part, dense_record_longer_than_its_part, dense_size_not_the_planes,
         copy_range_past_its_part, expand_more_mask_bits_than_values, expand_escape_past_the_end,
         expand_table_index_past_the_tables, jpeg_marker_longer_than_the_file, jpeg_header_cut_in_a_marker]


def truncations() -> int:
    """Every cut of a few small files of each layout, read from guarded memory: a result with libjpeg's
    warning, or a JpegError — never a read past the cut."""
    n = 0
    for data in (synthetic_jpeg(3, 24, 40), synthetic_jpeg(4, 17, 33, subsampling="4:2:2"),
                 synthetic_jpeg(5, 24, 24, progressive=True), synthetic_jpeg(6, 16, 24, gray=True)):
        for cut in range(2, len(data), 3):
            print(f"case truncation {cut}/{len(data)}", flush=True)
            try:
                dctnet.read_coefficients(guarded(data[:cut]), warnings="accept")
            except dctnet.JpegError:
                pass
            n += 1
    return n


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        g = Guarded(b"record")
        print("case self-test: one byte past a guarded buffer", flush=True)
        ctypes.string_at(g.address + len(g), 1)
        return 0
    for case in CASES:
        print(f"case {case.__name__}", flush=True)
        refused(case)
    n = truncations()
    print(f"ok: {len(CASES)} lying inputs refused in bounds, {n} truncations read in bounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
