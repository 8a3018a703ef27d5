"""Bad input, as users give it, across every command: one line on stderr naming the fix,
the documented exit code (edgekd.errors: 2 bad input, 3 output refused), no traceback,
nothing written at --out, and every file that was there before left byte for byte."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekd.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_teacher, tiny_data) -> Path:
    """A user's folder: data, a teacher, a student, its export and bundle, and bad files."""
    from conftest import distill_tiny_bilstm
    from edgekd.config import ExportConfig
    from edgekd.stages.bundle import make_bundle
    from edgekd.stages.export import export as run_export

    w = tmp_path_factory.mktemp("world")
    shutil.copytree(tiny_data, w / "data")
    shutil.copytree(tiny_teacher, w / "teacher")
    distill_tiny_bilstm(w / "teacher", w / "data", w / "student")
    run_export(ExportConfig(guard=False), w / "student", w / "export")
    make_bundle(w / "export", w / "bundle")
    bad = w / "bad"
    bad.mkdir()
    rows = "sentence\tlabel\ngood film\t1\nbad film\t0\n"
    (bad / "latin1.tsv").write_bytes(rows.replace("good", "caf\xe9").encode("latin-1"))
    (bad / "dup.tsv").write_text("sentence\tsentence\tlabel\na\tb\t1\nc\td\t0\n")
    (bad / "nan.jsonl").write_text('{"text": "a", "label": 1}\n{"text": "b", "label": NaN}\n')
    (bad / "records.json").write_text('{"text": "a"}\n')
    (bad / "list.yaml").write_text("- a\n- b\n")
    (bad / "broken.yaml").write_text("epochs: [1, 2\n")
    (bad / "garbage.onnx").write_bytes(b"not a model at all")
    (bad / "notes.txt").write_text("mine")
    for name, text in {
        "false.yaml": "min_accuracy: false\n",
        "true-bytes.yaml": "max_bytes: true\n",
        "nan.yaml": "max_p90_ms: .nan\n",
        "inf.yaml": "max_p90_ms: .inf\n",
        "string.yaml": "max_bytes: '1000'\n",
        "unknown.yaml": "max_latency: 3\n",
        "empty.yaml": "",
        "negative.yaml": "max_bytes: -5\n",
        "accuracy-only.yaml": "min_accuracy: 0.5\n",
        "bytes-only.yaml": "max_bytes: 1000000\n",
        "device-typo.yaml": "max_bytes: 100\ndevices: {pi: {max_p90: 3}}\n",
    }.items():
        (bad / f"budget-{name}").write_text(text)
    # A student whose weights were cut short, and an export whose report is garbage.
    shutil.copytree(w / "student", bad / "truncated-student")
    weights = bad / "truncated-student" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    shutil.copytree(w / "export", bad / "garbled-export")
    (bad / "garbled-export" / "export.json").write_text("{not json")
    shutil.copytree(w / "export", bad / "garbage-export")
    (bad / "garbage-export" / "model.onnx").write_bytes(b"not a model at all")
    shutil.copytree(w / "export", bad / "array-export")
    (bad / "array-export" / "export.json").write_text("[1, 2]")
    # Bundles: a model swapped in, an unlisted extra file, a listed file deleted.
    for name in ("swapped", "extra", "deleted", "no-manifest"):
        shutil.copytree(w / "bundle", bad / f"bundle-{name}")
    (bad / "bundle-swapped" / "model.onnx").write_bytes(b"evil")
    (bad / "bundle-extra" / "model2.onnx").write_bytes(b"evil")
    (bad / "bundle-deleted" / "tokenizer.json").unlink()
    (bad / "bundle-no-manifest" / "manifest.json").write_text("{}")
    recipe = {
        "name": "r",
        "data": {"spec": str(w / "data")},
        "teacher": {"path": str(w / "teacher")},
        "budget": {"max_bytes": 10},
    }
    for name, extra in {
        "escape": {"variants": {"../../x": {}}},
        "absolute": {"variants": {"/abs/path": {}}},
        "unknown": {"distil": {}},
        "runs-bool": {"profile": {"runs": True}},
        "student-typo": {"distill": {"student": {"name": "bilstm", "options": {"hiden_size": 4}}}},
    }.items():
        (bad / f"recipe-{name}.yaml").write_text(json.dumps({**recipe, **extra}))
    (bad / "spec-bad.yaml").write_text("name: x\nrunner: teleport\n")
    shutil.copytree(w / "export", bad / "run-bad-manifest" / "export")
    (bad / "run-bad-manifest" / "manifest.json").write_text('{"stages": [')
    return w


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


