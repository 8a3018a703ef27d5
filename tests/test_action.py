"""The GitHub Action (action.yml) run step by step in test_readme's sandbox.

Each `run:` step is handed to bash as a runner would (`set -eo pipefail`), its
`${{ ... }}` references filled in from the inputs (defaults, then the test's values),
the github context and earlier steps' outputs (read back from $GITHUB_OUTPUT), and its
`if:` evaluated. The `uses:` steps need GitHub: setup-python, the cache, the comment and
the upload are recorded, not run; the baseline download is this run's own export copied
where the action unpacks it (an unchanged PR must pass against it).
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_readme import run, sandbox  # noqa: F401  (sandbox: a fixture, used by name)

from conftest import REPO

pytestmark = pytest.mark.slow  # distils, exports and profiles, each in a subprocess

ACTION = yaml.safe_load((REPO / "action.yml").read_text())
STEPS: list[dict[str, Any]] = ACTION["runs"]["steps"]
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
REFERENCE = re.compile(r"\b(?:inputs|steps|github)\.[\w.-]+")
WORKFLOW = REPO / "examples" / "github-actions" / "edgekd-budget.yml"
TEST_INPUTS = {
    "teacher": "../shared/models/sst2-minilm-teacher",
    "data": "../shared/data/sst2",
    # A random tiny teacher's student is far below min_accuracy 0.85: the gate fails.
    "budget": "examples/budget-devices.yaml",
    "set": "student.options.embedding_dim=64",
    "epochs": "2",
    "install": "false",  # this interpreter already has edgekd; the install has its own test
}


class ActionRun:
    """One use of the action: its inputs, the github context, each step's outcome and
    outputs, and what the `uses:` steps were handed."""

    def __init__(self, box: dict[str, Any], inputs: dict[str, str], event: str) -> None:
        self.box, self.work = box, Path(box["work"])
        self.context = {
            "github.action_path": str(REPO),
            "github.event_name": event,
            "github.event.repository.default_branch": "main",
            "github.token": "a-token",
        }
        for name, spec in ACTION["inputs"].items():
            value = inputs.get(name, spec.get("default", ""))
            self.context[f"inputs.{name}"] = self.fill(str(value))
        self.outcomes: dict[str, str] = {}
        self.handed: dict[str, dict[str, str]] = {}  # uses: action → its `with`, filled
        self.ran: list[str] = []  # edgekd subcommands, in order
        self.summary = self.work / "step-summary.md"
        self.env = {
            "GITHUB_STEP_SUMMARY": str(self.summary),
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_REPOSITORY": "you/yours",
            "GITHUB_RUN_ID": "42",
        }

    def value(self, reference: str) -> str:
        if reference.startswith("steps.") and reference.endswith(".outcome"):
            return self.outcomes.get(reference.split(".")[1], "")
        return self.context.get(reference, "")  # an unset output reads as '', as on GitHub

    def fill(self, text: str) -> str:
        def one(match: re.Match[str]) -> str:
            assert REFERENCE.fullmatch(match[1]), f"only plain references here: {match[0]}"
            return self.value(match[1])

        return EXPRESSION.sub(one, text)

    def condition(self, step: dict[str, Any]) -> bool:
        """`if:` as GitHub reads it: without always(), a failed step before skips it."""
        expression = str(step.get("if", "success()"))
        if "always()" not in expression and "failure" in self.outcomes.values():
            return False
        python = REFERENCE.sub(lambda m: repr(self.value(m[0])), expression)
        python = (
            python.replace("always()", "True")
            .replace("success()", "True")
            .replace("&&", " and ")
            .replace("||", " or ")
        )
        assert re.fullmatch(r"[\w\s'\"=!().,/-]*", python), python
        return bool(eval(python, {"__builtins__": {}}))  # our own action.yml, values repr'd

    def steps(self, start: str | None = None, until: str = "exit") -> None:
        """Run the steps from the one with id `start` up to (not into) id `until`; the
        last step, which exits with the gate's code, is `exit_code()`."""
        ids = [s.get("id") for s in STEPS]
        for step in STEPS[ids.index(start) if start else 0 : ids.index(until)]:
            self.step(step)

    def step(self, step: dict[str, Any]) -> None:
        key = step.get("id") or step["name"]
        if not self.condition(step):
            self.outcomes[key] = "skipped"
            return
        if "uses" in step:
            name = step["uses"].split("@")[0]
            self.handed[name] = {k: self.fill(str(v)) for k, v in step.get("with", {}).items()}
            if name == "dawidd6/action-download-artifact":  # main's artifact: this export
                into = Path(self.handed[name]["path"]) / "export"
                shutil.rmtree(into, ignore_errors=True)
                shutil.copytree(self.work / self.context["inputs.out"] / "export", into)
            self.outcomes[key] = "success"
            return
        outputs = self.work / "github-output"
        outputs.write_text("")
        env = {k: self.fill(str(v)) for k, v in step.get("env", {}).items()}
        folder = self.fill(step.get("working-directory", "."))
        assert step["shell"] == "bash"
        run(  # test_readme's helper: fails on a non-zero exit or a traceback
            self.box,
            f"set -eo pipefail\ncd {folder}\n{step['run']}",
            {**self.env, **env, "GITHUB_OUTPUT": str(outputs)},
        )
        self.ran += re.findall(r"^\s*edgekd (\w+)", step["run"], flags=re.M)
        self.outcomes[key] = "success"
        for line in outputs.read_text().splitlines():
            name, _, value = line.partition("=")
            self.context[f"steps.{key}.outputs.{name}"] = value

    def exit_code(self) -> int:
        """The last step, run as the runner would: its exit code is the job's."""
        last = STEPS[-1]
        assert last["id"] == "exit" and self.condition(last)
        env = {**self.box["env"], **{k: self.fill(str(v)) for k, v in last["env"].items()}}
        r = subprocess.run(
            ["bash", "-eo", "pipefail", "-c", last["run"]], cwd=self.work, env=env, timeout=60
        )
        return r.returncode

    def outputs(self) -> dict[str, str]:
        return {k: self.fill(v["value"]) for k, v in ACTION["outputs"].items()}


