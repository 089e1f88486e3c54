"""A ReLU barrier distilled from a smooth one, to be proven piece by piece.

The exact verifiers of the literature prove ReLU networks, and cbfsim's certifier decides a
ReLU network's boundary condition piece by piece (``training/certify/level_pieces.py``).  The
trainer fits Softplus barriers well; its ReLU fits leave pieces whose gradient breaks the
condition (the obstacle-avoidance ReLU presets are refuted).  So a ReLU barrier is made from a
Softplus one trained with room to spare (``cbfsim train --teacher-activation softplus``,
``training/distilled.py``):

1. a Sobolev fit: the student ReLU network matches the teacher's values and gradients on
   uniform states of the domain D;
2. a tune on the conditions the certifier asks: a hinge on the boundary (Nagumo) row
   sup_u L_f h + L_G h . u >= ``slack`` at the states near the student's zero level, and on the
   row at one input for each such state and a partner close by (``_shared_input_hinge``: the
   student's pieces that meet on a ridge must share an input, the Clarke form the certifier
   proves), and on
   h <= -``clearance`` where the plant's constraint fails and h >= ``clearance`` on the plant's
   initial set where it has one (a barrier certificate's third condition), with the teacher's
   values kept;
3. counterexample rounds (``refine_rounds``): a ReLU network breaks the conditions on thin
   pieces that uniform batches rarely hit (the 3 x 16 spacecraft student: one state in
   400,000 with h >= 0 inside the keep-out ball).  Each round asks its oracles for states
   where the student fails -- a dense sampled check (``sampled``; default: uniform states of D);
   on a linear plant, the region walk along {h = 0} (``training/certify/regions.py``: every
   piece whose exact row minimum is below the slack, up to WALK_PIECES, worst first); and the
   certifier itself for ``refine_time`` seconds (continuous time, boundary condition;
   twice as long after each call that found nothing, up to ESCALATION times; skipped when the
   walk met a violation)
   -- and tunes again with half of every batch drawn around those states.  It stops when
   neither has found a failure for ``clean_rounds`` rounds in a row; a certifier left
   undecided counts as clean only at its longest call (the 3 x 8 spacecraft student of
   2026-11-28 stopped after two undecided calls of 30 s and 60 s, and a 2-worker certifier
   then refuted its containment in 57 s).

Only the certifier says whether the result is a barrier (``benchmarks/certify_suite.py`` rows
``oa_relu``, ``oa_relu_64``).  Seeded; one thread's torch is deterministic run to run, except
that a certifier round's reach depends on the machine's speed (its time limit).
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from compiler.activations import ACTIVATIONS
from compiler.api import load_model
from compiler.ir import Activation, Dense
from compiler.passes import canonicalize
from training.architectures import mlp
from training.samplers import initial_box


def teacher_module(onnx_path: str | os.PathLike) -> nn.Sequential:
    """The teacher's network, from its ONNX file, as a float64 torch module on raw states (its
    activations from the compiler's table: ``ActivationSpec.torch_module``)."""
    layers: list[nn.Module] = []
    for layer in canonicalize(load_model(onnx_path)).layers:
        if isinstance(layer, Dense):
            linear = nn.Linear(layer.in_dim, layer.out_dim)
            with torch.no_grad():
                linear.weight.copy_(torch.as_tensor(layer.weight))
                linear.bias.copy_(torch.as_tensor(layer.bias))
            layers.append(linear)
        elif isinstance(layer, Activation):
            layers.append(ACTIVATIONS[layer.kind].torch_module(dict(layer.params)))
        else:
            raise ValueError(f"teacher layer {layer!r}: only Dense layers and activations are distilled")
    return nn.Sequential(*layers).double().eval()


