"""The binding's single-state extension (compiler/fastcall.cpp) against the ctypes paths it
bypasses: the same bits, the same refusals and conversions for every kind of argument, NaN
outputs for non-finite inputs, threads, and a build only when a single state needs it.

Each comparison runs one library twice: as ``compile_barrier`` loads it (the extension) and
loaded with ``use_extension=False`` (ctypes only, the binding before the extension), and
checks the values against the float64 IR interpreter (compiler.reference)."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import numpy as np
import pytest

from compiler import reference
from compiler.errors import ShapeError
from compiler.ir import Activation, Dense, Model

pytestmark = pytest.mark.toolchain
ROOT = Path(__file__).resolve().parents[1]
N, M = 4, 2
FLOAT_TOL = 1e-5                 # float32 header against the float64 interpreter, relative to the largest


def tanh_net(order: int) -> Model:
    rng = np.random.default_rng(40 + order)
    layers: list = []
    widths = (N, 24, 24, 1)
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [Dense(rng.normal(size=(b, a)) / np.sqrt(a), rng.normal(size=b) * 0.1), Activation("tanh")]
    return Model(tuple(layers[:-1]), N, name=f"fastcall{order}")


@pytest.fixture(scope="module", params=[(1, M), (2, M), (1, 0), (2, 0)], ids=["lie", "lie2", "lie-m0", "lie2-m0"])
def libs(request):
    """(order, m, model, the binding as compile_barrier loads it, the same library through ctypes
    only); m = 0 is an autonomous plant (G is n x 0)."""
    from compiler.load import CompiledLie
    from cbfsim.runtime import compile_barrier
    order, m = request.param
    model = tanh_net(order)
    lib = compile_barrier(model, inputs=m, order=order, name=f"fastcall{order}m{m}")
    return order, m, model, lib, CompiledLie(lib.library_path, use_extension=False)


def extension_expected() -> bool:
    """Whether this Python has the C headers the extension needs (else the ctypes path is right)."""
    return (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file() and \
        os.environ.get("CBFSIM_FASTCALL", "1") != "0"


def states(order: int, m: int, count: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    arrays = (rng.uniform(-2, 2, (count, N)), rng.normal(size=(count, N)), rng.normal(size=(count, N, m)),
              rng.normal(size=(count, N)), rng.normal(size=(count, N, m)))
    return arrays[:3] if order == 1 else arrays


def call(lib, order: int, *args):
    return lib.lie(*args) if order == 1 else lib.lie2(*args)


def flat(results) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(r, dtype=np.float64)) for r in results])


def test_single_states_take_the_extension_and_give_the_ctypes_and_batch_bits(libs):
    order, m, model, lib, plain = libs
    assert lib.single_state_path == ("extension" if extension_expected() else lib.single_state_path)
    assert plain.single_state_path == "ctypes (use_extension=False)"
    args = states(order, m, 300)
    fast = np.array([flat(call(lib, order, *(a[i] for a in args))) for i in range(300)])
    slow = np.array([flat(call(plain, order, *(a[i] for a in args))) for i in range(300)])
    batch = np.column_stack([np.reshape(r, (300, -1)) for r in call(plain, order, *args)])
    ref = np.column_stack([np.reshape(r, (300, -1)) for r in (reference.lie if order == 1 else reference.lie2)(
        model, *args)])
    assert np.array_equal(fast, slow) and np.array_equal(fast, batch)
    assert np.max(np.abs(fast - ref)) <= FLOAT_TOL * np.max(np.abs(ref))
    # the result's kinds: Python floats, and (m,) float64 arrays of their own (writing one changes nothing else)
    one = call(lib, order, *(a[0] for a in args))
    again = call(lib, order, *(a[0] for a in args))
    for got, want in zip(one, call(plain, order, *(a[0] for a in args))):
        assert type(got) is type(want)
        if isinstance(got, np.ndarray):
            assert got.shape == (m,) and got.dtype == np.float64 and got.flags.owndata and got.flags.writeable
            got[:] = 1e9
    assert np.array_equal(flat(again), fast[0])
    kwargs = dict(zip(("x", "f", "G", "Dff", "DfG"), (a[1] for a in args)))
    assert np.array_equal(flat(lib.lie(**kwargs) if order == 1 else lib.lie2(**kwargs)), fast[1])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_give_nan_outputs_on_every_path_and_leave_no_trace(libs, bad):
    order, m, _, lib, plain = libs
    args = [a[0] for a in states(order, m, 1, seed=3)]
    clean = flat(call(lib, order, *args))
    for k in range(len(args)):
        for pos in sorted({0, args[k].size - 1} if args[k].size else ()):     # G is empty when m = 0
            broken = [a.copy() for a in args]
            broken[k].flat[pos] = bad
            fast, slow = flat(call(lib, order, *broken)), flat(call(plain, order, *broken))
            batch = flat(call(plain, order, *(b[None] for b in broken)))
            assert np.isnan(fast).all() and np.isnan(slow).all() and np.isnan(batch).all(), (k, pos)
            assert np.array_equal(flat(call(lib, order, *args)), clean)     # the next call is unaffected


def _variants(order: int, m: int) -> dict:
    """Arguments of every kind a caller may pass for one state: (x, f, G[, Dff, DfG])."""
    args = [a[0] for a in states(order, m, 1, seed=5)]
    x, f, G = args[:3]
    rest = tuple(args[3:])
    unaligned = np.frombuffer(bytearray(8 * N + 1), dtype=np.float64, count=N, offset=1)
    unaligned[:] = x
    readonly = x.copy()
    readonly.flags.writeable = False
    wide = np.zeros((N, 2 * m))
    wide[:, ::2] = G
    return {
        "float64 contiguous": (x, f, G, *rest),
        "float32": (x.astype(np.float32), f.astype(np.float32), G.astype(np.float32), *rest),
        "int": (np.round(x).astype(int), f, G, *rest),
        "lists": (x.tolist(), f.tolist(), G.tolist(), *(r.tolist() for r in rest)),
        "G Fortran order": (x, f, np.asfortranarray(G), *rest),
        "G strided view": (x, f, wide[:, ::2], *rest),
        "x strided view": (np.repeat(x, 2)[::2], f, G, *rest),
        "x big-endian": (x.astype(">f8"), f, G, *rest),
        "x unaligned": (unaligned, f, G, *rest),
        "x read-only": (readonly, f, G, *rest),
        "x masked array": (np.ma.masked_array(x), f, G, *rest),
        "x short": (x[:-1], f, G, *rest),
        "f long": (x, np.append(f, 0.0), G, *rest),
        "G transposed": (x, f, G.T.copy(), *rest),
        "G flat": (x, f, G.ravel(), *rest),
        "G 3-d": (x, f, G[None], *rest),
        "x as a row": (x[None], f, G, *rest),
        "x scalar": (np.float64(1.0), f, G, *rest),
        "x 0-d array": (np.array(1.0), f, G, *rest),
        "x strings": (np.array(["a"] * N), f, G, *rest),
        "x None": (None, f, G, *rest),
        "too few": (x, f),
        "too many": (x, f, G, *rest, x),
    }


def _outcome(lib, order: int, args) -> tuple:
    try:
        return ("ok", flat(call(lib, order, *args)))
    except Exception as exc:       # noqa: BLE001 -- the comparison is the point: same type, same message
        return (type(exc), str(exc))


def test_every_kind_of_argument_is_converted_or_refused_as_the_ctypes_binding_does(libs):
    order, m, _, lib, plain = libs
    refused = set()
    for name, args in _variants(order, m).items():
        fast, slow = _outcome(lib, order, args), _outcome(plain, order, args)
        assert fast[0] == slow[0], (name, fast, slow)
        if fast[0] == "ok":
            assert np.array_equal(fast[1], slow[1], equal_nan=True), name
        else:
            assert fast[1] == slow[1], name
            refused.add(name)
    # the checks still bite: wrong shapes are a ShapeError naming the array and both shapes
    assert {"x short", "f long", "G transposed", "G flat", "too few", "too many", "x strings", "x None"} <= refused
    assert _outcome(lib, order, _variants(order, m)["G transposed"]) == \
        (ShapeError, f"G must have shape ({N}, {m}), got ({m}, {N})")
    same = flat(call(lib, order, *_variants(order, m)["float64 contiguous"]))
    for name in ("G Fortran order", "G strided view", "x strided view", "x big-endian", "x unaligned",
                 "x read-only", "x masked array"):
        assert np.array_equal(flat(call(lib, order, *_variants(order, m)[name])), same), name


def test_lie2_of_a_first_order_barrier_is_refused_on_every_path():
    from compiler.load import CompiledLie
    from cbfsim.runtime import compile_barrier
    lib = compile_barrier(tanh_net(1), inputs=M, order=1)
    args = [a[0] for a in states(2, M, 1)]
    for binding in (lib, CompiledLie(lib.library_path, use_extension=False)):
        with pytest.raises(ValueError, match="compiled for order 1; compile with order=2 for lie2"):
            binding.lie2(*args)


def test_threads_sharing_the_extension_entry_get_the_serial_bits(libs):
    order, m, _, lib, plain = libs
    count, threads = 2000, 6
    args = states(order, m, count, seed=9)
    serial = np.array([flat(call(plain, order, *(a[i] for a in args))) for i in range(count)])
    got = np.empty((threads, count, serial.shape[1]))
    start = threading.Barrier(threads)

    def worker(t: int) -> None:
        start.wait()
        for i in range(count):      # half the threads walk backwards: different states meet
            j = i if t % 2 == 0 else count - 1 - i
            got[t, j] = flat(call(lib, order, *(a[j] for a in args)))

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert all(np.array_equal(got[t], serial) for t in range(threads))


def test_the_extension_source_compiles_under_the_strict_warning_flags(cxx, tmp_path):
    import numpy
    from tests.test_compiler_codegen import STRICT
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        pytest.skip(f"no Python.h in {include}: the binding uses its ctypes path")
    command = [cxx, *STRICT, "-O2", "-fPIC", "-shared", "-I", include, "-I", numpy.get_include(),
               str(ROOT / "compiler" / "fastcall.cpp"), "-o", str(tmp_path / "fastcall.so")]
    build = subprocess.run(command, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr


def test_entry_refuses_a_null_address_a_bad_order_and_a_fallback_that_cannot_be_called():
    from compiler import fastcall
    entry = fastcall.entry_type()
    if entry is None:
        pytest.skip(f"extension unavailable: {fastcall.unavailable_reason()}")
    with pytest.raises(ValueError, match="null address"):
        entry(0, 1, N, M, print, None)
    with pytest.raises(ValueError, match="order not 1 or 2"):
        entry(1, 3, N, M, print, None)
    with pytest.raises(ValueError, match="out of range"):
        entry(1, 1, N, entry.max_outputs, print, None)
    with pytest.raises(TypeError, match="fallback must be callable"):
        entry(1, 1, N, M, None, None)


# Batch calls leave the cache without an extension; the first single state builds it once
# (a fresh cache: the build is part of what is tested). With CBFSIM_FASTCALL=0, never.
PROBE = r"""
import sys
import numpy as np
from pathlib import Path
from cbfsim.runtime import compile_barrier
from compiler import cache
from tests.test_binding_fastcall import M, N, states, tanh_net
lib = compile_barrier(tanh_net(1), inputs=M, order=1)
x, f, G = states(1, M, 3)
lib.lie(x, f, G)
print(len(cache.entries("extension")))
single = lib.lie(x[0], f[0], G[0])
print(len(cache.entries("extension")), lib.single_state_path)
assert np.array_equal(np.concatenate([np.atleast_1d(v) for v in single]),
                      np.concatenate([np.atleast_1d(v[0]) for v in lib.lie(x, f, G)]))
"""


@pytest.mark.parametrize("setting", ["1", "0"])
def test_only_a_single_state_builds_the_extension_and_the_environment_can_turn_it_off(tmp_path, setting):
    env = {**os.environ, "CBFSIM_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT), "CBFSIM_FASTCALL": setting}
    run = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    if setting == "0":
        assert run.stdout.split("\n")[:2] == ["0", "0 ctypes (CBFSIM_FASTCALL=0)"]
    elif extension_expected():
        assert run.stdout.split("\n")[:2] == ["0", "1 extension"]
