"""The suite's own machinery in conftest.py: how `pytest -n auto` splits it."""

from __future__ import annotations

import os

import pytest

import conftest
from conftest import AFTER_GUIDES, DOCS_GROUPS, xdist_unit


def test_xdist_unit_is_the_file_for_every_test_outside_the_docs_blocks():
    assert xdist_unit("tests/test_io.py::test_a[x]") == "tests/test_io.py"
    assert xdist_unit("tests/stages/test_export.py::test_b") == "tests/stages/test_export.py"
    # test_readme.py's own unparametrized test: its file, a unit of one
    assert xdist_unit("tests/test_readme.py::test_readme_and_docs_have") == "tests/test_readme.py"


@pytest.mark.parametrize(
    "name,half",
    [
        ("test_doc_block_runs_as_written[README.md: Step by step]", 0),
        ("test_doc_block_runs_as_written[docs/guides/recipes.md: One recipe]", 0),
        ("test_example_runs_its_documented_command[recipe-sst2-bilstm.yaml]", 0),
        (f"test_doc_block_runs_as_written[{AFTER_GUIDES[0]}: Profiling under load]", 0),
        ("test_doc_block_runs_as_written[docs/benchmarks/robustness.md: Long rows]", 1),
        ("test_doc_block_runs_as_written[benchmarks/NOTES.md: A note]", 1),
    ],
)
def test_xdist_unit_puts_a_docs_block_in_its_pages_half(name, half):
    assert xdist_unit(f"tests/test_readme.py::{name}") == DOCS_GROUPS[half]


def test_worker_cores_pins_each_worker_to_its_own_share(monkeypatch):
    pinned: list[list[int]] = []
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    pin = lambda pid, cores: pinned.append(list(cores))  # noqa: E731
    monkeypatch.setattr(os, "sched_setaffinity", pin, raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        conftest._worker_cores()
    assert pinned == [[0, 1], [2, 3]]


@pytest.mark.parametrize("count", ["", "1", "8"])
def test_worker_cores_leaves_the_mask_alone_when_alone_or_short_of_cores(monkeypatch, count):
    pinned: list[object] = []
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, c: pinned.append(c), raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", count)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    conftest._worker_cores()
    assert pinned == []  # a serial run, or more workers than cores: each keeps them all


def test_auto_workers_are_the_cores_of_the_affinity_mask(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {4, 5, 6}, raising=False)
    assert conftest.pytest_xdist_auto_num_workers(None) == 3  # type: ignore[arg-type]