def _student(n: int, hidden: list[int], lo: np.ndarray, hi: np.ndarray, seed: int,
             activation: str = "relu") -> nn.Sequential:
    """An ``architectures.mlp``, its first layer scaled so that D maps to [-1, 1] at the start."""
    net = mlp([n, *hidden, 1], activation, seed=seed, dtype=torch.float64)
    centre, half = torch.as_tensor((lo + hi) / 2), torch.as_tensor((hi - lo) / 2)
    with torch.no_grad():
        W = net[0].weight / half
        net[0].bias.sub_(W @ centre)
        net[0].weight.copy_(W)
    return net


def _value_and_grad(net: nn.Module, x: torch.Tensor, graph: bool) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.detach().requires_grad_(True)
    h = net(x)[:, 0]
    return h, torch.autograd.grad(h.sum(), x, create_graph=graph)[0]


def boundary_row(system: Any, x: torch.Tensor, grad: torch.Tensor, toward: torch.Tensor | None = None) -> torch.Tensor:
    """sup over the input box of L_f h + L_G h . u at states x (B,) from grad h (B, n); with
    ``toward`` (B, n), the row at the input that is best for that gradient instead (one input
    for states on different pieces: ``_shared_input_hinge``)."""
    row = (grad * system.f_torch(x)).sum(-1)
    if system.m:
        G = system.G_torch(x)
        a = (grad.unsqueeze(-1) * G).sum(-2)                                    # (B, m)
        lo = torch.as_tensor(system.u_min, dtype=x.dtype)
        hi = torch.as_tensor(system.u_max, dtype=x.dtype)
        if toward is None:
            row = row + torch.maximum(a * lo, a * hi).sum(-1)
        else:
            u = torch.where((toward.unsqueeze(-1) * G).sum(-2) >= 0, hi, lo)
            row = row + (a * u).sum(-1)
    return row


def distil_relu(teacher_onnx: str | os.PathLike, system: Any, out_dir: str | os.PathLike, hidden: list[int],
                **options: Any) -> Path:
    """Distil the teacher's ONNX file into a ReLU network of widths ``hidden`` on the plant's
    domain and write ``out_dir/model.onnx`` (module docstring); returns its path.  ``options``:
    ``distil``'s."""
    from training.network import export_onnx
    student, _ = distil(teacher_module(teacher_onnx), system, list(hidden), **options)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return export_onnx(student.float().eval(), out / "model.onnx", system.n)


@dataclass
class Hinges:
    """The tune's targets: the boundary row >= ``slack`` within ``band`` of the zero level,
    h <= -``clearance`` where the plant's constraint fails and, with ``gamma``, the filter's
    condition row + gamma h >= ``condition_margin`` on the set (h >= 0); with ``stability``,
    the hidden neurons' kinks moved off the zero level (``_stability_hinge``)."""
    slack: float = 0.1
    band: float = 0.05
    clearance: float = 0.02
    gamma: float | None = None
    condition_margin: float = 0.0
    stability: float = 0.0       # weight of ``_stability_hinge`` (0: none)


