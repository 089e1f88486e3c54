"""Simulated vs device trajectories: the same barrier header on the host twin, a Cortex-M4F
and a Cortex-M7 (QEMU) and, from a captured log, an ESP32-S3 -- compared with the float64
Python simulation of the same closed loop, plus the benchmark, footprint, stack and heap
reports. Outputs go to results/device/ (summary.json, differences.csv, trajectories.png).

    python experiments/device.py                                   # VdP, 10 s at 1 kHz
    python experiments/device.py --targets host m4 --steps 2000
    python experiments/device.py --esp32-log esp32.log             # add a captured ESP32 run
    python experiments/device.py --esp32-port /dev/ttyUSB0         # read it live (pyserial)

The model defaults to experiments/models/vdp.onnx (+ vdp.json card) when it exists, else the
hand-set 2-64-64-1 ReLU "polygon disk" barrier of cbfsim.device (``--model polygon-demo``).
"""
from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from cbfsim import device
from compiler.errors import ToolchainError

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = ROOT / "experiments" / "models" / "vdp.onnx"


def model_and_card(spec: str | None):
    """(model source, card dict): an ONNX path with its optional JSON card, or the demo."""
    path = Path(spec) if spec and spec != "polygon-demo" else (DEFAULT_MODEL if spec is None else None)
    if path is None or not path.exists():
        if spec not in (None, "polygon-demo"):
            sys.exit(f"model {spec} not found")
        return device.polygon_disk_barrier(), {"name": "polygon-demo"}
    card_path = path.with_suffix(".json")
    card = json.loads(card_path.read_text()) if card_path.exists() else {}
    return path, card


def _alpha_from_card(card: dict) -> tuple[float, ...] | None:
    """Gains from a card's 'alpha' (number, list, or {'gain': g} dicts), if any."""
    raw = card.get("alpha")
    if raw is None:
        return None
    items = raw if isinstance(raw, list) else [raw]
    gains = [float(a["gain"]) if isinstance(a, dict) else float(a) for a in items]
    return tuple(gains)


def make_config(args: argparse.Namespace, card: dict) -> device.RunConfig:
    """Command line over model card over defaults."""
    order = args.order or int(card.get("order", 1))
    alpha = tuple(args.alpha) if args.alpha else (_alpha_from_card(card) or ((1.0,) if order == 1 else (1.0, 1.0)))
    x0 = tuple(args.x0) if args.x0 else tuple(card.get("x0", (0.5, 0.0)))
    return device.RunConfig(system=args.system or card.get("system", "van_der_pol"), x0=x0,
                            nominal=args.nominal or card.get("nominal", "zero"), order=order, alpha=alpha,
                            dt=args.dt, steps=args.steps, substeps=args.substeps)


def read_serial(port: str, baud: int, timeout: float) -> str:
    """Read a live ESP32 run until its 'E' line (opening the port usually resets the board)."""
    try:
        import serial
    except ImportError:
        sys.exit("reading a serial port needs pyserial: pip install pyserial (or capture to a file, see "
                 "firmware/esp32/README.md)")
    lines = []
    with serial.Serial(port, baud, timeout=timeout) as link:
        while True:
            raw = link.readline()
            if not raw:
                sys.exit(f"no data from {port} for {timeout} s; got {len(lines)} lines")
            line = raw.decode("ascii", errors="replace")
            lines.append(line)
            if line.startswith("E "):
                return "".join(lines)


def check_log_matches(log: device.DeviceLog, generated: device.Generated) -> None:
    """An ESP32 log must come from firmware built with the same model and run constants."""
    expected = {"model": generated.tag, "steps": str(generated.config.steps), "order": str(generated.config.order)}
    wrong = {k: (log.header.get(k), v) for k, v in expected.items() if log.header.get(k) != v}
    if wrong:
        sys.exit(f"the ESP32 log does not match this run (log, expected): {wrong}; regenerate the headers "
                 "with the same options and rebuild (firmware/esp32/README.md)")


