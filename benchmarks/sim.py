"""Closed-loop simulation benchmark: Van der Pol with a compiled 2-64-64-1 ReLU barrier.

Plant ``van_der_pol`` (mu = 1, |u| <= 2), nominal controller ``zero``, 10 s at 1 kHz
(10,000 control steps, one RK4 step each), first-order CBF condition with alpha(h) = h.
The barrier is the shipped model ``experiments/models/vdp.onnx`` (with its card's system
parameters) when it exists, otherwise ``training.architectures.mlp([2, 64, 64, 1], "relu",
seed=0)`` with its random weights (the header line says which); either way compiled with
``cbfsim.runtime.compile_barrier`` (float, order 1).

Rows:
  (a) one trajectory from x0 = (0.5, 0.5), OSQP filter (``CBFQP``: two-phase OSQP + exact KKT refinement)
  (b) the same trajectory with the exact closed-form projection (``CBFProjection``)
  (c) 1,000 trajectories x 10,000 steps in one ``simulate_batch`` call, projection filter;
      X0 ~ U(-2, 2)^2 (seed 0) with X0[0] = x0, so its first run must equal (b)
  (d) reference: the nominal loop (no filter, u = clip(u_nom)); the barrier still records h,
      and its "filter" column is the simulator's own clip of u_nom

Columns: wall = median wall-clock seconds of the ``simulate`` call over the repeats;
steps/s = control steps (state-steps for the batch: B x T) per second of wall; then the
accumulators of ``metadata["timing"]`` (medians over repeats): controller, barrier (h and
Lie derivatives), filter (the QP / projection call) and integration (RK4), each as seconds
and share of wall; "other" is wall minus those four (the simulator's recording and checks).
Targets: (a) <= 1 s with the filter the largest share, (c) <= 30 s (2 cores); they are
judged on the full run only (--quick / --steps / --batch print n/a: per-step overheads do
not scale with the work). The correctness lines give max |dx| over all steps: batched run 0
vs (b), which must be 0, and OSQP (a) vs projection (b), which agree to the refinement's
~1e-10 KKT tolerance or better. The filter is not skipped on any step: every step of (a)
runs OSQP (hard phase, relaxed phase when needed) and the exact refinement; the "QP stats"
line counts them.

Reproduce (about 30 s on 2 busy cores; --quick: 2,000 steps, 100 trajectories, ~8 s):

    python benchmarks/sim.py [--quick] [--repeats 5] [--out results/sim.md]
    git archive <commit> | tar -x -C /tmp/before    # e.g. the code before an optimisation ...
    python benchmarks/sim.py --root /tmp/before      # ... measured with the same script and model

Timings are wall clock on whatever else the machine runs: quote medians.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PARTS = ("controller_s", "barrier_s", "filter_s", "integration_s")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--quick", action="store_true", help="2,000 steps and 100 trajectories (targets n/a)")
    p.add_argument("--steps", type=int, help="control steps per trajectory (default 10,000; quick 2,000)")
    p.add_argument("--batch", type=int, help="trajectories in run (c) (default 1,000; quick 100)")
    p.add_argument("--repeats", type=int, default=5, help="repeats of the single-trajectory runs (median)")
    p.add_argument("--batch-repeats", type=int, default=1, help="repeats of the batched run (c)")
    p.add_argument("--floor", action="store_true", help="only simulate against the hand loop (VdP OSQP, pendulum)")
    p.add_argument("--out", type=Path, help="also write the Markdown to this file")
    p.add_argument("--root", type=Path, default=REPO,
                   help="checkout to import cbfsim, systems, training and compiler from (default: this one)")
    return p.parse_args(argv)


def load_barrier():
    """(CompiledBarrier, description, system params): the shipped ONNX model (and its card's
    system parameters) if present, else seeded random weights and the default parameters."""
    from cbfsim.barriers import CompiledBarrier
    from cbfsim.runtime import compile_barrier
    onnx = REPO / "experiments" / "models" / "vdp.onnx"
    if onnx.is_file():
        card = onnx.with_suffix(".json")
        params = json.loads(card.read_text()).get("system_params", {}) if card.is_file() else {}
        lib = compile_barrier(onnx, inputs=1, order=1, name="vdp")
        return CompiledBarrier(lib), f"shipped model `{onnx.relative_to(REPO)}`", params
    import torch
    from training.architectures import mlp
    torch.set_num_threads(1)
    net = mlp([2, 64, 64, 1], "relu", seed=0)
    desc = f"random weights, `mlp([2, 64, 64, 1], 'relu', seed=0)` ({onnx.relative_to(REPO)} not found)"
    return CompiledBarrier(compile_barrier(net, inputs=1, order=1, name="vdp_bench")), desc, {}


def timed(run, repeats):
    """Run ``run()`` repeats times; (last trajectory, median wall, median timing accumulators)."""
    walls, parts = [], {k: [] for k in PARTS}
    for _ in range(repeats):
        start = time.perf_counter()
        traj = run()
        walls.append(time.perf_counter() - start)
        for k in PARTS:
            parts[k].append(traj.metadata["timing"][k])
    return traj, statistics.median(walls), {k: statistics.median(v) for k, v in parts.items()}, walls


def row(label, work, wall, parts, walls):
    other = wall - sum(parts.values())
    cells = [label, f"{wall:.3f}", f"{work / wall:,.0f}"]
    cells += [f"{parts[k]:.3f} ({100 * parts[k] / wall:.0f}%)" for k in PARTS]
    cells += [f"{other:.3f} ({100 * other / wall:.0f}%)", f"{min(walls):.3f}-{max(walls):.3f}"]
    return "| " + " | ".join(cells) + " |"


def compiled_engine_rows(X0, T: int, dt: float, numpy_rate: float, repeats: int) -> list[str]:
    """(e) the compiled closed loop (cbfsim/engine.py, the firmware's step.hpp over the batch)
    beside (f) a C loop over the barrier call alone, the floor: ns per state-step, both ratios."""
    import numpy as np
    from cbfsim.card_run import shipped_card_run
    from cbfsim.engine import build_engine
    run = shipped_card_run("vdp", x0=tuple(X0[0]), dt=dt)
    loop = build_engine(run.model, run.config)
    loop.run(X0[:2], 10)                                          # warm-up
    wall_e = float(np.median([_wall(lambda: loop.run(X0, T)) for _ in range(max(1, repeats))]))
    states = np.ascontiguousarray(np.tile(X0, (max(1, 1_000_000 // len(X0)), 1)), dtype=np.float32)
    wall_f = float(np.median([_wall(lambda: loop.barrier_only(states)) for _ in range(3)]))
    step_ns, call_ns = 1e9 * wall_e / (len(X0) * T), 1e9 * wall_f / len(states)
    ratio = step_ns / call_ns
    return [f"Compiled engine (float32, margin {getattr(run.config.margin, 'eps', run.config.margin):g}, {len(X0):,} runs x {T:,} steps; median of "
            f"{max(1, repeats)}) against the barrier call alone (median of 3 passes over {len(states):,} states):",
            "",
            "| run | ns per state-step | state-steps/s | vs floor | vs numpy batch (c) |",
            "|---|---:|---:|---:|---:|",
            f"| (e) compiled closed loop | {step_ns:.0f} | {1e9 / step_ns:,.0f} | {ratio:.2f}x | "
            f"{(1e9 / step_ns) / numpy_rate:.1f}x faster |",
            f"| (f) barrier call alone (floor) | {call_ns:.0f} | {1e9 / call_ns:,.0f} | 1.00x | |",
            "",
            f"- Target: a state-step costs <= 1.25x the barrier call alone: "
            f"**{'met' if ratio <= 1.25 else 'not met'}** ({ratio:.2f}x)."]


def hand_loop(system, barrier, filt, controller: str, x0, T: int, dt: float, order: int):
    """The floor ``simulate`` is measured against: a minimal loop written by hand on the same
    work -- the system's nominal controller, the same compiled barrier (its adapter's
    single-state entry, the terms the filter takes), the same filter object (its OSQP problem
    updated in place, or the projection) and the same float RK4 twin -- recording x, u_nom,
    u, h into preallocated arrays; no checks, timing, fate tracking or perturbation hooks."""
    import numpy as np
    from cbfsim.simulate import _integrate          # the float RK4 twin, else the array RK4
    ctl, f, G, df = system.nominal(controller), system.f, system.G, system.df
    filt.reset()
    n, m = system.n, system.m
    xs, us, un, hs = np.empty((T + 1, n)), np.empty((T, m)), np.empty((T, m)), np.empty(T + 1)
    X = np.array([x0], dtype=np.float64)
    xs[0] = X[0]
    for k in range(T):
        u_nom = ctl(X)
        F, Gx = f(X), G(X)
        terms = barrier.lie(X, F, Gx) if order == 1 else barrier.lie2(X, F, Gx, df(X, F), df(X, Gx))
        u = filt.filter(X, u_nom, terms).u
        X = _integrate(system, X, u, dt, 1)[0]
        xs[k + 1], un[k], us[k], hs[k] = X[0], u_nom[0], u[0], terms.h[0]
    hs[T] = barrier.value(X)[0]
    return xs


def floor_rows(cases: list, T: int, dt: float, repeats: int) -> tuple[list[str], dict[str, float]]:
    """``simulate`` against ``hand_loop`` on the same work, one row per case, each pair's
    repeats interleaved (simulate, hand, simulate, hand, ...) so load changes hit both; the
    trajectories must be equal (the hand loop makes the same calls in the same order)."""
    import numpy as np
    from cbfsim.simulate import simulate
    lines = [f"`simulate` against a hand-written loop on the same work ({T:,} steps; CPU seconds of the process, "
             f"medians of {repeats} interleaved repeats, so other programs' load is not counted; the hand loop: same controller, barrier, filter and RK4, no checks or records "
             "beyond x, u_nom, u, h):", "",
             "| case | simulate s | hand loop s | ratio | same x |", "|---|---:|---:|---:|---|"]
    ratios = {}
    for label, system, barrier, filt, controller, x0, order in cases:
        sim = lambda: simulate(system, barrier, filt, controller, x0, T * dt, dt, order=order)  # noqa: E731
        hand = lambda: hand_loop(system, barrier, filt, controller, x0, T, dt, order)           # noqa: E731
        sim(), hand()                                                   # warm-up
        walls_s, walls_h = [], []
        for _ in range(repeats):
            walls_s.append(_cpu(sim))
            walls_h.append(_cpu(hand))
        same = np.array_equal(sim().x[0], hand())
        ws, wh = statistics.median(walls_s), statistics.median(walls_h)
        ratios[label] = ws / wh
        lines.append(f"| {label} | {ws:.3f} | {wh:.3f} | {ws / wh:.2f}x | {'yes' if same else 'NO'} |")
    lines += ["", "- Target: `simulate` <= 1.1x the hand loop: " + "; ".join(
        f"{k} **{'met' if r <= 1.1 else 'not met'}** ({r:.2f}x)" for k, r in ratios.items()) + "."]
    return lines, ratios


def pendulum_case():
    """The pendulum HOCBF (order 2) with the projection filter: the shipped model and its card's gains."""
    from cbfsim.barriers import CompiledBarrier
    from cbfsim.classk import Linear
    from cbfsim.filters import HOCBFQP
    from cbfsim.runtime import compile_barrier
    from systems import get_system
    onnx = REPO / "experiments" / "models" / "pendulum.onnx"
    card = json.loads(onnx.with_suffix(".json").read_text())
    system = get_system(card["system"], **card["system_params"])
    barrier = CompiledBarrier(compile_barrier(onnx, inputs=1, order=2, name="pendulum"))
    gains = card["class_k"]
    filt = HOCBFQP(system, Linear(gains["alpha1"]), Linear(gains["alpha2"]), solver="projection")
    return ("pendulum HOCBF, projection", system, barrier, filt, "pd", (0.0, 0.0), 2)


