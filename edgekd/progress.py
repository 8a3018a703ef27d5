"""Rich progress bars for every step that takes more than a few seconds, and the
consoles edgekd prints through.

A string printed through these consoles loses its control characters (`printable`):
a path, a model name or a text from a file cannot move the cursor, clear a line or
recolour the screen. edgekd's own colours are markup, rendered after that. A foreign
string put inside markup goes through `shown`, so that its `[red]` stays text.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskProgressColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.status import Status
from rich.style import Style
from rich.text import Text

from edgekd.errors import printable

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


def progress_bar() -> Progress:
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


def track(items: Sequence[T], description: str) -> Iterator[T]:
    """Yield `items` under a progress bar."""
    with progress_bar() as bar:
        task = bar.add_task(description, total=len(items), rate="")
        for item in items:
            yield item
            bar.advance(task)
