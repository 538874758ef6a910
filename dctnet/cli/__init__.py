"""The ``dctnet`` command line.

    dctnet info FILE...      header, layout, tables, estimated quality of JPEG files
    dctnet demo              decode built-in JPEGs to coefficients, rebuild RGB on the device,
                             and print fidelity and speed against Pillow
    dctnet convert IN OUT    convert an RGB checkpoint to its DCT-stem model (verified)
    dctnet cache build|info|verify   coefficient caches
    dctnet verify SRC        dataset checks: unreadable, warnings, duplicates, leakage, balance;
                             a cache: every record against its checksum
    dctnet stats SRC OUT     per-(channel, frequency) statistics of a dataset's crops (for Normalize)
    dctnet bench [FOLDER]    per-sample host cost and cores needed: dctnet vs torchvision vs timm
    dctnet train RECIPE      train from a recipe (recipes/*.yaml); also under torchrun
"""

from __future__ import annotations

import argparse
import sys

from dctnet.cli.common import positive, os_error_line
from dctnet.cli.data import (add_cache, add_shards, add_stats, add_verify, verify_cache, verify_shards, cmd_cache,
                             cmd_shards_write, cmd_stats, cmd_verify)
from dctnet.cli.info import add_info, describe, cmd_info
from dctnet.cli.train import (add_bench, add_browse, add_convert, add_demo, add_train, print_bench, cmd_bench,
                              cmd_browse, cmd_convert, cmd_demo, cmd_train)

# The command modules, by role: info (JPEG files), data (caches, datasets, shards, statistics), train
# (training, browsing, benchmarks, the demo, conversion). Every name stays importable from here.
__all__ = ["add_bench", "add_browse", "add_cache", "add_convert", "add_demo", "add_info", "add_shards",
           "add_stats", "add_train", "add_verify", "describe", "positive", "print_bench", "verify_cache",
           "verify_shards", "build_parser", "cmd_bench", "cmd_browse", "cmd_cache", "cmd_convert", "cmd_demo",
           "cmd_info", "cmd_shards_write", "cmd_stats", "cmd_train", "cmd_verify", "main", "os_error_line"]


def build_parser() -> argparse.ArgumentParser:
    """The ``dctnet`` argument parser: one sub-command each, its function in ``func``."""
    parser = argparse.ArgumentParser(prog="dctnet", description="Train image models on JPEG DCT coefficients.")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (add_info, add_demo, add_convert, add_cache, add_shards, add_verify, add_stats, add_bench, add_train,
                add_browse):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
    except OSError as exc:  # every command: a file system's refusal is one line, not a traceback
        print(f"error: {os_error_line(exc)}", file=sys.stderr)
        code = 1
    sys.exit(code)
