"""The teacher stage: a fine-tune whose kept weights the selection split chooses."""

import numpy as np
import pytest

from conftest import NATIVE_BF16
from edgekd.config import DataConfig, TeacherConfig
from edgekd.errors import EdgeKDError
from edgekd.stages.teacher import teacher as run_teacher


def test_teacher_keeps_the_step_the_selection_split_chooses_and_reports_its_dev(
    tmp_path, tiny_data, monkeypatch
):
    from conftest import build_tiny_bert
    from edgekd.data import carve_selection, load_task
    from edgekd.distill import teacher as module

    # Scripted scores: the selection rows are all right at the first scoring and all
    # wrong after; dev the reverse. The first step's weights must be kept, and its dev
    # score (0) reported: the later, better dev scores chose nothing.
    task = load_task(DataConfig(spec=str(tiny_data)))
    select = carve_selection(task.train, 500, 0)[1]
    calls = {"select": 0, "dev": 0}
    real = module.teacher_logits

    def scripted(model, tokenizer, texts, **kw):
        if texts not in (select.texts, task.dev.texts):
            return real(model, tokenizer, texts, **kw)
        split, gold = (
            ("select", select.labels) if texts == select.texts else ("dev", task.dev.labels)
        )
        calls[split] += 1
        right = (calls[split] == 1) == (split == "select")
        gold = np.array(gold)
        return np.eye(2, dtype=np.float32)[gold if right else 1 - gold]

    monkeypatch.setattr(module, "teacher_logits", scripted)
    base = build_tiny_bert(tmp_path / "base", classifier=False)
    cfg = TeacherConfig(
        base=str(base), data=DataConfig(spec=str(tiny_data)), epochs=2, batch_size=16,
        max_length=16, eval_every=5, warm_start="none",
    )  # fmt: skip
    m = run_teacher(cfg, tmp_path / "t")
    first = m["history"][0]
    assert (first["selection_accuracy"], first["dev_accuracy"]) == (1.0, 0.0)
    assert all(h["dev_accuracy"] == 1.0 for h in m["history"][1:])
    assert m["best_step"] == first["step"] == 5
    assert (m["dev_accuracy"], m["selection_accuracy"]) == (0.0, 1.0)
    assert m["n_selection"] == 16 and m["n_train"] + 16 + m["n_overlap_dropped"] == 160


class StepClock:
    """A budget clock that advances one second each time the run asks what is left
    (once per step), whatever the machine's speed."""

    def __init__(self, minutes):
        import time

        self.budget_s, self.t, self.start = 60.0 * minutes, 0.0, time.perf_counter()

    def elapsed(self):
        return self.t

    def left(self):
        self.t += 1.0
        return self.budget_s - self.t


def test_teacher_budget_ends_run_in_time_and_resolved_config_reproduces_it(
    tmp_path, tiny_data, monkeypatch
):
    import yaml

    from conftest import build_tiny_bert
    from edgekd.config import TeacherConfig
    from edgekd.distill import timebudget

    monkeypatch.setattr(timebudget, "Clock", StepClock)
    base = build_tiny_bert(tmp_path / "base", classifier=False)
    cfg = TeacherConfig(
        base=str(base), data=DataConfig(spec=str(tiny_data)), epochs=10, batch_size=16,
        time_budget=1.0, patience=100,
    )  # fmt: skip
    m = run_teacher(cfg, tmp_path / "t")
    # 1 step/s and 60 s less a 10 s reserve (and a scoring under 1 s): the run ends at
    # step 49 and cools down over its last fifth, from the first step ≥ 0.8 × 49 = 39.2.
    resolved = yaml.safe_load((tmp_path / "t" / "config.yaml").read_text())
    assert m["steps"] == 49
    assert resolved["schedule"] == {"steps": 49, "decay_from": 40, "decay_to": 49}
    assert resolved["time_budget"] is None and resolved["max_length"] >= 16
    monkeypatch.undo()  # the rerun runs on the real clock, with no budget at all
    again = run_teacher(TeacherConfig(**resolved), tmp_path / "again")
    assert again["steps"] == 49
    weights = "model.safetensors"
    assert (tmp_path / "t" / weights).read_bytes() == (tmp_path / "again" / weights).read_bytes()


