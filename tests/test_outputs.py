"""A user's files are theirs: every command that writes a folder refuses, before any
work, one that holds files edgekd did not write, and `--overwrite` keeps them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekd.cli import app
from edgekd.io import OUTPUT_REFUSED

runner = CliRunner()


def user_files(folder: Path) -> dict[Path, bytes]:
    """notes.txt, docs/ and .ssh/id_rsa: what must survive byte for byte."""
    (folder / "docs").mkdir(parents=True, exist_ok=True)
    (folder / ".ssh").mkdir(exist_ok=True)
    for rel, text in (("notes.txt", "mine"), ("docs/a.md", "# mine"), (".ssh/id_rsa", "key")):
        (folder / rel).write_text(text)
    return {
        p: p.read_bytes()
        for p in (folder / "notes.txt", folder / "docs/a.md", folder / ".ssh/id_rsa")
    }


@pytest.fixture
def exported(tiny_chain):
    return tiny_chain


def commands(root: Path, out: Path, teacher: Path, data: Path) -> dict[str, list[str]]:
    return {
        "teacher": ["teacher", "--base", str(teacher), "--data", str(data), "--out", str(out)],
        "distill": ["distill", "--teacher", str(teacher), "--data", str(data), "--out", str(out)],
        "export": ["export", str(root / "student"), "--out", str(out), "--int8"],
        "bundle": ["bundle", str(root / "export"), "--out", str(out)],
        "trim": ["trim", str(root / "student"), "--out", str(out), "--keep-top", "5"],
        "report": ["report", str(root), "--out", str(out)],
    }


@pytest.mark.parametrize("command", ["teacher", "distill", "export", "bundle", "trim", "report"])
def test_out_holding_user_files_is_refused_and_left_intact(
    tmp_path, exported, tiny_teacher, tiny_data, command, monkeypatch
):
    out = tmp_path / "mine"
    before = user_files(out)
    import edgekd.stages.distill as trainer

    monkeypatch.setattr(trainer, "load_task", lambda *a: pytest.fail("work started"))
    r = runner.invoke(app, commands(exported, out, tiny_teacher, tiny_data)[command])
    assert r.exit_code == OUTPUT_REFUSED, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "holds files edgekd did not write" in lines[0]
    assert "--overwrite" in lines[0] and "Traceback" not in r.output
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in out.iterdir()) == [".ssh", "docs", "notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # nothing beside it


@pytest.mark.parametrize("out", [".", "..", "~", "file.txt"])
def test_out_on_the_cwd_a_parent_home_or_a_file_is_refused(tmp_path, exported, monkeypatch, out):
    work = tmp_path / "home" / "work"
    work.mkdir(parents=True)
    (work / "file.txt").write_text("x")
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    target = str(Path(out).expanduser())
    r = runner.invoke(app, ["bundle", str(exported / "export"), "--out", target, "--overwrite"])
    assert r.exit_code == OUTPUT_REFUSED and "pass a new folder path" in r.output
    assert sorted(p.name for p in work.iterdir()) == ["file.txt"]


def test_bundle_overwrite_writes_beside_user_files_and_keeps_them(tmp_path, exported):
    out = tmp_path / "b"
    before = user_files(out)
    r = runner.invoke(app, ["bundle", str(exported / "export"), "--out", str(out), "--overwrite"])
    assert r.exit_code == 0, r.output
    assert {p: p.read_bytes() for p in before} == before
    assert json.loads((out / "manifest.json").read_text())["model"] == "int8"
    # A second run replaces edgekd's files only, and still keeps the user's.
    r = runner.invoke(app, ["bundle", str(exported / "export"), "--out", str(out), "--overwrite"])
    assert r.exit_code == 0 and {p: p.read_bytes() for p in before} == before


def test_bundle_refuses_to_replace_a_zip_it_did_not_write(tmp_path, exported):
    (tmp_path / "b.zip").write_bytes(b"the user's archive")
    r = runner.invoke(app, ["bundle", str(exported / "export"), "--out", str(tmp_path / "b")])
    assert r.exit_code == OUTPUT_REFUSED and "b.zip exists" in r.output
    assert (tmp_path / "b.zip").read_bytes() == b"the user's archive"


def test_rerunning_into_edgekds_own_folder_replaces_it(tmp_path, exported):
    out = tmp_path / "b"
    for _ in range(2):
        r = runner.invoke(app, ["bundle", str(exported / "export"), "--out", str(out)])
        assert r.exit_code == 0, r.output


@pytest.mark.parametrize("name", ["../../x", "/abs/path", "..", "a/b"])
def test_recipe_variant_names_cannot_leave_the_run_folder(tmp_path, tiny_teacher, tiny_data, name):
    from tests.test_recipe import write_recipe

    recipe = write_recipe(tmp_path, tiny_teacher, tiny_data, {"max_bytes": 10**9})
    text = recipe.read_text().replace("  small: {}", f"  {json.dumps(name)}: {{}}")
    recipe.write_text(text)
    r = runner.invoke(app, ["run", str(recipe)])
    assert r.exit_code == 2 and "must be a plain folder name" in r.output, r.output
    assert not (tmp_path / "run").exists() and not (tmp_path.parent / "x").exists()


# ------------------------------------------------------------------ output = input


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (markers too), byte for byte."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def run_folder(root: Path, export: Path) -> Path:
    """A run folder of edgekd's own (as `edgekd run` leaves it) holding a copy of `export`."""
    from edgekd.io import claim_folder

    claim_folder(root)
    shutil.copytree(export, root / "export")
    return root


