"""How far the ReLU boundary bound reaches: boxes centred on {h = 0} of a ReLU barrier, at 1/8 ...
1/64 of the domain per edge, and the share each bound proves (sup_u L_f h + L_G h u >= 0 there):

* interval: the certifier's interval gradient against f + G u (``training/certify/terms.py``);
* whole box: each piece's exact gradient against f + G u over the whole box (the bound before
  ``level_pieces.py``; every piece enumerated, none restricted to {h = 0});
* level pieces: ``training/certify/level_pieces.py``, what the certifier uses;
* LP ceiling (``--lp``, a subset): scipy's exact LP over each piece's own region of the box and
  {h = 0}, for a linear plant (no float32 rounding: what an exact bound could reach).

Also the share of boxes whose pieces can be enumerated (at most MAX_UNSTABLE unstable neurons)
and the median milliseconds per box of the level-pieces bound.

    python benchmarks/relu_pieces.py RUN_DIR [--system spacecraft] [--boxes 300] [--lp 40]

RUN_DIR: a `cbfsim train` output directory of a ReLU barrier (model.onnx), e.g. the
`spacecraft_relu` preset's.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def whole_box_bound(model, box, plant, u_lo, u_hi):
    """min over each box's pieces of max over U's vertices of lo(g . F_u(B))."""
    from compiler.bounds_pieces import pieces
    from compiler.interval import Interval
    from compiler.passes import canonicalize
    from training.certify.level_pieces import MAX_UNSTABLE
    found = pieces(canonicalize(model), box, max_unstable=MAX_UNSTABLE)
    b, m = found.box_index, len(u_lo)
    best = np.full(len(b), -np.inf)
    for k in range(2 ** m):
        u = np.where([(k >> j) & 1 for j in range(m)], u_hi, u_lo)
        F = plant.f[b] + (plant.G[b] * Interval.point(np.tile(u, (len(b), 1)))[:, None, :]).sum(-1)
        best = np.maximum(best, (Interval.point(found.g) * F).sum(-1).lo)
    out = np.full(box.shape[0], np.inf)
    np.minimum.at(out, b, best)
    return np.where(found.enumerated, out, -np.inf)


def lp_ceiling(model, box, system, u_lo, u_hi) -> np.ndarray:
    """(B,) the exact min over each box's pieces of the row over the piece's region and {h = 0}
    (scipy HiGHS), for a linear plant: every pattern of the unstable neurons tried."""
    from scipy.optimize import linprog

    from compiler.bounds_pieces import pieces
    from compiler.ir import Dense
    from compiler.passes import canonicalize
    model = canonicalize(model)
    n = model.input_dim
    A = np.stack([system.f(np.eye(n)[i:i + 1])[0] - system.f(np.zeros((1, n)))[0] for i in range(n)], axis=1)
    G = system.G(np.zeros((1, n)))[0]
    dense = [layer for layer in model.layers if isinstance(layer, Dense)]
    found = pieces(model, box, max_unstable=12)
    out = np.full(box.shape[0], np.inf)
    for p, b in enumerate(found.box_index):
        lin, off, rows, rhs = np.eye(n), np.zeros(n), [], []
        codes = iter(found.pattern[p])
        for layer in dense[:-1]:
            lin, off = lin @ layer.weight.T, off @ layer.weight.T + layer.bias
            mask = np.array([next(codes) for _ in range(layer.out_dim)], dtype=float)
            for j in range(layer.out_dim):                 # the piece's region: sign of each pre-activation
                rows.append(-lin[:, j] if mask[j] else lin[:, j])
                rhs.append(off[j] if mask[j] else -off[j])
            lin, off = lin * mask, off * mask
        g, c = (lin @ dense[-1].weight.T)[:, 0], (off @ dense[-1].weight.T + dense[-1].bias)[0]
        res = linprog(A.T @ g, A_ub=np.array(rows), b_ub=np.array(rhs), A_eq=g[None], b_eq=[-c],
                      bounds=list(zip(box.lo[b], box.hi[b])), method="highs")
        if res.status == 0:
            sup_u = np.sum(np.maximum((g @ G) * u_lo, (g @ G) * u_hi))
            out[b] = min(out[b], res.fun + sup_u)
    return np.where(found.enumerated, out, -np.inf)


def main(argv: list[str] | None = None) -> None:
    from compiler.interval import Interval
    from training.certify import counterexamples
    from training.certify.build import build_problem
    from training.certify.falsify import boundary_states
    from training.certify.level_pieces import level_piece_row
    from training.certify.terms import lie_terms, plant_terms, sup_over_inputs
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--system", default="spacecraft")
    ap.add_argument("--boxes", type=int, default=300)
    ap.add_argument("--lp", type=int, default=0, help="boxes per size for the LP ceiling (linear plants; slow)")
    args = ap.parse_args(argv)
    p = build_problem(f"{args.run_dir}/model.onnx", None, system=args.system, condition="boundary", scope="in-domain")
    x = boundary_states(p, np.random.default_rng(0))
    on, _ = counterexamples.to_zero_level(p, x, np.arange(len(x)))
    on = on[np.all((on >= p.lo) & (on <= p.hi), axis=1)][:args.boxes]
    span = p.hi - p.lo
    print(f"{len(on)} boxes centred on {{h = 0}} of {args.run_dir} ({args.system})\n")
    print("| edge | interval | whole box | level pieces | enumerated | ms per box (level pieces) |"
          + (" LP ceiling |" if args.lp else ""))
    print("|---|---|---|---|---|---|" + ("---|" if args.lp else ""))
    for k in (3, 4, 5, 6):
        w = span / 2 ** k
        lo = np.clip(on - w / 2, p.lo, p.hi - w)
        box = Interval(lo, lo + w)
        plant = plant_terms(p.plant, box, 1, with_input_jacobian=True)
        centre = plant_terms(p.plant, Interval.point(box.mid), 1)
        t = lie_terms(p.model, plant, box, 1, p.gains, float32=True)
        interval = (t.Lf + sup_over_inputs(t.LG, p.u_lo, p.u_hi)).lo
        whole = whole_box_bound(p.model, box, plant, p.u_lo, p.u_hi)
        started = time.perf_counter()
        level = level_piece_row(p.model, box, centre, plant, p.u_lo, p.u_hi)
        ms = (time.perf_counter() - started) * 1e3 / len(on)
        enumerated = np.mean(level > -np.inf)
        row = (f"| 1/{2 ** k} | {np.mean(interval >= 0):.0%} | {np.mean(whole >= 0):.0%} | {np.mean(level >= 0):.0%} "
               f"| {enumerated:.0%} | {ms:.2f} |")
        if args.lp:
            sub = box[np.arange(min(args.lp, len(on)))]
            exact = lp_ceiling(p.model, sub, p.system, p.u_lo, p.u_hi)
            mine = level[:len(exact)]
            row += f" {np.mean(exact >= 0):.0%} (level pieces {np.mean(mine >= 0):.0%} of these) |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
