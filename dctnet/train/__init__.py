"""Training from recipes: ``dctnet train RECIPE.yaml`` (also under ``torchrun``).

Data flows one way: recipe → pipeline (datasets, loaders, device transforms) → model → trainer.
"""

from dctnet.train.recipe import Recipe, RecipeError, load_recipe, parse_overrides
from dctnet.train.trainer import Trainer, train

__all__ = ["Recipe", "RecipeError", "Trainer", "load_recipe", "parse_overrides", "train"]
