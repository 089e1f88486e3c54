"""Counterexample-guided training of a neural CBF for any plant in ``systems``.

Loop: (1) label a pool of states (uniform + near the constraint boundary): positives are
states whose backup rollout keeps the constraint above safe_fraction * max, negatives
violate the constraint (and, with label_lost, states the rollout cannot save); (2)
warm-start h on a clipped signed distance to the constraint boundary; (3) rounds of
hinge-loss training, each followed by a fresh dense float64 check whose failures (and
their neighbours) join the training set; stop after ``clean_checks`` consecutive checks
without (robust) failures, or at the round / time limit -- the network with the fewest
failures is kept and whatever remains is reported, not hidden; (4) export, verify the
*compiled* barrier with ``training.verify`` and write the outputs atomically.
"""
from __future__ import annotations

import copy
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .artifacts import CARD_NAME, CERT_NAME, CURVES_NAME, ONNX_NAME, atomic_directory, build_card, write_model_files
from .check import CheckResult, check
from .config import ConfigError, TrainConfig, label_set_function
from .lie import lie_terms
from .losses import barrier_loss
from .network import MaskedBarrier
from .pool import Pool, merge_batches
from .samplers import (ConstraintTools, backup_margin, in_initial, initial_states, near_boundary, neighbours,
                       uniform)

CE_CAP = 100_000     # counterexample states kept (newest first)


@dataclass(repr=False)
class TrainResult:
    """What ``train_barrier`` returns. ``print`` gives one line; the fields hold the details."""

    barrier: MaskedBarrier                   # trained module (float32)
    card: dict[str, Any]                     # model card as written (verification included)
    out_dir: Path | None
    passed: bool                             # trainer check clean AND verifier clean (if run)
    train_time: float                        # seconds, data + rounds (excludes export/verify)
    rounds: int
    history: list[dict[str, float]] = field(default_factory=list)
    final_check: dict[str, float] = field(default_factory=dict)
    verification: dict[str, Any] | None = None
    certificate: Any = None                  # training.certify.Certificate when cfg.certify

    def __repr__(self) -> str:
        check = self.final_check
        verdict = "PASS" if self.passed else "FAIL"
        verified = ("not verified" if self.verification is None else
                    f"verifier {'PASS' if self.verification.get('passed') else 'FAIL'}")
        return (f"TrainResult({verdict}: {self.card.get('system')}, {self.rounds} rounds, {self.train_time:.1f} s; "
                f"condition failures {check.get('condition_failures')}, containment failures "
                f"{check.get('containment_failures')}, coverage {check.get('coverage') or 0:.3f}; {verified}; "
                f"out={self.out_dir})")


def _progress_enabled(progress: bool | None) -> bool:
    return sys.stderr.isatty() if progress is None else bool(progress)


INITIAL_SHARE = 4          # the label pool holds n_boundary / INITIAL_SHARE states of the plant's initial set


