"""The coefficient reader against libjpeg (via jpeglib), the corpus catalog and crafted files."""

from __future__ import annotations

import io
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dctnet
from dctnet.synthetic import synthetic_jpeg

from conftest import ROOT, corpus_file, corpus_params, corpus_rows, jpeglib_components

READABLE = corpus_params(lambda r: not r["libjpeg_coef"].startswith("error"))
REJECTED = corpus_params(lambda r: r["libjpeg_coef"].startswith("error"))
WARNING = corpus_params(lambda r: r["libjpeg_coef"].startswith("warning"))


def check_against_libjpeg(path: str) -> None:
    """Quantized coefficients and tables bit-identical to libjpeg's; planes = sat(q × Q). Read
    with warnings="accept": jpeglib returns libjpeg's fill-in for files that lost data too."""
    ours = dctnet.read_coefficients(path, warnings="accept")
    coefs, tables = jpeglib_components(path)
    assert ours.num_components == len(coefs)
    mcu_rows, mcu_cols = ours.mcu
    for c, (plane, ref, table) in enumerate(zip(ours.planes, coefs, tables)):
        h, v = ours.sampling[c]
        assert plane.dtype == np.int16
        assert plane.shape == (mcu_rows * v, mcu_cols * h, 64), "planes must be MCU-aligned"
        assert ours.coded_blocks[c] == ref.shape[:2]
        np.testing.assert_array_equal(ours.quant_tables[c].reshape(64), table)
        expected = np.clip(ref.astype(np.int64) * table.astype(np.int64), -32768, 32767)
        np.testing.assert_array_equal(plane[: ref.shape[0], : ref.shape[1]], expected)


@pytest.mark.parametrize("row", READABLE)
def test_corpus_coefficients_match_libjpeg(row):
    if "Fractional sampling" in row["libjpeg_decode"]:
        # jpeglib sets up a full decompression, which libjpeg refuses for these layouts; only the
        # coefficient read works. Shapes are still checked here, values by the pixel tests.
        c = dctnet.read_coefficients(corpus_file(row))
        assert [p.shape[:2] for p in c.planes] == [(c.mcu[0] * v, c.mcu[1] * h) for h, v in c.sampling]
        assert not c.warnings
        pytest.skip("jpeglib cannot open fractional-sampling files")
    check_against_libjpeg(corpus_file(row))


def test_imagenette_coefficients_match_libjpeg(imagenette_sample):
    for path in imagenette_sample:
        check_against_libjpeg(path)


def test_synthetic_coefficients_match_libjpeg(synthetic_files):
    for path in synthetic_files:
        check_against_libjpeg(path)


def _catalog_int(value: str) -> int | None:
    return int(value) if value.strip().isdigit() else None


@pytest.mark.parametrize("row", READABLE)
def test_corpus_header_matches_catalog(row):
    hdr = dctnet.read_header(corpus_file(row))
    assert (hdr.width, hdr.height) == (int(row["width"]), int(row["height"]))
    assert hdr.num_components == int(row["num_components"])
    assert hdr.sampling == tuple(tuple(int(x) for x in f.split("x")) for f in row["subsampling"].split(","))
    assert hdr.color_space == {"Y": "gray"}.get(row["libjpeg_colorspace"], row["libjpeg_colorspace"])
    assert hdr.sof == int(row["sof_type"][3:])
    assert hdr.progressive == (hdr.sof in (2, 10))
    assert hdr.arithmetic == (hdr.sof in (9, 10))
    # the catalog lists one interval per scan ("21/42/...") when it changes; we report the first
    assert hdr.restart_interval == (_catalog_int(row["restart_interval"].split("/")[0]) or 0)
    assert hdr.exif_orientation == _catalog_int(row["exif_orientation"])
    assert hdr.adobe_transform == _catalog_int(row["adobe_transform"])
    assert hdr.precision == 8


