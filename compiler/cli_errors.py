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
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from .errors import CbfsimError

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
# what a user can cause and fix without touching the code: reported in one line
EXPECTED_ERRORS = (CbfsimError, OSError, json.JSONDecodeError, UnicodeDecodeError)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with every flag's default: ``(default: X)`` after a value flag's text unless the
    text already says what the default is (a ``None`` default must: "default: the card's"),
    ``(default: off)`` after a switch, ``(required)`` after a required flag."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or action.default is argparse.SUPPRESS or "default" in text.lower():
            return text
        if action.required:
            return text + " (required)"
        if action.nargs == 0:                   # store_true / store_false / --x/--no-x switches
            return text + (" (default: on)" if action.default is True else " (default: off)")
        if action.default is None or action.default == []:
            return text                         # nothing to show: the text must say it (tests check)
        return text + " (default: %(default)s)"


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line usage errors (``PROG: error: MESSAGE (see PROG --help)``), exit 2,
    defaults shown in ``--help`` (``HelpFormatter``), and number-list flags (``NumberList``)
    that take ``-2,-2``, ``-2 -2`` and ``=-2,-2`` alike."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        args = sys.argv[1:] if args is None else list(args)
        flags = {s for a in self._actions if isinstance(a, NumberList) for s in a.option_strings}
        return super().parse_known_args(join_number_lists(args, flags), namespace)


# ---------------------------------------------------------------- number lists: --domain-lo -2,-2
# argparse reads a word that starts with '-' as a flag unless it is ONE plain negative number, so
# ``--domain-lo -2,-2`` (or ``-1e-3``) stops with "expected one argument". A list flag's values
# are therefore joined onto the flag (``--domain-lo=-2,-2``) before argparse sees them.
_NUMBER = r"\s*[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|nan|inf|infinity)\s*"
_NUMBERS = re.compile(rf"{_NUMBER}(?:,{_NUMBER})*,?", re.IGNORECASE)


def join_number_lists(argv: Sequence[str], flags: set[str]) -> list[str]:
    """``argv`` with each list flag's number words joined onto it: ``--x0 -1 0.5`` and
    ``--x0 -1,0.5`` both become ``--x0=-1,0.5``; words that are not numbers are left alone
    (so argparse names them in its error). Stops at ``--``."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return out + list(argv[i:])
        flag, eq, first = word.partition("=")
        if flag in flags:
            values = [first] if eq else []
            i += 1
            while i < len(argv) and _NUMBERS.fullmatch(argv[i]):
                values.append(argv[i].strip().rstrip(","))
                i += 1
            out.append(f"{flag}={','.join(values)}" if values or eq else flag)
            continue
        out.append(word)
        i += 1
    return out


class NumberList(argparse.Action):
    """A flag taking one list of numbers, written ``-2,-2``, ``-2 -2`` or ``=-2,-2`` (the
    ``type`` parses the joined text, e.g. ``float_list``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)


class NumberListAppend(NumberList):
    """A repeatable ``NumberList``: each use adds one list (``--x0 0 1 --x0 0.5 1``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []), values])


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


def without_prefix(message: str, prog: str) -> str:
    """``message`` without a leading ``simulate: `` when the program is ``cbfsim simulate``: the
    line names the command once (``cbfsim simulate: error: x0 ...``, not ``...: error: simulate: x0``)."""
    command = prog.split()[-1] if prog.split() else prog
    return message[len(command) + 2:] if message.startswith(f"{command}: ") else message


def run(prog: str, command: Callable[[], int], *, debug: bool = False) -> int:
    """``command()``'s exit code, or 1 with one line on stderr for an expected error."""
    try:
        return command()
    except EXPECTED_ERRORS as exc:
        if debug:
            raise
        print(f"{prog}: error: {without_prefix(describe(exc), prog)}", file=sys.stderr)
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


def float_list(text: str) -> list[float]:
    """Finite numbers separated by commas (``-2,-2,-3.14``); see ``NumberList``."""
    values = [v for v in text.split(",") if v.strip()]
    if not values:
        raise argparse.ArgumentTypeError("expected numbers separated by commas, e.g. -2,-2")
    return [finite_float(v.strip()) for v in values]


def int_list(text: str) -> list[int]:
    """Integers separated by commas (``64,64``); see ``NumberList``."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected integers separated by commas, e.g. 64,64")
    return values


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
