"""dctnet.coerce: the one coercer of recipe fields (lenient: YAML's numbers and bare on/off) and of
ops' arguments (strict), and the "did you mean" both give."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import pytest

from dctnet.coerce import coerce, describe, did_you_mean


def test_strict_takes_what_json_gives_and_nothing_else():
    assert coerce(3, float, "x") == 3.0 and isinstance(coerce(3, float, "x"), float)
    assert coerce([1, 2], tuple[float, float], "x") == (1.0, 2.0)
    assert coerce((1, 2), Sequence[float], "x") == [1.0, 2.0]
    assert coerce([1, 2], tuple[int, ...], "x") == (1, 2)
    assert coerce(None, float | None, "x") is None
    assert coerce(0.5, float | tuple[float, float], "x") == 0.5
    assert coerce({"a": 1}, Any, "x") == {"a": 1}
    for value, hint, match in [("1e-3", float, r"x: expected a number, got '1e-3'"),
                               (9.0, int, "x: expected an integer"), (True, int, "expected an integer"),
                               (3, str, "expected a string"), ([1], tuple[float, float], "a list of 2 values, each a number"),
                               ("a", float | tuple[float, float], "expected a number or a list of 2 values"),
                               ([0.5, "b"], Sequence[float] | None, r"x\[1\]: expected a number, got 'b'")]:
        with pytest.raises(ValueError, match=match):
            coerce(value, hint, "x")


def test_lenient_reads_yaml_numbers_and_bare_off():
    assert coerce("1e-3", float, "x", lenient=True) == 0.001
    assert coerce(9.0, int, "x", lenient=True) == 9 and coerce("+2", int, "x", lenient=True) == 2
    assert coerce(5, str, "x", lenient=True) == "5"
    assert coerce(False, Literal["off", "on"], "x", lenient=True) == "off"
    assert coerce({"images": "a"}, str | dict[str, str], "x", lenient=True) == {"images": "a"}
    with pytest.raises(ValueError, match=r"x: 'jpeg' is not one of 'dct', 'rgb'"):
        coerce("jpeg", Literal["dct", "rgb"], "x", lenient=True)
    with pytest.raises(ValueError, match="x: expected a number"):
        coerce(float("nan"), float, "x", lenient=True)
    with pytest.raises(ValueError, match="x: expected an integer"):
        coerce(1.5, int | None, "x", lenient=True)

    class Custom(ValueError):
        pass

    with pytest.raises(Custom):
        coerce("x", bool, "x", error=Custom)


def test_describe_and_did_you_mean():
    assert describe(float | None) == "a number or null"
    assert describe(tuple[int, str]) == "a list of 2 values (an integer, a string)"
    assert did_you_mean("mixup", ["Mixup", "MixUp", "CutMix"]) == "did you mean 'Mixup' or 'MixUp'?"
    assert did_you_mean("epoch", ["epochs", "lr"], cutoff=0.8) == "did you mean 'epochs'?"
    assert did_you_mean("sampler", ["scale"], cutoff=0.8) == ""
