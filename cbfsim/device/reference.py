"""The float64 side of every device comparison: cbfsim's simulator on the firmware's closed
loop with the network through the reference interpreter, a hand-set demo barrier, and the
comparison numbers."""
from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..filters.base import check_margin
from .config import Generated, RunConfig, compiled_source, f32
from .protocol import STATUS_NAMES, DeviceLog


def polygon_disk_barrier(radius: float = 1.4, widths: tuple[int, int] = (64, 64), seed: int = 0):
    """A 2-64-64-1 ReLU network (``training.architectures.mlp``) with hand-set weights:
    h(x) = radius - s * sum_k |w_k . x| over K = widths[0]/2 directions w_k evenly spread
    over [0, pi), which is radius - ||x|| up to a ripple of ~1e-3 (a 64-gon). A stand-in
    with a known safe region until the trained model exists; the hidden 64x64 layer is the
    identity (relu(relu(z)) = relu(z)), so the network costs what a trained one costs."""
    import torch
    from training.architectures import mlp

    h1, h2 = widths
    if h1 % 2 or h2 != h1:
        raise ValueError(f"widths must be (2K, 2K), got {widths}")
    k = h1 // 2
    net = mlp([2, h1, h2, 1], "relu", seed=seed)
    theta = torch.arange(k, dtype=torch.float64) * (np.pi / k)
    w = torch.stack([torch.cos(theta), torch.sin(theta)], dim=1)
    with torch.no_grad():
        net[0].weight.copy_(torch.cat([w, -w]).float())
        net[0].bias.zero_()
        net[2].weight.copy_(torch.eye(h1))
        net[2].bias.zero_()
        net[4].weight.fill_(-np.pi / (2 * k))     # mean of sum_k |cos| is 2K/pi
        net[4].bias.fill_(radius)
    return net


def polygon_demo_config(*, system: str | None = None, x0: Any = None, nominal: str | None = None,
                        order: int | None = None, alpha: Any = None, **options: Any) -> RunConfig:
    """The demo barrier's run (it has no model card): RunConfig's VdP defaults, with what is
    given (None: not given) on top."""
    demo = RunConfig()
    return RunConfig(system=system or demo.system, x0=tuple(x0 or demo.x0), nominal=nominal or demo.nominal,
                     order=order or demo.order, alpha=tuple(alpha or demo.alpha), **options)


class ReferenceBarrier:
    """The compiled network's IR evaluated in float64 by ``compiler.reference``, as a cbfsim
    ``Barrier``: the same network as the device's float32 header, computed independently."""

    def __init__(self, model: Any, m: int, order: int):
        self.model, self.n, self.m, self.order = model, int(model.input_dim), int(m), int(order)

    def value(self, x: np.ndarray) -> np.ndarray:
        from compiler import reference as ref
        return ref.value(self.model, x)

    def lie(self, x: np.ndarray, F: np.ndarray, G: np.ndarray):
        from cbfsim.barriers import LieTerms
        from compiler import reference as ref
        return LieTerms(*ref.lie(self.model, x, F, G))

    def lie2(self, x: np.ndarray, F: np.ndarray, G: np.ndarray, Dff: np.ndarray, DfG: np.ndarray):
        from cbfsim.barriers import LieTerms2
        from compiler import reference as ref
        return LieTerms2(*ref.lie2(self.model, x, F, G, Dff, DfG))


@dataclass
class ReferenceRun:
    x: np.ndarray       # (N+1, n)
    u_nom: np.ndarray   # (N, m)
    u: np.ndarray
    h: np.ndarray       # (N,)
    status: np.ndarray  # (N,) FilterStatus codes, as the firmware logs them
    trajectory: Any     # the cbfsim.trajectory.Trajectory (batch of one)


