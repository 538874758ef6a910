"""Reading JPEG files as dequantized DCT coefficients (the CPU side of dctnet).

The work is done by the C extension ``dctnet._jpeg`` (``csrc/``), which drives libjpeg's
``jpeg_read_coefficients`` with the GIL released. This module gives it a typed Python face:

- :func:`read_header` — header facts only (cheap: no entropy decoding).
- :func:`read_coefficients` — header facts plus one int16 plane per component.
- :func:`read_coefficients_batch` — the same over many sources with a thread pool.

Plane layout: component ``c`` is an ``int16`` array of shape
``(blocks_h[c], blocks_w[c], 64)``, natural coefficient order ``k = 8*v + u`` (``v`` vertical
frequency), holding ``q * Q`` — quantized value times its quantization-table entry, saturated to
the int16 range (``saturated`` says whether that ever happened). Planes are MCU-aligned:
``blocks_h[c] = mcu_rows * v_samp[c]`` and ``blocks_w[c] = mcu_cols * h_samp[c]``, so every grid
is an exact multiple of the others. Only the first ``coded_blocks[c]`` rows/columns come from the
image proper; past them a plane holds the encoder's dummy blocks when the component was coded in
an interleaved scan, and zeros otherwise. ``width``/``height`` give the true image size.
"""

from __future__ import annotations

import errno
import io
import itertools
import os
import stat
import threading
from collections.abc import Iterable, Sequence
from typing import Any, Union

import numpy as np

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_PIXELS",
    "JpegCoefficients",
    "JpegError",
    "JpegHeader",
    "Source",
    "WARNING_POLICIES",
    "libjpeg_floor_ns",
    "libjpeg_version",
    "read_coefficients",
    "read_coefficients_batch",
    "read_header",
]


class JpegError(ValueError):
    """A JPEG that libjpeg (or dctnet) cannot read: corrupt, truncated past recovery, unsupported
    (12-bit, lossless, hierarchical) or refused by a guard (``max_pixels``, scan limit).

    ``reason`` is libjpeg's (or dctnet's) message, ``source`` the file name when known.
    """

    def __init__(self, reason: str, source: str | None = None) -> None:
        super().__init__(reason, source)
        self.reason = reason
        self.source = source

    def __str__(self) -> str:
        return f"{self.source}: {self.reason}" if self.source else self.reason


def _load_extension() -> Any:
    # The extension carries its own libjpeg (third_party/libjpeg-turbo, linked statically with hidden
    # symbols): its jpeg_* calls bind inside it at link time, whatever libjpeg another package has
    # loaded, and it exports nothing but PyInit__jpeg — no dlopen flags needed.
    from dctnet import _jpeg

    _jpeg.set_error_type(JpegError)
    return _jpeg


_jpeg = _load_extension()
_INT16 = np.dtype(np.int16)

#: Same default as Pillow's ``Image.MAX_IMAGE_PIXELS``: refuse larger images unless asked.
DEFAULT_MAX_PIXELS = 89_478_485
#: Bytes of int16 planes a header may make the reader allocate (1 GiB). ``max_pixels`` alone does
#: not bound memory: the planes cost components × sampling × MCU padding per pixel. Every image
#: within ``DEFAULT_MAX_PIXELS`` (up to 4 full-resolution components) fits.
DEFAULT_MAX_BYTES = 1 << 30


