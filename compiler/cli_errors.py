"""The one error policy of every console script: ``cbfc``, ``cbfsim`` (each subcommand),
``python -m training.cli`` and ``experiments/*.py``.

Exit codes: 0 success, 1 error, 2 usage (a bad flag or value, from argparse); a command may add
its own codes above 2 and documents them in its ``--help``.

* An error raised on purpose (``CbfsimError``) or by the environment (a missing or unwritable
  file, a file that is not JSON or not text) becomes ONE line ``PROG: error: MESSAGE`` on
  stderr and exit 1, never a traceback: the user cannot act on a traceback, only on the line.
* Any other exception is a bug: its traceback is shown, as is every traceback with ``--debug``.
* Usage errors are one line too (``OneLineParser``); numbers are checked where they enter
  (``positive_int``, ``positive_float``, ``finite_float``), so the message names the flag.
* A failing command leaves nothing behind: ``output_directory`` removes what it created.
* ``--verbose`` / ``--quiet`` set the level of the ``logging`` module (info lines go to stdout,
  warnings, Python's included, to stderr as one line each).

It lives in compiler/ because that is the lowest layer every CLI may import.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Iterator

from .errors import CbfsimError

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
# what a user can cause and fix without touching the code: reported in one line
EXPECTED_ERRORS = (CbfsimError, OSError, json.JSONDecodeError, UnicodeDecodeError)


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line usage errors (``PROG: error: MESSAGE (see PROG --help)``), exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def one_line(text: str) -> str:
    """All whitespace, newlines included, collapsed to single spaces."""
    return " ".join(str(text).split())


def describe(exc: BaseException) -> str:
    """The message of an expected error, naming the file for OS errors."""
    if isinstance(exc, OSError) and not isinstance(exc, CbfsimError) and exc.strerror:
        where = f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 else "")
        return f"{where}: {exc.strerror.lower()}" if exc.filename else exc.strerror.lower()
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON ({exc})"
    if isinstance(exc, UnicodeDecodeError):
        return f"not a text file ({exc.reason} at byte {exc.start})"
    return one_line(str(exc)) or type(exc).__name__


def run(prog: str, command: Callable[[], int], *, debug: bool = False) -> int:
    """``command()``'s exit code, or 1 with one line on stderr for an expected error."""
    try:
        return command()
    except EXPECTED_ERRORS as exc:
        if debug:
            raise
        print(f"{prog}: error: {describe(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


# ---------------------------------------------------------------- flags every command takes
def add_common_flags(parser: argparse.ArgumentParser) -> None:
    """--verbose, --quiet and --debug."""
    group = parser.add_argument_group("output")
    loud = group.add_mutually_exclusive_group()
    loud.add_argument("-v", "--verbose", action="store_true", help="also print debug messages")
    loud.add_argument("-q", "--quiet", action="store_true", help="print only warnings and errors")
    group.add_argument("--debug", action="store_true", help="show the Python traceback of an error")


def configure_logging(args: argparse.Namespace) -> None:
    """Info lines on stdout as bare messages, warnings and errors on stderr; the level from
    --verbose / --quiet (default: info)."""
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    out = logging.StreamHandler(sys.stdout)
    out.addFilter(lambda record: record.levelno < logging.WARNING)
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.WARNING)
    err.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    logging.basicConfig(level=level, format="%(message)s", handlers=[out, err], force=True)
    warnings.showwarning = _warning_line


def _warning_line(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
    """A Python warning as one logged line (not file:line plus the source line)."""
    logging.getLogger("py.warnings").warning(f"{one_line(str(message))} ({category.__name__})")


def run_parsed(prog: str, args: argparse.Namespace, command: Callable[[], int]) -> int:
    """``run`` after configuring logging from the common flags (see ``add_common_flags``)."""
    configure_logging(args)
    return run(prog, command, debug=args.debug)


# ---------------------------------------------------------------- argparse types
def finite_float(text: str) -> float:
    """A float that is not NaN or infinite."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def nonnegative_float(text: str) -> float:
    """A finite float >= 0 (0 may mean "none", e.g. a continuous-time control period)."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite float > 0 (durations, time steps)."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def _integer_at_least(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be >= {least}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (counts, substeps)."""
    return _integer_at_least(text, 1)


def nonnegative_int(text: str) -> int:
    """An integer >= 0 (seeds: numpy refuses negative ones)."""
    return _integer_at_least(text, 0)


def assignment(text: str) -> tuple[str, float]:
    """NAME=VALUE with a finite number (``--param mu=1.5``)."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name.strip(), finite_float(value)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{name.strip()}: {exc}") from None


# ---------------------------------------------------------------- nothing half-written
@contextlib.contextmanager
def output_directory(path: Path) -> Iterator[Path]:
    """Create ``path`` (and missing parents) now, and on any exception remove what this
    command created: the directories it made, or the new entries of one that existed."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(20, "not a directory", str(path))
    top = path
    while not top.parent.exists() and top.parent != top:
        top = top.parent
    created = not path.exists()
    before = set() if created else set(path.iterdir())
    path.mkdir(parents=True, exist_ok=True)
    try:
        _check_writable(path)
        yield path
    except BaseException:
        if created:
            shutil.rmtree(top, ignore_errors=True)
        else:
            for entry in set(path.iterdir()) - before:
                shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        raise


def check_can_create(path: Path) -> None:
    """Fail now, naming the directory, if ``path`` could not be created as a directory: for a
    command that writes its output only after minutes of work (training)."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise NotADirectoryError(20, "not a directory", str(path))
        _check_writable(path)
        return
    ancestor = path.parent
    while not ancestor.exists() and ancestor.parent != ancestor:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise NotADirectoryError(20, f"cannot create {path} under a file", str(ancestor))
    _check_writable(ancestor)


def _check_writable(path: Path) -> None:
    """Fail now, naming the directory, rather than after the work when the first file is written
    (a probe file, since os.access says yes to root even on an immutable directory)."""
    try:
        handle, probe = tempfile.mkstemp(dir=path, prefix=".write-probe-")
    except OSError as exc:
        raise PermissionError(exc.errno, f"output directory is not writable ({exc.strerror.lower()})",
                              str(path)) from None
    os.close(handle)
    os.unlink(probe)
