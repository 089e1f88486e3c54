"""``cbfsim cache info|clear``: inspect or empty the build cache of compiled barriers."""
from __future__ import annotations

import logging
from typing import Sequence

from compiler import cache
from compiler.cli_errors import OneLineParser, add_common_flags, run_parsed

log = logging.getLogger("cbfsim.cache")


def build_parser() -> OneLineParser:
    """The parser of ``cbfsim cache`` (docs/cli.md is generated from it)."""
    parser = OneLineParser(
        prog="cbfsim cache", description="The build cache of compiled barriers ($CBFSIM_CACHE, else "
                                         "$XDG_CACHE_HOME/cbfsim, else ~/.cache/cbfsim).")
    parser.add_argument("action", choices=("info", "clear"),
                        help="info: where it is, how many entries (and damaged ones), its size; "
                             "clear: remove every entry")
    add_common_flags(parser)
    return parser


def cache_main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    def act() -> int:
        if args.action == "info":
            log.info("\n".join(cache.info().lines()))
        else:
            log.info(f"removed {cache.clear()} entries from {cache.cache_dir()}")
        return 0
    return run_parsed(parser.prog, args, act)
