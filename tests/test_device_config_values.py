"""Values the device stores as float32 are checked before anything is written: a NaN start
state once wrote ``nanf`` into cbf_config.hpp (and the build failed), 1e39 became inf."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cbfsim import device
from cbfsim.device.card import shipped_card_run
from cbfsim.device.config import RunConfig
from cbfsim.device.errors import DeviceConfigError


@pytest.mark.parametrize("x0,message", [((float("nan"), 0.0), r"x0\[0\] is nan; it must be a finite number"),
                                        ((0.5, float("-inf")), r"x0\[1\] is -inf; it must be a finite number"),
                                        ((1e39, 0.0), r"x0\[0\] = 1e\+39 overflows float32"),
                                        ((0.5, "0.1"), r"x0\[1\] must be a number, got '0.1'")])
def test_a_start_state_the_device_cannot_store_is_refused_in_one_line_and_nothing_is_written(tmp_path, x0, message):
    run = shipped_card_run("vdp")
    config = dataclasses.replace(run.config, x0=x0)
    with pytest.raises(DeviceConfigError, match=message) as err:
        device.generate(run.model, config, tmp_path / "gen")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "gen").exists()


def test_the_largest_float32_start_state_is_written_exactly():
    run = shipped_card_run("vdp")
    big = float(np.finfo(np.float32).max)
    config = dataclasses.replace(run.config, x0=(big, -big))
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as tmp:
        text = (device.generate(run.model, config, Path(tmp)).directory / "cbf_config.hpp").read_text()
    assert f"kX0[2] = {{{float.hex(big)}f, {float.hex(-big)}f}}" in text


@pytest.mark.parametrize("field,value,message", [
    ("alpha", (float("nan"),), r"alpha\[0\] is nan"), ("alpha", (1.0, float("inf")), r"alpha\[1\] is inf"),
    ("dt", float("inf"), r"dt is inf"), ("dt", float("nan"), r"dt is nan"),
    ("params", {"mu": float("nan")}, r"params\['mu'\] is nan"),
    ("domain", ((float("nan"), 0.0), (1.0, 1.0)), r"domain lo\[0\] is nan")])
def test_run_config_numbers_that_are_not_finite_float32_are_refused_naming_the_field(field, value, message):
    with pytest.raises(DeviceConfigError, match=message):
        RunConfig(**{field: value})


@pytest.mark.toolchain
def test_the_engine_library_does_not_depend_on_the_start_state(cxx):
    """The engine takes its states per run: a batch starting at NaN or 1e39 neither reaches the
    generated headers nor builds a library of its own."""
    from cbfsim.engine import build_engine
    run = shipped_card_run("vdp")
    libraries = {build_engine(run.model, dataclasses.replace(run.config, x0=x0)).library
                 for x0 in [(0.5, 0.5), (-0.8, 0.6), (float("nan"), 0.0), (1e39, 0.0)]}
    assert len(libraries) == 1
