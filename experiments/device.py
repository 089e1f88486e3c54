"""Simulated vs device trajectories: the same barrier header on the host twin, a Cortex-M4F
and a Cortex-M7 (QEMU) and, from a captured log, an ESP32-S3 -- compared with the float64
Python simulation of the same closed loop, plus the benchmark, footprint, stack and heap
reports. Outputs go to results/device/ (summary.json, differences.csv, trajectories.png).

    python experiments/device.py                                   # VdP, 10 s at its card's 5 ms hold
    python experiments/device.py --model all                       # VdP, pendulum, bicycle: one summary
    python experiments/device.py --model pendulum --targets host m4 --steps 2000
    python experiments/device.py --esp32-log esp32.log             # add a captured ESP32 run
    python experiments/device.py --esp32-port /dev/ttyUSB0         # read it live (pyserial)

A model is a shipped name (vdp, pendulum, bicycle), an ONNX file with its model card
(same stem, .json) or 'polygon-demo' (the hand-set ReLU barrier of cbfsim.device). The card
gives the system, its parameters, the order, the class-K gains, the training box and (from
a certificate that certifies) the filter margin (cbfsim.device.card_run); cbfsim.device.SHIPPED_RUNS
gives each shipped model's nominal controller (its experiment's), x0 and rate; the command
line overrides any of them. A missing or unknown key is a one-line error, never a default.
With --model all, each system's files go to results/device/NAME/ and results/device/
summary.json holds, per system, the checks of cbfsim.device.checks.
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
from cbfsim.filters.base import check_margin
from cbfsim.filters.fallback import Fallback
from compiler.cli_errors import (OneLineParser, add_common_flags, assignment, finite_float, positive_float,
                                 positive_int, run_parsed)
from compiler.errors import ToolchainError

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = tuple(device.SHIPPED_RUNS)     # vdp, pendulum, bicycle


def resolve(spec: str, args: argparse.Namespace) -> tuple[object, device.RunConfig, dict]:
    """(model, config, facts) for a model spec: card + shipped run table + command line."""
    if spec == "polygon-demo":   # no card: the demo's own constants, the command line on top
        config = device.polygon_demo_config(system=args.system, x0=args.x0, nominal=args.nominal, order=args.order,
                                            alpha=args.alpha, **run_options(args))
        return device.polygon_disk_barrier(), config, {"name": "polygon-demo", "activation": "relu"}
    card = device.shipped_card_run(spec, nominal=args.nominal, x0=tuple(args.x0) if args.x0 else None,
                                   system=args.system, order=args.order,
                                   alpha=tuple(args.alpha) if args.alpha else None, **run_options(args))
    facts = {"name": card.card_path.stem, "card": str(card.card_path), "activation": card.card.network["activation"],
             "card_verification_passed": (card.card.verification or {}).get("passed"),
             "certificate": None if card.certificate is None else
             {k: card.certificate.get(k) for k in ("certified", "margin", "dt")},
             "certificate_covers_run": card.certificate_covers_run}
    return card.model, card.config, facts


def run_options(args: argparse.Namespace) -> dict:
    """The RunConfig fields a card does not hold, as given on the command line."""
    out = {key: getattr(args, key) for key in ("dt", "steps", "substeps", "margin") if getattr(args, key) is not None}
    if args.param:
        out["params"] = dict(args.param)
    if args.fallback:
        kind, _, name = args.fallback.partition(":")
        out["fallback"] = Fallback(kind, controller=name or None)
    return out


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
    lo, hi = (np.asarray(b, dtype=float) for b in (config.domain or system.domain))
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
    ax.set(xlabel=system.state_names[0], ylabel=system.state_names[1],
           title="The same closed loop on each target and in Python")
    spans = (hi - lo)[:2] if system.n == 2 else np.ptp(ref.x[:, :2], axis=0)
    if max(spans) <= 1.5 * min(spans):   # comparable ranges (VdP); else fill the axes
        ax.set_aspect("equal")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower left", fontsize=8, ncol=3, frameon=False)
    bx.set(xlabel="t [s]", ylabel="max |x_device - x_python|", title="Device (float32) vs Python (float64)")
    bx.legend(fontsize=8, loc="lower right")
    path = out / "trajectories.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run_model(spec: str, args: argparse.Namespace, out: Path) -> dict:
    """One system on every target and in Python: files in ``out``, returns its summary."""
    model, config, facts = resolve(spec, args)
    out.mkdir(parents=True, exist_ok=True)
    work = (args.keep_build / facts["name"]) if args.keep_build else Path(tempfile.mkdtemp(prefix="cbfsim-device-"))
    generated = device.generate(model, config, work / "generated")
    print(f"model {facts['name']} ({generated.tag}), {config.system}, order {config.order}, alpha {config.alpha}, "
          f"nominal {config.nominal}, x0 {config.x0}, {config.steps} steps of {config.dt} s")

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
    summary = {"model": facts, "config": {**config.__dict__, "margin": check_margin(config.margin).to_dict(),
                                          "tag": generated.tag}, "targets": {}}
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
    summary["checks"] = device.system_checks(
        {k: v for k, v in summary["targets"].items() if k != "esp32"}, relu=facts["activation"] == "relu")

    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    with open(out / "differences.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", "t", *[f"max_abs_dx_{name}" for name in logs]])
        for k in range(len(ref.x)):
            writer.writerow([k, k * device.f32(config.dt),
                             *[f"{np.abs(log.x[k] - ref.x[k]).max():.3e}" if k < len(log.x) else "" for log in logs.values()]])
    figure = plot(out, ref, logs, generated)
    print(f"wrote {out / 'summary.json'}, {out / 'differences.csv'}, {figure}")
    if not args.keep_build:
        shutil.rmtree(work, ignore_errors=True)
    return summary


def run_all(args: argparse.Namespace) -> int:
    """Every shipped system into out/NAME/, and one summary of their checks in out/summary.json."""
    systems = {}
    for name in SHIPPED:
        summary = run_model(name, args, args.out / name)
        systems[name] = {"config": summary["config"], "model": summary["model"], **summary["checks"]}
    (args.out / "summary.json").write_text(json.dumps({"systems": systems}, indent=2, default=str))
    print(f"\n{'system':10s} {'bit-identical':>13s} {'max|dx|':>10s} {'heap':>5s} {'workspace':>9s}  jitter (ticks from median)")
    for name, c in systems.items():
        spread = ", ".join(f"{t} {j['max_ticks_from_median']} ({j['fraction_of_median']:.2%})" for t, j in c["jitter"].items())
        print(f"{name:10s} {str(c['bit_identical']):>13s} {c['max_abs_dx_vs_python']:10.3e} "
              f"{len(c['heap_symbols']):5d} {str(c['workspace_equals_symbol']):>9s}  {spread}  ok={c['ok']}")
    print(f"wrote {args.out / 'summary.json'}")
    return 0 if all(c["ok"] for c in systems.values()) else 1


def build_parser() -> OneLineParser:
    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="vdp",
                        help="vdp | pendulum | bicycle | all | an ONNX file with its card | polygon-demo")
    parser.add_argument("--system", help="systems/ name (default: the card's)")
    parser.add_argument("--nominal", help="nominal controller (default: the run table's)")
    parser.add_argument("--order", type=int, choices=(1, 2))
    parser.add_argument("--alpha", type=positive_float, nargs="+", help="class-K gains (default: the card's)")
    parser.add_argument("--x0", type=finite_float, nargs="+")
    parser.add_argument("--param", type=assignment, action="append", help="plant parameter NAME=VALUE")
    parser.add_argument("--margin", type=finite_float, help="filter margin (default: the certificate's, else 0)")
    parser.add_argument("--fallback", help="fault policy: hold | input | controller:NAME (default hold)")
    parser.add_argument("--dt", type=positive_float, help="control period (default 1e-3)")
    parser.add_argument("--steps", type=positive_int, help="control steps (default 10000)")
    parser.add_argument("--substeps", type=positive_int)
    parser.add_argument("--targets", nargs="*", default=["host", "m4", "m7"], choices=["host", "m4", "m7"])
    parser.add_argument("--esp32-log", type=Path, help="captured ESP32 serial log")
    parser.add_argument("--esp32-port", help="read the ESP32 live from this serial port (pyserial)")
    parser.add_argument("--baud", type=int, default=115200)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "device")
    parser.add_argument("--keep-build", type=Path, help="build here instead of a temporary directory")
    add_common_flags(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.model == "all":
        if args.esp32_log or args.esp32_port:
            parser.error("--esp32-log/--esp32-port need one model, not 'all'")
        return run_parsed(parser.prog, args, lambda: run_all(args))
    return run_parsed(parser.prog, args, lambda: (run_model(args.model, args, args.out), 0)[1])


if __name__ == "__main__":
    sys.exit(main())