def device_reports(target: str, program: Path, log: device.DeviceLog, generated: device.Generated) -> dict:
    """Benchmark, footprint, stack, heap and workspace facts for one Cortex-M build."""
    report: dict = {"benchmark": device.bench_summary(log) if log.bench else None}
    if target in device.QEMU_MACHINE:
        stack = device.stack_report(program.parent)
        size, section = device.symbol_size(program, f"{generated.name}::g_workspace")
        report.update(footprint=device.footprint(program), heap_symbols=device.heap_symbols(program),
                      stack_static_worst_bytes=stack.worst_bytes, stack_worst_path=stack.path,
                      stack_uninstrumented=stack.unknown, stack_measured_peak_bytes=int(log.port_facts["stack_peak"]),
                      workspace={"header_bytes": generated.workspace_bytes, "symbol_bytes": size, "section": section})
    return report


def unfiltered(config: device.RunConfig, count: int) -> np.ndarray:
    """The nominal controller alone (cbfsim's simulator, no filter): what the filter prevents."""
    from cbfsim.simulate import simulate

    dt = device.f32(config.dt)
    traj = simulate(config.plant(), None, None, config.nominal, np.array(config.x0, dtype=float),
                    t_final=(count - 1) * dt, dt_control=dt)
    return traj.x[0]


