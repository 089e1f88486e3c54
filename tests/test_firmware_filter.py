"""The firmware filter (firmware/common/filter.hpp) at the edges of float and double, its
margin, the fault policy on the host twin, and the status codes generated from Python.

References: exact rational projections (fractions.Fraction) for one input, the numpy
projection (cbfsim/filters/projection.py) for more, and the Python fault policy
(cbfsim/filters/fallback.py) replayed on the twin's own log.
"""
from __future__ import annotations

import re
import subprocess
from fractions import Fraction

import numpy as np
import pytest

from cbfsim import device
from cbfsim.filters import Fallback, FilterResult, FilterStatus, project_halfspace_box
from cbfsim.filters import cpp
from cbfsim.filters.fallback import FallbackKind, FaultPolicy
from conftest import require_tool


@pytest.fixture(scope="module")
def filter_check(tmp_path_factory):
    require_tool("make", "apt-get install -y make")
    require_tool("g++", device.INSTALL["host"])
    return device.build("filter-check", None, tmp_path_factory.mktemp("fc"))


def run_check(exe, rows, m: int, precision: str = "double"):
    """(status (P,), u (P, m) as float64) from the driver for rows (a, margin, b, u_nom, lo, hi)."""
    text = f"{len(rows)} {m}\n" + "\n".join(" ".join(repr(float(v)) for v in row) for row in rows) + "\n"
    out = subprocess.run([str(exe), precision], input=text, capture_output=True, text=True, check=True).stdout
    lines = [line.split() for line in out.splitlines() if line]
    status = np.array([int(w[0]) for w in lines])
    u = np.array([[int(h, 16) for h in w[1:]] for w in lines], dtype=np.uint64).view(np.float64)
    return status, u


def exact_projection_1d(a, eps, b, u_nom, lo, hi) -> tuple[Fraction, bool]:
    """argmin |u - u_nom| s.t. a + b u >= eps, lo <= u <= hi (least violation if empty), exactly."""
    A, E, Bq, U, L, H = (Fraction(v) for v in (a, eps, b, u_nom, lo, hi))
    clip = min(max(U, L), H)
    if A + Bq * clip >= E:
        return clip, True
    if Bq == 0:
        return clip, False
    root = (E - A) / Bq
    if Bq > 0:
        return (max(clip, root), True) if root <= H else (H, False)
    return (min(clip, root), True) if root >= L else (L, False)


def test_status_header_is_generated_from_the_python_enums_byte_for_byte():
    assert cpp.HEADER_PATH.read_text() == cpp.status_header()
    assert cpp.main(["--check"]) == 0
    text = cpp.status_header()
    for member in [*FilterStatus, *FallbackKind]:       # one name per code on both sides
        assert f"    {cpp.cpp_name(member)} = {int(member)},\n" in text
    assert cpp.cpp_name(FilterStatus.SLACK_ACTIVE) == "kSlackActive"
    assert not re.search(r"\b(kActive|kNominal|kInvalid|kInfeasible)\b", text)   # the old firmware-only names


@pytest.mark.toolchain
@pytest.mark.parametrize("precision, big, tol", [("float", 1e20, 1e-6), ("double", 1e300, 1e-14)])
def test_extreme_rows_solved_exactly_in_float_and_double(filter_check, precision, big, tol):
    """The issue's cases (float: b = 1e20 lost the row and returned u = 0; double: |b| ~ 1e308
    gave NaN) and random rows whose gains and offsets span the whole range of the type."""
    rng = np.random.default_rng(5)
    cast = np.float32 if precision == "float" else np.float64
    rows = [(-1.0, 0.0, 1e20, 0.0, -1.0, 1.0), (0.5, 0.0, -1e20, 0.0, -1.0, 1.0)]
    if precision == "double":
        rows += [(-1.0, 0.0, 1e308, 0.0, -1.0, 1.0), (-1e300, 0.0, 1e-300, 0.5, -1.0, 1.0), (1e-300, 0.0, -1.7e308, 3.0, -1.0, 2.0)]
    exp_max = 37 if precision == "float" else 300
    for _ in range(300):
        a = rng.choice([-1, 1]) * 10.0 ** rng.uniform(-exp_max, exp_max)
        b = rng.choice([-1, 1, 0]) * 10.0 ** rng.uniform(-exp_max, exp_max)
        rows.append((a, rng.choice([0.0, 0.5]), b, 3 * rng.normal(), -rng.uniform(0.1, 2), rng.uniform(0.1, 2)))
    rows = [tuple(float(cast(v)) for v in row) for row in rows]          # the values the driver sees
    status, u = run_check(filter_check, rows, 1, precision)
    assert np.isfinite(u).all()
    for row, st, ui in zip(rows, status, u[:, 0]):
        ref, feasible = exact_projection_1d(row[0], row[1], *row[2:])
        assert abs(Fraction(ui) - ref) <= tol * (1 + abs(ref)), (row, ui, float(ref))
        assert st == (FilterStatus.OK if feasible else FilterStatus.SLACK_ACTIVE), (row, st)
    assert status[0] == FilterStatus.OK and u[0, 0] * 1e20 >= 1.0 - 1e-6      # the row holds now


