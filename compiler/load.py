"""ctypes binding of a compiled barrier: numpy in, numpy (float64) out, shapes checked.

Single-state calls with float64 arrays (what a closed loop makes once per step) go through
one call of a small CPython extension (``compiler.fastcall``) into the library's float64
entry: about 0.5 us for the bicycle instead of 1.5 us through ctypes. Everything else (other
dtypes, lists, non-contiguous arrays, batches, wrong shapes) takes the ctypes paths below,
which convert or refuse with a ShapeError; so does every call when the extension cannot be
built. Both reach the same C function, so the same bits. Non-finite inputs give NaN outputs
on every path (the header's own input check).

Safe to share between threads (ctypes and the extension release the GIL during each C call):
every call gets its own output buffer, and its own workspace -- on the entry's stack when it
is at most ``emit_abi.STACK_WORKSPACE_BYTES``, else one buffer per thread allocated here (a
thread runs one C call at a time, so the buffer is never used by two calls at once).
"""
from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import numpy as np

from . import fastcall
from .emit_abi import ABI_VERSION, NEEDS_WORKSPACE, SIGNATURES, STACK_WORKSPACE_BYTES
from .errors import ShapeError, ToolchainError

_F64 = np.dtype(np.float64)
_ND = np.ndarray
_F64_BYTES = 8


