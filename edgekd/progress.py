"""Progress for every step that takes more than a few seconds, and the consoles edgekd
prints through.

On a terminal a step draws a rich bar. Anywhere else (a CI log, `> file`, nohup) it
prints plain lines instead (`PlainProgress`): a bar redrawn into a file is a wall of
glyphs cut at 80 columns. `EDGEKD_PROGRESS=plain|rich` forces either. The CLI also
hides here the dependency messages a user cannot act on (`DEPENDENCY_LOGS`).

A string printed through these consoles loses its control characters (`printable`):
a path, a model name or a text from a file cannot move the cursor, clear a line or
recolour the screen. edgekd's own colours are markup, rendered after that. A foreign
string put inside markup goes through `shown`, so that its `[red]` stays text.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Protocol, TypeVar

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TaskProgressColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.status import Status
from rich.style import Style
from rich.text import Text

from edgekd.errors import EdgeKDError, printable

T = TypeVar("T")


def shown(value: object) -> str:
    """A string from a user or a file, ready to go inside rich markup: control
    characters made visible (`printable`), and `[` escaped so it reads as text."""
    return escape(printable(str(value)))


class SafeConsole(Console):
    """A rich console whose printed strings cannot drive the terminal: every string it
    renders (a printed message, a table cell or title, a rule's title) passes
    `printable` before its markup is read, so an ESC or CR in it prints as `\\x1b` or
    `\\r`. Emoji codes (`:fire:`) stay text. Styles still come out as ANSI colours."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("emoji", False)
        super().__init__(**kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(printable(text), **kwargs)

    def status(self, status: Any, **kwargs: Any) -> Status:
        # A spinner reads its text as markup itself, never through render_str.
        return super().status(printable(status) if isinstance(status, str) else status, **kwargs)


def main_process() -> bool:
    """False in the other processes `accelerate launch` or `torchrun` started (RANK >
    0): they run the same epochs in step, and would print every line once more."""
    return int(os.environ.get("RANK") or 0) == 0


# Progress goes to stderr so `--json -` style stdout stays machine-readable.
# soft_wrap: a long status line stays one line in a log (rich would otherwise break it
# at 80 columns when stderr is no terminal, and `grep '^epoch'` would miss its end).
console = SafeConsole(stderr=True, soft_wrap=True, quiet=not main_process())


class DescriptionColumn(ProgressColumn):
    """The task's description in bold, as plain text: a description may quote a model
    or a file name (TextColumn would read its `[` as markup and keep its ESC)."""

    def render(self, task: Task) -> Text:
        return Text(printable(task.description), style=Style(bold=True))


class RateColumn(ProgressColumn):
    """The task's `rate` field (loss, epoch), as plain text."""

    def render(self, task: Task) -> Text:
        return Text(printable(str(task.fields.get("rate", ""))))


class SpeedColumn(ProgressColumn):
    """Items per second (texts/s when labelling, steps/s when training)."""

    def render(self, task: Task) -> Text:
        return Text(f"{task.speed:,.0f}/s" if task.speed else "")


def rich_bar() -> Progress:
    return Progress(
        DescriptionColumn(),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        SpeedColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


class ProgressDisplay(Protocol):
    """What a step uses of its progress display: rich's `Progress` on a terminal,
    `PlainProgress` elsewhere."""

    def __enter__(self) -> ProgressDisplay: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> None: ...

    def add_task(
        self,
        description: str,
        start: bool = True,
        total: float | None = 100.0,
        completed: int = 0,
        visible: bool = True,
        **fields: Any,
    ) -> TaskID: ...

    def update(
        self,
        task_id: TaskID,
        *,
        total: float | None = None,
        completed: float | None = None,
        advance: float | None = None,
        description: str | None = None,
        visible: bool | None = None,
        refresh: bool = False,
        **fields: Any,
    ) -> None: ...

    def advance(self, task_id: TaskID, advance: float = 1) -> None: ...


# A plain progress line at most every this share of a step's total, or every
# `PLAIN_EVERY_S`, whichever comes first: a 10-minute labelling prints ~10 lines, a
# 2-hour training one every 30 s (240 lines), and a log shows a stall within 30 s.
PLAIN_EVERY = 0.10
PLAIN_EVERY_S = 30.0
# ...but never within this of the previous line: a step of a second or two (a dev
# split's logits, the labelers' calibration) prints its start and end lines only,
# where every 10% would be 10 lines a second apart at most.
PLAIN_MIN_S = 1.0


@dataclass
class PlainTask:
    description: str
    total: float | None
    completed: float
    fields: dict[str, Any]
    visible: bool
    # (time, items done) when the task was added, at its first update (None until that
    # came) and at its previous line (or first update): where the rates count from.
    start: tuple[float, float]
    first: tuple[float, float] | None = None
    line: tuple[float, float] = (0.0, 0.0)
    ended: bool = False


class PlainProgress:
    """`rich.progress.Progress`'s interface as edgekd's steps use it (`add_task`,
    `update`, `advance`, a context manager, fields such as `rate=`), printed as plain
    lines: one when a task starts, one at most every `every` of its total or every
    `every_s` seconds (never within `min_s` of the last), one when it ends. No glyphs,
    no carriage returns.

    `get_time` is the clock in seconds (tests drive it by hand). A task's first update
    only marks where its rates count from: a resumed run jumps to its saved step in one
    call, which is no work done in this run, and a first batch pays the warm-up."""

    def __init__(
        self,
        console: Console,
        get_time: Callable[[], float] = time.monotonic,
        every: float = PLAIN_EVERY,
        every_s: float = PLAIN_EVERY_S,
        min_s: float = PLAIN_MIN_S,
    ) -> None:
        self.console, self.get_time = console, get_time
        self.every, self.every_s, self.min_s = every, every_s, min_s
        self.tasks: dict[TaskID, PlainTask] = {}
        # predict.py's onnxruntime workers advance one task from several threads.
        self.lock = threading.Lock()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(stopped=exc_type is not None)

    def start(self) -> None:
        pass

    def stop(self, stopped: bool = False) -> None:
        """The end line of each task not ended yet: `stopped` when an error cut it."""
        with self.lock:
            for task in self.tasks.values():
                if not task.ended:
                    task.ended = True
                    self._line(task, "stopped" if stopped else "done", self._mean_rate(task))

    def add_task(
        self,
        description: str,
        start: bool = True,
        total: float | None = 100.0,
        completed: int = 0,
        visible: bool = True,
        **fields: Any,
    ) -> TaskID:
        with self.lock:
            now = self.get_time()
            task_id = TaskID(len(self.tasks))
            task = PlainTask(description, total, completed, fields, visible, (now, completed))
            self.tasks[task_id] = task
            self._line(task, "started", "")
            return task_id

    def update(
        self,
        task_id: TaskID,
        *,
        total: float | None = None,
        completed: float | None = None,
        advance: float | None = None,
        description: str | None = None,
        visible: bool | None = None,
        refresh: bool = False,
        **fields: Any,
    ) -> None:
        with self.lock:
            task, now = self.tasks[task_id], self.get_time()
            task.total = task.total if total is None else total
            task.completed = task.completed if completed is None else completed
            task.completed += advance or 0
            task.description = description or task.description
            task.visible = task.visible if visible is None else visible
            task.fields.update(fields)
            if task.first is None:
                task.first = task.line = (now, task.completed)
                return
            if task.ended or (task.total is not None and task.completed >= task.total):
                return  # the end line says it
            at, done = task.line
            # With no total, lines come by time alone.
            share = (task.completed - done) / task.total if task.total else 0.0
            if now - at >= self.min_s and (share >= self.every or now - at >= self.every_s):
                self._line(task, "", per_second(task.completed - done, now - at))
                task.line = (now, task.completed)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def _mean_rate(self, task: PlainTask) -> str:
        """Items/s since the first update; since the start when no item came after it."""
        at, done = task.first if task.first and task.completed > task.first[1] else task.start
        return per_second(task.completed - done, self.get_time() - at)

    def _line(self, task: PlainTask, word: str, speed: str) -> None:
        """`distill: 24/238 (10%), 48.1 items/s, 0:00:01 elapsed, epoch 1 loss 0.0001`,
        after `started, `, `done ` or `stopped ` on the start and end lines."""
        if not task.visible:
            return
        counts = number(task.completed) + ("" if task.total is None else f"/{number(task.total)}")
        if word == "started":
            parts = [f"started, {counts}"]
        else:
            if task.total is not None:
                counts += f" ({int(100 * task.completed / task.total) if task.total else 100}%)"
            elapsed = datetime.timedelta(seconds=int(self.get_time() - task.start[0]))
            # The step's own `rate` field last: loss, epoch.
            field = str(task.fields.get("rate") or "")
            parts = [f"{word} {counts}".strip(), speed, f"{elapsed} elapsed", field]
        line = f"{task.description}: " + ", ".join(p for p in parts if p)
        self.console.print(printable(line), markup=False, highlight=False)


def number(x: float) -> str:
    """A count with thousands separators: `5,625`, or `2.5` for a fractional one."""
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def per_second(items: float, seconds: float) -> str:
    """`48.1 items/s` (three figures under 100, whole ones above); "" with no time."""
    if seconds <= 0:
        return ""
    per_s = items / seconds
    return f"{per_s:,.0f} items/s" if per_s >= 100 else f"{per_s:.3g} items/s"


# Messages from dependencies that a user of edgekd cannot act on, as (logger, start of
# the message): the CLI hides them (`quiet_dependencies`), `edgekd --debug` shows them.
# By logger and message, never a whole library's. No Python `warnings.warn` from torch,
# transformers, onnxruntime or optimum reaches a user today (2026-11: teacher, distill
# with each teacher runtime, export, eval, profile and quickstart, run with -W default);
# one that does is filtered here too, by message and module (`warnings.filterwarnings`).
DEPENDENCY_LOGS = (
    # optimum's exporter (the ONNX teacher of `teacher_runtime: onnx*` and quickstart, a
    # bert student's export) passes transformers `torch_dtype`, which it now calls
    # `dtype`; edgekd's own loads pass `dtype`. Whichever module reads it first logs it.
    ("transformers.configuration_utils", "`torch_dtype` is deprecated! Use `dtype` instead!"),
    ("transformers.modeling_utils", "`torch_dtype` is deprecated! Use `dtype` instead!"),
)
QUIET = {"on": False}  # set by the CLI: off under --debug


class DependencyLogFilter(logging.Filter):
    """Drops the records `DEPENDENCY_LOGS` names while `QUIET` is on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            QUIET["on"]
            and any(
                record.name == name and record.getMessage().startswith(start)
                for name, start in DEPENDENCY_LOGS
            )
        )


DEPENDENCY_LOG_FILTER = DependencyLogFilter()


def quiet_dependencies(on: bool = True) -> None:
    """Hide the dependency messages users cannot act on (`DEPENDENCY_LOGS`), or show
    them again (`on=False`, the CLI's --debug).

    Imports nothing: a logger is made by name before its library is imported (that
    library's `getLogger` then returns it, filter attached), so a command that needs
    no torch still imports none."""
    QUIET["on"] = on
    for name, _ in DEPENDENCY_LOGS:
        logging.getLogger(name).addFilter(DEPENDENCY_LOG_FILTER)  # a second add is a no-op


PROGRESS_ENV = "EDGEKD_PROGRESS"


def progress_style() -> Literal["plain", "rich"]:
    """`rich` bars where the console (stderr) is a terminal that redraws, or a notebook;
    `plain` lines anywhere else. `EDGEKD_PROGRESS=plain|rich` forces either."""
    forced = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if forced == "plain":
        return "plain"
    if forced == "rich":
        return "rich"
    if forced:
        raise EdgeKDError(
            f"{PROGRESS_ENV}={printable(forced)!r} is not a progress style: set it to plain "
            "or rich, or unset it (rich on a terminal, plain lines elsewhere)"
        )
    # A dumb terminal (TERM=dumb, an editor's shell) cannot redraw: rich would show
    # each bar only once it ended, so it gets plain lines too.
    live = console.is_terminal and not console.is_dumb_terminal
    return "rich" if live or console.is_jupyter else "plain"


def progress_bar() -> ProgressDisplay:
    """A progress display for one step: rich bars or plain lines (`progress_style`)."""
    return rich_bar() if progress_style() == "rich" else PlainProgress(console)


def track(items: Sequence[T], description: str) -> Iterator[T]:
    """Yield `items` under a progress bar."""
    with progress_bar() as bar:
        task = bar.add_task(description, total=len(items), rate="")
        for item in items:
            yield item
            bar.advance(task)