def guard_limit(name: str, value: int | None) -> int:
    """A guard value for the extension: ``None``/0 = off; negatives are refused, not wrapped."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int or None, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0 or None (no limit), not {value}")
    return int(value)

#: ``warnings=`` values of the readers and the datasets, and which libjpeg warnings each makes an
#: error. libjpeg warns and goes on in two kinds of cases:
#:
#: * **the image lost data** — "Premature end of JPEG file" (truncated; also found from the
#:   bytes, a file without EOI after its scan, so that every read of the file agrees), and corrupt
#:   entropy-coded data that libjpeg fills with zeros or skips: "premature end of data segment"
#:   (a marker inside the scan data), "bad Huffman code", "bad arithmetic code", "found marker
#:   0x.. instead of RST..";
#: * **nothing was lost** — "N extraneous bytes before marker 0x.." (junk between segments or
#:   before EOI: real ImageNet files carry it), unknown JFIF revision, unknown Adobe transform,
#:   bad ICC marker, odd SOS parameters, an inconsistent progression (the scans present decode).
WARNING_POLICIES = {
    "raise": "warnings that mean lost data raise JpegError; the others are recorded on the result",
    "accept": "no warning raises: libjpeg's fill-in is returned (lost_data says so)",
    "strict": "every warning raises JpegError",
}
_WARN_MODES = {"raise": _jpeg.WARN_LOST, "accept": _jpeg.WARN_ACCEPT, "strict": _jpeg.WARN_ALL}


def warn_mode(warnings: str) -> int:
    """The extension's code for a ``warnings=`` policy (ValueError naming the choices otherwise)."""
    try:
        return _WARN_MODES[warnings]
    except (KeyError, TypeError):
        raise ValueError(f"warnings must be one of {sorted(_WARN_MODES)}, not {warnings!r}") from None


#: What the readers accept: a path, or bytes-like data (bytes, bytearray, memoryview, a numpy
#: uint8 array, an mmap), or a binary file object (read to the end).
Source = Union[str, os.PathLike, bytes, bytearray, memoryview, np.ndarray, Any]

_COLOR_CHANNELS = {"gray": ("Y",), "YCbCr": ("Y", "Cb", "Cr"), "RGB": ("R", "G", "B"),
                   "CMYK": ("C", "M", "Y", "K"), "YCCK": ("Y", "Cb", "Cr", "K")}


def libjpeg_version() -> str:
    """The libjpeg API version the extension was built against, e.g. ``"libjpeg-turbo 2.1.5 (API 62)"``."""
    turbo = getattr(_jpeg, "LIBJPEG_TURBO_VERSION_NUMBER", 0)
    api = _jpeg.JPEG_LIB_VERSION
    if turbo:
        return f"libjpeg-turbo {turbo // 1000000}.{turbo // 1000 % 1000}.{turbo % 1000} (API {api})"
    return f"libjpeg (API {api})"


#: Order of the header tuple the extension returns (csrc/module.c, header_tuple).
_HEADER_FIELDS = ("width", "height", "color_space", "adobe_transform", "jfif", "sof", "process", "precision",
                  "progressive", "arithmetic", "restart_interval", "exif_orientation", "sampling",
                  "component_ids", "quant_index", "quant", "blocks", "coded_blocks", "mcu", "nbytes")


