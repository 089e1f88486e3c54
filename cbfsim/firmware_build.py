"""Build a firmware target with ``firmware/Makefile`` (the host engine, the host twin, the
boards' ELFs), and the engine's compiler and flags as the Makefile states them.

Why below cbfsim/device: the compiled engine (cbfsim/engine.py) builds its host library with
the same Makefile, and a host simulation must need nothing from the device package."""
from __future__ import annotations

import subprocess
from pathlib import Path

from compiler.errors import ToolchainError

from .firmware_config import Generated

FIRMWARE_DIR = Path(__file__).resolve().parents[1] / "firmware"
INSTALL = {
    "host": "apt-get install -y g++",
    "m4": "apt-get install -y gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm",
    "m7": "apt-get install -y gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm",
    "xtensa": "apt-get install -y gcc-xtensa-lx106",
}


def require_tool(target: str, tool: str) -> None:
    """The tool and make are on PATH, else ToolchainError with the install command."""
    import shutil
    if shutil.which(tool) is None:
        raise ToolchainError(f"{tool} not found; install it with: {INSTALL[target]}")
    if shutil.which("make") is None:
        raise ToolchainError("make not found; install it with: apt-get install -y make")


def build(target: str, generated: Generated | None, out_dir: str | Path, modes: int = 3) -> Path:
    """Build ``target`` (host, m4, m7, xtensa, filter-check, qp-check or engine) with firmware/Makefile."""
    tools = {"host": "g++", "filter-check": "g++", "qp-check": "g++", "engine": "g++", "m4": "arm-none-eabi-g++",
             "m7": "arm-none-eabi-g++",
             "xtensa": "xtensa-lx106-elf-g++"}
    if target not in tools:
        raise ValueError(f"unknown target {target!r}; choose from {', '.join(tools)}")
    require_tool(target if target in INSTALL else "host", tools[target])
    out = Path(out_dir).resolve()
    command = ["make", "--no-print-directory", "-C", str(FIRMWARE_DIR), f"OUT={out}", f"MODES={modes}", target]
    if generated is not None:
        command.insert(-1, f"GEN={generated.directory.resolve()}")
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise ToolchainError(f"building {target} failed", command, result.stdout + result.stderr)
    return out / {"host": "host/fw_host", "filter-check": "host/filter_check", "qp-check": "host/qp_check",
                  "engine": "host/libcbf_engine.so",
                  "m4": "m4/fw.elf",
                  "m7": "m7/fw.elf", "xtensa": "xtensa/app.o"}[target]


def engine_toolchain() -> tuple[str, tuple[str, ...]]:
    """The compiler (resolved path) and flags ``make engine`` uses, read from firmware/Makefile
    (its ``engine-flags`` target), so that the engine's cache key holds exactly them."""
    import shlex
    import shutil
    require_tool("host", "g++")
    command = ["make", "-s", "--no-print-directory", "-C", str(FIRMWARE_DIR), "engine-flags"]
    result = subprocess.run(command, capture_output=True, text=True)
    words = shlex.split(result.stdout.strip()) if result.returncode == 0 else []
    compiler = shutil.which(words[0]) if words else None
    if compiler is None:
        raise ToolchainError("firmware/Makefile gave no engine compiler", command, result.stdout + result.stderr)
    return compiler, tuple(words[1:])
