"""Artifact I/O: every artifact is written to a temp path and renamed into place,
so a failed or interrupted command never leaves a half-written folder behind."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from edgekd.errors import OUTPUT_REFUSED, EdgeKDError

# Every folder edgekd writes carries this file: which files in it are edgekd's own.
# Only a folder whose files are all listed may be replaced; nothing unlisted is deleted.
MARKER = ".edgekd.json"
# A temp folder is named `.NAME.tmp-PID-edgekd-RANDOM`: a later run sweeps it once that
# process is gone. The name is its mark, so nothing extra sits among its files.
TEMP_TAG = "edgekd"


def owned_files(folder: Path) -> set[str] | None:
    """The files `folder`'s marker says edgekd wrote, or None when it has no readable one."""
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        files = data["files"] if data.get("written_by") == "edgekd" else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return {str(f) for f in files} if isinstance(files, list) else None


def files_under(folder: Path) -> set[str]:
    """Every file, symlink and empty folder under `folder`, as POSIX paths relative to it,
    its own marker excluded."""
    out = set()
    for p in folder.rglob("*"):
        if p.is_symlink() or p.is_file() or (p.is_dir() and not any(p.iterdir())):
            out.add(p.relative_to(folder).as_posix())
    out.discard(MARKER)
    return out


def foreign_files(folder: Path) -> list[str]:
    """Files under `folder` edgekd did not write: listed neither in its marker nor in the
    marker of a sub-folder that is itself edgekd's (a stage folder in a run folder).
    Empty folders are nobody's data and never count."""

    def walk(d: Path, prefix: str, owned: set[str]) -> list[str]:
        out = []
        for p in sorted(d.iterdir()):
            rel = f"{prefix}{p.name}"
            if p.is_dir() and not p.is_symlink():
                sub = owned_files(p)
                listed = any(o.startswith(f"{rel}/") for o in owned)
                if sub is not None and not listed:
                    out += walk(p, f"{rel}/", {f"{rel}/{f}" for f in sub | {MARKER}})
                else:
                    out += walk(p, f"{rel}/", owned)
            elif rel not in owned:
                out.append(rel)
        return out

    return walk(folder, "", (owned_files(folder) or set()) | {MARKER})


def _write_marker(folder: Path, files: set[str]) -> None:
    from edgekd import __version__

    text = json.dumps({"written_by": "edgekd", "version": __version__, "files": sorted(files)})
    tmp = folder / f".{MARKER}.tmp-{os.getpid()}"
    tmp.write_text(text + "\n", encoding="utf-8")
    os.replace(tmp, folder / MARKER)


def check_output(target: str | Path, overwrite: bool = False, flag: str = "--out") -> None:
    """Refuse, before any work, an output path that is not edgekd's to write: the current
    folder or one of its parents, the home folder, a file, a symlink, a folder holding
    files edgekd did not write (unless `overwrite`: then they are kept, never deleted),
    or a place this user cannot write."""
    target = Path(target)
    resolved = target.expanduser().resolve()
    cwd, home = Path.cwd().resolve(), Path.home().resolve()
    new_path = f"pass a new folder path to {flag}"
    if resolved in (cwd, home) or resolved in cwd.parents:
        raise EdgeKDError(
            f"{flag} {target} is the current folder, one of its parents or your home "
            f"folder; {new_path}",
            OUTPUT_REFUSED,
        )
    if target.is_symlink():
        raise EdgeKDError(f"{flag} {target} is a symlink; {new_path}", OUTPUT_REFUSED)
    if target.exists() and not target.is_dir():
        raise EdgeKDError(f"{flag} {target} is a file, not a folder; {new_path}", OUTPUT_REFUSED)
    if target.is_dir() and any(target.iterdir()):
        foreign = foreign_files(target) if owned_files(target) is not None else None
        if foreign is None:
            foreign = sorted(files_under(target)) or [MARKER]
        if foreign and not overwrite:
            raise EdgeKDError(
                f"{flag} {target} holds files edgekd did not write (e.g. {foreign[0]}); "
                f"{new_path}, or add --overwrite to write beside them (they are kept)",
                OUTPUT_REFUSED,
            )
    existing = next(p for p in (resolved, *resolved.parents) if p.exists())
    writable = [existing] if existing != resolved else [resolved, resolved.parent]
    for folder in writable:
        if not os.access(folder, os.W_OK | os.X_OK):
            raise EdgeKDError(
                f"cannot write in {folder} (permission denied); {new_path} you can write to",
                OUTPUT_REFUSED,
            )


