"""Issue 24: a CLI subprocess must not pay for heavy imports it does not use. ``import cbfsim``,
``cbfsim --help``, ``cbfsim cache`` and a usage error load none of osqp, scipy, matplotlib, sympy or
torch; the names they would have bound still resolve, lazily, to the right objects."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("osqp", "scipy", "matplotlib", "sympy", "torch")


def heavy_modules_after(code: str) -> list[str]:
    """The heavy top-level packages a fresh interpreter holds after running ``code``."""
    probe = (code + "\nimport sys\nprint(sorted({m.split('.')[0] for m in sys.modules} & set(" + repr(HEAVY) + ")))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return ast.literal_eval(result.stdout.strip().splitlines()[-1])


USAGE_ERROR = ("import contextlib, io\nfrom cbfsim.cli import main\nwith contextlib.redirect_stderr(io.StringIO()):\n"
               "    try:\n        code = main({argv!r})\n    except SystemExit as exc:\n        code = exc.code\n"
               "assert code == 2, code")


@pytest.mark.parametrize("code", [
    "import cbfsim",
    "import cbfsim.runtime",
    "import contextlib, io\nfrom cbfsim.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n"
    "    assert main(['--help']) == 0",
    USAGE_ERROR.format(argv=["cache", "foo"]),
    USAGE_ERROR.format(argv=["simulate", "model.json", "--t-final", "0", "--x0", "0,0"]),
])
def test_light_paths_load_no_heavy_module(code):
    assert heavy_modules_after(code) == []


def test_lazy_names_resolve_to_the_objects_of_their_modules():
    import cbfsim
    import cbfsim.runtime
    import cbfsim.simulate  # noqa: F401  (binds nothing over the function; see cbfsim/__init__.py)
    import compiler.api
    import compiler.build
    module = sys.modules["cbfsim.simulate"]
    assert cbfsim.simulate is module.simulate and cbfsim.simulate_batch is module.simulate_batch
    assert cbfsim.runtime.compile_barrier is compiler.api.compile_barrier
    assert cbfsim.runtime.CXXFLAGS is compiler.build.CXXFLAGS
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        cbfsim.runtime.nope  # noqa: B018
