"""``cbfsim train`` with ``teacher_activation`` or ``teacher``: a barrier in an activation the
trainer fits badly (ReLU, which the exact verifiers of the literature ask for) made from one it
fits well, or from one written down (``training.teachers``).

The trainer's own ReLU fits leave thin pieces whose gradient breaks the condition (the
obstacle-avoidance ReLU preset trained directly is refuted).  Here the config is trained as it
stands but with the teacher's smooth activation (and ``teacher_hidden`` widths, when given), or
``teacher`` names a function (system, widths) -> network, a barrier written down, taken as it
is; the teacher is then distilled into the config's network (``distil.py``: Sobolev fit, a
tune on the conditions, counterexample rounds against the trainer's dense check and the
certifier).  The output directory is a normal one -- model.onnx,
state_dict.pt and model.json are the student's, with its activation and widths, so verify,
certify, compile and simulate take it as they take any -- plus ``teacher/`` (the teacher's own
files, and the trained teacher's card).  The card's ``training.distillation`` records every round.
"""
from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .artifacts import CARD_NAME, ONNX_NAME, STATE_NAME, atomic_directory, build_card, write_model_files
from .check import check
from .config import ConfigError, TrainConfig, import_function
from .distil import Hinges, distil
from .network import export_onnx, to_sequential
from .samplers import ConstraintTools

TEACHER_DIR = "teacher"


def train_distilled(config: TrainConfig, system: Any, res: Any, out_dir: str | Path | None, *,
                    progress: bool | None, overwrite: bool, verify: bool) -> Any:
    """Train the teacher, distil it, check, export and (optionally) verify: ``train_barrier``'s
    contract (a ``TrainResult``; ``passed`` also asks that the last counterexample round found
    none).  ``system``, ``res``: the config's plant and its resolved fields (``train_barrier``
    has them)."""
    from .trainer import TrainResult, finish_directory
    started = time.perf_counter()
    teacher = _teacher(config, system, progress)
    torch.set_num_threads(config.threads)
    tools = ConstraintTools(system)
    checks = np.random.default_rng([config.seed, 17])

    def sampled(student: torch.nn.Module) -> tuple[np.ndarray, int]:
        found = check(student, system, tools, config, res.lo, res.hi, res.u_min, res.u_max, checks)
        return found.counterexamples, found.failures

    reads = np.isin(np.arange(system.n), res.mask)
    student, rounds = distil(teacher.network, system, list(config.hidden),
                             activation=config.activation, lo=res.lo, hi=res.hi, reads=reads,
                             hinges=Hinges(gamma=config.gamma, condition_margin=config.condition_margin,
                                            stability=config.distil_stability),
                             fit_steps=config.distil_steps, tune_steps=config.distil_steps // 3,
                             seed=config.seed, refine_rounds=config.distil_rounds,
                             refine_time=config.distil_time_limit, clean_rounds=config.clean_checks,
                             sampled=sampled)
    final = check(student, system, tools, config, res.lo, res.hi, res.u_min, res.u_max,
                  np.random.default_rng([config.seed, 7, 0]))
    student = student.float().eval()
    last = next((r for r in rounds if r.get("returned")), rounds[-1] if rounds else None)     # the student's round
    clean = last is None or (last["sampled_failures"] == 0 and last["certifier"] != "refuted")
    train_time = time.perf_counter() - started
    training = {"time_s": round(train_time, 3), "rounds": teacher.rounds, "final_check": final.summary(),
                "history": teacher.history, "torch": torch.__version__,
                "distillation": {"teacher_activation": config.teacher_activation, "teacher": config.teacher,
                                 "teacher_dir": TEACHER_DIR, "teacher_final_check": teacher.final_check,
                                 "teacher_time_s": round(teacher.train_time, 3),
                                 "rounds": rounds, "last_round_clean": clean},
                "note": "final_check: the trainer's float64 autograd check of the distilled network; history: the "
                        "teacher's rounds"}
    card = build_card(config, system, res, training)
    verification = None
    if out_dir is not None:
        with atomic_directory(out_dir, overwrite=overwrite) as tmp:
            (tmp / TEACHER_DIR).mkdir()
            if teacher.trained is not None:
                write_model_files(tmp / TEACHER_DIR, teacher.trained.barrier)
                (tmp / TEACHER_DIR / CARD_NAME).write_text(json.dumps(teacher.trained.card, indent=2) + "\n")
            else:
                export_onnx(copy.deepcopy(teacher.network).float().eval(), tmp / TEACHER_DIR / ONNX_NAME, system.n)
            torch.save(student.state_dict(), tmp / STATE_NAME)
            export_onnx(copy.deepcopy(student), tmp / ONNX_NAME, system.n)
            verification = finish_directory(tmp, card, config, verify)
    passed = final.failures == 0 and (final.coverage or 0.0) > 0.0 and clean
    passed = passed and (verification is None or bool(verification["passed"]))
    return TrainResult(student, card.to_dict(), None if out_dir is None else Path(out_dir), passed,
                       train_time, teacher.rounds, teacher.history, final.summary(), verification)


def teacher_name(distillation: dict) -> str:
    """How the card's ``training.distillation`` names its teacher, for logs and figures."""
    if distillation.get("teacher"):
        return f"the written-down teacher {distillation['teacher']}"
    return f"a {distillation['teacher_activation']} teacher"


@dataclass
class Teacher:
    """The network distilled from (float64, raw states) and what its training left, if trained."""
    network: torch.nn.Module
    trained: Any = None          # the teacher's TrainResult; None: written down (config.teacher)

    @property
    def rounds(self) -> int:
        return 0 if self.trained is None else self.trained.rounds

    @property
    def history(self) -> list:
        return [] if self.trained is None else self.trained.history

    @property
    def final_check(self) -> dict | None:
        return None if self.trained is None else self.trained.final_check

    @property
    def train_time(self) -> float:
        return 0.0 if self.trained is None else self.trained.train_time


def _teacher(config: TrainConfig, system: Any, progress: bool | None) -> Teacher:
    """Train the config's smooth teacher (``teacher_activation``), or build the written-down one
    (``teacher``), checked to read the plant's n states and return one value."""
    from .trainer import train_barrier
    widths = list(config.teacher_hidden or config.hidden)
    if config.teacher is None:
        teacher_config = config.replace(activation=config.teacher_activation, teacher_activation=None,
                                        teacher_hidden=None, hidden=widths)
        trained = train_barrier(teacher_config, None, progress=progress, verify=False)
        return Teacher(to_sequential(trained.barrier, torch.float64), trained)
    try:
        network = import_function(config.teacher, "teacher")(system, widths)
    except ValueError as exc:
        raise ConfigError(f"teacher {config.teacher!r}: {exc}") from None
    if not isinstance(network, torch.nn.Module):
        raise ConfigError(f"teacher {config.teacher!r} returned {type(network).__name__}, not a torch module")
    network = copy.deepcopy(network).double().eval()
    try:
        out = network(torch.zeros(2, system.n, dtype=torch.float64))
    except RuntimeError as exc:
        raise ConfigError(f"teacher {config.teacher!r} does not take the {system.n} states of "
                          f"{system.name!r}: {str(exc).splitlines()[0]}") from None
    if tuple(out.shape) != (2, 1):
        raise ConfigError(f"teacher {config.teacher!r} returns shape {tuple(out.shape[1:])} per state, not (1,)")
    return Teacher(network)
