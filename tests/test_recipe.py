"""`edgekd run`: every stage once, then only what a change touches."""

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from conftest import FEW_VARIANTS, SMALL_BILSTM
from edgekd import recipe as recipe_module
from edgekd.artifacts import ReportPoints
from edgekd.errors import EdgeKDError
from edgekd.io import source_digest
from edgekd.recipe import (
    Stages,
    code_fingerprint,
    code_roots,
    content_hash,
    load_recipe,
    run_recipe,
)


def write_recipe(tmp_path: Path, teacher_dir: Path, data: Path, budget: dict, **extra) -> Path:
    recipe = {
        "name": "tiny",
        "out": str(tmp_path / "run"),
        "data": {"spec": str(data)},
        "teacher": {"path": str(teacher_dir)},
        "distill": {  # the recipe's stages are the subject, not the rows
            "epochs": 1,
            "augment": {"n_iter": FEW_VARIANTS},
            "student": {"name": "bilstm", "options": SMALL_BILSTM},
        },
        "variants": {"small": {}, "tiny": {"student": {"options": {"hidden_size": 4}}}},
        "export": {"guard": False},
        "profile": {"runs": 6, "trials": 2, "warmup": 1, "seq_len": 8},
        "budget": budget,
        **extra,
    }  # fmt: skip
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def statuses(run: Path) -> dict[str, str]:
    manifest = json.loads((run / "manifest.json").read_text())
    return {s["stage"]: s["status"] for s in manifest["stages"]}


@pytest.mark.slow
def test_run_recipe_caches_stages_and_reruns_only_what_changed(tmp_path, tiny_teacher, tiny_data):
    run = tmp_path / "run"
    recipe = write_recipe(tmp_path, tiny_teacher, tiny_data, {"max_bytes": 10_000_000})
    assert run_recipe(recipe) == 0
    first = statuses(run)
    assert set(first.values()) == {"ran"}
    assert set(first) == {
        "distill small", "export small", "distill tiny", "export tiny", "teacher onnx",
        "profile teacher", "profile small", "profile tiny", "check small", "check tiny", "report",
    }  # fmt: skip
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["versions"]["onnxruntime"] and manifest["inputs"]["data"]
    assert manifest["versions"]["edgekd source"] == code_fingerprint()[:16]
    assert (run / "report" / "report.html").is_file()

    # The same recipe again: nothing runs.
    assert run_recipe(recipe) == 0
    assert set(statuses(run).values()) == {"cached"}

    # Only the budget changes: only the checks (and the report showing them) re-run;
    # a limit the students miss makes the run exit 1 and JUnit name it.
    recipe = write_recipe(tmp_path, tiny_teacher, tiny_data, {"max_bytes": 1000})
    assert run_recipe(recipe) == 1
    again = statuses(run)
    ran = {stage for stage, status in again.items() if status == "ran"}
    assert ran == {"check small", "check tiny", "report"}
    suite = ET.parse(run / "small" / "check" / "junit-local-cpu.xml").getroot()
    failure = suite.find("testcase[@name='max_bytes']/failure")
    assert failure is not None
    assert re.fullmatch(r"bytes [\d,]+ B, limit <= 1,000 B", failure.get("message"))

    # One variant's student config changes: that variant's chain re-runs, not the other's.
    text = recipe.read_text().replace("hidden_size: 4", "hidden_size: 6")
    recipe.write_text(text)
    ran = {s for s, st in (run_recipe(recipe), statuses(run))[1].items() if st == "ran"}
    assert ran == {"distill tiny", "export tiny", "profile tiny", "check tiny", "report"}

    # A variant removed from the recipe drops out of the report (its folder stays).
    assert run_recipe(path=recipe, overrides={"variants": {"small": {}}}) == 1
    labels = {p.label for p in ReportPoints.read(run / "report").points}
    assert labels == {"teacher fp32", "small fp32", "small int8"}
    assert (run / "tiny" / "student").is_dir()


def test_content_hash_follows_file_contents(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "train.tsv").write_text("a\t1\n")
    before = content_hash(str(folder))
    (folder / "train.tsv").write_text("a\t0\n")
    assert content_hash(str(folder)) != before
    assert content_hash("glue/sst2") == content_hash("glue/sst2")  # a hub id: its name


def test_code_fingerprint_covers_the_packages_edgekd_installs():
    roots = code_roots()
    assert [r.is_dir() for r in roots] == [True, True, True]
    found = {f.name for r in roots for f in r.iterdir()}
    assert {"recipe.py", "teacher.py", "base.py"} <= found  # edgekd, exporters, devices
    assert code_fingerprint() == source_digest(roots) != source_digest([])


