"""Certifier benchmark: the three shipped models, proven (or not) at their experiments' periods.

For each of experiments/models/{vdp,bicycle,pendulum}.onnx with its card, at the control
period its experiment uses (5, 2 and 5 ms) and at the filter margin of its shipped
certificate (NAME.cert.json; ``--sweep`` tries the whole margin ladder instead, as
``cbfsim certify`` without ``--margin`` does), one row with: the verdict, the filter
margin eps the certificate requires, the boxes proven / refuted / undecided, the sound and
the sampled coverage, which condition blocks (when not certified), the certifier's wall
time against its target (VdP <= 60 s, pendulum <= 60 s, bicycle <= 10 min on 2 cores), and
the sampled verifier's time on the same model (``training.verify.verify``, 200,000 uniform
plus 100,000 boundary states through the compiled header: evidence, not proof).

Each certifier run gets the target as its time limit (--time-limit overrides): a run that
hits it reports "not certified (time)" with its undecided boxes, never a pass.

    python benchmarks/certify.py                 # about 12 minutes at the default limits
    python benchmarks/certify.py --only vdp --time-limit 60 --out results/certify.md
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = ROOT / "experiments" / "models"
CASES = [("vdp", 0.005, 60.0), ("bicycle", 0.002, 600.0), ("pendulum", 0.005, 60.0)]


def shipped_margin(name: str) -> float | None:
    """The margin of the shipped certificate, if it certifies."""
    import json
    path = MODELS / f"{name}.cert.json"
    if not path.exists():
        return None
    cert = json.loads(path.read_text())
    return float(cert["margin"]) if cert.get("certified") else None


def run(name: str, dt: float, limit: float, verify_samples: int, sweep: bool) -> dict:
    from training.certify import certify
    from training.verify import verify
    onnx, card = MODELS / f"{name}.onnx", MODELS / f"{name}.json"
    started = time.perf_counter()
    cert = certify(onnx, card, dt=dt, time_limit=limit, margin=None if sweep else shipped_margin(name))
    wall = time.perf_counter() - started
    report = verify(onnx, card, samples=verify_samples, backup_samples=0)
    return {"name": name, "cert": cert, "wall": wall, "limit": limit, "verify_s": report.time_s,
            "verify_passed": report.passed}


def table(rows: list[dict], target: dict[str, float]) -> str:
    head = ("| model | dt | verdict | margin | boxes proven / refuted / undecided | coverage sound (sampled) "
            "| blocks | certify s (target) | sampled verifier s |")
    lines = [head, "|---" * 9 + "|"]
    for r in rows:
        c = r["cert"]
        b = c.boxes
        verdict = "certified" if c.certified else "not certified"
        scaled = "" if c.margin_scale is None else " · σ(x)"      # eps (bias + w.x), training/margin.py
        lines.append(f"| {r['name']} | {c.dt:g} | {verdict} | {c.margin:g}{scaled} | {b['proven']} / {b['refuted']} / "
                     f"{b['undecided']} | {c.certified_coverage:.1%} ({c.sampled_coverage:.1%}) | "
                     f"{c.reason or '-'} | {r['wall']:.1f} (<= {target[r['name']]:g}) | "
                     f"{r['verify_s']:.1f} ({'pass' if r['verify_passed'] else 'fail'}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=[c[0] for c in CASES], action="append", help="run only this model")
    parser.add_argument("--time-limit", type=float, default=None, help="seconds per model (default: its target)")
    parser.add_argument("--verify-samples", type=int, default=200_000)
    parser.add_argument("--sweep", action="store_true", help="try the margin ladder, not the shipped margin")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here (Markdown)")
    args = parser.parse_args(argv)
    target = {name: limit for name, _, limit in CASES}
    rows = []
    for name, dt, limit in CASES:
        if args.only and name not in args.only:
            continue
        rows.append(run(name, dt, args.time_limit or limit, args.verify_samples, args.sweep))
        print(f"{name}: {rows[-1]['cert'].summary()}", flush=True)
    text = table(rows, target)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