class JpegHeader:
    """Header facts of one JPEG (all from the SOF/DQT/APPn markers; no entropy decoding).

    Attributes:
        width, height: true image size in pixels.
        num_components: number of components (1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK).
        color_space: libjpeg's reading of the file's colour space: ``"gray"``, ``"YCbCr"``,
            ``"RGB"``, ``"CMYK"``, ``"YCCK"`` or ``"unknown"``.
        adobe_transform: the Adobe APP14 transform flag (0 none, 1 YCbCr, 2 YCCK), ``None`` if
            the file has no Adobe marker.
        jfif: whether a JFIF APP0 marker was seen.
        process: ``"baseline"`` (SOF0), ``"extended"`` (SOF1), ``"progressive"`` (SOF2),
            ``"extended-arithmetic"`` (SOF9) or ``"progressive-arithmetic"`` (SOF10).
        sof: the SOF marker number (0..15).
        progressive, arithmetic: coding flags.
        precision: sample precision in bits (always 8 for readable files).
        restart_interval: restart interval in MCUs at the first scan, 0 when none.
        exif_orientation: EXIF orientation tag 1..8, ``None`` when absent.
        sampling: per component ``(h, v)`` sampling factors.
        component_ids: per component identifier byte from the SOF marker.
        quant_index: per component, the DQT slot its quantization table came from.
        quant_tables: ``uint16 (C, 8, 8)``, the table each component is dequantized with, in
            natural order (``[c, v, u]``).
        blocks: per component ``(blocks_h, blocks_w)`` of its MCU-aligned plane.
        coded_blocks: per component libjpeg's ``(height_in_blocks, width_in_blocks)``.
        mcu: ``(mcu_rows, mcu_cols)``.
        nbytes: bytes the int16 planes of all components take.
    """

    __slots__ = ("width", "height", "num_components", "color_space", "adobe_transform", "jfif", "process",
                 "sof", "progressive", "arithmetic", "precision", "restart_interval", "exif_orientation",
                 "sampling", "component_ids", "quant_index", "_quant", "blocks", "coded_blocks", "mcu", "nbytes")

    def __init__(self, fields: tuple) -> None:
        # The extension hands over a flat tuple in _HEADER_FIELDS order (cheapest to build).
        (self.width, self.height, self.color_space, self.adobe_transform, self.jfif, self.sof, self.process,
         self.precision, self.progressive, self.arithmetic, self.restart_interval, self.exif_orientation,
         self.sampling, self.component_ids, self.quant_index, self._quant, self.blocks, self.coded_blocks,
         self.mcu, self.nbytes) = fields
        self.num_components = len(self.sampling)

    @property
    def quant_tables(self) -> np.ndarray:
        """``uint16 (C, 8, 8)`` quantization table of each component, natural order."""
        return np.frombuffer(self._quant, dtype=np.uint16).reshape(-1, 8, 8)

    @property
    def size(self) -> tuple[int, int]:
        """``(height, width)`` in pixels."""
        return self.height, self.width

    @property
    def max_sampling(self) -> tuple[int, int]:
        """``(h_max, v_max)``: the sampling factors of the finest component."""
        return max(h for h, _ in self.sampling), max(v for _, v in self.sampling)

    @property
    def channels(self) -> tuple[str, ...]:
        """Component names for the colour space (``("Y", "Cb", "Cr")`` …); ``C0..Cn`` if unknown."""
        names = _COLOR_CHANNELS.get(self.color_space)
        if names is None or len(names) != self.num_components:
            return tuple(f"C{i}" for i in range(self.num_components))
        return names

    @property
    def subsampling(self) -> str:
        """Chroma layout label: ``"4:4:4"``, ``"4:2:2"``, ``"4:2:0"``, ``"4:4:0"``, ``"4:1:1"``,
        ``"gray"``, or the raw factors like ``"3x2,1x1,1x1"`` for anything else."""
        if self.num_components == 1:
            return "gray"
        s = self.sampling
        if all(f == s[1] for f in s[1:]) and s[1] == (1, 1):
            label = {(1, 1): "4:4:4", (2, 1): "4:2:2", (2, 2): "4:2:0", (1, 2): "4:4:0", (4, 1): "4:1:1",
                     (4, 2): "4:1:0"}.get(s[0])
            if label:
                return label
        return ",".join(f"{h}x{v}" for h, v in s)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.width}x{self.height}, {self.color_space}, {self.subsampling}, "
                f"{self.process}, blocks={list(self.blocks)})")