@pytest.mark.parametrize("row", REJECTED)
def test_corpus_rejected_files_raise(row):
    """libjpeg's own reason under warnings="accept"; by default a file cut before its image data
    raises at the cut (it lost data) before libjpeg gets to its error."""
    path = corpus_file(row)
    with pytest.raises(dctnet.JpegError) as default:
        dctnet.read_coefficients(path)
    assert default.value.source == path and path in str(default.value)
    with pytest.raises(dctnet.JpegError) as info:
        dctnet.read_coefficients(path, warnings="accept")
    assert info.value.source == path and path in str(info.value)
    assert default.value.reason in (info.value.reason, "Premature end of JPEG file: the image lost data "
                                    "(warnings='accept' reads what libjpeg recovers)")
    reason = row["libjpeg_coef"].split(":", 1)[1].replace("[header] ", "")
    if "precision 12" in reason:
        assert "unsupported" in info.value.reason and "12-bit" in info.value.reason
    else:
        assert info.value.reason == reason


#: libjpeg's texts of the warnings after which the image lost data (libjpeg filled it in): the
#: file ended early, or corrupt entropy-coded data was zero-filled or skipped up to a marker
LOST_DATA_TEXTS = ("Premature end of JPEG file", "Corrupt JPEG data: premature end of data segment",
                   "Corrupt JPEG data: bad Huffman code", "Corrupt JPEG data: bad arithmetic code",
                   "Corrupt JPEG data: found marker")


@pytest.mark.parametrize("row", WARNING)
def test_corpus_warnings_by_class(row):
    """Every warning is recorded under "accept"; by default the files whose warnings say data was
    lost raise (naming the file and the warning) and the others read with their warnings;
    "strict" raises on any warning."""
    path = corpus_file(row)
    c = dctnet.read_coefficients(path, warnings="accept")
    assert c.num_warnings >= 1 and c.warnings
    first = row["libjpeg_coef"].split(":", 1)[1].replace(" (+more)", "")
    assert first in c.warnings
    lost = any(w.startswith(LOST_DATA_TEXTS) for w in c.warnings)
    assert c.lost_data == lost
    if lost:
        with pytest.raises(dctnet.JpegError, match="lost data") as info:
            dctnet.read_coefficients(path)
        assert info.value.source == path
        assert any(info.value.reason.startswith(w) for w in c.warnings)
    else:
        kept = dctnet.read_coefficients(path)
        assert kept.warnings == c.warnings and not kept.lost_data
        assert all(np.array_equal(a, b) for a, b in zip(kept.planes, c.planes))
    with pytest.raises(dctnet.JpegError, match="strict"):
        dctnet.read_coefficients(path, warnings="strict")


def test_both_warning_classes_are_in_the_corpus():
    """The class test above sees files of each kind (a corpus change could leave one untested)."""
    rows = [r for r in corpus_rows() if r["libjpeg_coef"].startswith("warning")]
    if not rows:
        pytest.skip("corpus not found")
    kinds = {any(w.startswith(LOST_DATA_TEXTS) for w in dctnet.read_coefficients(corpus_file(r),
                                                                                warnings="accept").warnings)
             for r in rows}
    assert kinds == {True, False}


def _replace_sof(data: bytes, new_marker: int) -> bytes:
    i = data.index(b"\xff\xc0")
    return data[:i + 1] + bytes([new_marker]) + data[i + 2:]


@pytest.mark.parametrize("marker,word", [(0xC3, "lossless"), (0xC7, "lossless"), (0xCB, "lossless"),
                                         (0xC5, "hierarchical")])
def test_lossless_and_hierarchical_rejected(marker, word):
    data = _replace_sof(synthetic_jpeg(1, 32, 32), marker)
    with pytest.raises(dctnet.JpegError, match=f"unsupported JPEG: {word}"):
        dctnet.read_coefficients(data, name="crafted.jpg")
    with pytest.raises(dctnet.JpegError):
        dctnet.read_header(data)


