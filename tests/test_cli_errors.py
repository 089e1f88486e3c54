"""Bad input to every console script (cbfc, cbfsim and each subcommand, the experiment
scripts) gives exactly one line on stderr naming the problem, the documented exit code
(1 error, 2 usage), no traceback, and leaves no file behind; run through the real scripts.

Unreadable ONNX files are tests/test_model_format.py's cases and are not repeated here."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from compiler.cli_errors import output_directory, run
from compiler.errors import CbfsimError

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "experiments" / "models"
CBFSIM = [sys.executable, "-m", "cbfsim.cli"]
CBFC = [sys.executable, "-m", "compiler.cli"]
VDP_SCRIPT = [sys.executable, str(ROOT / "experiments" / "vdp.py")]
SIM = [*CBFSIM, "simulate"]
X0 = ["--x0", "0.1", "0.1"]
VERIFY = [*CBFSIM, "verify", "model.onnx"]
TRAIN = [*CBFSIM, "train", "--no-verify", "--no-progress"]
CERTIFY = [*CBFSIM, "certify", "model.onnx"]
LOCKED = "@locked"        # replaced by the absolute path of a directory nobody may write into

# name -> (argv run in a fresh copy of the work folder, exit code, words the one line must contain)
CASES: dict[str, tuple[list[str], int, tuple[str, ...]]] = {
    # model cards
    "simulate: missing card": ([*SIM, "nope.json", *X0], 1, ("nope.json", "no such file")),
    "simulate: empty card": ([*SIM, "empty.json", *X0], 1, ("empty.json", "not valid JSON")),
    "simulate: non-JSON card": ([*SIM, "garbage.json", *X0], 1, ("garbage.json", "not valid JSON")),
    "simulate: JSON that is not a card": ([*SIM, "list.json", *X0], 1, ("list.json", "JSON object")),
    "simulate: card of another system": ([*SIM, "wrong_system.json", *X0], 1, ("'bicycle'", "'mu'")),
    "simulate: card whose system is unknown": ([*SIM, "unknown_system.json", *X0], 1, ("'no_such_plant'",)),
    "simulate: 4-state model, 2-state card": ([*SIM, "four_state.json", *X0], 1, ("(4, 1)", "(2, 1)")),
    "verify: missing card": ([*VERIFY, "nope.json"], 1, ("nope.json", "no such file")),
    "verify: empty card": ([*VERIFY, "empty.json"], 1, ("empty.json", "not valid JSON")),
    "verify: non-JSON card": ([*VERIFY, "garbage.json"], 1, ("garbage.json", "not valid JSON")),
    "verify: card whose system is unknown": ([*VERIFY, "unknown_system.json"], 1, ("'no_such_plant'",)),
    "verify: 4-state model, 2-state card": ([*CBFSIM, "verify", "big.onnx", "model.json"], 1, ("n=4", "n=2")),
    "certify: missing card": ([*CERTIFY, "nope.json"], 1, ("nope.json", "no such file")),
    "certify: empty card": ([*CERTIFY, "empty.json"], 1, ("empty.json", "not valid JSON")),
    "certify: 4-state model, 2-state card": ([*CBFSIM, "certify", "big.onnx", "model.json"], 1,
                                             ("4 inputs", "2 states")),
    # controllers, systems, parameters
    "simulate: unknown controller": ([*SIM, "model.json", "--controller", "nope", *X0], 1, ("controller 'nope'",)),
    "train: unknown system": ([*TRAIN, "--system", "no_such_plant", "--out", "run"], 1, ("'no_such_plant'",)),
    "train: unknown preset": ([*TRAIN, "--preset", "nope", "--out", "run"], 1, ("preset 'nope'",)),
    "train: unknown parameter": ([*TRAIN, "--system", "van_der_pol", "--param", "zz=1", "--out", "run"], 1,
                                 ("'zz'",)),
    "train: --param mu=abc": ([*TRAIN, "--system", "van_der_pol", "--param", "mu=abc", "--out", "run"], 2,
                              ("--param", "mu", "'abc'")),
    "train: --param mu=nan": ([*TRAIN, "--system", "van_der_pol", "--param", "mu=nan", "--out", "run"], 2,
                              ("--param", "mu", "finite")),
    "train: missing config": ([*TRAIN, "--config", "nope.json", "--out", "run"], 1, ("nope.json",)),
    "train: non-JSON config": ([*TRAIN, "--config", "garbage.json", "--out", "run"], 1, ("garbage.json", "JSON")),
    # numbers
    "simulate: --t-final 0": ([*SIM, "model.json", "--t-final", "0", *X0], 2, ("--t-final", "> 0")),
    "simulate: --t-final nan": ([*SIM, "model.json", "--t-final", "nan", *X0], 2, ("--t-final", "finite")),
    "simulate: --dt -0.01": ([*SIM, "model.json", "--dt", "-0.01", *X0], 2, ("--dt", "> 0")),
    "simulate: --dt inf": ([*SIM, "model.json", "--dt", "inf", *X0], 2, ("--dt", "finite")),
    "simulate: --substeps 0": ([*SIM, "model.json", "--substeps", "0", *X0], 2, ("--substeps", ">= 1")),
    "simulate: --x0 nan": ([*SIM, "model.json", "--x0", "nan", "0"], 2, ("--x0", "finite")),
    "simulate: --x0 of the wrong length": ([*SIM, "model.json", "--x0", "0.1"], 2, ("--x0", "2 numbers")),
    "verify: --samples 0": ([*VERIFY, "model.json", "--samples", "0"], 2, ("--samples", ">= 1")),
    "verify: --samples -5": ([*VERIFY, "model.json", "--samples", "-5"], 2, ("--samples", "'-5'")),
    "verify: --seed -1": ([*VERIFY, "model.json", "--seed", "-1"], 2, ("--seed", ">= 0")),
    "train: --max-time 0": ([*TRAIN, "--system", "van_der_pol", "--max-time", "0", "--out", "run"], 2,
                            ("--max-time",)),
    "certify: --dt nan": ([*CERTIFY, "model.json", "--dt", "nan"], 2, ("--dt", "finite")),
    "certify: --dt -1": ([*CERTIFY, "model.json", "--dt", "-1"], 2, ("--dt", ">= 0")),
    "certify: --time-limit -1": ([*CERTIFY, "model.json", "--time-limit", "-1"], 2, ("--time-limit", ">= 0")),
    "cbfc: --inputs -1": ([*CBFC, "model.onnx", "--inputs", "-1", "-o", "out"], 2, ("--inputs", ">= 0")),
    "vdp.py: --t-final 0": ([*VDP_SCRIPT, "--t-final", "0", "--out", "out"], 2, ("--t-final", "> 0")),
    "vdp.py: --runs -3": ([*VDP_SCRIPT, "--runs", "-3", "--out", "out"], 2, ("--runs", ">= 1")),
    # output directories
    "simulate: output under a file": ([*SIM, "model.json", *X0, "--out", "a_file/out"], 1, ("a_file/out",)),
    "simulate: unwritable output": ([*SIM, "model.json", *X0, "--out", f"{LOCKED}/out"], 1, (f"{LOCKED}/out",)),
    "simulate: unwritable existing output": ([*SIM, "model.json", *X0, "--out", LOCKED], 1,
                                             (LOCKED, "not writable")),
    "cbfc: unwritable output": ([*CBFC, "model.onnx", "--inputs", "1", "-o", f"{LOCKED}/out"], 1, (f"{LOCKED}/out",)),
    "compile: output under a file": ([*CBFSIM, "compile", "model.onnx", "--inputs", "1", "-o", "a_file/out"], 1,
                                     ("a_file/out",)),
    "train: unwritable output": ([*TRAIN, "--system", "van_der_pol", "--quick", "--out", f"{LOCKED}/run"], 1,
                                 (LOCKED,)),
    "certify: output under a file": ([*CERTIFY, "model.json", "-o", "a_file/cert.json"], 1, ("a_file",)),
    "certify: unwritable output": ([*CERTIFY, "model.json", "-o", f"{LOCKED}/cert.json"], 1, (LOCKED,)),
    "vdp.py: output under a file": ([*VDP_SCRIPT, "--fast", "--out", "a_file/out"], 1, ("a_file/out",)),
    "vdp.py: unwritable output": ([*VDP_SCRIPT, "--fast", "--out", f"{LOCKED}/out"], 1, (f"{LOCKED}/out",)),
    # commands
    "cbfsim foo": ([*CBFSIM, "foo"], 2, ("unknown command 'foo'",)),
    "cbfsim without a command": ([*CBFSIM], 2, ("command is required",)),
    "cbfsim cache foo": ([*CBFSIM, "cache", "foo"], 2, ("'foo'",)),
    "compile: missing --card": ([*CBFSIM, "compile", "model.onnx", "--card", "nope.json", "-o", "out"], 1,
                                ("nope.json", "no such file")),
    "compile: --inputs beyond the card's": ([*CBFSIM, "compile", "model.onnx", "--card", "model.json", "--inputs", "3",
                                             "-o", "out"], 2, ("--inputs 3", "1 input")),
    "cbfsim simulate --bogus": ([*SIM, "model.json", *X0, "--bogus"], 2, ("--bogus",)),
}
OUTPUT_CASES = [name for name, (argv, _, _) in CASES.items() if any(LOCKED in a or "a_file/" in a for a in argv)]


def make_work_folder(folder: Path) -> None:
    """The shipped vdp barrier as model.onnx/model.json, the 4-state bicycle model as big.onnx,
    and the bad cards and files the cases name."""
    folder.mkdir(parents=True)
    shutil.copy(MODELS / "vdp.onnx", folder / "model.onnx")
    shutil.copy(MODELS / "bicycle.onnx", folder / "big.onnx")
    card = json.loads((MODELS / "vdp.json").read_text())
    card["network"]["onnx"] = "model.onnx"

    def variant(name: str, system: str | None = None, onnx: str | None = None) -> None:
        data = json.loads(json.dumps(card))
        if system:
            data["system"] = data["constraint"]["system"] = system
        if onnx:
            data["network"]["onnx"] = onnx
        (folder / name).write_text(json.dumps(data))

    variant("model.json")
    variant("four_state.json", onnx="big.onnx")
    variant("unknown_system.json", system="no_such_plant")
    variant("wrong_system.json", system="bicycle")
    (folder / "empty.json").write_text("")
    (folder / "garbage.json").write_text("{not json")
    (folder / "list.json").write_text("[1, 2]")
    (folder / "a_file").write_text("a file, not a directory\n")


def lock(directory: Path) -> bool:
    """Make ``directory`` unwritable, even for root (immutable flag); False when impossible."""
    directory.chmod(0o555)
    if os.geteuid() != 0:
        return True
    return subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode == 0 \
        if shutil.which("chattr") else False


def unlock(directory: Path) -> None:
    if shutil.which("chattr"):
        subprocess.run(["chattr", "-i", str(directory)], capture_output=True)
    directory.chmod(0o755)


def snapshot(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Every case run once, in parallel threads (each subprocess mostly waits on imports)."""
    base = tmp_path_factory.mktemp("cli_errors")
    template = base / "template"
    make_work_folder(template)
    locked = base / "locked"
    locked.mkdir()
    can_lock = lock(locked)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CBFSIM_CACHE": str(base / "cache"), "MPLBACKEND": "Agg"}

    def run_case(name: str):
        argv, _, _ = CASES[name]
        if LOCKED in " ".join(argv) and not can_lock:
            return name, None
        folder = base / f"case{list(CASES).index(name)}"
        shutil.copytree(template, folder)
        before = snapshot(folder)
        argv = [a.replace(LOCKED, str(locked)) for a in argv]
        result = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
        return name, (result, before, snapshot(folder), sorted(p.name for p in locked.iterdir()))

    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            yield dict(pool.map(run_case, CASES)), str(locked)
    finally:
        unlock(locked)