def _label_pool(system, tools: ConstraintTools, cfg: TrainConfig, res, rng: np.random.Generator) -> tuple[Pool, float]:
    lo, hi = res.lo, res.hi
    # the plant's initial set (if any) must end in {h >= 0}: its states are labelled safe
    x = np.concatenate([uniform(rng, lo, hi, cfg.n_uniform), near_boundary(rng, tools, lo, hi, cfg.n_boundary),
                        initial_states(system, rng, lo, hi, cfg.n_boundary // INITIAL_SHARE)])
    c = tools.constraint(x)
    cmax = float(max(c.max(), tools.constraint(uniform(rng, lo, hi, 100_000)).max()))
    if cmax <= 0:
        raise ConfigError(f"domain: the {system.name} constraint is negative on all sampled states of "
                          f"[{list(lo)}, {list(hi)}]; nothing to certify")
    inside = c >= 0
    if cfg.label_set is not None:            # a set known to be held: its margin m decides the labels,
        m = np.asarray(label_set_function(cfg.label_set)(system, x), dtype=np.float64)
        # with the gap h = m meets: safe at m >= safe_margin, lost at m <= -unsafe_margin
        pos, lost = inside & (m >= cfg.safe_margin), inside & (m <= -cfg.unsafe_margin)
    else:
        low = np.full(len(x), -np.inf)
        low[inside] = backup_margin(tools, x[inside], res.u_min, res.u_max, cfg.backup_horizon, cfg.backup_dt,
                                    cfg.backup_hold, cfg.backup_input)
        pos, lost = low >= cfg.safe_fraction * cmax, inside & (low < 0)
    if not cfg.label_lost:
        lost = np.zeros(len(x), dtype=bool)
    start = in_initial(system, x) & inside
    pos, lost = pos | start, lost & ~start
    pool = Pool.build(system, x, cfg.order, pos=pos, neg=~inside, lost=lost)
    return pool, cmax


def _warm_start(barrier: MaskedBarrier, pool: Pool, tools: ConstraintTools, cfg: TrainConfig,
                gen: torch.Generator) -> None:
    """Regress h on a clipped first-order signed distance to the constraint boundary,
    clip(d / d_ref, -1, 1) with d = c / |grad c| and d_ref the median d inside: a plateau
    with straight-to-convex flanks.  A start near zero everywhere tends to end with an empty
    set; a start on c itself (a parabola for quadratic constraints) carries curvature at
    every level, which the HOCBF condition punishes (h'' theta_dot^2).  Its own schedule:
    Adam from 10x the training rate, decayed to 1x."""
    if cfg.warm_start_steps == 0:
        return
    if cfg.label_set is not None:
        return _fit_label_set(barrier, pool, tools, cfg, gen)
    x = pool.x.double().numpy()
    d = tools.signed_distance(x)
    d_ref = float(np.median(d[d > 0])) if np.any(d > 0) else 1.0
    target = torch.as_tensor(np.clip(d / d_ref, -1, 1), dtype=torch.float32)
    opt = torch.optim.Adam(barrier.parameters(), lr=10 * cfg.lr)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.1 ** (1 / cfg.warm_start_steps))
    for _ in range(cfg.warm_start_steps):
        idx = torch.randint(len(pool), (cfg.batch_size,), generator=gen)
        loss = torch.mean((barrier(pool.x[idx]).squeeze(-1) - target[idx]) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def _fit_label_set(barrier: MaskedBarrier, pool: Pool, tools: ConstraintTools, cfg: TrainConfig,
                   gen: torch.Generator) -> None:
    """Warm start on a known held set: regress h and its gradient on the set's margin m
    (clipped at its 90th percentile inside, gradient by central differences), both weighted toward
    the edge; Adam from 10x the training rate on a cosine schedule.  The gradient carries the
    set's slack (how an edge state's input raises h); values alone fit it too loosely for the
    condition to hold with margin there.  The fit runs in float64 and is then rounded to the
    float32 module (rounding the weights moves h by ~1e-7, far below the slack it keeps)."""
    x = pool.x.double().numpy()
    margin_of = label_set_function(cfg.label_set)
    m = np.asarray(margin_of(tools.system, x), dtype=np.float64)
    cap = float(np.quantile(m[m > 0], 0.9)) if np.any(m > 0) else 1.0
    step = 1e-6 * np.maximum(1.0, np.abs(x).max(axis=0))
    grad = np.stack([(margin_of(tools.system, x + step[i] * e) - margin_of(tools.system, x - step[i] * e))
                     / (2 * step[i]) for i, e in enumerate(np.eye(x.shape[1]))], axis=1)
    grad[np.abs(m) > cap] = 0.0                                   # the clipped target is flat there
    near = np.exp(-np.abs(m) / (0.3 * cap))
    target, grad_t, near_t = (torch.as_tensor(a, dtype=torch.float64) for a in (np.clip(m, -cap, cap), grad, near))
    states = pool.x.double()
    fit = copy.deepcopy(barrier).double()
    opt = torch.optim.Adam(fit.parameters(), lr=10 * cfg.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.warm_start_steps)
    for _ in range(cfg.warm_start_steps):
        idx = torch.randint(len(pool), (cfg.batch_size,), generator=gen)
        xb = states[idx].clone().requires_grad_(True)
        h = fit(xb).squeeze(-1)
        (g,) = torch.autograd.grad(h.sum(), xb, create_graph=True)
        w = near_t[idx]
        loss = torch.mean((h - target[idx]) ** 2 * (1 + 10 * w)) + torch.mean(((g - grad_t[idx]) ** 2).sum(-1) * w)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    if cfg.label_polish:
        _polish_label_fit(fit, x, margin_of, tools.system, cap, cfg.label_polish)
    barrier.load_state_dict({k: v.to(barrier.state_dict()[k].dtype) for k, v in fit.state_dict().items()})


POLISH_STATES = 4096
POLISH_HESSIAN = 0.1     # the Hessian term's weight, at the edge only (more trades the values away)


def _polish_label_fit(fit: MaskedBarrier, x: np.ndarray, margin_of, system, cap: float, steps: int) -> None:
    """Full-batch float64 L-BFGS on a Sobolev loss of order 2 against the clipped margin (as the warm
    start's): values and gradients weighted toward the edge, Hessians (central differences of m)
    at the edge only, each term scaled by its target's mean square.  An order-2
    condition reads h'' (the HOCBF row has h'' theta_dot^2), which Adam's values-and-gradients fit
    leaves ~30% off; matching it directly keeps the slack the set was designed with."""
    pick = np.random.default_rng(0).permutation(len(x))[:POLISH_STATES]
    x = x[pick]
    m = np.asarray(margin_of(system, x), dtype=np.float64)
    n = x.shape[1]
    step = 1e-4 * np.maximum(1.0, np.abs(x).max(axis=0))
    eye = np.eye(n)

    def grad_at(y: np.ndarray) -> np.ndarray:
        return np.stack([(margin_of(system, y + step[i] * eye[i]) - margin_of(system, y - step[i] * eye[i]))
                         / (2 * step[i]) for i in range(n)], axis=1)

    grad = grad_at(x)
    hess = np.stack([(grad_at(x + step[j] * eye[j]) - grad_at(x - step[j] * eye[j])) / (2 * step[j])
                     for j in range(n)], axis=2)
    flat = np.abs(m) > cap                                        # the clipped target is flat there
    grad[flat], hess[flat] = 0.0, 0.0
    near = np.exp(-np.abs(m) / (0.3 * cap))
    m = np.clip(m, -cap, cap)
    states = torch.as_tensor(x, dtype=torch.float64)
    m_t, g_t, hess_t, w = (torch.as_tensor(a, dtype=torch.float64) for a in (m, grad, hess, near))
    scale = [1.0 / max(float(np.mean(a**2)), 1e-12) for a in (m, grad, hess)]

    def loss_fn() -> torch.Tensor:
        xb = states.clone().requires_grad_(True)
        h = fit(xb).squeeze(-1)
        (g,) = torch.autograd.grad(h.sum(), xb, create_graph=True)
        hs = torch.stack([torch.autograd.grad(g[:, j].sum(), xb, create_graph=True)[0] for j in range(n)], dim=2)
        return (scale[0] * torch.mean((h - m_t) ** 2 * (1 + 10 * w))
                + scale[1] * torch.mean(((g - g_t) ** 2).sum(-1) * (1 + w))
                + POLISH_HESSIAN * scale[2] * torch.mean(((hs - hess_t) ** 2).sum((-1, -2)) * w))

    opt = torch.optim.LBFGS(fit.parameters(), lr=1.0, max_iter=steps, history_size=50,
                            tolerance_grad=1e-12, tolerance_change=1e-15, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    opt.step(closure)


def _ce_pool(system, tools: ConstraintTools, cfg: TrainConfig, res, x: np.ndarray, rng) -> Pool | None:
    if len(x) == 0:
        return None
    x = neighbours(rng, x, cfg.ce_neighbours, res.lo, res.hi, periodic=system.periodic)
    c = tools.constraint(x)
    none = np.zeros(len(x), dtype=bool)
    return Pool.build(system, x, cfg.order, pos=in_initial(system, x) & (c >= 0), neg=c < 0, lost=none)


def _train_round(barrier: MaskedBarrier, opt: torch.optim.Optimizer, pool: Pool, ce: Pool | None,
                 recent: Pool | None, cfg: TrainConfig, res, gen: torch.Generator) -> dict[str, float]:
    """One round of Adam steps; batches mix the labelled pool, all counterexamples so far and
    (half of the counterexample share) the newest ones, so fresh failures are not diluted."""
    n_ce = int(cfg.ce_fraction * cfg.batch_size) if ce is not None and len(ce) else 0
    n_new = n_ce // 2 if recent is not None and len(recent) else 0
    n_ce -= n_new
    totals: dict[str, float] = {}
    for _ in range(cfg.steps_per_round):
        batch = pool.batch(torch.randint(len(pool), (cfg.batch_size - n_ce,), generator=gen))
        if n_ce:
            batch = merge_batches(batch, ce.batch(torch.randint(len(ce), (n_ce,), generator=gen)))
        if n_new:
            batch = merge_batches(batch, recent.batch(torch.randint(len(recent), (n_new,), generator=gen)))
        t = lie_terms(barrier, batch.x, batch.f, batch.G, cfg.order, batch.Dff, batch.DfG, create_graph=True)
        loss, parts = barrier_loss(t, batch, cfg, res.u_min, res.u_max)
        opt.zero_grad()
        loss.backward()
        opt.step()
        for k, v in parts.items():
            totals[k] = totals.get(k, 0.0) + v / cfg.steps_per_round
    return totals


def _run_rounds(barrier, pool, system, tools, cfg, res, gen, t0, progress: bool | None, ce: Pool | None = None,
                first_round: int = 0, phase: int = 0,
                start: CheckResult | None = None) -> tuple[MaskedBarrier, CheckResult, list, int]:
    """Sampled counterexample rounds; ``ce``: counterexamples to start from (the certifier's).
    History rows count on from ``first_round`` (one round axis over every phase; ``phase`` 0 is
    the first sampled phase, k the one after the k-th certifier call); the round whose network
    is returned is marked ``best_in_phase``.  ``start``: the check of ``barrier`` as given, which
    makes the untrained network a candidate too (its row is marked ``start``)."""
    from tqdm import tqdm

    opt = torch.optim.Adam(barrier.parameters(), lr=cfg.lr)
    recent: Pool | None = ce
    history: list[dict[str, float]] = []
    best: tuple[int, MaskedBarrier, CheckResult, int] | None = None
    bar = tqdm(range(cfg.rounds), desc=f"train {cfg.system}", disable=not _progress_enabled(progress),
               leave=False)
    last: CheckResult | None = None
    rounds_done = 0
    clean = 0
    shift = 0                                  # rows before the first trained round
    if start is not None:
        history.append({"round": first_round, "phase": phase, "phase_round": 0, "start": True,
                        "time_s": round(time.perf_counter() - t0, 3), **start.summary()})
        score = start.failures + start.robust_failures
        best, last, clean = (score, copy.deepcopy(barrier), start, 0), start, int(score == 0)
        shift = 1
    for r in bar:
        for group in opt.param_groups:
            group["lr"] = cfg.lr * max(cfg.lr_decay ** r, cfg.lr_floor)
        parts = _train_round(barrier, opt, pool, ce, recent, cfg, res, gen)
        b64 = copy.deepcopy(barrier).double()
        last = check(b64, system, tools, cfg, res.lo, res.hi, res.u_min, res.u_max,
                     np.random.default_rng([cfg.seed, 7, r]))
        rounds_done = r + 1
        history.append({"round": first_round + shift + r, "phase": phase, "phase_round": shift + r,
                        "time_s": round(time.perf_counter() - t0, 3), **{f"loss_{k}": v for k, v in parts.items()},
                        **last.summary()})
        bar.set_postfix(cond=last.condition_failures, cont=last.containment_failures,
                        cov=f"{last.coverage:.3f}")
        score = last.failures + last.robust_failures
        if best is None or score <= best[0]:
            best = (score, copy.deepcopy(barrier), last, len(history) - 1)
        clean = clean + 1 if score == 0 else 0
        if clean >= cfg.clean_checks and rounds_done >= cfg.min_rounds:
            break
        if time.perf_counter() - t0 > cfg.max_time:
            break
        extra = _ce_pool(system, tools, cfg, res, last.counterexamples, np.random.default_rng([cfg.seed, 11, r]))
        recent = extra
        if extra is not None:
            ce = extra if ce is None else ce.extend(extra, CE_CAP)
    bar.close()
    history[best[3]]["best_in_phase"] = True
    return best[1], best[2], history, rounds_done


def train_barrier(config: TrainConfig, out_dir: str | Path | None = None, *, progress: bool | None = None,
                  overwrite: bool = False, verify: bool = True) -> TrainResult:
    """Train, check, export and (optionally) verify a barrier for ``config``.

    With ``out_dir`` the directory receives model.onnx, state_dict.pt and model.json
    atomically (``overwrite`` replaces an existing one).  ``verify`` runs the compiled-model
    verifier (needs a C++ compiler); its numbers go into the card.  ``progress``: tqdm bar,
    default on when stderr is a terminal.
    """
    if isinstance(config, dict):
        config = TrainConfig.from_dict(config)
    system = config.build_system()
    res = config.resolve(system)
    if out_dir is not None and Path(out_dir).exists() and not overwrite:
        raise FileExistsError(f"output directory {out_dir} exists; pass overwrite=True (CLI: --force) to replace it")
    if config.teacher_activation is not None or config.teacher is not None:     # distil a teacher (distilled.py)
        from .distilled import train_distilled
        return train_distilled(config, system, res, out_dir, progress=progress, overwrite=overwrite, verify=verify)
    torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    t0 = time.perf_counter()
    tools = ConstraintTools(system)
    pool, cmax = _label_pool(system, tools, config, res, rng)
    scaled = config.scale_inputs
    barrier = MaskedBarrier(system.n, res.mask, config.hidden, config.activation, seed=config.seed,
                            center=(res.lo + res.hi) / 2 if scaled else None,
                            half_width=(res.hi - res.lo) / 2 if scaled else None, periodic=system.periodic)
    _warm_start(barrier, pool, tools, config, gen)
    start = None
    if config.label_set is not None:         # the fit of a held set may already be the best network
        start = check(copy.deepcopy(barrier).double(), system, tools, config, res.lo, res.hi, res.u_min, res.u_max,
                      np.random.default_rng([config.seed, 7, 0]))
    barrier, final, history, rounds = _run_rounds(barrier, pool, system, tools, config, res, gen, t0, progress,
                                                  start=start)
    certificate, cert_history = None, []
    if config.certify:
        barrier, final, certificate, cert_history = _certify_rounds(barrier, final, pool, system, tools, config,
                                                                    res, gen, t0, progress, history)
    mark_kept(history)
    train_time = time.perf_counter() - t0
    training = {"time_s": round(train_time, 3), "rounds": rounds, "final_check": final.summary(),
                "history": history, "n_positive": int(pool.pos.sum()), "n_negative": int(pool.neg.sum()),
                "n_lost": int(pool.lost.sum()),
                "constraint_max": cmax, "torch": torch.__version__,
                "note": "final_check: the trainer's float64 autograd check of the returned network"}
    if config.certify:
        training["certify_history"] = cert_history
    card = build_card(config, system, res, training)
    verification = None
    if out_dir is not None:
        with atomic_directory(out_dir, overwrite=overwrite) as tmp:
            verification = _export_and_verify(tmp, barrier, card, config, verify, certificate)
        out = Path(out_dir)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            verification = _export_and_verify(Path(tmp), barrier, card, config, verify, certificate)
        out = None
    nonempty = (final.coverage or 0.0) > 0.0
    passed = final.failures == 0 and nonempty and (verification is None or bool(verification["passed"]))
    passed = passed and (certificate is None or certificate.certified)
    return TrainResult(barrier, card.to_dict(), out, passed, train_time, rounds, history, final.summary(),
                       verification, certificate)


def _certify_rounds(barrier, final, pool, system, tools, cfg, res, gen, t0, progress, history):
    """The certifier as the oracle after the sampled rounds (training.certified_training):
    its counterexamples and undecided boxes' centres and corners seed the counterexample pool
    of ``cfg.certify_train_rounds`` more sampled rounds, then it runs again."""
    from .certified_training import certify_rounds
    state = {"final": final, "barrier": barrier}
    retrain = cfg.replace(rounds=cfg.certify_train_rounds, min_rounds=cfg.certify_train_rounds,
                          lr=cfg.lr * cfg.lr_floor, max_time=float("inf"))

    def train_more(points: np.ndarray) -> MaskedBarrier:
        ce = _ce_pool(system, tools, cfg, res, points, np.random.default_rng([cfg.seed, 13, len(history)]))
        trained, state["final"], more, _ = _run_rounds(state["barrier"], pool, system, tools, retrain, res, gen, t0,
                                                        progress, ce, first_round=len(history),
                                                        phase=history[-1]["phase"] + 1)
        history.extend(more)
        state["barrier"] = trained
        return trained

    card = build_card(cfg, system, res, {})
    log = print if _progress_enabled(progress) else (lambda *_: None)
    barrier, certificate, cert_history = certify_rounds(barrier, card, train_more, cfg, res.lo, res.hi, log=log)
    return barrier, state["final"], certificate, cert_history


def mark_kept(history: list[dict]) -> None:
    """Mark the round whose network the run returns: the best round of the last phase (the
    certifier, when it ran, judged exactly that network)."""
    best = [row for row in history if row.get("best_in_phase")]
    if best:
        best[-1]["kept"] = True


def _export_and_verify(directory: Path, barrier: MaskedBarrier, card, cfg: TrainConfig, verify: bool,
                       certificate=None):
    write_model_files(directory, barrier)
    if certificate is not None:
        certificate.to_json(directory / CERT_NAME)
    return finish_directory(directory, card, cfg, verify)


def finish_directory(directory: Path, card, cfg: TrainConfig, verify: bool) -> dict | None:
    """After the model files: the compiled verifier (its report goes into the card), the card,
    the training curves.  Returns the verifier's report (None: not asked)."""
    verification = None
    if verify:
        from .verify import verify as run_verify
        report = run_verify(directory / ONNX_NAME, card.to_dict(), samples=cfg.verify_samples)
        verification = report.to_dict()
        card.verification = verification
    card.to_json(directory / CARD_NAME)
    from .curves import plot_distillation_rounds, plot_training_curves
    title = f"Training: {card.system}"
    distilled = card.training.get("distillation")
    if distilled and distilled.get("teacher"):  # a written-down teacher has no rounds: draw the student's
        plot_distillation_rounds(directory / CURVES_NAME, distilled.get("rounds", []),
                                 title=f"Distillation: {card.system} (from {distilled['teacher']}, written down)")
        return verification
    if distilled:                             # the curves are the teacher's: the student's rounds are in model.json
        from .distilled import teacher_name
        title += f" ({teacher_name(distilled)}; the model is distilled from it)"
    plot_training_curves(directory / CURVES_NAME, card.training.get("history", []), title=title,
                         certify_history=card.training.get("certify_history"))
    return verification
