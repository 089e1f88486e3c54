"""Shared fixtures. Toolchain tests skip locally with the install command in the reason,
and fail in CI (CI=true), where .ci/run installs every toolchain."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"
BLAS_POOLS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# The files that take longest (about 30 s to 2 min of CPU each, measured), longest first.
# Under ``--dist loadfile`` xdist hands out whole files in collection order (see
# pytest_configure); by default it queues them by test count, which put these few-test,
# minute-long files last, and one core then ran the last of them while the other sat idle.
LONGEST_FIRST = ("test_certify_parallel.py", "test_adversarial_closed_loop.py", "test_own_plant.py",
                 "test_build_cache.py", "test_certify.py", "test_cli_errors.py", "test_frontend_onnx.py",
                 "test_model_format.py", "test_compiler_codegen.py", "test_onnx_graph_scale.py",
                 "test_firmware_multirow.py", "test_fast_paths.py", "test_robustness.py", "test_autonomous.py")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``-n``) every worker is already one process per core: a BLAS/OpenMP
    pool per worker only oversubscribes the cores, and OpenBLAS's spinning threads made a
    400-point network evaluation 14x slower on 2 cores (16 ms against 1.1 ms). Set here, in the
    controller, before the workers start, so they and their subprocesses inherit it; a value
    the caller set wins."""
    # Python's bytecode cache, as a plain Python run keeps it (__pycache__/, ignored by git):
    # with PYTHONDONTWRITEBYTECODE set, as on these machines, every CLI test's subprocess
    # compiled the project's modules again and each worker rewrote every test file's asserts
    # (test_cli_errors + test_model_format: 49.6 -> 41.4 CPU-s on a clean clone).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    if getattr(config.option, "numprocesses", None) or os.environ.get("PYTEST_XDIST_WORKER"):
        for var in BLAS_POOLS:
            os.environ.setdefault(var, "1")
    if getattr(config.option, "dist", "no") == "loadfile":
        config.option.loadscopereorder = False       # files in collection order: LONGEST_FIRST first


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The LONGEST_FIRST files first (longest-processing-time-first scheduling of the files
    over the workers); every file's own tests keep their order (a stable sort)."""
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def require_tool(tool: str, install: str) -> str:
    """Path of ``tool``, or skip (locally) / fail (in CI) naming the install command."""
    path = shutil.which(tool)
    if path:
        return path
    message = f"{tool} not found; install it with: {install}"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def cxx() -> str:
    """The host C++ compiler (CXX or g++)."""
    return require_tool(os.environ.get("CXX", "g++"), "apt-get install -y g++")


def build_and_run(cxx: str, source: str, workdir: Path, flags: list[str], args: list[str] | None = None,
                  stdin: str | None = None) -> str:
    """Compile one C++ translation unit with ``flags`` and return the program's stdout."""
    src = workdir / "main.cpp"
    src.write_text(source)
    exe = workdir / "main"
    cmd = [cxx, *flags, str(src), "-o", str(exe)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"compile failed: {' '.join(cmd)}\n{result.stderr}")
    run = subprocess.run([str(exe), *(args or [])], capture_output=True, text=True, input=stdin, timeout=120)
    if run.returncode != 0:
        raise AssertionError(f"program failed ({run.returncode}): {run.stderr}")
    return run.stdout


def all_activations_net(order: int, inputs: int, gain: float = 1.0, seed: int = 0):
    """One network using every activation (every smooth one for order 2), 8 wide, with its
    hidden weights scaled by ``gain`` (large gains reach the tails of exp, log1p, tanh, erf)."""
    import torch

    from compiler.activations import preset
    from training.architectures import ACTIVATION_NAMES, activation_module

    acts = [a for a in ACTIVATION_NAMES if order == 1 or preset(a)[0].smooth]
    torch.manual_seed(seed)
    layers, width = [], inputs
    for act in acts:
        layers += [torch.nn.Linear(width, 8), activation_module(act)]
        width = 8
    net = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))
    with torch.no_grad():
        for layer in net[:-1:2]:
            layer.weight.mul_(gain)
    return net


def module_on_path(tmp_path_factory, name: str, source: str):
    """A module ``name`` written from ``source`` into a fresh directory put on sys.path, as a
    user's PYTHONPATH puts their own plant (a generator for a fixture: yields the directory, then
    removes it from sys.path and forgets the module)."""
    d = tmp_path_factory.mktemp(name)
    (d / f"{name}.py").write_text(source)
    sys.path.insert(0, str(d))
    try:
        yield d
    finally:
        sys.path.remove(str(d))
        sys.modules.pop(name, None)


def cli_in_process(argv: list[str]) -> subprocess.CompletedProcess:
    """``cbfsim ARGV`` run by ``cbfsim.cli.main`` in this process: its exit code, stdout and
    stderr as a finished subprocess would give them, without an interpreter and its imports
    to start (for tests of what the command says, not of the console script itself)."""
    import contextlib
    import io

    from cbfsim.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:               # argparse: --help (0) or a usage error (2)
            code = exc.code
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def edge_states(margin_of, bearings: np.ndarray, velocities: np.ndarray, far: float, near: float) -> np.ndarray:
    """States on the edge of a braking set around the origin: along each unit bearing (k, d),
    with its velocity (k, d), the distance found by 60 bisection steps between ``far`` (inside
    the set) and ``near`` (outside it); ``margin_of(x)`` >= 0 on the set."""
    a, b = np.full(len(bearings), float(far)), np.full(len(bearings), float(near))
    for _ in range(60):
        mid = (a + b) / 2
        inside = margin_of(np.hstack([mid[:, None] * bearings, velocities])) >= 0
        a, b = np.where(inside, mid, a), np.where(inside, b, mid)
    return np.hstack([a[:, None] * bearings, velocities])
