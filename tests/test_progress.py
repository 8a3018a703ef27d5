"""Progress as a user reads it: rich bars on a terminal, plain lines in a log (CI,
`> file`, nohup), and no dependency warning the user cannot act on."""

import io
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.progress import Progress
from typer.testing import CliRunner

import edgekd.progress as progress
from edgekd.cli import app
from edgekd.errors import EdgeKDError
from edgekd.progress import PlainProgress, SafeConsole, main_process, progress_bar, track

# What a redrawn bar leaves in a file: its glyphs, the ellipsis of a cut column, the
# carriage return of a redraw and the escape sequences of colour and cursor moves.
BAR_DEBRIS = ("━", "╸", "╺", "…", "\r", "\x1b")

START_LINE = re.compile(r"^(?P<step>.+): started, [\d,]+(/[\d,]+)?$")
# `distill: 24/238 (10%), 48.1 items/s, 0:00:01 elapsed, epoch 1 loss 0.0001`, with
# `done ` or `stopped ` before the counts on a step's end line.
PROGRESS_LINE = re.compile(
    r"^(?P<step>.+?): (?:(?P<end>done|stopped) )?(?P<done>[\d,]+)/(?P<total>[\d,]+) "
    r"\((?P<share>\d+)%\), (?:(?P<rate>[\d,.]+) items/s, )?(?P<elapsed>\d+:\d\d:\d\d) elapsed"
    r"(?:, (?P<field>.+))?$"
)

# What edgekd's progress depends on in the environment; a test sets what it needs.
STYLE_VARS = ("EDGEKD_PROGRESS", "FORCE_COLOR", "TTY_COMPATIBLE", "EDGEKD_DEBUG")


