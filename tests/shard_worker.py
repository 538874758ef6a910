"""Helper for the shard tests, run under torchrun: train a recipe with the classification trainer
and record, per rank and epoch, the sample indices of every batch the trainer trained on (the
batches its training loop consumed, taken at its device step), to ``RECORD.rank{r}.json``."""

from __future__ import annotations

import json
import sys

import torch.distributed as dist


def main() -> None:
    recipe_path, record = sys.argv[1], sys.argv[2]
    from dctnet.train import load_recipe
    from dctnet.train.trainer import Trainer

    trainer = Trainer(load_recipe(recipe_path))
    pipe, seen = trainer.task.pipe, {}
    step = pipe.train_step

    def recorded(batch):  # called once per batch the training loop takes, as it takes it
        seen.setdefault(pipe.epoch, []).extend(batch.index.tolist())
        return step(batch)

    pipe.train_step = recorded
    trainer.fit()
    with open(f"{record}.rank{trainer.rank}.json", "w") as f:
        json.dump({"steps_per_epoch": trainer.steps_per_epoch, "epochs": seen}, f)
    if dist.is_initialized():
        dist.barrier()
    del trainer


if __name__ == "__main__":
    main()
