"""ctypes binding of a compiled barrier: numpy in, numpy (float64) out, shapes checked."""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from compiler.emit_cpp import ABI_VERSION
from compiler.errors import ShapeError, ToolchainError

_F64 = np.dtype(np.float64)
_ND = np.ndarray
_P = ctypes.c_void_p
_I = ctypes.c_int
# One table of C signatures: name -> (restype, argtypes). The single-state float64 entries
# have argtypes None: this module alone calls them, always with bytes objects and the
# c_double output array, which ctypes passes as pointers as they are; declared c_void_p
# arguments would cost 0.25 us more per call in conversions (5 arrays in, 1 out for lie2).
SIGNATURES = {
    "cbf_abi_version": (_I, []),
    "cbf_scalar_bytes": (_I, []),
    "cbf_workspace_bytes": (_I, []),
    "cbf_dims": (_I, [ctypes.POINTER(_I)] * 3),
    "cbf_lie": (_I, [_P, _P, _P, _P]),
    "cbf_lie_f64": (_I, None),    # (x, f, G: float64 bytes, out: c_double array)
    "cbf_lie2_f64": (_I, None),   # (x, f, G, Dff, DfG: float64 bytes, out: c_double array)
    "cbf_lie_batch": (_I, [_I, _P, _P, _P, _P]),
    "cbf_lie2": (_I, [_P] * 6),
    "cbf_lie2_batch": (_I, [_I] + [_P] * 6),
}


class CompiledLie:
    """A loaded barrier library. ``lie``/``lie2`` accept one state (n,) or a batch (B, n).

    Single-state calls reuse preallocated buffers, so one object must not be shared by
    threads calling it concurrently; batch calls allocate their own and are thread safe
    (the library itself is reentrant: each C call uses a workspace on its own stack).
    """

    def __init__(self, library: Path, dtype: str = "float", header_path: Path | None = None, report=None):
        self.library_path = Path(library)
        self.header_path = header_path
        self.report = report
        self._lib = ctypes.CDLL(str(library))
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
        n, m, order = _I(), _I(), _I()
        self._lib.cbf_dims(ctypes.byref(n), ctypes.byref(m), ctypes.byref(order))
        self.n, self.m, self.order = n.value, m.value, order.value
        self.workspace_bytes = self._lib.cbf_workspace_bytes()
        n, m = self.n, self.m
        self._vec_shape, self._mat_shape = vec, mat = (n,), (n, m)
        self._shapes = {"x": vec, "f": vec, "G": mat, "Dff": vec, "DfG": mat}
        # Single-state path, for closed loops that call once per step: float64 arrays of the
        # right shape go as bytes (tobytes, any layout) into float64 entries that convert to
        # the header's scalar in C, and the results come back from one preallocated buffer.
        # Every numpy call, and taking an array's address, costs more from Python than the
        # C call itself (benchmarks/lie.py: 1.1 us per lie call, 1.7 us per lie2 call).
        self._out = (ctypes.c_double * (3 + 2 * m))()
        out_view = np.frombuffer(self._out, dtype=np.float64)
        self._lgh_view = out_view[2:2 + m]          # L_G h
        self._lglfh_view = out_view[3 + m:3 + 2 * m]  # L_G L_f h
        self._lie_f64 = self._lib.cbf_lie_f64
        self._lie2_f64 = getattr(self._lib, "cbf_lie2_f64", None)

    def _single(self, names, args, entry) -> None:
        """The general single-state path: convert, check shapes, call; results in self._out."""
        chunks = []
        for key, value in zip(names, args):
            value = np.asarray(value, dtype=np.float64)
            if value.shape != self._shapes[key]:
                raise ShapeError(f"{key} must have shape {self._shapes[key]}, got {value.shape}")
            chunks.append(value.tobytes())
        entry(*chunks, self._out)

    def _batch(self, names, args, batch_fn, k: int) -> np.ndarray:
        batch = np.shape(args[0])[0]
        arrays = []
        for key, value in zip(names, args):
            arr = np.ascontiguousarray(value, dtype=self.dtype)
            if arr.shape != (batch, *self._shapes[key]):
                raise ShapeError(f"{key} must have shape {(batch, *self._shapes[key])}, got {arr.shape}")
            arrays.append(arr)
        out = np.empty((batch, k), dtype=self.dtype)
        batch_fn(batch, *[a.ctypes.data for a in arrays], out.ctypes.data)
        return out.astype(np.float64)

    def _is_single(self, x) -> bool:
        ndim = x.ndim if type(x) is np.ndarray else np.ndim(x)
        if ndim not in (1, 2):
            raise ShapeError(f"x must have shape ({self.n},) or (B, {self.n}), got {np.shape(x)}")
        return ndim == 1

    def lie(self, x, f, G):
        """(h, L_f h, L_G h): floats and (m,) for one state; (B,), (B,), (B, m) for a batch."""
        out, vec, mat = self._out, self._vec_shape, self._mat_shape
        # fast path (written out: a helper call per array would cost more than the C call)
        if (type(x) is _ND and type(f) is _ND and type(G) is _ND
                and x.dtype is _F64 and f.dtype is _F64 and G.dtype is _F64
                and x.shape == vec and f.shape == vec and G.shape == mat):
            self._lie_f64(x.tobytes(), f.tobytes(), G.tobytes(), out)
        elif self._is_single(x):
            self._single(("x", "f", "G"), (x, f, G), self._lie_f64)
        else:
            res = self._batch(("x", "f", "G"), (x, f, G), self._lib.cbf_lie_batch, 2 + self.m)
            return res[:, 0], res[:, 1], res[:, 2:]
        return out[0], out[1], self._lgh_view.copy()

    def lie2(self, x, f, G, Dff, DfG):
        """(h, L_f h, L_G h, L_f^2 h, L_G L_f h); Dff = f'(x) f, DfG = f'(x) G."""
        if self.order != 2:
            raise ValueError("this barrier was compiled for order 1; compile with order=2 for lie2")
        m, out, vec, mat = self.m, self._out, self._vec_shape, self._mat_shape
        names, args = ("x", "f", "G", "Dff", "DfG"), (x, f, G, Dff, DfG)
        if (type(x) is _ND and type(f) is _ND and type(G) is _ND and type(Dff) is _ND and type(DfG) is _ND
                and x.dtype is _F64 and f.dtype is _F64 and G.dtype is _F64 and Dff.dtype is _F64
                and DfG.dtype is _F64 and x.shape == vec and f.shape == vec and G.shape == mat
                and Dff.shape == vec and DfG.shape == mat):
            self._lie2_f64(x.tobytes(), f.tobytes(), G.tobytes(), Dff.tobytes(), DfG.tobytes(), out)
        elif self._is_single(x):
            self._single(names, args, self._lie2_f64)
        else:
            res = self._batch(names, args, self._lib.cbf_lie2_batch, 3 + 2 * m)
            return res[:, 0], res[:, 1], res[:, 2:2 + m], res[:, 2 + m], res[:, 3 + m:]
        return out[0], out[1], self._lgh_view.copy(), out[2 + m], self._lglfh_view.copy()
