import json

import pytest

from edgekd.budget import Budget, collect_metrics, evaluate, load_budget
from edgekd.errors import EdgeKDError


def test_evaluate_passes_fails_and_flags_missing_metrics():
    b = Budget(
        max_bytes=1000,
        max_p90_ms=2.0,
        min_accuracy=0.8,
        max_drop_vs_teacher=0.02,
        max_int8_drop=0.005,
    )
    results = evaluate(b, {"bytes": 1000, "p90_ms": 2.5, "accuracy": 0.85, "drop_vs_teacher": 0.03})
    status = {r.limit: r.status for r in results}
    assert status == {
        "max_bytes": "pass",
        "max_p90_ms": "FAIL",
        "min_accuracy": "pass",
        "max_drop_vs_teacher": "FAIL",
        "max_int8_drop": "missing",
    }
    assert [r.passed for r in results] == [True, False, True, False, False]


def test_evaluate_checks_only_limits_that_are_set():
    assert [r.limit for r in evaluate(Budget(min_accuracy=0.5), {"accuracy": 0.4})] == [
        "min_accuracy"
    ]


@pytest.mark.parametrize(
    "text,match",
    [
        ("max_bytes: [1, 2\n", "not valid YAML"),
        ("- 1\n- 2\n", "YAML mapping"),
        ("max_bites: 10\n", "field 'max_bites'"),
        ("model: int8\n", "sets no limit"),
        ("max_p90_ms: -1\n", "field 'max_p90_ms'"),
    ],
)
def test_load_budget_rejects_malformed_files_with_exit_2(tmp_path, text, match):
    path = tmp_path / "b.yaml"
    path.write_text(text)
    with pytest.raises(EdgeKDError, match=match) as e:
        load_budget(path)
    assert e.value.exit_code == 2


def test_collect_metrics_reads_export_and_matching_profile(tmp_path):
    (tmp_path / "export.json").write_text(
        json.dumps(
            {
                "teacher_accuracy": 0.9,
                "int8_drop": 0.004,
                "models": {
                    "fp32": {"path": "model.onnx", "bytes": 400, "accuracy": 0.884},
                    "int8": {"path": "model.int8.onnx", "bytes": 100, "accuracy": 0.88},
                },
            }
        )
    )
    for name, threads, p90 in (
        ("model.int8.onnx", 1, 1.5),
        ("model.int8.onnx", 2, 0.9),
        ("model.onnx", 1, 3.0),
    ):
        (tmp_path / f"profile-{name}-{threads}.json").write_text(
            json.dumps({"model": f"/x/{name}", "threads": threads, "p90_ms": p90})
        )
    m = collect_metrics([tmp_path], Budget(max_p90_ms=1))
    assert m == pytest.approx(
        {"bytes": 100, "accuracy": 0.88, "drop_vs_teacher": 0.02, "int8_drop": 0.004, "p90_ms": 1.5}
    )
    assert (
        collect_metrics([tmp_path], Budget(model="fp32", threads=1, max_p90_ms=1))["p90_ms"] == 3.0
    )
