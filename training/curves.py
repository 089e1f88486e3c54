"""The training curves of a run, saved next to the model: loss, failures and coverage per round."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence


def plot_training_curves(path: str | Path, history: Sequence[dict[str, Any]], title: str = "") -> Path:
    """Three panels over the counterexample rounds: the loss terms, the trainer's condition and
    containment failures (log scale), and the coverage of the constraint set."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [h["round"] for h in history]
    fig, (ax_loss, ax_fail, ax_cov) = plt.subplots(1, 3, figsize=(12, 3.4), constrained_layout=True)
    for key in sorted({k for h in history for k in h if k.startswith("loss_")}):
        ax_loss.plot(rounds, [h.get(key) for h in history], marker=".", label=key[5:])
    ax_loss.set(xlabel="round", ylabel="loss", title="Loss terms")
    if any(k.startswith("loss_") for h in history for k in h):
        ax_loss.legend(fontsize=8)
    for key, label in (("condition_failures", "condition"), ("containment_failures", "containment")):
        ax_fail.plot(rounds, [max(h.get(key) or 0, 0) + 1 for h in history], marker=".", label=label)
    ax_fail.set(xlabel="round", ylabel="failures + 1", yscale="log", title="Failing states (trainer check)")
    ax_fail.legend(fontsize=8)
    ax_cov.plot(rounds, [h.get("coverage") for h in history], marker=".", color="tab:green")
    ax_cov.set(xlabel="round", ylabel="share of the constraint set", ylim=(0, 1), title="Coverage")
    if title:
        fig.suptitle(title)
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
