"""Every numeric option and config value has a range, checked before any work: a value
outside it is one line naming the fix, exit 2 (bad input), never 4 (edgekd's own bug),
with nothing written at --out and neither data nor teacher touched (issue 30, class 5)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import assert_refused
from edgekd.cli import app
from edgekd.config import MAX_STUDENT_PARAMS, DistillConfig, ExportConfig, ProfileConfig

runner = CliRunner()


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading data, loading the teacher or labelling anything fails the test."""
    import edgekd.stages.distill as stage

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("work started before the options were checked")

    for name in ("load_task", "load_teacher", "teacher_labels"):
        monkeypatch.setattr(stage, name, started)


def refused(args: list[str], *fix: str) -> str:
    """Run `edgekd args`; assert a one-line refusal naming each of `fix`, exit 2."""
    result = runner.invoke(app, args)
    assert "work started" not in result.stderr, result.stderr
    return assert_refused(result, *fix)


def distill_args(teacher: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["distill", "--teacher", str(teacher), "--data", str(data), "--out", str(out), *extra]


@pytest.mark.parametrize("seed", ["-1", str(2**32), str(2**70)])
def test_distill_seed_refused_before_labelling_when_outside_numpy_range(
    tiny_teacher, tiny_data, tmp_path, no_work, seed
):
    out = tmp_path / "out"
    refused(distill_args(tiny_teacher, tiny_data, out, "--seed", seed), "seed")
    assert not out.exists()


@pytest.mark.parametrize("seed", [0, 2**32 - 1])
def test_seed_accepted_at_numpy_bounds(tiny_teacher, seed):
    cfg = DistillConfig(teacher=str(tiny_teacher), seed=seed, data={"seed": seed})
    assert cfg.seed == cfg.data.seed == seed


@pytest.mark.parametrize(
    "option",
    [
        "student.options.hidden_size=100000",
        "student.options.embedding_dim=100000",
        "student.options.mlp_size=10000000",
        "student.options.max_vocab=100000000",
        "student.options.max_length=100000",
    ],
)
def test_distill_student_size_refused_naming_option_when_past_cap(
    tiny_teacher, tiny_data, tmp_path, no_work, option
):
    out = tmp_path / "out"
    name = option.split(".")[2].split("=")[0]
    refused(distill_args(tiny_teacher, tiny_data, out, "-s", option), name)
    assert not out.exists()


def test_distill_student_refused_when_parameter_estimate_past_cap(
    tiny_teacher, tiny_data, tmp_path, no_work
):
    # Each width within its cap; together 8·4096·8192 LSTM weights and a 1M × 4096 table.
    out = tmp_path / "out"
    args = ["-s", "student.options.vocab=word", "-s", "student.options.max_vocab=1000000"]
    args += ["-s", "student.options.embedding_rank=null"]
    args += ["-s", "student.options.embedding_dim=4096", "-s", "student.options.hidden_size=4096"]
    line = refused(distill_args(tiny_teacher, tiny_data, out, *args), "embedding_dim", "cap")
    assert f"{MAX_STUDENT_PARAMS / 1e6:,.0f}M" in line
    assert not out.exists()


@pytest.mark.parametrize(
    "options",
    [
        ["student=bert", "student.options.layers=1000"],
        ["student=bert", "student.options.hidden=4096", "student.options.ffn=16384",
         "student.options.heads=64", "student.options.layers=48"],
        ["student=mobilebert", "student.options.ffn_stacks=100"],
    ],
)  # fmt: skip
def test_distill_transformer_student_refused_when_too_big(
    tiny_teacher, tiny_data, tmp_path, no_work, options
):
    out = tmp_path / "out"
    sets = [a for o in options for a in ("-s", o)]
    refused(distill_args(tiny_teacher, tiny_data, out, *sets), options[-1].split(".")[-1][:6])
    assert not out.exists()


def test_distill_teacher_max_length_refused_when_teacher_has_fewer_positions(
    tiny_teacher, tiny_data, tmp_path, no_work
):
    out = tmp_path / "out"  # the tiny teacher has 64 positions
    args = distill_args(tiny_teacher, tiny_data, out, "-s", "teacher_max_length=65")
    refused(args, "teacher_max_length", "max_position_embeddings 64")
    assert not out.exists()


def test_distill_bert_student_max_length_refused_when_teacher_has_fewer_positions(
    tiny_teacher, tiny_data, tmp_path, no_work
):
    out = tmp_path / "out"
    sets = ["-s", "student=bert", "-s", "student.options.max_length=100"]
    refused(distill_args(tiny_teacher, tiny_data, out, *sets), "max_length", "64")
    assert not out.exists()


def test_distill_refuses_lengths_past_a_hub_teachers_positions_before_labelling(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # A hub id has no local config.json to read when the config is: its positions are
    # checked once the teacher has loaded, before any row is labelled.
    import edgekd.config
    import edgekd.stages.distill as stage

    for module in (edgekd.config, stage):
        monkeypatch.setattr(module, "teacher_positions", lambda teacher: None)

    def labelled(*args: object, **kwargs: object) -> None:
        raise AssertionError("work started before the options were checked")

    monkeypatch.setattr(stage, "teacher_labels", labelled)
    out = tmp_path / "out"
    args = distill_args(tiny_teacher, tiny_data, out, "-s", "teacher_max_length=65")
    refused(args, "teacher_max_length 65", "max_position_embeddings 64")
    assert not out.exists()


def test_teacher_max_length_default_lowered_to_teacher_positions(tiny_teacher):
    assert DistillConfig(teacher=str(tiny_teacher)).teacher_max_length == 64
    assert DistillConfig(teacher=str(tiny_teacher), teacher_max_length=64).teacher_max_length == 64


@pytest.mark.parametrize(
    ("flag", "value", "fix"),
    [
        ("--fixed-shape", "1x100000", "fixed_shape"),
        ("--fixed-shape", "0x64", "fixed_shape"),
        ("--fixed-shape", "100000x64", "fixed_shape"),
        ("--opset", "999", "opset"),
        ("--opset", "5", "opset"),
    ],
)
def test_export_option_refused_when_out_of_range(tiny_student, tmp_path, flag, value, fix):
    out = tmp_path / "out"
    refused(["export", str(tiny_student), "--out", str(out), flag, value], fix)
    assert not out.exists()


def test_export_opset_accepted_up_to_installed_onnx():
    import onnx

    newest = onnx.defs.onnx_opset_version()
    assert ExportConfig(opset=newest).opset == newest
    assert ExportConfig(fixed_shape="1x8192").fixed_shape == "1x8192"


@pytest.mark.parametrize("seq_len", ["100000", "64,9000"])
def test_profile_seq_len_refused_when_past_max_tokens(tiny_export, tmp_path, seq_len):
    model = tmp_path / "model.onnx"
    shutil.copy(tiny_export / "model.onnx", model)
    refused(["profile", str(model), "--seq-len", seq_len], "seq_len", "8,192")


@pytest.mark.parametrize(
    ("args", "fix"),
    [(["--seq-len", "9000"], "seq_len"), (["--runs", "2000000", "--trials", "5"], "runs")],
)
def test_check_timing_refused_when_out_of_range(tiny_export, tmp_path, args, fix):
    # `edgekd check` builds ProfileConfig itself: still one line, exit 2.
    budget = tmp_path / "budget.yaml"
    budget.write_text("max_bytes: 100000000\n")
    refused(["check", str(tiny_export), "--budget", str(budget), *args], fix)


def test_profile_seq_len_accepted_at_max_tokens():
    assert ProfileConfig(seq_lens=[1, 8192]).seq_lens == [1, 8192]


@pytest.mark.parametrize(
    ("rows", "width", "stored"),
    [
        (3, 2, np.ones((4, 2), np.float32)),  # another row count
        (3, 2, np.ones((3, 5), np.float32)),  # another label count
        (3, 2, np.ones((3, 2), np.float64)),  # another dtype
        (3, 2, np.ones(6, np.float32)),  # not a matrix
    ],
)
def test_cached_logits_recomputed_and_overwritten_when_shape_or_dtype_differs(
    tmp_path, capsys, rows, width, stored
):
    from safetensors.numpy import save_file

    from conftest import through_cache

    save_file({"logits": stored}, str(tmp_path / "k.safetensors"))
    calls = []

    def compute() -> np.ndarray:
        calls.append(1)
        return np.zeros((3, 2), np.float32)

    logits, hit = through_cache(tmp_path, "k", compute, rows, width)
    assert not hit and calls == [1] and logits.shape == (3, 2)
    assert "recomputing" in capsys.readouterr().err
    again, hit = through_cache(tmp_path, "k", compute, rows, width)
    assert hit and calls == [1] and again.dtype == np.float32  # overwritten: a hit now


def test_export_exit_threshold_refused_when_student_has_no_exits(tiny_student, tmp_path):
    out = tmp_path / "out"
    refused(
        ["export", str(tiny_student), "--out", str(out), "--exit-threshold", "0.5"],
        "exit_threshold",
        "bert",
    )
    assert not out.exists()


def test_saved_configs_with_json_reload(tiny_teacher):
    # A config dumped whole (as beside every artifact) reloads within its own ranges.
    cfg = DistillConfig(teacher=str(tiny_teacher), seed=2**32 - 1)
    again = DistillConfig.model_validate(json.loads(cfg.model_dump_json()))
    assert again == cfg


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_recipe_seed_refused_when_outside_numpy_range(tmp_path, tiny_data, seed):
    from edgekd.errors import EdgeKDError
    from edgekd.recipe import load_recipe

    path = tmp_path / "r.yaml"
    path.write_text(f"name: r\nseed: {seed}\ndata: {{spec: {tiny_data}}}\n")
    with pytest.raises(EdgeKDError, match="seed"):
        load_recipe(path)
