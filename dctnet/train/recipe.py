"""Training recipes: a YAML file → validated, typed configuration.

A recipe has five sections; every field has a default, so a recipe names only what it changes.
Unknown keys and values of the wrong type or outside their choices are errors that name the key
(and suggest the closest valid name), never silently ignored. ``--set a.b=value`` overrides any
field (values parsed as YAML: ``--set optim.lr=0.1 --set train.amp=off``).

See ``recipes/README.md`` for every field with its meaning. The schema is
:mod:`dctnet.train.recipe_schema`'s, the coercion :mod:`dctnet.train.recipe_coerce`'s, the checks
:mod:`dctnet.train.recipe_check`'s; their names are importable from here.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

import yaml

from dctnet.data.sources import SOURCES
from dctnet.train.recipe_check import check_model_fits, check_recipe, check_recipe_model, input_stats  # noqa: F401
from dctnet.train.recipe_coerce import FOREIGN_KEYS, SUGGEST_CUTOFF, build_config  # noqa: F401
from dctnet.train.recipe_schema import (DEFAULT_AUGMENT, DataConfig, DetectConfig, EmaConfig, ModelConfig,  # noqa: F401
                                        OptimConfig, Recipe, RecipeError, TrainConfig)

__all__ = ["Recipe", "RecipeError", "load_recipe", "parse_overrides"]


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["optim.lr=0.1", "train.amp=off"]`` → nested dict (values parsed as YAML)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise RecipeError(f"--set {item!r}: expected key=value (e.g. optim.lr=0.1)")
        key, raw = item.split("=", 1)
        node = out
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise RecipeError(f"--set {item!r}: {p!r} is a value, not a section")
        node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else ""
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _expand(text: str, name: str) -> str:
    """``${VAR:default}`` → environment variable or default; ``${name}`` → the recipe name."""

    def sub(m: re.Match) -> str:
        var, _, default = m.group(1).partition(":")
        return name if var == "name" else os.environ.get(var, default)

    return re.sub(r"\$\{([^}]+)\}", sub, text)


def _expand_strings(recipe: Recipe) -> None:
    """``${VAR:default}`` and ``${name}`` expanded in every string field of every section and in the
    string arguments of the augment list (the name first, so that it may use the environment too)."""
    recipe.name = _expand(recipe.name, "run")
    for section in (recipe.data, recipe.model, recipe.optim, recipe.train, recipe.detect):
        for f in dataclasses.fields(section):
            value = getattr(section, f.name)
            if isinstance(value, str):
                setattr(section, f.name, _expand(value, recipe.name))
            elif isinstance(value, dict):
                setattr(section, f.name, {k: _expand(v, recipe.name) if isinstance(v, str) else v
                                          for k, v in value.items()})
    for spec in recipe.augment:
        if isinstance(spec, dict):
            for k, v in spec.items():
                if isinstance(v, str) and k != "name":
                    spec[k] = _expand(v, recipe.name)


def load_recipe(path: str | Path | None, overrides: list[str] | dict[str, Any] | None = None) -> Recipe:
    """Read and validate a recipe (``None``: all defaults), applying ``overrides``.

    Relative data paths in the recipe are resolved against the current directory; environment
    references ``${VAR:default}`` (and ``${name}``, the recipe's name) are expanded in every string
    field."""
    where = str(path) if path is not None else "<defaults>"
    values: dict[str, Any] = {}
    if path is not None:
        try:
            values = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError:
            raise RecipeError(f"{path}: no such recipe file") from None
        except yaml.YAMLError as e:
            raise RecipeError(f"{path}: not valid YAML: {e}") from None
        if not isinstance(values, dict):
            raise RecipeError(f"{path}: a recipe is a mapping of sections, got {type(values).__name__}")
    if overrides:
        values = _merge(values, parse_overrides(overrides) if isinstance(overrides, list) else overrides)
    model = values.get("model") if isinstance(values.get("model"), dict) else {}
    data = values.get("data") if isinstance(values.get("data"), dict) else {}
    source = SOURCES.get(data.get("source")) if isinstance(data.get("source"), str) else None
    if source is not None and source.task != "classification" and "input" not in model:
        # a detector's default input is plan A (the unchanged model, decode and geometry on the device):
        # the classification default, dct, would swap a ResNet-FPN backbone's stem unasked
        values = _merge(values, {"model": {"input": "device-rgb"}})
    try:
        recipe = build_config(Recipe, values, "")
    except RecipeError as e:
        raise RecipeError(f"{where}: {e}") from None
    _expand_strings(recipe)
    check_recipe(recipe, where)
    return recipe