def reference_run(generated_or_model: Any, config: RunConfig) -> ReferenceRun:
    """The firmware's closed loop with cbfsim's simulator in float64: RK4 with zero-order
    hold, the exact projection filter (least-violation input when infeasible, as on the
    device) and the network through the float64 reference interpreter. Constants are the
    float32 values the device uses, so both simulate the same problem. With k > 1 rows (a
    Generated with extra barriers) the filter is the Python CBFQP with the device's rho and
    h is the smallest barrier value, as the device logs it. With face rows (config.faces) the
    filter is the Python CBFQP / HOCBFQP with those faces at the device's price."""
    from cbfsim.classk import Linear
    from cbfsim.filters import CBFProjection, HOCBFQP
    from cbfsim.simulate import simulate

    from cbfsim.barriers import BarrierStack
    from cbfsim.filters import CBFQP

    generated = generated_or_model if isinstance(generated_or_model, Generated) else None
    compiled = generated.compiled if generated is not None else compiled_source(generated_or_model, config)
    system = config.plant()
    bounds = (system.u_min.astype(np.float32), system.u_max.astype(np.float32))
    a1, a2 = (f32(a) for a in config.alphas)
    # the device's float32 box, margin and safe input; the plant's controllers for a backup
    fallback = replace(config.fallback, u_safe=tuple(f32(v) for v in config.fallback.safe_input(*bounds)))
    plant = SimpleNamespace(u_min=bounds[0], u_max=bounds[1], nominal=system.nominal)
    margin = check_margin(config.margin)
    margin = margin.with_eps(f32(margin.eps))
    barrier: Any = ReferenceBarrier(compiled.model, system.m, config.order)
    if generated is not None and generated.rows > 1:
        # k > 1 rows: the Python CBFQP / HOCBFQP (OSQP + exact refinement) on the same P_rho as
        # the device's generated solver (its rho), one reference barrier per row
        k, rho = generated.rows, generated.qp.slack_penalty
        barrier = BarrierStack(ReferenceBarrier(c.model, system.m, config.order) for c in generated.compiled_rows)
        if config.order == 1:
            filt = CBFQP(plant, Linear(a1), n_barriers=k, slack_penalty=rho, margin=margin,
                         fallback=fallback)
        else:
            filt = HOCBFQP(plant, Linear(a1), Linear(a2), n_barriers=k, slack_penalty=rho, margin=margin,
                           fallback=fallback)
    elif config.faces:
        # the certificate's face rows: the Python CBFQP / HOCBFQP with faces (OSQP + exact
        # refinement) at the device's price, on the float32 face constants the device stores
        from ..face_rows import FACE_SLACK_PENALTY, float32_faces
        plant = SimpleNamespace(u_min=bounds[0], u_max=bounds[1], nominal=system.nominal, f=system.f, G=system.G)
        faces = float32_faces(config.faces)
        filt = (CBFQP(plant, Linear(a1), slack_penalty=FACE_SLACK_PENALTY, margin=margin, fallback=fallback, faces=faces)
                if config.order == 1 else
                HOCBFQP(plant, Linear(a1), Linear(a2), slack_penalty=FACE_SLACK_PENALTY, margin=margin,
                        fallback=fallback, faces=faces))
    elif config.order == 1:
        filt = CBFProjection(plant, Linear(a1), slack_penalty=np.inf, margin=margin, fallback=fallback)
    else:
        filt = HOCBFQP(plant, Linear(a1), Linear(a2), solver="projection", slack_penalty=np.inf,
                       margin=margin, fallback=fallback)
    dt = f32(config.dt)
    traj = simulate(system, barrier, filt, config.nominal,
                    np.array([f32(v) for v in config.x0]), t_final=config.steps * dt, dt_control=dt,
                    dt_int=dt / config.substeps).single()
    return ReferenceRun(traj.x[0], traj.u_nom[0], traj.u[0], traj.h[0, :-1], traj.status[0], traj)


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| over matching rows (the shorter run decides the length)."""
    k = min(len(a), len(b))
    return float(np.max(np.abs(np.asarray(a[:k]) - np.asarray(b[:k])))) if k else float("nan")


def bit_identical(a: DeviceLog, b: DeviceLog) -> bool:
    """Whether two runs logged the same float32 bits everywhere, a NaN matching any NaN.

    IEEE 754 leaves a NaN's sign and payload to the hardware: x86 SSE makes the negative
    default NaN 0xffc00000 where the Cortex-M FPU makes 0x7fc00000, so a faulted run's NaNs
    differ in bits between host and device while meaning the same thing. Every other word,
    +0 and -0 included, must match exactly."""
    if a.bits.shape != b.bits.shape:
        return False
    nan_both = np.isnan(a.bits.view(np.float32)) & np.isnan(b.bits.view(np.float32))
    return bool(np.all((a.bits == b.bits) | nan_both))


def summary(log: DeviceLog, ref: ReferenceRun) -> dict[str, Any]:
    """Per-target comparison numbers (JSON-friendly)."""
    return {"port": log.port, "steps": int(len(log.u)), "max_abs_dx": max_abs_diff(log.x, ref.x),
            "max_abs_du": max_abs_diff(log.u, ref.u), "min_h_device": float(np.min(log.h)) if len(log.h) else None,
            "status_counts": {name: int(np.sum(log.status == code)) for code, name in enumerate(STATUS_NAMES)}}
