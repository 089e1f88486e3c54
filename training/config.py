"""Training configuration: one JSON-serialisable dataclass, validated before any work starts.

Everything a run depends on lives here (system, gains, domain, network, margins, budgets,
seed), so the config stored in the model card reproduces the run.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from compiler.activations import preset
from compiler.errors import CbfsimError

from .architectures import ACTIVATION_NAMES

# Activations whose second derivative is zero almost everywhere: useless for order 2.
PIECEWISE_LINEAR = tuple(name for name in ACTIVATION_NAMES if preset(name)[0].piecewise_linear)


class ConfigError(CbfsimError, ValueError):
    """A training config field is missing or invalid (the message names the field)."""


@dataclass
class TrainConfig:
    """A neural-CBF training run. Defaults suit a small 2-state plant; see ``presets``."""

    system: str
    params: dict[str, float] = field(default_factory=dict)     # system parameter overrides
    order: int = 1                                              # 1: CBF, 2: HOCBF (L_G h == 0)
    gamma: float = 1.0                                          # order 1: alpha(h) = gamma h
    alpha1: float = 1.0                                         # order 2: psi1 = L_f h + alpha1 h
    alpha2: float = 1.0                                         # order 2: psi1' >= -alpha2 psi1
    u_min: list[float] | None = None                            # input box; None: the system's
    u_max: list[float] | None = None
    domain_lo: list[float] | None = None                        # training box; None: system.domain
    domain_hi: list[float] | None = None
    hidden: list[int] = field(default_factory=lambda: [32, 32])
    activation: str = "relu"
    input_mask: list[int] | None = None                         # state indices the network sees
    scale_inputs: bool = True                                   # map the training box to [-1, 1] first

    # labels: positives are states whose backup rollout keeps constraint >= safe_fraction * max;
    # with label_lost, states whose rollout leaves the set are negatives (conservative)
    safe_fraction: float = 0.1
    label_lost: bool = False
    backup_horizon: float = 2.0                                 # [s]
    backup_dt: float = 0.01                                     # [s], RK4 with zero-order-hold input
    backup_hold: list[int] = field(default_factory=list)        # inputs the backup keeps at mid-box
    backup_input: list[float] | None = None                     # a constant backup input instead of the greedy law
    label_set: str | None = None                                # module:function, a known held set instead of rollouts

    # margins (h units; condition margin in h units per second)
    safe_margin: float = 0.05
    unsafe_margin: float = 0.05
    condition_margin: float = 0.02
    band: float = 0.1                   # a failing state may also be fixed by pushing h below -band
    # loss weights
    w_safe: float = 1.0
    w_unsafe: float = 1.0
    w_condition: float = 1.0

    # data and optimisation
    n_uniform: int = 30_000
    n_boundary: int = 10_000
    batch_size: int = 2048
    ce_fraction: float = 0.5            # share of each batch drawn from counterexamples
    steps_per_round: int = 300
    warm_start_steps: int = 300         # regress h onto the scaled constraint first
    label_polish: int = 0               # label_set: L-BFGS steps matching h, grad h, Hessian after the fit
    lr: float = 1e-3
    lr_decay: float = 0.85              # per round, down to lr * lr_floor
    lr_floor: float = 0.2
    rounds: int = 20                    # counterexample-guided rounds (upper bound)
    min_rounds: int = 1
    clean_checks: int = 2               # stop after this many consecutive clean checks
    check_samples: int = 200_000        # uniform float64 check per round
    check_boundary: int = 50_000        # plus the states with the smallest |h| of 4x as many
    ce_neighbours: int = 4
    ce_max_per_round: int = 4000
    max_time: float = 170.0             # [s] wall-clock budget for the rounds
    verify_samples: int = 200_000       # final compiled verification (independent seed)
    seed: int = 0
    # training against the certifier (training.certified_training): after the sampled rounds
    certify: bool = False               # run the certifier; its counterexamples join the pool
    certify_rounds: int = 3             # certifier calls at most (each but the last followed by training)
    certify_train_rounds: int = 3       # sampled rounds after each uncertified call
    certify_time_limit: float = 120.0   # [s] per certifier call
    # distillation (training.distilled): train a smooth teacher of the same widths with this
    # activation, then fit this config's network (e.g. ReLU, for the exact verifiers) to it,
    # with counterexample rounds against a dense check and the certifier; None: train directly
    teacher_activation: str | None = None
    # or distil a barrier written down, not trained: package.module:function, (system, widths) ->
    # nn.Module on raw states (training.teachers); widths: teacher_hidden, else hidden
    teacher: str | None = None
    teacher_hidden: list[int] | None = None     # the teacher's widths; None: the student's (hidden)
    distil_steps: int = 6000            # the student's fit to the teacher (then a third as many tuning)
    distil_rounds: int = 12             # counterexample rounds at most (stops after clean_checks clean ones)
    distil_time_limit: float = 30.0     # [s] per certifier call of a round
    distil_stability: float = 0.0       # weight of the tune's hinge keeping kinks off {h = 0} (training/distil.py)
    dt_control: float = 0.0             # [s] control period certified (zero-order hold); 0: continuous
    # the filter margin's state scale [bias, w_1..w_n]: the certified filter enforces
    # a + b.u >= eps (bias + w.x) (training/margin.py); None: a constant eps
    margin_scale: list[float] | None = None
    # carried into the card for the filter and the certifier (not used by the rounds):
    # the faces of D the filter enforces as rows, {"theta_dot": {"gamma": 10, "margin": 1}}
    # (training/certify/faces.py), and the filter margin eps the certifier's search starts from
    faces: dict[str, dict[str, float]] | None = None
    filter_margin: float | None = None
    # torch intra-op threads.  1 by default: for these small batches a second thread buys
    # nothing on an idle 2-core machine and, measured here with other jobs running, made each
    # training step 20-50x slower (the OpenMP workers spin waiting for a busy core).
    threads: int = 1

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TrainConfig":
        if not isinstance(data, Mapping):
            raise ConfigError(f"config must be a mapping, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ConfigError(f"unknown config fields {sorted(unknown)}")
        if "system" not in data:
            raise ConfigError("config field 'system' is missing")
        return cls(**dict(data))

    def replace(self, **changes: Any) -> "TrainConfig":
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ resolution
    def build_system(self):
        """The plant with the parameter overrides applied."""
        from systems import get_system
        try:
            return get_system(self.system, **{k: float(v) for k, v in self.params.items()})
        except KeyError as exc:
            raise ConfigError(f"system: {exc.args[0]}") from None
        except TypeError as exc:
            raise ConfigError(f"params: {exc}") from None

    def resolve(self, system) -> "Resolved":
        """Validate against the system and fill the defaults it supplies."""
        validate(self, system)
        lo, hi = system.domain
        lo = np.asarray(self.domain_lo if self.domain_lo is not None else lo, dtype=np.float64)
        hi = np.asarray(self.domain_hi if self.domain_hi is not None else hi, dtype=np.float64)
        umin = np.asarray(self.u_min if self.u_min is not None else system.u_min, dtype=np.float64)
        umax = np.asarray(self.u_max if self.u_max is not None else system.u_max, dtype=np.float64)
        mask = list(range(system.n)) if self.input_mask is None else sorted(self.input_mask)
        return Resolved(lo, hi, umin, umax, mask)


@dataclass(frozen=True)
class Resolved:
    """Config values that default to the system's: domain box, input box, input mask."""

    lo: np.ndarray
    hi: np.ndarray
    u_min: np.ndarray
    u_max: np.ndarray
    mask: list[int]