T, D, S, E, B, X = "{w}/teacher", "{w}/data", "{w}/student", "{w}/export", "{w}/bundle", "{w}/bad"
OUT = "{out}"

# (command line, exit code, what the one line must say)
CASES: dict[str, tuple[list[str], int, str]] = {
    # teacher
    "teacher/missing-data": (["teacher", "--out", OUT, "--data", "{w}/nope"], 2, "nope"),
    "teacher/epochs-0": (["teacher", "--out", OUT, "--data", D, "--epochs", "0"], 2, "epochs"),
    "teacher/config-missing": (["teacher", "--out", OUT, "--config", X + "/no.yaml"], 2, "does not exist"),
    "teacher/config-broken": (["teacher", "--out", OUT, "--config", X + "/broken.yaml"], 2, "not valid YAML"),
    "teacher/config-list": (["teacher", "--out", OUT, "--config", X + "/list.yaml"], 2, "fix that file"),
    "teacher/config-folder": (["teacher", "--out", OUT, "--config", X], 2, "pass the YAML file"),
    "teacher/out-cwd": (["teacher", "--out", ".", "--data", D], 3, "pass a new folder path"),
    "teacher/out-foreign": (["teacher", "--out", X, "--data", D], 3, "--overwrite"),
    "teacher/out-file": (["teacher", "--out", X + "/notes.txt", "--data", D], 3, "is a file"),
    "teacher/latin1": (["teacher", "--out", OUT, "--data", X + "/latin1.tsv", "--base", T], 2, "--encoding"),
    # distill
    "distill/no-teacher": (["distill", "--out", OUT], 2, "pass --teacher"),
    "distill/option-not-kv": (["distill", "--teacher", T, "--out", OUT, "-s", "oops"], 2, "field=value"),
    "distill/option-typo": (["distill", "--teacher", T, "--out", OUT, "--data", D, "-s", "student.options.hiden_size=64"], 2, "no option 'hiden_size'; valid: vocab"),
    "distill/option-old-path": (["distill", "--teacher", T, "--out", OUT, "-s", "hidden_size=64"], 2, "-s student.options.hidden_size=VALUE"),
    "distill/augment-option": (["distill", "--teacher", T, "--out", OUT, "--augment", "tang", "-s", "augment.methods.tang.options.p_ng=2"], 2, "fix augment.methods.tang.options.p_ng"),
    "distill/augment-absent": (["distill", "--teacher", T, "--out", OUT, "--augment", "tang", "-s", "augment.methods.minimax.options.k=2"], 2, "has no 'minimax'"),
    "distill/option-type": (["distill", "--teacher", T, "--out", OUT, "--data", D, "-s", "student.options.hidden_size=x"], 2, "hidden_size"),
    "distill/student": (["distill", "--teacher", T, "--out", OUT, "--student", "gru"], 2, "bilstm"),
    "distill/loss": (["distill", "--teacher", T, "--out", OUT, "--loss", "l7"], 2, "mse"),
    "distill/augment": (["distill", "--teacher", T, "--out", OUT, "--augment", "shuffle"], 2, "tang"),
    "distill/loss-option": (["distill", "--teacher", T, "--out", OUT, "--loss", "kd", "-s", "loss.options.tau=3"], 2, "has no option 'tau'; valid: none"),
    "distill/layer-option": (["distill", "--teacher", T, "--out", OUT, "--student", "bert", "--intermediate", "pkd", "-s", "intermediate.options.wieght=3"], 2, "valid: layer_map, weight"),
    "distill/epochs-0": (["distill", "--teacher", T, "--out", OUT, "--epochs", "0"], 2, "epochs"),
    "distill/early-exit-bilstm": (["distill", "--teacher", T, "--out", OUT, "--early-exit"], 2, "--early-exit needs a bert student"),
    "distill/early-exit-1-layer": (["distill", "--teacher", T, "--out", OUT, "--student", "bert", "--layers", "1", "--early-exit"], 2, "at least 2 layers"),
    "distill/generator-alone": (["distill", "--teacher", T, "--out", OUT, "--generator", T], 2, "add mate to --augment"),
    "distill/mate-no-generator": (["distill", "--teacher", T, "--out", OUT, "--data", D, "--student", "bert", "--augment", "mate"], 2, "pass --generator"),
    "distill/mate-bilstm": (["distill", "--teacher", T, "--out", OUT, "--data", D, "--augment", "mate", "--generator", T], 2, "use --student bert"),
    "distill/mate-option": (["distill", "--teacher", T, "--out", OUT, "--student", "bert", "--augment", "mate", "-s", "augment.methods.mate.options.mask=2"], 2, "fix augment.methods.mate.options.mask"),
    "distill/intermediate-minilm-heads": (["distill", "--teacher", T, "--out", OUT, "--student", "bert", "--intermediate", "minilm", "-s", "intermediate.options.relation_heads=0"], 2, "relation_heads"),
    "distill/runtime": (["distill", "--teacher", T, "--out", OUT, "--teacher-runtime", "tpu"], 2, "torch"),
    "distill/teacher-missing": (["distill", "--teacher", "{w}/no-teacher", "--data", D, "--out", OUT], 2, "no-teacher"),
    "distill/teacher-not-a-model": (["distill", "--teacher", X, "--data", D, "--out", OUT], 2, "bad"),
    "distill/dup-columns": (["distill", "--teacher", T, "--data", X + "/dup.tsv", "--out", OUT], 2, "two columns named 'sentence'"),
    "distill/nan-label": (["distill", "--teacher", T, "--data", X + "/nan.jsonl", "--out", OUT], 2, "has no label"),
    "distill/latin1": (["distill", "--teacher", T, "--data", X + "/latin1.tsv", "--out", OUT], 2, "byte offset 18"),
    "distill/out-foreign": (["distill", "--teacher", T, "--data", D, "--out", X], 3, "--overwrite"),
    # export
    "export/missing": (["export", "{w}/nope", "--out", OUT], 2, "nope"),
    "export/not-a-student": (["export", X, "--out", OUT], 2, "bad"),
    "export/truncated": (["export", X + "/truncated-student", "--out", OUT], 2, "safetensors"),
    "export/int8-value": (["export", S, "--out", OUT, "--int8", "static"], 2, "unexpected extra argument"),
    "export/calibration": (["export", S, "--out", OUT, "--calibration", "entropy"], 2, "--int8-mode static"),
    "export/preset-alone": (["export", S, "--out", OUT, "--preset", "arm64"], 2, "add --int8"),
    "export/preset-bad": (["export", S, "--out", OUT, "--int8", "--preset", "z80"], 2, "avx2"),
    "export/fixed-shape": (["export", S, "--out", OUT, "--fixed-shape", "64"], 2, "fixed_shape"),
    "export/atol": (["export", S, "--out", OUT, "--atol", "-1"], 2, "atol"),
    "export/exit-threshold": (["export", S, "--out", OUT, "--exit-threshold", "2"], 2, "exit_threshold"),
    "export/budget-no-accuracy": (["export", S, "--out", OUT, "--budget", X + "/budget-bytes-only.yaml"], 2, "neither min_accuracy nor min_agreement"),
    "export/out-foreign": (["export", S, "--out", X], 3, "--overwrite"),
    # eval
    "eval/missing-model": (["eval", "{w}/nope.onnx", "--data", D], 2, "nope"),
    "eval/garbage-onnx": (["eval", X + "/garbage-export/model.onnx", "--data", D], 2, "not a valid model"),
    "eval/no-sidecar": (["eval", X + "/garbage.onnx", "--data", D], 2, "no student.json"),
    "eval/missing-data": (["eval", S, "--data", "{w}/nope"], 2, "nope"),
    # profile
    "profile/missing": (["profile", "{w}/nope.onnx"], 2, "does not exist"),
    "profile/garbage": (["profile", X + "/garbage.onnx", "--runs", "4", "--trials", "2"], 2, "garbage.onnx"),
    "profile/trials-0": (["profile", E + "/model.onnx", "--trials", "0"], 2, "--trials"),
    "profile/runs-lt-trials": (["profile", E + "/model.onnx", "--runs", "2", "--trials", "5"], 2, "each trial needs a run"),
    "profile/warmup": (["profile", E + "/model.onnx", "--warmup", "-1"], 2, "--warmup"),
    "profile/threads": (["profile", E + "/model.onnx", "--threads", "-1"], 2, "--threads"),
    "profile/seq-len": (["profile", E + "/model.onnx", "--seq-len", "8,x"], 2, "give integers"),
    "profile/seq-len-0": (["profile", E + "/model.onnx", "--seq-len", "0"], 2, "at least 1"),
    "profile/device": (["profile", E + "/model.onnx", "--device", "toaster"], 2, "valid names"),
    "profile/spec": (["profile", E + "/model.onnx", "--device", X + "/spec-bad.yaml"], 2, "teleport"),
    "profile/processes": (["profile", E + "/model.onnx", "--processes", "0"], 2, "--processes"),
    # check
    "check/budget-missing": (["check", E, "--budget", X + "/no.yaml"], 2, "does not exist"),
    "check/bool-accuracy": (["check", E, "--budget", X + "/budget-false.yaml"], 2, "min_accuracy"),
    "check/bool-bytes": (["check", E, "--budget", X + "/budget-true-bytes.yaml"], 2, "max_bytes"),
    "check/nan": (["check", E, "--budget", X + "/budget-nan.yaml"], 2, "finite"),
    "check/inf": (["check", E, "--budget", X + "/budget-inf.yaml"], 2, "finite"),
    "check/string": (["check", E, "--budget", X + "/budget-string.yaml"], 2, "max_bytes"),
    "check/unknown": (["check", E, "--budget", X + "/budget-unknown.yaml"], 2, "max_latency"),
    "check/empty": (["check", E, "--budget", X + "/budget-empty.yaml"], 2, "mapping of limits"),
    "check/negative": (["check", E, "--budget", X + "/budget-negative.yaml"], 2, "max_bytes"),
    "check/device-typo": (["check", E, "--budget", X + "/budget-device-typo.yaml"], 2, "max_p90"),
    "check/budget-folder": (["check", E, "--budget", X], 2, "pass the YAML file"),
    "check/no-folder": (["check", "{w}/nope", "--budget", E + "/../bad/budget-nan.yaml"], 2, "finite"),
    "check/missing-artifacts": (["check", "{w}/nope", "--budget", "{w}/ok-budget.yaml"], 2, "is not a folder"),
    "check/garbled-export": (["check", X + "/garbled-export", "--budget", "{w}/ok-budget.yaml"], 2, "not valid JSON"),
    "check/array-export": (["check", X + "/array-export", "--budget", "{w}/ok-budget.yaml"], 2, "not a JSON object"),
    "check/unknown-device": (["check", E, "--budget", "{w}/ok-budget.yaml", "--device", "toaster"], 2, "valid names"),
    "check/no-budget-no-baseline": (["check", E], 2, "needs limits: --budget FILE"),
    "check/baseline-missing": (["check", E, "--baseline", "{w}/nope"], 2, "does not exist"),
    "check/baseline-not-a-run": (["check", E, "--baseline", X], 2, "no export folder, bundle or profile"),
    "check/margin-ambiguous": (["check", E, "--baseline", E, "-s", "max_latency_regression=5"], 2, "ambiguous"),
    "check/baseline-no-export": (["check", X, "--baseline", E], 2, "export folder"),
    # plan
    "plan/no-teacher": (["plan", "--data", D, "--budget", "{w}/ok-budget.yaml", "--out", OUT], 2, "--teacher"),
    "plan/no-shape-limit": (["plan", "--teacher", T, "--data", D, "--budget", X + "/budget-accuracy-only.yaml", "--out", OUT], 2, "nothing to fit"),
    "plan/bad-grid": (["plan", "--teacher", T, "--data", D, "--budget", "{w}/ok-budget.yaml", "--grid", X + "/list.yaml", "--out", OUT], 2, "bilstm"),
    "plan/device": (["plan", "--teacher", T, "--data", D, "--budget", "{w}/ok-budget.yaml", "--device", "toaster", "--out", OUT], 2, "valid names"),
    "plan/out-foreign": (["plan", "--teacher", T, "--data", D, "--budget", "{w}/ok-budget.yaml", "--out", X], 3, "--overwrite"),
    # bundle
    "bundle/not-an-export": (["bundle", X, "--out", OUT], 2, "export.json"),
    "bundle/model": (["bundle", E, "--out", OUT, "--model", "int4"], 2, "--model"),
    "bundle/out-dot": (["bundle", E, "--out", "."], 3, "pass a new folder path"),
    "bundle/out-foreign": (["bundle", E, "--out", X], 3, "--overwrite"),
    # predict
    "predict/missing": (["predict", "{w}/nope", "hello"], 2, "not an edgekd bundle"),
    "predict/swapped": (["predict", X + "/bundle-swapped", "hello"], 2, "does not match its sha256"),
    "predict/extra": (["predict", X + "/bundle-extra", "hello"], 2, "model2.onnx is not in"),
    "predict/deleted": (["predict", X + "/bundle-deleted", "hello"], 2, "tokenizer.json"),
    "predict/no-files": (["predict", X + "/bundle-no-manifest", "hello"], 2, "lists no files"),
    "predict/no-text": (["predict", B], 2, "no texts given"),
    "predict/e2e-missing": (["predict", "{w}/nope.onnx", "hi"], 2, "does not exist"),
    "predict/not-e2e": (["predict", E + "/model.onnx", "hi"], 2, "is a model of an export folder, not a one-file model"),
    "bundle/e2e-none": (["bundle", E, "--out", OUT, "--model", "e2e"], 2, "export with --e2e"),
    "predict/file-missing": (["predict", B, "--file", "{w}/nope.txt"], 2, "does not exist"),
    "predict/file-folder": (["predict", B, "--file", X], 2, "is a folder"),
    "predict/threads": (["predict", B, "hi", "--threads", "-2"], 2, "--threads"),
    # run
    "run/missing": (["run", "{w}/nope.yaml"], 2, "does not exist"),
    # quickstart: its built-in recipe, so the same checks, before the folder is claimed
    "quickstart/missing-data": (["quickstart", "--data", "{w}/nope", "--teacher", T, "--out", OUT], 2, "nope"),
    "quickstart/set-typo": (["quickstart", "--data", D, "--teacher", T, "--out", OUT, "-s", "distill.student.options.hiden=3"], 2, "no option 'hiden'"),
    "quickstart/out-foreign": (["quickstart", "--data", D, "--teacher", T, "--out", X], 3, "--overwrite"),
    "run/variant-escape": (["run", X + "/recipe-escape.yaml"], 2, "plain folder name"),
    "run/variant-absolute": (["run", X + "/recipe-absolute.yaml"], 2, "plain folder name"),
    "run/unknown-field": (["run", X + "/recipe-unknown.yaml"], 2, "distil"),
    "run/bool-runs": (["run", X + "/recipe-runs-bool.yaml"], 2, "runs"),
    "run/student-typo": (["run", X + "/recipe-student-typo.yaml"], 2, "hiden_size"),
    "run/set-bad": (["run", X + "/recipe-escape.yaml", "-s", "oops"], 2, "field=value"),
    # trim
    "trim/keep-top-0": (["trim", S, "--out", OUT, "--keep-top", "0"], 2, "--keep-top"),
    "trim/min-freq-0": (["trim", S, "--out", OUT, "--min-freq", "0"], 2, "--min-freq"),
    "trim/missing": (["trim", "{w}/nope", "--out", OUT], 2, "config.yaml"),
    "trim/out-foreign": (["trim", S, "--out", X], 3, "--overwrite"),
    # devices, report
    "devices/show": (["devices", "--show", "toaster"], 2, "valid names"),
    "report/missing": (["report", "{w}/nope"], 2, "not a folder"),
    "report/out-foreign": (["report", "{w}", "--out", X], 3, "--overwrite"),
    "report/bad-manifest": (["report", X + "/run-bad-manifest", "--out", OUT], 2, "manifest.json is not valid JSON"),
    "distill/loss-option-valid": (["distill", "--teacher", T, "--out", OUT, "--loss", "annealing", "-s", "loss.options.tau=3"], 2, "valid: tau_max, epochs_per_step"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES), ids=str)
