"""One precedence for every command (`edgekd.resolve`): a typed option > `-s` > the
--config file > the config model's default. Each command runs through the Typer app
with its stage replaced by a stub that records the config it was handed: nothing
trains, nothing is read but the config files written here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from edgekd.cli import app
from edgekd.config import DistillConfig, ExportConfig, ProfileConfig, TeacherConfig
from edgekd.errors import EdgeKDError
from edgekd.recipe import Recipe
from edgekd.resolve import Typed, layered, resolve

runner = CliRunner()


def stub(monkeypatch: pytest.MonkeyPatch, target: str, pick: Callable[..., Any]) -> dict:
    """Replace `target` ("module:function") with one that records `pick(*args, **kwargs)`
    (the config it was handed) and ends the command."""
    module, _, name = target.partition(":")
    seen: dict[str, Any] = {}

    def record(*args: Any, **kwargs: Any) -> None:
        seen["cfg"] = pick(*args, **kwargs)
        raise typer.Exit(0)

    monkeypatch.setattr(f"{module}.{name}", record)
    return seen


def first(*args: Any, **kwargs: Any) -> Any:
    return args[0]


@dataclass
class Case:
    """One command, one of its fields: what the file, `-s` and the typed option set it to."""

    argv: list[str]
    stage: str  # the function the resolved config is handed to
    read: Callable[[Any], Any]  # the field, from what the stage was handed
    file: str  # the --config file's text
    sets: str  # one -s pair
    flag: list[str]  # the option, typed
    values: tuple[Any, Any, Any]  # the field as the file, -s and the option set it
    default: Any  # the model's, when none of them does
    pick: Callable[..., Any] = first


CASES = {
    "teacher": Case(
        ["teacher", "--out", "o"], "edgekd.stages.teacher:teacher", lambda c: c.epochs,
        "epochs: 2\n", "epochs=3", ["--epochs", "4"], (2, 3, 4), 10.0,
    ),
    "distill": Case(
        ["distill", "--teacher", "t", "--out", "o"], "edgekd.stages.distill:distill",
        lambda c: c.temperature, "temperature: 2.0\n", "temperature=3.0",
        ["--temperature", "4"], (2.0, 3.0, 4.0), 1.0,
    ),
    "export": Case(
        ["export", "student", "--out", "o"], "edgekd.stages.export:export", lambda c: c.opset,
        "opset: 14\n", "opset=15", ["--opset", "16"], (14, 15, 16), 17,
    ),
    "profile": Case(
        ["profile", "m.onnx"], "edgekd.stages.profile:profile", lambda c: c.runs,
        "runs: 30\n", "runs=40", ["--runs", "50"], (30, 40, 50), 200,
    ),
    "plan": Case(
        ["plan", "--teacher", "t", "--data", "d", "--budget", "b.yaml", "--out", "o"],
        "edgekd.stages.plan:plan", lambda c: c.device,
        "device: file-cpu\n", "device=set-cpu", ["--device", "flag-cpu"],
        ("file-cpu", "set-cpu", "flag-cpu"), "local-cpu",
    ),
    # quickstart: its built-in recipe is the file (data.max_train: 100000); the recipe
    # runner is stubbed where it hands the resolved recipe on.
    "quickstart": Case(
        ["quickstart"], "edgekd.recipe:config_inputs", lambda r: r["data"]["max_train"],
        "", "data.max_train=50", ["--max-train", "7"], (100000, 50, 7), 100000,
    ),
}  # fmt: skip


def run(case: Case, monkeypatch: pytest.MonkeyPatch, *extra: str, file: bool = True) -> Any:
    seen = stub(monkeypatch, case.stage, case.pick)
    config = ["--config", "config.yaml"] if file and case.file else []
    result = runner.invoke(app, [*case.argv, *config, *extra], catch_exceptions=False)
    assert result.exit_code == 0 and "cfg" in seen, result.output
    return case.read(seen["cfg"])


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "b.yaml").write_text("max_bytes: 100000\n")
    for name, case in CASES.items():
        (tmp_path / f"{name}.yaml").write_text(case.file)
    return tmp_path


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest, in_tmp: Path) -> Case:
    (in_tmp / "config.yaml").write_text(CASES[request.param].file)
    return CASES[request.param]


# ------------------------------------------------------------------ every command


def test_typed_option_wins_over_set_and_file(case, monkeypatch):
    assert run(case, monkeypatch, "-s", case.sets, *case.flag) == case.values[2]
    # Typed first or last on the line, the option still wins.
    assert run(case, monkeypatch, *case.flag, "-s", case.sets) == case.values[2]


def test_set_wins_over_file_when_the_option_is_not_typed(case, monkeypatch):
    assert run(case, monkeypatch, "-s", case.sets) == case.values[1]


def test_file_value_stands_when_the_option_is_not_typed(case, monkeypatch):
    # The option's default in --help differs from the file's value: it must not apply.
    assert run(case, monkeypatch) == case.values[0]


def test_model_default_applies_when_nothing_sets_the_field(case, monkeypatch):
    assert run(case, monkeypatch, file=False) == case.default


def test_eval_typed_option_wins_over_the_models_default(monkeypatch):
    # eval takes no --config or -s: its DataConfig is the model's defaults and the options.
    case = Case(
        ["eval", "m.onnx", "--data", "d"], "edgekd.stages.evaluate:evaluate",
        lambda c: (c.spec, c.dev_split, c.train_split), "", "", [], (None, None, None), None,
    )  # fmt: skip
    assert run(case, monkeypatch, file=False) == ("d", None, "train")
    assert run(case, monkeypatch, "--dev-split", "test", file=False) == ("d", "test", "train")


def test_run_recipe_set_wins_over_the_recipe_file(tmp_path, monkeypatch):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: r\ndata: {spec: d}\nteacher: {path: t}\nbudget: {max_bytes: 10}\n"
        "distill: {epochs: 2, student: bilstm}\n"
    )
    case = Case(
        ["run", "r.yaml"], "edgekd.recipe:config_inputs", lambda r: r["distill"]["epochs"],
        "", "distill.epochs=3", [], (2, 3, None), None,
    )  # fmt: skip
    assert run(case, monkeypatch, file=False) == 2
    assert run(case, monkeypatch, "-s", case.sets, file=False) == 3


def test_check_budget_set_wins_over_the_budget_file(monkeypatch):
    # check's config file is its budget; the check stage applies -s over it.
    case = Case(
        ["check", ".", "--budget", "b.yaml"], "edgekd.stages.check:budget_for",
        lambda b: b.max_bytes, "", "max_bytes=5", [], (100000, 5, None), None,
    )  # fmt: skip
    assert run(case, monkeypatch, file=False) == 100000
    assert run(case, monkeypatch, "-s", case.sets, file=False) == 5


def test_check_timing_typed_options_win_over_the_models_defaults(monkeypatch):
    case = Case(
        ["check", ".", "--budget", "b.yaml"], "edgekd.stages.check:check",
        lambda t: (t.runs, t.trials, t.processes, t.seq_lens, t.devices, t.hosts),
        "", "", [], (None, None, None), None, pick=lambda *a, **k: k["timing"],
    )  # fmt: skip
    assert run(case, monkeypatch, file=False) == (400, 10, 3, [64], ["local-cpu"], {})
    typed = ["--runs", "40", "--trials", "4", "--seq-len", "8", "--device", "x", "--host", "h"]
    assert run(case, monkeypatch, *typed, file=False) == (40, 4, 3, [8], ["x"], {"x": "h"})


# ------------------------------------------------------------------ components


def distilled(monkeypatch: pytest.MonkeyPatch, file: str, *args: str) -> DistillConfig:
    Path("config.yaml").write_text(f"teacher: t\n{file}")
    seen = stub(monkeypatch, "edgekd.stages.distill:distill", first)
    result = runner.invoke(app, ["distill", "--out", "o", "--config", "config.yaml", *args])
    assert result.exit_code == 0, result.output
    return seen["cfg"]


def test_set_options_reach_the_student_a_typed_option_names(monkeypatch):
    # -s first on the line, --student last: the options still land on the bert student.
    cfg = distilled(monkeypatch, "", "-s", "student.options.layers=2", "--student", "bert")
    assert (cfg.student.name, cfg.student.options) == ("bert", {"layers": 2})


def test_augment_option_spells_auto_none_and_a_list(monkeypatch):
    assert distilled(monkeypatch, "").augment.methods == "auto"  # the default
    file = "augment: {methods: [tang]}\n"
    assert distilled(monkeypatch, file, "--augment", "auto").augment.methods == "auto"
    assert distilled(monkeypatch, "", "--augment", "none").augment.methods == []
    names = distilled(monkeypatch, "", "--augment", "neighbour,tang").augment.methods
    assert [m.name for m in names] == ["neighbour", "tang"]


def test_typed_student_wins_over_set_when_both_name_one(monkeypatch):
    # Before `edgekd.resolve`, -s beat --student (components were set before -s).
    cfg = distilled(monkeypatch, "", "-s", "student=cnn", "--student", "bilstm")
    assert cfg.student.name == "bilstm"


def test_student_options_from_the_file_kept_when_the_option_names_it_again(monkeypatch):
    file = "student: {name: bilstm, options: {hidden_size: 8}}\n"
    assert distilled(monkeypatch, file, "--student", "bilstm").student.options == {"hidden_size": 8}
    # Another student: the file's options were the bilstm's, and are dropped.
    assert distilled(monkeypatch, file, "--student", "cnn").student.options == {}


def test_augmenter_options_from_the_file_kept_when_the_option_lists_it_again(monkeypatch):
    file = "augment: {methods: [tang, {name: minimax, options: {k: 1}}]}\n"
    cfg = distilled(monkeypatch, file, "--augment", "mask,minimax")
    assert [(m.name, m.options) for m in cfg.augment.methods] == [
        ("mask", {}),
        ("minimax", {"k": 1}),
    ]


def test_typed_seed_seeds_the_data_subsample_too(monkeypatch):
    cfg = distilled(monkeypatch, "seed: 1\ndata: {seed: 1}\n", "--seed", "5")
    assert (cfg.seed, cfg.data.seed) == (5, 5)


def test_typed_data_option_wins_over_the_files_data_section_and_keeps_the_rest(monkeypatch):
    file = "data: {spec: file-data, text_column: s}\n"
    cfg = distilled(monkeypatch, file, "-s", "data.spec=set-data", "--data", "flag-data")
    assert (cfg.data.spec, cfg.data.text_column) == ("flag-data", "s")


# ------------------------------------------------------------------ per-command rules


def exported(monkeypatch: pytest.MonkeyPatch, file: str, *args: str) -> ExportConfig:
    Path("config.yaml").write_text(file)
    seen = stub(monkeypatch, "edgekd.stages.export:export", first)
    result = runner.invoke(app, ["export", "s", "--out", "o", "--config", "config.yaml", *args])
    assert result.exit_code == 0, result.output
    return seen["cfg"]


def test_export_int8_off_when_only_the_command_lines_default_sets_it(monkeypatch):
    assert exported(monkeypatch, "").int8 is False
    assert ExportConfig().int8 is True  # recipes and the API ship int8 unless told not to


def test_export_int8_from_the_file_or_set_stands_when_int8_is_not_typed(monkeypatch):
    assert exported(monkeypatch, "int8: true\n").int8 is True
    assert exported(monkeypatch, "", "-s", "int8=true").int8 is True
    assert exported(monkeypatch, "int8: false\n", "--int8").int8 is True


def test_export_int8_mode_typed_asks_for_int8_over_the_file(monkeypatch):
    cfg = exported(monkeypatch, "int8: false\n", "--int8-mode", "static")
    assert (cfg.int8, cfg.int8_mode) == (True, "static")


def test_export_device_preset_wins_over_the_files_unless_preset_is_typed(monkeypatch):
    from edgekd.devices.base import load_spec

    ours = load_spec("android-arm64").int8_preset()
    file = "int8: true\npreset: avx2\n"
    assert exported(monkeypatch, file, "--device", "android-arm64").preset == ours
    typed = exported(monkeypatch, file, "--device", "android-arm64", "--preset", "avx512_vnni")
    assert typed.preset == "avx512_vnni"


def test_profile_host_is_the_one_devices_when_the_device_comes_from_the_file(monkeypatch):
    Path("config.yaml").write_text("devices: [raspberry-pi-4]\n")
    seen = stub(monkeypatch, "edgekd.stages.profile:profile", first)
    result = runner.invoke(app, ["profile", "m.onnx", "--config", "config.yaml", "--host", "pi"])
    assert result.exit_code == 0, result.output
    assert seen["cfg"].hosts == {"raspberry-pi-4": "pi"}


def test_profile_processes_default_is_the_models(monkeypatch):
    # Once 3 in the CLI and 1 in ProfileConfig; now the model's, 3.
    seen = stub(monkeypatch, "edgekd.stages.profile:profile", first)
    assert runner.invoke(app, ["profile", "m.onnx"]).exit_code == 0
    assert seen["cfg"].processes == ProfileConfig().processes == 3


def test_plan_typed_option_wins_over_set(monkeypatch):
    # Before `edgekd.resolve`, plan applied -s after its options.
    seen = stub(monkeypatch, "edgekd.stages.plan:plan", first)
    args = ["plan", "--teacher", "t", "--data", "d", "--budget", "b.yaml", "--out", "o"]
    result = runner.invoke(app, [*args, "-s", "teacher=s", "-s", "data.spec=e"])
    assert result.exit_code == 0, result.output
    assert (seen["cfg"].teacher, seen["cfg"].data.spec) == ("t", "d")


# ------------------------------------------------------------------ resolve itself


def test_resolve_refuses_naming_the_option_when_a_required_field_is_missing():
    typed = Typed(flags={"teacher": "--teacher"})
    with pytest.raises(EdgeKDError, match="no teacher given; pass --teacher"):
        resolve(DistillConfig, typed=typed)


def test_resolve_keeps_the_models_default_when_no_command_line_takes_part(tmp_path):
    (tmp_path / "e.yaml").write_text("opset: 14\n")
    assert resolve(ExportConfig, tmp_path / "e.yaml").int8 is True  # the API's, a recipe's
    assert resolve(ExportConfig, tmp_path / "e.yaml", typed=Typed()).int8 is False


def test_resolve_set_reaches_a_component_set_names_later_on_the_line():
    cfg = resolve(TeacherConfig, None, ["epochs=3", "epochs=4"])
    assert cfg.epochs == 4  # -s pairs apply in the order given
    data = layered(Recipe, {}, ["distill.student.options.hidden_size=8", "distill.student=cnn"])
    assert data["distill"]["student"] == {"name": "cnn", "options": {"hidden_size": 8}}


def test_resolve_set_refuses_a_component_option_when_the_methods_are_auto():
    # augment.methods is auto by default: its entries are chosen from the data, so an
    # option of one has nowhere to go until the list is given.
    refusal = r"augment\.methods is auto .* lists no 'tang' yet; add tang to augment\.methods"
    with pytest.raises(EdgeKDError, match=refusal):
        layered(DistillConfig, {}, ["augment.methods.tang.options.p_mask=0.2"])
    data = layered(
        DistillConfig, {}, ["augment.methods=[tang]", "augment.methods.tang.options.p_mask=0.2"]
    )
    assert data["augment"]["methods"] == [{"name": "tang", "options": {"p_mask": 0.2}}]
