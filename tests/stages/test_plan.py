"""`edgekd plan`: untrained candidates exported, bundled and timed; the ones that fit
the budget ranked; a recipe with `variants: plan` distils the top ones."""

import json

import pytest
import yaml

from conftest import FEW_VARIANTS
from edgekd.artifacts import PlanResult
from edgekd.budget import Budget
from edgekd.config import DEFAULT_GRID, DataConfig, DistillConfig, ExportConfig, PlanConfig
from edgekd.data import carve_selection, load_task, varied_rows
from edgekd.errors import EdgeKDError
from edgekd.stages.plan import candidate_name, plan

SMALL = {"name": "bilstm", "options": {"hidden_size": 4, "embedding_dim": 8, "mlp_size": 8}}
LARGE = {"name": "bilstm", "options": {"hidden_size": 64, "embedding_dim": 64, "mlp_size": 64}}
# int8 BiLSTMs on the tiny task's ~40-token vocabulary: SMALL is a few kB, LARGE ~90 kB
# (2 directions × 4 gates × 64 × (64 + 64) weights alone are 65k bytes in int8).
MAX_BYTES = 30_000


def config(teacher, data, **kw) -> PlanConfig:
    return PlanConfig(
        teacher=str(teacher),
        data=DataConfig(spec=str(data)),
        grid=kw.pop("grid", [LARGE, SMALL]),
        runs=10,
        trials=2,
        export=ExportConfig(guard=False),
        **kw,
    )


def test_default_grid_is_six_bilstms_three_cnns_and_four_berts():
    bilstm = {
        (c["options"]["hidden_size"], c["options"]["embedding_dim"]) for c in DEFAULT_GRID[:6]
    }
    assert bilstm == {(h, e) for h in (64, 150, 300) for e in (64, 128)}
    assert [(c["name"], c["options"]) for c in DEFAULT_GRID[6:9]] == [
        ("cnn", {"filters": k}) for k in (64, 128, 256)
    ]
    bert = [c["options"] for c in DEFAULT_GRID[9:]]
    assert {(o["layers"], o["hidden"]) for o in bert} == {(2, 128), (2, 256), (4, 128), (4, 256)}
    assert all(o["heads"] * 64 == o["hidden"] and o["ffn"] == 4 * o["hidden"] for o in bert)
    names = [candidate_name(c) for c in PlanConfig(teacher="t", data={"spec": "d"}).grid]
    assert len(set(names)) == 13 and names[0] == "bilstm-h64-e64" and names[6] == "cnn-k64"
    assert names[-1] == "bert-l4-w256-a4-f1024"


def test_plan_config_refuses_an_unknown_student_naming_the_valid_ones():
    with pytest.raises(EdgeKDError, match="bilstm"):
        from edgekd.config import validate

        validate(PlanConfig, {"teacher": "t", "data": {"spec": "d"}, "grid": ["lstm9"]}, "plan")


def test_plan_keeps_the_candidates_that_fit_and_ranks_them(tiny_teacher, tiny_data, tmp_path):
    result = plan(config(tiny_teacher, tiny_data), Budget(max_bytes=MAX_BYTES), tmp_path / "p")
    assert PlanResult.read(tmp_path / "p") == result
    small, large = result.candidates  # the fitting one first
    assert small.student == SMALL and small.fits and small.bytes <= MAX_BYTES
    assert large.student == LARGE and not large.fits and large.failed == ["max_bytes"]
    assert large.bytes > MAX_BYTES and large.params > small.params
    # A bundle ships the model with its tokenizer and labels: more than the model alone.
    assert small.bundle_bytes > small.bytes and small.p90_ms and small.peak_rss_mb
    assert result.top(3) == [small] and result.limits == {"max_bytes": MAX_BYTES}
    # What a default distill run would size from the data: 160 rows less 16 held out
    # (and their repeats), two labels, ⌈300,000 / ≤ 144⌉ → the cap of 200 per text, for
    # each text varied: those no other row contains.
    shape = result.task_shape
    assert shape is not None and (shape.labels, shape.selection_rows) == (2, 16)
    assert 130 <= shape.rows <= 144 and shape.variants_per_text == 200
    d = DistillConfig(teacher="-")
    train, _, _ = carve_selection(
        load_task(DataConfig(spec=str(tiny_data))).train, d.selection_rows, d.seed
    )
    assert len(train) == shape.rows
    assert shape.candidates_at_most == len(varied_rows(train.texts, "maximal")) * 200
    assert shape.min_per_class <= shape.median_per_class <= 144


