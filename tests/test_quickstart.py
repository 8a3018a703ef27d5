"""`edgekd quickstart` without a teacher: fine-tunes one, then runs the whole chain."""

import json

import pytest
from typer.testing import CliRunner

from conftest import build_tiny_bert
from edgekd.artifacts import ReportPoints
from edgekd.cli import app


@pytest.mark.slow
def test_quickstart_runs_every_stage_and_exits_with_the_budget_verdict(tmp_path, tiny_data):
    base = build_tiny_bert(tmp_path / "base", classifier=False)
    out = tmp_path / "qs"
    args = [
        "quickstart",
        "--data",
        str(tiny_data),
        "--base",
        str(base),
        "--out",
        str(out),
        "--max-train",
        "120",
        "--teacher-max-train",
        "120",
        "--epochs",
        "1",
    ]
    r = CliRunner().invoke(app, args, catch_exceptions=False)
    summary = json.loads((out / "quickstart.json").read_text())
    # int8 appears unless the guard found it slower than fp32 on this CPU.
    shipped = json.loads((out / "student" / "export" / "export.json").read_text())["models"]
    assert [row["model"] for row in summary["rows"]] == [
        "teacher fp32",
        "student fp32",
        *(["student int8"] if "int8" in shipped else []),
    ]
    assert all(row["bytes"] > 0 and row["p50_ms"] > 0 for row in summary["rows"])
    # The gate judges the model that ships: int8 if the guard kept it, else fp32.
    assert summary["check"]["model"] == ("int8" if "int8" in shipped else "fp32")
    assert r.exit_code == (0 if summary["check"]["passed"] else 1)
    assert "edgekd quickstart:" in r.output
    # The yardstick the distill stage fitted, beside the shipped student.
    assert 0 <= summary["tfidf_accuracy"] <= 1 and "TF-IDF + LR on the same rows" in r.output
    finished = [x.split(":")[0] for x in r.output.splitlines() if ": done in " in x]
    assert finished == [
        "teacher", "distill student", "export student", "teacher onnx", "profile teacher",
        "profile student", "check student", "report",
    ], r.output  # fmt: skip
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["recipe"].endswith("recipes/quickstart.yaml")
    assert manifest["overrides"]["distill.epochs"] == 1
    points = ReportPoints.read(out / "report").points
    assert {p.label for p in points} >= {"teacher fp32", "student fp32"}

    # A rerun is the recipe's: every stage cached, the same table.
    r = CliRunner().invoke(app, args, catch_exceptions=False)
    assert ": done in " not in r.output and "unchanged, cached" in r.output
    assert json.loads((out / "quickstart.json").read_text())["rows"] == summary["rows"]
