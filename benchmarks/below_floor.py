#!/usr/bin/env python3
"""Below the floor: what stopping the entropy decode after the last MCU row a crop needs saves.

For baseline (single-scan) files the crop box is a function of the image size, which the header
gives, so the decoder can stop after the MCU row holding the window's last row (the window
reaches 2 px past the box). This measures, on the layout sets of benchmarks/layout_sets.py, the
C decode (``_jpeg.time_read``: reused decoder, dequantize, no Python) of the whole image against
the same decode stopped after the rows a RandomResizedCrop (torchvision's defaults) or a
CenterCrop (0.875) box needs. Progressive files always decode in full (each scan refines every
row), so they gain nothing. The folder loader (``ImageFolderDataset.load_collated``) stops the
same way while it streams the rows into the batch (``_jpeg.decode_windows``); this script
measures the stop alone, on the plain decode, in isolation from the rest of the loader.

    python benchmarks/below_floor.py [--images 512] [--sets stored,500x375,4:4:4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

import dctnet
from dctnet import _jpeg
from dctnet import data as D


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from layout_sets import build

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--sets", default="stored,500x375,4:4:4,4:2:2,gray")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print("| set | crop | full decode µs | stopped µs | saved | rows decoded |\n|---|---|---:|---:|---:|---:|")
    for name in args.sets.split(","):
        files = [p for p, _ in D.ImageFolderDataset(build(name, args.images)).samples]
        blobs = [Path(f).read_bytes() for f in files]
        heads = [dctnet.read_header(b) for b in blobs]
        h = np.array([x.height for x in heads])
        w = np.array([x.width for x in heads])
        mcu_h = np.array([8 * x.max_sampling[1] for x in heads])
        mcu_w = np.array([8 * x.max_sampling[0] for x in heads])
        rows_total = np.array([x.mcu[0] for x in heads])
        for crop_name, crop in (("RandomResizedCrop", D.RandomResizedCrop()), ("CenterCrop 0.875", D.CenterCrop())):
            boxes = D.draw_boxes(crop, h, w, 0, 0, np.arange(len(files)))
            stop = D.mcu_windows(boxes, h, w, (mcu_h, mcu_w))[:, 1]
            full, cut = [], []
            for b, s in zip(blobs, stop.tolist()):  # interleaved per file: the same cache state for both
                full.append(min(_jpeg.time_read(b, args.repeats)))
                cut.append(min(_jpeg.time_read(b, args.repeats, s)))
            f_us, c_us = statistics.mean(full) / 1e3, statistics.mean(cut) / 1e3
            print(f"| {name} | {crop_name} | {f_us:.1f} | {c_us:.1f} | {1 - c_us / f_us:.0%} | "
                  f"{(stop / rows_total).mean():.0%} |", flush=True)


if __name__ == "__main__":
    main()