def test_teacher_probe_is_first_candidate_and_fine_tuning_must_beat_it(
    tmp_path, tiny_data, monkeypatch
):
    from conftest import build_tiny_bert

    # Scripted selection scores: the probe (step 0) scores 1.0 and every later scoring
    # 0.0; the probe's weights are kept, and they are the warm-started head.
    script_selection(monkeypatch, tiny_data, lambda n: 0 if n == 1 else 10**6)
    base = build_tiny_bert(tmp_path / "base", classifier=False)
    cfg = TeacherConfig(
        base=str(base), data=DataConfig(spec=str(tiny_data)), epochs=2, batch_size=16
    )
    m = run_teacher(cfg, tmp_path / "t")
    assert m["history"][0]["step"] == 0 and m["best_step"] == 0
    assert m["selection_accuracy"] == 1.0 and m["steps"] > 0


def test_teacher_patience_counts_from_the_weights_kept_not_the_best_score(
    tmp_path, tiny_data, monkeypatch
):
    from conftest import build_tiny_bert

    # Scripted selection scores: 14 of 16 rows right at the first scoring, 13 after.
    # 13/16 is within two standard errors of 14/16 (±0.165), so each later epoch's
    # weights are kept and the run is never stale: 4 epochs of 9 steps, the cool-down
    # from the epoch cap (0.8 × 36 = 28.8 → step 29). Counted from the best score
    # (epoch 1), patience 2 would have started a cool-down at step 27 and ended at 34.
    script_selection(monkeypatch, tiny_data, lambda n: 2 if n == 1 else 3)
    base = build_tiny_bert(tmp_path / "base", classifier=False)
    cfg = TeacherConfig(
        base=str(base), data=DataConfig(spec=str(tiny_data)), epochs=4, batch_size=16,
        max_length=16, eval_every=1000, warm_start="none", patience=2, time_budget=None,
    )  # fmt: skip
    m = run_teacher(cfg, tmp_path / "t")
    per_epoch = -(-m["n_train"] // 16)
    assert per_epoch == 9 and m["steps"] == 36
    assert m["history"][-1]["decay"] == [29, 36] and m["best_step"] == 36


def script_selection(monkeypatch, tiny_data, wrong_at):
    """Make the selection split score as scripted: at the n-th scoring (1-based) the
    first `wrong_at(n)` selection rows are predicted wrong, the rest right; other
    texts go through the real teacher."""
    from edgekd.data import carve_selection, load_task
    from edgekd.distill import teacher as module

    task = load_task(DataConfig(spec=str(tiny_data)))
    select = carve_selection(task.train, 500, 0)[1]
    real = module.teacher_logits
    calls = {"n": 0}

    def scripted(model, tokenizer, texts, **kw):
        if texts != select.texts:
            return real(model, tokenizer, texts, **kw)
        calls["n"] += 1
        gold = np.array(select.labels)
        wrong = min(len(gold), wrong_at(calls["n"]))
        return np.eye(2, dtype=np.float32)[np.concatenate([1 - gold[:wrong], gold[wrong:]])]

    monkeypatch.setattr(module, "teacher_logits", scripted)


def test_teacher_step_split_into_passes_trains_the_weights_of_one_pass(
    tmp_path, tiny_data, monkeypatch
):
    import json

    from safetensors.numpy import load_file

    from conftest import build_tiny_bert
    from edgekd.distill import teacher as module

    base = build_tiny_bert(tmp_path / "base", classifier=False)
    config = json.loads((base / "config.json").read_text())
    # No dropout: its masks are drawn per pass, so only then are the two runs one sum.
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (base / "config.json").write_text(json.dumps(config))
    passes: list[int] = []
    real = module.length_sorted_batches

    def counted(lengths, batch_size, max_tokens=None):
        parts = real(lengths, batch_size, max_tokens)
        if max_tokens == module.STEP_TOKENS:  # a training step, not a scoring
            passes.append(len(parts))
        return parts

    monkeypatch.setattr(module, "length_sorted_batches", counted)
    cfg = TeacherConfig(
        base=str(base), data=DataConfig(spec=str(tiny_data)), epochs=1, batch_size=16,
        max_length=16, warm_start="none",
    )  # fmt: skip
    weights = {}
    for name, tokens in (("whole", 10**9), ("split", 40)):  # 40 tokens: 2 to 5 rows a pass
        monkeypatch.setattr(module, "STEP_TOKENS", tokens)
        passes.clear()
        run_teacher(cfg, tmp_path / name)
        weights[name] = load_file(str(tmp_path / name / "model.safetensors"))
        assert (max(passes) == 1) == (name == "whole"), passes
    assert sum(passes) >= 3 * len(passes)  # each step of 16 rows took 3 passes or more
    assert weights["whole"].keys() == weights["split"].keys()
    for key, value in weights["whole"].items():
        # The same sums in another order: float32 rounding apart, nothing more.
        np.testing.assert_allclose(weights["split"][key], value, rtol=0, atol=2e-5, err_msg=key)


@pytest.mark.parametrize("precision", ["fp32", pytest.param("bf16", marks=NATIVE_BF16)])
def test_teacher_steps_forward_in_its_precision_and_scores_in_fp32(
    tmp_path, tiny_data, monkeypatch, precision
):
    import torch

    from conftest import build_tiny_bert
    from edgekd.distill import teacher as module

    # A hook on every Linear layer records (training?, output dtype) of each forward:
    # the fine-tune's steps run in `precision`, the probe and the scorings (eval mode) in
    # fp32, and the loss always reads fp32 logits.
    seen: set[tuple[bool, torch.dtype]] = set()
    losses: set[torch.dtype] = set()
    real_build, real_ce = module.build_classifier, torch.nn.functional.cross_entropy

    def hooked(*a, **k):
        model, tokenizer, pooling = real_build(*a, **k)
        for layer in model.modules():
            if isinstance(layer, torch.nn.Linear):
                layer.register_forward_hook(lambda m, _i, out: seen.add((m.training, out.dtype)))
        return model, tokenizer, pooling

    def ce(logits, *a, **k):
        losses.add(logits.dtype)
        return real_ce(logits, *a, **k)

    monkeypatch.setattr(module, "build_classifier", hooked)
    monkeypatch.setattr(torch.nn.functional, "cross_entropy", ce)
    base = build_tiny_bert(tmp_path / "base", classifier=False)
    cfg = TeacherConfig(
        base=str(base), data=DataConfig(spec=str(tiny_data)), epochs=1, batch_size=16,
        max_length=16, precision=precision,
    )  # fmt: skip
    run_teacher(cfg, tmp_path / "t")
    stepped = torch.bfloat16 if precision == "bf16" else torch.float32
    assert seen == {(True, stepped), (False, torch.float32)}
    assert losses == {torch.float32}
    assert f"precision: {precision}" in (tmp_path / "t" / "config.yaml").read_text()


@NATIVE_BF16
def test_teacher_same_seed_gives_identical_teacher_when_bf16(tmp_path, tiny_data):
    from safetensors.numpy import load_file

    from conftest import build_tiny_bert

    base = build_tiny_bert(tmp_path / "base", classifier=False)
    weights = {}
    for name, precision in (("a", "bf16"), ("b", "bf16"), ("c", "fp32")):
        cfg = TeacherConfig(
            base=str(base), data=DataConfig(spec=str(tiny_data)), epochs=1, batch_size=16,
            max_length=16, warm_start="none", precision=precision,
        )  # fmt: skip
        run_teacher(cfg, tmp_path / name)
        weights[name] = load_file(str(tmp_path / name / "model.safetensors"))
    a, b, c = weights["a"], weights["b"], weights["c"]
    assert all((a[k] == b[k]).all() for k in a)
    assert any((a[k] != c[k]).any() for k in a)  # the steps did run in bf16
    assert all(v.dtype == np.float32 for v in a.values())  # fp32 weights, as fp32 runs'


def test_teacher_refuses_bf16_before_reading_data_when_no_native_bf16(
    tmp_path, tiny_data, monkeypatch
):
    from edgekd.distill import trainer
    from edgekd.stages import teacher as stage

    def no_data(*a, **k):
        raise AssertionError("the data was read before the refusal")

    monkeypatch.setattr(trainer, "native_bf16", lambda: False)
    monkeypatch.setattr(stage, "load_task", no_data)
    cfg = TeacherConfig(data=DataConfig(spec=str(tiny_data)), precision="bf16")
    with pytest.raises(EdgeKDError, match=r"precision bf16: .*use precision=fp32"):
        run_teacher(cfg, tmp_path / "out")
    assert not (tmp_path / "out").exists()
