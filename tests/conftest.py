"""Shared fixtures. Toolchain tests skip locally with the install command in the reason,
and fail in CI (CI=true), where .ci/run installs every toolchain."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


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
