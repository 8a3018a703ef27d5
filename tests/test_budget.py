import json
import tempfile
from pathlib import Path

import pytest

from edgekd.artifacts import CheckResult
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
                "tfidf_accuracy": 0.85,
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
        ("model.int8.onnx", 0, 0.7),  # `profile --threads 0`: all cores
        ("model.onnx", 1, 3.0),
    ):
        (tmp_path / f"profile-{name}-{threads}.json").write_text(
            json.dumps({"model": f"/x/{name}", "threads": threads, "p90_ms": p90})
        )
    m = collect_metrics([tmp_path], Budget(max_p90_ms=1))
    assert m == pytest.approx(
        {"bytes": 100, "accuracy": 0.88, "drop_vs_teacher": 0.02, "int8_drop": 0.004,
         "p90_ms": 1.5, "margin_over_tfidf": 0.03}
    )  # fmt: skip
    assert (
        collect_metrics([tmp_path], Budget(model="fp32", threads=1, max_p90_ms=1))["p90_ms"] == 3.0
    )
    # A budget for all cores reads the all-cores profile, not the spec's count's.
    assert collect_metrics([tmp_path], Budget(threads=0, max_p90_ms=1))["p90_ms"] == 0.7


def test_evaluate_covers_memory_init_time_and_agreement_limits():
    b = Budget(max_peak_rss_mb=100, max_init_ms=20, min_agreement=0.99)
    results = evaluate(b, {"peak_rss_mb": 120.0, "load_ms": 8.0, "agreement": 0.995})
    assert {r.limit: r.status for r in results} == {
        "max_peak_rss_mb": "FAIL",
        "max_init_ms": "pass",
        "min_agreement": "pass",
    }


