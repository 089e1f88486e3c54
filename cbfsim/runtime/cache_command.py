"""``cbfsim cache info|clear``: inspect or empty the build cache of compiled barriers."""
from __future__ import annotations

import argparse
from typing import Sequence

from compiler import cache


def cache_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="cbfsim cache", description="The build cache of compiled barriers ($CBFSIM_CACHE, else "
                                         "$XDG_CACHE_HOME/cbfsim, else ~/.cache/cbfsim).")
    parser.add_argument("action", choices=("info", "clear"),
                        help="info: where it is, how many entries (and damaged ones), its size; "
                             "clear: remove every entry")
    args = parser.parse_args(argv)
    if args.action == "info":
        print("\n".join(cache.info().lines()))
    else:
        print(f"removed {cache.clear()} entries from {cache.cache_dir()}")
    return 0