# name: (command line, the input that must survive); {s} a copy of the student, {d} of
# the data, {e} of the export, {r} a run folder, {t} the teacher, {w} a folder of the
# user's holding {s}.
OVERLAPS: dict[str, tuple[list[str], str]] = {
    "export-out-is-student": (["export", "{s}", "--out", "{s}"], "{s}"),
    "export-out-inside-student": (["export", "{s}", "--out", "{s}/sub"], "{s}"),
    "export-out-holds-student": (["export", "{w}/student", "--out", "{w}"], "{w}"),
    "trim-out-is-student": (["trim", "{s}", "--out", "{s}", "--keep-top", "5"], "{s}"),
    "bundle-out-is-export": (["bundle", "{e}", "--out", "{e}"], "{e}"),
    "bundle-out-inside-export": (["bundle", "{e}", "--out", "{e}/b"], "{e}"),
    "report-out-is-run": (["report", "{r}", "--out", "{r}"], "{r}"),
    "report-out-is-a-folder-it-reads": (["report", "{r}", "--out", "{r}/export"], "{r}"),
    "distill-out-is-data": (
        ["distill", "--teacher", "{t}", "--data", "{d}", "--out", "{d}"], "{d}"
    ),
    "distill-out-holds-teacher": (
        ["distill", "--teacher", "{w}/t", "--data", "{d}", "--out", "{w}"], "{w}"
    ),
    "teacher-out-inside-data": (
        ["teacher", "--base", "{t}", "--data", "{d}", "--out", "{d}/x"], "{d}"
    ),
}  # fmt: skip


@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "overwrite"])
@pytest.mark.parametrize("case", sorted(OVERLAPS))
def test_out_is_refused_and_the_input_kept_when_out_is_inside_or_holds_an_input(
    tmp_path, tiny_chain, tiny_teacher, tiny_data, monkeypatch, case, overwrite
):
    import edgekd.stages.distill
    import edgekd.stages.export
    import edgekd.stages.report
    import edgekd.stages.teacher
    import edgekd.stages.trim

    def work(*a, **k):
        pytest.fail("work started")

    for module, name in [
        (edgekd.stages.distill, "load_task"),
        (edgekd.stages.teacher, "load_task"),
        (edgekd.stages.export, "StudentPredictor"),
        (edgekd.stages.trim, "StudentPredictor"),
        (edgekd.stages.report, "collect_points"),
    ]:
        monkeypatch.setattr(module, name, work)
    paths = {
        "s": shutil.copytree(tiny_chain / "student", tmp_path / "s"),
        "e": shutil.copytree(tiny_chain / "export", tmp_path / "e"),
        "d": shutil.copytree(tiny_data, tmp_path / "d"),
        "r": run_folder(tmp_path / "r", tiny_chain / "export"),
        "t": tiny_teacher,
        "w": tmp_path / "w",
    }
    shutil.copytree(tiny_chain / "student", paths["w"] / "student")
    shutil.copytree(tiny_teacher, paths["w"] / "t")
    args, kept = OVERLAPS[case]
    args = [a.format(**paths) for a in args] + (["--overwrite"] if overwrite else [])
    kept_path = Path(kept.format(**paths))
    before, beside = tree(kept_path), sorted(p.name for p in tmp_path.iterdir())
    r = runner.invoke(app, args)
    assert r.exit_code == OUTPUT_REFUSED, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output
    # A folder of the user's may be refused for that first; with --overwrite, for the input.
    if overwrite or "holds files edgekd did not write" not in lines[0]:
        assert "the input" in lines[0] and "pass a new folder path to --out" in lines[0]
    assert tree(kept_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == beside  # nothing written beside


def test_overwrite_deletes_nothing_outside_out_when_its_marker_lists_other_files(
    tmp_path, tiny_chain
):
    """Issue 30: a crafted marker in --out listing `../../victims/W13.txt` (or its
    absolute path) made `--overwrite` delete that file and its emptied folder."""
    victims = tmp_path / "victims"
    victims.mkdir()
    (victims / "W13.txt").write_text("victim")
    out = tmp_path / "a" / "b"
    before = user_files(out)
    marker = {"written_by": "edgekd", "files": ["../../victims/W13.txt", str(victims)]}
    (out / ".edgekd.json").write_text(json.dumps(marker))
    student = shutil.copytree(tiny_chain / "student", tmp_path / "s")
    r = runner.invoke(app, ["trim", str(student), "--out", str(out), "--keep-top", "5"])
    assert r.exit_code == OUTPUT_REFUSED and "holds files edgekd did not write" in r.output
    r = runner.invoke(
        app, ["trim", str(student), "--out", str(out), "--keep-top", "5", "--overwrite"]
    )
    assert r.exit_code == 0, r.output
    assert (victims / "W13.txt").read_text() == "victim"
    assert {p: p.read_bytes() for p in before} == before
    assert (out / "trim.json").is_file()


@pytest.mark.parametrize("name", ["teacher", "Report", "teacher-onnx", "manifest.json"])
def test_recipe_variant_names_cannot_be_a_folder_the_run_writes(
    tmp_path, tiny_teacher, tiny_data, name
):
    from tests.test_recipe import write_recipe

    recipe = write_recipe(tmp_path, tiny_teacher, tiny_data, {"max_bytes": 10**9})
    recipe.write_text(recipe.read_text().replace("  small: {}", f"  {json.dumps(name)}: {{}}"))
    r = runner.invoke(app, ["run", str(recipe)])
    assert r.exit_code == 2 and "is a folder the run writes itself" in r.output, r.output
    assert not (tmp_path / "run").exists()
