"""Hostile and huge input, end to end through the CLI (issue 30), as one table.

What a crafted or careless folder must never make edgekd do, by class:

1. delete outside its output: a marker (`.edgekd.json`) listing `../..`, absolute or
   backslashed names, links out of the folder, a stale `.old` folder beside it;
2. write over what it reads: `--out` equal to, inside or holding an input;
3. read outside its input: links and `..`/absolute names in an export or bundle, and
   zips that are bombs, hold paths, links, too many entries, odd compression;
4. grow memory with a row: one 5 MB, 25,000-word or 1,500-word training row;
5. call a user's mistake an internal error (exit 4): seeds, nesting, widths, lengths,
   shapes, opsets, a cache of another shape, pairs vs single texts, renamed models;
6. hang: a FIFO where a config, data, budget or text file belongs;
7. accept silently: duplicate keys, two files for one split, a JSON text that is no
   text, a threshold a model cannot take, a file of an unknown format version;
8. drive the terminal: escape sequences or rich markup in a path, text or zip entry.

Every case runs in a user's tree (`world`, with `victims/` beside it: the files a
crafted marker or export points at) and asserts the exit code, one `error:` line with
the fix for a refusal, no raw ESC/BEL/CR in the output, `victims/` byte for byte, and
that nothing changed anywhere in the tree (the case's TMPDIR included) outside its own
`--out`. Unit-level checks of the pieces live in test_io, test_bundle, test_data,
test_ranges, test_terminal, test_outputs and test_config.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import FILLER, NEGATIVE, POSITIVE, SMALL_BILSTM, make_rows
from edgekd.cli import app

runner = CliRunner()

# In every victim file: found in anything edgekd wrote, it was read from outside its input.
SECRET = b"VICTIM-SECRET-7f3a"
# Control characters a hostile input carries to repaint the terminal.
RAW_CONTROLS = ("\x1b", "\x07", "\r")
FAKE = "[green]all bundle checks passed[/]"  # rich markup a file name may hold
GIB = 1 << 30


# ------------------------------------------------------------------ the user's tree


@dataclass
class World:
    root: Path  # everything below is snapshotted around every case
    w: Path  # the user's folder: data, teacher, students, exports, bundles, bad files
    v: Path  # victims: files crafted markers and exports point at
    victims: dict[str, str]  # their `tree`, as made


def tree(root: Path) -> dict[str, str]:
    """Every path under `root`: a file by sha256, a link by its target, a folder, a
    FIFO or other special file by its type. Links are listed, never followed, and a
    FIFO is never opened (reading it would block)."""
    out = {}
    for folder, dirs, files in os.walk(root):  # followlinks=False
        for name in dirs + files:
            p = Path(folder) / name
            mode = os.lstat(p).st_mode
            rel = p.relative_to(root).as_posix()
            if stat.S_ISLNK(mode):
                out[rel] = f"link -> {os.readlink(p)}"
            elif stat.S_ISDIR(mode):
                out[rel] = "folder"
            elif stat.S_ISREG(mode):
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = f"special {stat.S_IFMT(mode):o}"
    return out


def write_rows(path: Path, rows: list[tuple[str, Any]], header: str = "sentence\tlabel") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + "\n" + "".join(f"{t}\t{y}\n" for t, y in rows))
    return path


Entries = list[tuple[str | zipfile.ZipInfo, bytes]]


def zip_of(path: Path, entries: Entries, method: int = zipfile.ZIP_DEFLATED) -> Path:
    with warnings.catch_warnings():  # a duplicate name is the point of some zips
        warnings.simplefilter("ignore")
        with zipfile.ZipFile(path, "w", method) as z:
            for name, data in entries:
                z.writestr(name, data)
    return path


def bundle_entries(bundle: Path) -> Entries:
    return [(p.name, p.read_bytes()) for p in sorted(bundle.iterdir()) if p.name[0] != "."]


def patch_headers(path: Path, local: tuple[int, int], central: tuple[int, int]) -> Path:
    """Set a 2-byte field, (offset, value), in every entry's local and central header:
    what a zip writer refuses to produce (an unknown method, an encryption flag)."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        starts, at = [i.header_offset for i in z.infolist()], z.start_dir
    for start in starts:
        struct.pack_into("<H", data, start + local[0], local[1])
        struct.pack_into("<H", data, at + central[0], central[1])
        name, extra, comment = struct.unpack_from("<3H", data, at + 28)
        at += 46 + name + extra + comment  # the next central header
    path.write_bytes(bytes(data))
    return path


