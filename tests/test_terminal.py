"""Terminal injection (issue 30, class 8): whatever edgekd prints that came from a user or
a file (a path, a text, a label, a model or limit name, an exception's message) reaches
the terminal with its control characters made visible and its rich markup as text, so
a crafted file cannot paint a green "all bundle checks passed" over its real error.
edgekd's own colours still come out as ANSI on a terminal."""

from __future__ import annotations

import io
import json
import re
import shutil

import pytest
from typer.testing import CliRunner

from edgekd.cli import app
from edgekd.errors import EdgeKDError, printable, printable_json

runner = CliRunner()

# What a crafted file or argument would use to repaint a verdict: erase the line, return
# to its start, print a green pass.
FAKE_PASS = "x\x1b[2K\r\x1b[32mall bundle checks passed\x1b[0m"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def assert_clean(text: str) -> None:
    """No raw control character but line breaks, no bidi override."""
    assert not RAW.search(text), repr(text)


# ------------------------------------------------------------------ printable


def test_printable_escapes_esc_visibly():
    assert printable("a\x1b[31mred") == "a\\x1b[31mred"


def test_printable_escapes_cr_bel_backspace_and_del():
    assert printable("a\rb\x07c\x08d\x7fe\x00") == "a\\rb\\x07c\\x08d\\x7fe\\x00"


def test_printable_escapes_c1_controls():
    # 0x9b is a one-byte CSI on some terminals, 0x85 a next-line.
    assert printable("a\x9b2Jb\x85c\x80\x9f") == "a\\x9b2Jb\\x85c\\x80\\x9f"


@pytest.mark.parametrize(
    "char", [*map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))]
)
def test_printable_escapes_bidi_overrides_and_isolates(char):
    assert printable(f"ab{char}cd") == f"ab\\u{ord(char):04x}cd"


def test_printable_turns_newline_into_backslash_n_and_tab_into_space():
    assert printable("one\ntwo\r\nthree\tfour") == "one\\ntwo\\r\\nthree four"


@pytest.mark.parametrize(
    "text", ["café 北京", "naïve — résumé ✓ 🎉", "C:\\Users\\me\\data.tsv", "[red]x[/]", ""]
)
def test_printable_keeps_plain_text_unchanged(text):
    assert printable(text) == text


def test_printable_is_idempotent():
    once = printable(FAKE_PASS + "\u202e\n\x9b")
    assert printable(once) == once


def test_printable_defuses_a_fake_pass_painted_over_an_error():
    shown = printable(f"error: {FAKE_PASS} is corrupt")
    assert_clean(shown)
    assert "\n" not in shown
    assert shown == "error: x\\x1b[2K\\r\\x1b[32mall bundle checks passed\\x1b[0m is corrupt"


def test_printable_json_decodes_to_the_same_data():
    data = {"text": FAKE_PASS + "\u202e\x9b\x7f café\n", "label": "[red]pos"}
    for indent in (None, 2):
        line = printable_json(json.dumps(data, ensure_ascii=False, indent=indent))
        assert_clean(line)
        assert json.loads(line) == data
        assert "café" in line  # non-ASCII text stays readable


def test_edgekd_error_message_is_one_printable_line_when_it_quotes_escapes():
    e = EdgeKDError(f"{FAKE_PASS}\nsecond line does not exist")
    assert_clean(str(e))
    assert "\n" not in str(e) and "\\x1b[32mall bundle checks passed" in str(e)


def test_describe_escapes_the_file_name_when_an_oserror_quotes_one():
    from edgekd.failures import describe

    message, code = describe(FileNotFoundError(2, "No such file", FAKE_PASS))
    assert code == 2
    assert_clean(message)
    assert message.startswith("x\\x1b[2K\\r\\x1b[32mall bundle checks passed")


def test_describe_escapes_an_internal_errors_text():
    from edgekd.failures import describe

    message, code = describe(RuntimeError(f"boom {FAKE_PASS}"))
    assert code == 4
    assert_clean(message)


# ------------------------------------------------------------------ rich consoles


