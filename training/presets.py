"""The shipped barriers (the paper's three examples and the Dubins car), as training configs, and ``ship``.

* ``vdp``: Van der Pol, Softplus 2-64-64-1, order 1, the system's disk constraint, certified
  for a 5 ms zero-order hold at filter margin 0.025; safe labels reach 0.5% of the constraint's
  maximum (not 10%) with safe/unsafe margins 0.01, so the set covers 97.4% of the disk and the
  proven set 97.3% of it (2% gave 96.7%, 1% 96.7%).  (The paper's network is ReLU; a ReLU
  barrier has a sampled-data counterexample at every margin -- its gradient jumps across a
  ridge by the same amount however short the period -- so the shipped one is smooth.  The
  condition margin 0.1 buys the feasibility slack the margin needs: at the leftmost point of
  C, L_G h vanishes and only the tilt of the set gives sup_u hdot + h > 0.)
* ``bicycle``: kinematic bicycle lane keeping, Softplus 4-32-32-1, order 1, certified closed for
  a 1 ms zero-order hold.  The lane constraint has relative degree 2 (steering reaches p_y only
  through psi), so a first-order barrier must depend on psi.  It reads (p_y, psi) only
  (input_mask; the exported first layer has exactly-zero p_x and v columns): the dynamics are
  invariant to p_x, and in arclength the condition does not depend on v.  So the filter's
  margin scales with the speed, eps v / 10 (``margin_scale``; training/margin.py says why).
  (The paper's network is ReLU; it is kept in models/refuted/: a ReLU barrier cannot pass the
  sampled-data condition.)  Domain: v in [2, 15] m/s, psi in [-pi/3, pi/3].  The backup rollout
  holds the acceleration at 0, so the backup-safe states are those kept in the lane by
  steering alone.  The network is the float64 Sobolev fit (20,000 steps, no counterexample
  rounds) of ``label_set`` systems.bicycle:rounded_turn_away_margin: the full-lock turn-away
  set with walls moved in by 0.045 m + 0.25 m/rad psi (edge slack >= 0.055 v), a heading wall
  0.03 rad inside the box's psi faces (so the set is closed), and the corners where the lane
  edges meet the heading wall rounded at 0.5 m.  Certified at eps 0.2 (1 ms): sound share of
  the backup-safe states 94.1% (92.9% sampled); the counterexample-round barrier it replaces
  held 73.8% at 2 ms, eps 0.15.  What paid (2026-11-27): the plain-min label set (90.8%) is
  refuted at any margin where the lane wall meets the heading wall: full steering into the
  heading wall while the filter reads the lane wall's rising gradient, and h's curvature along
  that arc (the gradient turns by ~1 per metre over the corner's width) eats eps v / 10 within
  the hold, which needs eps >= (T / 2) v |h''| (arclength h'').  Rounding the corners bounds
  |h''| by ~|rate|^2 / r (r is limited to ~0.5 m: next to the heading wall the set is 1 m
  wide); the fit then is feasible up to eps 0.3 but sampled-data-unsafe up to 0.21 at 2 ms,
  and at 2 ms, eps 0.27 the certifier found no counterexample but left 156,084 boxes
  undecided in 900 s.  Halving the period halves the bound's need (the lever that paid): at
  1 ms the window is wide and eps 0.2 is proven.  (Rounding with r 0.4 and two-way rounding,
  heading scale 1.5 m/rad, slope 0.2: sampled-data counterexample at eps 0.3, infeasible from
  0.36; slope 0.2 with scale 2: infeasible from 0.18.)
* ``pendulum``: inverted pendulum, Softplus 1-32-32-1 on theta alone (exported 2-32-32-1 with
  a zero theta_dot column, so L_G h == 0 exactly), order 2 (HOCBF), linear alpha1, alpha2.
  theta_dot in [-1.25, 1.25] is enforced by the filter as face rows (``faces``), so the claim is
  closed.  The set's edge is theta_dot = alpha1 h / |h'|, and along it the HOCBF row asks
  theta_ddot <= phi phi' - m / |h'|: the edge must be a curve the braking flow can follow.  With
  alpha1 2 the network's edge lay below the braking parabola almost everywhere (85% of the
  backup-safe states); alpha1 5 and 7 held more but were infeasible near the theta_dot faces.
  So the edge is designed (``label_set`` systems.inverted_pendulum:braking_margin: linear at the
  tip, then a braking curve that leaves 1.2 rad/s^2 unused) and fitted with values, gradients and
  Hessians (``label_polish``: the order-2 row reads h''), alpha1 8, no counterexample rounds.
  It holds 96.5% of the backup-safe states (sampled) and certifies at 5 ms with margin 1.7
  (feasible up to 3.4; the margin with the fewest boxes, 1.4-2.5 all certify) -- once the
  certifier's order-2 routes took the tube over a grid and charged the class-K term per state
  (2026-11-27; before, single edge states failed the bound at margins 1.6 and 2, where every
  admissible input's rollout holds).
* ``dubins``: the Dubins car (systems/dubins.py: constant speed, steer only, in a ring between an
  obstacle and an arena wall), Softplus 3-64-64-1 on (p_x, p_y, sin theta, cos theta): the
  heading is periodic, so the exported network starts with the periodic embedding and reads the
  angle continuously across the wrap (its first Linear is 4-wide).  Order 1 (the turn rate
  reaches h through the heading), gamma 5.  The car cannot stop.  The greedy turn-away backup
  labels symmetrically (dead ahead of the obstacle both turns are equally good), and a smooth
  barrier cannot hold a condition with margin on that crease; the full-left-safe set (turning
  circle inside the ring) is held with zero slack (its circle centre stays put under the full
  turn, so sup_u dh/dt = 0 on its edge) and no filter margin certifies it.  The labels and the
  network therefore come from ``label_set`` (systems.dubins:left_circling_margin): a set inside
  the full-left-safe one whose walls move with the heading so that every edge state can raise h
  by >= 0.069 m/s (87% of the full-left-safe states).  The network is its float64 Sobolev fit
  (values and gradients, 20,000 steps, raw inputs: ``scale_inputs`` off fits the 0.02 m walls
  far better) with no counterexample rounds after it (``rounds`` 0): the rounds' hinge losses
  ask for room the set does not have and only ever lowered the slack the certifier needs.
  Certified closed at a 2 ms hold with eps 0.02 (the car's heading turns 4 mrad a period; at
  10 ms the curvature of h along a turn, about -11 per s^2, eats the margin within the period
  and the sampled-data bound cannot close; 2026-11-27).

``faces`` and ``filter_margin`` are not used by the rounds: they go into the card, so the filter,
``cbfsim simulate`` and ``cbfsim certify`` (which starts its margin search there) get them.

The benchmark presets (``darboux``, ``obstacle_avoidance``, ``obstacle_avoidance_relu``,
``spacecraft``, ``spacecraft_relu``, ``hi_ord8``) train the literature's plants at published network sizes with small
budgets for ``benchmarks/certify_suite.py``; they are not shipped barriers.  ``hi_ord8`` fits the
invariant half-space of A's left eigenvector (``label_set`` systems.hi_ord8:eigen_halfspace:
hdot = c > 0 on its edge) and then runs counterexample rounds: fitted without the rounds, the
gradient along x8, whose rate reaches 28,800 in D, was off enough to give hdot = -0.065 on
{h = 0}; after 3 rounds the 8-16-1 network certifies in 8-D (52,483 boxes, 14 s, 2026-11-27).
``spacecraft`` fits the braking set ``systems.spacecraft:braking_margin`` (held with 0.2 slack under
the CWH drift) with 3 x 16, a published size: its 3 x 8 fit left h >= 0 at 49 of 400,000 states
of the keep-out ball (the fit is all there is: no rounds), and cbfsim verify refused it.

``darboux`` fits a set the flow cannot leave (``label_set`` systems.darboux:curve_margin:
min(x1 + 0.3, x2 - phi(x1)), phi a 64-segment curve 0.2 under the initial set whose every segment
is 0.05 less steep than the flow, so the flow crosses it upward) with gamma 20: the trainer's
check asks hdot + gamma h >= margin on the whole set, and at gamma 1 the flow's speed deep inside
(|f| = 10 at (2, 2)) fails it where the certificate's boundary condition asks nothing.  The
backup-rollout labels it used before gave sets the flow leaves (refuted, 2026-11-28).

The ``_relu`` presets are distilled (``teacher_activation``): a Softplus network of the same
widths is trained first and the ReLU one fitted to it with counterexample rounds against the
dense check and the certifier; trained directly, the 3-32-1 obstacle-avoidance ReLU fit was
refuted (2026-11-26).  The spacecraft's ``_relu`` presets distil instead a barrier written down
(``teacher`` training.teachers:spacecraft_slabs, four braking slabs with sup_u hdot >= 0.1 on
their edges): their students of a Softplus teacher stayed refuted.  hi-ord8's student of a
Softplus teacher missed 1,125 of 250,000 states of the trainer's check (its drift reaches
28,800 in D, so a small gradient error is a large row error); ``hi_ord8_relu`` distils the
eigenvector half-space written down (``teacher`` training.teachers:hi_ord8_eigen, hdot + h =
1.8 everywhere) instead, with the stability hinge (``distil_stability``: kinks moved off the
zero level, training/distil.py): a linear teacher needs none there, and the student of 24 rounds
meets 8 linear pieces of {h = 0} where the one without met about 1,000 (the certifier: 1.7 s,
2,762 boxes, against 23.4 s, 26,506 boxes; 294 s to train).

``dt_control`` is each experiment's control period: the period ``--certify`` (and
``cbfsim certify`` without ``--dt``) proves the zero-order-hold loop for.
"""
from __future__ import annotations

