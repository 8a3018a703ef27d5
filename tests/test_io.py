import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgekd.errors import EdgeKDError
from edgekd.io import (
    MARKER,
    OUTPUT_REFUSED,
    _remove_owned,
    atomic_dir,
    atomic_write_text,
    check_not_input,
    check_output,
    claim_folder,
    config_inputs,
    owned_files,
    source_digest,
    sweep_temp,
    valid_name,
)


def test_atomic_dir_replaces_target_only_on_success(tmp_path):
    target = tmp_path / "out"
    with atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("first")
    with pytest.raises(RuntimeError), atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("half-written")
        raise RuntimeError("interrupted")
    assert (target / "a.txt").read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temp folder left behind
    with atomic_dir(target) as tmp:
        (tmp / "b.txt").write_text("second")
    assert sorted(p.name for p in target.iterdir()) == [MARKER, "b.txt"]
    assert owned_files(target) == {"b.txt"}


def test_atomic_write_text_follows_umask(tmp_path):
    path = tmp_path / "x" / "f.json"
    atomic_write_text(path, "{}")
    assert path.read_text() == "{}" and path.stat().st_mode & 0o044  # readable by others


def user_folder(path):
    """A folder of the user's own: notes, a sub-folder, a key."""
    (path / "docs").mkdir(parents=True)
    (path / "notes.txt").write_text("mine")
    (path / "docs" / "a.md").write_text("# mine")
    (path / ".ssh").mkdir()
    (path / ".ssh" / "id_rsa").write_text("secret")
    return {
        p: p.read_bytes()
        for p in (path / "notes.txt", path / "docs" / "a.md", path / ".ssh" / "id_rsa")
    }


def test_atomic_dir_refuses_a_folder_of_the_users_files_before_any_work(tmp_path):
    before = user_folder(tmp_path / "out")
    ran = []
    with (
        pytest.raises(EdgeKDError, match=r"holds files edgekd did not write") as e,
        atomic_dir(tmp_path / "out"),
    ):
        ran.append(True)
    assert e.value.exit_code == OUTPUT_REFUSED and "--overwrite" in str(e.value) and not ran
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_atomic_dir_overwrite_replaces_edgekds_files_and_keeps_the_users(tmp_path):
    target = tmp_path / "out"
    with atomic_dir(target) as tmp:
        (tmp / "model.onnx").write_text("v1")
        (tmp / "old-only.json").write_text("{}")
    before = user_folder(target)  # the user adds files beside edgekd's
    with pytest.raises(EdgeKDError, match=r"e\.g\. \.ssh/id_rsa"):
        check_output(target)
    with atomic_dir(target, overwrite=True) as tmp:
        (tmp / "model.onnx").write_text("v2")
    assert {p: p.read_bytes() for p in before} == before
    assert (target / "model.onnx").read_text() == "v2"
    assert not (target / "old-only.json").exists()  # edgekd's, from the old run
    assert owned_files(target) == {"model.onnx"}


