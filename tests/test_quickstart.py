"""`edgekd quickstart` without a teacher: fine-tunes one, then runs the whole chain."""

import json

from typer.testing import CliRunner

from conftest import build_tiny_bert
from edgekd.cli import app


def test_quickstart_runs_every_stage_and_exits_with_the_budget_verdict(tmp_path, tiny_data):
    base = build_tiny_bert(tmp_path / "base", classifier=False)
    out = tmp_path / "qs"
    r = CliRunner().invoke(
        app,
        [
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
        ],
        catch_exceptions=False,
    )
    summary = json.loads((out / "quickstart.json").read_text())
    # int8 appears when the guard found it faster than fp32 on this CPU.
    shipped = json.loads((out / "export" / "export.json").read_text())["models"]
    assert [row["model"] for row in summary["rows"]] == [
        "teacher fp32",
        "student fp32",
        *(["student int8"] if "int8" in shipped else []),
    ]
    assert all(row["bytes"] > 0 and row["p50_ms"] > 0 for row in summary["rows"])
    assert r.exit_code == (0 if summary["check"]["passed"] else 1)
    for stage in ("teacher", "student", "export", "teacher-onnx", "budget.yaml", "check.json"):
        assert (out / stage).exists(), stage
    assert "edgekd quickstart:" in r.output
    finished = [x.split(":")[0] for x in r.output.splitlines() if ": done in " in x]
    assert finished == ["teacher", "distill", "export", "profile", "check"], r.output
    points = json.loads((out / "report" / "points.json").read_text())
    assert {p["label"] for p in points} >= {"teacher fp32", "student fp32"}