def zeros_zip(path: Path, size: int, others: Entries) -> Path:
    """A zip whose model.onnx deflates `size` zero bytes (~1000:1): a zip bomb."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in others:
            z.writestr(name, data)
        with z.open("model.onnx", "w") as f:
            chunk = bytes(1 << 20)
            for _ in range(size >> 20):
                f.write(chunk)
    return path


def make_zips(w: Path) -> None:
    b = w / "bundle"
    z = w / "zips"
    z.mkdir()
    good = bundle_entries(b)
    others = [e for e in good if e[0] != "model.onnx"]
    zeros_zip(z / "bomb.zip", GIB, others)  # ~1 MB expanding to 1 GiB
    zeros_zip(z / "ratio.zip", 200 << 20, others)  # under the size cap, over 100:1
    zip_of(z / "dotdot.zip", [*good, ("../evil.txt", SECRET)])
    zip_of(z / "absolute.zip", [*good, ("/tmp/evil.txt", SECRET)])
    zip_of(z / "subfolder.zip", [*good, ("sub/evil.txt", SECRET)])
    zip_of(z / "hidden.zip", [*good, (".edgekd.json", b"{}")])
    zip_of(z / "case-twice.zip", [*good, ("MODEL.onnx", SECRET)])
    zip_of(z / "exact-twice.zip", [*good, ("model.onnx", SECRET)])
    zip_of(z / "seventeen.zip", [*good, *((f"f{i}.txt", b"x") for i in range(17 - len(good)))])
    zip_of(z / "escape.zip", [*good, ("\x1b[2J\x1b]0;title\x07.onnx", b"x")])
    zip_of(z / "markup.zip", [*good, (f"{FAKE}.onnx".replace("/", ""), b"x")])
    link = zipfile.ZipInfo("model.onnx")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    zip_of(z / "symlink.zip", [*others, (link, b"/etc/passwd")])
    zip_of(z / "bzip2.zip", good, zipfile.ZIP_BZIP2)
    zip_of(z / "method99.zip", good, zipfile.ZIP_STORED)
    patch_headers(z / "method99.zip", local=(8, 99), central=(10, 99))  # the method
    zip_of(z / "encrypted.zip", good)
    patch_headers(z / "encrypted.zip", local=(6, 1), central=(8, 1))  # flag bit 0
    zip_of(z / "claims.zip", good)  # an end record claiming 65,535 entries
    data = bytearray((z / "claims.zip").read_bytes())
    struct.pack_into("<HH", data, data.rfind(b"PK\x05\x06") + 8, 65535, 65535)
    (z / "claims.zip").write_bytes(bytes(data))
    (z / "garbage.zip").write_bytes(b"PK\x03\x04 not really a zip")


def make_bad(w: Path) -> None:
    x = w / "bad"
    x.mkdir()
    (x / "deep.yaml").write_text("[" * 10_000 + "]" * 10_000)
    (x / "deep-map.yaml").write_text("{a: " * 10_000 + "1" + "}" * 10_000)
    (x / "deep.json").write_text('{"a": ' * 10_000 + "1" + "}" * 10_000)
    (x / "aliases.yaml").write_text(
        "a: &a [x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n"
            for p, n in zip("abcdefgh", "bcdefghi", strict=True)
        )
    )
    (x / "dup.yaml").write_text("epochs: 1\nepochs: 2\n")
    (x / "dup.json").write_text('{"epochs": 1, "epochs": 2}\n')
    (x / "dup-budget.yaml").write_text("max_bytes: 100000000\nmax_bytes: 1\n")
    (x / "budget.yaml").write_text("model: fp32\nmax_bytes: 100000000\n")
    (x / "escape-key.yaml").write_text('"\\e[2J\\e]0;title\\a": 1\n')
    (x / "markup-key.yaml").write_text(f'"{FAKE}": 1\n')
    both = x / "both"
    shutil.copytree(w / "data", both)
    (both / "train.csv").write_text("sentence,label\ngood,1\nbad,0\n")
    for name, text in {"object": '{"a": 1}', "list": '["a", "b"]'}.items():
        (x / f"{name}.jsonl").write_text(
            f'{{"text": {text}, "label": 1}}\n{{"text": "bad", "label": 0}}\n'
        )
    (x / "escape-columns.jsonl").write_text('{"\\u001b[2Jwords": "a", "\\u001b]0;t\\u0007y": 1}\n')
    (x / "two-rows.jsonl").write_text('{"text": "good", "label": 1}\n{"text": "bad", "label": 0}\n')
    # Rows of one character each (emoji, digits): no word for TF-IDF's token pattern.
    chars = [("😀", 1), ("5", 1), ("😡", 0), ("7", 0)] * 5
    (x / "characters.jsonl").write_text(
        "".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in chars)
    )
    # Two texts, 20 times each: a selection held out of them would leave no training row.
    (x / "repeated.jsonl").write_text(
        '{"text": "good", "label": 1}\n{"text": "bad", "label": 0}\n' * 20
    )
    # Texts, then labels, that carry escape sequences into what distill reads and prints.
    rows = [(f"\x1b[2J{t} \x1b]0;title\x07", y) for t, y in make_rows(60, 3)]
    write_rows(x / "escape-data" / "train.tsv", rows)
    write_rows(x / "escape-data" / "dev.tsv", rows[:20])
    rows = [(t, f"\x1b[32m{y}") for t, y in make_rows(60, 3)]
    write_rows(x / "escape-labels" / "train.tsv", rows)
    write_rows(x / "escape-labels" / "dev.tsv", rows[:20])
    (x / "pairs.txt").write_text("good film\tbad film\nfine\tdull\n")
    (x / "escape-texts.txt").write_text("\x1b[2Jgood\n\x1b]0;title\x07bad\n")
    (x / "notes.txt").write_text("mine")
    # Exports: an unknown format, an unknown kind, export.json 10,000 levels deep.
    for name in ("format-export", "kind-export", "deep-export", "dup-export"):
        shutil.copytree(w / "export", x / name)
    edit_json(x / "format-export" / "export.json", lambda d: d.update(format=2))
    edit_json(x / "kind-export" / "export.json", lambda d: d.update(kind="export2"))
    (x / "deep-export" / "export.json").write_text("[" * 10_000 + "]" * 10_000)
    text = (x / "dup-export" / "export.json").read_text()
    (x / "dup-export" / "export.json").write_text(text.replace("{", '{"kind": "export",', 1))
    shutil.copytree(w / "bundle", x / "format-bundle")
    edit_json(x / "format-bundle" / "manifest.json", lambda d: d.update(format=99))
    # A model under another file's name: a one-file model must say what it is.
    shutil.copy(w / "bundle" / "model.onnx", x / "model.zip")
    shutil.copy(w / "bundle.zip", x / "bundle.onnx")
    shutil.copy(w / "bundle" / "model.onnx", x / "model.e2e.onnx")
    (x / "text.onnx").write_text("just words")


def make_victims(v: Path) -> dict[str, str]:
    """victims/ afresh (each case starts from it, so one that deletes a victim fails
    alone): every file holds SECRET; model.onnx is what a link would ship instead."""
    shutil.rmtree(v, ignore_errors=True)
    (v / "inner").mkdir(parents=True)
    for name in ("W13.txt", "secret.txt", "model.onnx", "tokenizer.json", "inner/W13.txt"):
        (v / name).write_bytes(SECRET + b" " + name.encode())
    (v / "marker.json").write_text(
        json.dumps({"written_by": "edgekd", "version": "0", "files": ["W13.txt"]})
    )
    return tree(v)


def make_fifos(root: Path, w: Path) -> Path:
    f = root / "fifos"
    (f / "data").mkdir(parents=True)
    shutil.copy(w / "data" / "dev.tsv", f / "data" / "dev.tsv")
    for name in ("config.yaml", "train.tsv", "budget.yaml", "texts.txt", "recipe.yaml"):
        os.mkfifo(f / name)
    os.mkfifo(f / "data" / "train.tsv")
    shutil.copytree(w / "export", f / "export")
    (f / "export" / "tokenizer.json").unlink()
    os.mkfifo(f / "export" / "tokenizer.json")
    return f


def edit_json(path: Path, change: Callable[[Any], Any]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_teacher, tiny_data, pair_data) -> World:
    """A user's tree: data, a teacher, single-text and pair students with exports and
    bundles, bad files and crafted zips; victims beside it; FIFOs apart."""
    from conftest import distill_tiny_bilstm
    from edgekd.config import DataConfig, DistillConfig, ExportConfig
    from edgekd.stages.bundle import make_bundle
    from edgekd.stages.distill import distill as run_distill
    from edgekd.stages.export import export as run_export

    root = tmp_path_factory.mktemp("hostile")
    w, v = root / "world", root / "victims"
    shutil.copytree(tiny_data, w / "data")
    shutil.copytree(tiny_teacher, w / "teacher")
    shutil.copytree(pair_data, w / "pairs")
    distill_tiny_bilstm(w / "teacher", w / "data", w / "student")
    run_export(ExportConfig(guard=False), w / "student", w / "export")
    make_bundle(w / "export", w / "bundle")
    cfg = DistillConfig(
        teacher=str(w / "teacher"),
        data=DataConfig(spec=str(w / "pairs"), text_pair_column="sentence2"),
        epochs=1,
        augment={"methods": []},  # no augmentation: a pair model in a second
        time_budget=None,
        student={"name": "bilstm", "options": SMALL_BILSTM},
    )
    run_distill(cfg, w / "pair-student")
    run_export(ExportConfig(guard=False), w / "pair-student", w / "pair-export")
    make_bundle(w / "pair-export", w / "pair-bundle")
    make_zips(w)
    make_bad(w)
    make_fifos(root, w)
    return World(root, w, v, make_victims(v))


# ------------------------------------------------------------------ one case


@dataclass
class Case:
    """One case's folder, two levels below the root so that a marker's
    `../../victims/W13.txt` reaches the real victims."""

    world: World
    dir: Path
    allowed: list[str] = field(default_factory=list)  # more paths it may change

    @property
    def out(self) -> Path:
        return self.dir / "out"

    @property
    def fields(self) -> dict[str, str]:
        w = self.world.w
        return {
            "w": str(w),
            "v": str(self.world.v),
            "out": str(self.out),
            "case": str(self.dir),
            "X": str(w / "bad"),
            "Z": str(w / "zips"),
            "F": str(self.world.root / "fifos"),
        }

    def argv(self, template: list[str]) -> list[str]:
        return [a.format(**self.fields) for a in template]


def new_case(world: World, name: str, monkeypatch: pytest.MonkeyPatch) -> Case:
    folder = world.root / name.replace("/", "_")
    shutil.rmtree(folder, ignore_errors=True)
    make_victims(world.v)
    (folder / "tmp").mkdir(parents=True)
    # Extraction and every other temp file land here, inside the snapshot.
    monkeypatch.setenv("TMPDIR", str(folder / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(folder / "tmp"))
    monkeypatch.setenv("EDGEKD_CACHE", str(folder / "cache"))
    monkeypatch.chdir(folder)
    return Case(world, folder)


def assert_result(code: int, stdout: str, stderr: str, want: int, says: str | None) -> None:
    """The exit code; a refusal as one `error:` line holding `says`, a success with
    `says` in its output; never a traceback or a raw control character."""
    output = stdout + stderr
    assert "Traceback" not in output, output
    assert code == want, (code, output[-2000:])
    for raw in RAW_CONTROLS:
        assert raw not in output, (raw, output[-2000:])
    # Markup from a name stays text: never a bare green "passed" line.
    assert output.count("all bundle checks passed") == output.count(FAKE.split("/")[0][:-1])
    if want in (2, 3):
        lines = [x for x in stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), stderr
        assert says is not None and says in lines[0], (says, lines[0])
    else:
        assert "error:" not in stderr, stderr
        assert says is None or says in output, (says, output[-2000:])


def assert_harmless(case: Case, before: dict[str, str], after: dict[str, str], code: int) -> None:
    """Victims byte for byte; nothing changed in the whole tree outside the case's own
    output (its --out, a bundle's .zip beside it, and on success its cache)."""
    root = case.world.root
    assert tree(case.world.v) == case.world.victims
    rel = case.dir.relative_to(root).as_posix()
    allowed = [f"{rel}/out", f"{rel}/out.zip", *(f"{rel}/{a}" for a in case.allowed)]
    if code == 0:
        allowed.append(f"{rel}/cache")
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    stray = [k for k in changed if not any(k == a or k.startswith(f"{a}/") for a in allowed)]
    assert not stray, stray


# ------------------------------------------------------------------ preparations


def marker(*files: str, over: str | None = None) -> Callable[[Case], None]:
    """Prep: `out/` holding a marker that lists `files` (templated: {v} is victims)."""

    def prep(case: Case) -> None:
        case.out.mkdir()
        names = [f.format(**case.fields) for f in files]
        data = {"written_by": "edgekd", "version": "0.1.0", "files": names}
        (case.out / ".edgekd.json").write_text(json.dumps(data))
        if over is not None:  # a file of the user's beside it
            (case.out / over).write_text("mine")

    return prep


def linked(link: str, target: str, listed: bool) -> Callable[[Case], None]:
    """Prep: `out/link` a symlink to `target` (templated), listed in its marker or not."""

    def prep(case: Case) -> None:
        marker(*([link.split("/")[0]] if listed else []))(case)
        os.symlink(target.format(**case.fields), case.out / link)

    return prep


def sub_listed(case: Case) -> None:
    """Prep: `out/sub` a link to victims/, the marker listing `sub/W13.txt` (a valid
    name: only the link on the way may stop the deletion)."""
    marker("sub/W13.txt")(case)
    os.symlink(case.world.v, case.out / "sub")


def marker_link(case: Case) -> None:
    """Prep: the marker itself a link to a marker among the victims."""
    case.out.mkdir()
    os.symlink(case.world.v / "marker.json", case.out / ".edgekd.json")


def hard_link(case: Case) -> None:
    """Prep: `out/W13.txt` a second name (hard link) of victims/W13.txt, listed."""
    marker("W13.txt")(case)
    os.link(case.world.v / "W13.txt", case.out / "W13.txt")


def tampered(case: Case) -> None:
    """Prep: a real bundle at out/, whose marker then gains a name outside."""
    from edgekd.stages.bundle import make_bundle

    make_bundle(case.world.w / "export", case.out)
    edit_json(case.out / ".edgekd.json", lambda d: d["files"].append("../../victims/W13.txt"))


def stale_old(case: Case) -> None:
    """Prep: beside out/, a moved-aside `.out.old-PID` of a dead process (swept by the
    next run) whose marker lists a link to a victim and a name outside."""
    pid = dead_pid()
    old = case.dir / f".out.old-{pid}"
    old.mkdir()
    names = ["W13.txt", "../../victims/secret.txt"]
    (old / ".edgekd.json").write_text(json.dumps({"written_by": "edgekd", "files": names}))
    os.symlink(case.world.v / "W13.txt", old / "W13.txt")
    case.allowed.append(old.name)  # edgekd's to sweep: a leftover of its own swap


def dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def copy_of(source: str, name: str) -> Callable[..., Callable[[Case], None]]:
    """A prep maker: {case}/`name`, a copy of the world's `source` changed by
    `change(case, folder)`."""

    def maker(change: Callable[[Case, Path], None]) -> Callable[[Case], None]:
        def prep(case: Case) -> None:
            folder = case.dir / name
            shutil.copytree(case.world.w / source, folder)
            change(case, folder)

        return prep

    return maker


export_copy = copy_of("export", "exp")
student_copy = copy_of("student", "s")
bundle_copy = copy_of("bundle", "b")


def link_to(name: str, target: str) -> Callable[[Case, Path], None]:
    def change(case: Case, folder: Path) -> None:
        (folder / name).unlink(missing_ok=True)
        os.symlink(target.format(**case.fields), folder / name)

    return change


def model_path(path: str) -> Callable[[Case, Path], None]:
    """export.json's fp32 model at `path` (templated), its only model."""

    def change(case: Case, folder: Path) -> None:
        def edit(d: dict[str, Any]) -> None:
            d["models"] = {"fp32": {**d["models"]["fp32"], "path": path.format(**case.fields)}}

        edit_json(folder / "export.json", edit)
        (folder / "sub").mkdir()
        shutil.copy(folder / "model.onnx", folder / "sub" / "model.onnx")

    return change


def manifest_lists(name: str) -> Callable[[Case, Path], None]:
    """The bundle manifest listing `name` (templated) for its tokenizer."""

    def change(case: Case, folder: Path) -> None:
        def edit(d: dict[str, Any]) -> None:
            d["files"][name.format(**case.fields)] = d["files"].pop("tokenizer.json")

        edit_json(folder / "manifest.json", edit)

    return change


def crafted_model(
    change: Callable[[Any, Case], None], labels: int | None = None, **student: Any
) -> Callable[[Case], None]:
    """Prep: {case}/b, the bundle with its model.onnx changed by `change(ModelProto, case)`
    (and, `labels`, student.json naming that many; `student`, its other fields), the
    manifest hashed again: what a crafter of both writes, so only the model's own check can refuse it."""

    def edit(case: Case, folder: Path) -> None:
        import onnx

        model = onnx.load(str(folder / "model.onnx"))
        change(model, case)
        onnx.save(model, str(folder / "model.onnx"))
        if labels is not None:
            names = [f"l{i}" for i in range(labels)]
            edit_json(
                folder / "student.json", lambda d: d.update(num_labels=labels, id2label=names)
            )
        if student:  # other student.json fields
            edit_json(folder / "student.json", lambda d: d.update(student))

        def rehash(d: dict[str, Any]) -> None:
            for name, entry in d["files"].items():
                data = (folder / name).read_bytes()
                entry.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
            d["bytes"] = sum(e["bytes"] for e in d["files"].values())
            if labels is not None:
                d["labels"] = names

        edit_json(folder / "manifest.json", rehash)

    return bundle_copy(edit)


def external_data(location: str) -> Callable[[Any, Case], None]:
    """The classifier's bias read from `location` (templated; ONNX external data)."""

    def change(model: Any, case: Case) -> None:
        from onnx import TensorProto

        bias = next(t for t in model.graph.initializer if t.name == "classifier.bias")
        size = len(bias.raw_data)
        bias.ClearField("raw_data")
        bias.data_location = TensorProto.EXTERNAL
        for key, value in (
            ("location", location.format(**case.fields)),
            ("offset", "0"),
            ("length", str(size)),
        ):
            entry = bias.external_data.add()
            entry.key, entry.value = key, value

    return change


def scores_as_wide_as_the_text(model: Any, case: Case) -> None:
    """The graph replaced by one whose logits are its input ids as floats: [batch,
    tokens], a width onnxruntime cannot tell before a row runs."""
    from onnx import TensorProto, helper

    model.graph.ClearField("node")
    model.graph.ClearField("initializer")
    model.graph.ClearField("value_info")
    model.graph.node.append(
        helper.make_node("Cast", ["input_ids"], ["logits"], to=TensorProto.FLOAT)
    )
    dims = model.graph.output[0].type.tensor_type.shape.dim
    dims[1].Clear()
    dims[1].dim_param = "tokens"


def export_json(change: Callable[[dict[str, Any]], None]) -> Callable[[Case], None]:
    """Prep: {case}/exp, the export with export.json changed by `change`."""
    return export_copy(lambda case, folder: edit_json(folder / "export.json", change))


def profile_folder(**values: Any) -> Callable[[Case], None]:
    """Prep: {case}/prof holding a profile.json of the export's fp32 model with `values`."""

    def prep(case: Case) -> None:
        (case.dir / "prof").mkdir()
        data = {"edgekd_version": "0.1.0", "kind": "profile", "model": "model.onnx"}
        data.update({"device": "local-cpu", "threads": 1, "p90_ms": 1.0, **values})
        (case.dir / "prof" / "profile.json").write_text(json.dumps(data))

    return prep


def piece_past_the_table(case: Case, folder: Path) -> None:
    """The student's tokenizer.json gains a piece of id 10**6: past its embedding rows."""
    edit_json(folder / "tokenizer.json", lambda t: t["model"]["vocab"].update(good=10**6))


def as_link(case: Case) -> None:
    """Prep: {case}/exp a link to the real export (the user's own choice of path)."""
    os.symlink(case.world.w / "export", case.dir / "exp")


def alias(case: Case) -> None:
    """Prep: {case}/alias a link to the student folder."""
    os.symlink(case.world.w / "student", case.dir / "alias")


def zip_beside(case: Case) -> None:
    """Prep: an export folder named out.zip: the bundle's .zip would replace its input."""
    shutil.copytree(case.world.w / "export", case.dir / "out.zip")


def corrupt_cache(case: Case) -> None:
    """Prep: one distill run fills the cache; every logits entry is then replaced by
    finite logits of another shape (7 rows of 3 labels), as a stale edgekd might leave."""
    import numpy as np
    from safetensors.numpy import save_file

    r = runner.invoke(app, case.argv([*DISTILL, "--out", "{case}/first"]))
    assert r.exit_code == 0, r.output
    entries = sorted((case.dir / "cache").rglob("*.safetensors"))
    assert entries, "the first run cached no logits"
    for path in entries:
        save_file({"logits": np.ones((7, 3), dtype=np.float32)}, str(path))


def truncate_cache(case: Case) -> None:
    """Prep: as `corrupt_cache`, the entries cut to 10 bytes (a crash mid-write)."""
    r = runner.invoke(app, case.argv([*DISTILL, "--out", "{case}/first"]))
    assert r.exit_code == 0, r.output
    for path in (case.dir / "cache").rglob("*.safetensors"):
        path.write_bytes(path.read_bytes()[:10])


# ------------------------------------------------------------------ the table

T, D, S, E, B = "{w}/teacher", "{w}/data", "{w}/student", "{w}/export", "{w}/bundle"
PS, PE, PB = "{w}/pair-student", "{w}/pair-export", "{w}/pair-bundle"
X, Z, F, V, OUT = "{X}", "{Z}", "{F}", "{v}", "{out}"
W13 = "../../victims/W13.txt"
# A distillation in a second or two: one epoch, no augmentation, a tiny BiLSTM.
SMALL = ["-s", "student.options.embedding_dim=16", "-s", "student.options.hidden_size=8",
         "-s", "student.options.mlp_size=16"]  # fmt: skip
QUICK = ["--epochs", "1", "--augment", "none", "--teacher-runtime", "torch",
         "-s", "time_budget=null", *SMALL]  # fmt: skip
DISTILL = ["distill", "--teacher", T, "--data", D, *QUICK]
BERT = ["distill", "--teacher", T, "--data", D, "--student", "bert", "--epochs", "1",
        "--augment", "none", "-s", "time_budget=null"]  # fmt: skip
TEACH = ["teacher", "--base", T, "--data", D, "--epochs", "0.5"]
OW = "--overwrite"
NOT_OURS = "holds files edgekd did not write"
SLOW = pytest.mark.slow  # trains for a second or more

# name: (command line, exit code, what the one error line, or the output, must say[, prep])
CASES: dict[str, Any] = {
    # 1. A marker naming files outside its folder is no marker: refused as foreign
    # without --overwrite; with it, the run keeps every file and deletes nothing outside.
    "1/distill-dotdot": ([*DISTILL, "--out", OUT], 3, NOT_OURS, marker(W13)),
    "1/distill-dotdot-overwrite": pytest.param([*DISTILL, "--out", OUT, OW], 0, "→", marker(W13), marks=SLOW),
    "1/export-dotdot-overwrite": (["export", S, "--out", OUT, "--no-guard", OW], 0, "validated", marker(W13)),
    "1/bundle-dotdot-overwrite": (["bundle", E, "--out", OUT, OW], 0, "bundle →", marker(W13)),
    "1/trim-dotdot-overwrite": (["trim", S, "--out", OUT, OW], 0, "vocabulary", marker(W13)),
    "1/report-dotdot-overwrite": (["report", E, "--out", OUT, OW], 0, "wrote", marker(W13)),
    "1/teacher-dotdot-overwrite": pytest.param([*TEACH, "--out", OUT, OW], 0, "teacher:", marker(W13), marks=SLOW),
    "1/teacher-dotdot": ([*TEACH, "--out", OUT], 3, NOT_OURS, marker(W13)),
    "1/export-dotdot": (["export", S, "--out", OUT], 3, NOT_OURS, marker(W13, over="notes.txt")),
    "1/bundle-absolute": (["bundle", E, "--out", OUT], 3, NOT_OURS, marker(V + "/W13.txt")),
    "1/bundle-absolute-overwrite": (["bundle", E, "--out", OUT, OW], 0, "bundle →", marker(V + "/W13.txt")),
    "1/bundle-separator-overwrite": (["bundle", E, "--out", OUT, OW], 0, "bundle →", marker("a/../../../victims/W13.txt")),
    "1/bundle-parent-overwrite": (["bundle", E, "--out", OUT, OW], 0, "bundle →", marker("..")),
    "1/bundle-backslash-overwrite": (["bundle", E, "--out", OUT, OW], 0, "bundle →", marker("..\\..\\victims\\W13.txt")),
    "1/bundle-dot-parts-overwrite": (["bundle", E, "--out", OUT, OW], 0, "bundle →", marker("./../victims/inner")),
    "1/bundle-through-linked-folder": (["bundle", E, "--out", OUT, OW], 0, "bundle →", sub_listed),
    "1/bundle-listed-link-to-file": (["bundle", E, "--out", OUT], 0, "bundle →", linked("model.onnx", V + "/W13.txt", True)),
    "1/bundle-listed-link-to-folder": (["bundle", E, "--out", OUT], 0, "bundle →", linked("sub", V, True)),
    "1/bundle-write-through-link": (["bundle", E, "--out", OUT, OW], 3, "would write over model.onnx", linked("model.onnx", V + "/W13.txt", False)),
    "1/bundle-marker-is-link": (["bundle", E, "--out", OUT], 0, "bundle →", marker_link),
    "1/bundle-hard-link": (["bundle", E, "--out", OUT], 0, "bundle →", hard_link),
    "1/bundle-tampered-after-run": (["bundle", E, "--out", OUT], 3, NOT_OURS, tampered),
    "1/bundle-stale-old-folder": (["bundle", E, "--out", OUT], 0, "bundle →", stale_old),
    # 2. --out equal to, inside or holding an input: refused before any work.
    "2/export-is-input": (["export", S, "--out", S], 3, "is the input"),
    "2/export-inside-input": (["export", S, "--out", S + "/sub"], 3, "lies inside the input"),
    "2/export-holds-input": (["export", S, "--out", "{w}", OW], 3, "holds the input"),
    "2/export-dotdot-is-input": (["export", S, "--out", E + "/../student"], 3, "is the input"),
    "2/export-through-link": (["export", S, "--out", "{case}/alias"], 3, "is a symlink", alias),
    "2/bundle-is-input": (["bundle", E, "--out", E], 3, "is the input"),
    "2/bundle-inside-input": (["bundle", E, "--out", E + "/b"], 3, "lies inside the input"),
    "2/bundle-holds-input": (["bundle", E, "--out", "{w}", OW], 3, "holds the input"),
    "2/bundle-zip-is-input": (["bundle", "{case}/out.zip", "--out", OUT], 3, "(its .zip) {case}/out.zip is the input", zip_beside),
    "2/trim-is-input": (["trim", S, "--out", S], 3, "is the input"),
    "2/trim-inside-input": (["trim", S, "--out", S + "/t"], 3, "lies inside the input"),
    "2/trim-holds-input": (["trim", S, "--out", "{w}", OW], 3, "holds the input"),
    "2/report-is-input": (["report", E, "--out", E], 3, "is the input"),
    "2/report-inside-read-folder": (["report", "{w}", "--out", E + "/r"], 3, "lies inside the input"),
    "2/report-holds-input": (["report", E, "--out", "{w}", OW], 3, "holds the input"),
    "2/distill-inside-data": ([*DISTILL, "--out", D + "/x"], 3, "lies inside the input"),
    "2/distill-holds-teacher": ([*DISTILL, "--out", "{w}", OW], 3, "holds the input"),
    "2/distill-is-teacher": ([*DISTILL, "--out", T, OW], 3, "is the input"),
    "2/teacher-inside-data": ([*TEACH, "--out", D + "/t"], 3, "lies inside the input"),
    "2/teacher-is-base": ([*TEACH, "--out", T, OW], 3, "is the input"),
    # 3. Reading outside the input: links and names out of an export or bundle, zips.
    "3/bundle-tokenizer-link-out": (["bundle", "{case}/exp", "--out", OUT], 2, "tokenizer.json is a symlink", export_copy(link_to("tokenizer.json", V + "/tokenizer.json"))),
    "3/bundle-model-link-out": (["bundle", "{case}/exp", "--out", OUT, "--model", "fp32"], 2, "model.onnx is a symlink", export_copy(link_to("model.onnx", V + "/model.onnx"))),
    "3/bundle-student-link-in": (["bundle", "{case}/exp", "--out", OUT], 2, "student.json is a symlink", export_copy(link_to("student.json", "{case}/exp/config.yaml"))),
    "3/bundle-profile-link-out": (["bundle", "{case}/exp", "--out", OUT], 2, "is a symlink", export_copy(link_to("profile.json", V + "/secret.txt"))),
    "3/bundle-model-path-dotdot": (["bundle", "{case}/exp", "--out", OUT], 2, "'../x.onnx' is not a plain file name", export_copy(model_path("../x.onnx"))),
    "3/bundle-model-path-etc-passwd": (["bundle", "{case}/exp", "--out", OUT], 2, "'/etc/passwd' is not a plain file name", export_copy(model_path("/etc/passwd"))),
    "3/bundle-model-path-victim": (["bundle", "{case}/exp", "--out", OUT], 2, "is not a plain file name", export_copy(model_path(V + "/model.onnx"))),
    "3/bundle-model-path-subfolder": (["bundle", "{case}/exp", "--out", OUT], 2, "'sub/model.onnx' is not a plain file name", export_copy(model_path("sub/model.onnx"))),
    "3/bundle-model-path-backslash": (["bundle", "{case}/exp", "--out", OUT], 2, "is not a plain file name", export_copy(model_path("..\\x.onnx"))),
    "3/bundle-export-folder-is-link": (["bundle", "{case}/exp", "--out", OUT], 0, "bundle →", as_link),
    "3/predict-bundle-tokenizer-link-out": (["predict", "{case}/b", "hi"], 2, "tokenizer.json is a symlink", bundle_copy(link_to("tokenizer.json", V + "/tokenizer.json"))),
    "3/predict-bundle-manifest-link": (["predict", "{case}/b", "hi"], 2, "manifest.json is a symlink", bundle_copy(link_to("manifest.json", "{w}/bundle/manifest.json"))),
    "3/predict-manifest-lists-dotdot": (["predict", "{case}/b", "hi"], 2, "not a plain file name", bundle_copy(manifest_lists(W13))),
    "3/predict-zip-bomb-1gib": (["predict", Z + "/bomb.zip", "hi"], 2, "unpacks to over 536,870,912 bytes"),
    "3/predict-zip-bomb-ratio": (["predict", Z + "/ratio.zip", "hi"], 2, "a zip bomb"),
    "3/predict-zip-method-99": (["predict", Z + "/method99.zip", "hi"], 2, "compression method 99"),
    "3/predict-zip-bzip2": (["predict", Z + "/bzip2.zip", "hi"], 2, "compression method 12"),
    "3/predict-zip-17-entries": (["predict", Z + "/seventeen.zip", "hi"], 2, "lists 17 entries"),
    "3/predict-zip-claims-65535": (["predict", Z + "/claims.zip", "hi"], 2, "lists 65,535 entries"),
    "3/predict-zip-case-twice": (["predict", Z + "/case-twice.zip", "hi"], 2, "'MODEL.onnx' twice"),
    "3/predict-zip-exact-twice": (["predict", Z + "/exact-twice.zip", "hi"], 2, "'model.onnx' twice"),
    "3/predict-zip-dotdot": (["predict", Z + "/dotdot.zip", "hi"], 2, "'../evil.txt', which no edgekd bundle has"),
    "3/predict-zip-absolute": (["predict", Z + "/absolute.zip", "hi"], 2, "'/tmp/evil.txt', which no edgekd bundle has"),
    "3/predict-zip-subfolder": (["predict", Z + "/subfolder.zip", "hi"], 2, "'sub/evil.txt'"),
    "3/predict-zip-hidden": (["predict", Z + "/hidden.zip", "hi"], 2, "'.edgekd.json'"),
    "3/predict-zip-symlink": (["predict", Z + "/symlink.zip", "hi"], 2, "'model.onnx' is a symlink"),
    "3/predict-zip-encrypted": (["predict", Z + "/encrypted.zip", "hi"], 2, "is encrypted"),
    "3/predict-zip-garbage": (["predict", Z + "/garbage.zip", "hi"], 2, "is not a readable .zip"),
    "3/predict-zip-ok": (["predict", B + ".zip", "good film"], 0, "good film"),
    # 5. A user's mistake is exit 2 naming the fix (or 0 where redoing is right), never 4.
    "5/distill-seed-negative": ([*DISTILL, "--out", OUT, "--seed", "-1"], 2, "seed"),
    "5/distill-seed-2**70": ([*DISTILL, "--out", OUT, "--seed", str(2**70)], 2, "seed"),
    "5/teacher-seed-negative": ([*TEACH, "--out", OUT, "--seed", "-1"], 2, "seed"),
    "5/distill-config-deep-list": ([*DISTILL, "--out", OUT, "--config", X + "/deep.yaml"], 2, "nested deeper than 64"),
    "5/distill-config-deep-map": ([*DISTILL, "--out", OUT, "--config", X + "/deep-map.yaml"], 2, "nested deeper than 64"),
    "5/distill-config-deep-json": ([*DISTILL, "--out", OUT, "--config", X + "/deep.json"], 2, "nested deeper than 64"),
    "5/check-budget-deep": (["check", E, "--budget", X + "/deep.yaml"], 2, "nested deeper than 64"),
    "5/run-recipe-deep": (["run", X + "/deep-map.yaml"], 2, "nested deeper than 64"),
    "5/bundle-export-json-deep": (["bundle", X + "/deep-export", "--out", OUT], 2, "nested deeper than 64"),
    "5/distill-config-alias-bomb": ([*DISTILL, "--out", OUT, "--config", X + "/aliases.yaml"], 2, "once aliases are expanded"),
    "5/distill-hidden-100000": ([*DISTILL, "--out", OUT, "-s", "student.options.hidden_size=100000"], 2, "fix student.options.hidden_size"),
    "5/distill-bert-hidden-100000": ([*BERT, "--out", OUT, "--hidden", "100000"], 2, "fix student.options.hidden"),
    "5/distill-bert-layers-100000": ([*BERT, "--out", OUT, "--layers", "100000"], 2, "fix student.options.layers"),
    "5/distill-bert-longer-than-teacher": ([*BERT, "--out", OUT, "-s", "student.options.max_length=100"], 2, "set student.options.max_length ≤ 64"),
    "5/distill-bilstm-longer-than-teacher": pytest.param([*DISTILL, "--out", OUT, "-s", "student.options.max_length=100"], 0, "→", marks=SLOW),
    "5/distill-cache-other-shape": pytest.param([*DISTILL, "--out", OUT], 0, "recomputing", corrupt_cache, marks=SLOW),
    "5/distill-cache-truncated": pytest.param([*DISTILL, "--out", OUT], 0, "recomputing", truncate_cache, marks=SLOW),
    "5/distill-one-character-texts": pytest.param(["distill", "--teacher", T, "--data", X + "/characters.jsonl", "--out", OUT, *QUICK], 0, "character n-grams", marks=SLOW),
    "5/distill-two-texts-repeated": pytest.param(["distill", "--teacher", T, "--data", X + "/repeated.jsonl", "--out", OUT, *QUICK], 0, "0 held out to select", marks=SLOW),
    "5/teacher-two-texts-repeated": pytest.param(["teacher", "--base", T, "--data", X + "/repeated.jsonl", "--epochs", "0.5", "--out", OUT], 0, "no selection rows to score it on", marks=SLOW),
    "5/distill-two-rows-default-budget": pytest.param(["distill", "--teacher", T, "--data", X + "/two-rows.jsonl", "--out", OUT, "--epochs", "1", *SMALL], 0, "→", marks=SLOW),
    "5/export-fixed-shape-huge": (["export", S, "--out", OUT, "--fixed-shape", "1000000x1000000"], 2, "fixed_shape"),
    "5/export-fixed-shape-zero": (["export", S, "--out", OUT, "--fixed-shape", "0x8"], 2, "fixed_shape"),
    "5/export-fixed-shape-2**70": (["export", S, "--out", OUT, "--fixed-shape", f"1x{2**70}"], 2, "fixed_shape"),
    "5/export-opset-1": (["export", S, "--out", OUT, "--opset", "1"], 2, "opset"),
    "5/export-opset-99999": (["export", S, "--out", OUT, "--opset", "99999"], 2, "opset 99999 is newer"),
    "5/profile-seq-len-1e9": (["profile", E + "/model.onnx", "--seq-len", "1000000000"], 2, "fix --seq-len"),
    "5/profile-seq-len-2**80": (["profile", E + "/model.onnx", "--seq-len", str(2**80)], 2, "fix --seq-len"),
    "5/eval-pairs-to-single-student": (["eval", S, "--data", "{w}/pairs", "--text-pair-column", "sentence2"], 2, "reads one text per row"),
    "5/eval-pairs-to-single-onnx": (["eval", E + "/model.onnx", "--data", "{w}/pairs", "--text-pair-column", "sentence2"], 2, "drop --text-pair-column"),
    "5/eval-single-to-pair-student": (["eval", PS, "--data", D], 2, "reads sentence pairs"),
    "5/eval-single-to-pair-onnx": (["eval", PE + "/model.onnx", "--data", D], 2, "--text-pair-column"),
    "5/predict-pairs-to-single-bundle": (["predict", B, "--file", X + "/pairs.txt"], 2, "row 1 is a sentence pair"),
    "5/predict-single-to-pair-bundle": (["predict", PB, "hello"], 2, "row 1 is a single text"),
    "5/predict-single-to-pair-zip": (["predict", PB + ".zip", "hello"], 2, "pair-bundle.zip reads sentence pairs"),
    "5/predict-pairs-to-pair-bundle": (["predict", PB, "--file", X + "/pairs.txt"], 0, "good film ⟂ bad film"),
    "5/predict-model-renamed-zip": (["predict", X + "/model.zip", "hi"], 2, "is not a readable .zip"),
    "5/predict-zip-renamed-onnx": (["predict", X + "/bundle.onnx", "hi"], 2, "not a valid model"),
    "5/predict-model-renamed-e2e": (["predict", X + "/model.e2e.onnx", "hi"], 2, "export --e2e"),
    "5/predict-text-renamed-onnx": (["predict", X + "/text.onnx", "hi"], 2, "not a valid model"),
    "3/predict-model-external-data-dotdot": (["predict", "{case}/b", "hi"], 2, "escapes model directory", crafted_model(external_data("../../victims/secret.txt"))),
    "3/predict-model-external-data-absolute": (["predict", "{case}/b", "hi"], 2, "External data path", crafted_model(external_data("{v}/secret.txt"))),
    "5/predict-model-ir-version-99": (["predict", "{case}/b", "hi"], 2, "IR version: 99", crafted_model(lambda m, c: setattr(m, "ir_version", 99))),
    "5/predict-model-no-outputs": (["predict", "{case}/b", "hi"], 2, "has no outputs", crafted_model(lambda m, c: m.graph.ClearField("output"))),
    "5/predict-model-2-scores-for-3-labels": (["predict", "{case}/b", "hi"], 2, "not ['batch', 3]", crafted_model(lambda m, c: None, labels=3)),
    "5/predict-student-json-max-length-1e9": (["predict", "{case}/b", "hi"], 2, "max_length: Input should be less than or equal to 8192", crafted_model(lambda m, c: None, max_length=10**9)),
    "5/eval-student-piece-past-embedding-rows": (["eval", "{case}/s", "--data", D], 2, "has a piece of id 1,000,000, past the model's", student_copy(piece_past_the_table)),
    "5/predict-export-model-not-one-file": (["predict", E + "/model.onnx", "hi"], 2, "is a model of an export folder, not a one-file model: bundle the folder"),
    "5/predict-bundle-model-not-one-file": (["predict", B + "/model.onnx", "hi"], 2, "is the model inside a bundle: pass the bundle folder"),
    "5/predict-model-width-unstated": (["predict", "{case}/b", "hi there you"], 2, "returned scores of shape [1, 3], not [1, 2]", crafted_model(scores_as_wide_as_the_text)),
    # 7. Silent acceptance: each refused in one line.
    "7/distill-config-dup-key": ([*DISTILL, "--out", OUT, "--config", X + "/dup.yaml"], 2, "key 'epochs' appears twice"),
    "7/distill-config-dup-key-json": ([*DISTILL, "--out", OUT, "--config", X + "/dup.json"], 2, "appears twice"),
    "7/check-budget-dup-key": (["check", E, "--budget", X + "/dup-budget.yaml"], 2, "key 'max_bytes' appears twice"),
    "7/bundle-export-json-dup-key": (["bundle", X + "/dup-export", "--out", OUT], 2, "'kind' twice"),
    "7/distill-train-tsv-and-csv": ([*DISTILL[:4], X + "/both", *QUICK, "--out", OUT], 2, "holds train.tsv and train.csv"),
    "7/distill-jsonl-text-object": ([*DISTILL[:4], X + "/object.jsonl", *QUICK, "--out", OUT], 2, "'text' holds an object"),
    "7/distill-jsonl-text-list": ([*DISTILL[:4], X + "/list.jsonl", *QUICK, "--out", OUT], 2, "'text' holds a list"),
    "7/export-exit-threshold-bilstm": (["export", S, "--out", OUT, "--exit-threshold", "0.5"], 2, "drop --exit-threshold"),
    "7/check-profile-p90-1e308": (["check", E, "{case}/prof", "-s", "max_p90_ms=5", "--budget", X + "/budget.yaml"], 2, "1e+308 is outside 0..1e+09", profile_folder(p90_ms=1e308)),
    "7/check-profile-p90-below-zero": (["check", E, "{case}/prof", "-s", "max_p90_ms=5", "--budget", X + "/budget.yaml"], 2, "p90_ms: Value error, -1.0 is outside 0..1e+09", profile_folder(p90_ms=-1.0)),
    "7/check-profile-p90-1ms-passes": (["check", E, "{case}/prof", "-s", "max_p90_ms=5", "--budget", X + "/budget.yaml"], 0, "1 ms", profile_folder()),
    "7/check-profile-p90-nan-fails": (["check", E, "{case}/prof", "-s", "max_p90_ms=5", "--budget", X + "/budget.yaml"], 1, "missing", profile_folder(p90_ms=float("nan"))),
    "7/check-export-accuracy-over-1": (["check", "{case}/exp", "-s", "min_accuracy=0.9", "--budget", X + "/budget.yaml"], 2, "1.5 is outside 0..1", export_json(lambda d: d["models"]["fp32"].update(accuracy=1.5))),
    "7/check-export-bytes-below-zero": (["check", "{case}/exp", "-s", "max_bytes=1000", "--budget", X + "/budget.yaml"], 2, "greater than or equal to 0", export_json(lambda d: d["models"]["fp32"].update(bytes=-5))),
    "7/predict-manifest-format-99": (["predict", X + "/format-bundle", "hi"], 2, "is format 99, which this edgekd does not read"),
    "7/bundle-export-format-2": (["bundle", X + "/format-export", "--out", OUT], 2, "is format 2"),
    "7/bundle-export-unknown-kind": (["bundle", X + "/kind-export", "--out", OUT], 2, "kind"),
    # 8. Escape sequences and markup from a path, a text, a name: shown, never obeyed.
    "8/predict-path-escapes": (["predict", "{case}/\x1b[2J\x1b]0;title\x07\rb", "hi"], 2, "\\x1b[2J\\x1b]0;title\\x07\\rb"),
    "8/predict-texts-escapes": (["predict", B, "\x1b[2Jgood", "\x1b]0;title\x07bad", "a\rb"], 0, "\\x1b[2Jgood"),
    "8/predict-json-escapes": (["predict", B, "--json", "\x1b[2Jgood\r"], 0, "\\u001b[2Jgood\\r"),
    "8/predict-file-escapes": (["predict", B + ".zip", "--file", X + "/escape-texts.txt"], 0, "\\x1b]0;title\\x07bad"),
    "8/predict-zip-entry-escapes": (["predict", Z + "/escape.zip", "hi"], 2, "'\\x1b[2J\\x1b]0;title\\x07.onnx'"),
    "8/predict-zip-entry-markup": (["predict", Z + "/markup.zip", "hi"], 2, "[green]all bundle checks passed[]"),
    "8/bundle-markup-path-missing": (["bundle", "{case}/" + FAKE, "--out", OUT], 2, FAKE),
    "8/bundle-markup-out": (["bundle", E, "--out", OUT + "/" + FAKE], 0, FAKE),
    "8/distill-escape-markup-out": pytest.param([*DISTILL, "--out", OUT + "/\x1b[2J" + FAKE], 0, "\\x1b[2J" + FAKE, marks=SLOW),
    "8/distill-escape-data": pytest.param([*DISTILL[:4], X + "/escape-data", *QUICK, "--out", OUT], 0, "→", marks=SLOW),
    "8/distill-label-escapes": ([*DISTILL[:4], X + "/escape-labels", *QUICK, "--out", OUT], 2, "(\\x1b[32m0, \\x1b[32m1)"),
    "8/distill-data-path-escapes": ([*DISTILL[:4], "{case}/\x1b[2J\x1b]0;t\x07.tsv", *QUICK, "--out", OUT], 2, "\\x1b[2J\\x1b]0;t\\x07.tsv"),
    "8/distill-config-key-escapes": ([*DISTILL, "--out", OUT, "--config", X + "/escape-key.yaml"], 2, "'\\x1b[2J\\x1b]0;title\\x07'"),
    "8/distill-config-key-markup": ([*DISTILL, "--out", OUT, "--config", X + "/markup-key.yaml"], 2, FAKE),
    "8/distill-data-columns-escapes": ([*DISTILL[:4], X + "/escape-columns.jsonl", *QUICK, "--out", OUT], 2, "\\x1b[2Jwords"),
}  # fmt: skip


def table(cases: dict[str, Any]) -> list[Any]:
    """`cases` as pytest params (name, argv, code, says, prep), keeping any marks."""
    params = []
    for name, case in cases.items():
        values, marks = (case.values, case.marks) if hasattr(case, "marks") else (case, ())
        values = (*values, None) if len(values) == 3 else values
        params.append(pytest.param(name, *values, marks=marks, id=name))
    return params


@pytest.mark.parametrize(("name", "argv", "code", "says", "prep"), table(CASES))
def test_hostile_input_is_refused_or_done_and_harms_nothing_outside_out(
    world, monkeypatch, name, argv, code, says, prep
):
    case = new_case(world, name, monkeypatch)
    if prep is not None:
        prep(case)
    before = tree(world.root)
    r = runner.invoke(app, case.argv(argv))
    after = tree(world.root)
    fields = case.fields
    assert_result(r.exit_code, r.stdout, r.stderr, code, says and says.format(**fields))
    assert_harmless(case, before, after, r.exit_code)
    if code != 0:
        assert not os.listdir(case.dir / "tmp")  # nothing extracted, nothing left
    shutil.rmtree(case.dir, ignore_errors=True)


def test_every_class_of_the_issue_is_in_the_table():
    names = [*CASES, *FIFO_CASES, *(f"4/{size}" for size in LONG_ROWS)]
    by_class = {n: sum(1 for c in names if c.startswith(f"{n}/")) for n in "12345678"}
    assert all(by_class.values()), by_class
    assert len(names) >= 45


# ------------------------------------------------------------------ 6. FIFOs (subprocess)

# A FIFO where a file belongs: refused at once, never opened for a blocking read. Each
# runs in a child with a hang guard: a read that blocks would otherwise stop the suite.
FIFO_CASES: dict[str, Any] = {
    "6/distill-config": ([*DISTILL, "--out", OUT, "--config", F + "/config.yaml"], 2, "is a FIFO (named pipe)"),
    "6/teacher-config": ([*TEACH, "--out", OUT, "--config", F + "/config.yaml"], 2, "is a FIFO (named pipe)"),
    "6/distill-data-file": ([*DISTILL[:4], F + "/train.tsv", *QUICK, "--out", OUT], 2, "FIFO"),
    "6/distill-data-folder": ([*DISTILL[:4], F + "/data", *QUICK, "--out", OUT], 2, "FIFO"),
    "6/eval-data-file": (["eval", S, "--data", F + "/train.tsv"], 2, "FIFO"),
    "6/check-budget": (["check", E, "--budget", F + "/budget.yaml"], 2, "is a FIFO (named pipe)"),
    "6/run-recipe": (["run", F + "/recipe.yaml"], 2, "is a FIFO (named pipe)"),
    "6/profile-device-spec": (["profile", E + "/model.onnx", "--device", F + "/config.yaml"], 2, "is a FIFO"),
    "6/predict-file": (["predict", B, "--file", F + "/texts.txt"], 2, "is a FIFO"),
    "6/bundle-tokenizer": (["bundle", F + "/export", "--out", OUT], 2, "tokenizer.json is a FIFO"),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("name", "argv", "code", "says", "prep"), table(FIFO_CASES))
def test_fifo_is_refused_at_once_when_given_as_a_file(
    world, monkeypatch, name, argv, code, says, prep
):
    case = new_case(world, name, monkeypatch)
    before = tree(world.root)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "edgekd", *case.argv(argv)],
            capture_output=True,
            text=True,
            timeout=60,  # a hang guard only: a refusal takes well under a second
            env=os.environ.copy(),
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"edgekd {name} hung on a FIFO")
    after = tree(world.root)
    assert_result(r.returncode, r.stdout, r.stderr, code, says)
    assert_harmless(case, before, after, r.returncode)
    shutil.rmtree(case.dir, ignore_errors=True)