@pytest.mark.parametrize("where", ["cwd", "parent", "home", "file", "symlink"])
def test_check_output_refuses_places_that_are_never_an_output_folder(tmp_path, monkeypatch, where):
    work = tmp_path / "home" / "work"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "f.txt").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "home")
    path = {
        "cwd": ".",
        "parent": "..",
        "home": str(tmp_path / "home"),
        "file": str(tmp_path / "f.txt"),
        "symlink": str(tmp_path / "link"),
    }[where]
    for overwrite in (False, True):
        with pytest.raises(EdgeKDError, match="pass a new folder path") as e:
            check_output(path, overwrite=overwrite)
        assert e.value.exit_code == OUTPUT_REFUSED


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through read-only folders")
def test_check_output_refuses_a_read_only_parent(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    with pytest.raises(EdgeKDError, match="permission denied"):
        check_output(ro / "out")


def test_a_killed_runs_temp_folder_is_swept_by_the_next_run(tmp_path):
    target = tmp_path / "out"
    # A child writes half a folder and is killed (SIGKILL: no cleanup runs).
    code = (
        "import os, sys; from edgekd.io import atomic_dir\n"
        f"with atomic_dir({str(target)!r}) as tmp:\n"
        "    (tmp / 'big.bin').write_bytes(b'0' * 1000)\n"
        "    os.kill(os.getpid(), 9)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=False)
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".out.tmp-")
    mine = tmp_path / ".out.tmp-1-user"  # a name alike, not edgekd's: never touched
    mine.mkdir()
    with atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("done")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.tmp-1-user", "out"]


def test_files_written_into_an_edgekd_folder_become_its_own(tmp_path):
    run = claim_folder(tmp_path / "run")
    atomic_write_text(run / "manifest.json", "{}")
    assert owned_files(run) == {"manifest.json"}
    claim_folder(run)  # a rerun reuses it
    (run / "notes.txt").write_text("mine")
    with pytest.raises(EdgeKDError, match=r"notes\.txt"):
        claim_folder(run)


# ------------------------------------------------------------------ markers never reach out


def write_marker(folder, files):
    (folder / MARKER).write_text(json.dumps({"written_by": "edgekd", "files": files}))


def outside(root, out):
    """Every path under `root` except `out`'s, as lstat sees it (a link's target, never
    what it points to): what no operation on `out` may change."""
    seen = {}
    for dirpath, dirs, files, _ in os.fwalk(root):
        base = Path(dirpath)
        if base == out or out in base.parents:
            continue
        for name in dirs + files:
            p = base / name
            if p == out:
                continue
            if p.is_symlink():
                seen[p] = ("link", os.readlink(p))
            elif p.is_dir():
                seen[p] = ("dir",)
            else:
                seen[p] = ("file", p.read_bytes())
    return seen


def victims(root):
    """root/victims: W13.txt and sub/W14.txt, files no marker may ever get deleted."""
    (root / "victims" / "sub").mkdir(parents=True)
    (root / "victims" / "W13.txt").write_text("victim")
    (root / "victims" / "sub" / "W14.txt").write_text("victim too")
    return root / "victims"


INVALID = {
    "parent-chain": "../../victims/W13.txt",
    "parent": "../victims/W13.txt",
    "dotdot-inside": "a/../../victims/W13.txt",
    "dotdot-alone": "..",
    "absolute": "/etc/passwd",
    "dot": "./a.txt",
    "dot-inside": "a/./b.txt",
    "dot-alone": ".",
    "empty": "",
    "empty-component": "a//b.txt",
    "trailing-slash": "a/",
    "backslash": "..\\victims\\W13.txt",
    "backslash-inside": "a\\b.txt",
    "nul": "a.txt\x00",
    "newline": "a\nb.txt",
    "delete-char": "a\x7fb.txt",
    "c1-control": "a\x85b.txt",
    "not-a-string": 7,
    "null": None,
}


@pytest.mark.parametrize("kind", sorted(INVALID))
def test_valid_name_is_false_for_an_invalid_name(kind):
    assert not valid_name(INVALID[kind])


@pytest.mark.parametrize("name", ["a.txt", "d/b.txt", ".hidden", "d/.h", "x..y", "...", "é/ü"])
def test_valid_name_is_true_for_a_normalized_relative_posix_path(name):
    assert valid_name(name)


@pytest.mark.parametrize("kind", sorted(INVALID))
def test_marker_counts_as_none_and_nothing_is_deleted_when_it_lists_an_invalid_name(tmp_path, kind):
    victims(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("listed, but by a bad marker")
    write_marker(out, ["a.txt", INVALID[kind]])
    before = outside(tmp_path, out)
    assert owned_files(out) is None
    with pytest.raises(EdgeKDError, match="holds files edgekd did not write") as e:
        check_output(out)
    assert e.value.exit_code == OUTPUT_REFUSED
    _remove_owned(out)
    with atomic_dir(out, overwrite=True) as tmp:
        (tmp / "b.txt").write_text("new")
    assert (out / "a.txt").read_text() == "listed, but by a bad marker"  # foreign: kept
    assert owned_files(out) == {"b.txt"}
    assert outside(tmp_path, out) == before


def test_overwrite_deletes_nothing_outside_when_the_marker_lists_a_parent_chain(tmp_path):
    """Issue 30: `--out DIR --overwrite` with `../../victims/W13.txt` in DIR's marker
    deleted W13.txt and then its emptied folder."""
    (tmp_path / "a" / "victims").mkdir(parents=True)
    (tmp_path / "a" / "victims" / "W13.txt").write_text("victim")
    out = tmp_path / "a" / "b" / "out"
    out.mkdir(parents=True)
    (out / "notes.txt").write_text("mine")
    write_marker(out, ["../../victims/W13.txt", f"{tmp_path}/a/victims/W13.txt"])
    with atomic_dir(out, overwrite=True) as tmp:
        (tmp / "model.onnx").write_text("v1")
    assert (tmp_path / "a" / "victims" / "W13.txt").read_text() == "victim"
    assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("absolute", [False, True])
def test_remove_owned_deletes_a_link_not_its_target_when_a_listed_path_is_a_symlink(
    tmp_path, absolute
):
    v = victims(tmp_path)
    out = tmp_path / "out"
    (out / "d").mkdir(parents=True)
    to = (lambda p: p) if absolute else (lambda p: os.path.relpath(p, out))
    (out / "ln").symlink_to(to(v), target_is_directory=True)
    (out / "lf").symlink_to(to(v / "W13.txt"))
    (out / "d" / "ln2").symlink_to(os.path.relpath(v / "sub", out / "d") if not absolute else v)
    write_marker(out, ["ln/W13.txt", "ln/sub/W14.txt", "ln/sub", "d/ln2/W14.txt", "lf"])
    before = outside(tmp_path, out)
    _remove_owned(out)
    assert outside(tmp_path, out) == before
    assert not (out / "lf").is_symlink()  # the listed link itself goes
    assert (out / "ln").is_symlink() and (out / "d" / "ln2").is_symlink()  # unlisted: kept


def test_a_swap_never_follows_a_listed_symlink_when_the_old_folder_is_deleted(tmp_path):
    v = victims(tmp_path)
    out = tmp_path / "out"
    with atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("v1")
    (out / "ln").symlink_to(v, target_is_directory=True)
    write_marker(out, ["a.txt", "ln", "ln/W13.txt", "ln/sub/W14.txt", "ln/sub"])
    assert check_output(out) is None  # every file listed: edgekd's to replace whole
    before = outside(tmp_path, out)
    with atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("v2")
    assert outside(tmp_path, out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "victims"]  # no .old left
    assert (out / "a.txt").read_text() == "v2" and not (out / "ln").is_symlink()


def test_a_swap_leaves_no_old_folder_when_a_stage_folder_inside_has_its_own_marker(tmp_path):
    out = tmp_path / "out"
    with atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("v1")
    with atomic_dir(out / "stage") as tmp:  # edgekd's by its own marker, unlisted above
        (tmp / "deep" / "b.txt").parent.mkdir()
        (tmp / "deep" / "b.txt").write_text("b")
    assert owned_files(out) == {"a.txt"} and check_output(out) is None
    with atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("v2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "a.txt"]


@pytest.mark.parametrize("blocker", ["file", "symlink"])
def test_atomic_dir_overwrite_is_refused_when_a_user_path_is_where_edgekd_writes(tmp_path, blocker):
    v = victims(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    if blocker == "file":
        (out / "model.onnx").write_text("the user's model")
        name = "model.onnx"
    else:
        (out / "onnx").symlink_to(v, target_is_directory=True)
        name = "onnx/model.onnx"
    before = outside(tmp_path, out)
    with (
        pytest.raises(EdgeKDError, match="would write over") as e,
        atomic_dir(out, overwrite=True) as tmp,
    ):
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text("edgekd's")
    assert e.value.exit_code == OUTPUT_REFUSED
    assert outside(tmp_path, out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "victims"]
    if blocker == "file":
        assert (out / "model.onnx").read_text() == "the user's model"
    assert not (v / "model.onnx").exists()


def test_sweep_deletes_only_listed_files_when_an_old_folder_was_left_by_a_killed_run(tmp_path):
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    old = tmp_path / f".out.old-{child.stdout.strip()}"  # its process is gone
    old.mkdir()
    (old / "model.onnx").write_text("edgekd's")
    (old / "notes.txt").write_text("appeared after the check")
    write_marker(old, ["model.onnx"])
    sweep_temp(tmp_path / "out")
    assert sorted(p.name for p in old.iterdir()) == ["notes.txt"]


# Marker names as an attacker or a corrupted file writes them: valid names mixed with
# parent chains, absolute paths, backslashes, control characters and paths through
# symlinked sub-folders that point outside the folder ({root}: the test's root).
NAMES = st.one_of(
    st.sampled_from(["a.txt", "d/b.txt", "d", "d/e", "new/x.txt", MARKER]),
    st.sampled_from(
        [
            "../victims/W13.txt",
            "../../victims/W13.txt",
            "d/../../victims/sub/W14.txt",
            "..",
            "../victims",
            "{root}/victims/W13.txt",
            "{root}/victims",
            "/{root}/victims/sub/W14.txt",
            "..\\victims\\W13.txt",
            "d\\..\\..\\victims\\W13.txt",
            "a.txt\x00",
            "ln/W13.txt",
            "ln/sub/W14.txt",
            "ln/sub",
            "ln",
            "lf",
            "d/ln2/W14.txt",
            "d/ln2",
            "ld/x",
        ]
    ),
    st.text(alphabet=st.sampled_from(list("ab./\\\x00ln")), max_size=10),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(NAMES, max_size=8),
    links=st.sets(st.sampled_from(["ln", "lf", "d/ln2", "ld"])),
    absolute=st.booleans(),
    user_file=st.booleans(),
    writes=st.lists(st.sampled_from(["a.txt", "ln/evil.txt", "d/ln2/evil", "lf", "n/x"])),
    op=st.sampled_from(["check_output", "atomic_dir", "atomic_dir --overwrite", "remove"]),
)
def test_no_marker_deletes_or_changes_a_path_outside_its_folder(
    names, links, absolute, user_file, writes, op
):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d).resolve()
        v = victims(root)
        out = root / "out"
        (out / "d" / "e").mkdir(parents=True)
        (out / "a.txt").write_text("a")
        (out / "d" / "b.txt").write_text("b")
        if user_file:
            (out / "keep").mkdir()
            (out / "keep" / "user.txt").write_text("mine")
        targets = {"ln": v, "lf": v / "W13.txt", "d/ln2": v / "sub", "ld": root}
        for link in links:
            to = targets[link]
            rel = os.path.relpath(to, (out / link).parent)
            (out / link).symlink_to(to if absolute else rel, target_is_directory=to.is_dir())
        write_marker(out, [n.replace("{root}", str(root)) for n in names])
        before = outside(root, out)
        try:
            if op == "check_output":
                check_output(out)
            elif op == "remove":
                _remove_owned(out)
            else:
                with atomic_dir(out, overwrite=op.endswith("--overwrite")) as tmp:
                    for w in writes:
                        (tmp / w).parent.mkdir(parents=True, exist_ok=True)
                        (tmp / w).write_text("edgekd")
        except EdgeKDError as e:
            assert e.exit_code == OUTPUT_REFUSED
        assert outside(root, out) == before  # nothing outside deleted, changed or added
        assert sorted(p.name for p in root.iterdir()) == ["out", "victims"]  # no temp left
        if user_file:  # never listed: the user's, whatever the marker says
            assert (out / "keep" / "user.txt").read_text() == "mine"


def test_check_not_input_refuses_an_output_that_is_inside_or_holds_an_input(tmp_path):
    s = tmp_path / "s"
    s.mkdir()
    weights = s / "model.safetensors"
    weights.write_bytes(b"w")
    (tmp_path / "link").symlink_to(s, target_is_directory=True)
    for out, inputs, how in [
        (s, [s], "is the input"),
        (tmp_path / "link", [s], "is the input"),  # the same folder through a link
        (s, [tmp_path / "link"], "is the input"),
        (s / "sub", [s], "lies inside the input"),
        (tmp_path, [s], "holds the input"),
        (weights, [weights], "is the input"),  # a file input
        (weights / "eval.json", [weights], "lies inside the input"),
    ]:
        with pytest.raises(EdgeKDError, match=f"^--json .* {how} .*apart from") as e:
            check_not_input(out, [None, "glue/sst2", *inputs], "--json")
        assert e.value.exit_code == OUTPUT_REFUSED
    with pytest.raises(EdgeKDError, match="lies inside the input"):  # nested_ok: folders only
        check_not_input(weights / "eval.json", [weights], nested_ok=True)


def test_check_not_input_passes_when_out_is_apart_or_nested_ok(tmp_path):
    s = tmp_path / "s"
    s.mkdir()
    check_not_input(tmp_path / "e", [s, tmp_path / "not-there", "glue/sst2", "", None])
    check_not_input(tmp_path / "se", [s])  # a shared prefix is not nesting
    check_not_input(s / "report", [s], nested_ok=True)  # RUN_DIR/report
    with pytest.raises(EdgeKDError, match="is the input"):
        check_not_input(s, [s], nested_ok=True)


def test_config_inputs_finds_every_path_field_at_any_depth():
    fields = {
        "teacher": "t",
        "extra_teachers": ["t2", "t3"],
        "data": {"spec": "d", "text_column": "text"},
        "student": {"name": "bert", "options": {"tokenizer": "tok", "layers": 2}},
        "augment": {"methods": [{"name": "mate", "options": {"generator": "g"}}]},
        "assistant": {"teacher": "a", "data": {"spec": "ad"}},
        "profile": {"teacher": True},
        "out": "o",
        "cache_dir": "c",
    }
    assert sorted(config_inputs(fields)) == ["a", "ad", "d", "g", "t", "t2", "t3", "tok"]


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"models": {}, "models": {"int8": {}}}', "twice"),
        ("[" * 10_000 + "]" * 10_000, "nested deeper"),
        ('{"a": ', "not valid JSON"),
    ],
    ids=["key-twice", "deep", "malformed"],
)
def test_read_json_refuses_in_one_line_when_an_artifact_is_crafted(tmp_path, text, message):
    # Every artifact reader (Artifact.read, checkpoints, manifests) goes through it.
    from edgekd.artifacts import ExportReport
    from edgekd.errors import EdgeKDError

    (tmp_path / "export.json").write_text(text)
    with pytest.raises(EdgeKDError, match=message):
        ExportReport.read(tmp_path)


def test_read_json_refuses_a_fifo_at_once(tmp_path):
    import os

    from edgekd.errors import EdgeKDError
    from edgekd.io import read_json

    os.mkfifo(tmp_path / "state.json")
    with pytest.raises(EdgeKDError, match="FIFO"):
        read_json(tmp_path / "state.json")  # open() would block here for ever


def test_source_digest_follows_code_and_ignores_bytecode(tmp_path):
    package = tmp_path / "pkg"
    (package / "__pycache__").mkdir(parents=True)
    (package / "mod.py").write_text("DEFAULT = 1\n")
    before = source_digest([package])
    (package / "__pycache__" / "mod.cpython-312.pyc").write_bytes(b"\0")
    (package / "notes.txt").write_text("not code")
    assert source_digest([package]) == before
    (package / "mod.py").write_text("DEFAULT = 2\n")
    assert source_digest([package]) != before


def test_source_digest_reads_a_single_file_and_its_edits(tmp_path):
    module = tmp_path / "augment.py"
    module.write_text("P = 0.4\n")
    before = source_digest([module])
    module.write_text("P = 0.5\n")
    assert source_digest([module]) != before
