"""``cbfsim train`` with ``teacher_activation``: a barrier in an activation the trainer fits badly
(ReLU, which the exact verifiers of the literature ask for) made from one it fits well.

The trainer's own ReLU fits leave thin pieces whose gradient breaks the condition (the
obstacle-avoidance ReLU preset trained directly is refuted).  Here the config is trained as it
stands but with the teacher's smooth activation (and ``teacher_hidden`` widths, when given:
the spacecraft's 3 x 8 is distilled from a 3 x 16), then distilled into the config's network
(``distil.py``: Sobolev fit, a tune on the conditions, counterexample rounds against the
trainer's dense check and the certifier).  The output directory is a normal one -- model.onnx,
state_dict.pt and model.json are the student's, with its activation and widths, so verify,
certify, compile and simulate take it as they take any -- plus ``teacher/`` (the teacher's own
files and card).  The card's ``training.distillation`` records every round.
"""
from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .artifacts import CARD_NAME, ONNX_NAME, STATE_NAME, atomic_directory, build_card, write_model_files
from .check import check
from .config import TrainConfig
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
    from .trainer import TrainResult, finish_directory, train_barrier
    started = time.perf_counter()
    teacher_config = config.replace(activation=config.teacher_activation, teacher_activation=None, teacher_hidden=None,
                                    hidden=list(config.teacher_hidden or config.hidden))
    teacher = train_barrier(teacher_config, None, progress=progress, verify=False)
    torch.set_num_threads(config.threads)
    tools = ConstraintTools(system)
    checks = np.random.default_rng([config.seed, 17])

    def sampled(student: torch.nn.Module) -> tuple[np.ndarray, int]:
        found = check(student, system, tools, config, res.lo, res.hi, res.u_min, res.u_max, checks)
        return found.counterexamples, found.failures

    reads = np.isin(np.arange(system.n), res.mask)
    student, rounds = distil(to_sequential(teacher.barrier, torch.float64), system, list(config.hidden),
                             activation=config.activation, lo=res.lo, hi=res.hi, reads=reads,
                             hinges=Hinges(gamma=config.gamma, condition_margin=config.condition_margin),
                             fit_steps=config.distil_steps, tune_steps=config.distil_steps // 3,
                             seed=config.seed, refine_rounds=config.distil_rounds,
                             refine_time=config.distil_time_limit, clean_rounds=config.clean_checks,
                             sampled=sampled)
    final = check(student, system, tools, config, res.lo, res.hi, res.u_min, res.u_max,
                  np.random.default_rng([config.seed, 7, 0]))
    student = student.float().eval()
    clean = not rounds or (rounds[-1]["sampled_failures"] == 0 and rounds[-1]["certifier"] != "refuted")
    train_time = time.perf_counter() - started
    training = {"time_s": round(train_time, 3), "rounds": teacher.rounds, "final_check": final.summary(),
                "history": teacher.history, "torch": torch.__version__,
                "distillation": {"teacher_activation": config.teacher_activation, "teacher_dir": TEACHER_DIR,
                                 "teacher_final_check": teacher.final_check,
                                 "teacher_time_s": round(teacher.train_time, 3),
                                 "rounds": rounds, "last_round_clean": clean},
                "note": "final_check: the trainer's float64 autograd check of the distilled network; history: the "
                        "teacher's rounds"}
    card = build_card(config, system, res, training)
    verification = None
    if out_dir is not None:
        with atomic_directory(out_dir, overwrite=overwrite) as tmp:
            (tmp / TEACHER_DIR).mkdir()
            write_model_files(tmp / TEACHER_DIR, teacher.barrier)
            (tmp / TEACHER_DIR / CARD_NAME).write_text(json.dumps(teacher.card, indent=2) + "\n")
            torch.save(student.state_dict(), tmp / STATE_NAME)
            export_onnx(copy.deepcopy(student), tmp / ONNX_NAME, system.n)
            verification = finish_directory(tmp, card, config, verify)
    passed = final.failures == 0 and (final.coverage or 0.0) > 0.0 and clean
    passed = passed and (verification is None or bool(verification["passed"]))
    return TrainResult(student, card.to_dict(), None if out_dir is None else Path(out_dir), passed,
                       train_time, teacher.rounds, teacher.history, final.summary(), verification)
