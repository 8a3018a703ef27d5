"""Artifact I/O: every artifact is written to a temp path and renamed into place,
so a failed or interrupted command never leaves a half-written folder behind."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import unicodedata
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from edgekd.errors import OUTPUT_REFUSED, EdgeKDError

# Every folder edgekd writes carries this file: which files in it are edgekd's own.
# Only a folder whose files are all listed may be replaced; nothing unlisted is deleted.
MARKER = ".edgekd.json"
# A temp folder is named `.NAME.tmp-PID-edgekd-RANDOM`: a later run sweeps it once that
# process is gone. The name is its mark, so nothing extra sits among its files.
TEMP_TAG = "edgekd"


# Limits on any JSON or config file edgekd reads (configs, and every file it wrote,
# which a user may hand it crafted), checked while it is read:
# 64 levels: edgekd's deepest config nests 5 (recipe → distill → augment → methods →
#   options); the parsers recurse per level, so 10,000 `[` would end in a RecursionError.
MAX_DEPTH = 64
# A JSON file edgekd itself wrote (a manifest, an export report, a student's label
# names): the largest is a bundle manifest carrying dev predictions, 2 bytes a row
# (~1 MB for 500k rows); 64 MiB is far above any real one.
MAX_JSON_BYTES = 64 << 20

FILE_KINDS = {  # what a stat mode that is no regular file names, in an error
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFLNK: "a symlink",
    stat.S_IFDIR: "a folder",
}


def read_regular(path: str | Path, what: str, fix: str, limit: int | None = None) -> bytes:
    """The bytes of the user-named file `path`, refused in one line (naming `what` and
    `fix`) unless it is a regular file of at most `limit` bytes.

    Opened non-blocking and checked on the open descriptor: a FIFO, device or socket is
    refused before a read could block on it (a FIFO as --config hung forever), and a
    file swapped for one between a check and the open cannot slip through."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise EdgeKDError(f"{what} {path} does not exist; check the path") from None
    except PermissionError:
        raise EdgeKDError(f"cannot read {what} {path} (permission denied); {fix}") from None
    except OSError as e:  # a socket (ENXIO), a loop of links (ELOOP), ...
        raise EdgeKDError(f"cannot open {what} {path} ({e.strerror}); {fix}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)  # before a file object exists: one refuses a folder fd itself
        if stat.S_ISDIR(mode):
            raise EdgeKDError(f"{what} {path} is a folder; {fix}")
        kind = FILE_KINDS.get(stat.S_IFMT(mode), "a special file")
        raise EdgeKDError(f"{what} {path} is {kind}, not a regular file; {fix}")
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as f:
        if limit is None:
            return f.read()
        data = f.read(limit + 1)  # the file may grow after fstat: read no more than this
    if len(data) > limit:
        raise EdgeKDError(
            f"{what} {path} is larger than {limit:,} bytes, which no real one reaches; {fix}"
        )
    return data


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


# A JSON token that opens or closes a level, or a string (skipped whole: its brackets
# are text).
_JSON_NESTING = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _json_depth_ok(text: str) -> bool:
    """Whether no point in `text` is nested deeper than MAX_DEPTH (counted before
    parsing: the parser recurses per level)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:  # the usual case, at C speed
        return True
    depth = 0
    for m in _JSON_NESTING.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif c in "]}":
            depth -= 1
    return True


def parse_json(text: str, source: str) -> Any:
    """JSON text as plain data, refusing (one line naming `source`) a key twice in one
    object (json.loads keeps the last silently) and nesting past MAX_DEPTH. Malformed
    JSON raises json.JSONDecodeError, for the caller to phrase with its fix."""
    if not _json_depth_ok(text):
        raise EdgeKDError(
            f"{source} is nested deeper than {MAX_DEPTH} levels, which no real file is; "
            "fix or re-create it"
        )
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as e:
        raise EdgeKDError(
            f"{source} has the key {e.args[0]!r} twice in one object (the last would "
            "silently win); keep one"
        ) from None


def load_json(path: str | Path, fix: str, limit: int = MAX_JSON_BYTES) -> Any:
    """A JSON file's data, read as `read_regular` and `parse_json` check; `fix` says how
    to re-create a file that fails (e.g. "re-create it with `edgekd export`")."""
    data = read_regular(path, "file", fix, limit)
    try:
        return parse_json(data.decode("utf-8"), str(path))
    except UnicodeDecodeError as e:
        raise EdgeKDError(f"{path} is not UTF-8 text (byte offset {e.start}); {fix}") from None
    except json.JSONDecodeError as e:
        raise EdgeKDError(f"{path} is not valid JSON ({e.msg}, line {e.lineno}); {fix}") from None


def valid_name(name: object) -> bool:
    """Whether `name` may be listed in a marker: a normalized relative POSIX path (not
    absolute; no `..`, `.` or empty component; no backslash, no control character), so
    that it can only ever name something inside the folder that holds the marker."""
    if not isinstance(name, str) or not name or name.startswith("/") or "\\" in name:
        return False
    if any(unicodedata.category(c) == "Cc" for c in name):  # NUL, newline, DEL, ...
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def owned_files(folder: Path) -> set[str] | None:
    """The files `folder`'s marker says edgekd wrote, or None when it has no readable one.
    A marker listing any name that is not `valid_name` is no marker at all (a crafted
    `../../x` must never make a file outside the folder edgekd's to delete)."""
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        files = data["files"] if data.get("written_by") == "edgekd" else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(files, list) or not all(valid_name(f) for f in files):
        return None
    return set(files)


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
    return _survey(folder)[0]


def _survey(folder: Path) -> tuple[list[str], list[Path]]:
    """`foreign_files`, and the sub-folders that are edgekd's by a marker of their own
    (not listed by the marker above them), outermost first. Symlinks are not entered."""
    subs: list[Path] = []

    def walk(d: Path, prefix: str, owned: set[str]) -> list[str]:
        out = []
        for p in sorted(d.iterdir()):
            rel = f"{prefix}{p.name}"
            if p.is_dir() and not p.is_symlink():
                sub = owned_files(p)
                listed = any(o.startswith(f"{rel}/") for o in owned)
                if sub is not None and not listed:
                    subs.append(p)
                    out += walk(p, f"{rel}/", {f"{rel}/{f}" for f in sub | {MARKER}})
                else:
                    out += walk(p, f"{rel}/", owned)
            elif rel not in owned:
                out.append(rel)
        return out

    return walk(folder, "", (owned_files(folder) or set()) | {MARKER}), subs


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


def check_not_input(
    out: str | Path,
    inputs: Iterable[str | Path | None],
    flag: str = "--out",
    nested_ok: bool = False,
) -> None:
    """Refuse, before any work, an output path that is one of the command's inputs, lies
    inside one or holds one: writing it would replace (or delete) what is being read.
    Inputs are files or folders; one that does not exist (a hub id) is skipped.
    `nested_ok`: the output may lie inside an input folder without being or holding it
    (a report in the run folder it reads, an eval.json beside the model)."""
    target = Path(out).expanduser().resolve()
    for given in inputs:
        if not given or not _exists(Path(given).expanduser()):
            continue
        source = Path(given).expanduser().resolve()
        if _same(target, source):
            how = "is"
        elif any(_same(target, p) for p in source.parents):
            how = "holds"
        elif any(_same(p, source) for p in target.parents) and not (nested_ok and source.is_dir()):
            how = "lies inside"
        else:
            continue
        raise EdgeKDError(
            f"{flag} {out} {how} the input {given}, which this command reads; pass a new "
            f"folder path to {flag}, apart from {given}",
            OUTPUT_REFUSED,
        )


def _exists(path: Path) -> bool:
    try:
        return os.path.lexists(path)
    except ValueError:  # a NUL in the name: no such file
        return False


def _same(a: Path, b: Path) -> bool:
    """`a` and `b` (resolved) name one file: equal, or (a case-insensitive file
    system, a bind mount) one inode."""
    if a == b:
        return True
    try:
        return os.path.samestat(os.stat(a), os.stat(b))
    except (OSError, ValueError):
        return False


# Config fields (at any depth) that name a file or folder a command reads: a teacher,
# data, a base model, a generator, a tokenizer, a recipe's teacher `path` and `budget`.
INPUT_FIELDS = frozenset(
    {"teacher", "extra_teachers", "spec", "base", "generator", "tokenizer", "path", "budget"}
)


def config_inputs(fields: Any) -> list[str]:
    """The strings under `INPUT_FIELDS` keys anywhere in a config's fields (a model_dump,
    a recipe's plain sections): what `check_not_input` compares an output with. A hub
    id is among them; `check_not_input` skips what does not exist locally."""
    found: list[str] = []

    def walk(value: Any, key: str | None) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, str(k))
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v, key)
        elif isinstance(value, str | Path) and key in INPUT_FIELDS:
            found.append(str(value))

    walk(fields, None)
    return found


