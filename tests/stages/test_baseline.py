"""`edgekd check --baseline`: regressions against a previous run, per metric."""

import json
import math
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekd.artifacts import CheckResult, DevPredictions, ExportReport
from edgekd.budget import Budget
from edgekd.cli import app
from edgekd.errors import EdgeKDError
from edgekd.stages.baseline import beta_cdf, paired_drop_ci
from edgekd.stages.check import bencher_metrics, check

N = 200  # dev rows of the fake exports
LABELS = [i % 2 for i in range(N)]


def timed_model(path: Path, layers: int, padding: int = 0) -> Path:
    """input_ids → embedding → `layers` × (64×64 MatMul, Tanh) → mean → 2 logits.

    Its time grows with `layers` (the embedding lookup and session overhead do not), so
    16 layers is well over twice 4. `padding` floats of an unused initializer make the
    file bigger without changing the time."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((1000, 64)).astype("f4"), "emb")]
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["h0"])]
    for i in range(layers):
        w = rng.standard_normal((64, 64)).astype("f4") / 8
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [f"h{i}", f"w{i}"], [f"m{i}"]))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"h{i + 1}"]))
    inits.append(numpy_helper.from_array(rng.standard_normal((64, 2)).astype("f4"), "out"))
    if padding:
        inits.append(numpy_helper.from_array(np.zeros(padding, dtype="f4"), "padding"))
    nodes.append(helper.make_node("ReduceMean", [f"h{layers}"], ["pooled"], axes=[1], keepdims=0))
    nodes.append(helper.make_node("MatMul", ["pooled", "out"], ["logits"]))
    x = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2])
    graph = helper.make_graph(nodes, "timed", [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, str(path))
    return path


def fake_export(
    folder: Path,
    layers: int = 4,
    wrong: range = range(0),
    padding: int = 0,
    rows: str = "dev-rows",
    predictions: bool = True,
) -> Path:
    """An export folder as `edgekd export` leaves it: one fp32 model, its report, and
    its dev predictions: every row right but those in `wrong`."""
    folder.mkdir(parents=True)
    model = timed_model(folder / "model.onnx", layers, padding)
    preds = [1 - y if i in wrong else y for i, y in enumerate(LABELS)]
    accuracy = sum(p == y for p, y in zip(preds, LABELS, strict=True)) / N
    ExportReport.model_validate(
        {
            "models": {
                "fp32": {
                    "path": model.name,
                    "bytes": model.stat().st_size,
                    "accuracy": accuracy,
                    "agreement": 1.0,
                }
            }
        }
    ).write(folder)
    if predictions:
        DevPredictions(
            rows_sha256=rows, labels=LABELS, reference=preds, models={"fp32": preds}
        ).write(folder)
    return folder


def run_check(*args: str) -> tuple[int, str]:
    # 3 processes × 6 trials of 20 runs: the defaults' interval in a fraction of the time.
    timing = ["--runs", "120", "--trials", "6", "--processes", "3", "--seq-len", "32"]
    r = CliRunner().invoke(app, ["check", *args, *timing])
    return r.exit_code, r.output


# ------------------------------------------------------------------ the paired interval


def test_beta_cdf_matches_closed_forms():
    # I_x(1, 1) = x; I_x(a, 1) = x^a; I_x(1, b) = 1 − (1 − x)^b.
    assert beta_cdf(0.3, 1, 1) == pytest.approx(0.3)
    assert beta_cdf(0.8, 5, 1) == pytest.approx(0.8**5)
    assert beta_cdf(0.1, 1, 4) == pytest.approx(1 - 0.9**4)


def test_paired_drop_ci_is_zero_when_no_row_changed():
    assert paired_drop_ci(0, 0, 872) == (0.0, 0.0)


def test_paired_drop_ci_matches_clopper_pearson_by_hand():
    # 5 rows worse, none better, 872 rows: p = 5/5, its lower 97.5% bound is
    # 0.025^(1/5) = 0.47818, so the drop's interval is 5/872 · (2p − 1) for p in
    # [0.47818, 1] = [−0.000250, 0.005734]. McNemar's exact test (p = 0.0625) agrees:
    # not a significant drop.
    lo, hi = paired_drop_ci(5, 0, 872)
    assert lo == pytest.approx(5 / 872 * (2 * 0.025 ** (1 / 5) - 1), abs=1e-9)
    assert lo == pytest.approx(-0.000250, abs=1e-6) and hi == pytest.approx(5 / 872)
    assert paired_drop_ci(0, 5, 872) == pytest.approx((-hi, -lo))  # mirrored


def test_paired_drop_ci_excludes_zero_when_many_more_rows_got_worse():
    lo, hi = paired_drop_ci(30, 5, 872)
    assert 0 < lo < 25 / 872 < hi


# ------------------------------------------------------------------ budget margins


@pytest.mark.parametrize(("given", "fraction"), [("5%", 0.05), (0.05, 0.05), ("0.5%", 0.005)])
def test_margin_reads_percent_or_fraction(given, fraction):
    assert Budget(max_latency_regression=given).max_latency_regression == fraction


@pytest.mark.parametrize("given", [5, "five%", "-1%", True])
def test_margin_refuses_ambiguous_or_negative_values(given):
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        Budget(max_latency_regression=given)


# ------------------------------------------------------------------ the gate


def scripted_ratio(monkeypatch: pytest.MonkeyPatch, ratio: float) -> None:
    """Time both models for real (the side-by-side path runs), then report `ratio` as
    what was measured: the verdict under test must not hang on how busy this machine
    is while the suite runs (a neighbour can skew one model's trials, not the logic)."""
    from edgekd.devices import profile

    real = profile.profile_model

    def measured(*args, **kwargs):
        result = real(*args, **kwargs)
        vs = result["vs"]
        for key in ("", "p90_"):
            metric = f"{key or 'p50_'}ms"
            vs["b"][metric] = result[metric] * ratio
            vs[f"{key}ratio_b_over_a"] = ratio
            vs[f"{key}ratio_ci95"] = [ratio * 0.98, ratio * 1.02]  # ±2%: a tight interval
        return result

    monkeypatch.setattr(profile, "profile_model", measured)


def test_check_baseline_passes_identical_models(tmp_path, monkeypatch):
    scripted_ratio(monkeypatch, 1.0)
    base = fake_export(tmp_path / "base")
    now = tmp_path / "now"
    shutil.copytree(base, now)
    code, out = run_check(str(now), "--baseline", str(base), "--json", str(tmp_path / "c.json"))
    assert code == 0, out
    result = CheckResult.read(tmp_path / "c.json")
    assert [r.metric for r in result.regressions] == [
        "bytes",
        "accuracy",
        "agreement",
        "p50_ms",
        "p90_ms",
    ]
    assert all(r.status == "pass" for r in result.regressions)
    acc = result.regressions[1]
    assert (acc.worse, acc.ci95) == (0.0, (0.0, 0.0))


def test_check_baseline_fails_a_slower_model_naming_latency(tmp_path, monkeypatch):
    scripted_ratio(monkeypatch, 3.0)  # 16 layers against 4 measured ~3× on a quiet machine
    base = fake_export(tmp_path / "base", layers=4)
    now = fake_export(tmp_path / "now", layers=16)
    code, out = run_check(str(now), "--baseline", str(base), "--markdown", str(tmp_path / "pr.md"))
    assert code == 1, out
    rows = markdown_rows(tmp_path / "pr.md")
    assert rows["p50_ms"]["verdict"] == "❌ regression"
    assert rows["bytes"]["verdict"] == "❌ regression"  # 12 more 64×64 matrices
    assert rows["accuracy"]["verdict"] == "✅ pass"


def test_check_baseline_fails_a_bigger_model_naming_bytes(tmp_path):
    base = fake_export(tmp_path / "base")
    now = fake_export(tmp_path / "now", padding=20_000)  # +80 kB of unused floats
    junit = tmp_path / "j.xml"
    code, out = run_check(str(now), "--baseline", str(base), "--junit", str(junit))
    assert code == 1 and "bytes" in out
    failed = {
        c.get("name")
        for c in ET.parse(junit).getroot().iter("testcase")
        if c.find("failure") is not None
    }
    assert failed == {"max_bytes_regression (bytes)"}


def test_check_baseline_fails_an_accuracy_drop_judged_per_row(tmp_path):
    base = fake_export(tmp_path / "base")
    now = fake_export(tmp_path / "now", wrong=range(20))  # 20 of 200 rows newly wrong
    result = check(None, [now], baseline=base, timing=fast_timing())
    acc = {r.metric: r for r in result.regressions}["accuracy"]
    assert acc.status == "FAIL" and acc.worse == pytest.approx(0.1)
    assert acc.how == "per row, 200 rows: 20 now wrong, 0 now right"


def test_check_baseline_passes_a_drop_the_rows_cannot_tell_from_chance(tmp_path):
    base = fake_export(tmp_path / "base", wrong=range(0, 2))
    now = fake_export(tmp_path / "now", wrong=range(2, 7))  # 5 newly wrong, 2 newly right
    result = check(None, [now], baseline=base, timing=fast_timing())
    acc = {r.metric: r for r in result.regressions}["accuracy"]
    # Two runs' accuracies differ by 1.5 pt, but 5 against 2 discordant rows is chance.
    assert acc.worse == pytest.approx(3 / 200) and acc.status == "pass"


def test_check_baseline_accuracy_margin_is_the_budgets(tmp_path):
    base = fake_export(tmp_path / "base")
    now = fake_export(tmp_path / "now", wrong=range(20))
    budget = Budget(model="shipped", max_accuracy_drop="20%")
    acc = check(budget, [now], baseline=base, timing=fast_timing()).regressions[1]
    assert acc.margin == 0.2 and acc.status == "pass"


@pytest.mark.parametrize(
    ("baseline_kwargs", "note"),
    [
        ({"rows": "other-rows"}, "different dev rows"),
        ({"predictions": False}, "the baseline records no per-row dev predictions"),
    ],
)
def test_check_baseline_fails_closed_when_rows_cannot_be_paired(tmp_path, baseline_kwargs, note):
    base = fake_export(tmp_path / "base", **baseline_kwargs)
    now = fake_export(tmp_path / "now")
    result = check(None, [now], baseline=base, timing=fast_timing())
    acc = {r.metric: r for r in result.regressions}["accuracy"]
    assert acc.status == "missing" and note in acc.note
    assert not result.passed


def test_check_margin_without_baseline_fails_as_not_measured(tmp_path):
    now = fake_export(tmp_path / "now")
    result = check(Budget(max_latency_regression="5%"), [now])
    assert not result.passed
    assert [(r.limit, r.status) for r in result.limits] == [("max_latency_regression", "missing")]


def test_check_baseline_refuses_a_path_that_is_no_run(tmp_path):
    now = fake_export(tmp_path / "now")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EdgeKDError, match="no export folder, bundle or profile"):
        check(None, [now], baseline=tmp_path / "empty", timing=fast_timing())