def distil(teacher: nn.Module, system: Any, hidden: list[int], *, activation: str = "relu",
           lo: np.ndarray | None = None, hi: np.ndarray | None = None, reads: np.ndarray | None = None,
           fit_steps: int = 6000, tune_steps: int = 2000, hinges: Hinges | None = None, batch: int = 8192,
           seed: int = 0, refine_rounds: int = 0, refine_steps: int = 500, refine_time: float = 30.0,
           clean_rounds: int = 2,
           sampled: Callable[[nn.Module], tuple[np.ndarray, int]] | None = None
           ) -> tuple[nn.Sequential, list[dict]]:
    """(the float64 student, one record per counterexample round) for the float64 ``teacher`` on
    raw states (module docstring).  ``lo``/``hi``: the domain (default: the plant's); ``reads``:
    bool (n,) the states the student may read (the others' first-layer columns stay exactly 0;
    default: all); the rounds stop after ``clean_rounds`` clean ones in a row (a fresh dense
    sample each: one clean sample of the 3 x 16 spacecraft student missed a containment failure
    the next one found); ``sampled``: the dense check of the rounds, student -> (states to tune around
    (K, n), how many of them fail) (default: ``uniform_failures``, all of whose states fail)."""
    lo = np.asarray(system.domain[0] if lo is None else lo, dtype=float)
    hi = np.asarray(system.domain[1] if hi is None else hi, dtype=float)
    hinges = hinges or Hinges()
    student = _student(system.n, list(hidden), lo, hi, seed, activation)
    blind = None if reads is None else torch.as_tensor(~np.asarray(reads, dtype=bool))
    _zero_blind(student, blind)
    generator = torch.Generator().manual_seed(seed)
    span, low = torch.as_tensor(hi - lo), torch.as_tensor(lo)

    def states(count: int) -> torch.Tensor:
        return low + span * torch.rand(count, system.n, dtype=torch.float64, generator=generator)

    initial = initial_box(system)

    def starts() -> torch.Tensor | None:
        if initial is None:
            return None
        i_lo, i_hi = (torch.as_tensor(b) for b in initial)
        return i_lo + (i_hi - i_lo) * torch.rand(batch // 8, system.n, dtype=torch.float64, generator=generator)

    fit = torch.optim.Adam(student.parameters(), lr=3e-3)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(fit, max(fit_steps, 1))
    for _ in range(fit_steps):
        x = states(batch)
        h_t, g_t = _value_and_grad(teacher, x, graph=False)
        h_s, g_s = _value_and_grad(student, x, graph=True)
        loss = ((h_s - h_t.detach()) ** 2).mean() + 0.3 * ((g_s - g_t.detach()) ** 2).mean()
        _step(fit, loss, student, blind)
        schedule.step()
    tune = torch.optim.Adam(student.parameters(), lr=3e-4)
    for _ in range(tune_steps):
        _step(tune, _tune_loss(student, teacher, system, states(batch), hinges, starts(), generator), student, blind)
    rounds = _rounds(student, teacher, system, lo, hi, hinges, tune, blind, generator, starts, batch, refine_rounds,
                     refine_steps, refine_time, clean_rounds, sampled)
    return student.eval(), rounds


def _rounds(student: nn.Sequential, teacher: nn.Module, system: Any, lo: np.ndarray, hi: np.ndarray,
            hinges: Hinges, tune: torch.optim.Optimizer, blind: torch.Tensor | None, generator: torch.Generator,
            starts: Callable[[], torch.Tensor | None], batch: int, count: int, steps: int, time_limit: float,
            clean_rounds: int, sampled: Callable[[nn.Module], tuple[np.ndarray, int]] | None) -> list[dict]:
    """The counterexample rounds (module docstring, 3.), tuning ``student`` in place; their records.
    The student left is one a round checked: the last round's, or, where the certifier refuted or
    left undecided that one, the latest it certified (its record then says ``"returned": True``):
    tuning around one round's counterexamples can break what an earlier round proved."""
    span, low = torch.as_tensor(hi - lo), torch.as_tensor(lo)
    rounds: list[dict] = []
    pool = torch.zeros((0, system.n), dtype=torch.float64)
    clean, undecided = 0, 0
    certified: tuple[int, dict] | None = None
    for k in range(count):
        # a certifier that found nothing looks longer next time (up to ESCALATION x; the search is
        # deterministic, so a longer one also looks deeper at an untouched student): a thin
        # failing piece of the 3 x 16 spacecraft student took 38 s to find, after rounds of 30 s
        limit = time_limit * min(2.0 ** undecided, ESCALATION)
        found, record = _counterexamples(student, system, lo, hi, limit, sampled, hinges.slack)
        undecided += record["certifier"] == "undecided"
        rounds.append({"round": k, **record})
        # clean: the near misses a dense check also returns are not failures; an undecided
        # certifier that may still look longer has not cleared the student yet
        settled = record["certifier"] == "certified" or (record["certifier"] == "undecided"
                                                         and limit >= time_limit * ESCALATION)
        clean = clean + 1 if record["sampled_failures"] == 0 and settled else 0
        if record["certifier"] == "certified":
            certified = (k, copy.deepcopy(student.state_dict()))
        if clean >= clean_rounds or k == count - 1:      # no tune after the last check
            break
        if not len(found):     # nothing to tune around: check the same student again
            continue
        pool = torch.cat([pool, torch.as_tensor(found, dtype=torch.float64)])
        for _ in range(steps):
            near = pool[torch.randint(len(pool), (batch // 2,), generator=generator)]
            near = near + torch.randn(near.shape, dtype=torch.float64, generator=generator) * span * NEIGHBOURHOOD
            rest = low + span * torch.rand(batch - len(near), system.n, dtype=torch.float64, generator=generator)
            x = torch.cat([rest, torch.minimum(torch.maximum(near, low), low + span)])
            _step(tune, _tune_loss(student, teacher, system, x, hinges, starts(), generator), student, blind)
    if rounds and rounds[-1]["certifier"] != "certified" and certified is not None:
        student.load_state_dict(certified[1])
        rounds[certified[0]]["returned"] = True
    return rounds


ESCALATION = 4.0           # the longest certifier call of a round, in refine_time
NEIGHBOURHOOD = 0.02       # a counterexample round's states: normal around the found ones, this share of D's edges


def _step(optimizer: torch.optim.Optimizer, loss: torch.Tensor, student: nn.Sequential,
          blind: torch.Tensor | None) -> None:
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    _zero_blind(student, blind)


def _zero_blind(student: nn.Sequential, blind: torch.Tensor | None) -> None:
    """The first layer's columns of the states the student may not read, exactly 0 (the
    certifier and the card read them as unread)."""
    if blind is not None and bool(blind.any()):
        with torch.no_grad():
            student[0].weight[:, blind] = 0.0


def _tune_loss(student: nn.Module, teacher: nn.Module, system: Any, x: torch.Tensor, hinges: Hinges,
               start: torch.Tensor | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """The teacher's values kept, the boundary row's hinge near the zero level, containment's
    hinge, and h >= clearance at ``start`` (states of the plant's initial set, if any)."""
    with torch.no_grad():
        h_t = teacher(x)[:, 0]
    h_s, g_s = _value_and_grad(student, x, graph=True)
    near = (h_s.detach().abs() < hinges.band).double()
    rate = boundary_row(system, x, g_s)
    condition = (torch.relu(hinges.slack - rate) * near).sum() / near.sum().clamp(min=1.0)
    if system.m:
        condition = condition + _shared_input_hinge(student, system, x, g_s, near, hinges, generator)
    unsafe = (system.constraint_torch(x) < 0).double()
    containment = (torch.relu(h_s + hinges.clearance) * unsafe).sum() / unsafe.sum().clamp(min=1.0)
    loss = ((h_s - h_t) ** 2).mean() + 10.0 * condition + 10.0 * containment
    if start is not None:         # averaged over the states that miss it, as the row's hinge is over the band
        short = torch.relu(hinges.clearance - student(start)[:, 0])
        loss = loss + 10.0 * short.sum() / (short.detach() > 0).sum().clamp(min=1)
    if hinges.stability:
        loss = loss + hinges.stability * _stability_hinge(student, x, near)
    if hinges.gamma is not None:
        inside = (h_s.detach() >= 0).double()
        filter_row = torch.relu(hinges.condition_margin - rate - hinges.gamma * h_s) * inside
        loss = loss + 10.0 * filter_row.sum() / inside.sum().clamp(min=1.0)
    return loss


def _stability_hinge(student: nn.Sequential, x: torch.Tensor, near: torch.Tensor) -> torch.Tensor:
    """Mean over the hidden neurons of the smaller of the two sides of each neuron's kink among
    the states near the zero level, sum of relu(z) against sum of relu(-z), over sum |z| there.
    A kink crossing {h = 0} cuts it into more linear pieces, and the certifier's boxes there must
    hold every piece (its enumeration stops at ``level_pieces.MAX_UNSTABLE`` unstable neurons a
    box); the minority side's pull moves the kink off the zero level, the neuron keeps one sign
    there, and the certifier meets fewer pieces (after the ReLU-stability idea of Xiao et al.,
    ICLR 2019, on the states that matter here).  A hinge on |z| near 0 instead pulls both sides
    apart, which a steeper neuron does without moving its kink."""
    terms, y = [], x
    weight = near[:, None]
    for layer in student[:-1]:
        y = layer(y)
        if isinstance(layer, nn.Linear):
            up, down = (torch.relu(y) * weight).sum(dim=0), (torch.relu(-y) * weight).sum(dim=0)
            terms.append((torch.minimum(up, down) / (up + down).clamp(min=1e-12)).mean())
    return sum(terms) / max(len(terms), 1)


PAIR_RADIUS = 0.005        # the shared-input hinge's partner states: normal around each, this share of D's edges


def _shared_input_hinge(student: nn.Module, system: Any, x: torch.Tensor, g: torch.Tensor, near: torch.Tensor,
                        hinges: Hinges, generator: torch.Generator | None) -> torch.Tensor:
    """The boundary row >= slack at x and at a partner state close by, both at one input: the
    vertex best for the sum of their gradients.  Across a ridge of the student the two states lie
    on different pieces, which the certifier holds to one input (the Clarke form); each piece's
    own best input is not enough (the 3 x 8 spacecraft student of 2026-11-28 was refuted there)."""
    lo, hi = (torch.as_tensor(b, dtype=x.dtype) for b in system.domain)
    partner = x.detach() + torch.randn(x.shape, dtype=x.dtype, generator=generator) * (hi - lo) * PAIR_RADIUS
    partner = torch.minimum(torch.maximum(partner, lo), hi)
    _, g_p = _value_and_grad(student, partner, graph=True)
    toward = (g + g_p).detach()
    rows = (boundary_row(system, x, g, toward=toward), boundary_row(system, partner, g_p, toward=toward))
    short = sum(torch.relu(hinges.slack - row) for row in rows) * near
    return short.sum() / near.sum().clamp(min=1.0)


def uniform_failures(student: nn.Module, system: Any, lo: np.ndarray, hi: np.ndarray, count: int = 1_000_000,
                     seed: int = 0, hinges: Hinges | None = None) -> np.ndarray:
    """States (K, n) among ``count`` uniform ones of D where the student breaks containment (h >
    -clearance / 2 where the constraint fails) or the boundary row (< 0 within ``band`` of 0), and
    among ``count`` / 10 of the plant's initial set (if any) where h < clearance / 2."""
    hinges = hinges or Hinges()
    x = torch.as_tensor(np.random.default_rng(seed).uniform(lo, hi, (count, system.n)))
    bad = []
    for part in torch.split(x, 200_000):
        h, g = _value_and_grad(student, part, graph=False)
        fail = ((system.constraint_torch(part) < 0) & (h > -0.5 * hinges.clearance)) | \
            ((h.abs() < hinges.band) & (boundary_row(system, part, g) < 0))
        bad.append(part[fail].detach().numpy())
    initial = initial_box(system)
    if initial is not None:           # h >= clearance / 2 on the initial set (a tenth of the states)
        part = torch.as_tensor(np.random.default_rng(seed + 1).uniform(*initial, (count // 10, system.n)))
        with torch.no_grad():
            bad.append(part[student(part)[:, 0] < 0.5 * hinges.clearance].numpy())
    return np.concatenate(bad)


def _counterexamples(student: nn.Sequential, system: Any, lo: np.ndarray, hi: np.ndarray, time_limit: float,
                     sampled: Callable[[nn.Module], tuple[np.ndarray, int]] | None, slack: float
                     ) -> tuple[np.ndarray, dict]:
    """The states where the student fails: the dense check's, the region walk's (pieces of
    {h = 0} whose row falls below ``slack``, ``walked_failures``) and the certifier's (continuous
    time, boundary condition, ``time_limit`` seconds, one process; not asked when the walk
    already met a violation), with a record of each."""
    from training.certify.api import certify_module
    if sampled is None:
        dense = uniform_failures(student, system, lo, hi)
        failures = len(dense)
    else:
        dense, failures = sampled(student)
        dense = np.asarray(dense, dtype=float)
    walked, walk_record = walked_failures(student, system, lo, hi, time_limit, slack)
    if walk_record.get("walk_violations"):     # exact violations already: the certifier would find the same first
        found = np.concatenate([dense.reshape(-1, system.n), walked])
        return found, {"sampled_failures": int(failures), "tuned_around": int(len(found)), "certifier": "refuted",
                       "certifier_counterexamples": 0, "certifier_limit_s": round(time_limit, 1), "certifier_s": 0.0,
                       **walk_record}
    dense = np.concatenate([dense.reshape(-1, system.n), walked])
    initial = {"initial_set": ["plant"]} if initial_box(system) is not None else {}
    cert = certify_module(copy.deepcopy(student).float().eval(), system, condition="boundary", scope="in-domain",
                          domain_lo=lo.tolist(), domain_hi=hi.tolist(), time_limit=time_limit, workers=1, **initial)
    proven = np.asarray([c["x"] for cond in cert.conditions.values() for c in cond.counterexamples], float)
    found = np.concatenate([dense.reshape(-1, system.n), proven.reshape(-1, system.n)])
    verdict = "certified" if cert.certified else ("refuted" if len(proven) else "undecided")
    return found, {"sampled_failures": int(failures), "tuned_around": int(len(found)), "certifier": verdict,
                   "certifier_counterexamples": len(proven), "certifier_limit_s": round(time_limit, 1),
                   "certifier_s": round(cert.wall_time_s, 2), **walk_record}


WALK_PIECES = 4000         # a round's region walk keeps at most this many pieces below the slack


def walked_failures(student: nn.Sequential, system: Any, lo: np.ndarray, hi: np.ndarray, time_limit: float,
                    slack: float) -> tuple[np.ndarray, dict]:
    """(states (K, n), record): for a ReLU student on a linear plant, a point inside each piece
    of {h = 0} whose exact row minimum lies below ``slack``, from the region walk
    (``training/certify/regions.py``) for ``time_limit`` seconds; none (and an empty record) for
    other students.  The certifier's falsifier walks too, but keeps only a few violations, one
    state each: a student whose {h = 0} has 140,000 pieces needs them by the thousand."""
    import time

    from compiler.frontend_torch import load_torch
    from training.certify import regions
    from training.certify.build import build_problem
    from training.certify.falsify import boundary_and_level_states
    none = np.empty((0, system.n))
    model = load_torch(copy.deepcopy(student).float().eval())
    problem = build_problem(model, None, system=system, condition="boundary", scope="in-domain",
                            domain_lo=lo.tolist(), domain_hi=hi.tolist())
    if not regions.applies(problem):
        return none, {}
    from training.certify.counterexamples import ON_ZERO
    w = regions.walk(problem, boundary_and_level_states(problem), time.monotonic() + time_limit,
                     stop_at_negative=WALK_PIECES, below=slack)
    states = [regions.candidates(p)[-1] for p in w.negative]          # the deepest pull: well inside the piece
    return (np.asarray(states).reshape(-1, system.n) if states else none), {
        "walk_pieces": w.pieces, "walk_below_slack": len(w.negative),
        "walk_violations": sum(p.value < -ON_ZERO for p in w.negative), "walk_s": round(w.seconds, 2)}
