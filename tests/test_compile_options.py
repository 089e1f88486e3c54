"""Compile options of the wrong type or out of range are refused in one line before anything
is loaded or compiled (``inputs=2.5`` once reached the header as ``kInputDim = 2.5`` and
failed inside g++; ``inputs=True`` compiled a one-input barrier without a word)."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.api import compile_barrier, compile_model
from compiler.emit_cpp import MAX_ARRAY_ELEMENTS, MAX_INPUTS
from compiler.errors import OptionError
from compiler.ir import Activation, Dense, Model

TINY = Model((Dense(np.ones((4, 2)), np.zeros(4)), Activation("tanh"), Dense(np.ones((1, 4)), np.zeros(1))), 2,
             name="tiny")


@pytest.fixture
def no_compiler(monkeypatch):
    """Fail the test if anything tries to run the C++ compiler or load a model."""
    import compiler.api
    import compiler.build

    def refuse(*args, **kwargs):
        raise AssertionError("the compiler ran (or the model was loaded) before the options were checked")
    monkeypatch.setattr(compiler.build.subprocess, "run", refuse)
    monkeypatch.setattr(compiler.api, "load_model", refuse)


@pytest.mark.parametrize("inputs,message", [
    (2.5, r"must be a whole number, got 2.5 \(float\)"), (True, r"must be a whole number, got True \(bool\)"),
    (np.bool_(True), r"must be a whole number"), ("2", r"must be a whole number, got '2' \(str\)"),
    (None, r"must be a whole number, got None"), (10**9, rf"must be between 0 and {MAX_INPUTS:,}, got 1,000,000,000"),
    (-3, r"must be between 0 and .*, got -3")])      # 0 is an autonomous plant (tests/test_autonomous.py)
def test_bad_inputs_are_refused_in_one_line_before_anything_is_loaded_or_compiled(no_compiler, inputs, message):
    with pytest.raises(OptionError, match=r"inputs \(m, the number of control inputs\) " + message) as err:
        compile_barrier(TINY, inputs=inputs)
    assert "\n" not in str(err.value) and isinstance(err.value, ValueError)


@pytest.mark.parametrize("option,value", [("order", 1.0), ("order", True), ("order", 3), ("dtype", "half"),
                                          ("layout", "fast")])
def test_other_bad_options_are_refused_in_one_line_before_anything_is_loaded(no_compiler, option, value):
    with pytest.raises(OptionError, match=option if option != "dtype" else "dtype"):
        compile_barrier(TINY, inputs=1, **{option: value})


def test_inputs_that_would_overflow_the_headers_int_arrays_are_refused_naming_the_sizes():
    wide = Model((Dense(np.ones((1 << 15, 2)), np.zeros(1 << 15)), Activation("tanh"),
                  Dense(np.ones((1, 1 << 15)), np.zeros(1))), 2, name="wide")
    count = (1 << 15) * (MAX_INPUTS + 3)
    assert count > MAX_ARRAY_ELEMENTS
    with pytest.raises(OptionError, match=rf"makes the widest layer's m \+ 3 channels {count:,} scalars"):
        compile_model(wide, inputs=MAX_INPUTS)


def test_a_numpy_integer_is_a_whole_number_and_compiles_like_the_int():
    assert compile_model(TINY, inputs=np.int64(2)).header == compile_model(TINY, inputs=2).header
