"""How much memory a process may still allocate, so that big allocations are refused up front
with the numbers instead of ending in an out-of-memory kill (or a MemoryError half-way).

The bound is the smallest of: the kernel's MemAvailable, the room left under the cgroup's
memory limit (v2 or v1), the room left under ``ulimit -v`` (RLIMIT_AS), and the stated limit
``$CBFSIM_MAX_MEMORY`` (bytes; suffixes K, M, G accepted) when set.
"""
from __future__ import annotations

import os
import resource
from pathlib import Path

from compiler.errors import CbfsimError

ENV = "CBFSIM_MAX_MEMORY"


class MemoryLimitError(CbfsimError, MemoryError):
    """An allocation the machine (or the stated limit) cannot hold; the message has the numbers."""


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _meminfo(field: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _vm_size() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def parse_bytes(text: str) -> int:
    """'2000000', '512M', '8G' -> bytes; anything else is refused in one line."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    body = text.strip().upper().removesuffix("B")
    scale = units.get(body[-1:], 1)
    digits = body[:-1] if body[-1:] in units else body
    if not digits.isdigit():
        raise MemoryLimitError(f"${ENV}={text!r} is not a size in bytes (e.g. 8G, 512M, 1000000)")
    return int(digits) * scale


def available_bytes() -> tuple[int, str]:
    """(bytes this process may still allocate, what bounds it) -- see the module docstring."""
    bounds: list[tuple[int, str]] = []
    avail = _meminfo("MemAvailable")
    if avail is not None:
        bounds.append((avail, "available memory (MemAvailable)"))
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and limit < 1 << 60:
            bounds.append((max(limit - (usage or 0), 0), "room under the cgroup memory limit"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        bounds.append((max(soft - _vm_size(), 0), "room under ulimit -v (RLIMIT_AS)"))
    if os.environ.get(ENV):
        bounds.append((parse_bytes(os.environ[ENV]), f"the stated limit ${ENV}"))
    return min(bounds) if bounds else (1 << 62, "no known limit")


def size_text(count: int) -> str:
    """Bytes for a message: '1.05 MB', '210,000.01 GB'."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:,.2f} {unit}"
    return f"{count} bytes"


def check_allocation(needed: int, what: str) -> None:
    """Refuse to allocate ``needed`` bytes for ``what`` when they exceed ``available_bytes``."""
    room, source = available_bytes()
    if needed > room:
        raise MemoryLimitError(f"{what}: needs {size_text(needed)}, over the {size_text(room)} of {source}; "
                               f"run fewer runs or steps per call (or raise ${ENV})")
