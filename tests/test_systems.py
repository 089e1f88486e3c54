"""systems: one sympy definition per plant -> numpy, torch, df and C++ must agree."""
from __future__ import annotations

import ast
import dataclasses
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

import systems
from conftest import build_and_run
from systems import SYSTEM_NAMES, ControlAffineSystem, get_system, steering_angle

ROOT = Path(__file__).resolve().parents[1]
CXX_FLAGS = ["-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-Wdouble-promotion", "-Wfloat-conversion"]


def sample_states(sys_: ControlAffineSystem, count: int, seed: int = 0) -> np.ndarray:
    lo, hi = sys_.domain
    return np.random.default_rng(seed).uniform(lo, hi, size=(count, sys_.n))


@pytest.fixture(params=SYSTEM_NAMES)
def plant(request: pytest.FixtureRequest) -> ControlAffineSystem:
    return get_system(request.param)


# ----------------------------------------------------------------------------- API and shapes

def test_registry_and_factories() -> None:
    assert set(SYSTEM_NAMES) == {"van_der_pol", "bicycle", "inverted_pendulum", "acc", "unicycle",
                                 "double_integrator", "darboux", "obstacle_avoidance", "spacecraft", "hi_ord8", "dubins",
                                 "point_robot"}
    for name in SYSTEM_NAMES:
        assert getattr(systems, name)().name == name
        assert get_system(name).name == name
    with pytest.raises(KeyError, match="known"):
        get_system("segway")


def test_shapes(plant: ControlAffineSystem) -> None:
    n, m, B = plant.n, plant.m, 5
    assert (len(plant.state_names), len(plant.input_names)) == (n, m)
    assert len(plant.x_sym) == n and plant.f_expr.shape == (n, 1) and plant.G_expr.shape == (n, m)
    for arr, shape in [(plant.u_min, (m,)), (plant.u_max, (m,)), (plant.domain[0], (n,)), (plant.domain[1], (n,))]:
        assert arr.shape == shape and arr.dtype == np.float64
    assert np.all(plant.u_min < plant.u_max) and np.all(plant.domain[0] < plant.domain[1])
    X = sample_states(plant, B)
    U = np.random.default_rng(1).uniform(plant.u_min, plant.u_max, size=(B, m))
    x, u = X[0], U[0]
    assert plant.f(x).shape == (n,) and plant.f(X).shape == (B, n)
    assert plant.G(x).shape == (n, m) and plant.G(X).shape == (B, n, m)
    assert plant.xdot(x, u).shape == (n,) and plant.xdot(X, U).shape == (B, n)
    assert plant.df(x, x).shape == (n,) and plant.df(X, X).shape == (B, n)
    assert plant.df(X, np.ones((B, n, 3))).shape == (B, n, 3)
    assert isinstance(plant.constraint(x), float) and plant.constraint(X).shape == (B,)
    for name in plant.nominal_names:
        k = plant.nominal(name)
        assert k.m == m and k(x).shape == (m,) and k(X).shape == (B, m)
        assert k(X).dtype == np.float64
    np.testing.assert_allclose(plant.xdot(X, U), plant.f(X) + np.einsum("bij,bj->bi", plant.G(X), U))
    np.testing.assert_allclose(plant.xdot(x, u), plant.xdot(X, U)[0])
    # constant entries broadcast to the batch and are real copies
    G = plant.G(X)
    G[...] = 7.0
    assert plant.m == 0 or not np.all(plant.G(X) == 7.0)       # m = 0: G is empty


def test_bad_shapes_raise(plant: ControlAffineSystem) -> None:
    n, m = plant.n, plant.m
    for bad in [np.zeros(n + 1), np.zeros((4, n + 1)), np.zeros((2, 3, n)), np.zeros(())]:
        for fn in (plant.f, plant.G, plant.constraint, plant.nominal(plant.nominal_names[0])):
            with pytest.raises(ValueError, match=rf"\({n},\) or \(B, {n}\), got {re.escape(str(bad.shape))}"):
                fn(bad)
    with pytest.raises(ValueError, match=r"u must have shape \(4, %d\).*got \(4, %d\)" % (m, m + 1)):
        plant.xdot(np.zeros((4, n)), np.zeros((4, m + 1)))
    with pytest.raises(ValueError, match="u must have shape"):
        plant.xdot(np.zeros((4, n)), np.zeros(m))
    with pytest.raises(ValueError, match="v must have shape"):
        plant.df(np.zeros((4, n)), np.zeros((3, n)))
    with pytest.raises(ValueError, match="got"):
        plant.f_torch(torch.zeros(4, n + 1))
    with pytest.raises(KeyError, match="available"):
        plant.nominal("nope")


