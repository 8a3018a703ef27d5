"""Property tests: random input to the data loaders and the YAML parsers (budget,
recipe, device spec, distill config) either loads or raises `EdgeKDError` (one line,
exit 2): never a traceback of any other kind."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgekd.budget import LIMITS, load_budget
from edgekd.config import DataConfig, DistillConfig, load_yaml, validate
from edgekd.data import load_task
from edgekd.errors import EdgeKDError

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Scalars a user might type, including the ones strict typing must refuse.
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)


def plain(keys: list[str]) -> st.SearchStrategy[Any]:
    """Nested plain data whose mapping keys are mostly real field names."""
    key = st.one_of(st.sampled_from(keys), st.text(max_size=8))
    return st.recursive(
        SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(key, inner, max_size=5)
        ),
        max_leaves=12,
    )


# One folder for every generated input, removed when the test process exits (a
# TemporaryDirectory's finaliser): ~1,000 examples per run must not pile up in /tmp.
_ROOT = tempfile.TemporaryDirectory(prefix="edgekd-prop-")


def write(text: str | bytes, suffix: str) -> Path:
    folder = Path(tempfile.mkdtemp(dir=_ROOT.name))
    path = folder / f"input{suffix}"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def loads_or_says_why(fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except EdgeKDError as e:
        assert "\n" not in str(e) and e.exit_code == 2, str(e)


def dumped(data: Any) -> str:
    return yaml.safe_dump(data, allow_unicode=True)


BUDGET_KEYS = [*LIMITS, "model", "threads", "device", "devices", "local-cpu", "pi"]
RECIPE_KEYS = ["name", "data", "spec", "teacher", "path", "distill", "variants", "export",
               "profile", "budget", "runs", "trials", "devices", "int8", "epochs"]  # fmt: skip
SPEC_KEYS = ["name", "runner", "host", "threads", "cpu_affinity", "preset", "budget",
             "known_hosts", "port", "python", "max_p90_ms", "serial"]  # fmt: skip
DISTILL_KEYS = [*DistillConfig.model_fields, "student_options", "hidden_size", "methods",
                "name", "options", "k", "p"]  # fmt: skip


@pytest.mark.slow
@SETTINGS
@given(st.one_of(plain(BUDGET_KEYS).map(dumped), st.text(max_size=200)))
def test_budget_parser_never_crashes(text):
    loads_or_says_why(load_budget, write(text, ".yaml"))


@SETTINGS
@given(st.one_of(plain(RECIPE_KEYS).map(dumped), st.text(max_size=200)))
def test_recipe_parser_never_crashes(text):
    from edgekd.recipe import load_recipe

    loads_or_says_why(load_recipe, write(text, ".yaml"))


@SETTINGS
@given(st.one_of(plain(SPEC_KEYS).map(dumped), st.text(max_size=200)))
def test_device_spec_parser_never_crashes(text):
    from edgekd.devices.base import load_spec

    loads_or_says_why(load_spec, str(write(text, ".yaml")))


@SETTINGS
@given(st.one_of(plain(DISTILL_KEYS).map(dumped), st.text(max_size=200), st.binary(max_size=64)))
def test_distill_config_parser_never_crashes(text):
    def parse(path: Path) -> None:
        validate(DistillConfig, load_yaml(path), str(path))

    loads_or_says_why(parse, write(text, ".yaml"))


LABELS = st.one_of(SCALARS, st.sampled_from(["0", "1", "1.0", " 1 ", "pos", "neg", "nan"]))
TEXTS = st.one_of(st.text(max_size=20), st.none(), st.integers())


@SETTINGS
@given(
    st.sampled_from([".tsv", ".csv"]),
    st.lists(st.lists(st.one_of(st.text(max_size=10), LABELS.map(str)), max_size=4), max_size=12),
    st.booleans(),
)
def test_delimited_loader_never_crashes(suffix, rows, header):
    sep = "\t" if suffix == ".tsv" else ","
    head = [f"sentence{sep}label"] if header else []
    text = "\n".join(head + [sep.join(r) for r in rows])
    loads_or_says_why(load_task, DataConfig(spec=str(write(text, suffix))))


@SETTINGS
@given(
    st.lists(
        st.one_of(
            st.fixed_dictionaries({"text": TEXTS, "label": LABELS}),
            plain(["text", "label", "sentence"]),
        ),
        max_size=12,
    ),
    st.booleans(),
)
def test_json_loader_never_crashes(records, as_array):
    import json

    text = json.dumps(records) if as_array else "\n".join(json.dumps(r) for r in records)
    loads_or_says_why(load_task, DataConfig(spec=str(write(text, ".jsonl"))))


@SETTINGS
@given(st.binary(max_size=200), st.sampled_from([".tsv", ".csv", ".jsonl", ".json"]))
def test_loaders_never_crash_on_bytes(data, suffix):
    loads_or_says_why(load_task, DataConfig(spec=str(write(data, suffix))))
