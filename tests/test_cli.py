"""The CLI as a user drives it: one chain teacher → distill → export → profile → check."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from edgekd.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_help_imports_no_heavy_framework():
    code = (
        "import sys; from edgekd.cli import app; from typer.testing import CliRunner; "
        "CliRunner().invoke(app, ['--help']); "
        "print([m for m in ('torch', 'transformers', 'onnxruntime') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_cli_chain_teacher_distill_export_profile_check(tmp_path: Path, tiny_data: Path):
    from conftest import build_tiny_bert

    base = build_tiny_bert(tmp_path / "base", classifier=False)
    r = invoke(
        "teacher",
        "--base",
        base,
        "--data",
        tiny_data,
        "--out",
        tmp_path / "teacher",
        "--epochs",
        2,
        "--batch-size",
        16,
        "--max-length",
        16,
    )
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "teacher" / "metrics.json").read_text())["dev_accuracy"] >= 0

    r = invoke(
        "distill",
        "--teacher",
        tmp_path / "teacher",
        "--data",
        tiny_data,
        "--out",
        tmp_path / "student",
        "--epochs",
        2,
        "--batch-size",
        16,
        "-s",
        "embedding_dim=16",
        "-s",
        "hidden_size=8",
        "-s",
        "mlp_size=16",
        "--loss",
        "kd",
        "--ce-weight",
        0.5,
        "--augment",
        "tang",
        "--n-iter",
        2,
    )
    assert r.exit_code == 0, r.output
    resolved = yaml.safe_load((tmp_path / "student" / "config.yaml").read_text())
    assert resolved["loss"] == "kd" and resolved["student_options"]["hidden_size"] == 8
    assert resolved["augment"]["methods"] == ["tang"] and resolved["augment"]["n_iter"] == 2
    metrics = json.loads((tmp_path / "student" / "metrics.json").read_text())
    assert metrics["n_augmented"] > 0

    r = invoke(
        "export",
        tmp_path / "student",
        "--out",
        tmp_path / "export",
        "--int8",
        "dynamic",
        "--no-guard",
    )
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "export" / "export.json").read_text())
    assert set(report["models"]) == {"fp32", "int8"}
    assert report["models"]["fp32"]["agreement"] == 1.0  # fp32 ONNX = PyTorch on every row

    # eval scores all three kinds the same way; the fp32 ONNX must match its student.
    scores = {}
    for name, model in (
        ("teacher", tmp_path / "teacher"),
        ("student", tmp_path / "student"),
        ("onnx", tmp_path / "export" / "model.onnx"),
        ("int8", tmp_path / "export" / "model.int8.onnx"),
    ):
        out = tmp_path / f"eval-{name}.json"
        r = invoke("eval", model, "--data", tiny_data, "--json", out)
        assert r.exit_code == 0 and "on 40 dev rows" in r.output, r.output
        scores[name] = json.loads(out.read_text())["accuracy"]
    assert scores["onnx"] == scores["student"] == report["models"]["fp32"]["accuracy"]

    r = invoke(
        "profile",
        tmp_path / "export" / "model.int8.onnx",
        "--runs",
        10,
        "--warmup",
        2,
        "--data",
        tiny_data,
        "--json",
        tmp_path / "export" / "profile-int8.json",
    )
    assert r.exit_code == 0, r.output
    assert "tokenize+infer" in r.output

    ok = tmp_path / "ok.yaml"
    ok.write_text("max_bytes: 100000000\nmax_p90_ms: 10000\nmax_int8_drop: 1.0\n")
    r = invoke("check", "--budget", ok, tmp_path / "export", "--json", "-")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["passed"] is True

    tight = tmp_path / "tight.yaml"
    tight.write_text("max_bytes: 10\nmin_accuracy: 0.0\n")
    r = invoke("check", "--budget", tight, tmp_path / "export")
    assert r.exit_code == 1 and "FAIL" in r.output


@pytest.mark.parametrize(
    "args,code,message",
    [
        (["check", "--budget", "{tmp}/nope.yaml", "{tmp}"], 2, "does not exist"),
        (["distill", "--out", "{tmp}/s"], 1, "no teacher given"),
        (["distill", "--teacher", "x", "--out", "{tmp}/s", "-s", "oops"], 1, "not key=value"),
        (["profile", "{tmp}/missing.onnx"], 1, "does not exist"),
        (
            ["profile", "{tmp}/missing.onnx", "--device", "toaster"],
            1,
            "valid names: android-arm64, local-cpu",
        ),
    ],
)
def test_cli_bad_input_gives_one_line_error_and_exit_code(tmp_path, args, code, message):
    r = runner.invoke(app, [a.format(tmp=tmp_path) for a in args])
    assert r.exit_code == code
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert lines[-1].startswith("error:") and message in lines[-1]


def test_cli_bert_student_with_mixup_and_pkd_exports_and_teaches_a_bilstm(
    tmp_path: Path, tiny_data: Path, tiny_teacher: Path
):
    # teacher → 1-layer BERT (MixKD + PKD) → ONNX; then the BERT student is the
    # teacher of a BiLSTM: TAKD's teacher → assistant → student chain.
    common = ["--data", tiny_data, "--epochs", 2, "--batch-size", 16]
    r = invoke(
        "distill", "--teacher", tiny_teacher, "--out", tmp_path / "bert", *common,
        "--student", "bert", "--layers", 1, "-s", "max_length=16",
        "--augment", "mask,mixup", "--n-iter", 2,
        "--intermediate", "pkd", "-i", "layer_map=top", "-i", "weight=10",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    resolved = yaml.safe_load((tmp_path / "bert" / "config.yaml").read_text())
    assert resolved["intermediate_options"] == {"layer_map": "top", "weight": 10}
    assert resolved["student_options"]["layers"] == 1

    r = invoke(
        "export",
        tmp_path / "bert",
        "--out",
        tmp_path / "bert-onnx",
        "--int8",
        "dynamic",
        "--no-guard",
    )
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "bert-onnx" / "export.json").read_text())
    assert report["models"]["fp32"]["agreement"] == 1.0

    r = invoke(
        "distill", "--teacher", tmp_path / "bert", "--out", tmp_path / "lstm", *common,
        "-s", "embedding_dim=16", "-s", "hidden_size=8", "-s", "mlp_size=16",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    metrics = json.loads((tmp_path / "lstm" / "metrics.json").read_text())
    assert metrics["teacher"] == str(tmp_path / "bert")
    assert (
        metrics["teacher_accuracy"]
        == json.loads((tmp_path / "bert" / "metrics.json").read_text())["student_accuracy"]
    )


@pytest.mark.parametrize(
    "student",
    [
        ["-s", "embedding_dim=16", "-s", "hidden_size=8", "-s", "mlp_size=16"],
        ["--student", "bert", "--layers", 1, "--augment", "mask,mixup"],
    ],
    ids=["siamese-bilstm", "bert"],
)
def test_cli_sentence_pairs_distill_export_and_eval(
    tmp_path: Path, pair_data: Path, tiny_teacher: Path, student: list
):
    pair = ["--data", pair_data, "--text-pair-column", "sentence2"]
    r = invoke(
        "distill", "--teacher", tiny_teacher, "--out", tmp_path / "s", *pair,
        "--epochs", 2, "--batch-size", 16, "--augment", "tang", "--n-iter", 2, *student,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    metrics = json.loads((tmp_path / "s" / "metrics.json").read_text())
    assert metrics["n_augmented"] > 0 and metrics["n_dev"] == 40

    r = invoke(
        "export", tmp_path / "s", "--out", tmp_path / "onnx", "--int8", "dynamic", "--no-guard"
    )
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "onnx" / "export.json").read_text())
    assert report["models"]["fp32"]["agreement"] == 1.0
    scores = []
    for model in (tmp_path / "s", tmp_path / "onnx" / "model.onnx"):
        out = tmp_path / "eval.json"
        r = invoke("eval", model, *pair, "--json", out)
        assert r.exit_code == 0, r.output
        scores.append(json.loads(out.read_text())["accuracy"])
    assert scores[0] == scores[1] == report["models"]["fp32"]["accuracy"]

    r = invoke(
        "profile", tmp_path / "onnx" / "model.int8.onnx", "--runs", 5, "--warmup", 1,
        *pair[:2], "--text-pair-column", "sentence2",
    )  # fmt: skip
    assert r.exit_code == 0, r.output


def test_cli_mixup_on_pairs_with_a_siamese_student_is_refused(tmp_path, pair_data, tiny_teacher):
    r = runner.invoke(
        app,
        ["distill", "--teacher", str(tiny_teacher), "--out", str(tmp_path / "s"),
         "--data", str(pair_data), "--text-pair-column", "sentence2", "--augment", "mixup"],
    )  # fmt: skip
    assert r.exit_code == 1 and "use --student bert" in r.output.splitlines()[-1]
    assert not (tmp_path / "s").exists()


def test_cli_assistant_layers_runs_takd_in_one_command(tmp_path, tiny_data, tiny_teacher):
    r = invoke(
        "distill", "--teacher", tiny_teacher, "--out", tmp_path / "s", "--data", tiny_data,
        "--epochs", 1, "--assistant-layers", 1, "-s", "embedding_dim=16", "-s", "hidden_size=8",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    resolved = yaml.safe_load((tmp_path / "s" / "config.yaml").read_text())
    assert resolved["assistant"] == {"student": "bert", "student_options": {"layers": 1}}
    assert (tmp_path / "s" / "assistant" / "model.safetensors").is_file()


def test_cli_trim_reports_vocabulary_and_accuracy_change(tmp_path, tiny_data, tiny_teacher):
    r = invoke(
        "distill", "--teacher", tiny_teacher, "--data", tiny_data, "--out", tmp_path / "s",
        "--epochs", 1, "-s", "embedding_dim=16", "-s", "hidden_size=8",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    r = invoke("trim", tmp_path / "s", "--out", tmp_path / "t", "--keep-top", 10)
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "t" / "trim.json").read_text())
    assert report["vocab_after"] <= 10 + 3 < report["vocab_before"]
    assert {"dev_accuracy_before", "dev_accuracy_after"} <= set(report)
    r = invoke("export", tmp_path / "t", "--out", tmp_path / "e")  # a trimmed student exports
    assert r.exit_code == 0, r.output


def test_cli_minimax_k_reaches_the_resolved_config(tmp_path, tiny_data, tiny_teacher):
    r = invoke(
        "distill", "--teacher", tiny_teacher, "--data", tiny_data, "--out", tmp_path / "s",
        "--epochs", 1, "--augment", "mask,minimax", "--n-iter", 2, "--minimax-k", 1,
        "-s", "embedding_dim=16", "-s", "hidden_size=8",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    resolved = yaml.safe_load((tmp_path / "s" / "config.yaml").read_text())
    assert resolved["augment"]["minimax_k"] == 1
    assert resolved["augment"]["methods"] == ["mask", "minimax"]


def test_cli_check_writes_junit_bench_json_and_github_summary(tmp_path, monkeypatch):
    import xml.etree.ElementTree as ET

    art = tmp_path / "export"
    art.mkdir()
    (art / "export.json").write_text(
        json.dumps({"models": {"int8": {"path": "m.onnx", "bytes": 900, "accuracy": 0.85}}})
    )
    budget = tmp_path / "b.yaml"
    budget.write_text("max_bytes: 1000\nmin_accuracy: 0.9\n")
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    r = invoke(
        "check", art, "--budget", budget, "--junit", tmp_path / "j.xml",
        "--bench-json", tmp_path / "bench.json", "--github-summary",
    )  # fmt: skip
    assert r.exit_code == 1  # min_accuracy fails
    suite = ET.parse(tmp_path / "j.xml").getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")
    assert json.loads((tmp_path / "bench.json").read_text())[0] == {
        "name": "int8 bytes", "unit": "B", "value": 900.0,
    }  # fmt: skip
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "| min_accuracy | >= 0.9 | 0.85 | FAIL |" in text


def test_cli_check_uses_the_device_specs_default_budget(tmp_path):
    art = tmp_path / "export"
    art.mkdir()
    (art / "export.json").write_text(
        json.dumps({"models": {"int8": {"path": "m.onnx", "bytes": 900, "accuracy": 0.85}}})
    )
    (art / "profile-pi.json").write_text(
        json.dumps({"model": "m.onnx", "threads": 1, "device": "raspberry-pi-4",
                    "p90_ms": 25.0, "peak_rss_mb": 90.0, "load_ms": 9.0})
    )  # fmt: skip
    budget = tmp_path / "b.yaml"
    budget.write_text("max_bytes: 1000\n")
    r = invoke("check", art, "--budget", budget, "--device", "raspberry-pi-4", "--json", "-")
    assert r.exit_code == 1  # the spec's max_p90_ms 20 fails at 25 ms
    limits = {x["limit"]: x["status"] for x in json.loads(r.stdout)["limits"]}
    assert limits == {"max_bytes": "pass", "max_p90_ms": "FAIL", "max_peak_rss_mb": "pass"}


def test_cli_profile_vs_and_seq_len_sweep(tmp_path):
    from conftest import identity_model

    a = identity_model(tmp_path / "a.onnx")
    b = identity_model(tmp_path / "b.onnx")
    r = invoke("profile", a, "--vs", b, "--runs", 8, "--trials", 4, "--warmup", 1,
               "--seq-len", 4, "--json", tmp_path / "vs.json")  # fmt: skip
    assert r.exit_code == 0 and "b.onnx / a.onnx latency:" in r.stdout and "95% CI" in r.stdout
    assert json.loads((tmp_path / "vs.json").read_text())["vs"]["trial_ratios"]
    r = invoke("profile", a, "--runs", 4, "--trials", 2, "--warmup", 0,
               "--seq-len", "8,16", "--json", tmp_path / "sweep.json")  # fmt: skip
    assert r.exit_code == 0
    sweep = json.loads((tmp_path / "sweep.json").read_text())["sweep"]
    assert [s["seq_len"] for s in sweep] == [8, 16]
    r = invoke("profile", a, "--seq-len", "8,x")
    assert r.exit_code == 1 and "give integers" in r.output


def test_cli_devices_lists_specs_and_shows_one(tmp_path):
    r = invoke("devices")
    assert r.exit_code == 0 and "raspberry-pi-4: runner=ssh" in r.stdout
    r = invoke("devices", "--show", "android-arm64")
    assert yaml.safe_load(r.stdout)["runner"] == "adb"


def test_cli_run_recipe_exits_with_the_checks_code_and_report_rewrites(
    tmp_path, tiny_teacher, tiny_data, monkeypatch
):
    from tests.test_recipe import write_recipe

    recipe = write_recipe(tmp_path, tiny_teacher, tiny_data, {"max_bytes": 100})
    monkeypatch.chdir(tmp_path)  # `out: run`, relative, as in the examples
    r = invoke("run", recipe.name, "--set", "variants={small: {}}", "--set", "out=run")
    assert r.exit_code == 1  # no student fits in 100 B
    assert (tmp_path / "run" / "report" / "report.html").is_file()
    r = invoke("report", tmp_path / "run", "--out", tmp_path / "again")
    assert r.exit_code == 0 and (tmp_path / "again" / "pareto-local-cpu.png").is_file()
    r = invoke("run", tmp_path / "missing.yaml")
    assert r.exit_code == 2 and "does not exist" in r.output


def test_cli_profile_warns_when_trials_disagree(tmp_path, monkeypatch):
    import edgekd.devices.profile as profile
    from conftest import identity_model

    model = identity_model(tmp_path / "a.onnx")
    real = profile.profile_model

    def noisy(*args, **kwargs):
        r = real(*args, **kwargs)
        return {**r, "noisy": True, "trial_spread": 0.37}

    monkeypatch.setattr(profile, "profile_model", noisy)
    r = invoke("profile", model, "--runs", 4, "--trials", 2, "--warmup", 0, "--seq-len", 4)
    assert r.exit_code == 0
    assert "warning: a.onnx at seq 4: trial medians spread 37% (> 10%)" in r.output
