"""The content-addressed build cache: one folder per key, published whole, verified before use.

Why each rule:
* Builds run in a private folder and are published by one atomic rename, so concurrent
  compiles of one model (pytest workers, a Dask cluster) never read each other's half-written
  sources or libraries (before: 7 of 32 trials gave g++ errors or an empty library).
* A per-key ``fcntl.flock`` serializes the builders of one key, so the others wait for the
  first and reuse its library instead of compiling again; a lost lock (``cache clear`` while
  a build runs) costs a duplicate build, never a wrong entry, since publishing is a rename.
* ``manifest.json`` records each file's size and sha256 when the entry is published, and
  every lookup checks them before the library may be dlopen'ed: a truncated library
  (SIGBUS), garbage in its code (SIGSEGV) or an empty file is rebuilt, not loaded.
* Published files are never modified in place, so a library already loaded stays intact.
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


def cache_dir() -> Path:
    """$CBFSIM_CACHE, else $XDG_CACHE_HOME/cbfsim, else ~/.cache/cbfsim."""
    root = os.environ.get("CBFSIM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cbfsim")
    return Path(root)


def _digest(path: Path) -> dict[str, int | str]:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return {"size": path.stat().st_size, "sha256": sha.hexdigest()}


def _write_manifest(folder: Path) -> None:
    files = {p.name: _digest(p) for p in sorted(folder.iterdir()) if p.is_file()}
    (folder / MANIFEST).write_text(json.dumps({"files": files}, indent=1, sort_keys=True) + "\n")


def verified(entry: Path) -> bool:
    """Whether every file the entry's manifest lists is there with its recorded size and sha256."""
    try:
        files = json.loads((entry / MANIFEST).read_text())["files"]
        for name, recorded in files.items():
            path = entry / name
            if path.stat().st_size != recorded["size"] or _digest(path) != recorded:
                return False
        return bool(files)
    except (OSError, ValueError, KeyError, TypeError):
        return False


@contextmanager
def _key_lock(key: str) -> Iterator[None]:
    """An exclusive ``flock`` on the key's lock file (flock, not lockf: it also excludes
    other threads of this process, which open the file separately)."""
    locks = cache_dir() / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{key}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def get_or_build(key: str, library: str, build: Callable[[Path], None]) -> Path:
    """The verified entry folder of ``key``; ``build(folder)`` fills a private folder with
    ``library`` (and its sources) when no verified entry exists, or the entry is damaged."""
    entry = cache_dir() / key
    if verified(entry):
        return entry
    with _key_lock(key):
        if verified(entry):          # another process built it while we waited
            return entry
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


@dataclass(frozen=True)
class CacheInfo:
    path: Path
    entries: int
    damaged: int          # entries whose files do not match their manifest (rebuilt on next use)
    bytes: int

    def lines(self) -> list[str]:
        return [f"cache: {self.path}",
                f"entries: {self.entries} ({self.damaged} damaged, rebuilt when next used)",
                f"size: {self.bytes / 1e6:.1f} MB"]


def _entries() -> list[Path]:
    root = cache_dir()
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) if root.is_dir() else []


def info() -> CacheInfo:
    """How many entries the cache holds, how many are damaged, and its size on disk."""
    entries = _entries()
    size = sum(f.stat().st_size for f in cache_dir().rglob("*") if f.is_file()) if entries else 0
    return CacheInfo(cache_dir(), len(entries), sum(not verified(e) for e in entries), size)


def clear() -> int:
    """Remove every entry, and the leftovers of builds killed more than an hour ago (younger
    ones may still be running); returns how many entries went. Libraries already loaded by
    running processes stay valid: their files are unlinked, never changed."""
    root = cache_dir()
    entries = _entries()
    for entry in entries:
        remove_directory(entry)
    if root.is_dir():
        stale = time.time() - 3600
        for leftover in root.iterdir():
            if leftover.name.startswith(_PRIVATE) and leftover.stat().st_mtime < stale:
                shutil.rmtree(leftover, ignore_errors=True)
    return len(entries)
