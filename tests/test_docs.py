"""The documentation site builds with no warning (mkdocs --strict: broken links, missing API objects)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_documentation_builds_strict(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings"):
        pytest.importorskip(module, reason="pip install -e '.[docs]'")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for name in ("simulate_batch", "compile_barrier", "CbfsimError", "register"):
        assert name in api, f"API reference lacks {name}"