import math
import shutil
from pathlib import Path

from .config import ConfigError, TrainConfig


class UnknownPresetError(ConfigError, KeyError):
    """A preset name that is not shipped (a KeyError for lookups, a ConfigError for the CLI)."""

    def __str__(self) -> str:          # KeyError quotes its message; a CLI prints one clean line
        return str(self.args[0])

PI = math.pi
PRESETS: dict[str, TrainConfig] = {
    "vdp": TrainConfig(
        system="van_der_pol", hidden=[64, 64], activation="softplus", order=1, gamma=1.0,
        condition_margin=0.1, backup_horizon=2.0, backup_dt=0.02, safe_fraction=0.005, safe_margin=0.01,
        unsafe_margin=0.01, w_condition=5.0, rounds=30, max_time=300.0, seed=0, dt_control=0.005,
        filter_margin=0.025),
    "bicycle": TrainConfig(
        system="bicycle", hidden=[32, 32], activation="softplus", order=1, gamma=5.0, input_mask=[1, 2],
        domain_lo=[-10.0, -3.5, -PI / 3, 2.0], domain_hi=[10.0, 3.5, PI / 3, 15.0],
        backup_horizon=3.0, backup_dt=0.01, backup_hold=[0], label_lost=True, safe_fraction=0.1,
        label_set="systems.bicycle:rounded_turn_away_margin", warm_start_steps=20_000,
        condition_margin=0.3, margin_scale=[0.0, 0.0, 0.0, 0.0, 0.1],
        w_condition=5.0, rounds=0, max_time=400.0, seed=0, dt_control=0.001,
        faces={"v": {"gamma": 1.0, "margin": 0.3}}, filter_margin=0.2),
    "pendulum": TrainConfig(
        system="inverted_pendulum", hidden=[32, 32], activation="softplus", order=2, alpha1=8.0, alpha2=40.0,
        input_mask=[0], domain_lo=[-PI / 2, -1.25], domain_hi=[PI / 2, 1.25],
        backup_horizon=2.0, backup_dt=0.01, label_lost=True, seed=0, dt_control=0.005,
        label_set="systems.inverted_pendulum:braking_margin", warm_start_steps=5000, label_polish=800, rounds=0,
        faces={"theta_dot": {"gamma": 10.0, "margin": 1.0}}, filter_margin=1.7),
    # the literature's benchmarks (benchmarks/certify_suite.py), small budgets, at published network sizes
    "darboux": TrainConfig(
        system="darboux", hidden=[32, 32], activation="softplus", order=1, gamma=20.0,
        label_set="systems.darboux:curve_margin", safe_margin=0.01, unsafe_margin=0.05,
        warm_start_steps=20_000, n_uniform=100_000, check_samples=100_000,
        rounds=0, max_time=600.0, seed=0, dt_control=0.0),
    "obstacle_avoidance": TrainConfig(
        system="obstacle_avoidance", hidden=[32], activation="softplus", order=1, gamma=1.0,
        rounds=8, max_time=120.0, seed=0, dt_control=0.01),
    "obstacle_avoidance_64": TrainConfig(
        system="obstacle_avoidance", hidden=[64, 64], activation="softplus", order=1, gamma=1.0,
        rounds=8, max_time=120.0, seed=0, dt_control=0.01),
    "spacecraft": TrainConfig(
        system="spacecraft", hidden=[16, 16, 16], activation="softplus", order=1, gamma=1.0,
        label_set="systems.spacecraft:braking_margin", safe_margin=0.01, unsafe_margin=0.05,
        condition_margin=0.02, warm_start_steps=20_000, n_uniform=100_000, check_samples=100_000,
        rounds=0, max_time=600.0, seed=0, dt_control=0.01),
    "hi_ord8": TrainConfig(
        system="hi_ord8", hidden=[16], activation="softplus", order=1, gamma=1.0,
        label_set="systems.hi_ord8:eigen_halfspace", warm_start_steps=20_000,
        rounds=8, max_time=120.0, seed=0, dt_control=0.0),
    "point_robot": TrainConfig(
        system="point_robot", hidden=[32, 32], activation="softplus", order=1, gamma=1.0,
        label_set="systems.point_robot:braking_margin", safe_margin=0.01, unsafe_margin=0.05,
        condition_margin=0.02, warm_start_steps=20_000, n_uniform=100_000, check_samples=100_000,
        rounds=0, max_time=600.0, seed=0, dt_control=0.01, filter_margin=0.02),
    "dubins": TrainConfig(
        system="dubins", hidden=[64, 64], activation="softplus", order=1, gamma=5.0,
        backup_horizon=4.0, backup_dt=0.02, backup_input=[2.0], label_lost=True,
        label_set="systems.dubins:left_circling_margin", scale_inputs=False, safe_margin=0.01,
        unsafe_margin=0.05, w_unsafe=3.0, condition_margin=0.02, warm_start_steps=20_000, n_uniform=100_000,
        check_samples=100_000, check_boundary=30_000,
        rounds=0, max_time=900.0, seed=0, dt_control=0.002, filter_margin=0.02),
}


