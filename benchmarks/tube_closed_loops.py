"""Adversarial sampled loops of a ReLU barrier: the one-row CBF-QP against the tube filter.

Starts on {h = 0} (states of D, 5-95% of each edge, with 0 <= h < 0.003 std(h)), nominals at
the input box's corners (u = u_max, u = u_min) and bang-bang on the sign of the first m
states, the input held for 10 ms.  Prints one Markdown table: the least h while the run is in D
(the compiled header's h), how many runs went below 0 in D, the least constraint value in D,
runs that left D, and the filter's faults while in D (and in all: the tube filter is made for D,
and outside it its tube may not close, a fault its fallback answers).

    python benchmarks/tube_closed_loops.py RUN_DIR [--runs 50] [--t-final 2]

RUN_DIR holds model.onnx and model.json (a `cbfsim train` run).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def starts(model, lo: np.ndarray, hi: np.ndarray, count: int, seed: int = 1) -> np.ndarray:
    """States of D just inside {h = 0}."""
    from compiler import reference
    rng = np.random.default_rng(seed)
    pts = lo + (hi - lo) * (0.05 + 0.9 * rng.random((400_000, len(lo))))
    h = reference.value(model, pts)
    return pts[(h >= 0) & (h < 0.003 * np.abs(h).std())][:count]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--t-final", type=float, default=2.0)
    parser.add_argument("--dt", type=float, default=0.01)
    args = parser.parse_args(argv)
    from cbfsim.barriers import CompiledBarrier
    from cbfsim.classk import Linear
    from cbfsim.filters import CBFQP, FilterStatus, TubeFilter
    from cbfsim.runtime import compile_barrier
    from cbfsim.simulate import simulate_batch
    from systems import get_system
    from training.certify.problem import load_network
    from training.model_card import load_card
    card = load_card(args.run / "model.json")
    system = get_system(card.system, **card.system_params)
    n, m = system.n, system.m
    lo, hi = (np.asarray(b, float) for b in system.domain)
    barrier = CompiledBarrier(compile_barrier(args.run / "model.onnx", inputs=m, order=1))
    X0 = starts(load_network(args.run / "model.onnx")[0], lo, hi, args.runs)
    u_lo, u_hi = system.u_min, system.u_max
    nominals = {"u = u_max": lambda X: np.tile(u_hi, (len(X), 1)), "u = u_min": lambda X: np.tile(u_lo, (len(X), 1)),
                "bang on sign(x)": lambda X: np.where(X[:, :m] > 0, u_hi, u_lo)}
    gamma = card.gains["gamma"]
    filters = {"one-row CBF-QP": lambda: CBFQP(system, Linear(gamma)),
               "tube filter": lambda: TubeFilter(args.run / "model.onnx", system, args.dt, gamma)}
    print(f"{args.run}: {len(X0)} starts on h = 0, {args.dt:g} s hold, {args.t_final:g} s\n")
    print("| filter | nominal | least h in D | runs below 0 in D | least constraint in D | left D | faults in D (all) | s |")
    print("|---|---|---|---|---|---|---|---|")
    for fname, make in filters.items():
        for name, nominal in nominals.items():
            began = time.perf_counter()
            t = simulate_batch(system, barrier, make(), nominal, X0, args.t_final, args.dt, dt_int=args.dt / 20)
            inside = np.cumprod(np.all((t.x >= lo - 1e-9) & (t.x <= hi + 1e-9), axis=2), axis=1).astype(bool)
            least = np.where(inside, t.h, np.inf).min(axis=1)
            c = np.where(inside, system.constraint(t.x.reshape(-1, n)).reshape(t.x.shape[:2]), np.inf)
            fault = t.status == FilterStatus.FALLBACK                       # (B, steps)
            faults = f"{int((fault & inside[:, :fault.shape[1]]).sum())} ({int(fault.sum())})"
            print(f"| {fname} | {name} | {least.min():.3g} | {int((least < 0).sum())} | {c.min():.3g} | "
                  f"{int((~inside).any(axis=1).sum())} | {faults} | {time.perf_counter() - began:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
