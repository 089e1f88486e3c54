"""Run a built firmware target (QEMU for the Cortex-M targets, always with a timeout and
``-icount shift=0`` so SysTick counts are repeatable); building is cbfsim/firmware_build.py."""
from __future__ import annotations

import subprocess
from pathlib import Path

from ..firmware_build import FIRMWARE_DIR, INSTALL, build, engine_toolchain, require_tool
from .errors import DeviceError

__all__ = ["FIRMWARE_DIR", "INSTALL", "QEMU_MACHINE", "build", "engine_toolchain", "require_tool", "run", "run_command"]

QEMU_MACHINE = {"m4": "mps2-an386", "m7": "mps2-an500"}


def run_command(target: str, program: str | Path) -> list[str]:
    """The command that runs a built program (QEMU for the Cortex-M targets)."""
    if target == "host":
        return [str(program)]
    return ["qemu-system-arm", "-M", QEMU_MACHINE[target], "-nographic", "-monitor", "none", "-serial", "stdio",
            "-semihosting-config", "enable=on,target=native", "-icount", "shift=0", "-kernel", str(program)]


def run(target: str, program: str | Path, timeout: float = 120.0) -> str:
    """Run and return stdout; a nonzero exit or a timeout raises DeviceError."""
    if target in QEMU_MACHINE:
        require_tool(target, "qemu-system-arm")
    if not Path(program).exists():  # QEMU idles forever on a missing ELF
        raise DeviceError(f"{program} does not exist")
    command = run_command(target, program)
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise DeviceError(f"{' '.join(command)} timed out after {timeout} s") from exc
    if result.returncode != 0:
        raise DeviceError(f"{' '.join(command)} exited with {result.returncode}\n{result.stderr[-2000:]}"
                          f"\n{result.stdout[-500:]}")
    return result.stdout