# the benchmarks' ReLU networks by distillation (training/distilled.py): trained directly, the
# ReLU fits are refuted; the teacher (Softplus, the same widths unless teacher_hidden) is the
# Softplus preset's run, for obstacle avoidance with room to spare (condition margin 0.2)
_RELU = {"activation": "relu", "teacher_activation": "softplus"}
PRESETS.update({
    "darboux_256": PRESETS["darboux"].replace(hidden=[256, 256]),
    "darboux_relu": PRESETS["darboux"].replace(**_RELU),
    "darboux_relu_256": PRESETS["darboux"].replace(hidden=[256, 256], activation="relu",
                                                   teacher="training.teachers:darboux_curve"),
    "obstacle_avoidance_relu": PRESETS["obstacle_avoidance"].replace(condition_margin=0.2, **_RELU),
    "obstacle_avoidance_relu_64": PRESETS["obstacle_avoidance_64"].replace(condition_margin=0.2, **_RELU),
    # the spacecraft's students of a Softplus teacher stay refuted (108 rounds for the 3 x 8); the
    # braking slabs written down (training.teachers) give them a teacher with margin everywhere
    "spacecraft_relu": PRESETS["spacecraft"].replace(activation="relu", teacher="training.teachers:spacecraft_slabs",
                                                     distil_rounds=24),
    # the stability hinge (training/distil.py) at 0.3: 17 rounds, 668 s beside another training; its
    # student meets 186 pieces of {h = 0} (the one without: 428) and certifies in 5.3 s, 3,163 boxes
    "spacecraft_8_relu": PRESETS["spacecraft"].replace(hidden=[8, 8, 8], activation="relu",
                                                       teacher="training.teachers:spacecraft_slabs",
                                                       distil_rounds=24, distil_stability=0.3),
    "hi_ord8_relu": PRESETS["hi_ord8"].replace(activation="relu", teacher="training.teachers:hi_ord8_eigen",
                                               distil_stability=1.0, distil_rounds=24),
})

def preset(name: str, **overrides) -> TrainConfig:
    """A copy of a preset config, with fields overridden."""
    if name not in PRESETS:
        raise UnknownPresetError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    return PRESETS[name].replace(**overrides)


def ship(out_dir: str | Path, models_dir: str | Path, name: str) -> tuple[Path, Path]:
    """Copy a trained run's model.onnx / model.json to models_dir/<name>.onnx / <name>.json
    (the card's network.onnx entry renamed to match)."""
    import json
    out_dir, models_dir = Path(out_dir), Path(models_dir)
    models_dir.mkdir(parents=True, exist_ok=True)
    card = json.loads((out_dir / "model.json").read_text())
    card["network"]["onnx"] = f"{name}.onnx"
    card["network"].pop("state_dict", None)
    onnx_path, card_path = models_dir / f"{name}.onnx", models_dir / f"{name}.json"
    tmp = models_dir / f".{name}.onnx.tmp"
    shutil.copyfile(out_dir / "model.onnx", tmp)
    tmp.replace(onnx_path)
    tmp = models_dir / f".{name}.json.tmp"
    tmp.write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")
    tmp.replace(card_path)
    return onnx_path, card_path
