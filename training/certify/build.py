"""The problem ``certify`` proves, whichever way it is given: a card (``problem.load_problem``)
or a plant with no card (``plant_problem``), then its sets and scope (``sets``) and the command
line its counterexamples' replay commands extend (``replay``).  Every refusal is one line."""
from __future__ import annotations

from typing import Any

from .problem import CONDITIONS, SCOPES, CertifyError, Problem, load_problem


def build_problem(model: Any, card: Any = None, *, dt: float | None = None, condition: str = "filter",
                  margin: float | None = None, system: Any = None, order: int | None = None,
                  class_k: str | None = None, domain_lo: Any = None, domain_hi: Any = None,
                  params: dict[str, float] | None = None, initial_set: Any = None, unsafe_set: Any = None,
                  scope: str = "closed", command: str | None = None) -> Problem:
    """The problem ``certify`` proves, from a card or (``system=``) from the plant alone, with
    its sets, scope and replay command; every refusal is one line (``CertifyError``)."""
    from .plant_problem import plant_problem
    from .sets import apply_sets
    if condition not in CONDITIONS:
        raise CertifyError(f"--condition must be one of {', '.join(CONDITIONS)}, got {condition!r}")
    if scope not in SCOPES:
        raise CertifyError(f"--claim must be one of {', '.join(SCOPES)}, got {scope!r}")
    if condition == "boundary":
        if dt is not None and dt != 0:
            raise CertifyError(f"--condition boundary is the continuous-time condition: it takes --dt 0, got --dt {dt:g}")
        if margin not in (None, 0):
            raise CertifyError(f"--condition boundary has no margin (it is 0), got --margin {margin:g}")
        dt = 0.0
    if condition == "tube" and margin not in (None, 0):
        raise CertifyError(f"--condition tube has no margin (its rows carry the period), got --margin {margin:g}")
    if system is None:
        if card is None:
            raise CertifyError("give the model card, or the plant with --system NAME|module:Class (no card)")
        given = [flag for flag, v in (("--order", order), ("--class-k", class_k), ("--domain-lo", domain_lo),
                                      ("--domain-hi", domain_hi), ("--param", params)) if v]
        if given:
            raise CertifyError(f"{given[0]} describes a problem with no card (with --system); the card already gives it")
        problem = load_problem(model, card, dt)
    else:
        if card is not None:
            raise CertifyError("give either the model card or --system (a problem with no card), not both")
        problem = plant_problem(model, system, order=order or 1, class_k=class_k, condition=condition,
                                domain_lo=domain_lo, domain_hi=domain_hi, dt=dt or 0.0, params=params)
    problem.condition = condition
    if condition == "boundary":
        if problem.order != 1:
            raise CertifyError(f"--condition boundary is the order 1 condition on {{h = 0}}; the problem has order {problem.order}")
        if problem.faces:
            raise CertifyError("--condition boundary takes no face rows (the card's config enforces faces, a filter's rows)")
    if condition == "tube":
        if not problem.dt > 0:
            raise CertifyError("--condition tube is the sampled loop: it needs --dt > 0 (or the card's dt_control)")
        from .tube_condition import prepare
        prepare(problem)
    _check_relative_degree(problem)
    problem = apply_sets(problem, initial_set, unsafe_set, scope)
    from .replay import command_line
    problem.command = command if command is not None else command_line(model, card, problem)
    return problem


def _check_relative_degree(problem: Problem) -> None:
    """Order 2 needs L_G h == 0: proven structurally -- every state an input drives directly
    (G_ij not identically 0) is a state the network does not read (its first-layer column is 0)."""
    if problem.order != 2:
        return
    s = problem.system
    for i in range(s.n):
        for j in range(s.m):
            if s.G_expr[i, j] != 0 and problem.read_by_network[i]:
                raise CertifyError(f"order 2 needs L_G h == 0, but the network reads {s.state_names[i]!r}, "
                                   f"which input {s.input_names[j]!r} drives directly (relative degree 1)")
