"""ctypes binding of a compiled barrier: numpy in, numpy (float64) out, shapes checked."""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from compiler.emit_cpp import ABI_VERSION
from compiler.errors import ShapeError, ToolchainError

_P = ctypes.c_void_p
_I = ctypes.c_int
# One table of C signatures: name -> (restype, argtypes).
SIGNATURES = {
    "cbf_abi_version": (_I, []),
    "cbf_scalar_bytes": (_I, []),
    "cbf_workspace_bytes": (_I, []),
    "cbf_dims": (_I, [ctypes.POINTER(_I)] * 3),
    "cbf_lie": (_I, [_P, _P, _P, _P]),
    "cbf_lie_batch": (_I, [_I, _P, _P, _P, _P]),
    "cbf_lie2": (_I, [_P] * 6),
    "cbf_lie2_batch": (_I, [_I] + [_P] * 6),
}


class CompiledLie:
    """A loaded barrier library. ``lie``/``lie2`` accept one state (n,) or a batch (B, n).

    Single-state calls reuse preallocated buffers, so one object must not be shared by
    threads calling it concurrently; batch calls allocate their own and are thread safe.
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
        k1, k2 = 2 + self.m, 3 + 2 * self.m
        self._single = {key: np.zeros(size, dtype=self.dtype) for key, size in
                        (("x", self.n), ("f", self.n), ("G", self.n * self.m), ("Dff", self.n),
                         ("DfG", self.n * self.m), ("out", max(k1, k2)))}
        self._addr = {key: buf.ctypes.data for key, buf in self._single.items()}

    def _batch(self, value, shape_tail: tuple[int, ...], what: str, batch: int | None) -> np.ndarray:
        arr = np.asarray(value)
        expected = (batch, *shape_tail) if batch is not None else shape_tail
        if arr.shape != expected:
            raise ShapeError(f"{what} must have shape {expected}, got {arr.shape}")
        return np.ascontiguousarray(arr, dtype=self.dtype)

    def _call(self, names: list[str], args: list, single_fn, batch_fn, k: int):
        x = np.asarray(args[0])
        shapes = {"x": (self.n,), "f": (self.n,), "G": (self.n, self.m), "Dff": (self.n,), "DfG": (self.n, self.m)}
        if x.ndim == 1:
            buffers = self._single
            for key, value in zip(names, args):
                value = np.asarray(value)
                if value.shape != shapes[key]:
                    raise ShapeError(f"{key} must have shape {shapes[key]}, got {value.shape}")
                buffers[key][:] = value.reshape(-1)
            single_fn(*[self._addr[key] for key in names], self._addr["out"])
            return buffers["out"][:k].astype(np.float64)
        if x.ndim != 2:
            raise ShapeError(f"x must have shape ({self.n},) or (B, {self.n}), got {x.shape}")
        batch = x.shape[0]
        arrays = [self._batch(v, shapes[key], key, batch) for key, v in zip(names, args)]
        out = np.empty((batch, k), dtype=self.dtype)
        batch_fn(batch, *[a.ctypes.data for a in arrays], out.ctypes.data)
        return out.astype(np.float64)

    def lie(self, x, f, G):
        """(h, L_f h, L_G h): floats and (m,) for one state; (B,), (B,), (B, m) for a batch."""
        out = self._call(["x", "f", "G"], [x, f, G], self._lib.cbf_lie, self._lib.cbf_lie_batch, 2 + self.m)
        return out[..., 0], out[..., 1], out[..., 2:]

    def lie2(self, x, f, G, Dff, DfG):
        """(h, L_f h, L_G h, L_f^2 h, L_G L_f h); Dff = f'(x) f, DfG = f'(x) G."""
        if self.order != 2:
            raise ValueError("this barrier was compiled for order 1; compile with order=2 for lie2")
        m = self.m
        out = self._call(["x", "f", "G", "Dff", "DfG"], [x, f, G, Dff, DfG],
                         self._lib.cbf_lie2, self._lib.cbf_lie2_batch, 3 + 2 * m)
        return out[..., 0], out[..., 1], out[..., 2:2 + m], out[..., 2 + m], out[..., 3 + m:]
