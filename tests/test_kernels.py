"""compiler/kernels/*.hpp compile on their own, and a generated header carries only the math its
activations call, plus what a caller asks for by name (firmware plant code)."""
from __future__ import annotations

import re
import subprocess
from importlib import resources

import pytest

from compiler.activations import ACTIVATIONS
from compiler.api import compile_model
from compiler.cppmath import MATH_FUNCTIONS, math_source
from training.architectures import mlp

KERNELS = sorted(p.name for p in (resources.files("compiler") / "kernels").iterdir() if p.name.endswith(".hpp"))


def _defined(header: str) -> set[str]:
    return set(re.findall(r"inline \w+ m_(\w+)\(", header))


def _called(header: str) -> set[str]:
    return set(re.findall(r"\bm_(\w+)\(", header))


@pytest.mark.toolchain
@pytest.mark.parametrize("kernel", KERNELS)
def test_each_kernel_header_compiles_on_its_own(kernel, cxx):
    path = resources.files("compiler") / "kernels" / kernel
    result = subprocess.run([cxx, "-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-fsyntax-only",
                             "-x", "c++", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_kernels_are_package_data_and_inlined_whole():
    assert KERNELS == ["activate2_pair.hpp", "activate2_sweep.hpp", "layers.hpp", "periodic.hpp"]
    header = compile_model(mlp([2, 4, 1], "tanh", seed=0), inputs=1, order=2, name="k").header
    assert "#include" not in header.split("namespace k {")[1]   # one self-contained file
    assert "template <int N, int M, typename Act>\ninline void activate2(" in header


def test_relu_header_carries_no_transcendental_function():
    header = compile_model(mlp([2, 8, 8, 1], "relu", seed=0), inputs=1, name="r").header
    assert _defined(header) == set() and "mx_select" in header


@pytest.mark.parametrize("kind, order", [(kind, order) for kind in sorted(ACTIVATIONS) for order in (1, 2)
                                         if order == 1 or ACTIVATIONS[kind].smooth])    # order 2 needs C^2
def test_header_defines_exactly_the_math_its_activations_call(kind, order):
    import torch
    spec = ACTIVATIONS[kind]
    params = {"approximate": 1.0} if kind == "gelu" and order == 2 else {}
    net = torch.nn.Sequential(torch.nn.Linear(2, 4), spec.torch_module(params), torch.nn.Linear(4, 1))
    header = compile_model(net, inputs=1, order=order, name="m").header
    assert _defined(header) == _called(header)   # everything called is defined, nothing more


def test_caller_asks_for_more_math_by_name():
    header = compile_model(mlp([2, 4, 1], "relu", seed=0), inputs=1, name="p", math=("sin", "cos")).header
    assert _defined(header) == {"sin", "cos"}
    with pytest.raises(ValueError, match="unknown math functions \\['asin'\\]"):
        compile_model(mlp([2, 4, 1], "relu", seed=0), inputs=1, name="p", math=("asin",))


def test_every_header_math_function_can_be_asked_for():
    header = compile_model(mlp([2, 4, 1], "relu", seed=0), inputs=1, name="p", math=MATH_FUNCTIONS).header
    assert _defined(header) == set(MATH_FUNCTIONS)


@pytest.mark.parametrize("system", ["bicycle", "inverted_pendulum", "unicycle", "van_der_pol"])
def test_firmware_generation_gives_a_relu_barrier_the_math_its_plant_calls(system, tmp_path):
    from cbfsim.device import RunConfig, generate
    from systems import get_system
    plant = get_system(system)
    source = plant.cpp_source("cbf_config::plant", math_prefix="m_")
    used = set(re.findall(r"\w+", re.search(r"// math functions: (.*)", source).group(1))) - {"none"}
    config = RunConfig(system=system, x0=tuple([0.0] * plant.n), nominal=plant.nominal_names[0])
    net = mlp([plant.n, 8, 1], "relu", seed=0)
    if used - set(MATH_FUNCTIONS):   # a function the header cannot offer: refused by name
        with pytest.raises(ValueError, match="needs math functions the barrier header lacks"):
            generate(net, config, tmp_path)
        return
    # what the plant calls, and what those call (atan2 -> atan), nothing else
    assert _defined(generate(net, config, tmp_path).compiled.header) == _defined(math_source("float", used))
