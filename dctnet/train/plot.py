"""The end-of-run figure: loss, accuracy and throughput per epoch from ``metrics.jsonl``."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["plot_metrics"]


def plot_metrics(metrics: str | Path, out: str | Path, *, title: str = "") -> Path:
    """Write a PNG with three panels (loss, top-1, images/s and data wait) and return its path."""
    import matplotlib  # heavy and only for the plot, at the end of a run

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt  # after use("Agg"), which must come first

    rows = [json.loads(line) for line in Path(metrics).read_text().splitlines() if line.strip()]
    ep = [r["epoch"] for r in rows]
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    ax[0].plot(ep, [r["train_loss"] for r in rows], "o-", label="train")
    ev = [r for r in rows if "val_loss" in r]
    ax[0].plot([r["epoch"] for r in ev], [r["val_loss"] for r in ev], "s-", label="val")
    ax[0].set_title("loss")
    ax[1].plot(ep, [r["train_acc"] for r in rows], "o-", label="train")
    ax[1].plot([r["epoch"] for r in ev], [r["val_top1"] for r in ev], "s-", label="val top-1")
    ax[1].set_title("accuracy")
    ax[2].plot(ep, [r["images_per_s"] for r in rows], "o-", color="C2", label="images/s")
    ax[2].set_title("throughput")
    twin = ax[2].twinx()
    twin.plot(ep, [100 * r["data_wait"] for r in rows], "x--", color="C3", label="data wait %")
    twin.set_ylim(0, 100)
    for a in ax:
        a.set_xlabel("epoch")
        a.grid(alpha=0.3)
    ax[0].legend()
    ax[1].legend()
    ax[2].legend(loc="lower left")
    twin.legend(loc="lower right")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return Path(out)