class Clock:
    """A clock the test moves by hand: no line depends on how busy the machine is."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def plain(clock: Clock) -> tuple[PlainProgress, io.StringIO]:
    buf = io.StringIO()
    return PlainProgress(SafeConsole(file=buf, width=80), get_time=clock), buf


def lines_of(buf: io.StringIO) -> list[str]:
    """The printed lines, each checked to be plain: no glyph, no redraw, no escape."""
    out = buf.getvalue()
    for debris in BAR_DEBRIS:
        assert debris not in out, (debris, out)
    return out.splitlines()


@pytest.fixture
def no_style_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in STYLE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")


@pytest.mark.parametrize(("rank", "main"), [(None, True), ("0", True), ("", True), ("1", False)])
def test_main_process_is_rank_zero_or_a_lone_process(monkeypatch, rank, main):
    # torchrun and `accelerate launch` set RANK; the other ranks stay quiet.
    if rank is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", rank)
    assert main_process() is main


# ------------------------------------------------------------------ plain lines


def test_plain_progress_prints_start_every_tenth_and_end_lines():
    clock = Clock()
    bar, buf = plain(clock)
    with bar:
        job = bar.add_task("distill", total=100, rate="")
        for second in range(1, 21):  # 5 steps a second, for 20 s
            clock.now = second
            bar.update(job, advance=5, rate=f"epoch 1 loss {second / 100:.2f}")
    # The first update (5 steps at 1 s) is where the rates count from; then a line
    # each 10 steps (10%): 5 items/s throughout. 100/100 prints no line of its own.
    progress_lines = [
        f"distill: {done}/100 ({done}%), 5 items/s, 0:00:{done // 5:02d} elapsed, "
        f"epoch 1 loss {done / 500:.2f}"
        for done in range(15, 100, 10)
    ]
    assert lines_of(buf) == [
        "distill: started, 0/100",
        *progress_lines,
        "distill: done 100/100 (100%), 5 items/s, 0:00:20 elapsed, epoch 1 loss 0.20",
    ]
    for line in lines_of(buf)[1:]:
        assert PROGRESS_LINE.match(line), line
    assert START_LINE.match(lines_of(buf)[0])


def test_plain_progress_prints_every_30_s_when_a_tenth_takes_longer():
    clock = Clock()
    bar, buf = plain(clock)
    with bar:
        job = bar.add_task("teacher logits (train)", total=1000, rate="")
        for second in range(10, 91, 10):  # one text every 10 s
            clock.now = second
            bar.advance(job)
    assert lines_of(buf) == [
        "teacher logits (train): started, 0/1,000",
        "teacher logits (train): 4/1,000 (0%), 0.1 items/s, 0:00:40 elapsed",
        "teacher logits (train): 7/1,000 (0%), 0.1 items/s, 0:01:10 elapsed",
        "teacher logits (train): done 9/1,000 (0%), 0.1 items/s, 0:01:30 elapsed",
    ]


def test_plain_progress_prints_only_start_and_end_when_the_step_takes_a_second():
    clock = Clock()
    bar, buf = plain(clock)
    with bar:
        job = bar.add_task("teacher logits (dev)", total=100, rate="")
        for tenth in range(1, 11):  # 10% every 0.1 s: under a second between lines
            clock.now = tenth / 10
            bar.update(job, advance=10)
    assert lines_of(buf) == [
        "teacher logits (dev): started, 0/100",
        "teacher logits (dev): done 100/100 (100%), 100 items/s, 0:00:01 elapsed",
    ]


def test_plain_progress_rate_leaves_out_a_resumed_runs_jump():
    # A resumed run jumps to its saved step in its first update (trainer.py, teacher.py):
    # 60 steps at once are no work done in this run, so the rate stays 1 step a second.
    clock = Clock()
    bar, buf = plain(clock)
    with bar:
        job = bar.add_task("fine-tune teacher", total=100, rate="")
        bar.update(job, completed=60)
        for second in range(1, 41):
            clock.now = second
            bar.update(job, completed=60 + second, rate="loss 0.250")
    assert lines_of(buf) == [
        "fine-tune teacher: started, 0/100",
        "fine-tune teacher: 70/100 (70%), 1 items/s, 0:00:10 elapsed, loss 0.250",
        "fine-tune teacher: 80/100 (80%), 1 items/s, 0:00:20 elapsed, loss 0.250",
        "fine-tune teacher: 90/100 (90%), 1 items/s, 0:00:30 elapsed, loss 0.250",
        "fine-tune teacher: done 100/100 (100%), 1 items/s, 0:00:40 elapsed, loss 0.250",
    ]


def test_plain_progress_says_stopped_when_an_error_cuts_the_step():
    clock = Clock()
    bar, buf = plain(clock)
    with pytest.raises(KeyboardInterrupt), bar:
        job = bar.add_task("distill", total=100, rate="")
        for second in range(1, 4):
            clock.now = second
            bar.update(job, advance=10)
        raise KeyboardInterrupt
    assert lines_of(buf)[-1] == "distill: stopped 30/100 (30%), 10 items/s, 0:00:03 elapsed"


def test_plain_progress_prints_by_time_alone_when_the_total_is_unknown():
    clock = Clock()
    bar, buf = plain(clock)
    with bar:
        job = bar.add_task("scan", total=None)
        for second in range(10, 41, 10):
            clock.now = second
            bar.advance(job, 3)
    assert lines_of(buf) == [
        "scan: started, 0",
        "scan: 12, 0.3 items/s, 0:00:40 elapsed",
        "scan: done 12, 0.3 items/s, 0:00:40 elapsed",
    ]


def test_plain_progress_description_prints_as_text_when_it_holds_markup_or_escapes():
    clock = Clock()
    bar, buf = plain(clock)
    with bar:
        bar.add_task("[red]x\x1b[2K\r eval", total=1)
    assert lines_of(buf)[0] == "[red]x\\x1b[2K\\r eval: started, 0/1"


# ------------------------------------------------------------------ which one


def test_progress_bar_draws_rich_bars_when_stderr_is_a_terminal(monkeypatch, no_style_env):
    buf = io.StringIO()
    monkeypatch.setattr(progress, "console", SafeConsole(file=buf, force_terminal=True))
    assert isinstance(progress_bar(), Progress)
    assert list(track([1, 2, 3], "eval")) == [1, 2, 3]
    assert "━" in buf.getvalue() and "started" not in buf.getvalue()


def test_progress_bar_prints_plain_lines_when_stderr_is_a_file(monkeypatch, no_style_env):
    buf = io.StringIO()
    monkeypatch.setattr(progress, "console", SafeConsole(file=buf))
    assert isinstance(progress_bar(), PlainProgress)
    assert list(track([1, 2, 3], "eval")) == [1, 2, 3]
    lines = lines_of(buf)
    assert lines[0] == "eval: started, 0/3"
    end = PROGRESS_LINE.match(lines[-1])
    assert end and end["end"] == "done" and end["done"] == "3", lines


@pytest.mark.parametrize(
    ("terminal", "term", "forced", "style"),
    [
        (True, "dumb", None, PlainProgress),  # cannot redraw: rich would print at the end only
        (True, "xterm", "plain", PlainProgress),
        (False, "xterm", "rich", Progress),
        (False, "xterm", " Rich ", Progress),
    ],
)
def test_progress_bar_follows_edgekd_progress_and_dumb_terminals(
    monkeypatch, no_style_env, terminal, term, forced, style
):
    monkeypatch.setenv("TERM", term)
    if forced is not None:
        monkeypatch.setenv("EDGEKD_PROGRESS", forced)
    console = SafeConsole(file=io.StringIO(), force_terminal=terminal)
    monkeypatch.setattr(progress, "console", console)
    assert isinstance(progress_bar(), style)


def test_progress_style_refuses_an_unknown_edgekd_progress_naming_the_choices(monkeypatch):
    monkeypatch.setenv("EDGEKD_PROGRESS", "bars")
    with pytest.raises(EdgeKDError, match=r"EDGEKD_PROGRESS='bars'.*plain or rich"):
        progress_bar()


def test_cli_refuses_an_unknown_edgekd_progress_before_any_work(monkeypatch):
    from conftest import assert_refused

    monkeypatch.setenv("EDGEKD_PROGRESS", "bars")
    r = CliRunner().invoke(app, ["devices"])
    assert_refused(r, "EDGEKD_PROGRESS='bars'", "plain or rich")


# ------------------------------------------------------------------ dependency warnings

TORCH_DTYPE = "`torch_dtype` is deprecated! Use `dtype` instead!"


@pytest.fixture
def transformers_log(monkeypatch: pytest.MonkeyPatch):
    """The records transformers' configuration_utils logger lets through."""
    monkeypatch.setitem(progress.QUIET, "on", progress.QUIET["on"])  # restored after
    logger = logging.getLogger("transformers.configuration_utils")
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger.addHandler(handler)
    yield logger, seen
    logger.removeHandler(handler)


