#!/usr/bin/env python3
"""Mutation fuzzer for dctnet's C reader: random truncations, bit flips, byte splices,
overwrites, insertions and header edits of real JPEGs. The only allowed outcomes are a result
or dctnet.JpegError; a crash kills this process (the test that runs it sees the signal), any
other exception fails it, and the caller's timeout catches hangs.

    python tests/fuzz_reader.py --cases 3000 --seed 1      # what `make test` runs
    python tests/fuzz_reader.py --cases 200000             # `make fuzz`
"""

from __future__ import annotations

import argparse
import glob
import os
import tempfile
import time

import numpy as np

import dctnet
from dctnet import _jpeg
from dctnet.data.plan import GATHER_ITEM
from dctnet.synthetic import synthetic_jpeg
from guarded import install as guard_c_inputs

# every input the C code walks (JPEG buffers, sparse streams, each record and byte range a gather
# names) flush against an inaccessible page: a read past one is a segfault, not a read of its neighbour
guard_c_inputs()


def seed_files(corpus: str | None) -> list[bytes]:
    seeds = [synthetic_jpeg(i, h, w, **kw) for i, (h, w, kw) in enumerate([
        (64, 64, {}), (33, 17, {"subsampling": "4:2:2"}), (40, 48, {"progressive": True}),
        (24, 40, {"gray": True}), (48, 48, {"subsampling": "4:4:4", "optimize": True}), (16, 16, {"quality": 100}),
    ])]
    if corpus and os.path.isdir(corpus):
        for path in sorted(glob.glob(os.path.join(corpus, "*"))):
            if os.path.getsize(path) <= 64 * 1024:  # keep cases fast
                with open(path, "rb") as f:
                    seeds.append(f.read())
    return seeds


def mutate(rng: np.random.Generator, data: bytes, seeds: list[bytes]) -> bytes:
    buf = bytearray(data)
    for _ in range(int(rng.integers(1, 4))):
        kind = int(rng.integers(7))
        if kind == 0 and len(buf) > 1:                            # truncation
            buf = buf[: int(rng.integers(0, len(buf)))]
        elif kind == 1 and len(buf):                              # bit flips anywhere
            for _ in range(int(rng.integers(1, 9))):
                i = int(rng.integers(len(buf)))
                buf[i] ^= 1 << int(rng.integers(8))
        elif kind == 2 and len(buf) > 4:                          # bit flips in the headers
            end = min(len(buf), 700)
            for _ in range(int(rng.integers(1, 5))):
                i = int(rng.integers(2, end))
                buf[i] ^= 1 << int(rng.integers(8))
        elif kind == 3 and len(buf):                              # splice from another file
            other = seeds[int(rng.integers(len(seeds)))]
            a, b = sorted(int(x) for x in rng.integers(0, len(other), 2))
            at = int(rng.integers(len(buf)))
            buf[at: at + (b - a)] = other[a:b]
        elif kind == 4 and len(buf):                              # overwrite with marker-ish bytes
            at = int(rng.integers(len(buf)))
            buf[at: at + 2] = bytes(rng.choice([0x00, 0xFF, 0xD9, 0xDA, 0xC4, 0xDB, 0xDD, 0xD0], 2).tolist())
        elif kind == 5:                                           # insertion of random bytes
            at = int(rng.integers(len(buf) + 1))
            buf[at:at] = rng.integers(0, 256, int(rng.integers(1, 32)), dtype=np.uint8).tobytes()
        elif kind == 6 and len(buf) > 10:                         # remove a chunk
            a = int(rng.integers(len(buf)))
            del buf[a: a + int(rng.integers(1, 64))]
    return bytes(buf)


SCRATCH = os.path.join(tempfile.mkdtemp(prefix="dctnet-fuzz-"), "case.jpg")


