"""The README's commands and every file in examples/, run as written.

A sandbox stands in for a user's checkout: `work/` is the folder commands run from
(examples/ and the benchmark scripts copied in, so nothing lands in the repository),
`../shared` beside it holds a GLUE-style SST-2 slice of 240 synthetic rows and a tiny
random 6-layer BERT under the reference teacher's path, and `.venv/bin/activate` puts this
interpreter's environment on PATH. Each command is handed to bash exactly as printed,
so a renamed option, a moved file or a stale path fails here instead of for a user.

Every command runs with EDGEKD_BENCH_SMOKE=1 (benchmarks/smoke.py): the README's
benchmark commands run exactly as printed, and the variable shrinks the study, not the
command (one seed, one epoch, the fewest methods, repeats and trials that reach every
path), so a benchmark is checked for wiring in seconds instead of re-run in full. Each
must still write the results it documents, marked as a smoke run.

The Raspberry Pi line reaches a stand-in `ssh` that runs the remote line on this
machine (as the adb test's stand-in does for a phone). The README's set-up and test
blocks are not run here: CI runs those itself (`.ci/run`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, build_tiny_bert, make_rows, write_tsv

pytestmark = pytest.mark.slow  # trains, exports and profiles, each in a subprocess

# Gates answer with their verdict: 1 means "a limit failed", which a random tiny teacher
# and its student do against the README's real budgets. Anything else must exit 0.
GATES = ("edgekd check", "edgekd run", "edgekd quickstart")
SKIPPED_BLOCKS = ("setup", "test")  # run by .ci/run, not from inside pytest
PI_HOST = "pi@raspberrypi.local"

FAKE_SSH = """#!{python}
# ssh OPTIONS -- TARGET 'REMOTE LINE': run the remote line here, stdin passed through.
import subprocess, sys
args = sys.argv[1:]
target, line = args[args.index("--") + 1 :]
assert target == {host!r}, target
with open({log!r}, "a") as f:
    f.write(line + "\\n")
sys.exit(subprocess.run(["sh", "-c", line]).returncode)
"""


def readme_blocks() -> list[tuple[str, list[str]]]:
    """(heading, commands) of every ```bash block but the set-up and test ones, in order;
    a command is one logical line (backslash continuations joined), comments left in."""
    blocks, heading, marker = [], "", ""
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("# ").strip()
        elif line.startswith("<!-- "):
            marker = line[5:-4].strip()
        elif line.strip() == "```bash":
            body = []
            i += 1
            while lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            if marker not in SKIPPED_BLOCKS:
                text = "\n".join(body).replace("\\\n", " ")
                commands = [c for c in text.splitlines() if c.strip() and not c.startswith("#")]
                blocks.append((f"{heading} {marker}".strip(), commands))
            marker = ""
        i += 1
    return blocks


def example_commands(path: Path) -> list[str]:
    """The `edgekd ...` commands a YAML example's header comment documents."""
    header = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        header.append(line.lstrip("#").strip())
    text = " ".join(header)
    found = re.findall(r"`(edgekd [^`]+)`", text) + [x for x in header if x.startswith("edgekd ")]
    return [c for c in found if f"examples/{path.name}" in c]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("user")
    work, shared, home, bin_ = (root / n for n in ("work", "shared", "home", "bin"))
    write_tsv(shared / "data" / "sst2" / "train.tsv", make_rows(180, seed=11))
    write_tsv(shared / "data" / "sst2" / "dev.tsv", make_rows(60, seed=12))
    # Six layers, as the reference teacher has: the examples distil 3-layer BERTs from it.
    build_tiny_bert(shared / "models" / "sst2-minilm-teacher", layers=6)
    shutil.copytree(REPO / "examples", work / "examples")
    (work / "benchmarks").mkdir()
    for script in (REPO / "benchmarks").glob("*.py"):
        shutil.copy(script, work / "benchmarks" / script.name)
    venv_bin = Path(sys.executable).parent
    (work / ".venv" / "bin").mkdir(parents=True)
    (work / ".venv" / "bin" / "activate").write_text(f'export PATH="{venv_bin}:$PATH"\n')
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text("")  # the Pi's key, as a user would add it
    bin_.mkdir()
    log = root / "ssh.log"
    (bin_ / "ssh").write_text(FAKE_SSH.format(python=sys.executable, host=PI_HOST, log=str(log)))
    (bin_ / "ssh").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PYTEST_", "COV_"))}
    env.update(
        PATH=f"{bin_}:{venv_bin}:{env.get('PATH', '')}",
        HOME=str(home),
        EDGEKD_CACHE=str(root / "cache"),
        HF_HUB_OFFLINE="1",
        COLUMNS="120",
        EDGEKD_BENCH_SMOKE="1",  # benchmarks: a wiring check on the smallest work
    )
    return {"work": work, "env": env, "ssh_log": log}


