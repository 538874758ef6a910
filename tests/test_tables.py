"""The int64 tables that cross the C boundary (header rows, plan rows, gather items, copy ranges)
are declared once on each side — a C struct in csrc/ and a structured dtype in
dctnet.data.plan — and checked against each other when dctnet.data.plan is imported: a field
added, moved, resized or renamed on one side only must fail the import, not misread columns."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from dctnet import _jpeg
from dctnet.data import plan as P

I8 = np.dtype(np.int64)
DTYPES = {"header_row": P.HEADER_ROW, "plan_row": P.PLAN_ROW, "gather_item": P.GATHER_ITEM,
          "copy_range": P.COPY_RANGE}


def fields(dtype: np.dtype) -> list[tuple]:
    """A dtype's fields as a list spec, to edit."""
    return [(name, dtype.fields[name][0].base, dtype.fields[name][0].shape) for name in dtype.names]


def mismatches(dtype: np.dtype) -> dict[str, np.dtype]:
    """Deliberately wrong versions of a table's dtype, one edit each."""
    spec = fields(dtype)
    out = {
        "swapped": np.dtype([spec[1], spec[0], *spec[2:]]),
        "renamed": np.dtype([("x" + spec[0][0], *spec[0][1:]), *spec[1:]]),
        "missing last": np.dtype(spec[:-1]),
        "extra field": np.dtype([*spec, ("extra", I8, ())]),
        "int32": np.dtype([(spec[0][0], np.int32, spec[0][2]), *spec[1:]]),
        "uint64": np.dtype([(spec[0][0], np.uint64, spec[0][2]), *spec[1:]]),
        "padded": np.dtype({"names": [s[0] for s in spec], "formats": [(s[1], s[2]) for s in spec],
                            "offsets": [8 + dtype.fields[s[0]][1] for s in spec], "itemsize": dtype.itemsize + 8}),
    }
    arrays = [i for i, s in enumerate(spec) if s[2]]
    if arrays:  # an array field one element longer, and one of the same size in another shape
        i = arrays[0]
        name, base, shape = spec[i]
        out["longer array"] = np.dtype([*spec[:i], (name, base, (int(np.prod(shape)) + 1,)), *spec[i + 1:]])
        other = (shape[1], shape[0]) if len(shape) == 2 and shape[0] != shape[1] else (1, *shape)
        out["reshaped array"] = np.dtype([*spec[:i], (name, base, other), *spec[i + 1:]])
    return out


def test_every_table_of_the_extension_has_a_matching_dtype():
    """The extension exports the four layouts, and each dtype matches its struct field for
    field (the check that ran at import passes again here)."""
    assert set(_jpeg.TABLES) == set(DTYPES)
    for name, dtype in DTYPES.items():
        P.check_table(name, dtype)
        itemsize, c_fields = _jpeg.TABLES[name]
        assert dtype.itemsize == itemsize and dtype.names == tuple(f[0] for f in c_fields)
        assert all(dtype.fields[f][0].base == I8 for f in dtype.names)


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_a_mismatched_dtype_fails_the_check(name):
    """Each deliberately wrong dtype (fields swapped, renamed, missing, extra, another integer type,
    padded, an array longer or reshaped) raises ImportError naming the table."""
    for what, bad in mismatches(DTYPES[name]).items():
        with pytest.raises(ImportError, match=name):
            P.check_table(name, bad)
        assert bad != DTYPES[name], what


def test_a_c_layout_with_padding_or_a_missing_table_fails_the_check():
    """The C side is checked too: its fields must tile the struct (a field the export list left
    out shows as a gap), and a table the extension does not export is an error."""
    itemsize, c_fields = _jpeg.TABLES["copy_range"]
    gap = {"copy_range": (itemsize, c_fields[:1] + c_fields[2:])}  # 'src' left out of the export
    with pytest.raises(ImportError, match="padding"):
        P.check_table("copy_range", P.COPY_RANGE, gap)
    short = {"copy_range": (itemsize + 8, c_fields)}
    with pytest.raises(ImportError, match="bytes"):
        P.check_table("copy_range", P.COPY_RANGE, short)
    with pytest.raises(ImportError, match="no table"):
        P.check_table("copy_range", P.COPY_RANGE, {})


def test_the_import_fails_when_c_and_python_disagree():
    """The check runs when dctnet.data.plan is imported: with the extension's plan_row layout
    changed (as a stale build with one more field would export it), importing dctnet.data fails
    with ImportError naming the table."""
    code = """
import dctnet
from dctnet import _jpeg
size, fields = _jpeg.TABLES["plan_row"]
_jpeg.TABLES["plan_row"] = (size + 8, fields + (("extra", size, 8, ()),))
try:
    import dctnet.data
except ImportError as exc:
    print("ImportError:", exc)
else:
    print("imported")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ImportError:") and "plan_row" in out.stdout, out.stdout


def test_rows_read_by_name_equal_the_c_structs_fields():
    """A plan row written by C reads back by name: one 4:2:0 sample of 64x64 with a box (8, 16,
    24, 32) gives the MCU window, plane windows, valid size, relative box and group expected."""
    out = np.zeros(1, P.PLAN_ROW)
    firsts, need = np.zeros(1, np.int64), np.zeros((1, 2), np.int64)
    samp = np.array([[2, 2], [1, 1], [1, 1], [0, 0]], np.int64)
    one = np.ones(1, np.int64)
    assert _jpeg.plan_windows(one * 3, one * 3, samp, one * 64, one * 64, np.array([8, 16, 24, 32], np.int64), 2, out,
                              firsts, need) == 1
    row = out[0]
    assert row["win"].tolist() == [0, 3, 0, 4] and row["group"] == 0
    assert row["pwin"].tolist() == [[0, 0, 0, 0], [6, 3, 3, 0], [0, 0, 0, 0], [8, 4, 4, 0]]
    assert row["valid"].tolist() == [48, 64] and row["rel"].tolist() == [8, 16, 24, 32]
