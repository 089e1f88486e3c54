"""What a firmware ELF costs: sections (flash, RAM), heap symbols (must be none), a data
symbol's size, and the worst-case stack along GCC's call graph."""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from compiler.errors import ToolchainError

from .errors import DeviceError

HEAP_SYMBOLS = ("malloc", "free", "calloc", "realloc", "_malloc_r", "_free_r", "_sbrk", "_Znwj", "_Znaj", "_ZdlPv")


def _lines(command: list[str]) -> list[str]:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise ToolchainError("inspecting the ELF failed", command, result.stderr)
    return result.stdout.splitlines()


def footprint(elf: str | Path, size_tool: str = "arm-none-eabi-size") -> dict[str, Any]:
    """``size -A`` per allocated section, and flash (code + constants + .data image) / RAM
    (.data + .bss + reserved stack) totals in bytes."""
    sections: dict[str, dict[str, int]] = {}
    for line in _lines([size_tool, "-A", "-d", str(elf)]):
        parts = line.split()
        if len(parts) == 3 and parts[0].startswith(".") and parts[2].isdigit():
            size, addr = int(parts[1]), int(parts[2])
            if addr != 0 or parts[0] == ".isr_vector":
                sections[parts[0]] = {"size": size, "addr": addr}
    ram = {k: v["size"] for k, v in sections.items() if v["addr"] >= 0x20000000}
    flash = {k: v["size"] for k, v in sections.items() if v["addr"] < 0x20000000}
    return {"sections": {k: v["size"] for k, v in sections.items()},
            "flash_bytes": sum(flash.values()) + ram.get(".data", 0),
            "ram_bytes": sum(ram.values()),
            "ram_without_stack_bytes": sum(v for k, v in ram.items() if k != ".stack")}


def heap_symbols(elf: str | Path, nm_tool: str = "arm-none-eabi-nm") -> list[str]:
    """Which of HEAP_SYMBOLS the ELF defines or references (must be empty)."""
    names = {line.split()[-1] for line in _lines([nm_tool, str(elf)]) if line.strip()}
    return sorted(names & set(HEAP_SYMBOLS))


def undefined_symbols(obj: str | Path, nm_tool: str = "xtensa-lx106-elf-nm") -> set[str]:
    """The symbols an object file needs from elsewhere (``nm -u``): for a compile-only port,
    what it would link against (no libm, no heap allowed)."""
    return {line.split()[-1] for line in _lines([nm_tool, "-u", str(obj)]) if line.strip()}


def symbol_size(elf: str | Path, demangled_name: str, objdump_tool: str = "arm-none-eabi-objdump") -> tuple[int, str]:
    """(size in bytes, section) of a data symbol, e.g. ``barrier::g_workspace`` -> (768, '.bss')."""
    for line in _lines([objdump_tool, "-t", "-C", str(elf)]):
        left, tab, right = line.partition("\t")
        parts = right.split(maxsplit=1)
        if tab and len(parts) == 2 and parts[1] == demangled_name:
            return int(parts[0], 16), left.split()[-1]
    raise DeviceError(f"symbol {demangled_name} not in {elf}")


def symbol_sizes(elf: str | Path, nm_tool: str = "arm-none-eabi-nm") -> dict[str, tuple[int, str]]:
    """Every sized symbol: demangled name -> (bytes, nm type letter: T/t code, R/r constants,
    D/d initialised data, B/b zeroed data)."""
    out: dict[str, tuple[int, str]] = {}
    for line in _lines([nm_tool, "-S", "-C", str(elf)]):
        parts = line.split(maxsplit=3)
        if len(parts) == 4 and len(parts[2]) == 1:
            out[parts[3]] = (int(parts[1], 16), parts[2])
    return out


def bytes_by_object(map_file: str | Path, prefixes: Sequence[str] = (".text", ".rodata")) -> dict[str, int]:
    """Bytes the link kept per input object (basename), over the input sections whose name
    starts with one of ``prefixes``, from a GNU ld map (-Wl,-Map; discarded sections excluded)."""
    text = Path(map_file).read_text()
    kept = text.split("Linker script and memory map", 1)[-1]
    out: dict[str, int] = {}
    pattern = r"^ (\.[\w.$]+)\s*\n?\s+0x[0-9a-f]+\s+0x([0-9a-f]+)\s+(\S+\.o)\s*$"
    for name, size, obj in re.findall(pattern, kept, re.M):
        if name.startswith(tuple(prefixes)):
            key = Path(obj).name
            out[key] = out.get(key, 0) + int(size, 16)
    return out