def test_stage_runs_again_when_cached_by_other_code(tmp_path, monkeypatch):
    def stage(folder: Path) -> None:
        folder.mkdir(exist_ok=True)

    folder = tmp_path / "distill"
    Stages(tmp_path).run("distill", folder, {"v": 1}, stage)
    same = Stages(tmp_path)
    same.run("distill", folder, {"v": 1}, stage)
    monkeypatch.setattr(recipe_module, "code_fingerprint", lambda: "edited checkout")
    edited = Stages(tmp_path)
    edited.run("distill", folder, {"v": 1}, stage)
    assert [same.records[0].status, edited.records[0].status] == ["cached", "ran"]


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        ({"distill": {"epochs": 0}}, "variant small: field 'epochs'"),
        ({"distill": {"teacher": "x"}}, "set `teacher` at the top level"),
        ({"budget": {"max_bites": 3}}, "field 'max_bites'"),
        ({"profile": {"devices": ["toaster"]}}, "unknown device 'toaster'"),
        ({"colour": "red"}, "field 'colour': no such field; valid: "),
        ({"distill": {"student": "gru"}}, "variant small: unknown student 'gru'"),
        ({"distill": {"intermediate": "pkd"}}, "variant small: .*needs a transformer student"),
        # A TAKD variant's student run is checked at load, not once the assistant trained.
        (
            {"distill": {"intermediate": "pkd", "assistant": {"student": "bert"}}},
            "variant small: .*needs a transformer student",
        ),
        # ProfileConfig's own rule, at load, not after every variant has trained.
        ({"profile": {"runs": 2, "trials": 5}}, "recipe profile: runs 2 < trials 5"),
        # The teacher's config as it will run (recipe data and seed under it), at load.
        (
            {"teacher": {"path": None, "finetune": {"epochs": 0}}},
            "teacher.finetune: field 'epochs'",
        ),
    ],
)
def test_bad_recipe_fails_before_any_stage(tmp_path, tiny_teacher, tiny_data, edit, match):
    path = write_recipe(tmp_path, tiny_teacher, tiny_data, {"max_bytes": 1})
    recipe = yaml.safe_load(path.read_text())
    for k, v in edit.items():
        recipe[k] = {**recipe[k], **v} if isinstance(v, dict) and k in recipe else v
    path.write_text(yaml.safe_dump(recipe))
    with pytest.raises(EdgeKDError, match=match) as raised:
        load_recipe(path)
    assert str(raised.value).count(match.split(":")[0] + ":") <= 1  # named once, not twice
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        ({"distill": {"precision": "bf16"}}, "variant small: precision bf16"),
        ({"teacher": {"path": None, "finetune": {"precision": "bf16"}}},
         "teacher.finetune: precision bf16"),
    ],
)  # fmt: skip
def test_recipe_refuses_bf16_at_load_when_no_native_bf16(
    tmp_path, tiny_teacher, tiny_data, monkeypatch, edit, match
):
    from edgekd.distill import trainer

    monkeypatch.setattr(trainer, "native_bf16", lambda: False)
    path = write_recipe(tmp_path, tiny_teacher, tiny_data, {"max_bytes": 1})
    recipe = yaml.safe_load(path.read_text())
    for k, v in edit.items():
        recipe[k] = {**recipe[k], **v}
    path.write_text(yaml.safe_dump(recipe))
    with pytest.raises(EdgeKDError, match=match):
        load_recipe(path)
    assert not (tmp_path / "run").exists()


def test_set_overrides_reach_nested_fields_and_reject_non_sections(
    tmp_path, tiny_teacher, tiny_data
):
    path = write_recipe(tmp_path, tiny_teacher, tiny_data, {"max_bytes": 1})
    recipe = load_recipe(path, {"distill.epochs": 3, "data.max_train": 50, "profile.runs": 9})
    assert recipe.distill["epochs"] == 3 and recipe.data.max_train == 50
    assert recipe.distill_config("small", "t").epochs == 3 and recipe.profile.runs == 9
    with pytest.raises(EdgeKDError, match="name is not a section"):
        load_recipe(path, {"name.x": 1})


@pytest.mark.slow
def test_run_recipe_profiles_and_checks_every_device_by_its_spec_name(
    tmp_path, tiny_teacher, tiny_data
):
    spec = tmp_path / "core0.yaml"  # a device given as a path, named inside
    spec.write_text(
        "name: core0\nrunner: local\ncpu_affinity: [0]\nbudget: {max_p90_ms: 0.000001}\n"
    )
    recipe = write_recipe(
        tmp_path, tiny_teacher, tiny_data, {"max_bytes": 10_000_000},
        variants={"small": {}},
        profile={"runs": 4, "trials": 2, "warmup": 0, "seq_len": 8,
                 "devices": ["local-cpu", str(spec)]},
    )  # fmt: skip
    assert run_recipe(recipe) == 1  # core0's own default budget: p90 under 1 ns fails
    run = tmp_path / "run"
    checks = {p.name: json.loads(p.read_text()) for p in (run / "small" / "check").glob("c*.json")}
    assert checks["check-local-cpu.json"]["passed"]
    assert [lim["status"] for lim in checks["check-core0.json"]["limits"]] == ["pass", "FAIL"]
    profiles = sorted(p.name for p in (run / "small" / "profile").glob("profile-*.json"))
    assert profiles == [
        "profile-core0-model.int8.json", "profile-core0-model.json",
        "profile-local-cpu-model.int8.json", "profile-local-cpu-model.json",
    ]  # fmt: skip
    html = (run / "report" / "report.html").read_text()
    assert "<h2>core0</h2>" in html and "<h2>local-cpu</h2>" in html


