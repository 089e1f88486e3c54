"""The content-addressed build cache: one folder per key, published whole, verified before use.

Every compiled library goes through ``get_or_build``: compiled barriers (``compiler.build``,
at the top of the cache), compiled closed loops (``cbfsim.engine``, under ``engines/``) and
the binding's single-state extension (``compiler.fastcall``, under ``extensions/``).
Why each rule:
* Builds run in a private folder and are published by one atomic rename, so concurrent
  compiles of one model (pytest workers, a Dask cluster) never read each other's half-written
  sources or libraries (before: 7 of 32 trials gave g++ errors or an empty library).
* A per-key ``fcntl.flock`` serializes the builders of one key, so the others wait for the
  first and reuse its library instead of compiling again; a lost lock (``cache clear`` while
  a build runs) costs a duplicate build, never a wrong entry, since publishing is a rename.
* ``manifest.json`` records each file's size and sha256 (every file of the entry, in
  subfolders too) when the entry is published, and every lookup checks them before the
  library may be dlopen'ed: a truncated library (SIGBUS), garbage in its code (SIGSEGV,
  SIGILL), a zeroed or empty file is rebuilt, and the rebuild replaces the damaged entry.
* Published files are never modified in place, so a library already loaded stays intact.
* Folders and files get the modes the umask gives (``publish.ordinary_mode``), not 0700.
* The key (made by the caller, ``compiler.build.toolchain_identity``) holds everything that
  changes the machine code: sources, compiler and its version, flags, and what -march=native
  means on this CPU, so one cache shared by machines with different CPUs keeps one entry per
  CPU kind and never hands a worker code its CPU cannot run.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from .errors import ToolchainError
from .publish import private_directory, publish_directory, remove_directory

MANIFEST = "manifest.json"
_PRIVATE = (".build-", ".trash-")      # folders of builds in progress and of removals
# Every kind of entry and the folder (under the cache) that holds its entries; "" is the
# cache itself, whose other non-hidden folders are barrier entries.
KINDS: dict[str, str] = {"barrier": "", "engine": "engines", "extension": "extensions"}


def cache_dir() -> Path:
    """$CBFSIM_CACHE, else $XDG_CACHE_HOME/cbfsim, else ~/.cache/cbfsim."""
    root = os.environ.get("CBFSIM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cbfsim")
    return Path(root)


def kind_dir(kind: str) -> Path:
    """The folder holding the entries of ``kind`` (one of ``KINDS``)."""
    if kind not in KINDS:
        raise ValueError(f"unknown cache entry kind {kind!r}; choose from {', '.join(KINDS)}")
    return cache_dir() / KINDS[kind] if KINDS[kind] else cache_dir()


def _digest(path: Path) -> dict[str, int | str]:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return {"size": path.stat().st_size, "sha256": sha.hexdigest()}


def _files(folder: Path) -> list[Path]:
    """Every file under ``folder`` but the manifest, by relative path."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.relative_to(folder).as_posix() != MANIFEST)


def _write_manifest(folder: Path) -> None:
    files = {p.relative_to(folder).as_posix(): _digest(p) for p in _files(folder)}
    (folder / MANIFEST).write_text(json.dumps({"files": files}, indent=1, sort_keys=True) + "\n")


def verified(entry: Path) -> bool:
    """Whether every file the entry's manifest lists is there with its recorded size and sha256."""
    try:
        files = json.loads((entry / MANIFEST).read_text())["files"]
        for name, recorded in files.items():
            path = entry / name
            if ".." in Path(name).parts or path.stat().st_size != recorded["size"] or _digest(path) != recorded:
                return False
        return bool(files)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


@contextmanager
def _key_lock(name: str) -> Iterator[None]:
    """An exclusive ``flock`` on the key's lock file (flock, not lockf: it also excludes
    other threads of this process, which open the file separately)."""
    locks = cache_dir() / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def get_or_build(key: str, library: str, build: Callable[[Path], None], kind: str = "barrier") -> Path:
    """The verified entry folder of ``key``; ``build(folder)`` fills a private folder with
    ``library`` (a path relative to the entry, and whatever else it keeps) when no verified
    entry exists, or the entry is damaged (then the new build replaces it)."""
    entry = kind_dir(kind) / key
    if verified(entry):
        return entry
    with _key_lock(f"{kind}-{key}"):
        if verified(entry):          # another process built it while we waited
            return entry
        entry.parent.mkdir(parents=True, exist_ok=True)
        private = private_directory(cache_dir(), _PRIVATE[0])
        try:
            build(private)
            if not (private / library).is_file() or (private / library).stat().st_size == 0:
                raise ToolchainError(f"the compiler wrote no library {library}")
            _write_manifest(private)
            if entry.exists():       # damaged: moved aside first, so no reader sees it half-deleted
                remove_directory(entry)
            if not publish_directory(private, entry) and not verified(entry):
                raise ToolchainError(f"cache entry {entry} was replaced by a damaged one while building")
        finally:
            shutil.rmtree(private, ignore_errors=True)
    return entry


def entries(kind: str) -> list[Path]:
    """The entry folders of ``kind`` (hidden folders are locks, builds in progress, removals)."""
    folder = kind_dir(kind)
    if not folder.is_dir():
        return []
    others = {name for name in KINDS.values() if name} if folder == cache_dir() else set()
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in others)


@dataclass(frozen=True)
class CacheInfo:
    path: Path
    kinds: dict[str, tuple[int, int]]     # kind -> (entries, damaged: files unlike their manifest)
    bytes: int

    @property
    def entries(self) -> int:
        return sum(count for count, _ in self.kinds.values())

    @property
    def damaged(self) -> int:
        return sum(damaged for _, damaged in self.kinds.values())

    def lines(self) -> list[str]:
        per_kind = ", ".join(f"{kind}s: {count} ({damaged} damaged)" for kind, (count, damaged) in self.kinds.items())
        return [f"cache: {self.path}",
                f"entries: {self.entries} ({self.damaged} damaged, rebuilt when next used)",
                f"by kind: {per_kind}",
                f"size: {self.bytes / 1e6:.1f} MB"]


def info() -> CacheInfo:
    """How many entries of each kind the cache holds, how many are damaged, and its size on disk."""
    kinds = {}
    for kind in KINDS:
        found = entries(kind)
        kinds[kind] = (len(found), sum(not verified(e) for e in found))
    root = cache_dir()
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) if root.is_dir() else 0
    return CacheInfo(root, kinds, size)


def clear() -> int:
    """Remove every entry of every kind, and the leftovers of builds killed more than an hour
    ago (younger ones may still be running); returns how many entries went. Libraries already
    loaded by running processes stay valid: their files are unlinked, never changed."""
    removed = 0
    for kind in KINDS:
        for entry in entries(kind):
            remove_directory(entry)
            removed += 1
    stale = time.time() - 3600
    for folder in {kind_dir(kind) for kind in KINDS}:
        if folder.is_dir():
            for leftover in folder.iterdir():
                if leftover.name.startswith(_PRIVATE) and leftover.stat().st_mtime < stale:
                    shutil.rmtree(leftover, ignore_errors=True)
    return removed