@pytest.mark.parametrize(
    ("args", "env", "shown"),
    [
        (["devices"], {}, False),
        (["--debug", "devices"], {}, True),
        (["devices"], {"EDGEKD_DEBUG": "1"}, True),
    ],
)
def test_cli_hides_transformers_torch_dtype_log_unless_debug(
    monkeypatch, transformers_log, args, env, shown
):
    logger, seen = transformers_log
    monkeypatch.delenv("EDGEKD_DEBUG", raising=False)
    assert CliRunner().invoke(app, args, env=env).exit_code == 0
    logger.warning(TORCH_DTYPE)
    # Narrow: the same logger's other messages still show.
    logger.warning("Some weights of the model checkpoint were not used")
    other = "Some weights of the model checkpoint were not used"
    assert seen == ([TORCH_DTYPE] if shown else []) + [other]


def test_cli_still_shows_edgekd_warnings_and_other_loggers_when_quiet(transformers_log):
    import warnings

    assert CliRunner().invoke(app, ["devices"]).exit_code == 0
    assert progress.QUIET["on"]
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.name)
    for name in ("edgekd.distill", "optimum.exporters"):  # the same words, elsewhere
        logging.getLogger(name).addHandler(handler)
        logging.getLogger(name).warning(TORCH_DTYPE)
        logging.getLogger(name).removeHandler(handler)
    assert seen == ["edgekd.distill", "optimum.exporters"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn_explicit("edgekd's own", UserWarning, "edgekd/x.py", 1, "edgekd.x")
    assert [str(w.message) for w in caught] == ["edgekd's own"]


def cli_then(args: list[str], code: str) -> subprocess.CompletedProcess[str]:
    """`edgekd ARGS` in a fresh process (transformers logs a warning once a process),
    then `code` in the same one."""
    script = f"from edgekd.cli import app\napp({args!r}, standalone_mode=False)\n{code}"
    env = {k: v for k, v in os.environ.items() if k not in STYLE_VARS}
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env
    )


