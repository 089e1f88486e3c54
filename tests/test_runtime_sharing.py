"""One compiled barrier shared by threads, and workspaces too large for a stack.

ctypes releases the GIL during each C call, so threads really run the library at once: each
call needs outputs and a workspace of its own. Calls that may crash the interpreter on a
broken runtime (a workspace larger than the stack) run in a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from compiler import reference
from compiler.ir import Activation, Dense, Model

pytestmark = pytest.mark.toolchain
ROOT = Path(__file__).resolve().parents[1]
THREADS, CALLS = 8, 4000
FLOAT_TOL = 1e-5


def tanh_net(widths: tuple[int, ...], seed: int, name: str) -> Model:
    rng = np.random.default_rng(seed)
    layers: list = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [Dense(rng.normal(size=(b, a)) / np.sqrt(a), rng.normal(size=b) * 0.1), Activation("tanh")]
    return Model(tuple(layers[:-1]), widths[0], name=name)


def states(rng, batch: int, n: int, m: int):
    return (rng.uniform(-2, 2, (batch, n)), rng.normal(size=(batch, n)), rng.normal(size=(batch, n, m)),
            rng.normal(size=(batch, n)), rng.normal(size=(batch, n, m)))


def flat(results) -> np.ndarray:
    """One state's outputs (floats and arrays) as one float64 vector."""
    return np.concatenate([np.atleast_1d(np.asarray(r, dtype=np.float64)) for r in results])


@pytest.mark.parametrize("order", [1, 2])
def test_eight_threads_sharing_one_barrier_get_the_single_thread_bits(order):
    from cbfsim.runtime import compile_barrier
    n, m = 4, 2
    model = tanh_net((n, 32, 32, 1), seed=order, name=f"shared{order}")
    lib = compile_barrier(model, inputs=m, order=order)
    x, f, G, Dff, DfG = states(np.random.default_rng(11), CALLS, n, m)
    call = (lambda i: lib.lie(x[i], f[i], G[i])) if order == 1 else \
        (lambda i: lib.lie2(x[i], f[i], G[i], Dff[i], DfG[i]))
    alone = np.array([flat(call(i)) for i in range(CALLS)])
    refs = reference.lie(model, x, f, G) if order == 1 else reference.lie2(model, x, f, G, Dff, DfG)
    ref = np.column_stack([np.asarray(r).reshape(CALLS, -1) for r in refs])
    assert np.max(np.abs(alone - ref)) <= FLOAT_TOL * np.max(np.abs(ref))

    shared = np.empty((THREADS, CALLS, alone.shape[1]))
    start = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        start.wait()
        for i in range(CALLS):
            shared[t, i] = flat(call(i))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wrong = int(sum((shared[t] != alone).any(axis=1).sum() for t in range(THREADS)))
    assert wrong == 0, f"{wrong} of {THREADS * CALLS} results differ from the single-thread ones"


# A barrier whose workspace (65 channels x 40,000 neurons x 4 B = 10.4 MB) is larger than a
# thread's default 8 MB stack: legal, and wide only in its first layer so it compiles fast.
WIDE = r"""
import sys, threading
import numpy as np
from compiler import reference
from cbfsim.runtime import compile_barrier
from tests.test_runtime_sharing import FLOAT_TOL, flat, states, tanh_net

order, n, m = int(sys.argv[1]), 2, 63
model = tanh_net((n, 40_000, 1, 1), seed=5, name=f"wide{order}")
lib = compile_barrier(model, inputs=m, order=order)
assert lib.workspace_bytes > 8 * 2**20, lib.workspace_bytes
x, f, G, Dff, DfG = states(np.random.default_rng(3), 3, n, m)
args = (x, f, G) if order == 1 else (x, f, G, Dff, DfG)
entry = lib.lie if order == 1 else lib.lie2
ref = (reference.lie if order == 1 else reference.lie2)(model, *args)
scale = max(np.max(np.abs(r)) for r in ref)
batch = entry(*args)
for got, want in zip(batch, ref):
    assert np.max(np.abs(got - want)) <= FLOAT_TOL * scale, (got, want)
singles = {}
def run(t):
    singles[t] = [flat(entry(*(a[i] for a in args))) for i in range(3)]
threads = [threading.Thread(target=run, args=(t,)) for t in range(3)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
want = [flat([r[i] for r in ref]) for i in range(3)]
for t in range(3):
    for got, expect, from_batch in zip(singles[t], want, [flat([b[i] for b in batch]) for i in range(3)]):
        assert np.array_equal(got, from_batch) and np.max(np.abs(got - expect)) <= FLOAT_TOL * scale
print("ok")
"""


@pytest.mark.parametrize("order", [1, 2])
def test_workspace_larger_than_a_thread_stack_comes_from_the_caller(order):
    run = subprocess.run([sys.executable, "-c", WIDE, str(order)], cwd=ROOT, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0 and run.stdout.strip() == "ok", \
        f"status {run.returncode} (a negative status is the signal that killed it):\n{run.stderr[-3000:]}"


def test_shim_of_a_caller_workspace_compiles_warning_free_and_refuses_a_null_workspace(cxx, tmp_path):
    from compiler.api import compile_model
    from compiler.emit_abi import NEEDS_WORKSPACE
    from tests.test_compiler_codegen import STRICT
    source = compile_model(tanh_net((2, 600, 1, 1), seed=1, name="heapws"), inputs=63, order=2)
    assert source.report.workspace_bytes > 64 * 1024
    source.write(tmp_path)
    driver = tmp_path / "driver.cpp"
    driver.write_text('#include "heapws_abi.cpp"\n#include <cstdio>\n'
                      "int main() { float x[2] = {}, f[2] = {}, G[126] = {}, out[128];\n"
                      '  std::printf("%d", cbf_lie(x, f, G, out, nullptr)); }\n')
    build = subprocess.run([cxx, *STRICT, "-O1", str(driver), "-o", str(tmp_path / "driver")],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    assert subprocess.run([str(tmp_path / "driver")], capture_output=True, text=True).stdout == str(NEEDS_WORKSPACE)