def test_12bit_precision_rejected():
    data = bytearray(synthetic_jpeg(1, 32, 32))
    i = data.index(b"\xff\xc0")
    data[i + 4] = 12
    with pytest.raises(dctnet.JpegError, match="12-bit"):
        dctnet.read_coefficients(bytes(data))


def test_empty_and_garbage_inputs():
    for data in (b"", b"\xff", b"\xff\xd8", b"not a jpeg at all", bytes(1000)):
        with pytest.raises(dctnet.JpegError):
            dctnet.read_coefficients(data, name="junk")


def _set_dqt(data: bytes, value: int) -> bytes:
    """Every 8-bit DQT entry set to ``value`` (the entropy-coded values stay as they were)."""
    out = bytearray(data)
    i = 2
    while i < len(out) - 4:
        assert out[i] == 0xFF
        marker, length = out[i + 1], int.from_bytes(out[i + 2:i + 4], "big")
        if marker == 0xDA:
            break
        if marker == 0xDB:
            j = i + 4
            while j < i + 2 + length:
                assert out[j] >> 4 == 0, "8-bit tables only"
                out[j + 1:j + 65] = bytes([value]) * 64
                j += 65
        i += 2 + length
    return bytes(out)


def test_dequantization_saturates_and_flags():
    # Quality 100 codes large quantized values (table of ones); a table of 255s then overflows int16.
    src = synthetic_jpeg(3, 64, 64, quality=100, subsampling="4:4:4")
    assert not dctnet.read_coefficients(src).saturated
    crafted = _set_dqt(src, 255)
    c = dctnet.read_coefficients(crafted)
    assert c.saturated
    q = dctnet.read_coefficients(src).planes  # table of ones: planes are the quantized values
    for plane, qv in zip(c.planes, q):
        np.testing.assert_array_equal(plane, np.clip(qv.astype(np.int64) * 255, -32768, 32767))


def test_max_pixels_guard_refuses_before_allocating():
    data = bytearray(synthetic_jpeg(2, 16, 16))
    i = data.index(b"\xff\xc0")
    data[i + 5:i + 9] = (60000).to_bytes(2, "big") + (60000).to_bytes(2, "big")  # 3.6 Gpx claimed
    with pytest.raises(dctnet.JpegError, match="max_pixels"):
        dctnet.read_coefficients(bytes(data))
    with pytest.raises(dctnet.JpegError, match="max_pixels"):
        dctnet.read_header(synthetic_jpeg(2, 64, 64), max_pixels=64 * 63)
    assert dctnet.read_header(synthetic_jpeg(2, 64, 64), max_pixels=64 * 64).width == 64


def test_sources_are_equivalent(tmp_path):
    data = synthetic_jpeg(4, 40, 56)
    path = tmp_path / "a.jpg"
    path.write_bytes(data)
    ref = dctnet.read_coefficients(data)
    for src in (str(path), path, bytearray(data), memoryview(data), np.frombuffer(data, np.uint8),
                io.BytesIO(data)):
        got = dctnet.read_coefficients(src)
        for a, b in zip(got.planes, ref.planes):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError):
        dctnet.read_coefficients(12345)
    with pytest.raises(FileNotFoundError):
        dctnet.read_coefficients(tmp_path / "missing.jpg")
    with pytest.raises(IsADirectoryError):
        dctnet.read_coefficients(tmp_path)


def test_header_only_matches_full_read(synthetic_files):
    for path in synthetic_files:
        h, c = dctnet.read_header(path), dctnet.read_coefficients(path)
        for field in ("width", "height", "sampling", "blocks", "coded_blocks", "mcu", "nbytes", "color_space",
                      "process", "component_ids", "quant_index"):
            assert getattr(h, field) == getattr(c, field), field
        np.testing.assert_array_equal(h.quant_tables, c.quant_tables)
        assert c.nbytes == sum(p.nbytes for p in c.planes)


