"""The plants' and the simulator's fast paths are float twins of the array code: they must
give the array code's bits (np.array_equal on the raw bytes, so -0.0 and 0.0 differ), over
random states, edge cases and long single trajectories, and CBFSIM_FAST_PATHS=0 must turn
them off. The array code is the reference (the fast path is reached only for one state)."""
from __future__ import annotations

import numpy as np
import pytest

from cbfsim import _fast_sim
from cbfsim.simulate import _rk4_array, simulate
from systems import SYSTEM_NAMES, ControlAffineSystem, _fast, get_system

TINY, SUB = 1e-300, 5e-324


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def edge_states(plant: ControlAffineSystem, count: int, seed: int) -> np.ndarray:
    """Random states of the training box, then zeros, negative zeros, the box corners, huge
    (up to overflow) and tiny (down to subnormal) magnitudes of both signs, mixed."""
    n = plant.n
    lo, hi = plant.domain
    rng = np.random.default_rng(seed)
    rows = [rng.uniform(lo, hi, (count, n)), np.zeros((1, n)), np.full((1, n), -0.0), lo[None], hi[None]]
    for mag in (1e3, 1e150, 1e160, 1e300, 1.7e308, TINY, SUB, 1e-160):
        rows += [np.full((1, n), mag), np.full((1, n), -mag), mag * rng.choice([-1.0, 1.0, 0.0], (4, n))]
    rows.append(rng.standard_normal((count, n)) * 10.0 ** rng.integers(-320, 308, (count, n)))
    return np.concatenate(rows)


def edge_inputs(plant: ControlAffineSystem, X: np.ndarray, seed: int, huge: bool = True) -> np.ndarray:
    """Inputs in the box, every third one a special value (zero, negative zero, tiny,
    subnormal, and with ``huge`` 1e300)."""
    rng = np.random.default_rng(seed)
    U = rng.uniform(plant.u_min, plant.u_max, (len(X), plant.m))
    specials = np.array([0.0, -0.0, -TINY, SUB] + [1e300] * huge)
    U[::3] = specials[rng.integers(0, len(specials), (len(U[::3]), plant.m))]
    return U