# ----------------------------------------------------------------------------- torch and df

def test_numpy_matches_torch(plant: ControlAffineSystem) -> None:
    X = sample_states(plant, 64, seed=2)
    U = np.random.default_rng(3).uniform(plant.u_min, plant.u_max, size=(64, plant.m))
    Xt, Ut = torch.tensor(X), torch.tensor(U)
    np.testing.assert_allclose(plant.f_torch(Xt).numpy(), plant.f(X), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(plant.G_torch(Xt).numpy(), plant.G(X), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(plant.xdot_torch(Xt, Ut).numpy(), plant.xdot(X, U), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(plant.constraint_torch(Xt).numpy(), plant.constraint(X), rtol=1e-13, atol=1e-13)
    for name in plant.nominal_names:
        k = plant.nominal(name)
        np.testing.assert_allclose(k.torch(Xt).numpy(), k(X), rtol=1e-13, atol=1e-11)
    assert plant.G_torch(Xt).shape == (64, plant.n, plant.m) and plant.constraint_torch(Xt).shape == (64,)


def test_torch_dtype_and_gradients(plant: ControlAffineSystem) -> None:
    x = torch.tensor(sample_states(plant, 8, seed=4), dtype=torch.float32, requires_grad=True)
    outs = [plant.f_torch(x), plant.G_torch(x), plant.constraint_torch(x)]
    outs += [plant.nominal(k).torch(x) for k in plant.nominal_names]
    assert all(o.dtype == torch.float32 for o in outs)
    total = sum(o.sum() for o in outs)
    total.backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    # the constraint gradient is the exact one (autograd vs sympy)
    xd = torch.tensor(sample_states(plant, 8, seed=5), requires_grad=True)
    grad, = torch.autograd.grad(plant.constraint_torch(xd).sum(), xd)
    import sympy as sp
    dh = sp.lambdify(plant.x_sym, [plant.constraint_expr.diff(s) for s in plant.x_sym], "numpy")
    ref = np.stack([np.broadcast_to(np.asarray(c, float), (8,)) for c in dh(*xd.detach().numpy().T)], -1)
    np.testing.assert_allclose(grad.numpy(), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")  # inside torch.func
def test_df_matches_torch_jvp(plant: ControlAffineSystem) -> None:
    rng = np.random.default_rng(6)
    X = sample_states(plant, 32, seed=7)
    V = rng.standard_normal((32, plant.n, 3))
    Xt = torch.tensor(X)
    for j in range(3):
        _, tangent = torch.func.jvp(plant.f_torch, (Xt,), (torch.tensor(V[..., j]),))
        np.testing.assert_allclose(plant.df(X, V[..., j]), tangent.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(plant.df(X, V)[..., j], tangent.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(plant.df(X[0], V[0, :, j]), tangent.numpy()[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(plant.df(X[0], V[0]), plant.df(X, V)[0])


# ----------------------------------------------------------------------------- the models

CONSTRAINT_CASES = {
    # state, sign of h (+1 inside, -1 outside)
    "van_der_pol": [([0, 0], 1), ([1.0, 1.0], 1), ([1.5, 0.1], -1), ([2.0, 0.0], -1), ([0, -2.7], -1)],
    "bicycle": [([0, 0, 0, 10], 1), ([5, 1.7, 0.3, 1], 1), ([0, 1.8, 0, 10], -1), ([0, -2.0, 0, 5], -1)],
    "inverted_pendulum": [([0, 3], 1), ([0.7, 0], 1), ([-0.8, 0], -1), ([1.2, -1], -1)],
    "acc": [([20, 100], 1), ([10, 18.5], 1), ([20, 35], -1), ([30, 10], -1)],
    "unicycle": [([0, 0, 0], 1), ([2, 0.6, 1], 1), ([2, 0, 0], -1), ([1.7, 0.2, 3], -1)],
    "double_integrator": [([0, 5], 1), ([-0.9, 0], 1), ([1.1, 0], -1), ([-1.5, -1], -1)],
    "darboux": [([0.5, 1.5], 1), ([1, 0], 1), ([-1, 0.5], -1), ([-0.5, 0.1], -1)],
    "obstacle_avoidance": [([1, 1, 0], 1), ([0.3, 0, 2], 1), ([0.1, 0.1, 0], -1), ([0, -0.19, 1], -1)],
    "spacecraft": [([1, 0, 0, 0, 0, 0], 1), ([0.2, 0.2, 0, 1, 0, 0], 1), ([0.1, 0, 0.1, 0, 0, 0], -1),
                   ([0, 0, -0.24, 0, 1, 0], -1)],
    "hi_ord8": [([0] * 8, 1), ([1] * 8, 1), ([-2] * 8, -1), ([-1.9] * 8, -1)],
    "point_robot": [([1, 0, -1, 0], 1), ([0.3, -0.5, 1, 1], 1), ([0.3, 0.3, 0, 0], -1), ([0, -0.49, 1, 1], -1)],
    "dubins": [([1.5, 0, 0], 1), ([0, -2.9, 3], 1), ([0.3, 0.3, 0], -1), ([0, 3.1, 1], -1), ([3.4, 3.4, -3], -1)],
}


def test_constraint_signs(plant: ControlAffineSystem) -> None:
    X = np.array([s for s, _ in CONSTRAINT_CASES[plant.name]], dtype=float)
    signs = np.array([g for _, g in CONSTRAINT_CASES[plant.name]])
    np.testing.assert_array_equal(np.sign(plant.constraint(X)), signs)
    for x, g in zip(X, signs):
        assert np.sign(plant.constraint(x)) == g


def test_hand_checked_values() -> None:
    vdp = systems.van_der_pol()
    np.testing.assert_allclose(vdp.f([1.0, 2.0]), [2.0, -1.0])
    np.testing.assert_allclose(vdp.f([2.0, 1.0]), [1.0, -3.0 - 2.0])
    np.testing.assert_allclose(vdp.G([5.0, 5.0]), [[0.0], [1.0]])
    assert vdp.constraint([0.0, 0.0]) == pytest.approx(1.5**2)
    bic = systems.bicycle()
    np.testing.assert_allclose(bic.f([0, 0, np.pi / 2, 3.0]), [0, 3.0, 0, 0], atol=1e-15)
    np.testing.assert_allclose(bic.G([0, 0, 0, 5.0]), [[0, 0], [0, 0], [0, 2.0], [1, 0]])
    pend = systems.inverted_pendulum(L=2.0, mass=3.0)
    np.testing.assert_allclose(pend.f([np.pi / 2, 0.5]), [0.5, 9.81 / 2])
    np.testing.assert_allclose(pend.G([0, 0]), [[0], [1 / 12]])
    acc = systems.acc()
    np.testing.assert_allclose(acc.f([10.0, 50.0]), [-(0.1 + 50 + 25) / 1650, 3.89], rtol=1e-14)
    np.testing.assert_allclose(acc.u_max, [0.3 * 1650 * 9.81])
    np.testing.assert_allclose(acc.u_min, [-0.3 * 1650 * 9.81])
    assert acc.constraint([10.0, 20.0]) == pytest.approx(2.0)
    uni = systems.unicycle()
    np.testing.assert_allclose(uni.G([0, 0, np.pi]), [[-1, 0], [0, 0], [0, 1]], atol=1e-15)
    np.testing.assert_allclose(uni.xdot([0, 0, 0], [1, 0.5]), [1, 0, 0.5])


def test_bicycle_steering_angle() -> None:
    bic = systems.bicycle(delta_max=0.4)
    np.testing.assert_allclose(bic.u_max, [3.0, math.tan(0.4)])
    u = np.array([[1.0, math.tan(0.3)], [0.0, math.tan(-0.2)]])
    np.testing.assert_allclose(steering_angle(u), [0.3, -0.2])
    assert steering_angle(u[0]) == pytest.approx(0.3)
    assert bic.steering_angle(bic.u_max) == pytest.approx(0.4)
    torch.testing.assert_close(steering_angle(torch.tensor(u)), torch.tensor([0.3, -0.2], dtype=torch.float64))


def test_with_params_and_frozen() -> None:
    vdp = systems.van_der_pol()
    x = np.array([0.5, 1.0])
    vdp3 = vdp.with_params(mu=3.0)
    assert vdp3.params.mu == 3.0 and vdp.params.mu == 1.0
    assert vdp3.f(x)[1] == pytest.approx(3.0 * 0.75 - 0.5) and vdp.f(x)[1] == pytest.approx(0.75 - 0.5)
    np.testing.assert_allclose(get_system("van_der_pol", mu=3.0).f(x), vdp3.f(x))
    assert vdp.with_params(r=1.0).constraint([0.0, 0.0]) == pytest.approx(1.0)
    np.testing.assert_allclose(vdp.with_params(u_max=5.0).u_max, [5.0])
    assert systems.bicycle(l_w=5.0).G([0, 0, 0, 5.0])[2, 1] == pytest.approx(1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        vdp.params.mu = 2.0  # type: ignore[misc]
    with pytest.raises(TypeError, match="unknown parameters"):
        vdp.with_params(nu=1.0)
    with pytest.raises(TypeError):
        systems.acc(mass=1.0)
    lo, _ = vdp.domain
    lo[0] = 99.0                      # returned arrays are copies
    assert vdp.domain[0][0] == -3.0


def test_vdp_disk_is_enforceable_with_the_bounds() -> None:
    """The documented choice: with u_max >= mu r some admissible u gives hdot >= 0 in the disk."""
    vdp = systems.van_der_pol()
    r, u_max = vdp.params.r, vdp.params.u_max
    assert u_max >= vdp.params.mu * r
    rng = np.random.default_rng(8)
    ang = rng.uniform(0, 2 * np.pi, 4000)
    rad = r * np.sqrt(rng.uniform(0, 1, 4000))
    rad[:1000] = r                                     # boundary
    X = np.stack([rad * np.cos(ang), rad * np.sin(ang)], -1)
    grad_h = -2 * X
    best = np.max([np.einsum("bi,bi->b", grad_h, vdp.xdot(X, np.full((4000, 1), u))) for u in (-u_max, u_max)], 0)
    assert best.min() >= -1e-12
    # and with too small a bound it is not: at x = (0, r) you need |u| >= mu r
    weak = vdp.with_params(u_max=1.0)
    top = np.array([[0.0, r]])
    assert max(float(-2 * r * weak.xdot(top, np.array([[u]]))[0, 1]) for u in (-1.0, 1.0)) < 0


def _closed_loop_min_h(plant: ControlAffineSystem, name: str, x0: list[float], t_end: float) -> float:
    k = plant.nominal(name)

    def rhs(_t: float, x: np.ndarray) -> np.ndarray:
        return plant.xdot(x, np.clip(k(x), plant.u_min, plant.u_max))

    sol = solve_ivp(rhs, (0.0, t_end), x0, max_step=0.05, rtol=1e-6)
    return float(plant.constraint(sol.y.T).min())


@pytest.mark.parametrize("name, controller, x0, t_end", [
    ("van_der_pol", "zero", [0.5, 0.0], 20.0),
    ("bicycle", "drift", [0.0, 0.0, 0.0, 10.0], 10.0),
    ("inverted_pendulum", "pd", [0.0, 0.0], 5.0),
    ("acc", "cruise", [20.0, 100.0], 30.0),
    ("unicycle", "go_to_goal", [0.0, 0.0, 0.0], 5.0),
    ("double_integrator", "pd", [0.0, 0.0], 10.0),
    ("point_robot", "goal", [-2.5, 0.0, 0.0, 0.0], 6.0),
    ("dubins", "aim", [-2.0, 0.5, 0.0], 5.0),
    ("dubins", "go_to_goal", [-2.5, 0.0, 0.0], 5.0),
])
def test_nominal_controllers_leave_the_safe_set(name: str, controller: str, x0: list[float], t_end: float) -> None:
    """Each nominal controller (clipped to the bounds) starts safe and leaves: something to filter."""
    plant = get_system(name)
    assert plant.constraint(x0) > 0
    assert _closed_loop_min_h(plant, controller, x0, t_end) < 0


def test_single_source_and_layering() -> None:
    """No other package of ours imported (but the leaf compiler.errors); torch only lazily."""
    for path in (ROOT / "systems").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            for mod in mods:
                assert mod == "compiler.errors" or mod.split(".")[0] not in {"cbfsim", "compiler", "training"}, \
                    (path, mod)
                if mod.split(".")[0] == "torch":
                    assert node.col_offset > 0, f"{path.name}: torch imported at module level"
    code = "import sys, systems; [systems.get_system(n).f([0.0] * systems.get_system(n).n) for n in systems.SYSTEM_NAMES]; " \
           "assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


# ----------------------------------------------------------------------------- C++

def test_cpp_source_text(plant: ControlAffineSystem) -> None:
    src = plant.cpp_source("plant", "float", "detail::m_")
    assert "std::" not in src and "#include" not in src and "M_PI" not in src
    assert "namespace plant {" in src and f"kStateDim = {plant.n};" in src and f"kInputDim = {plant.m};" in src
    for name in plant.nominal_names:
        assert f"inline void nominal_{name}(const float* x, float* u)" in src
    dbl = plant.cpp_source("a::b", "double")
    assert "namespace a::b {" in dbl and not re.search(r"\d[fF]\b", dbl)
    for bad in [("1ns",), ("ok", "float", "std:"), ("ok", "float", "1x"), ("ok", "float; int")]:
        with pytest.raises(ValueError):
            plant.cpp_source(*bad)


SHIM = """#include <cmath>
#include <cstdio>
namespace detail {
template <class T> T m_sin(T a) { return std::sin(a); }
template <class T> T m_cos(T a) { return std::cos(a); }
template <class T> T m_tan(T a) { return std::tan(a); }
template <class T> T m_atan(T a) { return std::atan(a); }
template <class T> T m_atan2(T a, T b) { return std::atan2(a, b); }
template <class T> T m_exp(T a) { return std::exp(a); }
template <class T> T m_log(T a) { return std::log(a); }
template <class T> T m_sqrt(T a) { return std::sqrt(a); }
template <class T> T m_tanh(T a) { return std::tanh(a); }
template <class T> T m_fabs(T a) { return std::fabs(a); }
template <class T> T m_pow(T a, T b) { return std::pow(a, b); }
}  // namespace detail
static void put(double d) { std::printf(" %.17g", d); }
"""
N_CPP = 16


def _cpp_inputs(plant: ControlAffineSystem, scalar: str) -> tuple[np.ndarray, np.ndarray]:
    X = sample_states(plant, N_CPP, seed=9)
    V = np.random.default_rng(10).standard_normal((N_CPP, plant.n))
    if scalar == "float":
        X, V = X.astype(np.float32).astype(np.float64), V.astype(np.float32).astype(np.float64)
    return X, V


def _reference(plant: ControlAffineSystem, X: np.ndarray, V: np.ndarray) -> np.ndarray:
    parts = [plant.f(X), plant.G(X).reshape(len(X), -1), plant.df(X, V), plant.constraint(X)[:, None]]
    parts += [plant.nominal(k)(X) for k in plant.nominal_names]
    return np.concatenate(parts, axis=1)


def _cpp_main(scalar: str) -> str:
    T = scalar
    out = [SHIM]
    calls = []
    for name in SYSTEM_NAMES:
        plant = get_system(name)
        n, m = plant.n, plant.m
        spaces = [(f"{name}_std", "std::")] + ([(f"{name}_mp", "detail::m_")] if scalar == "float" else [])
        for ns, prefix in spaces:
            out.append(plant.cpp_source(ns, scalar, prefix))
        X, V = _cpp_inputs(plant, scalar)
        arr = lambda a: ", ".join(repr(float(x)) for x in a.ravel())  # noqa: E731
        out.append(f"static const double kX_{name}[{N_CPP * n}] = {{{arr(X)}}};")
        out.append(f"static const double kV_{name}[{N_CPP * n}] = {{{arr(V)}}};")
        for ns, _ in spaces:
            nominal = "\n".join(f"    {ns}::nominal_{k}(x, u); for (int j = 0; j < {m}; ++j) put(static_cast<double>(u[j]));"
                                for k in plant.nominal_names)
            calls.append(f"""  for (int b = 0; b < {N_CPP}; ++b) {{
    {T} x[{n}], v[{n}], o[{max(n * m, n)}], u[{max(m, 1)}];
    for (int i = 0; i < {n}; ++i) {{ x[i] = static_cast<{T}>(kX_{name}[b * {n} + i]); v[i] = static_cast<{T}>(kV_{name}[b * {n} + i]); }}
    std::printf("{ns}");
    {ns}::f(x, o); for (int i = 0; i < {n}; ++i) put(static_cast<double>(o[i]));
    {ns}::G(x, o); for (int i = 0; i < {n * m}; ++i) put(static_cast<double>(o[i]));
    {ns}::df(x, v, o); for (int i = 0; i < {n}; ++i) put(static_cast<double>(o[i]));
    put(static_cast<double>({ns}::constraint(x)));
{nominal}
    static_assert({ns}::kStateDim == {n} && {ns}::kInputDim == {m}, "dims");
    for (int j = 0; j < {m}; ++j) {{ put(static_cast<double>({ns}::kUMin[j])); put(static_cast<double>({ns}::kUMax[j])); }}
    std::printf("\\n");
  }}""")
    out.append("int main() {\n" + "\n".join(calls) + "\n  return 0;\n}\n")
    return "\n".join(out)


@pytest.fixture(scope="module")
def cpp_results(cxx: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, np.ndarray]]:
    """scalar -> namespace -> (N_CPP, outputs) from one compiled program per scalar type."""
    results: dict[str, dict[str, np.ndarray]] = {}
    for scalar in ("float", "double"):
        stdout = build_and_run(cxx, _cpp_main(scalar), tmp_path_factory.mktemp(scalar), CXX_FLAGS)
        rows: dict[str, list[list[float]]] = {}
        for line in stdout.splitlines():
            ns, *vals = line.split()
            rows.setdefault(ns, []).append([float(v) for v in vals])
        results[scalar] = {ns: np.array(r) for ns, r in rows.items()}
    return results


@pytest.mark.toolchain
@pytest.mark.parametrize("scalar", ["double", "float"])
def test_cpp_matches_numpy(plant: ControlAffineSystem, scalar: str,
                           cpp_results: dict[str, dict[str, np.ndarray]]) -> None:
    X, V = _cpp_inputs(plant, scalar)
    ref = _reference(plant, X, V)
    bounds = np.stack([plant.u_min, plant.u_max], -1).ravel()
    # relative tolerance, plus an absolute one scaled by each output's magnitude over the batch
    # (sums such as the ACC nominal cancel terms of ~2e4)
    tol = 1e-12 if scalar == "double" else 64 * float(np.finfo(np.float32).eps)
    scale = np.max(np.abs(ref), axis=0, keepdims=True) + 1e-30
    namespaces = [f"{plant.name}_std"] + ([f"{plant.name}_mp"] if scalar == "float" else [])
    for ns in namespaces:
        got = cpp_results[scalar][ns]
        assert got.shape == (N_CPP, ref.shape[1] + 2 * plant.m), ns
        np.testing.assert_array_less(np.abs(got[:, :ref.shape[1]] - ref), tol * (np.abs(ref) + scale) + 1e-300,
                                     err_msg=f"{ns} ({scalar})")
        np.testing.assert_allclose(got[:, ref.shape[1]:], np.broadcast_to(bounds, (N_CPP, 2 * plant.m)),
                                   rtol=tol)