def test_safe_console_escapes_foreign_strings_and_keeps_own_colours():
    from edgekd.progress import SafeConsole, shown

    buf = io.StringIO()
    console = SafeConsole(file=buf, force_terminal=True, width=200, highlight=False)
    console.print(f"[green]ok[/] {shown('[red]x' + chr(27) + '[2J')} :fire:")
    out = buf.getvalue()
    assert "\x1b[32mok" in out  # edgekd's own markup: an ANSI colour
    assert "\x1b[2J" not in out and "\\x1b[2J" in out
    assert "[red]x" in out  # the foreign markup is text
    assert ":fire:" in out  # no emoji codes


def test_safe_console_escapes_controls_when_a_caller_forgets_shown():
    from edgekd.progress import SafeConsole

    buf = io.StringIO()
    SafeConsole(file=buf, width=200).print(f"resuming from {FAKE_PASS}")
    assert_clean(buf.getvalue())
    assert "\\x1b[32mall bundle checks passed" in buf.getvalue()


def test_progress_description_prints_plain_when_it_holds_markup_or_escapes(monkeypatch):
    import edgekd.progress as progress

    buf = io.StringIO()
    monkeypatch.setattr(progress, "console", progress.SafeConsole(file=buf, width=200))
    assert list(progress.track([1, 2], f"[red]{FAKE_PASS} eval")) == [1, 2]
    out = buf.getvalue()
    assert_clean(out)
    assert "[red]x\\x1b[2K\\r\\x1b[32mall bundle checks passed" in out


def test_print_check_shows_limit_names_literally_when_they_hold_markup(capsys):
    from edgekd.artifacts import CheckResult, LimitResult
    from edgekd.render import print_check

    limit = LimitResult(
        limit="[red]max_bytes\x1b[2J", metric="bytes", op="<=", threshold=10, measured=5, unit="B"
    )
    result = CheckResult(
        model="int8", device="pi\u202e", passed=True, limits=[limit], notes=[f"n {FAKE_PASS}"]
    )
    print_check(result)
    out = capsys.readouterr().out
    assert_clean(out)
    assert "[red]max_bytes\\x1b[2J" in out and "pi\\u202e" in out
    assert "note: n x\\x1b[2K" in out


# ------------------------------------------------------------------ the CLI


def test_distill_error_line_has_no_raw_escape_when_the_data_path_holds_one(tmp_path):
    data = tmp_path / "d\x1b[31m.tsv"
    data.write_text("sentence\tlabel\ngood\t1\n")
    teacher = tmp_path / FAKE_PASS
    r = runner.invoke(
        app,
        ["distill", "--data", str(data), "--teacher", str(teacher), "--out", str(tmp_path / "o")],
    )
    assert r.exit_code == 2
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    assert_clean(r.stderr)
    assert "\\x1b[" in r.stderr


def test_check_error_line_has_no_raw_escape_when_the_path_holds_one(tmp_path):
    budget = tmp_path / "budget.yaml"
    budget.write_text("max_bytes: 1000\n")
    r = invoke("check", tmp_path / FAKE_PASS, "--budget", budget)
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1
    assert_clean(r.stderr)
    assert "x\\x1b[2K\\r\\x1b[32mall bundle checks passed" in r.stderr


def test_check_prints_a_budget_key_literally_when_it_holds_markup_and_escape(tmp_path, tiny_export):
    budget = tmp_path / "budget.yaml"
    budget.write_text('"[red]max_bytes\\e[2J": 1000\n')  # YAML's \e is ESC
    r = invoke("check", tiny_export, "--budget", budget)
    assert r.exit_code == 2
    assert_clean(r.stderr)
    assert "[red]max_bytes\\x1b[2J" in r.stderr


def test_check_json_stdout_escapes_a_bidi_override_and_decodes_to_the_path(tmp_path, tiny_export):
    budget = tmp_path / "b\u202egpj.yaml"
    budget.write_text("max_bytes: 100000000\n")
    r = invoke("check", tiny_export, "--budget", budget, "--json", "-")
    assert r.exit_code == 0
    assert_clean(r.stdout)
    assert json.loads(r.stdout)["budget"] == str(budget)


