"""Training on a plant with a periodic coordinate: the barrier reads the angle through the
periodic embedding (continuous across the wrap), the exported nn.Sequential starts with the
embedding and equals the trained module, samplers and configs respect the period, and the
card records it."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from compiler.periodic import is_periodic_embedding
from systems import get_system
from training.artifacts import build_card
from training.config import ConfigError, TrainConfig
from training.lie import lie_terms
from training.model_card import CardError, ModelCard
from training.network import MaskedBarrier, export_onnx, to_sequential
from training.samplers import neighbours, system_terms

TWO_PI = 2 * math.pi


def _barrier(mask=(0, 1, 2), seed=0) -> MaskedBarrier:
    car = get_system("dubins")
    lo, hi = car.domain
    return MaskedBarrier(3, list(mask), [16, 16], "softplus", seed=seed, center=(lo + hi) / 2,
                         half_width=(hi - lo) / 2, periodic=car.periodic)


def _states(count: int, seed: int = 0) -> np.ndarray:
    lo, hi = get_system("dubins").domain
    return np.random.default_rng(seed).uniform(lo, hi, size=(count, 3))


def _reference_h(barrier: MaskedBarrier, x: torch.Tensor) -> torch.Tensor:
    """The barrier written out by hand in float64: (p_x, p_y) scaled to the box, theta as (sin, cos)."""
    lo, hi = (torch.as_tensor(v) for v in get_system("dubins").domain)
    feats = {0: [(x[:, 0] - (lo[0] + hi[0]) / 2) / ((hi[0] - lo[0]) / 2)],
             1: [(x[:, 1] - (lo[1] + hi[1]) / 2) / ((hi[1] - lo[1]) / 2)],
             2: [torch.sin(x[:, 2]), torch.cos(x[:, 2])]}
    z = torch.stack([f for i in barrier.mask_list for f in feats[i]], dim=-1)
    net = [layer.double() for layer in barrier.net]
    for layer in net:
        z = layer(z)
    return z.squeeze(-1)


@pytest.mark.parametrize("mask", [(0, 1, 2), (0, 2), (0, 1)])
def test_the_exported_network_starts_with_the_embedding_and_equals_the_torch_barrier(mask):
    barrier = _barrier(mask)
    seq = to_sequential(barrier, torch.float64)
    assert is_periodic_embedding(seq[0]) and seq[0].periods == {2: TWO_PI}
    first = seq[1]
    assert isinstance(first, torch.nn.Linear) and first.in_features == 4       # (p_x, p_y, sin, cos)
    dropped = [c for i, cols in ((0, [0]), (1, [1]), (2, [2, 3])) if i not in mask for c in cols]
    assert all(torch.all(first.weight[:, c] == 0) for c in dropped)            # masked states: zero columns
    x = torch.as_tensor(_states(256), dtype=torch.float64)
    want = _reference_h(barrier, x)
    torch.testing.assert_close(seq(x).squeeze(-1), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(barrier.double().h(x), want, rtol=1e-12, atol=1e-12)


def test_the_barrier_and_its_lie_derivatives_are_the_same_one_period_on():
    """h(x) = h(x + 2 pi e_theta) and so are L_f h and L_G h (f and G repeat too): the network
    cannot tell a wrapped state from an unwrapped one."""
    car = get_system("dubins")
    barrier = _barrier().double()
    x = _states(128, seed=1)
    shifted = x.copy()
    shifted[:, 2] += TWO_PI * np.random.default_rng(2).integers(-3, 4, len(x))
    out = []
    for states in (x, shifted):
        t = system_terms(car, states, 1)
        terms = lie_terms(barrier, torch.as_tensor(states), torch.as_tensor(t["f"]), torch.as_tensor(t["G"]), 1,
                          create_graph=False)
        out.append([terms.h.detach(), terms.Lf.detach(), terms.LG.detach()])
    for a, b in zip(*out):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_a_barrier_without_periodic_coordinates_exports_as_before():
    car = get_system("van_der_pol")
    lo, hi = car.domain
    barrier = MaskedBarrier(2, [0, 1], [8], "softplus", seed=0, center=(lo + hi) / 2, half_width=(hi - lo) / 2,
                            periodic=car.periodic)
    seq = to_sequential(barrier)
    assert isinstance(seq[0], torch.nn.Linear) and seq[0].in_features == 2
    assert barrier.embedding is None and barrier.embedded_width == 2


def test_the_exported_onnx_graph_computes_the_barrier(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    barrier = _barrier()
    seq = to_sequential(barrier, torch.float32)
    path = export_onnx(seq, tmp_path / "dubins.onnx", 3)
    x = _states(64, seed=3).astype(np.float32)
    got = ort.InferenceSession(str(path)).run(None, {"x": x})[0].reshape(-1)
    want = _reference_h(barrier, torch.as_tensor(x, dtype=torch.float64)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_neighbours_of_a_state_at_the_seam_wrap_around_instead_of_piling_on_the_edge():
    car = get_system("dubins")
    lo, hi = car.domain
    x = np.array([[1.0, 1.0, math.pi - 1e-3], [1.0, 1.0, -math.pi + 1e-3]])
    near = neighbours(np.random.default_rng(0), x, 500, lo, hi, rel_sigma=0.05, periodic=car.periodic)
    th = near[2:, 2]
    assert np.all(th >= -math.pi) and np.all(th < math.pi)
    assert np.mean(th > 0) == pytest.approx(0.5, abs=0.1)       # both sides of the seam, evenly
    assert np.sum(np.isin(th, [lo[2], hi[2]])) == 0               # nothing clipped onto the edge
    plain = neighbours(np.random.default_rng(0), x, 500, lo, hi, rel_sigma=0.05)
    assert np.sum(np.isin(plain[2:, 2], [lo[2], hi[2]])) > 100    # (clipping would pile them there)


def test_a_training_box_that_does_not_span_the_period_is_refused_naming_the_coordinate():
    car = get_system("dubins")
    cfg = TrainConfig(system="dubins", domain_lo=[-3.5, -3.5, -1.0], domain_hi=[3.5, 3.5, 1.0])
    with pytest.raises(ConfigError, match=r"^domain_lo/domain_hi: 'theta' \(coordinate 2\) is periodic"):
        cfg.resolve(car)
    shifted = TrainConfig(system="dubins", domain_lo=[-3.5, -3.5, 0.0], domain_hi=[3.5, 3.5, TWO_PI])
    with pytest.raises(ConfigError, match="one period"):
        shifted.resolve(car)
    TrainConfig(system="dubins").resolve(car)


def test_the_model_card_records_the_periods_and_refuses_a_bad_record():
    car = get_system("dubins")
    cfg = TrainConfig(system="dubins", hidden=[32, 32], activation="softplus")
    card = build_card(cfg, car, cfg.resolve(car), {})
    assert card.network["periodic"] == {"2": TWO_PI} and card.network["embedded_width"] == 4
    assert card.network["widths"] == [3, 32, 32, 1] and card.network["trained_widths"] == [4, 32, 32, 1]
    ModelCard.from_json(card.to_json())
    for bad, match in (({"5": 1.0}, "not a state index"), ({"2": -1.0}, "must be a period > 0")):
        data = card.to_dict()
        data["network"]["periodic"] = bad
        with pytest.raises(CardError, match=match):
            ModelCard.from_dict(data)
    data = card.to_dict()
    data["network"]["embedded_width"] = 3
    with pytest.raises(CardError, match="embedded_width must be 4"):
        ModelCard.from_dict(data)
    vdp = get_system("van_der_pol")
    vcfg = TrainConfig(system="van_der_pol")
    assert "periodic" not in build_card(vcfg, vdp, vcfg.resolve(vdp), {}).network


def test_the_torch_reference_barrier_reads_the_state_width_from_the_embedding():
    from cbfsim.barriers import TorchBarrier
    car = get_system("dubins")
    barrier = _barrier()
    ref = TorchBarrier(to_sequential(barrier, torch.float64), m=1)
    assert ref.n == 3
    x = _states(16, seed=7)
    np.testing.assert_allclose(ref.value(x), _reference_h(barrier, torch.as_tensor(x)).detach().numpy(),
                               rtol=1e-12, atol=1e-12)
    t = system_terms(car, x, 1)
    terms = ref.lie(x, t["f"], t["G"])
    want = lie_terms(barrier.double(), torch.as_tensor(x), torch.as_tensor(t["f"]), torch.as_tensor(t["G"]), 1,
                     create_graph=False)
    np.testing.assert_allclose(terms.Lf, want.Lf.detach().numpy(), rtol=1e-10, atol=1e-12)