def run(sandbox: dict[str, object], command: str, env: dict[str, str] | None = None) -> None:
    """Run `command` with bash in the sandbox; fail unless it exits as a user expects."""
    r = subprocess.run(
        ["bash", "-c", command],
        cwd=sandbox["work"],
        env={**sandbox["env"], **(env or {})},  # type: ignore[dict-item]
        capture_output=True,
        text=True,
        # A hang guard, not a budget: the slowest command (resume_cost.py, four distill
        # processes under smoke) takes about 20 s on 2 cores, so 600 s is 30× that.
        timeout=600,
    )
    shown = f"$ {command}\nexit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stdout + r.stderr, shown
    words = command.split("&&")[-1].strip()
    allowed = {0, 1} if words.startswith(GATES) else {0}
    if PI_HOST in command:
        # Staged over "ssh" and run there: a temp folder, the agent and model sent in.
        sent = Path(str(sandbox["ssh_log"])).read_text()
        assert "mktemp -d" in sent and "/agent.py" in sent and "/model.onnx" in sent, sent
        if r.returncode == 2:
            # The Pi spec pins core 3; a stand-in "board" with fewer cores says so.
            assert "cpu_affinity [3]: this machine has cores" in r.stderr, shown
            return
    assert r.returncode in allowed, shown


def bench_results(command: str) -> list[str]:
    """The files `python benchmarks/NAME.py ...` writes to benchmarks/results/, as its
    docstring says: NAME.json and NAME.md, methods_bert's named by its --task."""
    found = re.search(r"python benchmarks/(\w+)\.py(.*)", command)
    if not found:
        return []
    name, args = found.groups()
    if name == "methods_bert":
        task = re.search(r"--task (\w+)", args)
        name = f"methods_bert_{task[1] if task else 'sst2'}"
    return [f"{name}.json", f"{name}.md"]


BLOCKS = readme_blocks()


def test_readme_has_the_blocks_users_copy():
    headings = " | ".join(h for h, _ in BLOCKS)
    for expected in ("main", "Step by step", "One recipe", "Profiling and devices", "Benchmark"):
        assert expected in headings, headings
    commands = [c for _, block in BLOCKS for c in block]
    assert any("edgekd export runs/student --out runs/export --int8" in c for c in commands)


@pytest.mark.parametrize("heading,commands", BLOCKS, ids=[h for h, _ in BLOCKS])
def test_readme_block_runs_as_written(sandbox, heading, commands):
    results = Path(str(sandbox["work"])) / "benchmarks" / "results"
    for command in commands:
        written = [results / name for name in bench_results(command)]
        for path in written:  # what this command writes, not an earlier one
            path.unlink(missing_ok=True)
        run(sandbox, command)
        for path in written:
            assert path.is_file(), f"{command}: wrote no {path.name}"
            if path.suffix == ".json":  # its meta; a list of rows marks every row
                result = json.loads(path.read_text())
                metas = result if isinstance(result, list) else [result.get("meta", result)]
                assert all(m.get("smoke") is True for m in metas), path.name
            else:
                assert "Smoke run" in path.read_text().splitlines()[0], path.name


@pytest.mark.parametrize(
    "name", sorted(p.name for p in (REPO / "examples").glob("*.yaml")), ids=str
)
def test_example_runs_its_documented_command(sandbox, name):
    commands = example_commands(REPO / "examples" / name)
    assert commands, f"examples/{name}: say in its header how to run it (`edgekd ...`)"
    for command in commands:
        assert f"examples/{name}" in command, command
        run(sandbox, command)


def test_github_actions_workflow_steps_run_in_order(sandbox):
    """Every step that calls edgekd, with the workflow's placeholders pointed at the
    sandbox's data, teacher and a shipped budget; then the files later steps upload."""
    flow = yaml.safe_load((REPO / "examples" / "github-actions" / "edgekd-budget.yml").read_text())
    steps = flow["jobs"]["distil-export-check"]["steps"]
    work = sandbox["work"]
    assert isinstance(work, Path)
    summary = work / "step-summary.md"
    env = {
        "TEACHER": "../shared/models/sst2-minilm-teacher",
        "DATA": "../shared/data/sst2",
        "BUDGET": "examples/budget-devices.yaml",
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    assert set(env) - {"GITHUB_STEP_SUMMARY"} == set(flow["env"])  # every placeholder set
    ran = []
    for step in steps:
        if step.get("uses", "").startswith("dawidd6/action-download-artifact"):
            # main's artifact: here, this very export (an unchanged PR must pass).
            shutil.copytree(work / "runs" / "export", work / step["with"]["path"] / "export")
        command = step.get("run", "").strip()
        if command.startswith("edgekd "):
            run(sandbox, command, env)
            ran.append(command.split()[1])
    assert ran == ["distill", "export", "profile", "check", "check", "report"]
    for path in (
        "runs/junit.xml", "runs/bench.json", "runs/check.json", "runs/report/report.html",
        "runs/pr-comment.md", "runs/bmf.json", "runs/junit-baseline.xml",
    ):  # fmt: skip
        assert (work / path).is_file(), path
    assert "| limit |" in summary.read_text()
    assert "| metric | baseline | now |" in (work / "runs" / "pr-comment.md").read_text()
