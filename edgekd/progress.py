"""Rich progress bars for every step that takes more than a few seconds."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

T = TypeVar("T")


def main_process() -> bool:
    """False in the other processes `accelerate launch` or `torchrun` started (RANK >
    0): they run the same epochs in step, and would print every line once more."""
    return int(os.environ.get("RANK") or 0) == 0


# Progress goes to stderr so `--json -` style stdout stays machine-readable.
# soft_wrap: a long status line stays one line in a log (rich would otherwise break it
# at 80 columns when stderr is no terminal, and `grep '^epoch'` would miss its end).
console = Console(stderr=True, soft_wrap=True, quiet=not main_process())


class SpeedColumn(ProgressColumn):
    """Items per second (texts/s when labelling, steps/s when training)."""

    def render(self, task: Task) -> Text:
        return Text(f"{task.speed:,.0f}/s" if task.speed else "")


def progress_bar() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        SpeedColumn(),
        TextColumn("{task.fields[rate]}"),
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
