"""The CLI as a user drives it: one chain teacher → distill → export → profile → check."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from conftest import FEW_VARIANTS
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


def test_cli_main_takes_click_arguments_by_position(capsys):
    """`main(args, prog_name, complete_var, standalone_mode)` by position, as click
    allows: the one-line-errors override once took `*args` and passed
    `standalone_mode=False` on top, so a positional one reached click twice (TypeError)."""
    from typer.main import get_command

    assert get_command(app).main(["--version"], "edgekd", None, False) == 0
    assert capsys.readouterr().out.startswith("edgekd ")


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
    # Not a terminal here: one plain line per epoch says where the run is.
    epochs = [x for x in r.output.splitlines() if x.startswith("epoch ")]
    assert [x.split(":")[0] for x in epochs] == ["epoch 1/2", "epoch 2/2"], r.output
    assert "train loss" in epochs[0] and "dev accuracy" in epochs[0] and epochs[0].endswith(" s")

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
        "student.options.embedding_dim=16",
        "-s",
        "student.options.hidden_size=8",
        "-s",
        "student.options.mlp_size=16",
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
    assert resolved["loss"] == {"name": "kd", "options": {}}
    assert resolved["student"]["options"]["hidden_size"] == 8
    assert resolved["augment"]["methods"] == [{"name": "tang", "options": {}}]
    assert resolved["augment"]["n_iter"] == 2
    metrics = json.loads((tmp_path / "student" / "metrics.json").read_text())
    assert metrics["n_augmented"] > 0

    r = invoke(
        "export",
        tmp_path / "student",
        "--out",
        tmp_path / "export",
        "--int8",
        "--no-guard",
    )
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "export" / "export.json").read_text())
    assert set(report["models"]) == {"fp32", "int8"}
    # The distill run's yardstick rides along to the gate (min_margin_over_baseline).
    distilled = json.loads((tmp_path / "student" / "metrics.json").read_text())
    assert report["tfidf_accuracy"] == distilled["tfidf"]["accuracy"]
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

    margin = tmp_path / "margin.yaml"
    margin.write_text("min_margin_over_baseline: 1.0\n")  # 100 points over TF-IDF: never
    r = invoke("check", "--budget", margin, tmp_path / "export")
    assert r.exit_code == 1 and "min_margin_over_baseline" in r.output, r.output

    tight = tmp_path / "tight.yaml"
    tight.write_text("max_bytes: 10\nmin_accuracy: 0.0\n")
    r = invoke("check", "--budget", tight, tmp_path / "export")
    assert r.exit_code == 1 and "FAIL" in r.output


@pytest.mark.parametrize(
    "args,code,message",
    [
        (["check", "--budget", "{tmp}/nope.yaml", "{tmp}"], 2, "does not exist"),
        (["distill", "--out", "{tmp}/s"], 2, "no teacher given"),
        (["distill", "--teacher", "x", "--out", "{tmp}/s", "-s", "oops"], 2, "not field=value"),
        (["profile", "{tmp}/missing.onnx"], 2, "does not exist"),
        (
            ["profile", "{tmp}/missing.onnx", "--device", "toaster"],
            2,
            "valid names: android-arm64, local-cpu",
        ),
    ],
)
def test_cli_bad_input_gives_one_line_error_and_exit_code(tmp_path, args, code, message):
    r = runner.invoke(app, [a.format(tmp=tmp_path) for a in args])
    assert r.exit_code == code
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert lines[-1].startswith("error:") and message in lines[-1]


@pytest.mark.slow
def test_cli_bert_student_with_mixup_and_pkd_exports_and_teaches_a_bilstm(
    tmp_path: Path, tiny_data: Path, tiny_teacher: Path
):
    # teacher → 1-layer BERT (MixKD + PKD) → ONNX; then the BERT student is the
    # teacher of a BiLSTM: TAKD's teacher → assistant → student chain.
    common = ["--data", tiny_data, "--epochs", 2, "--batch-size", 16]
    r = invoke(
        "distill", "--teacher", tiny_teacher, "--out", tmp_path / "bert", *common,
        "--student", "bert", "--layers", 1, "-s", "student.options.max_length=16",
        "--augment", "mask,mixup", "--n-iter", 2,
        "--intermediate", "pkd", "-s", "intermediate.options.layer_map=top",
        "-s", "intermediate.options.weight=10",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    resolved = yaml.safe_load((tmp_path / "bert" / "config.yaml").read_text())
    assert resolved["intermediate"] == {
        "name": "pkd",
        "options": {"layer_map": "top", "weight": 10},
    }
    assert resolved["student"] == {"name": "bert", "options": {"max_length": 16, "layers": 1}}

    r = invoke(
        "export",
        tmp_path / "bert",
        "--out",
        tmp_path / "bert-onnx",
        "--int8",
        "--no-guard",
    )
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "bert-onnx" / "export.json").read_text())
    assert report["models"]["fp32"]["agreement"] == 1.0

    r = invoke(
        "distill", "--teacher", tmp_path / "bert", "--out", tmp_path / "lstm", *common,
        "-s", "student.options.embedding_dim=16", "-s", "student.options.hidden_size=8",
        "-s", "student.options.mlp_size=16",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    metrics = json.loads((tmp_path / "lstm" / "metrics.json").read_text())
    assert metrics["teacher"] == str(tmp_path / "bert")
    assert (
        metrics["teacher_accuracy"]
        == json.loads((tmp_path / "bert" / "metrics.json").read_text())["student_accuracy"]
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "student",
    [
        [
            "-s",
            "student.options.embedding_dim=16",
            "-s",
            "student.options.hidden_size=8",
            "-s",
            "student.options.mlp_size=16",
        ],
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

    r = invoke("export", tmp_path / "s", "--out", tmp_path / "onnx", "--int8", "--no-guard")
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
    assert r.exit_code == 2 and "use --student bert" in r.output.splitlines()[-1]
    assert not (tmp_path / "s").exists()


def test_cli_assistant_layers_runs_takd_in_one_command(tmp_path, tiny_data, tiny_teacher):
    r = invoke(
        "distill", "--teacher", tiny_teacher, "--out", tmp_path / "s", "--data", tiny_data,
        "--epochs", 1, "--assistant-layers", 1, "--n-iter", FEW_VARIANTS,  # two models train
        "-s", "student.options.embedding_dim=16", "-s", "student.options.hidden_size=8",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    resolved = yaml.safe_load((tmp_path / "s" / "config.yaml").read_text())
    assert resolved["assistant"]["student"] == {"name": "bert", "options": {"layers": 1}}
    assert (tmp_path / "s" / "assistant" / "model.safetensors").is_file()


def test_cli_trim_reports_vocabulary_and_accuracy_change(tmp_path, tiny_data, tiny_teacher):
    r = invoke(
        "distill", "--teacher", tiny_teacher, "--data", tiny_data, "--out", tmp_path / "s",
        "--epochs", 1, "--n-iter", FEW_VARIANTS,  # trim is the subject
        "-s", "student.options.embedding_dim=16", "-s", "student.options.hidden_size=8",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    r = invoke("trim", tmp_path / "s", "--out", tmp_path / "t", "--keep-top", 10)
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "t" / "trim.json").read_text())
    # The top 10 and the specials: the default student reads the tiny teacher's pieces,
    # whose specials are [PAD] [UNK] [CLS] [SEP] [MASK].
    assert report["vocab_after"] <= 10 + 5 < report["vocab_before"]
    assert {"dev_accuracy_before", "dev_accuracy_after"} <= set(report)
    r = invoke("export", tmp_path / "t", "--out", tmp_path / "e")  # a trimmed student exports
    assert r.exit_code == 0, r.output


def test_cli_minimax_k_reaches_the_resolved_config(tmp_path, tiny_data, tiny_teacher):
    r = invoke(
        "distill", "--teacher", tiny_teacher, "--data", tiny_data, "--out", tmp_path / "s",
        "--epochs", 1, "--augment", "mask,minimax", "--n-iter", 2, "--max-augmented", 50,
        "-s", "augment.methods.minimax.options.k=1",
        "-s", "student.options.embedding_dim=16", "-s", "student.options.hidden_size=8",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    resolved = yaml.safe_load((tmp_path / "s" / "config.yaml").read_text())
    assert resolved["augment"]["methods"] == [
        {"name": "mask", "options": {}},
        {"name": "minimax", "options": {"k": 1}},
    ]
    assert (resolved["augment"]["n_iter"], resolved["augment"]["max_rows"]) == (2, 50)


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
    assert r.exit_code == 2 and "give integers" in r.output


def test_cli_devices_lists_specs_and_shows_one(tmp_path):
    r = invoke("devices")
    assert r.exit_code == 0 and "raspberry-pi-4: runner=ssh" in r.stdout
    r = invoke("devices", "--show", "android-arm64")
    assert yaml.safe_load(r.stdout)["runner"] == "adb"


@pytest.mark.slow
def test_cli_run_recipe_exits_with_the_checks_code_and_report_rewrites(
    tmp_path, tiny_teacher, tiny_data, monkeypatch
):
    from tests.test_recipe import write_recipe

    recipe = write_recipe(tmp_path, tiny_teacher, tiny_data, {"max_bytes": 100})
    monkeypatch.chdir(tmp_path)  # `out: run`, relative, as in the examples
    r = invoke("run", recipe.name, "--set", "variants={small: {}}", "--set", "out=run")
    assert r.exit_code == 1  # no student fits in 100 B
    finished = [x.split(":")[0] for x in r.output.splitlines() if ": done in " in x]
    assert finished[:3] == ["distill small", "export small", "teacher onnx"], r.output
    assert "report" in finished
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


def cli_params():
    """(command, parameter) for every parameter of every `edgekd` command."""
    from typer.main import get_command

    group = get_command(app)
    for param in group.params:  # edgekd's own options (--debug)
        if param.name != "help":
            yield "edgekd", param
    for name, command in sorted(group.commands.items()):
        for param in command.params:
            if param.name != "help":
                yield name, param


def test_every_option_has_help_text_and_shows_its_default():
    missing = []
    for command, p in cli_params():
        label = f"{command} {'/'.join(p.opts)}"
        if getattr(p, "hidden", False):  # a moved option kept only to say what to write
            continue
        if not (p.help or "").strip():
            missing.append(f"{label}: no help")
        if p.required:
            continue
        shown = p.show_default
        # A string is the default's description ("auto-detected"); True shows the value,
        # which must then exist (a None default would print nothing).
        if not (isinstance(shown, str) and shown) and not (shown and p.default is not None):
            missing.append(f"{label}: default not shown")
        if getattr(p, "is_flag", False) and not p.secondary_opts and not isinstance(shown, str):
            missing.append(f"{label}: an on/off flag must say it is off")
    assert not missing, "\n".join(missing)


def test_help_shows_defaults_from_the_config_models():
    from edgekd.config import DistillConfig

    r = CliRunner().invoke(app, ["distill", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    for flag, value in (("--temperature", "temperature"), ("--batch-size", "batch_size")):
        line = next(x for x in r.output.splitlines() if f" {flag} " in x)
        assert f"[default: {DistillConfig.model_fields[value].default}]" in line, line
    # Its help wraps: read the option's rows as one line.
    rows = [x.strip("│ ") for x in r.output.splitlines()]
    start = next(i for i, x in enumerate(rows) if x.startswith("--epochs "))
    block = " ".join(rows[start : start + 4]).split(" --time-budget ")[0]
    assert "[default: (what the budget affords; 10 without)]" in " ".join(block.split()), block
    line = next(x for x in r.output.splitlines() if " --lr " in x)
    assert "[default: (the student's: bilstm 1e-3, bert 5e-5)]" in line


def test_options_left_at_their_default_do_not_override_the_config_file(
    tmp_path, tiny_data, tiny_teacher
):
    config = tmp_path / "d.yaml"
    config.write_text(
        f"teacher: {tiny_teacher}\ndata: {{spec: {tiny_data}}}\nepochs: 1\nbatch_size: 16\n"
        "student: {name: bilstm, options: {embedding_dim: 16, hidden_size: 8, mlp_size: 16}}\n"
        "augment: {n_iter: 4}\n"
    )
    r = invoke("distill", "--config", config, "--out", tmp_path / "s", "--seed", 3)
    assert r.exit_code == 0, r.output
    resolved = yaml.safe_load((tmp_path / "s" / "config.yaml").read_text())
    # --epochs (default 10) was not typed: the file's 1 stands; --seed was typed: 3 wins.
    assert (resolved["epochs"], resolved["batch_size"], resolved["seed"]) == (1, 16, 3)
    assert resolved["data"]["seed"] == 3
    assert resolved["augment"]["n_iter"] == 4  # --n-iter (default auto) was not typed


@pytest.mark.parametrize(
    "args",
    [
        ["{s}", "--out", "{out}", "--int8", "--no-guard"],
        ["--int8", "{s}", "--out", "{out}", "--no-guard"],
        ["--int8", "--no-guard", "--out", "{out}", "{s}"],
    ],
    ids=["flag-last", "flag-first", "student-last"],
)
def test_export_int8_flag_writes_the_int8_model_in_any_position(tmp_path, tiny_student, args):
    out = tmp_path / "e"
    r = invoke("export", *[a.format(s=tiny_student, out=out) for a in args])
    assert r.exit_code == 0, r.output
    assert (out / "model.int8.onnx").is_file()
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert (resolved["int8"], resolved["int8_mode"]) == (True, "dynamic")


def test_export_without_int8_writes_fp32_only(tmp_path, tiny_student):
    r = invoke("export", tiny_student, "--out", tmp_path / "e")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "e" / "model.onnx").is_file()
    assert not (tmp_path / "e" / "model.int8.onnx").exists()
    assert yaml.safe_load((tmp_path / "e" / "config.yaml").read_text())["int8"] is False


def test_export_int8_mode_static_implies_int8_and_records_calibration(tmp_path, tiny_student):
    r = invoke(
        "export", tiny_student, "--out", tmp_path / "e", "--int8-mode", "static",
        "--calibration", "percentile", "--calibration-samples", 32, "--no-guard",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "e" / "export.json").read_text())
    assert report["models"]["int8"]["quantizer"]["mode"] == "static"
    resolved = yaml.safe_load((tmp_path / "e" / "config.yaml").read_text())
    assert (resolved["calibration"], resolved["calibration_samples"]) == ("percentile", 32)


@pytest.mark.parametrize(
    "extra,fix",
    [
        (["--calibration", "entropy"], "calibration only applies to static int8; add --int8-mode"),
        (["--int8", "--calibration-samples", "64"], "add --int8-mode static"),
        (["--preset", "avx2"], "preset only applies to int8 models; add --int8"),
        (["--max-int8-drop", "0.01"], "max_int8_drop only applies to int8 models; add --int8"),
        (["--per-tensor"], "per_channel only applies to int8 models"),
        (["--int8-embedding", "tensor"], "int8_embedding only applies to int8 models; add --int8"),
        (["--device", "local-cpu"], "--device only applies to int8 models; add --int8"),
    ],
)  # fmt: skip
def test_export_int8_options_without_their_mode_are_one_line_errors(tmp_path, extra, fix):
    # Checked before the student is read: the folder need not exist.
    r = runner.invoke(app, ["export", str(tmp_path / "s"), "--out", str(tmp_path / "e"), *extra])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [f"error: {r.output.strip()[7:]}"]
    assert fix in r.output and not (tmp_path / "e").exists()


def test_export_int8_takes_no_value():
    # `--int8 static` must not read `static` as the mode (nor swallow a path).
    r = runner.invoke(app, ["export", "s", "--out", "e", "--int8", "static"])
    assert r.exit_code == 2 and "unexpected extra argument" in r.output


def test_export_config_int8_is_a_switch_with_a_migration_message():
    from edgekd.config import ExportConfig, validate
    from edgekd.errors import EdgeKDError

    assert ExportConfig().int8 is True  # recipes and the API ship int8 unless told not to
    with pytest.raises(EdgeKDError, match="write `int8: true` and `int8_mode: static`"):
        validate(ExportConfig, {"int8": "static"}, "recipe export")
    with pytest.raises(EdgeKDError, match="add --int8-mode static \\(int8_mode: static\\)"):
        validate(ExportConfig, {"calibration": "entropy"}, "recipe export")
    with pytest.raises(EdgeKDError, match="preset only applies to int8 models; add --int8"):
        validate(ExportConfig, {"int8": False, "preset": "arm64"}, "recipe export")
    with pytest.raises(EdgeKDError, match="valid boolean"):
        validate(ExportConfig, {"int8": 1}, "recipe export")  # strict: 1 is not a switch
    dumped = ExportConfig(int8=False).model_dump()  # every field set, defaults unchanged
    assert validate(ExportConfig, dumped, "config.yaml").int8 is False


def test_nothing_but_the_entry_point_imports_the_cli():
    # The CLI parses and renders; stages, recipes, quickstart and benchmarks sit below it.
    root = Path(__file__).resolve().parents[1]
    cli = root / "edgekd" / "cli"
    sources = [
        p
        for folder in ("edgekd", "exporters", "devices", "benchmarks")
        for p in (root / folder).rglob("*.py")
        if p.name != "__main__.py" and cli not in p.parents
    ]
    offenders = [str(p) for p in sources if "edgekd.cli" in p.read_text(encoding="utf-8")]
    assert len(sources) > 30 and offenders == []


def test_every_command_takes_set_overrides_the_same_way(tmp_path, tiny_data, tiny_teacher):
    from conftest import distill_tiny_bilstm

    student = distill_tiny_bilstm(tiny_teacher, tiny_data, tmp_path / "s")
    config = tmp_path / "export.yaml"
    config.write_text("opset: 18\natol: 0.001\n")
    r = invoke(
        "export", student, "--out", tmp_path / "e", "--config", config, "-s", "atol=0.01",
        "--int8", "--no-guard",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    resolved = yaml.safe_load((tmp_path / "e" / "config.yaml").read_text())
    # The file's opset, --set over the file's atol, the flags over both.
    assert (resolved["opset"], resolved["atol"], resolved["int8"], resolved["guard"]) == (
        18, 0.01, True, False,
    )  # fmt: skip
    r = invoke(
        "profile", tmp_path / "e" / "model.onnx", "-s", "runs=4", "-s", "trials=2",
        "-s", "warmup=1", "-s", "seq_lens=[8]", "--json", tmp_path / "p.json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "p.json").read_text())["runs"] == 4
    budget = tmp_path / "b.yaml"
    budget.write_text("model: fp32\nmax_bytes: 100000000\n")
    assert invoke("check", "--budget", budget, tmp_path / "e").exit_code == 0
    r = invoke("check", "--budget", budget, tmp_path / "e", "-s", "max_bytes=10")
    assert r.exit_code == 1 and "FAIL" in r.output


def test_cli_early_exit_distils_exports_at_the_budgets_threshold_and_passes_check(
    tmp_path: Path, tiny_data: Path, tiny_teacher: Path
):
    r = invoke(
        "distill", "--teacher", tiny_teacher, "--out", tmp_path / "s", "--data", tiny_data,
        "--epochs", 2, "--batch-size", 16, "--student", "bert", "--layers", 2,
        "--early-exit", "-s", "student.options.max_length=16", "--augment", "none",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    resolved = yaml.safe_load((tmp_path / "s" / "config.yaml").read_text())
    assert resolved["student"]["options"]["early_exit"] is True
    budget = tmp_path / "budget.yaml"
    budget.write_text("min_agreement: 0.0\ndevices:\n  local-cpu: {min_agreement: 0.5}\n")
    r = invoke(
        "export", tmp_path / "s", "--out", tmp_path / "e", "--budget", budget,
        "--device", "local-cpu",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "e" / "export.json").read_text())
    assert "agreement ≥ 0.5" in report["early_exit"]["chosen_by"]
    assert "early exit: threshold" in r.output
    resolved = yaml.safe_load((tmp_path / "e" / "config.yaml").read_text())
    assert resolved["exit_min_agreement"] == 0.5
    gate = tmp_path / "gate.yaml"
    gate.write_text("model: shipped\nmin_agreement: 0.0\nmax_bytes: 100000000\n")
    r = invoke("check", "--budget", gate, tmp_path / "e", "--json", "-")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["passed"] is True


@pytest.mark.parametrize(
    "args,message",
    [
        (["--student", "bilstm", "--early-exit"], "--early-exit needs a bert student"),
        (["--student", "bert", "--layers", "1", "--early-exit"], "at least 2 layers"),
    ],
)
def test_cli_distill_early_exit_refuses_students_that_cannot(tmp_path, tiny_teacher, args, message):
    r = runner.invoke(
        app, ["distill", "--teacher", str(tiny_teacher), "--out", str(tmp_path / "s"), *args]
    )
    assert r.exit_code == 2 and message in r.output.splitlines()[-1], r.output
    assert not (tmp_path / "s").exists()


def test_distill_help_names_every_method(monkeypatch):
    monkeypatch.setenv("COLUMNS", "240")
    r = invoke("distill", "--help")
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    for spelling in (
        "pkd, tinybert, alp, distilbert", "minilm", "--early-exit", "FastBERT", "mate (MATE-KD",
        "--generator", "mobilebert", "mixup (MixKD)", "minimax", "annealing",
    ):  # fmt: skip
        assert spelling in text, spelling