@pytest.fixture(scope="module")
def pull_request(sandbox):  # noqa: F811  (the imported fixture, by name)
    """The whole action on a pull request, against the budget that fails."""
    action = ActionRun(sandbox, TEST_INPUTS, "pull_request")
    action.steps()
    return action


def test_action_steps_run_in_order_and_fail_the_job_when_a_limit_fails(pull_request):
    action = pull_request
    assert action.ran == ["distill", "export", "profile", "check", "check", "report"]
    out = action.outputs()
    assert out["budget-exit-code"] == "1" and out["baseline-exit-code"] == "1"
    assert out["exit-code"] == "1" and out["verdict"] == "fail"
    assert action.exit_code() == 1  # the gate's code fails the job
    # What the action hands on: each output path exists.
    for name in ("check-json", "junit", "report", "pr-comment", "bench-json", "bmf"):
        assert Path(out[name]).is_file(), (name, out[name])
    assert Path(out["export-dir"], "export.json").is_file()
    assert out["check-json"].endswith("check-baseline.json")  # the gate's: limits + baseline
    # The PR comment and the job summary: the limits and the comparison, one verdict.
    comment = Path(out["pr-comment"]).read_text()
    for fragment in ("| limit |", "| metric | baseline | now |", "edgekd: fail (exit 1)"):
        assert fragment in comment, fragment
    assert "/actions/runs/42" in comment
    assert action.summary.read_text() == comment
    assert action.handed["marocchino/sticky-pull-request-comment"]["path"] == out["pr-comment"]
    # The upload: every path matches files, and the export sits at the artifact's root,
    # where the next run's baseline check looks (baseline-dir/export/export.json).
    upload = action.handed["actions/upload-artifact"]
    assert upload["name"] == "edgekd-run"
    paths = [Path(p) for p in upload["path"].split()]
    for path in paths:
        assert list(path.parent.glob(path.name)), path
    assert {p.parent for p in paths} == {Path(out["out-dir"])}  # the artifact's root
    assert (Path(out["out-dir"]) / "export" / "export.json") == paths[0] / "export.json"
    assert (paths[0] / "export.json").is_file()
    # The cache step is keyed on teacher and data digests and holds the teacher's logits.
    cache = action.handed["actions/cache"]
    assert cache["path"] == action.box["env"]["EDGEKD_CACHE"]
    assert list(Path(cache["path"], "logits").glob("*.safetensors"))
    assert cache["key"].startswith(cache["restore-keys"]) and "-teacher-" in cache["key"]


def checks_again(action: ActionRun, **inputs: str) -> ActionRun:
    """The checks onward again, on the export `action` made, with other inputs."""
    again = copy.copy(action)
    again.context, again.outcomes = dict(action.context), dict(action.outcomes)
    again.handed, again.ran = {}, []
    again.context.update({f"inputs.{k.replace('_', '-')}": v for k, v in inputs.items()})
    again.steps(start="budget")
    return again


def test_action_exits_zero_when_the_budget_holds(pull_request, tmp_path):
    generous = tmp_path / "budget.yaml"
    generous.write_text("model: shipped\nmax_bytes: 100000000\n")
    # This export against itself: no regression, unless a busy runner's noise spans the
    # default 5% latency margin; the wide one keeps the test about the exit code.
    action = checks_again(
        pull_request, budget=str(generous), baseline_args="-s max_latency_regression=50%"
    )
    out = action.outputs()
    codes = (out["budget-exit-code"], out["baseline-exit-code"], out["verdict"])
    assert codes == ("0", "0", "pass")
    assert action.exit_code() == 0
    comment = Path(out["pr-comment"]).read_text()
    assert "edgekd: pass (exit 0)" in comment and "| ≤ +50% |" in comment


