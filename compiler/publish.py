"""Files and directories that appear whole or not at all, with the modes the umask gives.

Everything is first written under a private temporary name in the destination's own folder
(the same file system), then published by one ``os.replace``/``os.rename``: a reader sees
the old state or the new one, never a half-written file. ``tempfile`` creates its files
0600 and its folders 0700; ``publish`` gives them the ordinary modes (0666 / 0777 minus the
umask), as ``open`` and ``mkdir`` would have.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def umask() -> int:
    """The process umask, read without changing it (os.umask sets it, which races threads)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def ordinary_mode(path: Path) -> None:
    """Give ``path`` the mode ``open``/``mkdir`` would have: executables and folders 0777, other
    files 0666, minus the umask."""
    executable = path.is_dir() or os.access(path, os.X_OK)
    os.chmod(path, (0o777 if executable else 0o666) & ~umask())


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a private temporary file, then a rename)."""
    atomic_write_all({path: text})


def atomic_write_all(files: dict[Path, str]) -> None:
    """Write every file whole, and all of them or none: each goes to a short-named temporary
    beside it, then all are renamed into place; if anything fails, the temporaries and whatever
    was already renamed are removed (a long name can fail on the second file's rename)."""
    temps: list[str] = []
    done: list[Path] = []
    try:
        for path, text in files.items():
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cbfsim-", suffix=".tmp")
            temps.append(tmp)
            with os.fdopen(fd, "w", newline="\n") as handle:
                handle.write(text)
            ordinary_mode(Path(tmp))
        for tmp, path in zip(temps, files):
            os.replace(tmp, path)
            done.append(path)
    except BaseException:
        for leftover in [*map(Path, temps), *done]:
            leftover.unlink(missing_ok=True)
        raise


def private_directory(parent: Path, prefix: str) -> Path:
    """A new empty folder inside ``parent`` that no other process uses (to build in)."""
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=parent, prefix=prefix))


def publish_directory(private: Path, destination: Path) -> bool:
    """Move the finished ``private`` folder to ``destination`` in one rename, with ordinary modes
    (on everything inside it, subfolders too). Returns False (and removes ``private``) if
    ``destination`` already exists."""
    for item in sorted(private.rglob("*"), reverse=True):
        if not item.is_symlink():
            ordinary_mode(item)
    ordinary_mode(private)
    try:
        os.rename(private, destination)      # atomic; fails if destination exists and is not empty
        return True
    except OSError:
        if not destination.exists():
            raise
        shutil.rmtree(private, ignore_errors=True)
        return False


def remove_directory(path: Path) -> None:
    """Remove a folder so that no reader ever sees it half-deleted: rename it aside first."""
    aside = Path(tempfile.mkdtemp(dir=path.parent, prefix=".trash-"))
    try:
        os.rename(path, aside / "entry")
    except FileNotFoundError:
        pass
    shutil.rmtree(aside, ignore_errors=True)