class CompiledLie:
    """A loaded barrier library. ``lie``/``lie2`` accept one state (n,) or a batch (B, n)."""

    def __init__(self, library: Path, dtype: str = "float", header_path: Path | None = None, report=None,
                 use_extension: bool = True):
        self.library_path = Path(library)
        self.header_path = header_path
        self.report = report
        self._lib = ctypes.CDLL(str(library))
        if not hasattr(self._lib, "cbf_abi_version"):
            raise ToolchainError(f"{library}: not a compiled barrier (no cbf_abi_version); recompile")
        for fname, (restype, argtypes) in SIGNATURES.items():
            fn = getattr(self._lib, fname, None)
            if fn is not None:
                fn.restype, fn.argtypes = restype, argtypes
        version = self._lib.cbf_abi_version()
        if version != ABI_VERSION:
            raise ToolchainError(f"{library}: ABI version {version}, this runtime expects {ABI_VERSION}; recompile")
        self.dtype = np.dtype(np.float32 if dtype == "float" else np.float64)
        if self._lib.cbf_scalar_bytes() != self.dtype.itemsize:
            raise ToolchainError(f"{library}: scalar is {self._lib.cbf_scalar_bytes()} bytes, expected {dtype}")
        n, m, order = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        self._lib.cbf_dims(ctypes.byref(n), ctypes.byref(m), ctypes.byref(order))
        self.n, self.m, self.order = n.value, m.value, order.value
        self.workspace_bytes = int(self._lib.cbf_workspace_bytes())
        n, m = self.n, self.m
        self._vec_shape, self._mat_shape = vec, mat = (n,), (n, m)
        self._shapes = {"x": vec, "f": vec, "G": mat, "Dff": vec, "DfG": mat}
        # Scratch memory: None lets the entry use its stack; above the limit, one buffer per thread.
        self._own_workspace = self.workspace_bytes > STACK_WORKSPACE_BYTES
        self._per_thread = threading.local()
        # ctypes single-state path (what the extension hands back, and what runs without it):
        # float64 arrays of the right shape go as bytes (tobytes, any layout) into float64 entries that convert to
        # the header's scalar in C. Each call takes a free output buffer from a list (pop and
        # append are atomic under the GIL) and puts it back after copying the results out, so
        # no two calls ever share one: 0.06 us instead of 0.2 us for a fresh ctypes array and
        # numpy views of it. (One shared buffer gave threads each other's results.)
        # Every numpy call, and taking an array's address, costs more from Python than the
        # C call itself (bicycle: about 1.5 us per call against 0.5 us through the extension).
        self._lie_out = ctypes.c_double * (2 + m)
        self._lie2_out = ctypes.c_double * (3 + 2 * m)
        self._lie_buffers: list[tuple] = []      # free output buffers (+ views) of the fast paths
        self._lie2_buffers: list[tuple] = []
        self._lie_f64 = getattr(self._lib, "cbf_lie_f64", None)
        self._lie2_f64 = getattr(self._lib, "cbf_lie2_f64", None)
        # The fast paths check shapes against these; (-1,) (no array has it) turns a path off
        # without another test per call, when the library has no float64 entry (emitted only
        # when the entry's buffers and workspace fit its stack).
        self._lie_vec = vec if self._lie_f64 is not None else (-1,)
        self._lie2_vec = vec if self._lie2_f64 is not None else (-1,)
        # What lie/lie2 call: until the first single state, a setup that then picks the
        # extension's entry (built then, so batch-only users never build it) or the ctypes path.
        self._use_extension = use_extension
        self._lie_call = self._lie_first
        self._lie2_call = self._lie2_first if self.order == 2 else self._lie2_refused

    def _entry(self, order: int):
        """The extension's Entry for ``lie``/``lie2`` (order 1/2), or the ctypes path when the
        library has no float64 entry, the outputs are too many, or the extension is unavailable."""
        ctypes_path = self._lie_ctypes if order == 1 else self._lie2_ctypes
        fn = self._lie_f64 if order == 1 else self._lie2_f64
        entry_type = fastcall.entry_type() if self._use_extension and fn is not None else None
        if entry_type is None or 3 + 2 * self.m > entry_type.max_outputs:
            return ctypes_path
        return entry_type(ctypes.cast(fn, ctypes.c_void_p).value, order, self.n, self.m, ctypes_path, self._lib)

    def _lie_first(self, x, f, G):
        if np.ndim(x) == 1:             # batches never need the extension: no build for them
            self._lie_call = self._entry(1)
            return self._lie_call(x, f, G)
        return self._lie_ctypes(x, f, G)

    def _lie2_first(self, x, f, G, Dff, DfG):
        if np.ndim(x) == 1:
            self._lie2_call = self._entry(2)
            return self._lie2_call(x, f, G, Dff, DfG)
        return self._lie2_ctypes(x, f, G, Dff, DfG)

    @staticmethod
    def _lie2_refused(*args):
        raise ValueError("this barrier was compiled for order 1; compile with order=2 for lie2")

    @property
    def single_state_path(self) -> str:
        """"extension", or "ctypes" and why: the path one state of float64 arrays takes through
        ``lie`` (sets the path up, building the extension if needed)."""
        if self._lie_call == self._lie_first:
            self._lie_call = self._entry(1)
        if self._lie_call != self._lie_ctypes:
            return "extension"
        why = ("no float64 entry (outputs above the stack limit)" if self._lie_f64 is None else
               "use_extension=False" if not self._use_extension else
               fastcall.unavailable_reason() or "too many outputs for the extension")
        return f"ctypes ({why})"

    def _new_buffers(self, out_type) -> tuple:
        """A fresh output array and numpy views of its L_G h (and L_G L_f h) parts."""
        out, m = out_type(), self.m
        views = [np.frombuffer(out, _F64, m, 16)]
        if out_type is self._lie2_out:
            views.append(np.frombuffer(out, _F64, m, _F64_BYTES * (3 + m)))
        return (out, *views)

    def _workspace_buffer(self):
        """None (the entry's own stack), or this thread's buffer of ``workspace_bytes``."""
        if not self._own_workspace:
            return None
        try:
            return self._per_thread.buffer
        except AttributeError:
            doubles = -(-self.workspace_bytes // _F64_BYTES)       # double-aligned, whole scalars
            buffer = self._per_thread.buffer = (ctypes.c_double * doubles)()
            return buffer

    def _single(self, names, args, entry, out_type, batch_fn):
        """The general single-state path: convert, check shapes, call; returns the output array."""
        arrays = []
        for key, value in zip(names, args):
            value = np.asarray(value, dtype=np.float64)
            if value.shape != self._shapes[key]:
                raise ShapeError(f"{key} must have shape {self._shapes[key]}, got {value.shape}")
            arrays.append(value)
        if entry is None:        # no float64 entry (inputs above the stack limit): a batch of one
            return self._batch(names, [a[None] for a in arrays], batch_fn, out_type._length_)[0]
        out = out_type()
        entry(*[a.tobytes() for a in arrays], out)
        return np.frombuffer(out, dtype=np.float64)

    def _batch(self, names, args, batch_fn, k: int) -> np.ndarray:
        batch = np.shape(args[0])[0]
        arrays = []
        for key, value in zip(names, args):
            arr = np.ascontiguousarray(value, dtype=self.dtype)
            if arr.shape != (batch, *self._shapes[key]):
                raise ShapeError(f"{key} must have shape {(batch, *self._shapes[key])}, got {arr.shape}")
            arrays.append(arr)
        out = np.empty((batch, k), dtype=self.dtype)
        status = batch_fn(batch, *[a.ctypes.data for a in arrays], out.ctypes.data, self._workspace_buffer())
        if status == NEEDS_WORKSPACE:      # only if this binding and the library disagree on the limit
            raise ToolchainError(f"{self.library_path}: the library needs workspace memory from the caller")
        return out.astype(np.float64)

    def _is_single(self, x) -> bool:
        ndim = x.ndim if type(x) is np.ndarray else np.ndim(x)
        if ndim not in (1, 2):
            raise ShapeError(f"x must have shape ({self.n},) or (B, {self.n}), got {np.shape(x)}")
        return ndim == 1

    def lie(self, x, f, G):
        """(h, L_f h, L_G h): floats and (m,) for one state; (B,), (B,), (B, m) for a batch."""
        return self._lie_call(x, f, G)

    def lie2(self, x, f, G, Dff, DfG):
        """(h, L_f h, L_G h, L_f^2 h, L_G L_f h); Dff = f'(x) f, DfG = f'(x) G."""
        return self._lie2_call(x, f, G, Dff, DfG)

    def _lie_ctypes(self, x, f, G):
        """``lie`` through ctypes: every call the extension does not take."""
        # fast path: float64 arrays of the right shapes (written out: a helper call per array
        # would cost more than the C call; anything without .dtype/.shape goes the general way)
        try:
            fast = x.dtype is f.dtype is G.dtype is _F64 and x.shape == f.shape == self._lie_vec \
                and G.shape == self._mat_shape
        except AttributeError:
            fast = False
        if fast:
            free = self._lie_buffers
            try:
                buffers = free.pop()
            except IndexError:
                buffers = self._new_buffers(self._lie_out)
            out, lgh = buffers
            self._lie_f64(x.tobytes(), f.tobytes(), G.tobytes(), out)
            result = out[0], out[1], lgh.copy()
            free.append(buffers)
            return result
        names, args = ("x", "f", "G"), (x, f, G)
        if self._is_single(x):
            res = self._single(names, args, self._lie_f64, self._lie_out, self._lib.cbf_lie_batch)
            return float(res[0]), float(res[1]), res[2:]
        res = self._batch(names, args, self._lib.cbf_lie_batch, 2 + self.m)
        return res[:, 0], res[:, 1], res[:, 2:]

    def _lie2_ctypes(self, x, f, G, Dff, DfG):
        """``lie2`` through ctypes (order 2 only: ``lie2`` refuses order 1 before)."""
        try:
            vec, mat = self._lie2_vec, self._mat_shape
            fast = x.dtype is f.dtype is G.dtype is Dff.dtype is DfG.dtype is _F64 \
                and x.shape == f.shape == Dff.shape == vec and G.shape == DfG.shape == mat
        except AttributeError:
            fast = False
        m = self.m
        if fast:
            free = self._lie2_buffers
            try:
                buffers = free.pop()
            except IndexError:
                buffers = self._new_buffers(self._lie2_out)
            out, lgh, lglfh = buffers
            self._lie2_f64(x.tobytes(), f.tobytes(), G.tobytes(), Dff.tobytes(), DfG.tobytes(), out)
            result = out[0], out[1], lgh.copy(), out[2 + m], lglfh.copy()
            free.append(buffers)
            return result
        names, args = ("x", "f", "G", "Dff", "DfG"), (x, f, G, Dff, DfG)
        if self._is_single(x):
            res = self._single(names, args, self._lie2_f64, self._lie2_out, self._lib.cbf_lie2_batch)
            return float(res[0]), float(res[1]), res[2:2 + m], float(res[2 + m]), res[3 + m:]
        res = self._batch(names, args, self._lib.cbf_lie2_batch, 3 + 2 * m)
        return res[:, 0], res[:, 1], res[:, 2:2 + m], res[:, 2 + m], res[:, 3 + m:]
