"""A mistake in a plant's define() is reported naming define(), the plant, the field and the fix:
the two mistakes of issue 23 (np.cos for sp.cos, a flat G) and their neighbours."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import sympy as sp

from compiler.errors import CbfsimError
from systems import ControlAffineSystem
from systems.base import Definition
from systems.definition_errors import PlantDefinitionError


@dataclass(frozen=True)
class DubinsParams:
    v: float = 1.0
    r: float = 0.5


class Dubins(ControlAffineSystem):
    """A constant-speed Dubins car avoiding a disk at the origin (the issue's plant)."""
    name = "dubins"
    state_names = ("px", "py", "theta")
    input_names = ("omega",)
    Params = DubinsParams

    @staticmethod
    def define(x, p):
        px, py, th = x
        return Definition(f=[p.v * sp.cos(th), p.v * sp.sin(th), 0], G=[[0], [0], [1]],
                          constraint=px**2 + py**2 - p.r**2, u_min=[-1], u_max=[1],
                          domain=([-2, -2, -3.2], [2, 2, 3.2]), nominal={"goal": [-th]})


class NumpyCos(Dubins):
    @staticmethod
    def define(x, p):
        px, py, th = x
        return Definition(f=[p.v * sp.cos(th), p.v * np.sin(th), 0], G=[[0], [0], [1]],
                          constraint=px**2 + py**2 - p.r**2, u_min=[-1], u_max=[1],
                          domain=([-2, -2, -3.2], [2, 2, 3.2]), nominal={"goal": [-th]})


class FlatG(Dubins):
    @staticmethod
    def define(x, p):
        px, py, th = x
        return Definition(f=[p.v * sp.cos(th), p.v * sp.sin(th), 0], G=[0, 0, 1],
                          constraint=px**2 + py**2 - p.r**2, u_min=[-1], u_max=[1],
                          domain=([-2, -2, -3.2], [2, 2, 3.2]), nominal={"goal": [-th]})


class MathInNominal(Dubins):
    @staticmethod
    def define(x, p):
        import math
        px, py, th = x
        return Definition(f=[p.v * sp.cos(th), p.v * sp.sin(th), 0], G=[[0], [0], [1]],
                          constraint=px**2 + py**2 - p.r**2, u_min=[-1], u_max=[1],
                          domain=([-2, -2, -3.2], [2, 2, 3.2]), nominal={"goal": [-math.atan(th)]})


class BranchInConstraint(Dubins):
    @staticmethod
    def define(x, p):
        px, py, th = x
        return Definition(f=[p.v * sp.cos(th), p.v * sp.sin(th), 0], G=[[0], [0], [1]],
                          constraint=px if px > 0 else -px, u_min=[-1], u_max=[1],
                          domain=([-2, -2, -3.2], [2, 2, 3.2]), nominal={"goal": [-th]})


class UnknownParameter(Dubins):
    @staticmethod
    def define(x, p):
        px, py, th = x
        return Definition(f=[p.v * sp.cos(th), p.v * sp.sin(th), 0], G=[[0], [0], [1]],
                          constraint=px**2 + py**2 - p.radius**2, u_min=[-1], u_max=[1],
                          domain=([-2, -2, -3.2], [2, 2, 3.2]), nominal={"goal": [-th]})


class ShortF(Dubins):
    @staticmethod
    def define(x, p):
        px, py, th = x
        return Definition(f=[p.v * sp.cos(th), p.v * sp.sin(th)], G=[[0], [0], [1]],
                          constraint=px**2 + py**2 - p.r**2, u_min=[-1], u_max=[1],
                          domain=([-2, -2, -3.2], [2, 2, 3.2]), nominal={"goal": [-th]})


class StateInBounds(Dubins):
    @staticmethod
    def define(x, p):
        px, py, th = x
        return Definition(f=[p.v * sp.cos(th), p.v * sp.sin(th), 0], G=[[0], [0], [1]],
                          constraint=px**2 + py**2 - p.r**2, u_min=[-th], u_max=[1],
                          domain=([-2, -2, -3.2], [2, 2, 3.2]), nominal={"goal": [-th]})


def _error(cls) -> str:
    with pytest.raises(PlantDefinitionError) as info:
        cls()
    text = str(info.value)
    assert "\n" not in text and "define()" in text and cls.__name__ in text and "test_plant_errors.py" in text
    assert isinstance(info.value, CbfsimError) and isinstance(info.value, ValueError)
    return text


def test_the_correct_plant_builds():
    system = Dubins()
    assert system.n == 3 and system.m == 1 and np.allclose(system.f([0, 0, 0]), [1, 0, 0])


def test_numpy_instead_of_sympy_names_the_entry_and_the_fix():
    text = _error(NumpyCos)
    assert "f[1]:" in text and "use sympy functions" in text and "sp.cos, not np.cos" in text


def test_a_flat_G_names_G_and_shows_the_rows():
    text = _error(FlatG)
    assert "G: got a flat list [0, 0, 1]" in text
    assert "G is a list of n rows of m entries" in text and "G=[[0], [0], [1]]" in text


def test_math_in_a_nominal_controller_names_it():
    text = _error(MathInNominal)
    assert "nominal['goal'][0]:" in text and "use sympy functions" in text


def test_a_python_branch_on_a_state_names_the_constraint():
    text = _error(BranchInConstraint)
    assert "constraint:" in text and "sp.Piecewise" in text


def test_an_unknown_parameter_lists_the_parameters():
    text = _error(UnknownParameter)
    assert "constraint:" in text and "'radius'" in text and "v, r" in text


def test_a_wrong_length_and_a_state_in_a_bound_are_named():
    assert "f: expected a list of n entries, n = 3 states (px, py, theta), got 2 entries" in _error(ShortF)
    assert "u_min[0]: unknown symbols ['theta']" in _error(StateInBounds)


def test_the_cli_prints_the_error_as_one_line(tmp_path, capsys):
    import systems
    from cbfsim.cli import main
    systems.register("issue23_flat_g", FlatG, replace=True)
    try:
        code = main(["train", "--system", "issue23_flat_g", "--no-verify", "--out", str(tmp_path / "run")])
    finally:
        systems.unregister("issue23_flat_g")
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1 and "define(): G: got a flat list" in err
    assert not (tmp_path / "run").exists()
