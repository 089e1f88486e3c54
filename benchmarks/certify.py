"""Certifier benchmark: every shipped model, certified with no flags, as `cbfsim certify MODEL CARD` does.

For each of experiments/models/{vdp,pendulum,bicycle,dubins}.onnx with its card: the certifier
with its defaults (the card's control period, the margin search starting from the margin the
card records, the default time limit), one row with the verdict, the wall time against its
target (VdP and pendulum <= 60 s, bicycle <= 10 min, on 2 cores), whether the claim is closed
and why per coordinate (irrelevant, periodic, enforced face rows, bounded by the barrier, or
open), the sound certified volume as a share of the backup-safe states (the trainer's estimate
of the viable set; targets VdP >= 97%, pendulum >= 95%, bicycle >= 90%, the Dubins car >= 85%),
the boxes, and the sampled verifier's time on the same model (evidence, not proof).

The Dubins car's search takes about 410 s of the default 600 s limit (294,553 boxes, idle
machine, 2026-11-27), of which the margin search gives its first try 80%: on a loaded machine
its row may read 'not certified' (undecided at the time limit), never certified wrongly.

    python benchmarks/certify.py                 # about 13 minutes on an idle machine
    python benchmarks/certify.py --only vdp --out results/certify.md
    python benchmarks/certify.py --only vdp --only pendulum --only bicycle   # about 6 minutes (bicycle 270 s)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = ROOT / "experiments" / "models"
CASES = [("vdp", 60.0, 0.97), ("pendulum", 60.0, 0.95), ("bicycle", 600.0, 0.90), ("dubins", 600.0, 0.85)]


def run(name: str, verify_samples: int, workers: int | str) -> dict:
    from training.certify import certify
    from training.verify import verify
    onnx, card = MODELS / f"{name}.onnx", MODELS / f"{name}.json"
    started = time.perf_counter()
    cert = certify(onnx, card, workers=workers)     # `cbfsim certify MODEL CARD` (workers: its default, auto)
    wall = time.perf_counter() - started
    report = verify(onnx, card, samples=verify_samples, backup_samples=0)
    return {"name": name, "cert": cert, "wall": wall, "verify_s": report.time_s, "verify_passed": report.passed}


def table(rows: list[dict]) -> str:
    targets = {name: (limit, share) for name, limit, share in CASES}
    head = ("| model | dt | verdict (no flags) | margin | time s (target) | closed | per coordinate "
            "| sound share of backup-safe (target) | boxes proven / refuted / undecided | sampled verifier s |")
    lines = [head, "|---" * 10 + "|"]
    for r in rows:
        c = r["cert"]
        b = c.boxes
        limit, share = targets[r["name"]]
        verdict = "certified" if c.certified else f"not certified: {c.reason}"
        scaled = "" if c.margin_scale is None else " · σ(x)"      # eps (bias + w.x), training/margin.py
        cases = ", ".join(f"{k['name']} {k['case']}" for k in c.coordinates)
        sound = "-" if c.sound_backup_share is None else f"{c.sound_backup_share:.1%}"
        lines.append(f"| {r['name']} | {c.dt:g} | {verdict} | {c.margin:g}{scaled} | {r['wall']:.1f} (<= {limit:g}) | "
                     f"{'yes' if c.closed_in_domain else 'no'} | {cases} | {sound} (>= {share:.0%}) | "
                     f"{b['proven']} / {b['refuted']} / {b['undecided']} | "
                     f"{r['verify_s']:.1f} ({'pass' if r['verify_passed'] else 'fail'}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=[c[0] for c in CASES], action="append", help="run only this model")
    parser.add_argument("--verify-samples", type=int, default=200_000, help="states for the sampled verifier")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here (Markdown)")
    parser.add_argument("--workers", default="auto", type=lambda t: t if t == "auto" else int(t),
                        help="processes to certify on, or 'auto' (the command line's default: this process, then "
                             "one per core after 2 s of boxes); the certificate is the same; the targets are for 2 cores")
    args = parser.parse_args(argv)
    rows = []
    for name, _, _ in CASES:
        if (args.only and name not in args.only) or not (MODELS / f"{name}.json").exists():
            continue
        rows.append(run(name, args.verify_samples, args.workers))
        print(f"{name}: {rows[-1]['cert'].summary()}", flush=True)
    text = table(rows)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
