"""cbfc: compile an ONNX barrier into NAME.hpp + NAME_abi.cpp and print the cost report.

Exit codes: 0 success, 1 error (one line naming the problem, no traceback; --debug shows it), 2 usage error.
Only ONNX is read from disk: a PyTorch checkpoint is a pickle, and loading one can run code.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from .errors import CompilerError
from .cli_errors import OneLineParser, add_common_flags, output_directory, positive_int, run_parsed
from .limits import add_limit_arguments, limits_from_args


log = logging.getLogger("cbfc")


def build_parser(prog: str = "cbfc", inputs_help: str | None = None) -> argparse.ArgumentParser:
    """cbfc's parser; ``inputs_help``: ``--inputs`` is optional with this help (``cbfsim compile``,
    which knows m from a model card), else required."""
    parser = OneLineParser(
        prog=prog,
        description="Compile a neural control barrier function (ONNX) into one self-contained C++17 header "
                    "that returns h, L_f h, L_G h (and, with --order 2, L_f^2 h and L_G L_f h) exactly by "
                    "dual numbers, from static memory; plus an extern \"C\" shim for ctypes.")
    parser.add_argument("model", help="the barrier network as an ONNX file (export with torch.onnx.export)")
    parser.add_argument("--inputs", "-m", type=positive_int, required=inputs_help is None, metavar="M",
                        help=inputs_help or "number of control inputs m, the columns of G(x): the header "
                                            "returns one L_G h entry per input")
    parser.add_argument("--order", type=int, choices=(1, 2), default=1,
                        help="1: h, L_f h, L_G h; 2: also L_f^2 h and L_G L_f h, for a HOCBF (needs "
                             "twice-differentiable activations)")
    parser.add_argument("--name", help="C++ namespace and file stem of the header (default: the model file's stem)")
    parser.add_argument("--dtype", choices=("float", "double"), default="float",
                        help="scalar type of the header; double for a host that wants the last digits, float "
                             "for microcontrollers")
    parser.add_argument("--layout", choices=("sweep", "min_memory"), default="sweep",
                        help="sweep: the real path once and all m+1 directions together (fastest); min_memory: one "
                             "direction at a time, recomputing the real path (the paper's 2 max n_i workspace)")
    parser.add_argument("-o", "--output", required=True, metavar="DIR",
                        help="directory for NAME.hpp and NAME_abi.cpp (created if missing)")
    add_limit_arguments(parser.add_argument_group("resource limits (checked before allocating)"))
    add_common_flags(parser)
    return parser


def main(argv: list[str] | None = None, prog: str = "cbfc") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)           # exits with 2 on usage errors
    return run_parsed(prog, args, lambda: compile_parsed(parser, args))


def compile_parsed(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Compile and write the header for parsed arguments (``args.inputs`` set); cbfsim compile calls it too."""
    from .api import compile_model
    from .emit_cpp import check_identifier
    if args.name is not None:
        try:
            check_identifier(args.name)
        except ValueError as exc:
            parser.error(str(exc))
    path = Path(args.model)
    if path.suffix.lower() != ".onnx":
        parser.error(f"{path}: cbfc reads ONNX files only (a .pt/.pth checkpoint is a pickle and is never loaded)")
    if not path.is_file():
        parser.error(f"{path}: no such file")
    try:
        compiled = compile_model(path, inputs=args.inputs, order=args.order, dtype=args.dtype, name=args.name,
                                 layout=args.layout, limits=limits_from_args(args))
    except CompilerError as exc:            # the same error, naming the model (the policy prints it)
        raise CompilerError(f"{path}: {exc}") from exc
    with output_directory(Path(args.output)):
        header, abi = compiled.write(args.output)
    log.info(f"wrote {header} and {abi}")
    for line in compiled.report.lines():
        log.info("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
