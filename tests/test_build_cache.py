"""The build cache shared by processes: concurrent compiles, damaged entries, file modes, and
``cbfsim cache``. Everything that loads a library runs in a subprocess, so a crash (SIGBUS
from a truncated library, SIGSEGV/SIGILL from garbage code) fails the test instead of
killing pytest."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.toolchain
ROOT = Path(__file__).resolve().parents[1]

# A small tanh network as IR (no torch: the workers start fast) and five states.
MODEL = r"""
import numpy as np
from compiler.ir import Activation, Dense, Model
rng = np.random.default_rng(7)
widths = (3, 16, 16, 1)
layers = []
for a, b in zip(widths[:-1], widths[1:]):
    layers += [Dense(rng.normal(size=(b, a)) / np.sqrt(a), rng.normal(size=b) * 0.1), Activation("tanh")]
model = Model(tuple(layers[:-1]), widths[0], name="cache_probe")
x, f, G = rng.uniform(-1, 1, (5, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 3, 2))
"""
# Compiles MODEL (after a start signal and a delay, if given) and prints the library's path,
# its sha256 and h, L_f h, L_G h at the states as exact hex floats. With "slow", every C++
# source written through Path.write_text takes 1 s between its first and second half, as
# on a slow or loaded file system.
WORKER = r"""
import hashlib, json, pathlib, sys, time
from pathlib import Path
go = Path(sys.argv[1]) if len(sys.argv) > 1 else None
if "slow" in sys.argv:
    plain_write_text = pathlib.Path.write_text
    def slow_write_text(self, data, *args, **kwargs):
        if self.suffix not in (".hpp", ".cpp"):
            return plain_write_text(self, data, *args, **kwargs)
        with open(self, "w") as handle:
            handle.write(data[:len(data) // 2])
            handle.flush()
            time.sleep(1.0)
            handle.write(data[len(data) // 2:])
        return len(data)
    pathlib.Path.write_text = slow_write_text
""" + MODEL + r"""
from compiler.api import compile_model
from cbfsim.runtime import compile_barrier
compile_model(model, inputs=2)          # warm up, so that the start signal is the only offset
if go is not None:                      # wait for the others: all compile at the same moment
    Path(str(go) + "." + sys.argv[2]).touch()
    while not go.exists():
        time.sleep(0.001)
    time.sleep(float(sys.argv[3]))
lib = compile_barrier(model, inputs=2, order=1, dtype="float")
h, lf, lg = lib.lie(x, f, G)
print(json.dumps({"library": str(lib.library_path),
                  "sha256": hashlib.sha256(lib.library_path.read_bytes()).hexdigest(),
                  "values": [float(v).hex() for v in np.concatenate([h, lf, lg.ravel()])]}))
"""


def _env(cache: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "CBFSIM_CACHE": str(cache), "PYTHONPATH": str(ROOT), **extra}


def _probe(cache: Path, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WORKER, *args], env=_env(cache, **env), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run_probe(cache: Path) -> dict:
    proc = _probe(cache)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"probe died with status {proc.returncode}:\n{err[-3000:]}"
    return json.loads(out)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict]:
    """One probe's build into a fresh cache, kept pristine: a test that damages or adds entries
    works on a copy (``_copy_of``), so each test does not compile the same library again."""
    cache = tmp_path_factory.mktemp("built") / "cache"
    return cache, _run_probe(cache)


def _copy_of(built: tuple[Path, dict], tmp_path: Path) -> tuple[Path, dict]:
    """A copy of a pristine cache (files, modes and times) in ``tmp_path``, and the probe's
    result with its library path moved into the copy."""
    cache, result = built
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy)
    return copy, {**result, "library": str(copy / Path(result["library"]).relative_to(cache))}


def _reference_values() -> np.ndarray:
    """The probe's h, L_f h, L_G h from the float64 reference interpreter."""
    from compiler import reference
    probe: dict = {}
    exec(MODEL, probe)
    h, lf, lg = reference.lie(probe["model"], probe["x"], probe["f"], probe["G"])
    return np.concatenate([h, lf, lg.ravel()])


def _compiles_at_once(cache: Path, workers: int, stagger: float = 0.0, slow: bool = False, **env: str) -> list[dict]:
    go = cache.parent / f"go-{cache.name}"
    procs = [_probe(cache, str(go), str(i), str(i * stagger), *(["slow"] if slow else []), **env)
             for i in range(workers)]
    deadline = time.monotonic() + 120
    while not all(Path(f"{go}.{i}").exists() for i in range(workers)) and time.monotonic() < deadline:
        time.sleep(0.005)
    go.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"a concurrent compile failed (status {proc.returncode}):\n{err[-3000:]}"
        results.append(json.loads(out))
    return results


def test_four_processes_compiling_one_model_into_one_fresh_cache_all_succeed_with_identical_libraries(tmp_path):
    # a stress check: the next test reproduces the old race deterministically. Before the fix,
    # 7 of 32 such compiles failed, so 16 would all pass by luck with probability 0.78^16 < 2%
    results = []
    for round_ in range(4):
        results += _compiles_at_once(tmp_path / f"cache{round_}", workers=4)
    assert len({r["sha256"] for r in results}) == 1          # the same library bytes, 16 times
    assert len({tuple(r["values"]) for r in results}) == 1
    got = np.array([float.fromhex(v) for v in results[0]["values"]])
    ref = _reference_values()
    assert np.max(np.abs(got - ref)) <= 1e-5 * np.max(np.abs(ref))


def test_a_build_never_compiles_sources_another_process_is_still_writing(tmp_path, cxx):
    """The old failure, made deterministic: each source write takes 1 s and the compiler 0.5 s to
    start, so the first process's g++ (at about 2.5 s) reads its sources while the second (started
    1.2 s later) is rewriting them in the shared folder (from 2.2 to 3.2 s) -- unless each
    build has a folder of its own."""
    slow_cxx = tmp_path / "slow-g++"
    slow_cxx.write_text(f'#!/bin/sh\nsleep 0.5\nexec "{cxx}" "$@"\n')
    slow_cxx.chmod(0o755)
    results = _compiles_at_once(tmp_path / "cache", workers=2, stagger=1.2, slow=True, CXX=str(slow_cxx))
    assert results[0]["sha256"] == results[1]["sha256"] and results[0]["values"] == results[1]["values"]


def _entry(result: dict) -> tuple[Path, bytes]:
    library = Path(result["library"])
    return library, library.read_bytes()


def _text_section(library: Path) -> tuple[int, int]:
    """File offset and size of the library's .text section (readelf, from binutils beside g++)."""
    out = subprocess.run(["readelf", "-SW", str(library)], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        fields = line.replace("[ ", "[").split()
        if len(fields) > 5 and fields[1] == ".text":
            return int(fields[4], 16), int(fields[5], 16)
    raise AssertionError("no .text section")


def _damage_truncate(library: Path) -> None:
    os.truncate(library, library.stat().st_size // 2)


def _damage_text(library: Path) -> None:
    offset, size = _text_section(library)
    with open(library, "r+b") as handle:          # in place, as a bad disk or a stray write would
        handle.seek(offset)
        handle.write(b"\xff" * size)


def _damage_empty(library: Path) -> None:
    library.write_bytes(b"")


@pytest.mark.parametrize("damage", [_damage_truncate, _damage_text, _damage_empty],
                         ids=["truncated", "garbage_text", "empty"])
def test_damaged_cached_library_is_rebuilt_not_loaded(built, tmp_path, damage):
    cache, first = _copy_of(built, tmp_path)
    library, original = _entry(first)
    damage(library)
    assert library.read_bytes() != original
    second = _run_probe(cache)                                # must not crash, must not load the damage
    assert second["values"] == first["values"]
    assert second["library"] == first["library"] and library.read_bytes() == original


def test_cache_info_reports_damaged_entries_and_clear_empties_the_cache(built, tmp_path):
    cache, first = _copy_of(built, tmp_path)
    library, _ = _entry(first)

    def cbfsim(*args):
        return subprocess.run([sys.executable, "-m", "cbfsim.cli", "cache", *args], env=_env(cache), cwd=ROOT,
                              capture_output=True, text=True, timeout=120)

    info = cbfsim("info")
    assert info.returncode == 0 and "entries: 1 (0 damaged" in info.stdout and str(cache) in info.stdout
    _damage_truncate(library)
    assert "entries: 1 (1 damaged" in cbfsim("info").stdout
    cleared = cbfsim("clear")
    assert cleared.returncode == 0 and "removed 1 entries" in cleared.stdout
    assert not library.exists() and "entries: 0 (0 damaged" in cbfsim("info").stdout


def _modes_under(umask: int, cache: Path, out: Path) -> dict[str, int]:
    """File modes of cbfc's output and of a cache entry, created under ``umask`` (a subprocess)."""
    script = r"""
import os, sys
os.umask(int(sys.argv[1], 8))
from compiler.api import compile_model
from compiler.ir import Activation, Dense, Model
import numpy as np
model = Model((Dense(np.ones((4, 2)), np.zeros(4)), Activation("tanh"), Dense(np.ones((1, 4)), np.zeros(1))), 2,
              name="modes")
compile_model(model, inputs=1).write(sys.argv[2])
from cbfsim.runtime import compile_barrier
print(compile_barrier(model, inputs=1).library_path)
"""
    run = subprocess.run([sys.executable, "-c", script, oct(umask), str(out)], env=_env(cache), cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    library = Path(run.stdout.strip())
    paths = {"header": out / "modes.hpp", "shim": out / "modes_abi.cpp", "library": library,
             "entry": library.parent, "entry_header": library.parent / "modes.hpp"}
    return {k: p.stat().st_mode & 0o777 for k, p in paths.items()}


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_generated_and_cached_files_get_the_modes_the_umask_gives(tmp_path, umask):
    modes = _modes_under(umask, tmp_path / "cache", tmp_path / "out")
    assert modes == {"header": 0o666 & ~umask, "shim": 0o666 & ~umask, "library": 0o777 & ~umask,
                     "entry": 0o777 & ~umask, "entry_header": 0o666 & ~umask}


def test_cache_entry_manifest_records_size_and_sha256_of_every_file(built):
    library, data = _entry(built[1])
    manifest = json.loads((library.parent / "manifest.json").read_text())["files"]
    assert manifest[library.name] == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert set(manifest) == {p.name for p in library.parent.iterdir()} - {"manifest.json"}


# ---- one discipline for every kind of entry: compiled closed loops (cbfsim/engine.py) too ----

ENGINE_WORKER = r"""
import hashlib, json
import numpy as np
from cbfsim.engine import simulate_card
traj = simulate_card("vdp", np.array([[0.5, 0.5], [-0.8, 0.6]]), 0.5)
library = traj.metadata["library"]
print(json.dumps({"library": library, "sha256": hashlib.sha256(open(library, "rb").read()).hexdigest(),
                  "bits": traj.x.astype(np.float32).view(np.uint32).ravel().tolist()}))
"""


def _run_engine_probe(cache: Path, umask: int | None = None, **env: str) -> dict:
    script = (f"import os; os.umask({umask})\n" if umask is not None else "") + ENGINE_WORKER
    run = subprocess.run([sys.executable, "-c", script], env=_env(cache, **env), cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, f"engine probe died with status {run.returncode}:\n{run.stderr[-3000:]}"
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def engine_built(tmp_path_factory) -> tuple[Path, dict]:
    """One engine probe's build into a fresh cache, kept pristine (tests damage copies of it)."""
    cache = tmp_path_factory.mktemp("engine_built") / "cache"
    return cache, _run_engine_probe(cache)


def _damage_zero(library: Path) -> None:
    library.write_bytes(b"\0" * library.stat().st_size)


@pytest.mark.parametrize("damage", [_damage_truncate, _damage_zero, _damage_text],
                         ids=["truncated", "zeroed", "garbage_text"])
def test_damaged_engine_library_is_rebuilt_and_the_run_gives_the_bits_it_gave_before(engine_built, tmp_path, damage):
    cache, first = _copy_of(engine_built, tmp_path)
    library, original = _entry(first)
    damage(library)
    assert library.read_bytes() != original
    second = _run_engine_probe(cache)                           # must not crash, must not load the damage
    assert second["bits"] == first["bits"]
    assert second["library"] == first["library"] and library.read_bytes() == original


def test_zeroed_barrier_library_is_rebuilt_not_loaded(built, tmp_path):
    cache, first = _copy_of(built, tmp_path)
    library, original = _entry(first)
    _damage_zero(library)
    assert _run_probe(cache)["values"] == first["values"] and library.read_bytes() == original


@pytest.mark.parametrize("umask", [0o022, 0o027], ids=["umask022", "umask027"])
def test_engine_entries_get_the_modes_the_umask_gives(tmp_path, umask):
    cache = tmp_path / "cache"
    library = Path(_run_engine_probe(cache, umask=umask)["library"])
    entry = library.parent.parent
    modes = {p.relative_to(cache).as_posix(): p.stat().st_mode & 0o777 for p in [entry, *entry.rglob("*")]}
    folders = {k: v for k, v in modes.items() if (cache / k).is_dir()}
    files = {k: v for k, v in modes.items() if (cache / k).is_file()}
    assert set(folders.values()) == {0o777 & ~umask}
    assert files[library.relative_to(cache).as_posix()] == 0o777 & ~umask
    assert files[(entry / "manifest.json").relative_to(cache).as_posix()] == 0o666 & ~umask
    assert (cache / "engines").stat().st_mode & 0o777 == 0o777 & ~umask


def test_cache_info_counts_engine_entries_as_their_own_kind_and_clear_removes_them(engine_built, built, tmp_path):
    cache, first = _copy_of(engine_built, tmp_path)
    engine = Path(first["library"])
    shutil.copytree(built[0], cache, dirs_exist_ok=True)        # and the barrier entry: two kinds in one cache

    def cbfsim(*args):
        return subprocess.run([sys.executable, "-m", "cbfsim.cli", "cache", *args], env=_env(cache), cwd=ROOT,
                              capture_output=True, text=True, timeout=120)

    info = cbfsim("info").stdout
    assert "entries: 2 (0 damaged" in info and "barriers: 1 (0 damaged)" in info and "engines: 1 (0 damaged)" in info
    _damage_truncate(engine)
    info = cbfsim("info").stdout
    assert "entries: 2 (1 damaged" in info and "barriers: 1 (0 damaged)" in info and "engines: 1 (1 damaged)" in info
    cleared = cbfsim("clear")
    assert cleared.returncode == 0 and "removed 2 entries" in cleared.stdout and not engine.exists()
    assert "entries: 0 (0 damaged" in cbfsim("info").stdout


def _other_cpu_compiler(tmp_path: Path, cxx: str) -> Path:
    """A g++ that compiles as g++ does but says -march=native means another CPU (as the same
    compiler on another machine of a cluster would): only its ``-###`` answer differs."""
    wrapper = tmp_path / "g++-other-cpu"
    wrapper.write_text(f'#!/bin/sh\ncase "$*" in *-###*) "{cxx}" "$@" 2>&1 | '
                       f'sed "s/-march=[A-Za-z0-9_.-]*/-march=othercpu/" >&2 ;;\n*) exec "{cxx}" "$@" ;;\nesac\n')
    wrapper.chmod(0o755)
    return wrapper


def test_a_cpu_where_march_native_means_another_target_gets_its_own_barrier_entry(built, tmp_path, cxx):
    cache, here = _copy_of(built, tmp_path)
    proc = _probe(cache, CXX=str(_other_cpu_compiler(tmp_path, cxx)))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    there = json.loads(out)
    assert there["library"] != here["library"] and there["values"] == here["values"]


def test_a_cpu_where_march_native_means_another_target_gets_its_own_engine_entry(engine_built, tmp_path, cxx):
    cache, here = _copy_of(engine_built, tmp_path)
    there = _run_engine_probe(cache, HOST_CXX=str(_other_cpu_compiler(tmp_path, cxx)))
    assert there["library"] != here["library"] and there["bits"] == here["bits"]


def test_the_cache_key_holds_what_march_native_means_on_this_cpu(cxx):
    """Independent reference: the target g++ itself reports for -march=native (-Q --help=target)."""
    from compiler.build import CXXFLAGS, native_arch, toolchain_identity
    report = subprocess.run([cxx, "-march=native", "-Q", "--help=target"], capture_output=True, text=True).stdout
    march = next(line.split()[-1] for line in report.splitlines() if line.strip().startswith("-march="))
    assert march != "native" and native_arch(cxx, CXXFLAGS) == march
    identity = toolchain_identity(cxx, CXXFLAGS)
    assert f"-march={march}" in identity and subprocess.run([cxx, "--version"], capture_output=True,
                                                            text=True).stdout in identity
