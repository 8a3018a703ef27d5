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


def test_every_stage_takes_its_config_then_its_inputs_then_its_folder():
    """The order recipes, the CLI and a notebook call them in: a stage's folder is the
    argument after its inputs (a recipe binds config and inputs, then passes the folder)."""
    import inspect

    from edgekd import api as kd

    leading = {
        kd.teacher: ["cfg", "out_dir"],
        kd.distill: ["cfg", "out_dir"],
        kd.export: ["cfg", "student_dir", "out_dir"],
        kd.profile: ["cfg", "models", "out_dir"],
        kd.check: ["budget", "artifacts", "out_dir"],
        kd.plan: ["cfg", "budget", "out_dir"],
        kd.bundle: ["export_dir", "out_dir"],
        kd.report: ["run_dir", "out_dir"],
        kd.trim: ["student_dir", "out_dir"],
        kd.evaluate: ["data", "model", "out"],
    }
    for stage, names in leading.items():
        params = list(inspect.signature(stage).parameters)
        assert params[: len(names)] == names, stage.__name__
