"""The project's structure as tests: one error tree, and the curated public API resolves."""
from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from compiler.errors import CbfsimError

PACKAGES = ("systems", "compiler", "training", "cbfsim")
# modules whose import needs something optional or runs a program
SKIP_MODULES = {"cbfsim.device.__main__"}


def _modules():
    for package in PACKAGES:
        root = importlib.import_module(package)
        yield root
        for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
            if info.name not in SKIP_MODULES:
                yield importlib.import_module(info.name)


def _project_exceptions():
    seen = {}
    for module in _modules():
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException) and not issubclass(obj, Warning)
                    and obj.__module__.split(".")[0] in PACKAGES):
                seen[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return seen


def test_every_project_error_derives_from_the_one_root_and_a_builtin():
    errors = _project_exceptions()
    assert "compiler.errors.ShapeError" in errors and "training.model_card.CardError" in errors
    public = {k: v for k, v in errors.items() if not v.__name__.startswith("_")}
    not_rooted = [k for k, v in public.items() if not issubclass(v, CbfsimError)]
    assert not not_rooted, f"errors outside the CbfsimError tree: {not_rooted}"
    from compiler.errors import CompilerError
    family_roots = (CbfsimError, CompilerError)     # bases that are only ever caught, never raised
    builtin_free = [k for k, v in public.items() if v not in family_roots
                    and not any(b.__module__ == "builtins" and b not in (Exception, BaseException, object)
                                for b in v.__mro__)]
    assert not builtin_free, f"errors that subclass no specific builtin (ValueError, RuntimeError, ...): {builtin_free}"


@pytest.mark.parametrize("name", importlib.import_module("cbfsim").__all__)
def test_every_name_of_the_curated_public_api_resolves(name):
    import cbfsim
    import cbfsim.simulate  # noqa: F401  (a submodule import must not shadow the function)
    value = getattr(cbfsim, name)
    assert value is not None and not inspect.ismodule(value), f"cbfsim.{name} is a module"


# Which of our packages each layer may import (design.md: data flows one way). Every layer may
# import the leaf module compiler.errors, the root of the one error tree.
ALLOWED_IMPORTS = {
    "systems": {"systems"},
    "compiler": {"compiler"},
    "training": {"training", "systems", "compiler"},
    "cbfsim": {"cbfsim", "training", "systems", "compiler"},
}


def _imported_packages(path):
    import ast
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0], node.module, node.lineno


def test_nothing_imports_upward():
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    upward = []
    for layer, allowed in ALLOWED_IMPORTS.items():
        for path in sorted((root / layer).rglob("*.py")):
            for package, module, line in _imported_packages(path):
                if package in ALLOWED_IMPORTS and package not in allowed and module != "compiler.errors":
                    upward.append(f"{path.relative_to(root)}:{line} imports {module}")
    assert not upward, "imports against the data flow:\n" + "\n".join(upward)


def _device_modules_after(code: str) -> list[str]:
    """The cbfsim.device modules a fresh interpreter holds after running ``code``."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    probe = code + "\nimport sys\nprint(sorted(m for m in sys.modules if m.split('.')[:2] == ['cbfsim', 'device']))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=root,
                            env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert result.returncode == 0, result.stderr
    return eval(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ["cbfsim", "cbfsim.simulate", "cbfsim.engine", "cbfsim.firmware_config",
                                    "cbfsim.firmware_build", "cbfsim.card_run"])
def test_the_host_simulation_imports_nothing_from_the_device_package(module):
    # issue 24: engine.py imported the config generator from cbfsim/device, whose reference.py
    # imports simulate.py, which imports engine.py. The generator now lives below both.
    assert _device_modules_after(f"import {module}") == []


def test_a_host_simulation_and_the_engine_config_run_without_the_device_package(tmp_path):
    # Not only the imports: one simulate() run and the compiled engine's headers (generated from
    # a model card, as build_engine does) leave cbfsim.device unloaded.
    code = f"""
import numpy as np
from cbfsim import simulate
from cbfsim.barriers import AnalyticBarrier
from cbfsim.filters import CBFProjection
from systems import get_system
plant = get_system("van_der_pol")
h = AnalyticBarrier(lambda X: 4.0 - (X ** 2).sum(axis=1), lambda X: -2.0 * X, n=2, m=1)
traj = simulate(plant, h, CBFProjection(plant), "zero", np.array([0.5, 0.0]), t_final=0.05, dt_control=1e-2)
assert np.all(np.isfinite(traj.x)) and traj.x.shape == (1, 6, 2)
from cbfsim.card_run import shipped_card_run
from cbfsim.firmware_config import generate
run = shipped_card_run("vdp")
gen = generate(run.model, run.config, {str(tmp_path)!r})
assert (gen.directory / "cbf_config.hpp").is_file()
"""
    assert _device_modules_after(code) == []


def test_the_device_package_and_the_engine_share_one_config_generator():
    import cbfsim.device as device
    import cbfsim.firmware_config as config
    assert device.RunConfig is config.RunConfig and device.DeviceConfigError is config.DeviceConfigError
    import cbfsim.engine as engine
    source = inspect.getsource(engine)
    assert "from .firmware_config import generate" in source and ".device" not in source.replace("cbfsim.device", "")
