"""Every file in examples/ validates (budgets, configs, recipes, the GitHub Action's calls
and its example workflow), and CI's `.ci/run` reads the README's set-up and test blocks
as written (tests/test_readme.py runs every other ```bash block of the README, the docs
site's pages and benchmarks/*.md, and each example's documented command)."""

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


def test_github_action_calls_edgekd_with_valid_options():
    """Every option the action (action.yml) passes to `edgekd`, and the default of each
    input that is split into options, exists on the real CLI; tests/test_action.py runs
    the steps themselves."""
    import re
    import shlex

    import yaml
    from typer.main import get_command

    from edgekd.cli import app

    action = yaml.safe_load((REPO / "action.yml").read_text())
    cli = get_command(app)
    seen = []
    for step in action["runs"]["steps"]:
        script = step.get("run", "").replace("\\\n", " ")
        for line in script.splitlines():
            if not line.strip().startswith("edgekd "):
                continue
            name, *args = shlex.split(line)[1:]
            command = cli if name.startswith("-") else cli.commands[name]
            known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
            options = [a for a in ([name] if command is cli else args) if re.match(r"-", a)]
            assert set(options) <= known, (line, set(options) - known)
            seen.append(name)
    assert seen == ["--version", "distill", "export", "profile", "check", "check", "report"]
    defaults = {k: shlex.split(v.get("default", "")) for k, v in action["inputs"].items()}
    for name, given, args in (
        ("export", ["runs/student", "--out", "runs/export"], "export-args"),
        ("profile", ["runs/export/model.int8.onnx"], "profile-args"),
        ("check", ["runs/export"], "check-args"),
    ):
        cli.commands[name].make_context(name, [*given, *defaults[args]])  # raises if bad


def test_github_actions_workflow_reads_the_actions_outputs():
    """The example workflow is the action plus optional steps, each fed an output."""
    import yaml

    flow = yaml.safe_load((REPO / "examples" / "github-actions" / "edgekd-budget.yml").read_text())
    steps = flow["jobs"]["distil-export-check"]["steps"]
    assert not any("edgekd " in s.get("run", "") for s in steps)  # the action runs edgekd
    uses = {s.get("uses", "").split("@")[0]: s.get("with", {}) for s in steps}
    assert uses["edgekd/edgekd"]["teacher"] and uses["edgekd/edgekd"]["data"]
    junit = uses["mikepenz/action-junit-report"]["report_paths"]
    assert junit == "${{ steps.edgekd.outputs.junit }}"
    bench = uses["benchmark-action/github-action-benchmark"]
    assert bench["tool"] == "customSmallerIsBetter"
    assert bench["output-file-path"] == "${{ steps.edgekd.outputs.bench-json }}"
    bencher = next(s for s in steps if "bencher run" in s.get("run", ""))
    assert "--adapter json" in bencher["run"]
    assert bencher["env"]["BMF"] == "${{ steps.edgekd.outputs.bmf }}"