def _positive(cfg: TrainConfig, name: str, allow_zero: bool = False) -> None:
    value = getattr(cfg, name)
    ok = isinstance(value, (int, float)) and math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise ConfigError(f"{name} must be a finite number {'>= 0' if allow_zero else '> 0'}, got {value!r}")


def _vector(cfg: TrainConfig, name: str, size: int) -> None:
    value = getattr(cfg, name)
    if value is None:
        return
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != (size,) or not np.all(np.isfinite(arr)):
        raise ConfigError(f"{name} must be {size} finite numbers, got {value!r}")


def label_set_function(path: str):
    """The callable ``(system, x) -> margin`` named by ``label_set`` ("package.module:function")."""
    return import_function(path, "label_set")


def import_function(path: str, field: str):
    """The callable named by the config's ``field``, an import path "package.module:function"."""
    import importlib
    module_name, _, attr = str(path).partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{field} must be an import path package.module:function, got {path!r}")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{field} {path!r}: cannot import it ({exc})") from None
    if not callable(fn):
        raise ConfigError(f"{field} {path!r} is not callable")
    return fn


def _check_teacher(cfg: TrainConfig, system) -> None:
    """A distillation the trainer can run: a smooth trained teacher or a written-down one, another
    student, order 1, no periodic embedding (the student reads raw states)."""
    name = cfg.teacher_activation
    field = "teacher" if name is None else "teacher_activation"
    if cfg.teacher is not None and name is not None:
        raise ConfigError(f"teacher {cfg.teacher!r} and teacher_activation {name!r}: give one (a barrier "
                          "written down, or one trained with that activation)")
    if cfg.teacher is not None:
        import_function(cfg.teacher, "teacher")
    elif name not in ACTIVATION_NAMES:
        raise ConfigError(f"teacher_activation {name!r} unknown; choose from {', '.join(ACTIVATION_NAMES)}")
    elif not preset(name)[0].smooth:
        raise ConfigError(f"teacher_activation {name!r} is not smooth ({preset(name)[0].not_smooth}); the teacher "
                          "must be (e.g. softplus)")
    elif name == cfg.activation:
        raise ConfigError(f"teacher_activation {name!r} is the student's activation too: train it directly "
                          "(no teacher_activation)")
    if cfg.teacher_hidden is not None and (not cfg.teacher_hidden or any(
            not isinstance(w, int) or w < 1 for w in cfg.teacher_hidden)):
        raise ConfigError(f"teacher_hidden must list layer widths >= 1, got {cfg.teacher_hidden!r}")
    if cfg.order != 1:
        raise ConfigError(f"{field}: distillation is for order 1 barriers (order 2 needs a smooth "
                          "network: train it directly)")
    if getattr(system, "periodic", {}):
        raise ConfigError(f"{field}: system {system.name!r} has periodic coordinates; a distilled "
                          "student reads raw states and cannot wrap them (train it directly)")
    if cfg.certify:
        raise ConfigError(f"{field} and certify: the distillation's counterexample rounds already ask "
                          "the certifier (distil_rounds, distil_time_limit); drop certify")