def _function_name(title: str, label: str) -> str:
    """GCC labels a partial clone (``f.part.0``) "0(args)": name it from the title's symbol."""
    if not re.match(r"\d+\(", label):
        return label
    symbol = title.rsplit(":", 1)[-1]
    base, _, clone = symbol.partition(".")
    filt = shutil.which("c++filt")
    if filt:
        base = subprocess.run([filt, base], capture_output=True, text=True).stdout.strip() or base
    return f"{base} [{clone}]" if clone else base


def _parse_ci(text: str) -> tuple[dict[str, tuple[str, int]], dict[str, set[str]]]:
    """GCC -fcallgraph-info=su (VCG): node title -> (name, static bytes) and call edges."""
    nodes: dict[str, tuple[str, int]] = {}
    edges: dict[str, set[str]] = {}
    for title, label in re.findall(r'node:\s*\{\s*title:\s*"([^"]+)"\s*label:\s*"([^"]*)"', text):
        stack = re.search(r"(\d+) bytes \((static|dynamic|dynamic,bounded)\)", label)
        if stack:  # nodes without a number are library functions compiled elsewhere
            nodes[title] = (_function_name(title, label.split("\\n")[0]), int(stack.group(1)))
    for src, dst in re.findall(r'edge:\s*\{\s*sourcename:\s*"([^"]+)"\s*targetname:\s*"([^"]+)"', text):
        edges.setdefault(src, set()).add(dst)
    return nodes, edges


@dataclass
class StackReport:
    worst_bytes: int
    path: list[str]
    per_function: dict[str, int]
    unknown: list[str]   # callees without stack data (library code), counted as 0


INDIRECT = "__indirect_call"   # GCC's placeholder node for a call through a function pointer


def stack_report(build_dir: str | Path, entry: str = "reset_c", indirect_targets: Sequence[str] = ()) -> StackReport:
    """Worst-case stack from ``-fstack-usage`` numbers along the ``-fcallgraph-info`` call
    graph, starting at ``entry`` (the call graph of this firmware is acyclic: no recursion).
    Exception handlers run on the same stack but do not nest with the app, so they are
    reported separately by the caller if needed. ``indirect_targets``: the functions a call
    through a pointer may reach (OSQP calls its linear-system solver so); every indirect call
    is then charged the deepest of them (conservative), else it counts as unknown."""
    nodes: dict[str, tuple[str, int]] = {}
    edges: dict[str, set[str]] = {}
    for ci in Path(build_dir).glob("*.ci"):
        n, e = _parse_ci(ci.read_text())
        nodes.update(n)
        for k, v in e.items():
            edges.setdefault(k, set()).update(v)
    if indirect_targets:
        edges[INDIRECT] = set(indirect_targets)
        nodes.setdefault(INDIRECT, ("(indirect call)", 0))
    titles = {name: title for title, (name, _) in nodes.items()}
    start = titles.get(entry, entry)
    memo: dict[str, tuple[int, list[str]]] = {}
    unknown: set[str] = set()

    def worst(node: str, depth: int = 0) -> tuple[int, list[str]]:
        if node in memo:
            return memo[node]
        if depth > 200:
            raise DeviceError("call graph deeper than 200: recursion?")
        own = nodes.get(node, (node, 0))
        if node not in nodes:
            unknown.add(node)
        best = (0, [])
        for callee in edges.get(node, ()):
            cand = worst(callee, depth + 1)
            best = max(best, cand, key=lambda c: c[0])
        memo[node] = (own[1] + best[0], [own[0]] + best[1])
        return memo[node]

    total, path = worst(start)
    per_fn = {name: size for name, size in nodes.values() if size}
    return StackReport(total, path, per_fn, sorted(unknown))


def defined_functions(ci_file: str | Path) -> list[str]:
    """The functions a ``-fcallgraph-info`` file has stack data for (those compiled in it)."""
    return list(_parse_ci(Path(ci_file).read_text())[0])
