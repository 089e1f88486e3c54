"""Face rows in the compiled filter: the constants that carry a certificate's enforced faces of D
(training/certify/faces.py) into ``cbf_config.hpp``, for firmware/common/step.hpp's face branch
and its exact filter (firmware/common/face_filter.hpp).

Why: a closed certificate (no "while in D" clause) holds only for a filter that enforces the
faces' rows next to the barrier's; the Python filters do (``RowFilter(faces=...)``), and so must
the compiled engine and the firmware, or their runs are outside the claim. The C filter solves
the Python filters' problem P_rho with their price ``FACE_SLACK_PENALTY``.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

#: The slack price rho of the face filter: the Python CBFQP / HOCBFQP default, so that the
#: compiled filter and the Python one solve the same P_rho where rows conflict.
FACE_SLACK_PENALTY = 1e6


def check_faces(faces: Sequence[Any], n: int) -> None:
    """Every face names a state coordinate < n, a side of +-1 and float32-representable numbers
    (gamma, margin > 0): else ValueError naming the face."""
    from .device.config import check_float32
    for face in faces:
        label = getattr(face, "label", repr(face))
        if not all(hasattr(face, k) for k in ("coord", "side", "bound", "gamma", "margin")):
            raise ValueError(f"faces must be training.certify.faces.Face rows, got {face!r}")
        if not 0 <= int(face.coord) < n or face.side not in (1, -1):
            raise ValueError(f"face {label}: coordinate {face.coord} / side {face.side} is not one of this plant's faces")
        check_float32(f"face {label} bound, gamma, margin", (face.bound, face.gamma, face.margin))
        if not (face.gamma > 0 and face.margin > 0):
            raise ValueError(f"face {label}: gamma and margin must be > 0, got {face.gamma}, {face.margin}")


def face_lines(faces: Sequence[Any]) -> str:
    """The face constants of cbf_config.hpp (namespace cbf_config), one entry per face row."""
    from .device.config import _cpp_float, _cpp_floats
    k = len(faces)
    return (f"\n// {k} enforced face rows of D (training/certify/faces.py): c(x) = side (bound - x_coord) >= 0,\n"
            f"// row  -side f_coord - side G_coord.u + gamma c(x) >= margin  (step.hpp face_rows)\n"
            f"inline constexpr int kFaceRows = {k};\n"
            f"inline constexpr int kFaceCoord[{k}] = {{{', '.join(str(int(f.coord)) for f in faces)}}};\n"
            f"inline constexpr float kFaceSide[{k}] = {_cpp_floats([float(f.side) for f in faces])};\n"
            f"inline constexpr float kFaceBound[{k}] = {_cpp_floats([f.bound for f in faces])};\n"
            f"inline constexpr float kFaceGamma[{k}] = {_cpp_floats([f.gamma for f in faces])};\n"
            f"inline constexpr float kFaceMargin[{k}] = {_cpp_floats([f.margin for f in faces])};\n"
            f"inline constexpr float kFaceSlackPenalty = {_cpp_float(FACE_SLACK_PENALTY)};\n")


def with_faces(text: str, faces: Sequence[Any]) -> str:
    """cbf_config.hpp's text with the face rows: ``#define CBF_FACES k`` and the constants."""
    if not faces:
        return text
    text = text.replace("#define CBF_CONFIG_HPP\n", f"#define CBF_CONFIG_HPP\n#define CBF_FACES {len(faces)}\n", 1)
    return text.replace("\n}  // namespace cbf_config\n", face_lines(faces) + "\n}  // namespace cbf_config\n", 1)


def float32_faces(faces: Sequence[Any]) -> tuple:
    """The faces with the float32 numbers the device stores (for a float64 reference of the same problem)."""
    import dataclasses
    f32 = lambda v: float(np.float32(v))     # noqa: E731
    return tuple(dataclasses.replace(f, bound=f32(f.bound), gamma=f32(f.gamma), margin=f32(f.margin)) for f in faces)
