"""Importing :mod:`dctnet.transforms` registers every op of the package, with no hand list to
update: an op declared in any module (its class's own ``summary``) is in ``TRANSFORMS``, one dropped
in a new module is found by the package walk, and mixers are known by their class attribute
``acts_on_batch``, not by name."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
import textwrap

import pytest

import dctnet.transforms as T
from dctnet.transforms import registry
from dctnet.transforms.base import RECIPE_OPS, Transform


def test_every_op_declared_in_the_package_is_registered():
    """Every ``Transform`` subclass that declares its own ``summary``, in any module of
    ``dctnet.transforms`` (its subpackages and the lazily imported modules included), is in
    ``TRANSFORMS`` once the package is imported."""
    declared = {}
    for info in pkgutil.walk_packages(T.__path__, "dctnet.transforms."):
        try:
            module = importlib.import_module(info.name)
        except ImportError as e:  # an optional dependency (torchvision) missing: nothing of it to check
            pytest.importorskip(e.name or info.name)
            raise
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Transform) and cls.__dict__.get("summary"):
                declared[cls.__name__] = cls
    assert len(declared) >= 20
    missing = sorted(set(declared) - set(T.TRANSFORMS))
    assert not missing, f"ops declared but not registered: {missing}"
    assert all(T.TRANSFORMS[n] is c for n, c in declared.items())


@pytest.fixture
def new_op_package(tmp_path, monkeypatch):
    """A package with a module that declares an op and a mixer, as a new module of dctnet.transforms
    would; its registrations are taken back afterwards."""
    pkg = tmp_path / "newops"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "perspective.py").write_text(textwrap.dedent('''
        from dctnet.transforms.base import Transform

        class NewPerspective(Transform):
            summary = "a test op"

        class NewMixer(Transform):
            summary = "a test mixer"
            acts_on_batch = True
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    before = dict(RECIPE_OPS)
    yield pkg
    RECIPE_OPS.clear()
    RECIPE_OPS.update(before)
    for name in [m for m in sys.modules if m == "newops" or m.startswith("newops.")]:
        del sys.modules[name]


def test_a_module_dropped_in_the_package_registers_its_op(new_op_package):
    imported = registry.import_op_modules([str(new_op_package)], "newops.")
    assert imported == ["newops.perspective"]
    assert "NewPerspective" in T.TRANSFORMS and "NewMixer" in T.TRANSFORMS
    op = registry.build_transform({"name": "NewPerspective"}, num_classes=None, seed=0)
    assert type(op).__name__ == "NewPerspective"
    # a mixer is known by its class attribute: last in an augment list, and a container of mixers too
    assert registry.is_mixer_spec({"name": "NewMixer"}) and not registry.is_mixer_spec({"name": "NewPerspective"})
    assert registry.is_mixer_spec({"name": "RandomChoice", "transforms": [{"name": "NewMixer"}, {"name": "CutMix"}]})
    assert "NewMixer" in registry._mixer_names()


def test_mixers_are_known_by_their_class_attribute():
    assert T.MIXERS == tuple(n for n, c in T.TRANSFORMS.items() if c.acts_on_batch) == ("Mixup", "MixUp", "CutMix")
    assert not T.Transform.acts_on_batch and not T.RandomChoice.acts_on_batch
    choice = T.RandomChoice([T.MixUp(alpha=1.0, num_classes=10), T.CutMix(alpha=1.0, num_classes=10)])
    assert choice.acts_on_batch and choice.batch_level
    assert not T.RandomChoice([T.RandomHorizontalFlip(), T.RandomVerticalFlip()]).acts_on_batch


def test_the_op_table_order_does_not_follow_the_import_order():
    """The registry is in the op table's module order (registry.TABLE_ORDER, then other modules by
    name), each module's ops as declared, however the modules happened to import one another."""
    modules = [c.__module__.rsplit(".", 1)[-1] for c in T.TRANSFORMS.values()]
    order = registry.TABLE_ORDER
    ranks = [(order.index(m), "") if m in order else (len(order), m) for m in modules]
    assert ranks == sorted(ranks), modules
    assert list(T.TRANSFORMS)[:2] == ["RandomHorizontalFlip", "RandomVerticalFlip"]
    assert list(T.TRANSFORMS)[-3:] == ["RandomChoice", "RandomApply", "RandomOrder"]


def test_every_detection_op_declared_in_the_package_is_registered_and_its_arguments_checked():
    """A ``DetectionOp`` subclass declared in any module of ``dctnet.transforms.detection`` is in its
    registry once the package is imported (the package walks its modules: no list to edit), except
    ``DetectorResize`` (the model's own resize, not an op a list names); a recipe's op list is checked
    against each op's signature and annotations, with a "did you mean"."""
    from dctnet.transforms import detection as TD
    from dctnet.transforms.detection.ops import RECIPE_OPS as DETECTION_OPS, DetectionOp

    declared = {}
    for info in pkgutil.iter_modules(TD.__path__, "dctnet.transforms.detection."):
        for _, cls in inspect.getmembers(importlib.import_module(info.name), inspect.isclass):
            if issubclass(cls, DetectionOp) and cls is not DetectionOp and not cls.__name__.startswith("_"):
                declared[cls.__name__] = cls
    assert set(declared) - set(DETECTION_OPS) == {"DetectorResize"}
    assert len(DETECTION_OPS) >= 17 and all(DETECTION_OPS[n] is c for n, c in declared.items() if n in DETECTION_OPS)
    for spec, says in [({"name": "RandomRotaton", "degrees": 5}, "did you mean 'RandomRotation'"),
                       ({"name": "RandomRotation", "degree": 5}, "unknown argument 'degree'; did you mean 'degrees'"),
                       ({"name": "RandomRotation", "degrees": "x"}, "argument 'degrees': expected a number")]:
        with pytest.raises(ValueError, match=says):
            TD.build_detection_ops([spec])
    assert TD.build_detection_ops([{"name": "RandomRotation", "degrees": [-5, 5]}])[0].degrees == (-5.0, 5.0)