def _cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def _wall(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(args.root.resolve()))
    import numpy as np
    import osqp
    from cbfsim.filters import CBFQP, CBFProjection
    from cbfsim.simulate import simulate, simulate_batch
    from systems import get_system

    T = args.steps or (2_000 if args.quick else 10_000)
    B = args.batch or (100 if args.quick else 1_000)
    dt = 1e-3
    t_final = T * dt
    barrier, barrier_desc, params = load_barrier()
    system = get_system("van_der_pol", **params)
    x0 = np.array([0.5, 0.5])
    X0 = np.random.default_rng(0).uniform(-2.0, 2.0, (B, 2))
    X0[0] = x0
    qp, proj = CBFQP(system), CBFProjection(system)
    vdp_case = ("VdP, OSQP", system, barrier, CBFQP(system), "zero", tuple(x0), 1)
    if args.floor:
        print("\n".join(floor_rows([vdp_case, pendulum_case()], T, dt, args.repeats)[0]))
        return 0

    def single(filt):
        return lambda: simulate(system, barrier, filt, "zero", x0, t_final, dt, order=1)

    simulate(system, barrier, qp, "zero", x0, 10 * dt, dt)           # warm-up: imports, lazy builds
    simulate(system, barrier, proj, "zero", x0, 10 * dt, dt)
    qp.solver.stats = dict.fromkeys(qp.solver.stats, 0)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    runs = {}
    runs["a"] = timed(single(qp), args.repeats)
    qp_stats = dict(qp.solver.stats)
    runs["b"] = timed(single(proj), args.repeats)
    runs["d"] = timed(single(None), args.repeats)
    runs["c"] = timed(lambda: simulate_batch(system, barrier, CBFProjection(system), "zero", X0, t_final, dt),
                      args.batch_repeats)

    floor, _ = floor_rows([vdp_case, pendulum_case()], T, dt, args.repeats)
    engine = compiled_engine_rows(X0, T, dt, T * B / runs["c"][1], args.batch_repeats)
    (ta, wall_a, parts_a, _), (tb, *_), (tc, wall_c, *_) = runs["a"], runs["b"], runs["c"]
    full = (T, B) == (10_000, 1_000)       # the targets are defined for the full run only
    largest = max(PARTS, key=lambda k: parts_a[k])
    ok_a = wall_a <= 1.0 and largest == "filter_s"
    ok_c = wall_c <= 30.0
    dx_batch = float(np.abs(tc.x[0] - tb.x[0]).max())
    dx_qp = float(np.abs(ta.x[0] - tb.x[0]).max())
    du_qp = float(np.abs(ta.u[0] - tb.u[0]).max())
    active = float(np.mean(tb.u[0] != np.clip(tb.u_nom[0], system.u_min, system.u_max)))

    n_rep, n_brep = args.repeats, args.batch_repeats
    head = ["| run | wall s | steps/s | controller s | barrier s | filter s | integration s | other s | wall range |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines = [
        f"## Closed-loop simulation benchmark (`benchmarks/sim.py{' --quick' if args.quick else ''}`)",
        "",
        f"Van der Pol, {T:,} steps at 1 kHz (dt = {dt:g} s, RK4), controller `zero`; barrier: {barrier_desc}; "
        f"{platform.python_version()}, numpy {np.__version__}, osqp {osqp.__version__}, "
        f"{os.cpu_count()} CPUs, load average {load:.2f} at start. Medians of {n_rep} repeats "
        f"({n_brep} for (c)); shares are of wall.",
        "",
        *head,
        row("(a) OSQP filter, 1 run", T, *runs["a"][1:]),
        row("(b) projection, 1 run", T, *runs["b"][1:]),
        row(f"(c) projection, {B:,} runs", T * B, *runs["c"][1:]),
        row("(d) nominal (no filter), 1 run", T, *runs["d"][1:]),
        "",
        f"- Target (a): wall <= 1 s with the QP solve the largest share: "
        f"{('**met**' if ok_a else '**not met**') if full else 'n/a (defined for 10,000 steps)'} "
        f"({wall_a:.3f} s; largest share: {largest[:-2]}).",
        f"- Target (c): wall <= 30 s: "
        f"{('**met**' if ok_c else '**not met**') if full else 'n/a (defined for 1,000 x 10,000)'} "
        f"({wall_c:.1f} s, {T * B / wall_c:,.0f} state-steps/s).",
        f"- Correctness: batched run 0 vs single projection run: max |dx| = {dx_batch:.3g} "
        f"({'identical' if dx_batch == 0 else 'DIFFERENT'}); OSQP vs projection (single): "
        f"max |dx| = {dx_qp:.3g}, max |du| = {du_qp:.3g}.",
        f"- QP stats of (a) over its repeats: {qp_stats}; along (b) the filter changed u_nom on "
        f"{100 * active:.1f}% of the steps, min h = {np.nanmin(tb.h):.4f}.",
        "",
        *floor,
        "",
        *engine,
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
