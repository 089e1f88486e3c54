"""The trainer labels the plant's initial set safe and its check counts initial states outside
the set (``cbfsim certify --initial-set plant`` proves h >= 0 there).  References: the
initial box as the plant module writes it (systems/darboux.py), and constant or linear
barriers whose sign on it is known."""
import numpy as np
import pytest
import torch

from systems import get_system
from systems.darboux import INITIAL_SET
from training.check import check
from training.presets import preset
from training.samplers import ConstraintTools, in_initial
from training.trainer import INITIAL_SHARE, _label_pool


def _in_box(x):
    lo, hi = np.array(INITIAL_SET).T
    return np.all((x >= lo) & (x <= hi), axis=1)


def _small(name="darboux", **kw):
    return preset(name, n_uniform=2000, n_boundary=2000, check_samples=4000, check_boundary=0, **kw)


def test_the_label_pool_holds_the_initial_set_as_safe():
    system = get_system("darboux")
    cfg = _small(safe_margin=1e6)          # the label set's margin labels nothing safe: only the initial set is
    res = cfg.resolve(system)
    pool, _ = _label_pool(system, ConstraintTools(system), cfg, res, np.random.default_rng(0))
    x = pool.x.numpy()
    start = _in_box(x)
    assert np.array_equal(in_initial(system, x), start)
    assert start.sum() >= cfg.n_boundary // INITIAL_SHARE          # the added states, and any uniform ones
    inside = ConstraintTools(system).constraint(x) >= 0
    assert np.array_equal(pool.pos.numpy(), start & inside) and not pool.lost.numpy()[start].any()


class _Affine(torch.nn.Module):
    def __init__(self, w, c):
        super().__init__()
        self.lin = torch.nn.Linear(2, 1).double()
        with torch.no_grad():
            self.lin.weight[:] = torch.tensor([w], dtype=torch.float64)
            self.lin.bias[:] = c

    def forward(self, x):
        return self.lin(x)


@pytest.mark.parametrize("w, c, share", [((0.0, 0.0), -1.0, 1.0), ((0.0, 0.0), 1.0, 0.0), ((1.0, 0.0), -0.25, 0.25)])
def test_the_check_counts_initial_states_outside_the_set(w, c, share):
    system = get_system("darboux")
    cfg = _small()
    res = cfg.resolve(system)
    out = check(_Affine(w, c), system, ConstraintTools(system), cfg, res.lo, res.hi, res.u_min, res.u_max,
                np.random.default_rng(1))
    drawn = cfg.check_samples // 10 + int(_in_box(np.random.default_rng(1).uniform(res.lo, res.hi, (cfg.check_samples, 2))).sum())
    # h = x1 - 0.25 is below 0 on a quarter of the box x1 in [0, 1]: binomial, 5 sigma
    assert abs(out.initial_failures - share * drawn) <= 5 * np.sqrt(drawn * share * (1 - share)) + 1e-9
    assert out.summary()["initial_failures"] == out.initial_failures
    assert out.failures >= out.initial_failures