def test_bundle_error_escapes_the_model_name_when_export_json_holds_markup_and_escape(
    tmp_path, tiny_export
):
    export = tmp_path / "export"
    shutil.copytree(tiny_export, export)
    report = json.loads((export / "export.json").read_text())
    report["models"]["int8"]["path"] = "[red]m\x1b[2J.onnx"
    (export / "export.json").write_text(json.dumps(report))
    r = invoke("bundle", export, "--out", tmp_path / "bundle")
    assert r.exit_code == 2
    assert_clean(r.stderr)
    assert "[red]m\\x1b[2J.onnx" in r.stderr


def test_usage_error_line_escapes_the_option_value():
    r = invoke("bundle", "x", "--out", "y", "--model", FAKE_PASS)
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1
    assert_clean(r.stderr)


def test_profile_table_shows_the_model_name_literally_when_it_holds_markup_and_escape(
    tmp_path,
):
    from conftest import identity_model

    a = identity_model(tmp_path / "[red]m\x1b[2J.onnx")
    b = identity_model(tmp_path / "b\u202e.onnx")
    r = invoke("profile", a, "--runs", 4, "--trials", 2, "--warmup", 0, "--seq-len", 4)
    assert r.exit_code == 0
    assert_clean(r.stdout)
    assert "[red]m\\x1b[2J.onnx on" in r.stdout
    r = invoke("profile", a, "--vs", b, "--runs", 4, "--trials", 2, "--warmup", 0,
               "--seq-len", 4)  # fmt: skip
    assert r.exit_code == 0
    assert_clean(r.stdout)
    assert "b\\u202e.onnx / [red]m\\x1b[2J.onnx latency" in r.stdout


def test_predict_prints_a_text_escaped_when_it_holds_an_escape_sequence(tiny_chain):
    r = invoke("predict", tiny_chain / "bundle", "\x1b[2Jwow\r\x1b[32mok", "plain café")
    assert r.exit_code == 0
    assert_clean(r.stdout)
    lines = r.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].split("\t")[2] == "\\x1b[2Jwow\\r\\x1b[32mok"
    assert lines[1].split("\t")[2] == "plain café"


def test_predict_json_decodes_to_the_text_when_it_holds_controls_and_bidi(tiny_chain):
    text = "\x1b[2J\u202egood\x9b"
    r = invoke("predict", tiny_chain / "bundle", text, "--json")
    assert r.exit_code == 0
    assert_clean(r.stdout)
    assert json.loads(r.stdout)["text"] == text


def test_predict_prints_labels_literally_when_the_bundle_labels_hold_markup(tmp_path, tiny_export):
    from edgekd.stages.bundle import make_bundle

    export = tmp_path / "export"
    shutil.copytree(tiny_export, export)
    meta = json.loads((export / "student.json").read_text())
    meta["id2label"] = ["[red]neg\x1b[2J", "pos\u202e"]
    (export / "student.json").write_text(json.dumps(meta))
    make_bundle(export, tmp_path / "bundle")
    r = invoke("predict", tmp_path / "bundle", "good film")
    assert r.exit_code == 0
    assert_clean(r.stdout)
    label, probs, text = r.stdout.rstrip("\n").split("\t")
    assert label in ("[red]neg\\x1b[2J", "pos\\u202e") and text == "good film"
    assert "[red]neg\\x1b[2J " in probs and "pos\\u202e " in probs


def test_cache_note_prints_a_bracketed_file_name_literally(tmp_path, capsys):
    # Rich would read "[red]" in a file name as markup and drop it (or fail on "[/]").
    import numpy as np

    from conftest import through_cache

    (tmp_path / "[red]k.safetensors").write_bytes(b"not safetensors")
    through_cache(tmp_path, "[red]k", lambda: np.zeros((1, 2), np.float32), rows=1)
    assert "[red]k.safetensors" in capsys.readouterr().err
