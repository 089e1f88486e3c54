"""The training curves of a run, saved next to the model (training_curves.png): loss, failures
and coverage per round, on one round axis across the certifier's calls, with the certifier's
verdicts and the round whose network was kept marked (docs/training.md, "Reading
training_curves.png").  ``curve_data`` is the figure's data, tested on its own."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

VERDICT_STYLE = {  # verdict -> (colour, marker)
    "certified": ("tab:green", "o"), "refuted": ("tab:red", "X"), "undecided": ("tab:orange", "s")}


def curve_data(history: Sequence[dict[str, Any]], certify_history: Sequence[dict[str, Any]] | None = None
               ) -> dict[str, Any]:
    """What the figure draws. ``rounds`` counts on across phases (an older history that restarts
    at 0 after each certifier call is renumbered); ``kept`` is the round whose network the run
    returned; ``certifier`` holds one verdict per certifier call, placed after the last round
    of the phase it judged (``after_round``)."""
    rounds: list[int] = []
    phases: list[int] = []
    for i, row in enumerate(history):
        if "phase" in row:
            phases.append(int(row["phase"]))
        else:                                   # an older card: a round that does not count on starts a phase
            restart = i > 0 and row.get("round", i) <= history[i - 1].get("round", i - 1)
            phases.append(0 if i == 0 else phases[-1] + int(restart))
        rounds.append(i)                        # rows are appended in order: the row index is the round
    kept = next((r for r, row in zip(rounds, history) if row.get("kept")), None)   # None: not recorded
    series = {key: [row.get(key) for row in history]
              for key in sorted({k for row in history for k in row if k.startswith("loss_")})
              + ["condition_failures", "containment_failures", "coverage"]}
    certifier = []
    for k, call in enumerate(certify_history or []):
        judged = [r for r, p in zip(rounds, phases) if p == k]
        after = judged[-1] if judged else (rounds[-1] if rounds else 0)
        ce = sum((call.get("counterexamples") or {}).values())
        undecided = int((call.get("boxes") or {}).get("undecided") or 0)
        verdict = "certified" if call.get("certified") else "refuted" if ce else "undecided"
        label = ("certified" + (f", margin {call['margin']:g}" if call.get("margin") is not None else "")
                 if verdict == "certified" else f"{ce} counterexample(s)" if ce else f"{undecided} box(es) undecided")
        certifier.append({"call": k, "after_round": after, "verdict": verdict, "counterexamples": ce,
                          "undecided": undecided, "label": label})
    return {"rounds": rounds, "phases": phases, "kept": kept, "series": series, "certifier": certifier}


def plot_training_curves(path: str | Path, history: Sequence[dict[str, Any]], title: str = "",
                         certify_history: Sequence[dict[str, Any]] | None = None,
                         no_rounds: str = "no training rounds:\nthe network is the warm start's fit") -> Path:
    """Three panels over the rounds: the loss terms, the trainer's condition and containment
    failures (log scale) with the certifier's verdicts, and the coverage of the constraint set.
    Each phase between certifier calls is its own segment; a dotted line marks each certifier
    call (numbered above the middle panel, its verdict in the legend), a star the kept round.
    ``no_rounds``: what the loss panel says when there are none."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    data = curve_data(history, certify_history)
    rounds, phases, series, kept = data["rounds"], data["phases"], data["series"], data["kept"]
    fig = Figure(figsize=(13, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax_loss, ax_fail, ax_cov = fig.subplots(1, 3)

    def segments(values: Sequence[Any]):
        for phase in sorted(set(phases)):
            idx = [i for i, p in enumerate(phases) if p == phase]
            yield phase, [rounds[i] for i in idx], [values[i] for i in idx]

    def plot(ax: Any, values: Sequence[Any], label: str, color: str, transform=lambda v: v) -> None:
        ys = [None if v is None else transform(v) for v in values]
        for phase, xs, seg in segments(ys):
            ax.plot(xs, seg, marker=".", color=color, label=label if phase == min(phases) else None)
        if kept is not None and ys[kept] is not None:
            ax.plot([rounds[kept]], [ys[kept]], marker="*", ms=13, color=color, mec="black", mew=0.6, zorder=5)

    loss_keys = [k for k in series if k.startswith("loss_")]
    for j, key in enumerate(loss_keys):
        plot(ax_loss, series[key], key[5:], f"C{j}")
    ax_loss.set(xlabel="round", ylabel="loss (weighted)", title="Loss terms")
    plot(ax_fail, series["condition_failures"], "condition", "C0", lambda v: max(v, 0) + 1)
    plot(ax_fail, series["containment_failures"], "containment", "C1", lambda v: max(v, 0) + 1)
    ax_fail.set(xlabel="round", ylabel="failing states + 1", yscale="log", title="Failing states (trainer check)")
    plot(ax_cov, series["coverage"], "coverage", "tab:green")
    ax_cov.set(xlabel="round", ylabel="share of the constraint set in {h >= 0}", ylim=(0, 1.02),
               title="Coverage (trainer check)")

    handles = {}
    for call in data["certifier"]:
        color, marker = VERDICT_STYLE[call["verdict"]]
        x = call["after_round"] + 0.5
        for ax in (ax_loss, ax_fail, ax_cov):
            ax.axvline(x, color=color, ls=":", lw=1.2)
        ax_fail.plot([x], [call["counterexamples"] + 1], marker=marker, ms=9, color=color, ls="none", zorder=6)
        ax_fail.annotate(str(call["call"] + 1), (x, 1.0), xycoords=("data", "axes fraction"), xytext=(0, 2),
                         textcoords="offset points", ha="center", va="bottom", fontsize=8, color=color)
        handles[f"call {call['call']}"] = Line2D(
            [], [], color=color, marker=marker, ls=":",
            label=f"certifier call {call['call'] + 1} (after round {call['after_round']}): {call['label']}")
    if kept is not None:
        phase_note = f", after certifier call {phases[kept]}" if phases[kept] else ""
        handles["kept"] = Line2D([], [], color="0.3", marker="*", ms=12, mec="black", ls="none",
                                 label=f"kept network: round {rounds[kept]}{phase_note}")
    for ax in (ax_loss, ax_fail, ax_cov):
        ax.set_xlim(-0.5, max([rounds[-1] if rounds else 0] + [c["after_round"] + 1 for c in data["certifier"]]) + 0.5)
    for ax in (ax_loss, ax_fail):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper right")
    if not ax_loss.get_legend_handles_labels()[0]:      # 0 rounds: the label set's fit is the network
        ax_loss.text(0.5, 0.5, no_rounds, ha="center",
                     va="center", transform=ax_loss.transAxes, fontsize=9, color="0.3")
    if handles:
        fig.legend(handles=list(handles.values()), loc="outside lower center", ncol=min(len(handles), 3), fontsize=8,
                   frameon=False, title="dotted line: a certifier call; its marker on the middle panel: "
                                       "counterexamples + 1", title_fontsize=8)
    if title:
        fig.suptitle(title)
    out = Path(path)
    fig.savefig(out, dpi=120)
    return out


def distillation_data(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the distillation figure draws, per counterexample round of a distilled student
    (``training/distil.py``): the states each oracle returned, the certifier's verdict and
    its time against its limit, and the round whose student the run returned (``returned``;
    the last one when none says so)."""
    keys = ("sampled_failures", "walk_below_slack", "walk_violations", "certifier_counterexamples")
    series = {k: [r.get(k) for r in rounds] for k in keys if any(r.get(k) is not None for r in rounds)}
    returned = next((i for i, r in enumerate(rounds) if r.get("returned")), len(rounds) - 1 if rounds else None)
    return {"rounds": list(range(len(rounds))), "series": series,
            "verdicts": [r.get("certifier", "undecided") for r in rounds],
            "certifier_s": [r.get("certifier_s") for r in rounds],
            "certifier_limit_s": [r.get("certifier_limit_s") for r in rounds], "returned": returned}


DISTIL_LABELS = {"sampled_failures": "dense check: failing states", "walk_below_slack": "region walk: pieces below the slack",
                 "walk_violations": "region walk: violating pieces",
                 "certifier_counterexamples": "certifier: counterexamples"}


def plot_distillation_rounds(path: str | Path, rounds: Sequence[dict[str, Any]], title: str = "") -> Path:
    """Two panels over a distilled student's counterexample rounds: what each oracle found
    (+ 1, log scale), with the certifier's verdict as the marker's colour, and the certifier's
    time against its limit.  The star marks the returned student.  For a student whose teacher
    was written down, this is the whole training."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    data = distillation_data(rounds)
    xs = data["rounds"]
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax_found, ax_time = fig.subplots(1, 2)
    for j, (key, values) in enumerate(data["series"].items()):
        ax_found.plot(xs, [None if v is None else v + 1 for v in values], marker=".", color=f"C{j}",
                      label=DISTIL_LABELS.get(key, key))
    for x, verdict in zip(xs, data["verdicts"]):
        color, marker = VERDICT_STYLE.get(verdict, ("0.5", "o"))
        ax_found.axvline(x, color=color, ls=":", lw=1.0)
        ax_time.plot([x], [data["certifier_s"][x] or 0.0], marker=marker, color=color, ls="none", ms=8)
    ax_time.plot(xs, data["certifier_limit_s"], color="0.4", ls="--", label="certifier's time limit")
    ax_time.plot([], [], marker="o", ls="none", color="0.5", label="certifier's time (colour: its verdict)")
    if data["returned"] is not None and xs:
        r = data["returned"]
        ax_time.plot([r], [data["certifier_s"][r] or 0.0], marker="*", ms=14, color="gold", mec="black", ls="none",
                     label=f"returned student: round {r}", zorder=5)
    ax_found.set(xlabel="round", ylabel="states or pieces + 1", yscale="log",
                 title="What each oracle found (dotted line: the certifier's verdict)")
    ax_time.set(xlabel="round", ylabel="seconds", title="The certifier's call")
    for ax in (ax_found, ax_time):
        ax.set_xlim(-0.5, (xs[-1] if xs else 0) + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    legend = [Line2D([], [], color=c, marker=m, ls=":", label=v) for v, (c, m) in VERDICT_STYLE.items()]
    fig.legend(handles=legend, loc="outside lower center", ncol=3, fontsize=8, frameon=False,
               title="the certifier's verdict per round", title_fontsize=8)
    if title:
        fig.suptitle(title)
    out = Path(path)
    fig.savefig(out, dpi=120)
    return out
