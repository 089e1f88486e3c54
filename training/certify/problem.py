"""What is certified: the network (as the compiler's IR), the plant's interval enclosure,
the input box, the domain, the class-K gains, the order and the control period.

The network is loaded exactly as the header compiler loads it (``compiler.api.load_model``
+ ``canonicalize``): the float32 weights are exact in float64, so the function certified
is the function the header computes (its float32 rounding is covered by the float32-mode
enclosures).  Anything the certifier cannot bound is refused here with one line.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sympy as sp

from compiler.errors import CbfsimError
from training.margin import Margin, MarginError, card_scale, margin_from

from .faces import FaceError, faces_from_config


class CertifyError(CbfsimError, ValueError):
    """The certifier cannot handle this model or card (one line naming the problem)."""


@dataclass
class Problem:
    model: Any                 # compiler.ir.Model, canonical
    system: Any                # systems.ControlAffineSystem
    plant: Any                 # PlantEnclosure (system.enclosure)
    order: int
    gains: dict[str, float]
    u_lo: np.ndarray
    u_hi: np.ndarray
    lo: np.ndarray             # domain D
    hi: np.ndarray
    dt: float
    splittable: np.ndarray     # bool (n,): dimensions anything depends on
    read_by_network: np.ndarray  # bool (n,)
    model_hash: str
    relu_like: bool            # piecewise-linear network (ReLU pieces apply)
    smooth: bool               # every activation twice differentiable (Hessian enclosures exist)
    backup: dict[str, Any] | None = None   # the card's backup rollout (horizon, dt, hold, input): which states count
    #                                        as backup-safe for the coverage the issue quotes
    margin: Margin = Margin()  # the filter margin's state scale (eps is the search's; see training/margin.py)
    faces: tuple = ()          # faces.Face: domain faces the filter enforces as rows (faces.py)
    periodic: dict = field(default_factory=dict)   # {coordinate: period}: wraps, so its faces are a seam
    condition: str = "filter"  # "filter": the filter's row on all of C (with its margin and period);
    #                            "boundary": the continuous-time Nagumo condition on {h = 0};
    #                            "tube": the sampled loop under the tube filter (tube_condition.py)
    initial: tuple = ()        # ((lo, hi), ...) boxes where h >= 0 is asked (barrier certificates; sets.py)
    unsafe: str = ""           # "" the plant's constraint fails; else the text of the unsafe boxes (sets.py)
    scope: str = "closed"      # "closed": the set may not leave D through an open face (closure asked);
    #                            "in-domain": closure not asked, the claim holds while the states stay in D (SCOPES)
    command: str = ""          # the command line that certifies this problem (the replay commands extend it)
    spec: dict = field(default_factory=dict)   # what the certificate records of a problem given with no card
    tube: Any = None           # training.tube_rows.TubeSpec under condition "tube" (tube_condition.prepare)
    tube_net: Any = None       # training.tube_rows.PieceNet likewise

    @property
    def n(self) -> int:
        return len(self.lo)

    @property
    def m(self) -> int:
        return len(self.u_lo)


CONDITIONS = ("filter", "boundary", "tube")
SCOPES = ("closed", "in-domain")

PIECEWISE_LINEAR = {"relu", "leaky_relu", "hardtanh", "identity"}


def load_problem(model_path: str | os.PathLike | None, card: Any, dt: float | None = None) -> Problem:
    """The problem from an ONNX path (None: the card's file beside the card) and a card
    (path, dict or ModelCard).  ``dt`` None: the card's ``config.dt_control`` if present, else
    0 (continuous time)."""
    from systems import get_system
    from training.model_card import load_card

    source = card
    card = load_card(card)
    if model_path is None:
        if not isinstance(source, (str, os.PathLike)):
            raise CertifyError("no model given and the card was not read from a file: pass the ONNX path")
        model_path = card.onnx_path(source)
    model, model_hash = load_network(model_path)
    system = get_system(card.system, **card.system_params)
    if list(system.state_names) != card.state_names or list(system.input_names) != card.input_names:
        raise CertifyError(f"card state/input names {card.state_names}/{card.input_names} do not match "
                           f"system {card.system!r}: {list(system.state_names)}/{list(system.input_names)}")
    if dt is None:
        dt = float(card.config.get("dt_control", 0.0) or 0.0)
    return assemble(model, model_hash, system, order=card.order, gains=card.gains, u_lo=card.u_min,
                    u_hi=card.u_max, lo=card.domain_lo, hi=card.domain_hi, dt=dt, config=card.config,
                    where="card config")


def load_network(source: Any) -> tuple[Any, str]:
    """(canonical IR, sha256) of an ONNX path, or of a torch ``nn.Module`` read through the
    compiler's own torch frontend with its weights rounded to float32 (as the ONNX export and
    the header store them; the hash is then the IR's weights').  An unsupported operation
    raises the frontend's one-line ``UnsupportedOpError``."""
    from compiler.api import load_model
    from compiler.passes import canonicalize
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise CertifyError(f"model file {path} not found")
        return canonicalize(load_model(path)), hashlib.sha256(path.read_bytes()).hexdigest()
    import copy
    module = copy.deepcopy(source).float().eval() if hasattr(source, "float") else source
    model = canonicalize(load_model(module))
    digest = hashlib.sha256()
    for layer in model.layers:
        for name in ("weight", "bias"):
            if isinstance(getattr(layer, name, None), np.ndarray):
                digest.update(np.ascontiguousarray(getattr(layer, name), dtype=np.float64).tobytes())
        digest.update(f"{type(layer).__name__}{getattr(layer, 'kind', '')}{getattr(layer, 'params', '')}".encode())
    return model, digest.hexdigest()