# ------------------------------------------------------------------ 4. memory per row

# Peak RSS of the child, measured by a wrapper whose only child it is (a fresh
# RUSAGE_CHILDREN per case; ru_maxrss is KiB on Linux).
RSS_WRAPPER = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[1:]).returncode
print("peak_rss_kib", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""
LONG_ROWS = {"5mb": 5_000_000, "25000-words": 25_000, "1500-words": 1_500}
PEAKS: dict[str, int] = {}


def long_row(size: str, rng: random.Random) -> str:
    """One text of the vocabulary's words: `size` words, or (5mb) over 5,000,000 bytes."""
    words = FILLER + POSITIVE + NEGATIVE
    if size == "5mb":  # ~800k words of ~6 characters
        out: list[str] = []
        n = 0
        while n < LONG_ROWS[size]:
            out.append(rng.choice(words))
            n += len(out[-1]) + 1
        return " ".join(out)
    return " ".join(rng.choice(words) for _ in range(LONG_ROWS[size]))


@pytest.mark.slow
@pytest.mark.parametrize("size", list(LONG_ROWS))
def test_one_long_row_trains_under_2_gib_when_given(world, tmp_path, size):
    from edgekd.data import MAX_ROW_WORDS

    data = tmp_path / "data"
    rows: list[tuple[str, Any]] = list(make_rows(160, 1))
    rows.insert(7, (long_row(size, random.Random(0)), 1))
    write_rows(data / "train.tsv", rows)
    shutil.copy(world.w / "data" / "dev.tsv", data / "dev.tsv")
    argv = [*DISTILL[:2], str(world.w / "teacher"), "--data", str(data), "--out",
            str(tmp_path / "out"), "--epochs", "1", "-s", "time_budget=null",
            "--max-augmented", "200", *SMALL]  # fmt: skip
    wrapper = tmp_path / "rss.py"
    wrapper.write_text(RSS_WRAPPER)
    env = {**os.environ, "EDGEKD_CACHE": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, str(wrapper), sys.executable, "-m", "edgekd", *argv],
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard, not a timing: the machine may be loaded
        env=env,
    )
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 0, r.stderr[-3000:]
    peak = int(r.stderr.rsplit("peak_rss_kib", 1)[1].split()[0])
    PEAKS[size] = peak
    print(f"{size}: peak RSS {peak / 1024:.0f} MiB")
    assert peak < 2 * 1024 * 1024, f"{size}: peak RSS {peak / 1024:.0f} MiB"
    words = len(rows[7][0].split())
    if words > MAX_ROW_WORDS:  # the row was cut, and the user told so
        note = [x for x in r.stderr.splitlines() if x.startswith("data:")]
        assert note and "cut" in note[0], r.stderr[-3000:]