def test_out_buffer_receives_planes():
    data = synthetic_jpeg(5, 48, 80)
    need = dctnet.read_header(data).nbytes
    out = np.zeros(need + 100, np.uint8)
    c = dctnet.read_coefficients(data, out=out)
    ref = dctnet.read_coefficients(data)
    for a, b in zip(c.planes, ref.planes):
        np.testing.assert_array_equal(a, b)
        assert np.shares_memory(a, out)
    with pytest.raises(ValueError, match="needs"):
        dctnet.read_coefficients(data, out=np.zeros(need - 2, np.uint8))
    with pytest.raises(ValueError, match="aligned"):
        dctnet.read_coefficients(data, out=np.zeros(need + 2, np.uint8)[1:])
    with pytest.raises(BufferError):
        dctnet.read_coefficients(data, out=bytes(need))


def test_to_torch_shares_memory():
    c = dctnet.read_coefficients(synthetic_jpeg(6, 32, 32))
    for t, p in zip(c.to_torch(), c.planes):
        assert t.dtype.is_floating_point is False and tuple(t.shape) == p.shape
        assert t.data_ptr() == p.ctypes.data


def test_labels_and_names():
    c = dctnet.read_coefficients(synthetic_jpeg(7, 24, 24, subsampling="4:2:2"))
    assert c.subsampling == "4:2:2" and c.channels == ("Y", "Cb", "Cr") and c.size == (24, 24)
    assert "libjpeg-turbo" in dctnet.libjpeg_version()
    g = dctnet.read_coefficients(synthetic_jpeg(7, 24, 24, gray=True))
    assert g.subsampling == "gray" and g.color_space == "gray" and g.channels == ("Y",)


def test_batch_matches_serial_and_reports_errors(synthetic_files):
    serial = [dctnet.read_coefficients(p) for p in synthetic_files]
    for threads in (1, 2, 4):
        batch = dctnet.read_coefficients_batch(synthetic_files, threads=threads)
        for a, b in zip(batch, serial):
            for pa, pb in zip(a.planes, b.planes):
                np.testing.assert_array_equal(pa, pb)
    mixed = [synthetic_files[0], b"garbage", synthetic_files[1]]
    with pytest.raises(dctnet.JpegError):
        dctnet.read_coefficients_batch(mixed, threads=2)
    res = dctnet.read_coefficients_batch(mixed, threads=2, errors="return")
    assert isinstance(res[1], dctnet.JpegError) and isinstance(res[0], dctnet.JpegCoefficients)


def _run(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _other_libjpeg() -> pathlib.Path:
    import jpeglib

    libs = sorted(pathlib.Path(jpeglib.__file__).parent.glob("cjpeglib/cjpeglib_9e*.so"))
    if not libs:
        pytest.skip("jpeglib's libjpeg 9e build not found")
    return libs[0]


def test_other_libjpeg_in_global_scope_does_not_capture_ours(synthetic_files):
    """A libjpeg 9 exporting jpeg_* globally (RTLD_GLOBAL) before dctnet loads must not be the
    one our extension binds to (it would fail with 'Wrong JPEG library version' or worse)."""
    lib = _other_libjpeg()
    path = synthetic_files[0]
    expected = dctnet.read_coefficients(path).planes[0].sum(dtype=np.int64)
    out = _run(f"""
        import ctypes, os
        ctypes.CDLL({str(lib)!r}, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
        import numpy as np, dctnet
        print(dctnet.read_coefficients({path!r}).planes[0].sum(dtype=np.int64))
    """)
    assert int(out) == int(expected)


def test_dctnet_does_not_leak_libjpeg_symbols_to_jpeglib(synthetic_files):
    path = synthetic_files[0]
    out = _run(f"""
        import jpeglib
        jpeglib.version.set('turbo210')
        import dctnet, numpy as np
        c = dctnet.read_coefficients({path!r})
        d = jpeglib.read_dct({path!r})
        print(int(np.array_equal(np.asarray(d.qt)[d.quant_tbl_no[0]].reshape(64), c.quant_tables[0].reshape(64))))
    """)
    assert out.strip() == "1"
