"""The literature's benchmark plants: train small barriers at published network sizes, certify
each in continuous time (the boundary (Nagumo) condition the literature proves: `cbfsim
certify --condition boundary`) and, where the plant has inputs, for a 10 ms zero-order hold
(the filter's condition with the margin search; for ReLU networks the tube filter's,
`--condition tube`, whose rows hold over the period on every piece a held input can reach),
and print one Markdown table with cbfsim's
time beside the published time for the same network size (certification.md section 9) and
the targets (issue 21: >= 10x faster than the exact verifier where it published a time).

The barriers come from `cbfsim train` presets (training/presets.py) with small budgets, so a
row may well end "refuted" (the trained barrier is wrong and cbfsim says where) or "not
certified in N s" (undecided): both are reported as they are.  The ReLU rows are distilled by
`cbfsim train` (training/distilled.py) from Softplus teachers (their presets set
teacher_activation) or from barriers written down (teacher: the spacecraft, hi-ord8 and
darboux_relu_256 presets); the designed rows are those barriers themselves
(training/teachers.py).  The published times are the exact ReLU verifier's (Zhang, Wu,
Vorobeychik, Clark, NeurIPS 2023; i7-12700 + RTX 3080), continuous time, no float32 rounding,
boundary condition only, and, as every verifier there, for states in the domain D (no closure)
with the plant's initial set where it has one: so both columns here prove that claim
(`--claim in-domain`), the float32 header's rounding included.

    python benchmarks/certify_suite.py                       # ~2 h on 2 cores, trainings included (the
                                                             # 3 x 16 spacecraft student: 24 min)
    python benchmarks/certify_suite.py --only oa_softplus --time-limit 60 --train-time 60
    python benchmarks/certify_suite.py --out results/certify_suite.md --work results/suite
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DARBOUX = "published 0.27-620 s over 2-20-1 ... 2-512-512-1 ReLU; no per-size time in our notes"
# row -> (preset, network as published, published continuous-time seconds or None, note)
ROWS = {
    "oa_softplus": ("obstacle_avoidance", "3-32-1 Softplus", 7.35, "published 3-32-1 is ReLU"),
    "oa_relu": ("obstacle_avoidance_relu", "3-32-1 ReLU, distilled", 7.35,
                "cbfsim train distils it from a Softplus 3-32-1 trained with condition margin 0.2 "
                "(teacher_activation); trained directly, the ReLU fit was refuted"),
    "oa_softplus_64": ("obstacle_avoidance_64", "3-64-64-1 Softplus", 11748.0, "published 3-64-64-1 is ReLU"),
    "oa_relu_64": ("obstacle_avoidance_relu_64", "3-64-64-1 ReLU, distilled", 11748.0,
                   "distilled from a Softplus 3-64-64-1 trained with condition margin 0.2 (teacher_activation)"),
    "darboux": ("darboux", "2-32-32-1 Softplus", None, DARBOUX),
    "darboux_relu": ("darboux_relu", "2-32-32-1 ReLU, distilled", None, DARBOUX),
    "darboux_designed": ("darboux", "2-32-32-1 ReLU, designed", None,
                         DARBOUX + ". min(x1 + 0.3, x2 - phi(x1)), phi 16 segments under the flow "
                         "(systems.darboux:lower_curve), not trained"),
    "darboux_designed_256": ("darboux", "2-256-256-1 ReLU, designed", None,
                             DARBOUX + ". The same with 128 segments"),
    "darboux_256": ("darboux_256", "2-256-256-1 Softplus", None, DARBOUX),
    "darboux_relu_256": ("darboux_relu_256", "2-256-256-1 ReLU, distilled", None, DARBOUX),
    "spacecraft": ("spacecraft", "6-16-16-16-1 Softplus", None,
                   "published 89 s for 3 x 8 to 13,906 s for 3 x 32, ReLU; 3 x 16 is not in our notes. The "
                   "preset's 3 x 8 fit of the braking set leaves h >= 0 in the keep-out ball (cbfsim verify fails)"),
    "spacecraft_relu": ("spacecraft_relu", "6-16-16-16-1 ReLU, distilled", None,
                        "published 89 s for 3 x 8 to 13,906 s for 3 x 32; 3 x 16 is not in our notes. Trained "
                        "from a random start on the designed 3 x 16 slabs "
                        "(teacher training.teachers:spacecraft_slabs)"),
    "spacecraft_8_relu": ("spacecraft_8_relu", "6-8-8-8-1 ReLU, distilled", 89.0,
                          "trained from a random start on the designed 3 x 8 slabs (teacher "
                          "training.teachers:spacecraft_slabs); students of Softplus teachers stayed refuted"),
    "hi_ord8": ("hi_ord8", "8-16-1 Softplus", 35.0, "published 8-16-1 is ReLU"),
    "hi_ord8_relu": ("hi_ord8_relu", "8-16-1 ReLU, distilled", 35.0,
                     "trained from a random start on the designed half-space "
                     "(teacher training.teachers:hi_ord8_eigen)"),
    "hi_ord8_eigen": ("hi_ord8", "8-16-1 Softplus, designed", 35.0,
                      "w.x + c from A's left eigenvector (systems.hi_ord8:eigen_halfspace), not trained; "
                      "published 8-16-1 is ReLU"),
    "spacecraft_8_designed": ("spacecraft", "6-8-8-8-1 ReLU, designed", 89.0,
                              "a maximum of four braking slabs, +-x and +-y, one knot each "
                              "(systems.spacecraft:braking_terms), not trained"),
    "spacecraft_designed": ("spacecraft", "6-16-16-16-1 ReLU, designed", None,
                            "published 89 s for 3 x 8 to 13,906 s for 3 x 32; 3 x 16 is not in our notes. Four "
                            "braking slabs with three knots each (systems.spacecraft:braking_terms), not trained"),
    "point_robot": ("point_robot", "4-32-32-1 Softplus", None, "the certifier's own scaling study (issue 21); "
                                                               "no published time"),
}
TARGETS = {"point_robot": (60.0, True),    # row -> (seconds, the 10 ms column too) where the target is
           "spacecraft": (600.0, False),   # not 10x a published time for the same network: issue 21's
           "spacecraft_relu": (600.0, False),
           "spacecraft_designed": (600.0, False)}
SPEEDUP = 10.0          # the target: >= 10x faster than the published continuous-time time


# rows whose barrier is written down, not trained -> (its training.teachers function, the widths,
# the 10 ms column's class-K function: the trained row's gamma for that plant, None without input)
DESIGNED = {"hi_ord8_eigen": ("hi_ord8_eigen", (16,), None),
            "spacecraft_8_designed": ("spacecraft_slabs", (8, 8, 8), "linear:1"),
            "spacecraft_designed": ("spacecraft_slabs", (16, 16, 16), "linear:1"),
            "darboux_designed": ("darboux_curve", (32, 32), None),
            "darboux_designed_256": ("darboux_curve", (256, 256), None)}


def train(row: str, work: Path, train_time: float) -> Path:
    """The barrier of ``row`` (trained once into work/row; reused when its card exists)."""
    from training.presets import preset
    from training.trainer import train_barrier
    out = work / row
    if not (out / "model.json").is_file():
        cfg = preset(ROWS[row][0], max_time=train_time)
        train_barrier(cfg, out, progress=False, overwrite=True)
    return out


def designed(row: str, work: Path) -> Path:
    """The written-down barrier of ``row`` as work/row/model.onnx (no card: certified with --system)."""
    from systems import get_system
    from training import teachers
    from training.network import export_onnx
    out = work / row
    out.mkdir(parents=True, exist_ok=True)
    system = get_system(ROWS[row][0])
    function, widths, _ = DESIGNED[row]
    net = getattr(teachers, function)(system, widths)
    export_onnx(net, out / "model.onnx", system.n)
    return out


def certify_row(out: Path, time_limit: float, **kwargs) -> dict:
    """One certification, timed to its verdict (the problem and its header, the falsifier, the
    search: what a verifier's published time measures) and whole (with the certificate's
    coverage report, which proves nothing)."""
    from training.certify import certify
    card = out / "model.json"
    started = time.perf_counter()
    cert = certify(out / "model.onnx", card if card.is_file() else None, time_limit=time_limit, **kwargs)
    wall = time.perf_counter() - started
    # a margin search that also ran out of time at some margin refuted only the margins it
    # tried (the filter's walls), not the barrier: that row is undecided
    undecided = any(t["ended"] in ("time", "budget") for t in cert.margins_tried)
    refuted = [] if undecided else [k for k, c in cert.conditions.items() if c.counterexamples]
    proof = cert.wall_time_s
    whole = f"; {wall:.1f} s with the report"
    if cert.certified:
        verdict = f"certified in {proof:.1f} s{whole}"
    elif refuted:
        margins = cert.reason.split("margins: ", 1)[1] if "margins: " in cert.reason else ""
        verdict = f"refuted ({', '.join(refuted)}{'; margins: ' + margins if margins else ''}) in {proof:.1f} s{whole}"
    else:
        verdict = f"not certified in {proof:.0f} s{whole}"
    return {"verdict": verdict, "certified": cert.certified, "wall": proof, "whole": wall, "boxes": cert.boxes}


def table(results: list[dict]) -> str:
    head = ("| plant (n, m) | network | continuous time, boundary condition, in D: time to the verdict | 10 ms hold, in D (ReLU: the tube filter) | "
            "published (exact verifier, continuous time) | target (>= 10x faster, or issue 21's: point robot both "
            "columns, spacecraft continuous time) | met (time to the verdict) |")
    lines = [head, "|" + "---|" * 7]
    for r in results:
        pub = r["published"]
        limit, both = TARGETS.get(r["row"], (pub / SPEEDUP if pub else None, False))
        target = f"<= {limit:.3g} s" if limit else "n/a"
        timed = [r["ct"]] + ([r["held"]] if both and r["held"] else [])
        met = ("yes" if all(t["certified"] and t["wall"] <= limit for t in timed) else "no") if limit else "n/a"
        boxes = r["ct"]["boxes"]
        ct = r["ct"]["verdict"] + (" (by the falsifier, before any box)" if not boxes["evaluated"] else
                                   f" ({boxes['proven']} proven, {boxes['undecided']} undecided boxes)")
        held = r["held"]["verdict"] if r["held"] else "n/a (no input)"
        published = (f"{pub:g} s" if pub else "see note") + (f" ({r['note']})" if r["note"] else "")
        lines.append(f"| {r['plant']} ({r['n']}, {r['m']}) | {r['network']} | {ct} | {held} | {published} | "
                     f"{target} | {met} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(ROWS), action="extend", default=None,
                        help="rows to run (repeatable: --only a b --only c runs all three)")
    parser.add_argument("--time-limit", type=float, default=90.0, help="seconds per certification (default 90)")
    parser.add_argument("--train-time", type=float, default=90.0, help="seconds per training (default 90)")
    parser.add_argument("--work", type=Path, default=ROOT / "results" / "certify_suite",
                        help="where the trained barriers go (reused when present)")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    parser.add_argument("--workers", default="auto",
                        help="processes per certification, as cbfsim certify's --workers (default: auto)")
    args = parser.parse_args(argv)
    from systems import get_system
    workers = int(args.workers) if args.workers.isdigit() else args.workers
    results = []
    for row in args.only or list(ROWS):
        name, network, published, note = ROWS[row]
        began = time.perf_counter()
        if row in DESIGNED:
            out = designed(row, args.work)
        else:
            out = train(row, args.work, args.train_time)
        trained_s = time.perf_counter() - began
        from training.model_card import load_card
        system = get_system(name if row in DESIGNED else load_card(out / "model.json").system)
        claim = {"scope": "in-domain"}             # the literature's claim: while the states stay in D
        if row in DESIGNED:
            claim["system"] = system.name
        if getattr(system, "initial_set", None) is not None:
            claim["initial_set"] = ["plant"]
        ct = certify_row(out, args.time_limit, condition="boundary", workers=workers, **claim)
        held_k = {"class_k": DESIGNED[row][2]} if row in DESIGNED else {}
        if "ReLU" in network:          # a held input crosses kinks: the tube filter's rows cover them
            held_k["condition"] = "tube"
        held = certify_row(out, args.time_limit, dt=0.01, workers=workers, **claim, **held_k) if system.m else None
        results.append({"row": row, "plant": system.name, "n": system.n, "m": system.m, "network": network,
                        "published": published, "note": note, "ct": ct, "held": held})
        print(f"{row}: trained/loaded in {trained_s:.0f} s; continuous time {ct['verdict']}; "
              f"10 ms {held['verdict'] if held else 'n/a'}", flush=True)
    text = table(results)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
