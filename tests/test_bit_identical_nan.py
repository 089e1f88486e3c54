"""Host and device runs are compared bit for bit with NaN as NaN: a faulted run's NaNs carry
the hardware's sign and payload (x86 makes 0xffc00000 where the Cortex-M FPU makes 0x7fc00000),
which is no difference in what was computed; every other word, +0/-0 included, must match."""
from __future__ import annotations

import numpy as np
import pytest

from cbfsim import device
from cbfsim.device.protocol import DeviceLog
from conftest import require_tool


def _log(words: list[int]) -> DeviceLog:
    bits = np.array(words, dtype=np.uint32)
    empty = np.zeros((0, 1))
    return DeviceLog({"port": "t", "n": "1", "m": "1"}, empty, empty, empty, np.zeros(0), np.zeros(0, np.int8), bits,
                     None, None)


ONE, X86_NAN, ARM_NAN, PAYLOAD_NAN, NEG_ZERO = 0x3F800000, 0xFFC00000, 0x7FC00000, 0x7FA00001, 0x80000000


@pytest.mark.parametrize("a,b,same", [
    ([ONE, X86_NAN], [ONE, ARM_NAN], True),             # the faulted run on host and Cortex-M
    ([X86_NAN, PAYLOAD_NAN], [ARM_NAN, ARM_NAN], True),
    ([ONE, X86_NAN], [ONE, 0x7F800000], False),         # NaN against inf
    ([ONE, ARM_NAN], [0x3F800001, ARM_NAN], False),     # one ulp
    ([0], [NEG_ZERO], False),                           # +0 and -0 differ in bits and in 1/x
    ([ONE], [ONE, ONE], False)])
def test_nan_matches_any_nan_and_every_other_word_must_match_exactly(a, b, same):
    assert device.bit_identical(_log(a), _log(b)) is same
    assert device.bit_identical(_log(b), _log(a)) is same


@pytest.mark.arm
def test_a_diverging_run_on_the_host_twin_and_the_cortex_m4_is_bit_identical_with_nan_as_nan(tmp_path):
    """The real case: a start state near the float32 limit overflows in the first RK4 step, the
    fault policy holds the input, and both targets log NaN states -- in different bit patterns."""
    for tool in ("arm-none-eabi-g++", "arm-none-eabi-gcc", "qemu-system-arm"):
        require_tool(tool, device.INSTALL["m4"])
    require_tool("g++", device.INSTALL["host"])
    config = device.RunConfig(system="van_der_pol", x0=(3e38, -3e38), nominal="zero", alpha=(1.0,), steps=5,
                              bench_calls=10)
    generated = device.generate(device.polygon_disk_barrier(), config, tmp_path / "gen")
    logs = {t: device.parse_log(device.run(t, device.build(t, generated, tmp_path / t, modes=1), timeout=300))
            for t in ("host", "m4")}
    host, m4 = logs["host"].bits, logs["m4"].bits
    nan = np.isnan(host.view(np.float32))
    assert nan.sum() > 0 and np.array_equal(nan, np.isnan(m4.view(np.float32)))
    assert not np.array_equal(host, m4)                       # the NaN patterns do differ ...
    assert np.array_equal(host[~nan], m4[~nan])               # ... and nothing else does
    assert device.bit_identical(logs["host"], logs["m4"])
    assert np.array_equal(logs["host"].status, logs["m4"].status)
