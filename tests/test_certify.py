"""The certifier proves a valid barrier, and refuses planted failures with confirmed counterexamples.

The barriers are tiny exact softplus networks for Van der Pol (|u| <= 2): a smooth
parallelogram h = r - sum_k softabs(v_k . x), softabs(z) = (softplus(b z) + softplus(-b z)) / b,
whose CBF condition holds with room (min over C of sup_u hdot + h is about 0.39).  Every
verdict is checked against references the certifier does not use: torch float64 autograd of
the exported network, scipy's adaptive ODE solver, and seeded uniform samples.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from training.certify import certify  # noqa: E402

VDP_CARD = Path(__file__).resolve().parent.parent / "experiments" / "models" / "vdp.json"
MU, U_MAX, GAMMA = 1.0, 2.0, 1.0
BETA, TILT, RADIUS = 3.0, 0.5, 1.4
MARGIN = 0.3
SHARP_MARGIN = 0.1
NOTCH_AT, NOTCH_WIDTH, NOTCH_RISE, NOTCH_HEIGHT = 0.3, 1e-6, 1e-6, 0.05


def _diamond_layers(extra_rows=(), extra_bias=(), extra_out=(), beta=BETA, radius=RADIUS):
    """Linear(2, k) -> Softplus -> Linear(k, 1): the parallelogram plus optional extra units."""
    v = np.array([[1.0, 0.0], [TILT, 1.0]])
    rows = np.concatenate([v, -v]) * beta
    W = np.concatenate([rows, np.reshape(extra_rows, (-1, 2))])
    b = np.concatenate([np.zeros(4), np.asarray(extra_bias, float)])
    out = np.concatenate([np.full(4, -1.0 / beta), np.asarray(extra_out, float)])
    seq = nn.Sequential(nn.Linear(2, len(W)), nn.Softplus(), nn.Linear(len(W), 1))
    with torch.no_grad():
        seq[0].weight.copy_(torch.tensor(W))
        seq[0].bias.copy_(torch.tensor(b))
        seq[2].weight.copy_(torch.tensor(out[None, :]))
        seq[2].bias.fill_(radius)
    return seq


def _notched():
    """The parallelogram plus a notch: h rises by NOTCH_HEIGHT across a band of width
    NOTCH_WIDTH at x1 = NOTCH_AT, over ramps of NOTCH_RISE (all weights exact in float32).
    On the ramps dh/dx1 ~ 5e4, so L_f h = x2 dh/dx1 breaks the CBF condition there."""
    s = 1.0 / NOTCH_RISE
    a, b = NOTCH_AT, NOTCH_AT + NOTCH_WIDTH
    rows = [[s, 0.0]] * 4
    bias = [-s * a, -s * (a + NOTCH_RISE), -s * b, -s * (b + NOTCH_RISE)]
    out = np.array([1.0, -1.0, -1.0, 1.0]) * NOTCH_HEIGHT / (s * NOTCH_RISE)
    return _diamond_layers(rows, bias, out)


def _write(tmp_path: Path, seq, name: str, **card_changes) -> tuple[Path, Path]:
    from training.network import export_onnx
    onnx = export_onnx(seq, tmp_path / f"{name}.onnx", 2)
    card = json.loads(VDP_CARD.read_text())
    width = seq[0].out_features
    card["network"].update(activation="softplus", onnx=onnx.name, widths=[2, width, 1], trained_widths=[2, width, 1])
    card["class_k"] = {"kind": "linear", "gamma": GAMMA}
    card["verification"] = None
    card.update(card_changes)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(card))
    return onnx, path


def _torch_terms(seq, x: np.ndarray):
    """h, L_f h, L_G h of the float64 network by torch autograd (the independent reference)."""
    net = seq.double()
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    h = net(xt)[:, 0]
    (grad,) = torch.autograd.grad(h.sum(), xt)
    g = grad.numpy()
    x1, x2 = x[:, 0], x[:, 1]
    f = np.stack([x2, MU * (1 - x1 ** 2) * x2 - x1], axis=1)
    return h.detach().numpy(), (g * f).sum(1), g[:, 1]


def _phi(seq, x):
    h, lf, lg = _torch_terms(seq, x)
    return h, lf + U_MAX * np.abs(lg) + GAMMA * h


def _rollout_min_h(seq, x0, u, T):
    """min of h along one held period, scipy's RK45 at tight tolerance (not the certifier's RK4)."""
    from scipy.integrate import solve_ivp

    def rhs(_, z):
        return [z[1], MU * (1 - z[0] ** 2) * z[1] - z[0] + u]
    sol = solve_ivp(rhs, (0.0, T), x0, rtol=1e-10, atol=1e-12, dense_output=True)
    ts = np.linspace(0.0, T, 401)
    return float(_torch_terms(seq, sol.sol(ts).T)[0].min())


@pytest.fixture(scope="module")
def diamond(tmp_path_factory):
    seq = _diamond_layers()
    return (seq, *_write(tmp_path_factory.mktemp("diamond"), seq, "diamond"))


def test_hand_made_smooth_barrier_is_certified_for_the_zero_order_hold_loop(diamond):
    seq, onnx, card = diamond
    cert = certify(onnx, card, dt=0.01, margin=MARGIN, time_limit=60)
    assert cert.certified and cert.boxes["undecided"] == 0 and cert.boxes["refuted"] == 0
    assert all(c.proven for c in cert.conditions.values())
    # what it claims, checked by sampling: every state of C can keep hdot + h >= margin ...
    rng = np.random.default_rng(1)
    x = rng.uniform(-3, 3, size=(50_000, 2))
    h, phi = _phi(seq, x)
    inside = h >= 0
    assert phi[inside].min() >= MARGIN
    assert np.all(x[inside, 0] ** 2 + x[inside, 1] ** 2 < 1.5 ** 2)
    # ... and the sound coverage does not exceed the sampled share of the disk inside C
    disk = x[:, 0] ** 2 + x[:, 1] ** 2 <= 1.5 ** 2
    share = inside[disk].mean()
    assert 0.5 * share < cert.certified_coverage <= share + 4 * np.sqrt(share * (1 - share) / disk.sum())


def test_planted_notch_that_passes_300k_samples_is_refused_with_a_confirmed_counterexample(tmp_path):
    seq = _notched()
    onnx, card = _write(tmp_path, seq, "notched", domain_lo=[-1.5, -1.5], domain_hi=[1.5, 1.5])
    # the premise: 300,000 sampled states see nothing wrong (the notch's ramps are 1e-6 wide)
    rng = np.random.default_rng(12345)
    x = rng.uniform(-1.5, 1.5, size=(300_000, 2))
    h, phi = _phi(seq, x)
    assert np.all(phi[h >= 0] >= MARGIN) and np.all(x[h >= 0, 0] ** 2 + x[h >= 0, 1] ** 2 < 1.5 ** 2)

    cert = certify(onnx, card, dt=0.0, margin=MARGIN, time_limit=120)
    assert not cert.certified
    found = [c for res in cert.conditions.values() for c in res.counterexamples]
    assert found and cert.boxes["refuted"] >= 1
    band = (NOTCH_AT - 1e-5, NOTCH_AT + NOTCH_WIDTH + NOTCH_RISE + 1e-5)
    for c in found:
        assert band[0] <= c["x"][0] <= band[1]
    for c in cert.conditions["feasibility"].counterexamples:
        h, phi = _phi(seq, np.array([c["x"]]))
        assert h[0] >= 0 and phi[0] < MARGIN
        assert phi[0] - MARGIN == pytest.approx(c["value"], rel=1e-6, abs=1e-9)


def test_barrier_valid_in_continuous_time_is_refused_at_the_control_period_with_a_confirmed_run(tmp_path):
    # a sharper parallelogram: its corners turn L_G h around within one 10 ms period
    seq = _diamond_layers(beta=8.0, radius=1.0)
    onnx, card = _write(tmp_path, seq, "sharp")
    assert certify(onnx, card, dt=0.0, margin=SHARP_MARGIN, time_limit=60).certified
    cert = certify(onnx, card, dt=0.01, margin=SHARP_MARGIN, time_limit=60)
    assert not cert.certified
    found = cert.conditions["sampled_data"].counterexamples
    assert found
    for c in found:
        x, u = np.array(c["x"]), float(c["u"][0])
        h, lf, lg = _torch_terms(seq, x[None, :])
        assert h[0] >= 0 and -U_MAX <= u <= U_MAX
        assert lf[0] + lg[0] * u + GAMMA * h[0] >= SHARP_MARGIN   # the filter may return u ...
        assert _rollout_min_h(seq, x, u, 0.01) < 0                # ... and the held input leaves C


def test_time_limit_gives_not_certified_with_undecided_boxes_never_a_pass(diamond):
    seq, onnx, card = diamond
    cert = certify(onnx, card, dt=0.01, margin=MARGIN, time_limit=0.0)
    assert not cert.certified and cert.boxes["undecided"] >= 1 and cert.undecided
    assert not any(c.proven for c in cert.conditions.values())


def test_activation_without_enclosure_is_refused_in_one_line(diamond, monkeypatch):
    import dataclasses
    from compiler.activations import ACTIVATIONS
    seq, onnx, card = diamond
    monkeypatch.setitem(ACTIVATIONS, "softplus", dataclasses.replace(ACTIVATIONS["softplus"], enclosure=None))
    with pytest.raises(ValueError) as err:
        certify(onnx, card, dt=0.01, margin=MARGIN)
    assert "softplus" in str(err.value) and "\n" not in str(err.value)


def test_certificate_quotes_the_share_of_backup_safe_states_the_compiled_verifier_measures():
    """The issue's bicycle target is a share of the backup-safe states; the certificate's float64
    estimate agrees with ``cbfsim verify``'s (the compiled float32 header, other seeded states)
    to within five standard errors of the two samples."""
    from training.verify import verify
    models = VDP_CARD.parent
    cert = certify(models / "bicycle.onnx", models / "bicycle.json", time_limit=0.0)
    report = verify(models / "bicycle.onnx", models / "bicycle.json", samples=30_000, backup_samples=20_000)
    p, q = cert.backup_safe_coverage, report.coverage_backup_safe
    assert p is not None and 0.0 < p < 1.0 and json.loads(cert.to_json())["backup_safe_coverage"] == p
    n_cert = 0.7 * 20_000 * 0.5          # at least this many backup-safe states behind each estimate
    se = np.sqrt(p * (1 - p) / n_cert + q * (1 - q) / n_cert)
    assert abs(p - q) <= 5 * se


def _cli(*args: str) -> subprocess.CompletedProcess:
    from conftest import cli_in_process
    return cli_in_process(["certify", *args])


def test_command_line_exit_codes_certificate_and_one_line_errors(diamond, tmp_path):
    seq, onnx, card = diamond
    out = tmp_path / "cert.json"
    ok = _cli(str(onnx), str(card), "--dt", "0.01", "--margin", str(MARGIN), "-o", str(out))
    assert ok.returncode == 0, ok.stderr
    data = json.loads(out.read_text())
    assert data["certified"] is True and data["margin"] == MARGIN and data["dt"] == 0.01
    assert set(data["conditions"]) == {"containment", "feasibility", "sampled_data", "closure"}
    limited = _cli(str(onnx), str(card), "--dt", "0.01", "--time-limit", "0")
    assert limited.returncode == 3 and "NOT CERTIFIED" in limited.stdout
    # the wrong card: a bicycle card for a Van der Pol network
    bicycle = VDP_CARD.parent / "bicycle.json"
    wrong = _cli(str(onnx), str(bicycle))
    assert wrong.returncode == 1 and wrong.stderr.count("\n") == 1 and "inputs" in wrong.stderr
    # order 2 of a ReLU network
    relu_card = tmp_path / "relu2.json"
    pend = json.loads((VDP_CARD.parent / "pendulum.json").read_text())
    relu_card.write_text(json.dumps(pend))
    refused = _cli(str(VDP_CARD.parent / "refuted" / "vdp_relu.onnx"), str(relu_card))
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "relu" in refused.stderr
    assert _cli(str(onnx)).returncode == 2


def test_a_dimension_only_the_plant_reads_is_split_even_when_the_network_gradient_is_a_rounding_speck():
    """The pendulum's h reads theta alone; its outward-rounded d h / d theta_dot is a tiny
    nonzero width. Once theta is thin, theta_dot (full range) must be the edge to halve."""
    from training.certify.branch import split_dimension
    width = np.array([[3e-9, 2.5]])
    span = np.array([np.pi, 2.5])
    grad = np.array([[4.0, 1e-300]])
    read = np.array([True, False])
    split = np.array([True, True])
    assert split_dimension(width, np.where(read, grad, 0.0), split, span)[0] == 1


def test_eager_splits_tile_each_box_exactly_and_follow_the_split_rule():
    """A box halved k times in one round must become 2^k pieces that tile it (no gap, no
    overlap: every sampled point lies in exactly one piece of its own box), each piece
    halved along the edges ``split_dimension`` would pick for it in turn."""
    from training.certify.branch import EAGER_LEVELS, split_dimension, split_pieces, split_sequence
    rng = np.random.default_rng(3)
    n, boxes, levels = 3, 5, 4
    lo = rng.uniform(-2, 0, (boxes, n))
    hi = lo + rng.uniform(0.1, 2, (boxes, n))
    grad = rng.uniform(0, 3, (boxes, n))
    span, split = np.full(n, 4.0), np.ones(n, dtype=bool)
    dims = split_sequence(hi - lo, grad, split, span)
    assert dims.shape == (boxes, EAGER_LEVELS)
    plo, phi = split_pieces(lo, hi, dims, levels)
    assert len(plo) == boxes * 2 ** levels
    owner = np.tile(np.arange(boxes), 2 ** levels)
    assert np.allclose(np.prod(phi - plo, axis=1).reshape(-1, boxes).sum(0), np.prod(hi - lo, axis=1))
    for b in range(boxes):
        x = rng.uniform(lo[b], hi[b], (2000, n))
        mine = np.flatnonzero(owner == b)
        inside = np.all((plo[mine][None] < x[:, None]) & (x[:, None] < phi[mine][None]), axis=2)
        assert np.all(inside.sum(1) == 1)
    # the pieces of each box share their widths, and level by level the rule picks the edge
    width = (hi - lo).copy()
    for level in range(levels):
        picked = split_dimension(width, grad, split, span)
        assert np.array_equal(picked, dims[:, level])
        width[np.arange(boxes), picked] /= 2
    assert np.allclose((phi - plo).reshape(2 ** levels, boxes, n), width[None])


def test_eager_levels_fill_the_next_round_only_and_respect_the_minimum_width():
    from training.certify.branch import EAGER_FILL, eager_levels
    dims = np.zeros((4, 8), dtype=int)
    rel = np.ones((4, 2))
    levels = eager_levels(0, rel, dims, 2.0 ** -30)
    assert 4 * 2 ** levels <= EAGER_FILL < 4 * 2 ** (levels + 1)
    assert eager_levels(EAGER_FILL, rel, dims, 2.0 ** -30) == 1         # a full queue: one halving, as before
    assert eager_levels(0, rel, dims, 0.3) == 2                          # 1 -> 1/2 -> 1/4 < 0.3: stop at 2

def _admissible_extremes(seq, x, eps, scale=None):
    """The inputs the filter may return at x that push h down hardest: the box end against
    L_G h, moved back until the row a.u + b reaches eps (times bias + w.x with a state
    ``scale`` [bias, w1, w2]) (float64 torch reference)."""
    h, lf, lg = _torch_terms(seq, x)
    if scale is not None:
        eps = eps * (scale[0] + x @ np.asarray(scale[1:]))
    worst = np.where(lg > 0, -U_MAX, U_MAX)
    row = lf + lg * worst + GAMMA * h
    with np.errstate(divide="ignore", invalid="ignore"):
        back = np.where(row < eps, (eps - lf - GAMMA * h) / lg, worst)
    return np.clip(back, -U_MAX, U_MAX), h


def _admissible_spread(seq, x, eps, scale=None, count=7):
    """``count`` inputs per state spread evenly over the admissible interval, from the hardest
    (``_admissible_extremes``) to the box end on the other side: the level route is taken per
    input slice, so an interior input may be the one its bound is tightest for."""
    hardest, h = _admissible_extremes(seq, x, eps, scale)
    _, _, lg = _torch_terms(seq, x)
    other = np.where(lg > 0, U_MAX, -U_MAX)
    t = np.linspace(0.0, 1.0, count)
    return hardest[:, None] + t[None, :] * (other - hardest)[:, None], h


@pytest.mark.parametrize("scale", [None, [1.0, 0.3, 0.0]], ids=["constant_margin", "state_scaled_margin"])
@pytest.mark.parametrize("route", ["level_drop", "taylor_level"])
def test_boxes_the_level_routes_prove_keep_h_nonnegative_over_the_period_for_every_admissible_input(
        diamond, monkeypatch, route, scale):
    """Soundness of the sampled-data routes on their own: boxes on the boundary of C that the
    route proves (the others disabled) are rolled out from many states and the hardest
    admissible inputs in scipy (a spread of them from the hardest on: the level route is bounded
    per input slice); h must stay >= 0.  The route must prove boxes the rate route
    alone cannot, or the check would say nothing about it.  With a state-scaled margin
    (training/margin.py: the filter enforces eps (1 + 0.3 x1), 0.1 eps to 1.9 eps here) the
    hardest inputs are those of the margin at each start state."""
    from compiler.interval import Interval
    from training.certify import conditions, problem as problem_module
    from training.margin import margin_from
    seq, onnx, card = diamond
    p = problem_module.load_problem(onnx, card, dt=0.02)
    if scale is not None:
        p.margin = margin_from(0.0, scale)
    rng = np.random.default_rng(7)
    x = rng.uniform(-3, 3, size=(40_000, 2))
    h, _, _ = _torch_terms(seq, x)
    centres = x[np.abs(h) < 0.02][:400]
    box = Interval(centres - 0.004, centres + 0.004)
    eps = SHARP_MARGIN

    def scores(keep):
        with monkeypatch.context() as mp:
            for name in {"level_drop", "taylor_level"} - {keep}:
                mp.setattr(conditions, name, lambda *a, **k: np.full(len(a[0].lo), -np.inf))
            return conditions.evaluate(p, box, eps).scores["sampled_data"]
    alone = scores(None)
    mine = scores(route)
    gained = np.flatnonzero(np.isfinite(mine) & (mine >= 0) & (alone < 0))
    assert len(gained) >= 5, f"{route} proves only {len(gained)} boxes the rate route cannot"
    worst = np.inf
    for i in gained[:40]:
        starts = rng.uniform(box.lo[i], box.hi[i], size=(12, 2))
        u, h0 = _admissible_spread(seq, starts, eps, scale)
        for x0, us in zip(starts[h0 >= 0], u[h0 >= 0]):
            worst = min([worst] + [_rollout_min_h(seq, x0, ui, p.dt) for ui in us])
    assert worst >= -1e-9, f"{route} proved a box whose run drops h to {worst}"


def test_a_state_scaled_margin_counts_its_least_value_for_the_period_and_its_largest_for_feasibility(diamond):
    """The filter enforces eps sigma(x) (training/margin.py): over a box the sampled-data
    routes may rely only on the smallest value, feasibility must meet the largest.  Each box's
    scores equal the constant-margin scores at those two values."""
    from compiler.interval import Interval
    from training.certify import conditions, problem as problem_module
    from training.margin import Margin, margin_from
    seq, onnx, card = diamond
    p = problem_module.load_problem(onnx, card, dt=0.02)
    rng = np.random.default_rng(3)
    x = rng.uniform(-3, 3, size=(40_000, 2))
    h, _, _ = _torch_terms(seq, x)
    centres = x[np.abs(h) < 0.05][:40]
    eps, half = SHARP_MARGIN, 0.05
    differ = 0
    for c in centres:
        box = Interval(c[None] - half, c[None] + half)
        p.margin = margin_from(0.0, [1.0, 0.3, 0.0])
        scaled = conditions.evaluate(p, box, eps).scores
        low, high = (eps * (1.0 + 0.3 * (c[0] + s * half)) for s in (-1, 1))
        p.margin = Margin()
        at_low = conditions.evaluate(p, box, low).scores
        at_high = conditions.evaluate(p, box, high).scores
        assert scaled["sampled_data"][0] == pytest.approx(at_low["sampled_data"][0], rel=1e-6, abs=1e-6)
        assert scaled["feasibility"][0] == pytest.approx(at_high["feasibility"][0], rel=1e-6, abs=1e-6)
        differ += at_low["sampled_data"][0] != pytest.approx(at_high["sampled_data"][0], rel=1e-3)
    assert differ >= 3, "the two margins give the same scores: the test would not see a swap"


def test_margin_scale_bounds_hold_every_float32_evaluation_and_a_negative_scale_is_refused():
    """The box bounds of eps (bias + w.x) contain the margin the firmware computes in float32
    (and the float64 one) at sampled states; a scale negative on the domain is one line."""
    from training.margin import MarginError, margin_from
    m = margin_from(0.37, [0.25, 0.0, -0.5, 0.1, 0.7])
    rng = np.random.default_rng(0)
    lo = rng.uniform(-20, 5, size=(200, 4))
    hi = lo + rng.uniform(0, 10, size=(200, 4))
    blo, bhi = m.bounds(lo, hi)
    x = lo[:, None] + (hi - lo)[:, None] * rng.uniform(size=(200, 50, 4))
    f32 = np.float32
    sigma = np.full(x.shape[:2], f32(0.25), dtype=np.float32)
    for i, w in enumerate(m.weights):
        if w:
            sigma = (sigma + f32(w) * x[..., i].astype(np.float32)).astype(np.float32)
    device = (f32(0.37) * sigma).astype(np.float64)
    exact = 0.37 * (0.25 + x @ np.asarray(m.weights))
    for value in (device, exact):
        inside = value >= 0
        assert np.all((value >= blo[:, None]) | ~inside) and np.all(value <= bhi[:, None])
    with pytest.raises(MarginError, match="falls to .* < 0 on the domain"):
        margin_from(1.0, [0.0, 1.0]).check_domain(1, [-1.0], [1.0])
    with pytest.raises(MarginError, match="1 \\+ 2 numbers"):
        margin_from(1.0, [0.0, 1.0]).check_domain(2, [0, 0], [1, 1])


def test_the_feasibility_bound_is_below_the_row_at_every_sampled_state_of_the_set(tmp_path):
    """Feasibility is asked only at states with h >= 0, so its bound may count gamma h >= 0
    there.  Checked on boundary boxes (h changes sign inside) against torch float64: in every
    box, the bound of sup_u hdot + gamma h lies below its value at every sampled state of the
    set.  gamma = 50 makes gamma h dominate the row's variation over a box, so a bound that
    credits more of h than the set's part of the box (its top, say) is caught; and the
    set-aware bound must prove boxes the whole-box row cannot, or this says nothing."""
    from compiler.interval import Interval
    from training.certify import conditions, problem as problem_module
    gamma = 50.0
    seq = _diamond_layers()
    onnx, card = _write(tmp_path, seq, "steep", class_k={"kind": "linear", "gamma": gamma})
    p = problem_module.load_problem(onnx, card, dt=0.0)
    rng = np.random.default_rng(11)
    x = rng.uniform(-3, 3, size=(40_000, 2))
    h, _, _ = _torch_terms(seq, x)
    centres = x[np.abs(h) < 0.02][:400]
    eps = 0.5                  # the room on the boundary (h = 0) runs from 0.39 to 1.5
    box = Interval(centres - 0.01, centres + 0.01)
    score = conditions.evaluate(p, box, eps).scores["feasibility"]
    t = conditions.lie_terms(p.model, conditions.plant_terms(p.plant, box, 1), box, 1, p.gains, float32=True)
    a, b = conditions.constraint_row(t, p)
    whole_box = (b + conditions.sup_over_inputs(a, p.u_lo, p.u_hi)).lo - eps
    assert ((score >= 0) & (whole_box < 0)).sum() >= 10, "the set-aware bound proves no box the whole-box row cannot"
    gap = np.inf
    for i in range(len(centres)):
        pts = rng.uniform(box.lo[i], box.hi[i], size=(100, 2))
        hh, lf, lg = _torch_terms(seq, pts)
        phi = lf + U_MAX * np.abs(lg) + gamma * hh
        if (hh >= 0).any():
            gap = min(gap, float(phi[hh >= 0].min() - eps - score[i]))
    assert gap >= 0, f"the bound exceeds the row at a sampled state of the set by {-gap}"
