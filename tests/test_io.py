import pytest

from edgekd.io import atomic_dir, atomic_write_text


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
    assert [p.name for p in target.iterdir()] == ["b.txt"]


def test_atomic_write_text_follows_umask(tmp_path):
    path = tmp_path / "x" / "f.json"
    atomic_write_text(path, "{}")
    assert path.read_text() == "{}" and path.stat().st_mode & 0o044  # readable by others