# ------------------------------------------------------------------ properties

# Path pieces a crafted export.json may name its model by.
PIECES = ["..", ".", "", "model.onnx", "sub", "link", "victims", "W13.txt", "etc", "passwd",
          "{v}", "x.onnx", "...", "~", "\\", "model.onnx\x00.txt"]  # fmt: skip
paths = st.one_of(
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=5).map("/".join),
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map(lambda p: "/" + "/".join(p)),
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map("\\".join),
    st.text(alphabet="./\\abx", max_size=12),
)
LINKS = {  # what a link inside the export may point at
    "victim file": "{v}/model.onnx",
    "victim folder": "{v}",
    "inside": "{exp}/model.onnx",
    "dangling": "{v}/nope",
}


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    path=paths,
    link=st.sampled_from(sorted(LINKS)),
    tokenizer_link=st.sampled_from([None, *sorted(LINKS)]),
)
def test_bundle_never_reads_outside_the_export_or_writes_outside_out(
    world, path, link, tokenizer_link
):
    sandbox = Path(tempfile.mkdtemp(dir=world.root, prefix="prop-bundle-"))
    exp, out = sandbox / "exp", sandbox / "out"
    shutil.copytree(world.w / "export", exp)
    fields = {"v": str(world.v), "exp": str(exp)}
    (exp / "sub").mkdir()
    shutil.copy(exp / "model.onnx", exp / "sub" / "model.onnx")
    os.symlink(LINKS[link].format(**fields), exp / "link")
    if tokenizer_link is not None:
        (exp / "tokenizer.json").unlink()
        os.symlink(LINKS[tokenizer_link].format(**fields), exp / "tokenizer.json")
    named = path.replace("{v}", str(world.v))

    def edit(d: dict[str, Any]) -> None:
        d["models"] = {"fp32": {**d["models"]["fp32"], "path": named}}

    edit_json(exp / "export.json", edit)
    before = tree(world.root)
    r = runner.invoke(app, ["bundle", str(exp), "--out", str(out)])
    after = tree(world.root)
    assert "Traceback" not in r.output and r.exit_code in (0, 2), (named, r.output)
    assert not any(c in r.output for c in RAW_CONTROLS), r.output
    own = (out.relative_to(world.root).as_posix(), f"{out.relative_to(world.root)}.zip")
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert all(any(k == o or k.startswith(f"{o}/") for o in own) for k in changed), changed
    written = [p for p in (*out.rglob("*"), out.with_suffix(".zip")) if p.is_file()]
    for p in written:
        if p.suffix == ".zip":
            with zipfile.ZipFile(p) as z:
                assert all(SECRET not in z.read(n) for n in z.namelist()), named
        else:
            assert SECRET not in p.read_bytes(), (named, p)
    if r.exit_code == 0:  # what shipped is the export's own model, read from inside it
        shipped = (out / "model.onnx").read_bytes()
        assert shipped == (world.w / "export" / "model.onnx").read_bytes()
    shutil.rmtree(sandbox)


