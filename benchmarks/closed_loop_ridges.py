"""Adversarial closed loops of spacecraft ReLU barriers: how far the shipped one-row filter lets h
fall when every start sits on {h = 0} and heads inward.

For each RUN_DIR (a `cbfsim train` output of the spacecraft plant): 20,000 uniform states get
velocities of 0.5-1 per axis toward the origin, their positions are moved onto {h = 0} by
Newton steps (torch float64) and then 1e-6 inside the set (so the float32 header starts in it
too); the first STARTS inside D and outside the keep-out ball are run by `cbfsim simulate
--controller dock --t-final 6 --dt 0.001`.  It prints one Markdown row per run: the least h over
all runs, how many runs fell below -1e-4 and -1e-3, the least keep-out constraint and how many
runs left D.  The continuous-time certificate (`--condition boundary`) is of the barrier; the
filter sees one piece at a time and holds its input for 1 ms, so h may dip (README: "What a ReLU
row's continuous-time certificate covers").

    python benchmarks/closed_loop_ridges.py RUN_DIR [RUN_DIR ...] [--starts 200] [--work DIR]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def starts(run: Path, count: int, seed: int = 0) -> np.ndarray:
    """States 1e-6 inside {h = 0}, heading inward (module docstring)."""
    import torch

    from systems import get_system
    from training.distil import teacher_module
    net, system = teacher_module(run / "model.onnx"), get_system("spacecraft")
    lo, hi = (np.asarray(b, float) for b in system.domain)
    rng = np.random.default_rng(seed)
    x = rng.uniform(lo, hi, (20_000, 6))
    x[:, 3:] = -np.sign(x[:, :3]) * rng.uniform(0.5, 1.0, (len(x), 3))
    xt = torch.tensor(x, requires_grad=True)
    for step in range(31):                   # Newton on the position; the last step moves 1e-6 inside
        h = net(xt)[:, 0]
        g = torch.autograd.grad(h.sum(), xt)[0][:, :3]
        target = 1e-6 if step == 30 else 0.0
        with torch.no_grad():
            xt[:, :3] -= ((h - target) / (g * g).sum(1).clamp(min=1e-12))[:, None] * g
    with torch.no_grad():
        h = net(xt)[:, 0].numpy()
    x = xt.detach().numpy()
    keep = (np.abs(h - 1e-6) < 1e-8) & np.all((x >= lo) & (x <= hi), axis=1) & (system.constraint(x) > 0)
    return x[keep][:count]


def row(run: Path, count: int, work: Path) -> str:
    from systems import get_system
    x0 = starts(run, count)
    work.mkdir(parents=True, exist_ok=True)
    np.savetxt(work / "x0.txt", x0, delimiter=",")
    subprocess.run(["cbfsim", "simulate", str(run / "model.json"), "--x0-file", str(work / "x0.txt"),
                    "--controller", "dock", "--t-final", "6", "--dt", "0.001", "--out", str(work / "sim"), "-q"],
                   check=True)
    d = np.load(work / "sim" / "trajectory.npz")
    system = get_system("spacecraft")
    lo, hi = (np.asarray(b, float) for b in system.domain)
    h, x = d["h"], d["x"]
    least = h.min(axis=1)
    constraint = system.constraint(x.reshape(-1, 6)).reshape(x.shape[:2])
    left = (~np.all((x >= lo - 1e-9) & (x <= hi + 1e-9), axis=2)).any(axis=1)
    return (f"| {run} | {len(x0)} | {least.min():.3g} | {int((least < -1e-4).sum())} | {int((least < -1e-3).sum())} "
            f"| {constraint.min():.3g} | {int(left.sum())} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="cbfsim train output directories (spacecraft)")
    parser.add_argument("--starts", type=int, default=200, help="closed loops per run (default 200)")
    parser.add_argument("--work", type=Path, default=None, help="where the starts and trajectories go (default: temp)")
    args = parser.parse_args(argv)
    print("| run | starts | least h | runs below -1e-4 | below -1e-3 | least constraint | left D |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for k, run in enumerate(args.runs):
            print(row(run, args.starts, (args.work or Path(tmp)) / f"run{k}"), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
