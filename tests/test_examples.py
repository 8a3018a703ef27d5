"""Every file in examples/ validates, and CI reads the README's set-up and test blocks
(tests/test_readme.py runs the README's other commands and each example as written)."""

import subprocess
from pathlib import Path

import pytest

from edgekd.budget import load_budget
from edgekd.config import DistillConfig, TeacherConfig, load_yaml, validate

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["budget.yaml", "budget-targets.yaml", "budget-devices.yaml"])
def test_example_budgets_load(name):
    b = load_budget(REPO / "examples" / name)
    assert b.model == "int8" and b.max_bytes is not None
    for device in b.devices:
        assert b.for_device(device).max_p90_ms is not None


@pytest.mark.parametrize(
    "name,model",
    [
        ("distill-sst2-bilstm.yaml", DistillConfig),
        ("distill-sst2-bilstm-tang.yaml", DistillConfig),
        ("distill-sst2-bert3.yaml", DistillConfig),
        ("distill-sst2-takd.yaml", DistillConfig),
        ("teacher-sst2.yaml", TeacherConfig),
    ],
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


def test_distill_config_rejects_unknown_assistant_fields():
    from edgekd.errors import EdgeKDError

    with pytest.raises(EdgeKDError, match=r"unknown assistant field\(s\) \['studnet'\]"):
        validate(DistillConfig, {"teacher": "t", "assistant": {"studnet": "bert"}}, "f.yaml")


@pytest.mark.parametrize("name", ["recipe-sst2-bilstm.yaml", "recipe-sst2-bert3.yaml"])
def test_example_recipes_validate(name, monkeypatch):
    from edgekd.recipe import load_recipe

    monkeypatch.chdir(REPO)  # recipe paths are relative to where edgekd runs
    recipe = load_recipe(REPO / "examples" / name)
    assert recipe.teacher.path == "../shared/models/sst2-minilm-teacher"
    assert recipe.budget_model().max_bytes is not None


def test_github_actions_workflow_calls_edgekd_with_valid_options():
    """Every `edgekd` line in the example workflow parses against the real CLI, and
    the check step writes the outputs the later steps read."""
    import shlex

    import yaml
    from typer.main import get_command

    from edgekd.cli import app

    flow = yaml.safe_load((REPO / "examples" / "github-actions" / "edgekd-budget.yml").read_text())
    steps = flow["jobs"]["distil-export-check"]["steps"]
    cli = get_command(app)
    seen = []
    for step in steps:
        for line in step.get("run", "").splitlines():
            if line.strip().startswith("edgekd "):
                name, *args = shlex.split(line.replace("\n", " "))[1:]
                cli.commands[name].make_context(name, args)  # raises on a bad option
                seen.append(name)
    assert seen == ["distill", "export", "profile", "check", "check", "report"]
    check = next(s for s in steps if s.get("id") == "check")["run"]
    for flag in ("--junit runs/junit.xml", "--github-summary", "--bench-json runs/bench.json"):
        assert flag in check
    uses = {s.get("uses", "").split("@")[0]: s for s in steps}
    assert uses["mikepenz/action-junit-report"]["with"]["report_paths"] == "runs/junit*.xml"
    baseline = next(s for s in steps if s.get("id") == "baseline")["run"]
    for flag in ("--baseline baseline/export", "--markdown runs/pr-comment.md", "--bmf"):
        assert flag in baseline
    comment = uses["marocchino/sticky-pull-request-comment"]["with"]
    assert comment["path"] == "runs/pr-comment.md"
    assert uses["dawidd6/action-download-artifact"]["with"]["name"] == "edgekd-run"
    bench = uses["benchmark-action/github-action-benchmark"]["with"]
    assert (
        bench["tool"] == "customSmallerIsBetter" and bench["output-file-path"] == "runs/bench.json"
    )