def test_cli_command_imports_no_heavy_framework_for_its_warning_filters():
    out = cli_then(
        ["devices"],
        "import sys; print([m for m in ('torch', 'transformers', 'onnxruntime') "
        "if m in sys.modules])",
    )
    assert out.stdout.splitlines()[-1] == "[]"


@pytest.mark.slow
def test_debug_shows_the_torch_dtype_warning_transformers_really_logs():
    # transformers' own code path (the `torch_dtype` property), not a record made here.
    code = "from transformers import PretrainedConfig\nPretrainedConfig().torch_dtype"
    assert TORCH_DTYPE not in cli_then(["devices"], code).stderr
    assert TORCH_DTYPE in cli_then(["--debug", "devices"], code).stderr


# ------------------------------------------------------------------ a real log


@pytest.mark.slow
def test_distill_log_redirected_to_a_file_is_plain_lines(tmp_path, tiny_teacher, tiny_data):
    # onnx-int8 labels with the teacher exported through optimum, which logs
    # transformers' `torch_dtype` warning; 2 epochs give the distill step a pause
    # (scoring) between them, so it runs past a second and prints progress lines.
    log = tmp_path / "log"
    env = {k: v for k, v in os.environ.items() if k not in STYLE_VARS}
    with log.open("w") as f:
        subprocess.run(
            [
                sys.executable, "-m", "edgekd", "distill", "--teacher", str(tiny_teacher),
                "--data", str(tiny_data), "--out", str(tmp_path / "student"), "--epochs", "2",
                "--teacher-runtime", "onnx-int8",
            ],
            stdout=f, stderr=subprocess.STDOUT, env=env, check=True, cwd=tmp_path,
        )  # fmt: skip
    assert list(Path(os.environ["EDGEKD_CACHE"]).rglob("*.onnx")), "no teacher was exported"
    text = log.read_text()
    for debris in BAR_DEBRIS:
        assert debris not in text, (debris, text)
    assert "torch_dtype" not in text and "deprecated" not in text.lower(), text

    open_steps: list[str] = []
    ends: dict[str, re.Match[str]] = {}
    middles: dict[str, list[re.Match[str]]] = {}
    for line in text.splitlines():
        if start := START_LINE.match(line):
            open_steps.append(start["step"])
        elif m := PROGRESS_LINE.match(line):
            assert m["step"] in open_steps, line  # after its start line
            if m["end"]:
                assert m["end"] == "done" and m["done"] == m["total"], line
                open_steps.remove(m["step"])
                ends[m["step"]] = m
            else:
                assert m["rate"], line  # every progress line carries its rate
                middles.setdefault(m["step"], []).append(m)
    assert not open_steps, f"steps without an end line: {open_steps}"
    assert {"teacher logits (train)", "distill"} <= set(ends), text
    for m in [*middles.get("distill", []), ends["distill"]]:
        assert re.fullmatch(r"epoch [12] loss \d+\.\d{4}", m["field"] or ""), m.group()
    # On a machine fast enough to distill in under 2 s the step has no room for a line.
    if ends["distill"]["elapsed"] >= "0:00:02":
        assert middles.get("distill"), text