def test_budget_per_device_overrides_shared_limits(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text(
        "max_bytes: 2000000\nmax_p90_ms: 5\n"
        "devices:\n  raspberry-pi-4: {max_p90_ms: 20, threads: 4}\n  local-cpu: {}\n"
    )
    budget = load_budget(path)
    pi = budget.for_device("raspberry-pi-4")
    assert (pi.max_p90_ms, pi.threads, pi.max_bytes, pi.device) == (
        20,
        4,
        2000000,
        "raspberry-pi-4",
    )
    assert budget.for_device("local-cpu").max_p90_ms == 5
    with pytest.raises(EdgeKDError, match=r"no device 'phone'.*raspberry-pi-4, local-cpu") as e:
        budget.for_device("phone")
    assert e.value.exit_code == 2
    path.write_text("max_bytes: 1\ndevices:\n  pi: {max_p90: 3}\n")
    with pytest.raises(EdgeKDError, match="field 'max_p90'") as e:
        load_budget(path)
    assert e.value.exit_code == 2


def test_collect_metrics_takes_latency_and_memory_from_the_device_profile(tmp_path):
    (tmp_path / "export.json").write_text(
        json.dumps({"models": {"int8": {"path": "m.onnx", "bytes": 1, "accuracy": 0.9}}})
    )
    for device, p90 in (("local-cpu", 1.0), ("raspberry-pi-4", 7.0)):
        (tmp_path / f"profile-{device}.json").write_text(
            json.dumps(
                {"model": "m.onnx", "threads": 1, "device": device, "p90_ms": p90,
                 "peak_rss_mb": 80.0, "load_ms": 9.0}
            )
        )  # fmt: skip
    pi = collect_metrics([tmp_path], Budget(max_p90_ms=1, device="raspberry-pi-4"))
    assert (pi["p90_ms"], pi["peak_rss_mb"], pi["load_ms"]) == (7.0, 80.0, 9.0)
    assert collect_metrics([tmp_path], Budget(max_p90_ms=1, device="local-cpu"))["p90_ms"] == 1.0


def test_junit_xml_has_one_case_per_limit_and_counts_failures():
    import xml.etree.ElementTree as ET

    from edgekd.stages.check import junit_xml

    results = evaluate(
        Budget(max_bytes=10, min_accuracy=0.9, max_p90_ms=1), {"bytes": 5, "accuracy": 0.8}
    )
    result = CheckResult(model="int8", passed=False, limits=results)
    suite = ET.fromstring(junit_xml(result))
    assert suite.get("tests") == "3" and suite.get("failures") == "2"
    cases = {c.get("name"): c.find("failure") for c in suite.iter("testcase")}
    assert cases["max_bytes"] is None
    assert "accuracy 0.8" in cases["min_accuracy"].get("message")
    assert "not measured" in cases["max_p90_ms"].get("message")


def test_bench_entries_are_smaller_is_better():
    from edgekd.stages.check import bench_entries

    results = evaluate(Budget(max_bytes=10, min_accuracy=0.5), {"bytes": 5, "accuracy": 0.875})
    assert bench_entries(results, "int8") == [
        {"name": "int8 bytes", "unit": "B", "value": 5.0},
        {"name": "int8 1 - accuracy", "unit": "ratio", "value": 0.125},
    ]


def test_budget_for_device_falls_back_to_the_device_specs_defaults():
    budget = Budget(max_bytes=100, devices={"pi": {"max_p90_ms": 20}})
    phone = budget.for_device("android-arm64", defaults={"max_p90_ms": 15, "threads": 2})
    assert (phone.max_p90_ms, phone.threads, phone.max_bytes) == (15, 2, 100)
    assert budget.for_device("pi", defaults={"max_p90_ms": 99}).max_p90_ms == 20  # file wins


@pytest.mark.parametrize(
    ("field", "threshold", "good", "bad"),
    [
        ("max_bytes", 1000, 1000, 1001),
        ("max_p90_ms", 2.0, 2.0, 2.01),
        ("max_peak_rss_mb", 150, 149.9, 150.1),
        ("max_init_ms", 50, 49, 51),
        ("min_accuracy", 0.85, 0.85, 0.849),
        ("min_mcc", 0.2, 0.2, 0.199),
        ("min_mcc", -0.1, -0.1, -0.101),  # MCC runs from -1
        ("min_macro_f1", 0.8, 0.8, 0.799),
        ("max_drop_vs_teacher", 0.02, 0.02, 0.021),
        ("max_int8_drop", 0.005, 0.0, 0.006),
        ("min_agreement", 0.99, 1.0, 0.98),
        ("min_margin_over_baseline", 0.01, 0.01, 0.009),
        ("min_margin_over_baseline", -0.02, -0.02, -0.021),  # "at most 2 points under"
    ],
)
def test_every_limit_kind_passes_at_its_threshold_fails_past_it_and_fails_unmeasured(
    field, threshold, good, bad
):
    from edgekd.budget import LIMITS

    metric = LIMITS[field][0]
    budget = Budget(**{field: threshold})
    assert [r.status for r in evaluate(budget, {metric: good})] == ["pass"]
    assert [r.status for r in evaluate(budget, {metric: bad})] == ["FAIL"]
    assert [r.status for r in evaluate(budget, {})] == ["missing"]
    assert set(LIMITS) == {
        "max_bytes", "max_p90_ms", "max_peak_rss_mb", "max_init_ms", "min_accuracy",
        "min_mcc", "min_macro_f1", "max_drop_vs_teacher", "max_int8_drop", "min_agreement",
        "min_margin_over_baseline",
    }  # fmt: skip


def test_collect_metrics_refuses_to_mix_devices_without_a_device(tmp_path):
    (tmp_path / "export.json").write_text(
        json.dumps({"models": {"int8": {"path": "m.onnx", "bytes": 1, "accuracy": 0.9}}})
    )
    for device in ("local-cpu", "raspberry-pi-4"):
        (tmp_path / f"profile-{device}.json").write_text(
            json.dumps({"model": "m.onnx", "threads": 1, "device": device, "p90_ms": 1.0})
        )
    with pytest.raises(EdgeKDError, match=r"several devices \(local-cpu, raspberry-pi-4\)"):
        collect_metrics([tmp_path], Budget(max_p90_ms=1))


def test_an_int8_budget_fails_when_the_export_guard_refused_int8(tmp_path):
    # Refused by the guard: the shipped int8 model does not exist, so the gate fails
    # (exit 1), where an export made without --int8 is a usage error (exit 2).
    (tmp_path / "export.json").write_text(
        json.dumps({"models": {"fp32": {"path": "model.onnx", "bytes": 10, "accuracy": 0.9}},
                    "int8_refused": True})
    )  # fmt: skip
    b = Budget(max_bytes=100)
    results = evaluate(b, collect_metrics([tmp_path], b))
    assert [r.status for r in results] == ["missing"] and not results[0].passed
    (tmp_path / "export.json").write_text(
        json.dumps({"models": {"fp32": {"path": "model.onnx", "bytes": 10, "accuracy": 0.9}}})
    )
    with pytest.raises(EdgeKDError, match="re-export with --int8") as e:
        collect_metrics([tmp_path], b)
    assert e.value.exit_code == 2


def test_a_shipped_budget_gates_the_model_the_export_ships(tmp_path):
    from edgekd.stages.check import check

    fp32 = {"path": "model.onnx", "bytes": 10, "accuracy": 0.9}
    int8 = {"path": "model.int8.onnx", "bytes": 4, "accuracy": 0.8}
    b = Budget(model="shipped", max_bytes=5, max_int8_drop=0.05)
    # int8 kept: the int8 model is judged, its 0.1 accuracy drop included.
    (tmp_path / "export.json").write_text(
        json.dumps({"models": {"fp32": fp32, "int8": int8}, "int8_drop": 0.1})
    )
    result = check(b, [tmp_path])
    assert result.model == "int8"
    assert [(r.limit, r.measured, r.passed) for r in result.limits] == [
        ("max_bytes", 4.0, True),
        ("max_int8_drop", 0.1, False),
    ]
    # int8 refused by the guard: fp32 ships and is judged; it was never quantised.
    (tmp_path / "export.json").write_text(
        json.dumps({"models": {"fp32": fp32}, "int8_refused": True})
    )
    result = check(b, [tmp_path])
    assert result.model == "fp32"
    assert [(r.limit, r.measured, r.passed) for r in result.limits] == [("max_bytes", 10.0, False)]
    empty = tmp_path / "profiles-only"
    empty.mkdir()
    with pytest.raises(EdgeKDError, match="`model: shipped` needs one export folder"):
        check(b, [empty])


def test_load_budget_applies_dotted_sets_over_the_file(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text("max_bytes: 100\ndevices: {pi: {max_p90_ms: 9}}\n")
    b = load_budget(path, {"max_bytes": 5, "devices.pi.max_p90_ms": 3})
    assert b.max_bytes == 5 and b.for_device("pi").max_p90_ms == 3


def test_collect_metrics_reads_mcc_and_macro_f1_and_fails_an_export_without_them(tmp_path):
    entry = {"path": "model.int8.onnx", "bytes": 100, "accuracy": 0.8}
    (tmp_path / "export.json").write_text(json.dumps({"models": {"int8": entry}}))
    budget = Budget(min_mcc=0.1, min_macro_f1=0.5)
    # An export from before these metrics: both limits missing, so the gate fails.
    statuses = [r.status for r in evaluate(budget, collect_metrics([tmp_path], budget))]
    assert statuses == ["missing", "missing"]
    entry |= {"mcc": 0.25, "macro_f1": 0.62}
    (tmp_path / "export.json").write_text(json.dumps({"models": {"int8": entry}}))
    m = collect_metrics([tmp_path], budget)
    assert (m["mcc"], m["macro_f1"]) == (0.25, 0.62)
    assert [r.status for r in evaluate(budget, m)] == ["pass", "pass"]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("max_bytes: 2e6\n", 2_000_000),
        ("max_bytes: 1.5e6\n", 1_500_000),
        ("max_bytes: 2000000.0\n", 2_000_000),
        ("max_bytes: 2.5\n", "Input should be a valid integer"),
        ("max_bytes: 0.0\n", "greater than or equal to 1"),
    ],
)
def test_load_budget_reads_max_bytes_in_e_notation_as_a_whole_number(tmp_path, text, want):
    path = tmp_path / "b.yaml"
    path.write_text(text + "devices: {pi: {" + text.strip() + "}}\n")
    if isinstance(want, str):
        with pytest.raises(EdgeKDError, match=want):
            load_budget(path)
        return
    b = load_budget(path)
    assert b.max_bytes == want and type(b.max_bytes) is int
    assert b.for_device("pi").max_bytes == want