@pytest.mark.slow
def test_run_recipe_fine_tunes_a_teacher_when_none_is_given(tmp_path, tiny_data):
    from conftest import build_tiny_bert

    base = build_tiny_bert(tmp_path / "base", classifier=False)
    recipe = write_recipe(
        tmp_path, tiny_data, tiny_data, {"max_bytes": 10_000_000},
        teacher={"finetune": {"base": str(base), "epochs": 1, "data": {"max_train": 80}}},
        variants={"small": {}},
    )  # fmt: skip
    assert run_recipe(recipe) == 0
    run = tmp_path / "run"
    assert statuses(run)["teacher"] == "ran"
    assert (run / "teacher" / "config.json").is_file()  # an HF classifier folder
    student = yaml.safe_load((run / "small" / "student" / "config.yaml").read_text())
    assert Path(student["teacher"]) == run / "teacher"
    assert run_recipe(recipe) == 0 and statuses(run)["teacher"] == "cached"


def test_recipe_export_takes_an_early_exit_threshold_rule_from_the_budget(
    tmp_path, tiny_teacher, tiny_data
):
    bert = {"name": "bert", "options": {"layers": 2}}
    variants = {
        "plain": {},
        "exits": {"student": {"options": {"early_exit": True}}},
        "given": {"student": {"options": {"early_exit": True}}, "export": {"exit_threshold": 0.2}},
    }
    path = write_recipe(
        tmp_path, tiny_teacher, tiny_data, {"min_agreement": 0.97, "min_accuracy": 0.8},
        variants=variants,
    )  # fmt: skip
    raw = yaml.safe_load(path.read_text())
    raw["distill"]["student"] = bert
    path.write_text(yaml.safe_dump(raw))
    recipe = load_recipe(path)
    exits = recipe.export_config("exits")
    assert (exits.exit_min_agreement, exits.exit_min_accuracy) == (0.97, 0.8)
    # A student without exits keeps its export (and its cached stage) as it was.
    plain = recipe.export_config("plain")
    assert (plain.exit_min_agreement, plain.exit_min_accuracy) == (0.99, None)
    given = recipe.export_config("given")
    assert given.exit_threshold == 0.2 and given.exit_min_agreement == 0.99


def test_recipe_profile_and_plan_sections_default_as_their_stage_configs_do(
    tmp_path, tiny_teacher, tiny_data
):
    from edgekd.config import PlanConfig, ProfileConfig
    from edgekd.recipe import PlanStage, ProfileStage

    profile, timing = ProfileStage(), ProfileConfig()
    assert (profile.devices, profile.runs, profile.trials, profile.warmup) == (
        timing.devices, timing.runs, timing.trials, timing.warmup,
    )  # fmt: skip
    plan, planned = PlanStage(), PlanConfig(teacher="t", data={"spec": "d"})
    assert (plan.top, plan.runs, plan.trials, plan.seq_len) == (
        planned.top, planned.runs, planned.trials, planned.seq_len,
    )  # fmt: skip
    # The profile stage runs the ProfileConfig its section states, at the run's length.
    recipe = load_recipe(write_recipe(tmp_path, tiny_teacher, tiny_data, {"max_bytes": 1}))
    assert recipe.profile_config(8) == ProfileConfig(runs=6, trials=2, warmup=1, seq_lens=[8])
    # Its threads take ProfileConfig's range: 0 is all cores there and here.
    assert ProfileStage(threads=0).threads == ProfileConfig(threads=0).threads == 0


def test_stage_replaces_its_folder_whole_and_shows_its_result_only_when_it_ran(tmp_path):
    from edgekd.recipe import Stages

    def writing(name: str):
        def stage(folder: Path) -> str:  # as profile and check: files added to a folder
            (folder / name).write_text("{}")
            return name

        return stage

    stages, shown, folder = Stages(tmp_path), [], tmp_path / "profile"
    stages.run("profile", folder, {"v": 1}, writing("a.json"), whole=True, show=shown.append)
    stages.run("profile", folder, {"v": 1}, writing("b.json"), whole=True, show=shown.append)
    assert shown == ["a.json"] and [r.status for r in stages.records] == ["ran", "cached"]
    stages.run("profile", folder, {"v": 2}, writing("b.json"), whole=True, show=shown.append)
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == ["b.json"]
