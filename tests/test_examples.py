"""Every file in examples/ and the README's commands stay valid."""

import subprocess
from pathlib import Path

import pytest

from edgekd.budget import load_budget
from edgekd.config import DistillConfig, TeacherConfig, load_yaml, validate

REPO = Path(__file__).resolve().parents[1]


def test_example_budget_loads():
    b = load_budget(REPO / "examples" / "budget.yaml")
    assert b.model == "int8" and b.max_bytes is not None


@pytest.mark.parametrize(
    "name,model",
    [("distill-sst2-bilstm.yaml", DistillConfig), ("teacher-sst2.yaml", TeacherConfig)],
)
def test_example_configs_validate(name, model):
    path = REPO / "examples" / name
    validate(model, load_yaml(path), str(path))


def test_ci_runs_readme_setup_and_test_blocks_verbatim():
    script = (REPO / ".ci" / "run").read_text()
    fn = script[script.index("readme_block() {") : script.index("setup=$(")]
    for marker, must_contain in (
        ("setup", "pip install torch==2.13.0"),
        ("test", "pytest"),
        ("main", "edgekd quickstart"),
    ):
        out = subprocess.run(
            ["bash", "-c", f"{fn}\nreadme_block {marker}"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert must_contain in out and "```" not in out
