"""Every task by name: :func:`build_task` makes a recipe's :class:`~dctnet.train.task.Task` (its data
and model built), for the trainer and for ``dctnet browse``, which reads a task's data as training
reads it."""

from __future__ import annotations

from dctnet.train.process import RunProcess
from dctnet.train.recipe import Recipe
from dctnet.train.recipe_tasks import task_of
from dctnet.train.task import Task

__all__ = ["build_task"]


def build_task(recipe: Recipe, process: RunProcess) -> Task:
    """The recipe's task (:func:`~dctnet.train.recipe_tasks.task_of`), its data and model built."""
    task = task_of(recipe)
    if task == "classification":
        from dctnet.train.classification import ClassificationTask  # (each task's modules: loaded by its runs only)

        return ClassificationTask(recipe, process)
    if task == "segmentation":
        from dctnet.train.segmentation import SegmentationTask  # (torchvision's segmenters: their runs only)

        return SegmentationTask(recipe, process)
    from dctnet.train.detection import DetectionTask  # (torchvision's detectors, pycocotools: detection only)

    return DetectionTask(recipe, process)
