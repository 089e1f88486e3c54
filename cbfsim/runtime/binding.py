"""ctypes binding of a compiled barrier: numpy in, numpy (float64) out, shapes checked."""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from compiler.emit_cpp import ABI_VERSION
from compiler.errors import ShapeError, ToolchainError

_F64 = np.dtype(np.float64)
_P = ctypes.c_void_p
_I = ctypes.c_int
# One table of C signatures: name -> (restype, argtypes).
SIGNATURES = {
    "cbf_abi_version": (_I, []),
    "cbf_scalar_bytes": (_I, []),
    "cbf_workspace_bytes": (_I, []),
    "cbf_dims": (_I, [ctypes.POINTER(_I)] * 3),
    "cbf_lie": (_I, [_P, _P, _P, _P]),
    "cbf_lie_packed_f64": (_I, [_P, _P]),
    "cbf_lie2_packed_f64": (_I, [_P, _P]),
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
        self._shapes = {"x": (n,), "f": (n,), "G": (n, m), "Dff": (n,), "DfG": (n, m)}
        # Single-state path: the inputs travel as one bytes object (float64 tobytes, concatenated)
        # into a packed entry that converts to the header's scalar in C. Every numpy call, and
        # taking an array's address, costs more from Python than the C call itself.
        self._out = (ctypes.c_double * (3 + 2 * m))()
        self._out_view = np.frombuffer(self._out, dtype=np.float64)
        self._packed1 = self._lib.cbf_lie_packed_f64
        self._packed2 = getattr(self._lib, "cbf_lie2_packed_f64", None)

    def _single(self, names, args, packed, k: int) -> np.ndarray:
        chunks = []
        shapes = self._shapes
        for key, value in zip(names, args):
            # fast path: a float64 array of the right shape (tobytes copies any layout in C order)
            if not (type(value) is np.ndarray and value.dtype is _F64 and value.shape == shapes[key]):
                value = np.asarray(value, dtype=np.float64)
                if value.shape != shapes[key]:
                    raise ShapeError(f"{key} must have shape {shapes[key]}, got {value.shape}")
            chunks.append(value.tobytes())
        packed(b"".join(chunks), self._out)
        return self._out_view[:k].copy()

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

    def _call(self, names, args, packed, batch_fn, k: int):
        first = args[0]
        ndim = first.ndim if type(first) is np.ndarray else np.ndim(first)
        if ndim == 1:
            return self._single(names, args, packed, k)
        if ndim != 2:
            raise ShapeError(f"x must have shape ({self.n},) or (B, {self.n}), got {np.shape(args[0])}")
        return self._batch(names, args, batch_fn, k)

    def lie(self, x, f, G):
        """(h, L_f h, L_G h): floats and (m,) for one state; (B,), (B,), (B, m) for a batch."""
        out = self._call(("x", "f", "G"), (x, f, G), self._packed1, self._lib.cbf_lie_batch, 2 + self.m)
        if out.ndim == 1:
            return out[0], out[1], out[2:]
        return out[:, 0], out[:, 1], out[:, 2:]

    def lie2(self, x, f, G, Dff, DfG):
        """(h, L_f h, L_G h, L_f^2 h, L_G L_f h); Dff = f'(x) f, DfG = f'(x) G."""
        if self.order != 2:
            raise ValueError("this barrier was compiled for order 1; compile with order=2 for lie2")
        m = self.m
        out = self._call(("x", "f", "G", "Dff", "DfG"), (x, f, G, Dff, DfG),
                         self._packed2, self._lib.cbf_lie2_batch, 3 + 2 * m)
        if out.ndim == 1:
            return out[0], out[1], out[2:2 + m], out[2 + m], out[3 + m:]
        return out[:, 0], out[:, 1], out[:, 2:2 + m], out[:, 2 + m], out[:, 3 + m:]
