"""Values checked against type annotations, with messages that name where they came from: the one
coercer of recipe fields (:mod:`dctnet.train.recipe_coerce`) and of the ops' arguments in a recipe's
augment list (:mod:`dctnet.transforms.registry`), and the "did you mean" both give for a misspelt
name. A leaf: it imports nothing of dctnet.

:func:`coerce` takes what YAML and JSON give: lists for tuples, ints for floats. ``lenient=True``
(recipe fields) also reads the strings YAML 1.1 leaves unparsed as numbers (``1e-3``), an integral
float as an int, a number as a string, and a bare ``off``/``on`` (which YAML 1.1 reads as a boolean)
as the choice ``'off'``/``'on'`` of a ``Literal`` that has it. A value that does not fit raises
``error`` (``ValueError`` by default) as ``"<where>: expected <what the annotation takes>, got <value>"``,
or ``"<where>: <value> is not one of <choices>"`` for a ``Literal``.
"""

from __future__ import annotations

import difflib
import math
import re
import types
import typing
from collections.abc import Sequence
from typing import Any, Literal, Union

__all__ = ["coerce", "describe", "did_you_mean", "number"]

_NUMBER = re.compile(r"[+-]?(\d[\d_]*\.?[\d_]*|\.\d[\d_]*)([eE][+-]?\d+)?")


def number(value: Any) -> int | float | None:
    """A finite number from YAML: ints and floats, and the strings YAML 1.1 leaves unparsed
    although they are standard notation (``1e-3``, ``5E4``, ``+2``); ``None`` otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        text = value.strip().replace("_", "")
        value = float(text) if any(ch in text for ch in ".eE") else int(text)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return value
    return None


def did_you_mean(word: Any, choices: Sequence[str], cutoff: float = 0.6) -> str:
    """``"did you mean 'x'?"`` for the name of ``choices`` closest to ``word`` (difflib's ratio at
    least ``cutoff``, compared case-insensitively; names that differ only by case, as timm's ``Mixup``
    and torchvision's ``MixUp``, are all offered), or ``""`` when none is close."""
    by_lower: dict[str, list[str]] = {}
    for c in choices:
        by_lower.setdefault(str(c).lower(), []).append(str(c))
    match = difflib.get_close_matches(str(word).lower(), list(by_lower), n=1, cutoff=cutoff)
    if not match:
        return ""
    return "did you mean " + " or ".join(repr(n) for n in by_lower[match[0]]) + "?"


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (Union, types.UnionType)


def _variadic(hint: Any) -> bool:
    """``tuple[X, ...]``, ``Sequence[X]``, ``list[X]``: a list of any length."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    return origin in (Sequence, list) or origin is tuple and len(args) == 2 and args[1] is Ellipsis


def describe(hint: Any) -> str:
    """What the annotation ``hint`` takes, in words: ``"an integer"``, ``"a number or null"``, ``"a
    list of 2 values, each a number"``, …"""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    named = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null",
             Any: "any value"}
    if hint in named:
        return named[hint]
    if _is_union(hint):
        return " or ".join(describe(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is dict:
        return "a mapping"
    if _variadic(hint):
        return f"a list, each {describe(args[0])}" if args and args[0] is not Any else "a list"
    if origin is tuple:
        kinds = [describe(a) for a in args]
        each = f", each {kinds[0]}" if len(set(kinds)) == 1 else f" ({', '.join(kinds)})"
        return f"a list of {len(args)} values{each}"
    return getattr(hint, "__name__", str(hint))


def coerce(value: Any, hint: Any, where: str, *, lenient: bool = False,
           error: type[Exception] = ValueError) -> Any:
    """``value`` checked against the annotation ``hint`` and converted (lists to tuples, ints to
    floats; with ``lenient``, YAML's unparsed numbers and bare on/off too: module docstring).
    ``error`` names ``where`` when it does not fit; ``TypeError`` for an annotation this does not read."""
    def bad() -> Exception:
        return error(f"{where}: expected {describe(hint)}, got {value!r}")

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if _is_union(hint):
        return _coerce_union(value, hint, where, lenient, error)
    if origin is Literal:
        if lenient and isinstance(value, bool) and "off" in args:
            value = "on" if value else "off"  # YAML 1.1 reads a bare off/on/no/yes as a boolean
        if value not in args:
            raise error(f"{where}: {value!r} is not one of {', '.join(repr(c) for c in args)}")
        return value
    if hint in (type(None), bool, int, float, str):
        return _coerce_scalar(value, hint, lenient, bad)
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise bad()
        if args and args[1] is not Any:
            return {k: coerce(v, args[1], f"{where}.{k}", lenient=lenient, error=error) for k, v in value.items()}
        return dict(value)
    if origin in (tuple, list, Sequence):
        return _coerce_list(value, hint, where, lenient, error, bad)
    if isinstance(hint, type):
        if isinstance(value, hint):
            return value
        raise bad()
    raise TypeError(f"unsupported annotation {hint}")


def _coerce_union(value: Any, hint: Any, where: str, lenient: bool, error: type[Exception]) -> Any:
    """The first alternative of ``hint`` that takes ``value`` (``float | str``: 3 → 3.0); none: the
    error of the only alternative besides None (the more telling), else one naming them all."""
    args = typing.get_args(hint)
    if value is None and type(None) in args:
        return None
    alternatives = [a for a in args if a is not type(None)]
    for a in alternatives:
        try:
            return coerce(value, a, where, lenient=lenient, error=error)
        except error:
            pass
    if len(alternatives) == 1:
        return coerce(value, alternatives[0], where, lenient=lenient, error=error)  # raises its own error
    raise error(f"{where}: expected {describe(hint)}, got {value!r}")


def _coerce_scalar(value: Any, hint: type, lenient: bool, bad: Any) -> Any:
    """``None``, a bool, an int, a float or a string."""
    if hint is type(None):
        if value is None:
            return None
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if lenient:
            n = number(value)
            if n is not None and float(n).is_integer():
                return int(n)
        elif isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        n = number(value) if lenient else value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if n is not None:
            return float(n)
    elif isinstance(value, str):
        return value
    elif lenient and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise bad()


def _coerce_list(value: Any, hint: Any, where: str, lenient: bool, error: type[Exception], bad: Any) -> Any:
    """A tuple of fixed length, or a list (a tuple for ``tuple[X, ...]``) of any length, item by item."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if not isinstance(value, (list, tuple)):
        raise bad()
    if not _variadic(hint):  # tuple[X, Y]
        if len(value) != len(args):
            raise bad()
        return tuple(coerce(v, a, f"{where}[{i}]", lenient=lenient, error=error)
                     for i, (v, a) in enumerate(zip(value, args)))
    item = args[0] if args else Any
    items = [coerce(v, item, f"{where}[{i}]", lenient=lenient, error=error) for i, v in enumerate(value)]
    return tuple(items) if origin is tuple else items
