import os
import subprocess
import sys

import pytest

from edgekd.errors import EdgeKDError
from edgekd.io import (
    MARKER,
    OUTPUT_REFUSED,
    atomic_dir,
    atomic_write_text,
    check_output,
    claim_folder,
    owned_files,
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