class JpegCoefficients(JpegHeader):
    """Header facts plus the dequantized coefficient planes of one JPEG.

    Attributes (besides :class:`JpegHeader`'s):
        planes: per component an ``int16 (blocks_h, blocks_w, 64)`` array, natural order
            ``k = 8*v + u``, values ``q * Q`` saturated to int16. Views of ``data``.
        data: the buffer the planes live in (a bytearray, or the caller's ``out``).
        warnings: distinct libjpeg warning texts (e.g. ``"Corrupt JPEG data: 240 extraneous
            bytes before marker 0xd9"``).
        num_warnings: how many warnings libjpeg emitted in all.
        lost_data: whether a warning said the image lost data (libjpeg filled it in); only
            possible when read with ``warnings="accept"`` (see :data:`WARNING_POLICIES`).
        saturated: whether any dequantized value was clamped to the int16 range.
    """

    __slots__ = ("planes", "data", "warnings", "num_warnings", "lost_data", "saturated")

    def __init__(self, result: tuple) -> None:
        fields, self.data, self.warnings, self.num_warnings, self.saturated, lost = result
        self.lost_data = lost > 0
        super().__init__(fields)
        planes = []
        offset = 0
        for bh, bw in self.blocks:  # np.ndarray over the buffer: the cheapest way to make a view
            planes.append(np.ndarray((bh, bw, 64), _INT16, self.data, offset))
            offset += bh * bw * 128
        self.planes: tuple[np.ndarray, ...] = tuple(planes)

    def to_torch(self) -> tuple[Any, ...]:
        """The planes as ``torch.int16`` tensors sharing memory with :attr:`planes` (no copy)."""
        import torch  # the reader layer does not need torch; only this conversion does

        return tuple(torch.from_numpy(p) for p in self.planes)

    def quantized(self) -> tuple[np.ndarray, ...]:
        """The quantized coefficients ``q`` (planes divided by their tables), ``int16``.

        Exact unless :attr:`saturated`; a component with an all-zero table (never scanned in a
        truncated file) gives zeros."""
        out = []
        for plane, table in zip(self.planes, self.quant_tables):
            t = table.reshape(64).astype(np.int32)
            out.append((plane.astype(np.int32) // np.maximum(t, 1)).astype(np.int16))
        return tuple(out)


def open_regular_file(path: str | os.PathLike) -> io.BufferedReader:
    """Open a file for binary reading, refusing anything but a regular file without blocking (a
    FIFO named ``*.jpg`` would otherwise wait for a writer for ever). Raises ``OSError``."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket, device or directory)", os.fsdecode(path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_file(path: str | os.PathLike) -> bytes:
    """A regular file's bytes (see :func:`open_regular_file`)."""
    with open_regular_file(path) as f:
        return f.read()


def _prepare(src: Source) -> Any:
    if isinstance(src, (str, bytes, bytearray, memoryview, np.ndarray)):
        return src
    if isinstance(src, os.PathLike):
        return os.fsdecode(src)
    read = getattr(src, "read", None)
    if read is not None:
        return read()
    return src  # any other buffer-protocol object; the extension reports a TypeError otherwise


def read_header(src: Source, *, max_pixels: int | None = DEFAULT_MAX_PIXELS, max_bytes: int | None = DEFAULT_MAX_BYTES,
                name: str | None = None) -> JpegHeader:
    """Read only the header of a JPEG.

    Args:
        src: a path, bytes-like data (read in place), or a binary file object.
        max_pixels: refuse images with more pixels (``None``: no limit).
        max_bytes: refuse images whose planes would need more bytes (``None``: no limit).
        name: how error messages name a non-path source.

    Raises:
        JpegError: the data is not a readable 8-bit lossy JPEG with 1–4 components, or exceeds
            ``max_pixels`` / ``max_bytes``.
        ValueError: a negative limit.
        OSError: the path cannot be read.
    """
    return JpegHeader(_jpeg.read(_prepare(src), None, _jpeg.WARN_ACCEPT, guard_limit("max_pixels", max_pixels),
                                 guard_limit("max_bytes", max_bytes), True, name))


def read_coefficients(src: Source, *, warnings: str = "raise", max_pixels: int | None = DEFAULT_MAX_PIXELS,
                      max_bytes: int | None = DEFAULT_MAX_BYTES, out: Any = None,
                      name: str | None = None) -> JpegCoefficients:
    """Read a JPEG's dequantized DCT coefficients.

    Args:
        src: a path, bytes-like data (read in place, zero copy), or a binary file object.
        warnings: which libjpeg warnings raise (:data:`WARNING_POLICIES`): ``"raise"`` (default)
            those that mean the image lost data — a truncated file, corrupt entropy-coded data
            that libjpeg fills in — while harmless ones (junk bytes before a marker, …) are only
            recorded; ``"accept"`` none (libjpeg's fill-in, :attr:`JpegCoefficients.lost_data`
            says so); ``"strict"`` every warning.
        max_pixels: refuse images with more pixels before allocating anything (``None``: no limit).
        max_bytes: refuse images whose planes would need more bytes, before allocating anything
            (``None``: no limit). A header alone can ask for gigabytes; this bounds it.
        out: optional writable, C-contiguous buffer (numpy array, bytearray, shared memory, a
            pinned tensor's ``.numpy()``) of at least ``read_header(src).nbytes`` bytes; the
            planes are written there and returned as views of it. ``None`` allocates.
        name: how error messages name a non-path source.

    Returns:
        :class:`JpegCoefficients` with one ``int16 (blocks_h, blocks_w, 64)`` plane per component.

    Raises:
        JpegError: corrupt/unsupported data (incl. more than 4 components), a guard tripped, or a
            warning that ``warnings`` makes an error.
        ValueError: ``out`` is too small or misaligned; a negative limit.
        OSError: the path cannot be read, or is not a regular file (a FIFO is refused, not waited on).
    """
    return JpegCoefficients(_jpeg.read(_prepare(src), out, warn_mode(warnings), guard_limit("max_pixels", max_pixels),
                                       guard_limit("max_bytes", max_bytes), False, name))


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def read_coefficients_batch(srcs: Iterable[Source], *, threads: int | None = None, warnings: str = "raise",
                            max_pixels: int | None = DEFAULT_MAX_PIXELS, max_bytes: int | None = DEFAULT_MAX_BYTES,
                            errors: str = "raise") -> list[JpegCoefficients | JpegError | OSError]:
    """Read many JPEGs on ``threads`` threads (default: the CPUs this process may use).

    The C reader releases the GIL, so threads scale with cores. Each thread takes chunks of up
    to 16 sources from a shared counter and decodes a whole chunk in one GIL-free C call, so the
    GIL is held only to build results (balanced across uneven images, no per-image futures).
    Results come back in input order.

    Args:
        srcs: paths, bytes-like data or file objects.
        threads: worker threads; 1 reads in the calling thread.
        warnings, max_pixels, max_bytes: as for :func:`read_coefficients`.
        errors: ``"raise"`` re-raises the first failure (after all workers stop);
            ``"return"`` puts the exception (:class:`JpegError` or ``OSError``) in its slot.
    """
    if errors not in ("raise", "return"):
        raise ValueError(f"errors must be 'raise' or 'return', not {errors!r}")
    items: Sequence[Source] = srcs if isinstance(srcs, Sequence) else list(srcs)
    n = len(items)
    if threads is None:
        threads = available_cpus()
    threads = max(1, min(int(threads), n))
    results: list[Any] = [None] * n
    limit, byte_limit = guard_limit("max_pixels", max_pixels), guard_limit("max_bytes", max_bytes)
    mode = warn_mode(warnings)
    chunk = max(1, min(16, n // (threads * 8)))
    counter = itertools.count(0, chunk)  # next() on itertools.count is atomic under the GIL

    failures: list[BaseException] = []

    def work() -> None:
        try:
            while True:
                start = next(counter)
                if start >= n:
                    return
                chunk_srcs = [_prepare(src) for src in items[start:start + chunk]]
                for i, r in enumerate(_jpeg.read_many(chunk_srcs, mode, limit, byte_limit), start):
                    results[i] = r if isinstance(r, BaseException) else JpegCoefficients(r)
        except BaseException as exc:  # a bad source type: surfaced in the calling thread
            failures.append(exc)

    if threads == 1:
        work()
    else:
        workers = [threading.Thread(target=work, daemon=True) for _ in range(threads - 1)]
        for w in workers:
            w.start()
        work()
        for w in workers:
            w.join()
    if failures:
        raise failures[0]
    if errors == "raise":
        for r in results:
            if isinstance(r, BaseException):
                raise r
    return results


def libjpeg_floor_ns(data: bytes, repeat: int = 1) -> list[int]:
    """Nanoseconds of each of ``repeat`` whole-image ``jpeg_read_coefficients`` of ``data`` in
    plain C — create, header, read, destroy; no dequantization, no Python: the cost no reader of
    the coefficients can avoid, which benchmarks compare against."""
    return list(_jpeg.time_raw(data, repeat))
