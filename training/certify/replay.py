"""Replaying a counterexample: the one-line command written beside it, and what that command
does -- re-evaluate the state (and the held input) in float64, outside interval arithmetic,
and print each condition's value and whether it is violated there.

    cbfsim certify MODEL.onnx --system darboux --condition boundary --replay 0.25,-0.5

The command is the certify command line of the same problem (model, card or plant, sets,
condition, scope, period) plus ``--replay X`` (``--replay-u U`` for a held input, ``--margin``
for the filter's margin); numbers are written with repr, so the float64 state is exact.
"""
from __future__ import annotations

import os
import shlex
from typing import Any

import numpy as np

from . import counterexamples as ce
from .problem import CertifyError, Problem


def command_line(model: Any, card: Any, problem: Problem) -> str:
    """The command that certifies ``problem`` ("" when the model is no file, e.g. a torch module)."""
    path = (str, os.PathLike)
    if card is not None:
        if not isinstance(card, path):
            return ""
        model = problem_model_path(card) if model is None else model
    if not isinstance(model, path):
        return ""
    words = ["cbfsim", "certify", str(model)]
    if card is not None:
        words.append(str(card))
    else:
        spec = problem.spec
        words += ["--system", str(spec["system"]), "--order", str(spec["order"])]
        words += [f"--param={k}={v!r}" for k, v in spec.get("params", {}).items()]
        if spec.get("class_k"):
            words.append(f"--class-k={spec['class_k']}")
        words += [f"--domain-lo={_numbers(spec['domain_lo'])}", f"--domain-hi={_numbers(spec['domain_hi'])}"]
    words.append(f"--dt={float(problem.dt)!r}")
    if problem.condition != "filter":
        words.append(f"--condition={problem.condition}")
    for lo, hi in problem.initial:
        words.append(f"--initial-set={_numbers(lo)}:{_numbers(hi)}")
    for lo, hi in problem.spec.get("unsafe_set", []):
        words.append(f"--unsafe-set={_numbers(lo)}:{_numbers(hi)}")
    if problem.scope != "closed":
        words.append(f"--claim={problem.scope}")
    return " ".join(shlex.quote(w) for w in words)


def problem_model_path(card: Any) -> Any:
    from training.model_card import load_card
    return load_card(card).onnx_path(card)


def replay_command(problem: Problem, entry: dict[str, Any]) -> str:
    """The one-line command that replays the counterexample ``entry`` (x, u, margin)."""
    if not problem.command:
        return ""
    words = [f"--replay={_numbers(entry['x'])}"]
    if entry.get("u") is not None and len(entry["u"]):
        words.append(f"--replay-u={_numbers(entry['u'])}")
    if problem.condition == "filter" and entry.get("margin") is not None:
        words.append(f"--margin={float(entry['margin'])!r}")
    return problem.command + " " + " ".join(shlex.quote(w) for w in words)


def _numbers(values: Any) -> str:
    return ",".join(repr(float(v)) for v in values)


def replay(problem: Problem, x: Any, u: Any = None, margin: float = 0.0) -> tuple[list[str], bool]:
    """(one line per condition at state ``x`` in float64, whether any is violated there)."""
    x = np.asarray(x, dtype=float).reshape(1, -1)
    if x.shape[1] != problem.n:
        raise CertifyError(f"--replay needs {problem.n} numbers ({', '.join(problem.system.state_names)}), got {x.shape[1]}")
    t = ce.point_terms(problem, x)
    bad = ce.check_points(problem, x, margin)
    level, c = float(t["level"][0]), float(t["constraint"][0])
    lines = [f"x = [{', '.join(repr(float(v)) for v in x[0])}]  (float64: h = {float(t['h'][0]):.17g}, "
             f"constraint = {c:.17g})"]
    violated = False

    def say(name: str, value: float, text: str) -> None:
        nonlocal violated
        hit = not np.isnan(value)
        violated |= hit
        lines.append(f"  {name:<12} {'VIOLATED' if hit else 'holds'}: {text}" + (f" ({value:.6g})" if hit else ""))

    unsafe = problem.unsafe or f"where the constraint of {problem.system.name} fails"
    say("containment", bad["containment"][0], f"x in the certified set and in the unsafe set ({unsafe})"
        if level >= 0 and c < 0 else "x is outside the unsafe set or the certified set")
    if problem.condition == "boundary":
        rows = ("min over the pieces met within a hair of x of L_f h + L_G h.u" if problem.relu_like
                else "L_f h + L_G h.u")
        say("feasibility", bad["feasibility"][0], f"|h| <= {ce.ON_ZERO:g} and sup_u {rows} < 0")
    elif problem.condition == "tube":
        say("feasibility", bad["feasibility"][0], "x in the set and no input satisfies the tube filter's rows there")
    else:
        say("feasibility", bad["feasibility"][0], f"x in the set and sup_u (a.u + b) < margin {margin:g}")
    if problem.initial:
        say("initial", bad["initial"][0], "x in the initial set with h < 0")
    from .conditions import open_faces
    for i, side in open_faces(problem):
        bound = problem.lo[i] if side < 0 else problem.hi[i]
        if x[0, i] == bound:
            speed, _ = ce.closure_violations(problem, x, i, side, margin)
            say("closure", speed[0], f"on the open face {problem.system.state_names[i]} = {bound:g}, an input the "
                                     "filter may return leaves D")
    if u is not None:
        u = np.asarray(u, dtype=float).reshape(1, -1)
        if u.shape[1] != problem.m:
            raise CertifyError(f"--replay-u needs {problem.m} numbers, got {u.shape[1]}")
        if problem.dt > 0:
            eps = problem.margin.with_eps(margin).at(x)
            ok = bool(ce.admissible(problem, x, t, u, eps)[0]) and ce.set_level(problem, x)[0] >= 0
            low = float(ce.rollout_minimum(problem, x, u)[0]) if ok else np.inf
            say("sampled_data", low if ok and low < 0 else np.nan,
                f"u admissible at x and the level over one held period of {problem.dt:g} s (RK4, "
                f"{ce.RK4_STEPS} steps) drops below 0" if ok else "u is not admissible at x (or x is not in the set)")
    return lines, violated