def decode_windows(rng: np.random.Generator, data: bytes, max_pixels: int) -> None:
    """``_jpeg.decode_windows`` on one file: an item planned from its header, a random window of
    whole MCUs (so a random early stop for single-scan files) into outputs with random padding;
    now and then a window edited to lie outside the plane or the output. A decode that fails
    comes back as its JpegError, with zero windows; a window outside the output raises ValueError
    (both counted as errors)."""
    h = dctnet.read_header(data, max_pixels=max_pixels)
    if h.nbytes > 8 << 20:
        return
    rows, cols = h.mcu
    r0, c0 = int(rng.integers(rows)), int(rng.integers(cols))
    r1, c1 = int(rng.integers(r0, rows)) + 1, int(rng.integers(c0, cols)) + 1
    item = np.zeros(1, GATHER_ITEM)
    item["ncomp"] = h.num_components
    for c, ((hh, v), (bh, bw)) in enumerate(zip(h.sampling, h.blocks)):
        item["bh"][0, c], item["bw"][0, c] = bh, bw
        item["r0"][0, c], item["r1"][0, c], item["c0"][0, c], item["c1"][0, c] = r0 * v, r1 * v, c0 * hh, c1 * hh
    pad = rng.integers(0, 3, 2)
    outs = [np.zeros((1, (r1 - r0 + int(pad[0])) * v, (c1 - c0 + int(pad[1])) * hh, 64), np.int16)
            for hh, v in h.sampling]
    if rng.random() < 0.1:  # a window field edited past the plane, the output or below zero
        field = ("r0", "r1", "c0", "c1")[int(rng.integers(4))]
        item[field][0, int(rng.integers(4))] += int(rng.choice([-1, 1, 7, 1 << 20, -(1 << 40)]))
    srcs = [data]
    mode = int(rng.integers(3))  # a warnings policy: accept, lost data raises, strict
    if rng.random() < 0.5:  # the folder loader's sources: read_headers() reads the file once
        with open(SCRATCH, "wb") as f:
            f.write(data)
        _, errors, srcs = _jpeg.read_headers([SCRATCH], mode, max_pixels, 0)
        if errors[0] is not None:
            raise dctnet.JpegError(str(errors[0]))
    try:
        [failure] = _jpeg.decode_windows(srcs, item, outs, mode, max_pixels, 0)
    except ValueError as exc:
        if "decode_windows" not in str(exc.args[0]):
            raise
        raise dctnet.JpegError(str(exc.args[0])) from None
    if failure is not None:
        assert not any(o.any() for o in outs), "a failed image left data in its windows"
        raise failure


def run(cases: int, seed: int, corpus: str | None, max_pixels: int) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    seeds = seed_files(corpus)
    counts = {"ok": 0, "warned": 0, "error": 0, "saturated": 0}
    out = np.empty(8 << 20, np.uint8)
    for i in range(cases):
        data = mutate(rng, seeds[int(rng.integers(len(seeds)))], seeds)
        mode = i % 5
        try:
            if mode == 0:
                dctnet.read_header(data, max_pixels=max_pixels)
                counts["ok"] += 1
                continue
            if mode == 4:  # the folder loader's path: header, then decode (maybe stopped early) + window copy
                decode_windows(rng, data, max_pixels)
                counts["ok"] += 1
                continue
            if mode == 1:
                c = dctnet.read_coefficients(data, warnings="strict", max_pixels=max_pixels)
            elif mode == 2 and dctnet.read_header(data, max_pixels=max_pixels).nbytes <= out.nbytes:
                c = dctnet.read_coefficients(data, max_pixels=max_pixels, out=out, warnings="accept")
            else:
                c = dctnet.read_coefficients(data, max_pixels=max_pixels)
        except dctnet.JpegError:
            counts["error"] += 1
            continue
        # a result must be self-consistent
        assert len(c.planes) == c.num_components == len(c.sampling)
        for p, (h, v) in zip(c.planes, c.sampling):
            assert p.shape == (c.mcu[0] * v, c.mcu[1] * h, 64)
        counts["warned" if c.num_warnings else "ok"] += 1
        counts["saturated"] += int(c.saturated)
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", default=os.environ.get(
        "DCTNET_CORPUS", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "jpeg-corpus", "files")))
    ap.add_argument("--max-pixels", type=int, default=4_000_000,
                    help="guard for mutated sizes (keeps each case fast; the guard itself is exercised)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    counts = run(args.cases, args.seed, args.corpus, args.max_pixels)
    dt = time.perf_counter() - t0
    print(f"fuzz: {args.cases} cases in {dt:.1f}s, seed {args.seed}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
