"""Captured ESP32-S3 logs for Table I (cbfsim/device/capture.py): read with the firmware's own
protocol from a log the host twin wrote (its port renamed and its counter unit set to
cycles: an honest stand-in for a board, since ESP-IDF cannot run here)."""
from __future__ import annotations

import pytest

from cbfsim import device
from cbfsim.device.capture import CPU_MHZ, esp32_markdown, esp32_rows
from cbfsim.device.errors import DeviceConfigError


@pytest.fixture(scope="module")
def capture(tmp_path_factory, cxx):
    work = tmp_path_factory.mktemp("esp32")
    config = device.RunConfig(system="van_der_pol", x0=(0.5, 0.0), nominal="zero", alpha=(1.0,), steps=10)
    generated = device.generate(device.polygon_disk_barrier(), config, work / "gen")
    text = device.run("host", device.build("host", generated, work / "build", modes=2))
    board = text.replace("H port=host", "H port=esp32s3").replace("unit=ns", "unit=cycles")
    path = work / "vdp_dual.log"
    path.write_text("rst:0x1 (POWERON),boot:0x8 (SPI_FAST_FLASH_BOOT)\n" + board)   # a boot banner first
    return path, device.bench_summary(device.parse_log(board))


def test_a_captured_log_becomes_microseconds_at_the_cpu_clock(capture):
    path, bench = capture
    (row,) = esp32_rows([f"vdp:dual={path}"])
    assert row["port"] == "esp32s3" and row["calls"] == bench["calls"]
    assert row["median_us"] == (bench["median"] - bench["overhead"]) / CPU_MHZ
    assert row["max_us"] == (bench["max"] - bench["overhead"]) / CPU_MHZ
    text = esp32_markdown([row], {"vdp": [("Dual", 327.88, 334.03, 768, "static")]})
    assert "| vdp | dual |" in text and "Dual: 327.88 / 334.03" in text


def test_bad_capture_arguments_and_non_esp32_logs_are_refused_in_one_line(capture, tmp_path):
    path, _ = capture
    with pytest.raises(DeviceConfigError, match="EXAMPLE:METHOD=FILE"):
        esp32_rows([str(path)])
    with pytest.raises(DeviceConfigError, match="No such file"):
        esp32_rows([f"vdp:dual={tmp_path / 'missing.log'}"])
    host = tmp_path / "host.log"
    host.write_text(path.read_text().replace("unit=cycles", "unit=ns"))
    with pytest.raises(DeviceConfigError, match="not cycles"):
        esp32_rows([f"vdp:dual={host}"])
