"""One rule for every recipe field in every task: a field acts in a task's trainer or the recipe check
refuses it there, naming it — never silently ignored. The test walks every leaf field of the schema."""

from __future__ import annotations

import typing

import pytest

from dctnet.train import RecipeError, Recipe, load_recipe
from dctnet.train.recipe_tasks import FIELD_TASKS, TASKS, field_paths

pytest.importorskip("torchvision")

BASE = {
    "classification": {"data": {"source": "folder", "root": "/nonexistent"}, "model": {"arch": "resnet18"}},
    "detection": {"data": {"source": "coco", "root": "/nonexistent",
                           "train": {"images": "train", "annotations": "train.json"},
                           "val": {"images": "val", "annotations": "val.json"}},
                  "model": {"arch": "torchvision:fasterrcnn_resnet50_fpn", "input": "device-rgb"}},
    "segmentation": {"data": {"source": "coco", "root": "/nonexistent",
                              "train": {"images": "train", "annotations": "train.json", "semantic": "s"},
                              "val": {"images": "val", "annotations": "val.json", "semantic": "s"}},
                     "model": {"arch": "torchvision:lraspp_mobilenet_v3_large", "input": "device-rgb",
                               "num_classes": 3}},
}

#: a valid value away from the default, where the type alone does not give one
OTHER = {"data.crop_pct": 0.9, "data.eval_resize": 256, "data.eval_crop": 224, "data.crop_mode": "center",
         "data.eval_interpolation": "bicubic", "data.image_size": 240, "data.scale": [0.2, 1.0],
         "data.synthetic_size": [64, 96], "model.stem": "dct-up", "model.keep": 16, "detect.backbone": "resnet18",
         "detect.returned_layers": [2, 3, 4], "detect.anchor_sizes": [16, 32, 64, 128, 256],
         "detect.model_args": {"box_score_thresh": 0.1}, "detect.ops": [{"name": "RandomHorizontalFlip"}],
         "augment": [{"name": "RandomHorizontalFlip", "p": 0.25}], "detect.preset": "multiscale",
         "detect.min_size": 320, "detect.max_size": 640, "detect.base_size": 256, "detect.crop_size": 224}


def _other(path: str):
    if path in OTHER:
        return OTHER[path]
    obj, hints = Recipe(), None
    for part in path.split("."):
        hints = typing.get_type_hints(type(obj))
        tp, obj = hints[part], getattr(obj, part)
    if typing.get_origin(tp) is typing.Literal:
        return next(v for v in typing.get_args(tp) if v != obj)
    if isinstance(obj, bool):
        return not obj
    if isinstance(obj, int):
        return obj + 1
    if isinstance(obj, float):
        return obj / 2 if obj else 0.05
    if isinstance(obj, str):
        return obj + "_x"
    raise AssertionError(f"no other value for {path} ({obj!r}): add it to OTHER")


def _nested(path: str, value) -> dict:
    out: dict = {}
    *parents, leaf = path.split(".")
    node = out
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    return out


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def test_every_field_of_the_schema_says_where_it_acts():
    paths = field_paths(Recipe())
    assert sorted(paths) == sorted(FIELD_TASKS), (set(paths) ^ set(FIELD_TASKS))
    assert all(tasks and tasks <= set(TASKS) for tasks in FIELD_TASKS.values())


@pytest.mark.parametrize("task", TASKS)
def test_a_field_its_task_does_not_read_is_refused_naming_it(task):
    """For every field that does not act in ``task``: a recipe of that task setting it is refused with
    the field named (the base recipe of each task loads)."""
    load_recipe(None, BASE[task])
    refused = [p for p, tasks in FIELD_TASKS.items() if task not in tasks and p not in ("name",)]
    assert refused
    for path in refused:
        values = _merge(BASE[task], _nested(path, _other(path))) if path != "augment" else \
            {**BASE[task], "augment": OTHER["augment"]}
        with pytest.raises(RecipeError, match=path.split(".")[-1]) as info:
            load_recipe(None, values)
        assert path in str(info.value) or path == "augment", (path, str(info.value))


def test_one_trainer_runs_every_task():
    """One trainer class: in ``dctnet.train`` only :class:`~dctnet.train.trainer.Trainer` has a training
    loop (``fit``) or builds an optimizer, a scheduler, a loss scaler, an EMA or DDP; a task
    (:class:`~dctnet.train.task.Task`) supplies data, model, loss and metrics, and each task of
    :data:`TASKS` has one."""
    import ast
    from pathlib import Path

    import dctnet.train
    from dctnet.train.task import Task

    shared = ("torch.optim.", "GradScaler", "lr_scheduler", "recipe_ema", "DistributedDataParallel", "torch.compile")
    package = Path(dctnet.train.__file__).parent
    loops, builders = [], []
    for path in sorted(package.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(isinstance(f, ast.FunctionDef) and f.name == "fit"
                                                      for f in node.body):
                loops.append(f"{path.stem}.{node.name}")
            if isinstance(node, ast.Call) and any(s in ast.unparse(node.func) for s in shared):
                builders.append(path.stem)
    assert loops == ["trainer.Trainer"], loops
    assert set(builders) <= {"trainer"}, builders  # (bench and demo build no training state)

    from dctnet.train.classification import ClassificationTask
    from dctnet.train.detection import DetectionTask
    from dctnet.train.segmentation import SegmentationTask

    classes = {"classification": ClassificationTask, "detection": DetectionTask, "segmentation": SegmentationTask}
    assert set(classes) == set(TASKS) and all(issubclass(c, Task) for c in classes.values())
