"""Training against the certifier: after the sampled rounds, the certifier is the oracle.

Each certify round exports the current network, runs ``training.certify.certify`` at the
control period ``cfg.dt_control`` under ``cfg.certify_time_limit`` seconds, and, when it is
not certified, feeds its evidence back into the counterexample pool: the confirmed
counterexamples (with neighbours, as the sampled rounds do) and, for the boxes it could not
decide, their centres and corners.  A few training rounds follow, each closed by the sampled
check (the fast pre-check), and the certifier runs again.  The loop ends with a certificate,
or after ``cfg.certify_rounds`` tries with the last (uncertified) one, whose ``reason`` and
counterexamples say what failed and where (``training.diagnose`` adds the knobs).
"""
from __future__ import annotations

import itertools
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

CORNERS_UP_TO = 6        # undecided boxes contribute all 2^n corners up to this dimension, else 2n face centres


def evidence_points(cert: Any, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """States the certifier points at: every counterexample's ``x`` and, per undecided box,
    its centre and corners (face centres above CORNERS_UP_TO dimensions), clipped to [lo, hi]."""
    n = len(lo)
    points: list[np.ndarray] = []
    for result in cert.conditions.values():
        points += [np.asarray(ce["x"], float) for ce in result.counterexamples if "x" in ce]
    for box in cert.undecided:
        a, b = np.asarray(box["lo"], float), np.asarray(box["hi"], float)
        c = (a + b) / 2
        points.append(c)
        if n <= CORNERS_UP_TO:
            points += [np.where(np.array(bits, bool), b, a) for bits in itertools.product((0, 1), repeat=n)]
        else:
            for i in range(n):
                for end in (a[i], b[i]):
                    p = c.copy()
                    p[i] = end
                    points.append(p)
    if not points:
        return np.zeros((0, n))
    return np.clip(np.stack(points), lo, hi)


def certify_barrier(barrier, card, directory: Path, cfg) -> Any:
    """Export ``barrier`` into ``directory`` and certify it against ``card`` at cfg.dt_control."""
    from training.certify import certify

    from .artifacts import ONNX_NAME, write_model_files
    write_model_files(directory, barrier)
    return certify(directory / ONNX_NAME, card.to_dict(), dt=cfg.dt_control, time_limit=cfg.certify_time_limit)


def certify_rounds(barrier, card, train_more, cfg, lo: np.ndarray, hi: np.ndarray,
                   log=print) -> tuple[Any, Any, list[dict[str, Any]]]:
    """Alternate the certifier and ``train_more(points)`` (a few training rounds with the
    certifier's evidence points in the counterexample pool; returns the new barrier).
    Returns (barrier, certificate, history): the certified barrier if one was certified, else
    the last one tried, with its certificate."""
    history: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(max(1, cfg.certify_rounds)):
            cert = certify_barrier(barrier, card, Path(tmp), cfg)
            points = evidence_points(cert, lo, hi)
            n_ce = {k: len(v.counterexamples) for k, v in cert.conditions.items()}
            history.append({"round": r, "certified": cert.certified, "margin": cert.margin,
                            "boxes": dict(cert.boxes), "counterexamples": n_ce, "evidence_points": len(points),
                            "certified_coverage": cert.certified_coverage, "wall_time_s": cert.wall_time_s,
                            "reason": cert.reason})
            log(f"  certify round {r}: {'CERTIFIED' if cert.certified else 'not certified'} "
                f"(margin {cert.margin:g}, {cert.boxes['evaluated']} boxes, {cert.wall_time_s:.1f} s"
                + ("" if cert.certified else f"; {cert.reason}; {len(points)} evidence states into the pool") + ")")
            if cert.certified or r + 1 == max(1, cfg.certify_rounds) or len(points) == 0:
                return barrier, cert, history
            barrier = train_more(points)
    return barrier, cert, history   # pragma: no cover  (the loop always returns)