def validate(cfg: TrainConfig, system) -> None:
    """Raise ConfigError naming the first invalid field."""
    n, m = system.n, system.m
    if cfg.order not in (1, 2):
        raise ConfigError(f"order must be 1 or 2, got {cfg.order!r}")
    for name in ("gamma", "alpha1", "alpha2", "safe_margin", "unsafe_margin", "band", "lr", "backup_horizon",
                 "backup_dt", "max_time"):
        _positive(cfg, name)
    for name in ("condition_margin", "w_safe", "w_unsafe", "w_condition", "safe_fraction", "dt_control"):
        _positive(cfg, name, allow_zero=True)
    _positive(cfg, "certify_time_limit")
    _positive(cfg, "distil_time_limit")
    _positive(cfg, "distil_stability", allow_zero=True)
    if not 0 <= cfg.safe_fraction < 1:
        raise ConfigError(f"safe_fraction must be in [0, 1), got {cfg.safe_fraction}")
    if not 0 <= cfg.ce_fraction < 1:
        raise ConfigError(f"ce_fraction must be in [0, 1), got {cfg.ce_fraction}")
    for name in ("lr_decay", "lr_floor"):
        value = getattr(cfg, name)
        if not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise ConfigError(f"{name} must be in (0, 1], got {value!r}")
    if cfg.label_set is not None and cfg.rounds == 0 and isinstance(cfg.rounds, int):
        pass                                  # the label set's fit is the network, no rounds after it
    elif not isinstance(cfg.rounds, int) or cfg.rounds < 1:
        raise ConfigError(f"rounds must be an integer >= 1 (0 only with a label_set), got {cfg.rounds!r}")
    for name in ("n_uniform", "batch_size", "check_samples", "verify_samples", "threads", "clean_checks"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    for name in ("n_boundary", "steps_per_round", "warm_start_steps", "label_polish", "min_rounds", "check_boundary",
                 "ce_neighbours", "ce_max_per_round", "seed", "certify_rounds", "certify_train_rounds",
                 "distil_rounds", "distil_steps"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or value < 0:
            raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
    for name, size in (("u_min", m), ("u_max", m), ("domain_lo", n), ("domain_hi", n), ("backup_input", m)):
        _vector(cfg, name, size)
    if cfg.margin_scale is not None:
        from .margin import MarginError, margin_from
        try:
            margin_from(1.0, cfg.margin_scale).check_domain(
                n, cfg.domain_lo if cfg.domain_lo is not None else system.domain[0],
                cfg.domain_hi if cfg.domain_hi is not None else system.domain[1])
        except MarginError as e:
            raise ConfigError(str(e)) from None
    lo = cfg.domain_lo if cfg.domain_lo is not None else system.domain[0]
    hi = cfg.domain_hi if cfg.domain_hi is not None else system.domain[1]
    if cfg.faces is not None:
        from .certify.faces import FaceError, faces_from_config
        try:
            faces_from_config(system, {"faces": cfg.faces}, np.asarray(lo, float), np.asarray(hi, float))
        except FaceError as e:
            raise ConfigError(str(e)) from None
    if cfg.filter_margin is not None:
        _positive(cfg, "filter_margin", allow_zero=True)
    if not np.all(np.asarray(lo) < np.asarray(hi)):
        raise ConfigError(f"domain_lo {list(lo)} must be below domain_hi {list(hi)} in every state")
    for i, period in getattr(system, "periodic", {}).items():
        if abs((hi[i] - lo[i]) - period) > 1e-9 * period or abs(lo[i] - system.domain[0][i]) > 1e-9 * period:
            raise ConfigError(f"domain_lo/domain_hi: {system.state_names[i]!r} (coordinate {i}) is periodic; the "
                              f"training box must span its one period [{system.domain[0][i]!r}, "
                              f"{system.domain[1][i]!r}], got [{float(lo[i])!r}, {float(hi[i])!r}]")
    umin = cfg.u_min if cfg.u_min is not None else system.u_min
    umax = cfg.u_max if cfg.u_max is not None else system.u_max
    if not np.all(np.asarray(umin) <= np.asarray(umax)):
        raise ConfigError(f"u_min {list(umin)} exceeds u_max {list(umax)}")
    if not cfg.hidden or any(not isinstance(w, int) or w < 1 for w in cfg.hidden):
        raise ConfigError(f"hidden must list layer widths >= 1, got {cfg.hidden!r}")
    if cfg.activation not in ACTIVATION_NAMES:
        raise ConfigError(f"activation {cfg.activation!r} unknown; choose from {', '.join(ACTIVATION_NAMES)}")
    if cfg.order == 2 and not preset(cfg.activation)[0].smooth:
        raise ConfigError(f"activation {cfg.activation!r} is not twice continuously differentiable "
                          f"({preset(cfg.activation)[0].not_smooth}); order 2 needs a smooth one "
                          "(e.g. softplus, tanh, silu)")
    if cfg.teacher_activation is not None or cfg.teacher is not None:
        _check_teacher(cfg, system)
    if cfg.input_mask is not None:
        mask = cfg.input_mask
        if (not mask or len(set(mask)) != len(mask)
                or any(not isinstance(i, int) or not 0 <= i < n for i in mask)):
            raise ConfigError(f"input_mask must list distinct state indices in [0, {n}), got {mask!r}")
    if cfg.label_set is not None:
        label_set_function(cfg.label_set)
    if any(not isinstance(j, int) or not 0 <= j < m for j in cfg.backup_hold):
        raise ConfigError(f"backup_hold must list input indices in [0, {m}), got {cfg.backup_hold!r}")
    if cfg.order == 2:
        seen = set(range(n)) if cfg.input_mask is None else set(cfg.input_mask)
        driven = {i for i in range(n) if any(system.G_expr[i, j] != 0 for j in range(m))}
        if seen & driven:
            names = [system.state_names[i] for i in sorted(seen & driven)]
            raise ConfigError(f"order 2 needs L_G h == 0, but the network sees the input-driven states {names}; "
                              "set input_mask to exclude them")