def set_switch(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    """Set (None: unset) CBFSIM_FAST_PATHS and make both layers read it again."""
    if value is None:
        monkeypatch.delenv("CBFSIM_FAST_PATHS", raising=False)
    else:
        monkeypatch.setenv("CBFSIM_FAST_PATHS", value)
    reread_switch()


def reread_switch() -> None:
    _fast.fast_paths_enabled.cache_clear()
    _fast_sim.fast_paths_enabled.cache_clear()


@pytest.fixture(autouse=True)
def fast_paths_on(monkeypatch: pytest.MonkeyPatch):
    """The twins are under test even when the suite runs with CBFSIM_FAST_PATHS=0."""
    set_switch(monkeypatch, None)
    yield
    monkeypatch.undo()
    reread_switch()


@pytest.fixture
def general_path(monkeypatch: pytest.MonkeyPatch):
    """``general_path(fn)`` calls fn with every fast path switched off."""
    def run(fn):
        set_switch(monkeypatch, "0")
        try:
            return fn()
        finally:
            set_switch(monkeypatch, None)
    return run


@pytest.mark.parametrize("name", SYSTEM_NAMES)
def test_plant_twins_give_the_array_codes_bits_on_random_and_edge_states(name, general_path):
    plant = get_system(name)
    X = edge_states(plant, 200, seed=1)
    U = edge_inputs(plant, X, seed=2)
    fields = {"f": (plant.f, plant._f.twin), "G": (plant.G, plant._G.twin)}
    fields.update({f"nominal {k}": (c, c._field.twin) for k, c in plant.nominals.items()})
    answered = dict.fromkeys(fields, 0)
    with np.errstate(all="ignore"):
        for x, u in zip(X, U):
            for shape in ((plant.n,), (1, plant.n)):
                xs, us = x.reshape(shape), u.reshape(shape[:-1] + (plant.m,))
                for what, (fn, twin) in fields.items():
                    got, want = fn(xs), general_path(lambda: fn(xs))
                    assert same_bits(got, want), (what, xs, got, want)
                    answered[what] += _fast.evaluate(twin, xs, plant.n) is not None
                got, want = plant.xdot(xs, us), general_path(lambda: plant.xdot(xs, us))
                assert same_bits(got, want), ("xdot", xs, us, got, want)
                if plant.float_xdot() is not None:
                    fast = _fast.evaluate(plant._xdot_twin, xs, plant.n, us, plant.m)
                    assert fast is None or same_bits(fast, want)
    for what, (fn, twin) in fields.items():      # where a twin exists it answered for the box
        if twin.function() is not None:
            assert answered[what] >= 2 * 200, (what, answered[what])


@pytest.mark.parametrize("name", SYSTEM_NAMES)
def test_single_trajectories_of_every_plant_and_nominal_are_bit_identical_without_fast_paths(name, general_path):
    plant = get_system(name)
    lo, hi = plant.domain
    starts = [0.5 * (lo + hi) + 0.25 * (hi - lo), np.zeros(plant.n), np.full(plant.n, -0.0)]
    for controller in plant.nominal_names:
        for x0 in starts:
            def run():
                with np.errstate(all="ignore"):
                    return simulate(plant, None, None, controller, x0, 10.0, 0.01, 0.005)
            fast, slow = run(), general_path(run)
            for field in ("x", "u", "u_nom", "status", "run_status"):
                assert same_bits(getattr(fast, field), getattr(slow, field)), (controller, x0, field)
            assert fast.metadata["faults"] == slow.metadata["faults"]


@pytest.mark.parametrize("name", [n for n in SYSTEM_NAMES if get_system(n).float_xdot() is not None])
def test_rk4_twin_matches_the_array_rk4_step_by_step_including_escapes(name):
    """Many single steps from random and edge states, with edge inputs: every twin answer is
    the array code's bits, and it answers wherever the array result is finite and no float
    exception was possible (here: the random box states)."""
    plant = get_system(name)
    box = 300
    X = edge_states(plant, box, seed=3)
    U = np.concatenate([edge_inputs(plant, X[:box], seed=4, huge=False), edge_inputs(plant, X[box:], seed=5)])
    answered = 0
    with np.errstate(all="ignore"):
        for i, (x, u) in enumerate(zip(X, U)):
            x1, u1 = x[None], u[None]
            fast = _fast_sim.rk4_single(plant, x1, u1, 0.01, 4)
            want = _rk4_array(plant, x1, u1, 0.01, 4)
            if fast is not None:
                answered += i < box
                assert same_bits(fast, want), (x, u, fast, want)
            else:
                assert i >= box, (x, u)
    assert answered == box


def test_switch_turns_every_fast_path_off(monkeypatch):
    plant = get_system("van_der_pol")
    x, u = np.array([[0.3, -0.2]]), np.array([[0.1]])
    assert _fast.evaluate(plant._f.twin, x, 2) is not None
    assert _fast.evaluate(plant._xdot_twin, x, 2, u, 1) is not None
    assert _fast_sim.rk4_single(plant, x, u, 0.01, 1) is not None
    set_switch(monkeypatch, "0")
    assert not _fast.fast_paths_enabled() and not _fast_sim.fast_paths_enabled()
    assert _fast.evaluate(plant._f.twin, x, 2) is None
    assert _fast.evaluate(plant.nominal("zero")._field.twin, x, 2) is None
    assert _fast.evaluate(plant._xdot_twin, x, 2, u, 1) is None
    assert _fast_sim.rk4_single(plant, x, u, 0.01, 1) is None
    set_switch(monkeypatch, "1")
    assert _fast.fast_paths_enabled() and _fast_sim.fast_paths_enabled()