def test_bad_input_is_one_line_with_the_fix_and_harms_nothing(world, tmp_path, monkeypatch, case):
    args, code, fix = CASES[case]
    (world / "ok-budget.yaml").write_text("max_bytes: 100000000\n")
    monkeypatch.chdir(world)
    out = tmp_path / "out"
    before = snapshot(world)
    r = runner.invoke(app, [a.format(w=world, out=out) for a in args])
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert "Traceback" not in r.output, r.output
    assert r.exit_code == code, (r.exit_code, r.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert fix in lines[0], lines[0]
    assert not out.exists()
    assert snapshot(world) == before


def test_every_command_is_in_the_matrix():
    from typer.main import get_command

    covered = {case.split("/")[0] for case in CASES}
    commands = set(get_command(app).commands)
    assert commands <= covered, commands - covered
    assert len(CASES) >= 60


def test_an_unmeasured_or_garbage_metric_fails_the_gate(tmp_path):
    art = tmp_path / "export"
    art.mkdir()
    (art / "export.json").write_text(
        json.dumps({"models": {"int8": {"path": "m.onnx", "bytes": None, "accuracy": None}}})
    )
    budget = tmp_path / "b.yaml"
    budget.write_text("max_bytes: 1000\nmin_accuracy: 0.5\n")
    r = runner.invoke(app, ["check", str(art), "--budget", str(budget), "--json", "-"])
    assert r.exit_code == 1  # a limit failed: never a pass on a missing value
    assert {x["status"] for x in json.loads(r.stdout)["limits"]} == {"missing"}
    # A string where a number belongs is a malformed file (exit 2), never 900 bytes.
    (art / "export.json").write_text(
        json.dumps({"models": {"int8": {"path": "m.onnx", "bytes": "900", "accuracy": 0.9}}})
    )
    r = runner.invoke(app, ["check", str(art), "--budget", str(budget)])
    assert r.exit_code == 2 and "models.int8.bytes" in r.stderr, r.output


def test_an_internal_error_is_exit_4_with_a_pointer_to_debug(monkeypatch, tmp_path):
    import edgekd.devices.base as base

    def bug(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(base, "packaged_devices", bug)
    r = runner.invoke(app, ["devices"])
    assert r.exit_code == 4 and "Traceback" not in r.output
    assert r.stderr.strip() == (
        "error: internal error (ZeroDivisionError: division by zero); rerun with --debug "
        "for the traceback and report it"
    )
    r = runner.invoke(app, ["--debug", "devices"])
    assert isinstance(r.exception, ZeroDivisionError)  # the traceback is the user's to see


def test_an_unwritable_output_is_refused_before_any_work(tmp_path, monkeypatch, tiny_teacher):
    # As root this machine writes anywhere, so the permission check is made to say no.
    import os

    import edgekd.stages.distill as trainer

    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if "ro" in str(p) else real(p, m))
    monkeypatch.setattr(trainer, "load_task", lambda *a: pytest.fail("work started"))
    (tmp_path / "ro").mkdir()
    out = tmp_path / "ro" / "s"
    r = runner.invoke(app, ["distill", "--teacher", str(tiny_teacher), "--out", str(out)])
    assert r.exit_code == 3 and "permission denied" in r.stderr and not out.exists()