def sweep_temp(target: Path) -> None:
    """Remove temp folders beside `target` that a killed edgekd run left behind: named
    after `target`, marked as edgekd's, and whose process is gone. A folder moved aside
    (`.old-`) loses only what its marker lists (`discard_owned`)."""
    if not target.parent.is_dir():
        return
    for p in target.parent.glob(f".{target.name}.*-*"):
        if p.is_symlink() or not p.is_dir():
            continue
        kind, _, rest = p.name[len(target.name) + 2 :].partition("-")
        pid, _, tag = rest.partition("-")
        marked = tag.startswith(f"{TEMP_TAG}-") if kind == "tmp" else (p / MARKER).is_file()
        if not (pid.isdigit() and marked and not _alive(int(pid))):
            continue
        if kind == "tmp":  # made by mkdtemp and written by edgekd alone
            shutil.rmtree(p, ignore_errors=True)
        elif kind == "old":
            discard_owned(p)


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
    files are replaced one by one and every other file is left as it was (a file of
    theirs where edgekd would write, or a symlink it would write through, is refused)."""
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
        owned = owned_files(target) if target.is_dir() else None
        if target.is_dir() and files_under(target) and (owned is None or foreign_files(target)):
            blocked = _in_the_way(target, new, owned or set())
            if blocked is not None:
                raise EdgeKDError(
                    f"--out {target}: edgekd would write over {blocked}, which it did not "
                    "write; move it away, or pass a new folder path to --out",
                    OUTPUT_REFUSED,
                )
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
        discard_owned(old)
    else:  # --overwrite beside foreign files: replace edgekd's, keep theirs
        _remove_owned(target)
        for name in sorted(new):
            parts = name.split("/")
            with _open_dirs(target, parts[:-1], create=True) as fds:
                os.rename(tmp / name, parts[-1], dst_dir_fd=fds[-1])
        _write_marker(target, new)
        shutil.rmtree(tmp, ignore_errors=True)


def _in_the_way(target: Path, names: Iterable[str], owned: set[str]) -> str | None:
    """The first path under `target` that writing `names` there would replace or write
    through although edgekd did not write it: a file, or a symlink or file where one of
    its folders goes (an owned file there is deleted first, so it is not in the way)."""
    for name in sorted(names):
        parts = name.split("/")
        for i in range(1, len(parts) + 1):
            rel = "/".join(parts[:i])
            try:
                mode = os.lstat(target / rel).st_mode
            except FileNotFoundError:
                break  # nothing there: made fresh from here down
            if rel in owned and not stat.S_ISDIR(mode):
                break  # edgekd's own file: deleted first
            if stat.S_ISDIR(mode) and i < len(parts):
                continue  # a real folder on the way
            if not (stat.S_ISDIR(mode) and rel in owned and not any((target / rel).iterdir())):
                return rel
            break  # an empty folder of edgekd's
    return None


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)


@contextlib.contextmanager
def _open_dirs(folder: Path, parts: list[str], create: bool = False) -> Iterator[list[int]]:
    """Descriptors of `folder` and of each folder `parts` names below it, each opened
    from the one above without following a symlink: a link, a file or (unless `create`)
    a missing folder on the way raises OSError, so nothing outside `folder` is reached."""
    fds = [os.open(folder, _DIR_FLAGS)]
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fds[-1])
            fds.append(os.open(part, _DIR_FLAGS | getattr(os, "O_NOFOLLOW", 0), dir_fd=fds[-1]))
        yield fds
    finally:
        for fd in fds:
            os.close(fd)


def _remove_owned(folder: Path) -> None:
    """Delete the files `folder`'s marker lists, the folders strictly inside it that this
    leaves empty, and the marker; nothing else (`_remove_listed`)."""
    for name in sorted(owned_files(folder) or set(), reverse=True):
        _remove_listed(folder, name)
    _remove_listed(folder, MARKER)


def _remove_listed(folder: Path, name: str) -> None:
    """Delete `folder/name` if it is a regular file, a symlink (never what it points
    to) or an empty folder, reached from `folder` through real folders only (no
    symlink on the way); then prune the folders on its way that are left empty,
    deepest first, never `folder` itself. A `name` that is not `valid_name` is skipped."""
    if not valid_name(name):
        return
    parts = name.split("/")
    try:
        with _open_dirs(folder, parts[:-1]) as fds:
            with contextlib.suppress(OSError):
                mode = os.stat(parts[-1], dir_fd=fds[-1], follow_symlinks=False).st_mode
                if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
                    os.unlink(parts[-1], dir_fd=fds[-1])
                elif stat.S_ISDIR(mode):
                    os.rmdir(parts[-1], dir_fd=fds[-1])  # only if empty
            for i in range(len(parts) - 1, 0, -1):
                os.rmdir(parts[i - 1], dir_fd=fds[i - 1])  # stops at one not empty
    except OSError:
        return  # missing, not empty, or a symlink or file on the way: left as it is


def discard_owned(old: Path) -> None:
    """Delete a folder of edgekd's moved aside by a swap: the files its markers list
    (its own, and those of sub-folders `foreign_files` counts as edgekd's by theirs),
    then its empty folders, then itself. A file that appeared in it since it was checked
    is not edgekd's: it stays there, and a note says where."""
    for sub in reversed(_survey(old)[1]):  # a stage folder inside it, by its own marker
        _remove_owned(sub)
    _remove_owned(old)
    for _, dirs, _, fd in os.fwalk(old, topdown=False):  # never follows a symlink
        for d in dirs:
            with contextlib.suppress(OSError):
                os.rmdir(d, dir_fd=fd)
    try:
        old.rmdir()
    except OSError:
        print(f"note: kept files edgekd did not write in {old}", file=sys.stderr)


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
    """A JSON file's data (one that edgekd wrote, or says it did), read as `load_json`
    checks: a regular file, capped, no key twice, no deep nesting; any fault is one line
    naming the file."""
    return load_json(path, "re-create it with the edgekd command that wrote it")


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def source_digest(roots: Iterable[Path]) -> str:
    """sha256 over the `.py` and `.yaml` source under `roots` (folders, or single
    files): names and contents, compiled bytecode ignored. Caches keyed by it are made
    again by code that differs, whatever version it calls itself."""
    h = hashlib.sha256()
    for root in roots:
        files = [root] if root.is_file() else sorted(root.rglob("*"))
        for f in files:
            if f.suffix in (".py", ".yaml") and f.is_file() and "__pycache__" not in f.parts:
                name = f.name if f == root else f.relative_to(root).as_posix()
                h.update(f"{root.name}/{name}\0{sha256_file(f)}\0".encode())
    return h.hexdigest()


def versions() -> dict[str, str]:
    """Python's version and those of edgekd and the libraries that make its files (a
    manifest records them; the teacher's ONNX labellers are keyed by them)."""
    import importlib.metadata as md
    import platform

    out = {"python": platform.python_version()}
    pkgs = ("edgekd", "torch", "transformers", "onnx", "onnxruntime", "optimum", "optimum-onnx")
    for pkg in pkgs:
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def tree_bytes(path: str | Path) -> int:
    """Bytes of a file, or of every file under a folder."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
