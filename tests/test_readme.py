"""Every command block of the documentation, and every file in examples/, run as written.

The documentation is every Markdown page a user reads: README.md, the site's pages
(docs/**/*.md, in the order of mkdocs.yml's nav) and the lab notes beside the benchmarks
(benchmarks/*.md). Each ```bash block is one test, named by its page and the heading
above it (`README.md: Step by step`, `docs/guides/devices.md: Devices and profiling`),
so `-k guides/devices.md` runs one page. Each line of a block is one command
(backslash continuations joined, comment lines dropped). Blocks run in that order in one
sandbox, so a block may use what an earlier one wrote, as a reader's checkout would hold
it; a page's block run on its own first runs the README's Step by step, where the
guides start. Under `pytest -n` the blocks run in two halves (the README, guides and
examples; the benchmark pages and notes), each in a sandbox of its own (xdist_unit in
tests/conftest.py). Markers: `<!-- setup -->` or `<!-- test -->` right before a block leaves
it to CI (below); any other `<!-- NAME -->` there names the block in its test id.
```text, ```yaml and ```python blocks are shown, not run (the README's Python API
block runs in tests/test_api.py).

A sandbox stands in for a user's checkout: `work/` is the folder commands run from
(examples/ and the benchmark scripts copied in, so nothing lands in the repository),
`../shared` beside it holds a GLUE-style SST-2 slice of 100 synthetic rows and a tiny
random 6-layer BERT under the reference teacher's path, and `.venv/bin/activate` puts this
interpreter's environment on PATH. Each command is handed to bash exactly as printed,
so a renamed option, a moved file or a stale path fails here instead of for a user.

Every command runs with EDGEKD_BENCH_SMOKE=1 (benchmarks/smoke.py): the documented
benchmark commands run exactly as printed, and the variable shrinks the study, not the
command (one seed, one epoch, the fewest methods, repeats and trials that reach every
path), so a benchmark is checked for wiring in seconds instead of re-run in full. Each
must still write the results it documents, marked as a smoke run.

The Raspberry Pi line reaches a stand-in `ssh` that runs the remote line on this
machine (as the adb test's stand-in does for a phone). The README's set-up and test
blocks are not run here: CI runs those itself (`.ci/run`), and the site shows them
through snippets (`--8<-- "README.md:setup"`), not copies.
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


FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")  # its opening run and its language
MARKER = re.compile(r"^<!-- ([\w-]+) -->$")  # <!-- main -->; not <!-- --8<-- [start:x] -->


class _TagsAsNull(yaml.SafeLoader):
    """mkdocs.yml may carry tags for MkDocs (`!ENV`, `!!python/name:`): read as null."""


_TagsAsNull.add_multi_constructor("", lambda loader, suffix, node: None)


def doc_files() -> list[str]:
    """Every Markdown page a user reads, as paths from the repository root, in reading
    order: README.md, the site's pages in mkdocs.yml's nav order (any page outside the nav
    after them, sorted), then the lab notes beside the benchmarks."""

    def nav_pages(node: object) -> list[str]:
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            return [page for child in node for page in nav_pages(child)]
        return [f"docs/{node}"] if isinstance(node, str) else []

    config = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), _TagsAsNull)
    pages = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").rglob("*.md"))
    in_nav = [p for p in nav_pages(config.get("nav", [])) if p in pages]
    notes = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "benchmarks").glob("*.md"))
    return ["README.md", *in_nav, *(p for p in pages if p not in in_nav), *notes]


def fences(page: str) -> list[tuple[str, str, str, list[str]]]:
    """(heading, marker, language, lines) of every fenced block of a page, in order: the
    heading above it (without an `{ #id }`), the `<!-- NAME -->` on the line right
    before it (or ""), its language (or ""), its lines."""
    found, heading, previous = [], "", ""
    lines = iter((REPO / page).read_text(encoding="utf-8").splitlines())
    for line in lines:
        opened = FENCE.match(line)
        if opened:
            close, body = opened.group(1), []
            for inner in lines:
                if inner.strip().startswith(close) and not inner.strip().strip(close[0]):
                    break
                body.append(inner)
            else:
                raise AssertionError(f"{page}: a ``` block under '{heading}' is never closed")
            marker = MARKER.match(previous)
            found.append((heading, marker[1] if marker else "", opened.group(2), body))
        elif line.startswith("#"):
            heading = re.sub(r"\s*\{[^}]*\}\s*$", "", line.lstrip("# ")).strip()
        previous = line.strip()
    return found


def doc_blocks(page: str) -> list[tuple[str, list[str]]]:
    """(test id, commands) of every ```bash block of a page but the set-up and test ones;
    a command is one logical line (backslash continuations joined), comment lines
    dropped. The id is the page, the heading above the block and its marker."""
    blocks: list[tuple[str, list[str]]] = []
    for heading, marker, language, body in fences(page):
        if language != "bash" or marker in SKIPPED_BLOCKS:
            continue
        text = "\n".join(body).replace("\\\n", " ")
        commands = [c for c in text.splitlines() if c.strip() and not c.lstrip().startswith("#")]
        name = f"{page}: {heading}" + (f" ({marker})" if marker else "")
        twins = sum(1 for n, _ in blocks if n == name or n.startswith(f"{name} #"))
        blocks.append((f"{name} #{twins + 1}" if twins else name, commands))
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
    # 24 training rows: a small task, so the default transfer set draws 200 variants per
    # text (neighbour, tang), at most 4,400 rows for the 22 kept to train. At 180 rows
    # it held ~21,000 (distill-sst2-bilstm's test took 85 s), at 40 ~4,500 (28 s), at
    # 24 16 s; this whole module took 6.7 minutes on 2 cores.
    write_tsv(shared / "data" / "sst2" / "train.tsv", make_rows(24, seed=11))
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
    docstring says: NAME.json and NAME.md; those of a script that compares on one task
    at a time are named by its --task (sst2 unless given)."""
    found = re.search(r"python benchmarks/(\w+)\.py(.*)", command)
    if not found:
        return []
    name, args = found.groups()
    if name in ("methods_bert", "epoch_average"):
        task = re.search(r"--task ([\w-]+)", args)
        name = f"{name}_{task[1] if task else 'sst2'}"
    return [f"{name}.json", f"{name}.md"]


BLOCKS = [(page, name, commands) for page in doc_files() for name, commands in doc_blocks(page)]
# Where the guides start: the README's chain, one command at a time. Its last command's
# input, runs/bundle.zip, says it has run in this sandbox.
STEPS, STEPS_DONE = "README.md: Step by step", "runs/bundle.zip"


def test_readme_and_docs_have_the_blocks_users_copy():
    names = [name for _, name, _ in BLOCKS]
    assert "README.md: Main job (main)" in names and STEPS in names, names
    pages = {page for page, _, _ in BLOCKS}
    assert {"docs/guides/devices.md", "docs/guides/recipes.md", "docs/benchmarks/index.md"} <= pages
    commands = " | ".join(c for _, _, block in BLOCKS for c in block)
    for expected in (
        "edgekd export runs/student --out runs/export --int8",
        "edgekd run examples/recipe-sst2-bilstm.yaml",
        "--device raspberry-pi-4 --host pi@raspberrypi.local",
        "edgekd plan --teacher",
        "python benchmarks/chain_sst2.py",
    ):
        assert expected in commands, expected


@pytest.mark.parametrize("page,name,commands", BLOCKS, ids=[name for _, name, _ in BLOCKS])
def test_doc_block_runs_as_written(sandbox, page, name, commands):
    work = Path(str(sandbox["work"]))
    if page != "README.md" and not (work / STEPS_DONE).is_file():
        # Run on its own (-k): a guide starts where the README's Step by step ends.
        for command in next(block for _, n, block in BLOCKS if n == STEPS):
            run(sandbox, command)
    results = work / "benchmarks" / "results"
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