ENTRY_NAMES = ["model.onnx", "MODEL.onnx", "../x", "../../victims/W13.txt", "/abs",
               "{v}/W13.txt", "a/b", "..", ".", ".hidden", "x\\y", "\x1b[2J", "manifest.json",
               "t.json"]  # fmt: skip
entry_names = st.one_of(
    st.sampled_from(ENTRY_NAMES), st.text(alphabet="ab./\\\x1b", min_size=1, max_size=8)
)
entries = st.lists(
    st.tuples(
        entry_names,
        st.integers(min_value=0, max_value=4096),
        st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(entries=entries)
def test_zip_reader_never_writes_outside_its_extraction_folder(world, entries):
    from edgekd.errors import EdgeKDError
    from edgekd.stages.bundle import unpack

    sandbox = Path(tempfile.mkdtemp(dir=world.root, prefix="prop-zip-"))
    (sandbox / "tmp").mkdir()
    path = sandbox / "b.zip"
    names = [n.replace("{v}", str(world.v)) for n, _, _ in entries]
    with warnings.catch_warnings(), zipfile.ZipFile(path, "w") as z:
        warnings.simplefilter("ignore")  # duplicate names are part of the point
        for name, (_, size, method) in zip(names, entries, strict=True):
            z.writestr(zipfile.ZipInfo(name), SECRET * (size // len(SECRET)), method)
    before = tree(world.root)
    saved = tempfile.tempdir
    tempfile.tempdir = str(sandbox / "tmp")
    try:
        try:
            folder = unpack(path)
        except EdgeKDError as e:
            assert not any(c in str(e) for c in RAW_CONTROLS), str(e)
            folder = None
        mid = tree(world.root)
        inside = (sandbox / "tmp").relative_to(world.root).as_posix()
        changed = {k for k in before.keys() | mid.keys() if before.get(k) != mid.get(k)}
        assert all(k.startswith(f"{inside}/") for k in changed), changed
        if folder is not None:  # only the entries, as plain files, right in the folder
            got = {p.name for p in Path(folder.name).iterdir()}
            assert got == set(names) and all(Path(folder.name, n).is_file() for n in got)
            folder.cleanup()
    finally:
        tempfile.tempdir = saved
    assert not os.listdir(sandbox / "tmp")
    assert tree(world.root) == {**before}
    shutil.rmtree(sandbox)