def test_bmf_holds_the_measures_bencher_reads(tmp_path):
    base = fake_export(tmp_path / "base")
    now = fake_export(tmp_path / "now", wrong=range(20))
    result = check(None, [now], baseline=base, timing=fast_timing())
    bmf = json.loads(json.dumps(bencher_metrics(result)))  # plain JSON, as written
    (name,) = bmf
    assert name == "edgekd/local/fp32"
    measures = bmf[name]
    assert set(measures) == {"file-size", "accuracy", "agreement", "latency", "latency-p90"}
    assert measures["file-size"] == {"value": (now / "model.onnx").stat().st_size}
    acc = measures["accuracy"]
    assert acc["value"] == pytest.approx(0.9) and acc["lower_value"] <= 0.9 <= acc["upper_value"]
    lat = measures["latency"]  # nanoseconds
    assert lat["lower_value"] <= lat["value"] <= lat["upper_value"]
    assert 1e3 < lat["value"] < 1e8  # between 1 µs and 100 ms


def test_check_baseline_reads_a_bundle_zip_and_pairs_its_rows(tmp_path, bundled):
    export_dir, archive = bundled
    result = check(None, [export_dir], baseline=archive, timing=fast_timing())
    assert result.passed, result.regressions
    acc = {r.metric: r for r in result.regressions}["accuracy"]
    assert acc.worse == 0.0 and acc.how.startswith("per row, 40 rows")


@pytest.fixture
def bundled(tiny_chain):
    """A tiny BiLSTM exported (int8) and bundled (.zip): the real writers of predictions."""
    return tiny_chain / "export", tiny_chain / "bundle.zip"


def test_export_writes_predictions_the_report_agrees_with(bundled):
    export_dir, _ = bundled
    report = ExportReport.read(export_dir)
    preds = DevPredictions.read(export_dir)
    for kind, entry in report.models.items():
        right = sum(p == y for p, y in zip(preds.models[kind], preds.labels, strict=True))
        assert math.isclose(right / len(preds.labels), entry.accuracy)


# ------------------------------------------------------------------ helpers


def fast_timing():
    from edgekd.config import ProfileConfig

    return ProfileConfig(runs=60, trials=6, processes=2, seq_lens=[16])


def markdown_rows(path: Path) -> dict[str, dict[str, str]]:
    """The baseline table of a --markdown file, by metric."""
    lines = [line for line in path.read_text().splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True))
            for line in lines[2:]]  # fmt: skip
    return {r["metric"]: r for r in rows if "metric" in r}