def sweep_temp(target: Path) -> None:
    """Remove temp folders beside `target` that a killed edgekd run left behind: named
    after `target`, marked as edgekd's, and whose process is gone."""
    if not target.parent.is_dir():
        return
    for p in target.parent.glob(f".{target.name}.*-*"):
        kind, _, rest = p.name[len(target.name) + 2 :].partition("-")
        pid, _, tag = rest.partition("-")
        marked = tag.startswith(f"{TEMP_TAG}-") if kind == "tmp" else (p / MARKER).is_file()
        if kind in ("tmp", "old") and pid.isdigit() and marked and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    return True


@contextlib.contextmanager
def atomic_dir(target: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a fresh temp folder beside `target`; on success it becomes `target`.

    A new `target` is a rename. An existing one is checked first (`check_output`): a
    folder of edgekd's own files only is swapped whole; with `overwrite`, edgekd's
    files are replaced one by one and every other file is left as it was."""
    target = Path(target)
    check_output(target, overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    sweep_temp(target)
    prefix = f".{target.name}.tmp-{os.getpid()}-{TEMP_TAG}-"
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; artifacts follow the umask
    try:
        yield tmp
        new = files_under(tmp)
        _write_marker(tmp, new)
        check_output(target, overwrite)  # the run may have been long: look again
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if target.exists() and not files_under(target):
        _remove_owned(target)  # at most an old marker
    if not target.exists() or not any(target.iterdir()):
        tmp.rename(target)  # a rename onto an empty folder replaces it
    elif owned_files(target) is not None and not foreign_files(target):
        # Move the old folder aside first so the swap is two renames, not a slow
        # delete followed by a rename that could be interrupted in between.
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        target.rename(old)
        tmp.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    else:  # --overwrite beside foreign files: replace edgekd's, keep theirs
        _remove_owned(target)
        for name in sorted(new):
            dest = target / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp / name, dest)
        _write_marker(target, new)
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_owned(folder: Path) -> None:
    """Delete the files `folder`'s marker lists (and folders they leave empty), nothing else."""
    for name in sorted(owned_files(folder) or set(), reverse=True):
        path = folder / name
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
        parent = path.parent
        while parent != folder and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    (folder / MARKER).unlink(missing_ok=True)


def claim_folder(folder: str | Path, overwrite: bool = False) -> Path:
    """A folder edgekd writes into piece by piece (a recipe's or quickstart's run folder):
    created with a marker, or reused when it holds one; refused like `check_output`."""
    folder = Path(folder)
    check_output(folder, overwrite)
    folder.mkdir(parents=True, exist_ok=True)
    if owned_files(folder) is None:
        _write_marker(folder, set())
    return folder


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def atomic_write_text(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    # A file added to a folder edgekd owns (a profile beside its export) is edgekd's too.
    owned = owned_files(path.parent)
    if owned is not None and path.name not in owned:
        _write_marker(path.parent, owned | {path.name})


def write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_json(path: str | Path) -> Any:
    """A JSON file's data; a malformed or non-UTF-8 file is a one-line error naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise EdgeKDError(
            f"{path} is not valid JSON ({e.msg}, line {e.lineno}); re-create it with the "
            "edgekd command that wrote it"
        ) from None
    except UnicodeDecodeError as e:
        raise EdgeKDError(
            f"{path} is not UTF-8 text (byte offset {e.start}); re-create it with the "
            "edgekd command that wrote it"
        ) from None


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def tree_bytes(path: str | Path) -> int:
    """Bytes of a file, or of every file under a folder."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