def plot(out: Path, ref: device.ReferenceRun, logs: dict[str, device.DeviceLog], generated: device.Generated) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from cbfsim.plots import STYLE
    from compiler import reference

    config = generated.config
    system = config.plant()
    t = np.arange(len(ref.x)) * device.f32(config.dt)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 5.4), layout="constrained")
    lo, hi = system.domain
    if system.n == 2:  # the unsafe region, the constraint boundary and the learned h = 0 (the one colour code)
        g1, g2 = np.meshgrid(np.linspace(lo[0], hi[0], 200), np.linspace(lo[1], hi[1], 200))
        grid = np.stack([g1.ravel(), g2.ravel()], axis=1)
        c = system.constraint(grid).reshape(g1.shape)
        ax.contourf(g1, g2, c, levels=[-np.inf, 0], colors=[STYLE["unsafe"]["color"]], alpha=STYLE["unsafe"]["alpha"])
        for name, values in (("constraint", c), ("barrier", reference.value(generated.compiled.model, grid))):
            st = STYLE[name]
            ax.contour(g1, g2, values.reshape(g1.shape), levels=[0], colors=[st["color"]], linewidths=st["lw"],
                       linestyles=st["ls"])
            ax.plot([], [], color=st["color"], ls=st["ls"], lw=st["lw"], label=st["label"])
    ax.plot(*unfiltered(config, len(ref.x)).T[:2], ":", color="0.4", lw=1, label="no filter (nominal only)")
    ax.plot(ref.x[:, 0], ref.x[:, 1], color="0.6", lw=4, label="Python float64")
    styles = ["-", "--", ":", "-."]
    for i, (name, log) in enumerate(logs.items()):
        ax.plot(log.x[:, 0], log.x[:, 1], styles[i % 4], lw=1.2, label=f"{name} float32")
        k = min(len(log.x), len(ref.x))
        bx.semilogy(t[:k], np.maximum(np.abs(log.x[:k] - ref.x[:k]).max(axis=1), 1e-12), styles[i % 4], label=name)
    ax.set(xlabel=system.state_names[0], ylabel=system.state_names[1], aspect="equal",
           title="The same closed loop on each target and in Python")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower left", fontsize=8, ncol=3, frameon=False)
    bx.set(xlabel="t [s]", ylabel="max |x_device - x_python|", title="Device (float32) vs Python (float64)")
    bx.legend(fontsize=8, loc="lower right")
    path = out / "trajectories.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="ONNX barrier (card: same stem .json) or 'polygon-demo'")
    parser.add_argument("--system", help="systems/ name (default: the card's, else van_der_pol)")
    parser.add_argument("--nominal")
    parser.add_argument("--order", type=int, choices=(1, 2))
    parser.add_argument("--alpha", type=float, nargs="+")
    parser.add_argument("--x0", type=float, nargs="+")
    parser.add_argument("--dt", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--substeps", type=int, default=1)
    parser.add_argument("--targets", nargs="*", default=["host", "m4", "m7"], choices=["host", "m4", "m7"])
    parser.add_argument("--esp32-log", type=Path, help="captured ESP32 serial log")
    parser.add_argument("--esp32-port", help="read the ESP32 live from this serial port (pyserial)")
    parser.add_argument("--baud", type=int, default=115200)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "device")
    parser.add_argument("--keep-build", type=Path, help="build here instead of a temporary directory")
    args = parser.parse_args()

    model, card = model_and_card(args.model)
    config = make_config(args, card)
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.keep_build or Path(tempfile.mkdtemp(prefix="cbfsim-device-"))
    generated = device.generate(model, config, work / "generated")
    print(f"model {card.get('name', model)} ({generated.tag}), {config.system}, order {config.order}, "
          f"x0 {config.x0}, {config.steps} steps of {config.dt} s")

    logs: dict[str, device.DeviceLog] = {}
    reports: dict[str, dict] = {}
    for target in ("host", *[t for t in args.targets if t != "host"]):
        try:
            program = device.build(target, generated, work / "build")
            logs[target] = device.parse_log(device.run(target, program, timeout=600))
        except ToolchainError as exc:
            if target == "host":  # the twin every other target is compared with
                raise
            print(f"skipping {target}: {str(exc).splitlines()[0]}")
            continue
        reports[target] = device_reports(target, program, logs[target], generated)
    if args.esp32_log or args.esp32_port:
        text = args.esp32_log.read_text(errors="replace") if args.esp32_log else read_serial(
            args.esp32_port, args.baud, timeout=30.0)
        logs["esp32"] = device.parse_log(text)
        check_log_matches(logs["esp32"], generated)
        reports["esp32"] = device_reports("esp32", Path(), logs["esp32"], generated)

    ref = device.reference_run(generated, config)
    host = logs["host"]
    summary = {"config": {**config.__dict__, "tag": generated.tag}, "targets": {}}
    for name, log in logs.items():
        entry = device.summary(log, ref)
        entry["bit_identical_to_host"] = device.bit_identical(log, host)
        entry.update(reports[name])
        summary["targets"][name] = entry
        bench = entry.get("benchmark") or {}
        per_call = (f"{bench.get('median_instructions', bench.get('median'))} / "
                    f"{bench.get('max_instructions', bench.get('max'))} "
                    f"{'instructions' if 'median_instructions' in bench else bench.get('unit', '')}")
        print(f"{name:6s} max|dx| vs Python {entry['max_abs_dx']:.3e}  bit-identical to host: "
              f"{entry['bit_identical_to_host']}  barrier call median/max: {per_call}")
        if "footprint" in entry:
            print(f"       flash {entry['footprint']['flash_bytes']} B, RAM {entry['footprint']['ram_bytes']} B "
                  f"{entry['footprint']['sections']}; stack worst {entry['stack_static_worst_bytes']} B static, "
                  f"{entry['stack_measured_peak_bytes']} B measured; heap symbols {entry['heap_symbols']}; "
                  f"workspace {entry['workspace']}")

    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    with open(args.out / "differences.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", "t", *[f"max_abs_dx_{name}" for name in logs]])
        for k in range(len(ref.x)):
            writer.writerow([k, k * device.f32(config.dt),
                             *[f"{np.abs(log.x[k] - ref.x[k]).max():.3e}" if k < len(log.x) else "" for log in logs.values()]])
    figure = plot(args.out, ref, logs, generated)
    print(f"wrote {args.out / 'summary.json'}, {args.out / 'differences.csv'}, {figure}")
    if not args.keep_build:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
