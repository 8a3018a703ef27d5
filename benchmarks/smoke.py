"""EDGEKD_BENCH_SMOKE: run a benchmark as a wiring check, not as a measurement.

With EDGEKD_BENCH_SMOKE set to anything but blank or "0", every script in benchmarks/ runs
its own code paths on the smallest work they take: one seed, one epoch (or the fewest
a method needs to reach its last stage), the fewest methods that still reach every
path of the script, the fewest repeats, rounds and trials its statistics accept, and
short timing windows. The command and its options stay the same: counts given on the
command line are capped all the same (`--repeats 16` runs once), while a set named
there (`--only KD`, `--vocabs wordpiece`) is kept as named. It writes the same JSON and
Markdown files as a full run: the JSON's meta says "smoke": true and the Markdown's
first line says the figures are not a result. tests/test_readme.py runs the README's
benchmark commands this way, so they are checked for wiring without re-running them.

A smoke run keeps its students and caches in `runs/bench-*-smoke`, so a full run never
picks up a smoke run's one-epoch students as finished work. Its result files replace a
full run's in benchmarks/results/: run it in a copy of the checkout, not in one whose
results you keep.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

VAR = "EDGEKD_BENCH_SMOKE"
SMOKE = os.environ.get(VAR, "").strip() not in ("", "0")

# The smallest work, shared by every script.
ROWS = 200  # training rows: 4 steps at batch 50, and a tenth (20) held out for selection
REPEATS = 1  # repeats, rounds, seeds: a median, a spread and a CI all take one
TRIALS = 2  # trials per timing: the fewest that alternate A B, B A and pair a ratio
RUNS = 20  # timed calls per timing: 10 per trial of 2
WINDOW_S = 0.2  # seconds per throughput window: a few optimiser steps of a tiny model
# Minutes for a stage given a time budget (--time-budget): a tiny teacher or student
# trains several epochs in 12 s, and a budget is filled, so each minute here costs one.
BUDGET_MIN = 0.2
# Augmented rows a distill keeps (--max-augmented): 20 steps at batch 50. A small task
# draws up to 200 variants per text, so the sandbox's 22 texts alone give up to 4,400.
AUGMENTED = 1_000

NOTE = (
    f"> **Smoke run** (`{VAR}`): a wiring check on the smallest work, not a result; "
    "no figure below is a measurement."
)


def at_most(value: int, smallest: int) -> int:
    """`value` in a full run; under smoke no more than `smallest`, whatever was asked."""
    return min(value, smallest) if SMOKE else value


def pick(full: Any, smoke: Any) -> Any:
    """`smoke` under smoke, else `full`: a default or a set the smoke run trims."""
    return smoke if SMOKE else full


def rows(full: int | None) -> int | None:
    """Training rows to read (None: all), at most `ROWS` under smoke."""
    return (ROWS if full is None else min(full, ROWS)) if SMOKE else full


def distill_args() -> list[str]:
    """Options a script adds to its `edgekd distill` commands: under smoke, the transfer
    set cut to `AUGMENTED` rows (every augmenter the run resolves still runs)."""
    return ["--max-augmented", str(AUGMENTED)] if SMOKE else []


def runs_dir(folder: Path) -> Path:
    """A benchmark's folder of runs; under smoke its `-smoke` sibling."""
    return folder.with_name(f"{folder.name}-smoke") if SMOKE else folder


def markdown(text: str) -> str:
    """A result's Markdown; under smoke it opens with the line saying it is not one."""
    return f"{NOTE}\n\n{text}" if SMOKE else text