def test_action_exits_with_the_error_code_when_a_check_cannot_run(pull_request, tmp_path):
    action = checks_again(pull_request, budget=str(tmp_path / "missing.yaml"))
    out = action.outputs()
    assert (out["budget-exit-code"], out["exit-code"], out["verdict"]) == ("2", "2", "error")
    assert action.exit_code() == 2  # an error is not reported as a failed limit
    assert "edgekd: error (exit 2)" in Path(out["pr-comment"]).read_text()


@pytest.mark.parametrize(
    "event,compare,comment", [("pull_request", "true", "true"), ("push", "false", "false")]
)
def test_action_compares_and_comments_only_on_pull_requests(
    sandbox,  # noqa: F811
    event,
    compare,
    comment,
):
    action = ActionRun(sandbox, TEST_INPUTS, event)
    action.steps(until="cache")
    assert action.value("steps.prep.outputs.compare") == compare
    assert action.value("steps.prep.outputs.comment") == comment
    key = action.value("steps.prep.outputs.cache-key")
    other = ActionRun(sandbox, {**TEST_INPUTS, "set": "student.options.embedding_dim=32"}, event)
    other.steps(until="cache")
    restore = action.value("steps.prep.outputs.cache-restore-key")
    # Other distil options: another exact key, the same teacher-and-data prefix.
    assert other.value("steps.prep.outputs.cache-key") != key
    assert other.value("steps.prep.outputs.cache-restore-key") == restore


def test_action_installs_like_the_readme_setup(sandbox, tmp_path):  # noqa: F811
    """CPU torch at the README's version, then the lock (hash-checked), then edgekd from
    the action's own checkout; `pip` here is a stand-in that logs what it was asked."""
    log = tmp_path / "pip.log"
    (tmp_path / "pip").write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    (tmp_path / "pip").chmod(0o755)
    action = ActionRun(sandbox, {**TEST_INPUTS, "install": "true"}, "push")
    action.env["PATH"] = f"{tmp_path}:{sandbox['env']['PATH']}"
    action.steps(until="prep")
    setup = re.search(r"pip install torch==([\d.]+)", (REPO / "README.md").read_text())
    assert setup and action.value("inputs.torch-version") == setup[1]
    assert log.read_text().splitlines() == [
        f"install torch=={setup[1]} --index-url https://download.pytorch.org/whl/cpu",
        f"install --no-deps --require-hashes -r {REPO}/requirements.lock",
        f"install --no-deps {REPO}",
    ]
    # The lock was compiled for the Python the action sets up by default.
    python = action.value("inputs.python-version")
    assert f"with Python {python}\n" in (REPO / "requirements.lock").read_text()


def test_action_declares_every_input_its_steps_read_with_a_description():
    text = (REPO / "action.yml").read_text()
    read = set(re.findall(r"\binputs\.([\w-]+)", text))
    declared = ACTION["inputs"]
    assert read == set(declared)  # none undeclared, none unused
    for name, spec in declared.items():
        assert spec.get("description"), name
        assert spec.get("required") or "default" in spec, f"{name}: a default, or required"
    assert ACTION["runs"]["using"] == "composite"
    ids = {s.get("id") for s in STEPS}
    for step in STEPS:
        assert ("run" in step) != ("uses" in step), step["name"]
        if "run" in step:
            assert step.get("shell") == "bash", step.get("name")
            # Inputs reach a script through env:, never pasted into it (shell injection).
            assert "${{" not in step["run"], step.get("name")
    for name, spec in ACTION["outputs"].items():
        assert spec.get("description"), name
        step_ids = set(re.findall(r"steps\.([\w-]+)\.outputs", spec["value"]))
        assert step_ids and step_ids <= ids, name


def test_example_workflow_uses_the_action_with_declared_inputs_only():
    flow = yaml.safe_load(WORKFLOW.read_text())
    steps = flow["jobs"]["distil-export-check"]["steps"]
    (edgekd,) = [s for s in steps if s.get("uses", "").startswith("edgekd/edgekd@")]
    given = set(edgekd["with"])
    assert given <= set(ACTION["inputs"]), given - set(ACTION["inputs"])
    required = {k for k, v in ACTION["inputs"].items() if v.get("required")}
    assert required <= given
    read = set(re.findall(rf"steps\.{edgekd['id']}\.outputs\.([\w-]+)", WORKFLOW.read_text()))
    assert read and read <= set(ACTION["outputs"]), read - set(ACTION["outputs"])


def test_readme_documents_every_input_and_output_with_its_default():
    page = (REPO / "examples" / "github-actions" / "README.md").read_text()
    rows = dict(re.findall(r"^\| `([\w-]+)` \|(.*)\|$", page, flags=re.M))
    for name, spec in ACTION["inputs"].items():
        assert name in rows, f"examples/github-actions/README.md: no row for input {name}"
        default = str(spec.get("default", ""))
        if default:
            assert f"`{default}`" in rows[name], (name, default)
    for name in ACTION["outputs"]:
        assert name in rows, f"examples/github-actions/README.md: no row for output {name}"