def assemble(model: Any, model_hash: str, system: Any, *, order: int, gains: dict[str, float], u_lo: Any, u_hi: Any,
             lo: Any, hi: Any, dt: float, config: dict[str, Any], where: str) -> Problem:
    """The problem from its parts (a card's, or a plant's with no card: plant_problem.py);
    ``where`` names the source of ``config`` in a refusal."""
    from compiler.activations import ACTIVATIONS
    if model.input_dim != system.n:
        raise CertifyError(f"the network reads {model.input_dim} inputs but system {system.name!r} has "
                           f"{system.n} states ({', '.join(system.state_names)})")
    kinds = {a.kind for a in model.hidden_activations()}
    if order == 2 and kinds & (PIECEWISE_LINEAR - {"identity"}):
        raise CertifyError(f"order 2 needs a twice differentiable network; activation "
                           f"{sorted(kinds & PIECEWISE_LINEAR)[0]} is not")
    if not (np.isfinite(dt) and dt >= 0):
        raise CertifyError(f"--dt must be a finite number >= 0, got {dt}")
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    u_lo, u_hi = np.asarray(u_lo, float), np.asarray(u_hi, float)
    try:
        margin = margin_from(0.0, card_scale(config))
        margin.check_domain(system.n, lo, hi)
    except MarginError as e:
        raise CertifyError(f"{where}: {e}") from None
    plant = plant_enclosure(system)
    check_period(plant, float(dt), lo, hi, u_lo, u_hi)
    read = reads_state(model, system.n)
    used = read | _plant_uses(system)
    periodic = {int(i): float(p) for i, p in (getattr(system, "periodic", None) or {}).items()}
    try:
        faces = faces_from_config(system, config, lo, hi)
    except FaceError as e:
        raise CertifyError(f"{where}: {e}") from None
    return Problem(model=model, system=system, plant=plant, order=order,
                   gains=gains, u_lo=u_lo, u_hi=u_hi, lo=lo, hi=hi, dt=float(dt),
                   splittable=used, read_by_network=read, model_hash=model_hash,
                   relu_like=kinds <= PIECEWISE_LINEAR,
                   smooth=all(ACTIVATIONS[k].smooth for k in kinds), backup=_backup(config), margin=margin,
                   faces=faces, periodic=periodic)


def reads_state(model, n: int) -> np.ndarray:
    """bool (n,): the states the network reads (a first-layer column not exactly 0; through a
    periodic embedding, a coordinate is read when either of its (sin, cos) columns is)."""
    read = np.asarray(model.reads_state(), dtype=bool)
    if read.shape != (n,):
        raise CertifyError(f"the network reads {read.size} state coordinates but the system has {n}")
    return read


def _backup(config: dict[str, Any]) -> dict[str, Any]:
    """The card's backup rollout, with the defaults ``cbfsim verify`` uses for its backup-safe share."""
    return {"horizon": float(config.get("backup_horizon", 2.0)), "dt": float(config.get("backup_dt", 0.01)),
            "hold": [int(i) for i in config.get("backup_hold", [])],
            "input": config.get("backup_input")}


def _plant_uses(system) -> np.ndarray:
    """Which states f, G or the constraint depend on (a state nothing reads is never split)."""
    exprs = list(system.f_expr) + list(system.G_expr) + [system.constraint_expr]
    free = set().union(*(sp.sympify(e).free_symbols for e in exprs))
    return np.array([s in free for s in system.x_sym])


def _closes(plant: Any, points: np.ndarray, u_lo: np.ndarray, u_hi: np.ndarray, T: float) -> bool:
    """Whether the one-period tube (``sampled.tube``) closes from at least one of ``points``."""
    from compiler.interval import Interval
    from .sampled import tube
    with np.errstate(all="ignore"):
        return bool(np.any(tube(plant, Interval(points, points), u_lo, u_hi, T).ok))


def check_period(plant: Any, dt: float, lo: np.ndarray, hi: np.ndarray, u_lo: np.ndarray, u_hi: np.ndarray) -> None:
    """Refuse a period the reach computation cannot handle: when the one-period tube does not
    close even from single states (the centre of the domain and the corners of its middle half,
    the smallest boxes the search could reach), no box can ever pass the sampled-data
    condition and the search would split until its budget runs out (``--dt 1e9`` ran for
    hours). One tube evaluation when the period is fine; a bisection for the message when not."""
    if dt == 0.0:
        return
    n = len(lo)
    centre, half = (lo + hi) / 2.0, (hi - lo) / 4.0
    corners = np.array(np.meshgrid(*[(-1.0, 1.0)] * n, indexing="ij")).reshape(n, -1).T if n <= 10 else np.empty((0, n))
    points = np.vstack([centre, centre + corners * half])
    if _closes(plant, points, u_lo, u_hi, dt):
        return
    good, bad = 0.0, dt
    for _ in range(60):                      # bisection in log scale: the longest period that still closes
        trial = np.sqrt(good * bad) if good > 0 else bad * 1e-6 if bad > 1e-6 else bad / 2
        if _closes(plant, points, u_lo, u_hi, trial):
            good = trial
        else:
            bad = trial
        if good > 0 and bad / good < 1.01:
            break
    hint = f"; here it handles periods up to about {good:.3g} s" if good > 0 else ""
    raise CertifyError(f"--dt {dt:g} s is too long for the reach computation: the one-period tube does not close even "
                       f"from single states of the domain, so nothing could be certified{hint}")


def plant_enclosure(system):
    """The plant's interval enclosure, printed from its sympy definition (systems/enclosure.py);
    an expression without an enclosure raises its one-line ``UnsupportedExpressionError``."""
    from compiler.interval import NAMESPACE
    return system.enclosure(namespace=NAMESPACE)
