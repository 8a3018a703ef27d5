"""The README's Python API block runs as written (the chain a notebook user copies)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def api_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^<!-- api -->\n```python\n(.*?)^```", text, re.S | re.M)
    assert match, "README.md lacks a ```python block right after <!-- api -->"
    return match.group(1)


@pytest.mark.slow
def test_readme_api_block_runs_the_chain_as_written(tmp_path):
    needed = [SHARED / "data" / "sst2", SHARED / "models" / "sst2-minilm-teacher"]
    if not all(p.exists() for p in needed):
        pytest.skip("needs ../shared/data/sst2 and ../shared/models/sst2-minilm-teacher")
    # A repository root of its own (../shared beside it), so runs/ lands in tmp_path.
    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "shared").symlink_to(SHARED)
    env = {**os.environ, "EDGEKD_CACHE": str(tmp_path / "cache")}
    r = subprocess.run(
        [sys.executable, "-c", api_block()], cwd=root, env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("student ") and lines[-1].startswith("budget "), r.stdout
    export = root / "runs" / "api" / "export"
    assert (export / "export.json").is_file() and list(export.glob("profile-*.json"))
