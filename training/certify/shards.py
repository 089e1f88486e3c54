"""Where a round's chunks of boxes are evaluated: this process, worker processes, or a Dask cluster.

Every runner has ``map(eps, chunks, task) -> [result]`` (in chunk order) and ``close()``.  A
chunk is a pure function of (problem, eps, lo, hi) (``task``: the search's
``branch.evaluate_chunk``, the coverage's ``coverage.set_masks``), so where it runs changes no
number.  The problem travels once per worker, cloudpickled (its plant enclosure is
lambdified sympy, which plain pickle refuses), and is unpickled once per worker process.

A chunk whose evaluation fails -- the worker process died, the Dask worker was lost, or the
function raised -- is submitted again, up to ``MAX_TRIES`` times; then the search stops with an
error and no certificate (a verdict is never drawn from a partial search).

``fault``: a test hook -- the path of a marker file; the first chunk to remove it fails once
(``.kill`` suffix: its worker process exits at once; otherwise it raises).
"""
from __future__ import annotations

import hashlib
import os
import time
from contextlib import contextmanager
from typing import Any

import numpy as np

from .problem import CertifyError, Problem

MAX_TRIES = 4
CONNECT_TIMEOUT_S = 10
AUTO = "auto"                     # --workers auto: see Growing
AUTO_POOL_AFTER_S = 2.0           # seconds of box evaluation in this process before ``auto`` starts its pool
Chunk = tuple[np.ndarray, np.ndarray]

_PROBLEMS: dict[str, Problem] = {}       # per worker process: key -> the unpickled problem


def _problem(key: str, blob: bytes) -> Problem:
    if key not in _PROBLEMS:
        import pickle
        _PROBLEMS.clear()                # one search at a time per worker
        _PROBLEMS[key] = pickle.loads(blob)
    return _PROBLEMS[key]


def _maybe_fail(fault: str | None) -> None:
    """The test hook: fail once, in whichever chunk first claims the marker file."""
    if not fault:
        return
    try:
        os.remove(fault)
    except FileNotFoundError:
        return
    if fault.endswith(".kill"):
        os._exit(3)
    raise RuntimeError(f"injected worker failure ({fault})")


def chunk_task(name: str) -> Any:
    """The chunk functions a runner can run, by name: (problem, eps, lo, hi) -> result."""
    if name == "evaluate":              # the search's bounds (branch.py)
        from .branch import evaluate_chunk
        return evaluate_chunk
    if name == "set_masks":             # the coverage refinement (coverage.py)
        from .coverage import set_masks
        return set_masks
    if name == "plane_volume":          # its last step, the leftover boxes' plane cells (coverage.py)
        from .coverage import plane_volume
        return plane_volume
    raise ValueError(f"no chunk task {name!r}")


def run_chunk(key: str, blob: bytes, name: str, eps: float, lo: np.ndarray, hi: np.ndarray, fault: str | None = None):
    """One chunk in a worker (process pool or Dask): a top-level function, so it pickles by name."""
    _maybe_fail(fault)
    return chunk_task(name)(_problem(key, blob), eps, lo, hi)


def _pickled(problem: Problem) -> tuple[str, bytes]:
    import cloudpickle
    blob = cloudpickle.dumps(problem)
    return hashlib.sha256(blob).hexdigest(), blob


SINGLE_THREADED = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}