def test_check_gates_on_set_fields_alone_when_given_no_budget_file(tmp_path):
    from edgekd.stages.check import check

    int8 = {"path": "model.int8.onnx", "bytes": 1_500_000, "accuracy": 0.8}
    (tmp_path / "export.json").write_text(json.dumps({"models": {"int8": int8}}))
    result = check(None, [tmp_path], sets={"max_bytes": 2e6})  # `-s max_bytes=2e6`
    assert [(r.limit, r.threshold, r.passed) for r in result.limits] == [("max_bytes", 2e6, True)]
    assert not check(None, [tmp_path], sets={"max_bytes": 1e6}).passed
    with pytest.raises(EdgeKDError, match=r"needs limits: --budget FILE, -s max_p90_ms=5"):
        check(None, [tmp_path])
    # A device alone: its spec's own limits, unmeasured here (no profile there): fails.
    result = check(None, [tmp_path], device="raspberry-pi-4")
    assert {r.limit for r in result.limits} >= {"max_p90_ms"} and not result.passed
    assert all(r.status == "missing" for r in result.limits)


def test_a_set_field_wins_over_the_device_specs_own_limit():
    from edgekd.stages.check import check

    # raspberry-pi-4's spec sets max_p90_ms 20; `-s max_p90_ms=5 --device` gates at 5.
    with tempfile.TemporaryDirectory() as folder:
        result = check(None, [Path(folder)], device="raspberry-pi-4", sets={"max_p90_ms": 5})
    assert {r.limit: r.threshold for r in result.limits}["max_p90_ms"] == 5


@pytest.mark.parametrize(("limit", "code"), [("2e6", 0), ("1e6", 1), ("2.5", 2)])
def test_check_cli_gates_on_a_set_limit_in_e_notation(tmp_path, limit, code):
    from typer.testing import CliRunner

    from edgekd.cli import app

    int8 = {"path": "model.int8.onnx", "bytes": 1_500_000, "accuracy": 0.8}
    (tmp_path / "export.json").write_text(json.dumps({"models": {"int8": int8}}))
    r = CliRunner().invoke(app, ["check", str(tmp_path), "-s", f"max_bytes={limit}"])
    assert r.exit_code == code, r.output