@pytest.mark.toolchain
def test_margin_and_extremes_with_several_inputs_match_the_numpy_projection(filter_check):
    rng = np.random.default_rng(6)
    for m in (2, 3):
        rows, refs = [], []
        for i in range(200):
            scale = 10.0 ** rng.uniform(-150, 150, size=m) if i % 2 else np.ones(m)
            b = rng.normal(size=m) * scale * (rng.random(m) > 0.2)
            a, eps = rng.normal() * 3 * (10.0 ** rng.uniform(-100, 100) if i % 5 == 0 else 1), rng.choice([0.0, 0.4])
            u_nom, lo, hi = 2 * rng.normal(size=m), -rng.uniform(0.1, 2, m), rng.uniform(0.1, 2, m)
            rows.append((a, eps, *b, *u_nom, *lo, *hi))
            refs.append(project_halfspace_box([a - eps], b[None], u_nom[None], lo, hi))
        status, u = run_check(filter_check, rows, m)
        for i, (row, ref) in enumerate(zip(rows, refs)):
            np.testing.assert_allclose(u[i], ref.u[0], rtol=1e-9, atol=1e-9, err_msg=f"m={m} problem {i}")
            assert status[i] == (FilterStatus.OK if ref.feasible[0] else FilterStatus.SLACK_ACTIVE)
            if ref.feasible[0] and i % 2 == 0:   # unit-scale rows: the margin holds
                a, eps, b = row[0], row[1], np.array(row[2:2 + m])
                assert a + b @ u[i] >= eps - 1e-9


@pytest.mark.toolchain
def test_nonfinite_data_gives_fallback_and_a_finite_input(filter_check):
    nan, inf = float("nan"), float("inf")
    rows = [(nan, 0.0, 1.0, 0.3, -1, 1), (1.0, 0.0, inf, 0.3, -1, 1), (1.0, 0.0, 1.0, nan, -1, 1),
            (-inf, 0.0, 1.0, 5.0, -1, 1), (1.0, -0.5, 1.0, 0.3, -1, 1), (1.0, nan, 1.0, 0.3, -1, 1)]
    for precision in ("float", "double"):
        status, u = run_check(filter_check, rows, 1, precision)
        assert (status == FilterStatus.FALLBACK).all() and np.isfinite(u).all() and (np.abs(u) <= 1).all()


def two_region_barrier():
    """h = 1 - |p| - |v| for |p|, |v| < ~3.4 (a 2-4-1 ReLU net); beyond, its float32 hidden
    layer overflows and h is -inf or NaN on the device (the float64 reference stays finite)."""
    import torch

    from training.architectures import mlp
    net = mlp([2, 4, 1], "relu", seed=0)
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1e38, 0.0], [-1e38, 0.0], [0.0, 1e38], [0.0, -1e38]]))
        net[0].bias.zero_()
        net[2].weight.fill_(-1e-38)
        net[2].bias.fill_(1.0)
    return net


@pytest.mark.toolchain
@pytest.mark.parametrize("fallback", [Fallback(), Fallback("controller", controller="pd"),
                                      Fallback("input", u_safe=(0.25,))], ids=lambda f: f.kind)
def test_host_twin_applies_the_same_fault_policy_as_python(cxx, tmp_path, fallback):
    config = device.RunConfig(system="double_integrator", nominal="pd", order=1, alpha=(1.0,), x0=(3.6, -1.0),
                              steps=1500, bench_calls=1, fallback=fallback, margin=0.05)
    generated = device.generate(two_region_barrier(), config, tmp_path / "gen")
    log = device.parse_log(device.run("host", device.build("host", generated, tmp_path / "build", modes=1)))
    assert log.exit == "0" and np.isfinite(log.u).all() and np.isfinite(log.x).all()
    fault = log.status == FilterStatus.FALLBACK
    assert fault[0] and fault.sum() >= 50 and (~fault).sum() >= 50          # faults, then healthy steps
    plant = config.plant()
    policy = FaultPolicy(fallback, plant.u_min.astype(np.float32).astype(np.float64),
                         plant.u_max.astype(np.float32).astype(np.float64), plant)
    expected = np.empty_like(log.u)
    for k in range(len(log.u)):   # the Python policy replayed on the twin's states and statuses
        step = FilterResult(u=log.u[k:k + 1].copy(), slack=np.zeros(1), status=log.status[k:k + 1],
                            solve_time=np.zeros(1))
        expected[k] = policy.apply(log.x[k:k + 1], step).u[0]
    if fallback.kind == "controller":   # float32 controller vs float64
        np.testing.assert_allclose(log.u[fault], expected[fault], rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(log.u, expected)