@contextmanager
def _environment(values: dict[str, str]):
    """``values`` in os.environ for the block (each variable the user set keeps its value)."""
    added = {k: v for k, v in values.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def _gave_up(boxes: int, error: BaseException) -> CertifyError:
    text = str(error).splitlines()[0] if str(error) else ""
    return CertifyError(f"a chunk of {boxes} boxes failed {MAX_TRIES} times ({type(error).__name__}: {text}); "
                        f"no verdict from a partial search")


class InProcess:
    """The chunks one after another in this process (``--workers 1``; ``fault`` raises, never kills)."""

    def __init__(self, problem: Problem, fault: str | None = None):
        self.problem, self.fault = problem, fault if not (fault or "").endswith(".kill") else None

    def map(self, eps: float, chunks: list[Chunk], task: str = "evaluate") -> list:
        fn = chunk_task(task)
        out = []
        for lo, hi in chunks:
            for tries in range(1, MAX_TRIES + 1):
                try:
                    _maybe_fail(self.fault)
                    out.append(fn(self.problem, eps, lo, hi))
                    break
                except Exception as e:          # noqa: BLE001 -- retried, then reported
                    if tries == MAX_TRIES:
                        raise _gave_up(len(lo), e) from None
        return out

    def close(self) -> None:
        pass


class _Retrying:
    """Submit every chunk, resubmit the failed ones, return the results in chunk order."""

    def _submit(self, eps: float, chunk: Chunk, task: str) -> Any:
        raise NotImplementedError

    def _recover(self) -> None:
        """After a failure: make the executor usable again (a broken pool is replaced)."""

    def map(self, eps: float, chunks: list[Chunk], task: str = "evaluate") -> list:
        results: list[Any] = [None] * len(chunks)
        tries = [0] * len(chunks)
        todo = list(range(len(chunks)))
        while todo:
            futures = {i: self._submit(eps, chunks[i], task) for i in todo}
            failed, errors = [], []
            for i, future in futures.items():
                try:
                    results[i] = future.result()
                except Exception as e:          # noqa: BLE001 -- a lost worker or a failing chunk: resubmitted
                    tries[i] += 1
                    failed.append(i)
                    errors.append(e)
            for i, e in zip(failed, errors):
                if tries[i] >= MAX_TRIES:
                    raise _gave_up(len(chunks[i][0]), e) from None
            if failed:
                self._recover()
            todo = failed
        return results


class Processes(_Retrying):
    """``workers`` spawned processes on this machine (concurrent.futures)."""

    def __init__(self, problem: Problem, workers: int, fault: str | None = None):
        self.workers, self.fault = workers, fault
        self.key, self.blob = _pickled(problem)
        self.pool = self._pool()

    def _pool(self):
        """A pool whose processes are all started now, each with one BLAS thread: ``workers``
        processes that each ran OpenBLAS's default of one thread per core fought over the
        cores in every interval matrix product (the 4-D point robot's search: 44.8 s -> 38.3 s
        on 2 cores, the same boxes)."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        with _environment(SINGLE_THREADED):      # a spawned process copies the environment as it starts
            started = [pool.submit(int, 0) for _ in range(self.workers)]   # one new process per submit
        for future in started:
            future.result()
        return pool

    def _submit(self, eps: float, chunk: Chunk, task: str) -> Any:
        return self.pool.submit(run_chunk, self.key, self.blob, task, eps, chunk[0], chunk[1], self.fault)

    def _recover(self) -> None:
        from concurrent.futures.process import BrokenProcessPool
        try:
            self.pool.submit(int, 0).result()
        except BrokenProcessPool:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = self._pool()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class Dask(_Retrying):
    """The workers of an existing Dask cluster (``scheduler``: its address, tcp://HOST:PORT)."""

    def __init__(self, problem: Problem, scheduler: str, fault: str | None = None):
        import logging
        from distributed import Client
        for name in ("distributed", "tornado"):
            logging.getLogger(name).setLevel(logging.ERROR)
        self.fault = fault
        try:
            self.client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError) as e:
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise CertifyError(f"cannot reach the Dask scheduler at {scheduler}: {reason}") from None
        self.key, blob = _pickled(problem)
        self.blob = self.client.scatter(blob, broadcast=True, hash=False)

    def _submit(self, eps: float, chunk: Chunk, task: str) -> Any:
        return self.client.submit(run_chunk, self.key, self.blob, task, eps, chunk[0], chunk[1], self.fault,
                                  pure=False)

    def close(self) -> None:
        self.client.close()


class Growing:
    """``--workers auto``: this process while the search is small, then one spawned process per
    core once it has spent ``after_s`` seconds evaluating boxes here (a pool takes about a second
    of each core to start, which a search of a few seconds never pays back; counted in boxes,
    the switch came after 20,000 of them, 12-20 s of a 4-D search, on one core).  The rounds'
    chunks do not depend on the runner, so switching runners mid-search changes no number."""

    def __init__(self, problem: Problem, workers: int, after_s: float = AUTO_POOL_AFTER_S):
        self.problem, self.workers, self.after_s = problem, workers, after_s
        self.local, self.pool, self.local_s = InProcess(problem), None, 0.0

    def map(self, eps: float, chunks: list[Chunk], task: str = "evaluate") -> list:
        if self.pool is None and self.local_s >= self.after_s:
            self.pool = Processes(self.problem, self.workers)
        if self.pool is not None:
            return self.pool.map(eps, chunks, task)
        started = time.perf_counter()
        try:
            return self.local.map(eps, chunks, task)
        finally:
            self.local_s += time.perf_counter() - started

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def available_cores() -> int:
    """The cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                  # not Linux
        return os.cpu_count() or 1


def make_runner(problem: Problem, workers: int | str = 1, scheduler: str | None = None, fault: str | None = None):
    """The runner for ``--workers N`` (1: this process), ``--workers auto`` (``Growing``) or
    ``--scheduler ADDRESS`` (Dask)."""
    if workers != AUTO and not (isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1):
        raise CertifyError(f"--workers must be a whole number >= 1 or 'auto', got {workers!r}")
    if scheduler is not None:
        if workers not in (1, AUTO):
            raise CertifyError("--workers and --scheduler exclude each other: the Dask cluster has its own workers")
        return Dask(problem, scheduler, fault)
    if workers == AUTO:
        cores = available_cores()
        return InProcess(problem, fault) if cores == 1 else Growing(problem, cores)
    if workers == 1:
        return InProcess(problem, fault)
    return Processes(problem, workers, fault)