@pytest.mark.parametrize("name", CASES)
def test_bad_input_gives_one_line_naming_the_problem_and_leaves_no_files(name, outcomes):
    results, locked = outcomes
    if results[name] is None:
        pytest.skip("cannot make a directory unwritable here (root without chattr)")
    result, before, after, locked_entries = results[name]
    _, code, words = CASES[name]
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    assert result.returncode == code, result.stderr
    assert ": error: " in lines[0]
    for word in words:
        assert word.replace(LOCKED, locked) in lines[0], lines[0]
    assert after == before, "files left behind or changed"
    assert locked_entries == []


@pytest.mark.parametrize("name", OUTPUT_CASES)
def test_an_output_directory_error_names_the_directory_not_the_model(name, outcomes):
    results, _ = outcomes
    if results[name] is None:
        pytest.skip("cannot make a directory unwritable here (root without chattr)")
    line = results[name][0].stderr.strip()
    assert "model.onnx" not in line and "model.json" not in line and "vdp.onnx" not in line, line


def test_debug_shows_the_traceback_of_an_expected_error(tmp_path):
    make_work_folder(tmp_path / "w")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([*SIM, "nope.json", *X0, "--debug"], cwd=tmp_path / "w", env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 1 and "Traceback" in result.stderr and "FileNotFoundError" in result.stderr


def test_quiet_silences_the_info_lines_that_verbose_keeps(tmp_path):
    make_work_folder(tmp_path / "w")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CBFSIM_CACHE": str(tmp_path / "cache")}
    outputs = {}
    for flag in ("--verbose", "--quiet"):
        result = subprocess.run([*CBFC, "model.onnx", "--inputs", "1", "-o", f"out{flag}", flag], cwd=tmp_path / "w",
                                env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        outputs[flag] = result.stdout
    assert "wrote" in outputs["--verbose"] and outputs["--quiet"] == ""


def test_a_bug_still_shows_its_traceback():
    with pytest.raises(ZeroDivisionError):
        run("prog", lambda: 1 // 0)


def test_an_expected_error_is_one_line_with_exit_1(capsys):
    def fail() -> int:
        raise CbfsimError("first line\n  second line")
    assert run("prog", fail) == 1
    assert capsys.readouterr().err == "prog: error: first line second line\n"
    with pytest.raises(CbfsimError):
        run("prog", fail, debug=True)


def test_a_failed_command_removes_the_output_directory_it_created(tmp_path):
    target = tmp_path / "new" / "deeper"
    with pytest.raises(CbfsimError), output_directory(target):
        (target / "half.npz").write_bytes(b"x")
        raise CbfsimError("late failure")
    assert not (tmp_path / "new").exists()


def test_a_failed_command_keeps_an_existing_directory_and_removes_only_its_new_files(tmp_path):
    (tmp_path / "old.txt").write_text("keep")
    with pytest.raises(CbfsimError), output_directory(tmp_path):
        (tmp_path / "half.npz").write_bytes(b"x")
        (tmp_path / "sub").mkdir()
        raise CbfsimError("late failure")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.txt"]
