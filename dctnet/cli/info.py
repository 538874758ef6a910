"""``dctnet info``: header, layout, tables and estimated quality of JPEG files; without files, the
libjpeg the extension carries."""

from __future__ import annotations

import argparse
import sys

from dctnet.codec import JpegError, JpegHeader, libjpeg_version, read_coefficients, read_header

# Each command imports the library it runs inside its function ("# lazy"): torch and the training
# stack take seconds to import, and each command pays only for what it runs.


def describe(path: str, hdr: JpegHeader) -> str:
    from dctnet.quality import estimate_quality  # lazy

    lines = [f"{path}",
             f"  size        {hdr.width}x{hdr.height}, {hdr.num_components} components, {hdr.color_space}"
             f" ({hdr.subsampling}), {hdr.process} (SOF{hdr.sof}), {hdr.precision}-bit",
             "  sampling    " + ", ".join(f"{n} {h}x{v}" for n, (h, v) in zip(hdr.channels, hdr.sampling)),
             "  blocks      " + ", ".join(f"{n} {bh}x{bw} (coded {ch}x{cw})" for n, (bh, bw), (ch, cw)
                                           in zip(hdr.channels, hdr.blocks, hdr.coded_blocks)),
             f"  MCU grid    {hdr.mcu[0]} rows x {hdr.mcu[1]} cols; restart interval {hdr.restart_interval or 'none'}",
             f"  markers     JFIF {'yes' if hdr.jfif else 'no'}, Adobe transform "
             f"{hdr.adobe_transform if hdr.adobe_transform is not None else 'none'}, EXIF orientation "
             f"{hdr.exif_orientation or 'none'}",
             f"  coeff bytes {hdr.nbytes} (int16 planes)"]
    seen = set()
    for n, idx, table in zip(hdr.channels, hdr.quant_index, hdr.quant_tables):
        if idx in seen:
            continue
        seen.add(idx)
        q = estimate_quality(table, chroma=idx != hdr.quant_index[0]) if table.any() else float("nan")
        lines.append(f"  table {idx}     used by {n}: max {int(table.max())}, DC {int(table[0, 0])}, "
                     f"estimated IJG quality ~{q:.0f}")
    return "\n".join(lines)


def cmd_info(args: argparse.Namespace) -> int:
    if not args.files:  # the build: what reads the files
        from dctnet import __version__  # (the package's own version)

        print(f"dctnet {__version__}: coefficients read by the libjpeg it carries, {libjpeg_version()} "
              "(third_party/libjpeg-turbo, linked into the extension)")
        return 0
    status = 0
    for path in args.files:
        try:
            hdr = read_coefficients(path) if args.decode else read_header(path)
        except (JpegError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 1
            continue
        print(describe(path, hdr))
        if args.decode:
            print(f"  decode      {hdr.num_warnings} warnings{': ' + '; '.join(hdr.warnings) if hdr.warnings else ''}"
                  f"{', saturated' if hdr.saturated else ''}")
    return status


def add_info(sub) -> None:
    p = sub.add_parser("info", help="print header facts of JPEG files (none: the libjpeg dctnet carries)",
                       description="Header, sampling, block grid, quantization tables and estimated quality; "
                                   "without files, the libjpeg the extension carries.")
    p.add_argument("files", nargs="*", metavar="FILE")
    p.add_argument("--decode", action="store_true", help="also decode the coefficients and report warnings")
    p.set_defaults(func=cmd_info)