def test_plan_builds_each_candidate_with_the_options_distill_would_resolve(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # A small task's distill keeps 10,000 more teacher pieces and starts from the
    # teacher's outputs: plan must size the table that run would ship, not a large task's.
    from edgekd.students.bilstm import BiLSTMStudent

    prepared: list[dict] = []
    real = BiLSTMStudent.prepare.__func__  # type: ignore[attr-defined]

    def spy(cls, options, *args):
        prepared.append(dict(options))
        return real(cls, options, *args)

    monkeypatch.setattr(BiLSTMStudent, "prepare", classmethod(spy))
    plan(config(tiny_teacher, tiny_data, grid=[SMALL]), Budget(max_bytes=MAX_BYTES), tmp_path / "p")
    assert prepared == [{**SMALL["options"], "init": "teacher-output", "extra_pieces": 10_000}]


def test_plan_ranks_fitting_candidates_largest_first(tiny_teacher, tiny_data, tmp_path):
    result = plan(config(tiny_teacher, tiny_data), Budget(max_bytes=10_000_000), tmp_path / "p")
    assert [c.student for c in result.top(2)] == [LARGE, SMALL]


def test_plan_refuses_a_budget_with_no_shape_limit_before_any_work(
    tiny_teacher, tiny_data, tmp_path
):
    with pytest.raises(EdgeKDError, match="nothing to fit"):
        plan(config(tiny_teacher, tiny_data), Budget(min_accuracy=0.9), tmp_path / "p")
    assert not (tmp_path / "p").exists()


# More layers than the tiny teacher's 2: a BERT student copies its layers from the teacher.
DEEP = {"name": "bert", "options": {"layers": 4, "hidden": 32, "heads": 2, "ffn": 64}}


def test_plan_leaves_out_default_candidates_the_teacher_cannot_give(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    import edgekd.config

    monkeypatch.setattr(edgekd.config, "DEFAULT_GRID", [SMALL, DEEP])
    cfg = PlanConfig(
        teacher=str(tiny_teacher), data=DataConfig(spec=str(tiny_data)), runs=10, trials=2,
        export=ExportConfig(guard=False),
    )  # fmt: skip
    result = plan(cfg, Budget(max_bytes=MAX_BYTES), tmp_path / "p")
    assert [c.student for c in result.candidates] == [SMALL]
    assert list(result.skipped) == ["bert-l4-w32-a2-f64"]
    assert "the teacher only 2" in result.skipped["bert-l4-w32-a2-f64"]
    assert PlanResult.read(tmp_path / "p").skipped == result.skipped


def test_plan_refuses_a_written_candidate_the_teacher_cannot_give_before_any_work(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    import edgekd.stages.plan

    measured = []
    monkeypatch.setattr(edgekd.stages.plan, "measure", lambda *a, **k: measured.append(a))
    with pytest.raises(EdgeKDError, match=r"plan candidate bert-l4-w32-a2-f64: .*fix the grid"):
        plan(
            config(tiny_teacher, tiny_data, grid=[SMALL, DEEP]), Budget(max_bytes=1), tmp_path / "p"
        )
    assert measured == [] and not (tmp_path / "p").exists()


@pytest.mark.slow
def test_recipe_with_variants_plan_distils_the_top_candidate(tiny_teacher, tiny_data, tmp_path):
    from edgekd.recipe import run_recipe

    recipe = {
        "name": "planned",
        "out": str(tmp_path / "run"),
        "data": {"spec": str(tiny_data)},
        "teacher": {"path": str(tiny_teacher)},
        "distill": {"epochs": 1, "augment": {"n_iter": FEW_VARIANTS}},  # the plan is the subject
        "variants": "plan",
        "plan": {"grid": [LARGE, SMALL], "top": 1, "runs": 6, "trials": 2},
        "export": {"guard": False},
        "profile": {"runs": 6, "trials": 2, "warmup": 1, "seq_len": 8, "teacher": False},
        "budget": {"max_bytes": MAX_BYTES},
        "report": False,
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    assert run_recipe(path) == 0
    stages = [
        s["stage"] for s in json.loads((tmp_path / "run" / "manifest.json").read_text())["stages"]
    ]
    small = candidate_name(_component(SMALL))
    assert stages[0] == "plan" and f"distill {small}" in stages
    assert not any(candidate_name(_component(LARGE)) in s for s in stages)


@pytest.mark.slow
def test_recipe_plan_leaves_out_default_candidates_the_teacher_cannot_give(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    import edgekd.config
    from edgekd.recipe import run_recipe

    monkeypatch.setattr(edgekd.config, "DEFAULT_GRID", [SMALL, DEEP])  # no plan.grid below
    recipe = {
        "name": "planned", "out": str(tmp_path / "run"), "data": {"spec": str(tiny_data)},
        "teacher": {"path": str(tiny_teacher)},
        "distill": {"epochs": 1, "augment": {"n_iter": FEW_VARIANTS}},
        "variants": "plan", "plan": {"top": 1, "runs": 6, "trials": 2},
        "export": {"guard": False},
        "profile": {"runs": 6, "trials": 2, "warmup": 1, "seq_len": 8, "teacher": False},
        "budget": {"max_bytes": MAX_BYTES}, "report": False,
    }  # fmt: skip
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    assert run_recipe(path) == 0
    planned = PlanResult.read(tmp_path / "run" / "plan")
    assert [c.student for c in planned.candidates] == [SMALL]
    assert list(planned.skipped) == [candidate_name(_component(DEEP))]


def test_recipe_plan_times_candidates_with_the_recipes_student_options(tmp_path):
    from edgekd.recipe import Recipe

    recipe = Recipe.model_validate(
        {
            "name": "r",
            "data": {"spec": "d"},
            "distill": {"student": {"name": "bilstm", "options": {"mlp_size": 32}}},
            "variants": "plan",
            "plan": {"grid": [SMALL, {"name": "bert", "options": {"layers": 1}}]},
            "budget": {"max_bytes": 1},
        }
    )
    small, bert = recipe.plan_config("teacher").grid
    # SMALL sets mlp_size itself (8): the candidate's own option wins; BERT takes none.
    assert small.options == SMALL["options"] and bert.options == {"layers": 1}
    recipe = recipe.model_copy(update={"plan": recipe.plan.model_copy(update={"grid": [LARGE]})})
    (large,) = recipe.plan_config("teacher").grid
    assert large.options == LARGE["options"]  # LARGE sets mlp_size too
    no_mlp = {"name": "bilstm", "options": {"hidden_size": 32}}
    recipe = recipe.model_copy(update={"plan": recipe.plan.model_copy(update={"grid": [no_mlp]})})
    (merged,) = recipe.plan_config("teacher").grid
    assert merged.options == {"mlp_size": 32, "hidden_size": 32}


def _component(c):
    from edgekd.registry import Component

    return Component.model_validate(c)
