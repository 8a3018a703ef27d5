"""--time-budget: the plan's arithmetic, the chunked labelling it drives, and a run
that records what it chose and resolves to a config that reproduces it."""

import json
import math
from collections import Counter

import numpy as np
import pytest
import yaml
from safetensors.torch import load_file

from conftest import SMALL_BILSTM
from edgekd.config import AugmentConfig, DataConfig, DistillConfig
from edgekd.distill import labeling
from edgekd.distill.labeling import AugmentedPlan, Meter, augmented_chunks, label_chunks
from edgekd.distill.timebudget import Clock, augmented_room, make_plan, plan_epochs


class FixedClock(Clock):
    def __init__(self, minutes, elapsed):
        super().__init__(minutes, start=0.0)
        self.now = elapsed

    def elapsed(self):
        return self.now


def test_plan_epochs_fits_whole_epochs_within_one_and_max():
    # 600 s at 1,000 rows/s over 150,000 rows: 4 epochs (4.0 exactly).
    assert plan_epochs(600, 150_000, 1_000, 10) == 4
    assert plan_epochs(599, 150_000, 1_000, 10) == 3
    assert plan_epochs(10_000, 150_000, 1_000, 5) == 5  # capped by `epochs`
    assert plan_epochs(-30, 150_000, 1_000, 5) == 1  # over budget already: one pass


def test_augmented_room_keeps_min_epochs_over_the_grown_set():
    clock = FixedClock(minutes=10, elapsed=100.0)  # 500 s left
    room = augmented_room(clock, n_train=50_000, train_rate=1_000, min_epochs=3, reserve_s=20)
    # 3 × (50,000 + 100,000) / 1,000 = 450 s; 100 + 450 + 20 = 570 ≤ 600.
    assert room(100_000, 0.0)
    # The same rows cost 40 s of labelling: 610 > 600.
    assert not room(100_000, 40.0)
    assert room(110_000, 0.0)  # 100 + 3 × 160 + 20 = 600 s: exactly the budget
    assert not room(111_000, 0.0)  # 603 s


def test_augmented_room_counts_rows_trained_while_labelling_but_keeps_one_whole_epoch():
    clock = FixedClock(minutes=10, elapsed=100.0)
    room = augmented_room(clock, n_train=50_000, train_rate=1_000, min_epochs=3, reserve_s=20)
    # Without credit: 3 × 200,000 rows / 1,000 = 600 s; 100 + 600 + 20 = 720 > 600.
    assert not room(150_000, 0.0)
    # The early passes stepped 3,000 rows/s × 100 s of labelling = 300,000 rows: 300,000
    # owed, 300 s; 100 + 100 + 300 + 20 = 520 ≤ 600. Credit read at 0 s would be 820 s.
    credited = augmented_room(
        clock, 50_000, 1_000, 3, reserve_s=20, trained=lambda label_s: 3_000 * label_s
    )
    assert credited(150_000, 100.0)
    # 590,000 rows already stepped leave 10,000 owed, but one whole epoch (200,000
    # rows, 200 s) is always kept: 100 + 280 + 200 + 20 = 600 fits, 290 s does not.
    nearly_done = augmented_room(clock, 50_000, 1_000, 3, reserve_s=20, trained=lambda s: 590_000)
    assert nearly_done(150_000, 280.0)
    assert not nearly_done(150_000, 290.0)


def test_make_plan_says_what_bound_the_choice():
    cfg = DistillConfig(teacher="t", epochs=10)
    clock = FixedClock(minutes=10, elapsed=200.0)
    cut = make_plan(clock, cfg, 1_000.0, 800.0, 50_000, candidates=100_000, kept=40_960)
    # (600 − 200 − 20) s × 1,000 rows/s / 90,960 rows = 4.2 → 4 epochs.
    assert (cut.epochs, cut.augmented_rows, cut.augmented_candidates) == (4, 40_960, 100_000)
    assert cut.why.startswith("40,960 of 100,000 augmented rows")
    every = make_plan(clock, cfg, 1_000.0, None, 50_000, candidates=0, kept=0)
    assert every.epochs == 7 and "7 of 10 epochs" in every.why  # 380 s × 1,000 / 50,000
    roomy = make_plan(FixedClock(60, 0.0), cfg, 1_000.0, None, 50_000, 0, 0)
    assert roomy.epochs == 10 and roomy.why.startswith("everything fits")
    late = make_plan(FixedClock(1, 100.0), cfg, 1_000.0, None, 50_000, 0, 0)
    assert late.epochs == 1 and "over budget" in late.why


def test_make_plan_buys_epochs_up_to_the_cap_when_epochs_unset():
    cfg = DistillConfig(teacher="t")  # epochs unset: the budget's cap is 200
    assert cfg.epochs is None and cfg.max_epochs == 200
    # (3,600 − 0 − 20) s × 1,000 rows/s / 50,000 rows = 71.6 → 71 epochs, not 10.
    roomy = make_plan(FixedClock(60, 0.0), cfg, 1_000.0, None, 50_000, 0, 0)
    assert roomy.epochs == 71 and roomy.why == "every augmented row; 71 epochs fit the budget"
    few = make_plan(FixedClock(600, 0.0), cfg, 1_000.0, None, 500, 0, 0)
    assert few.epochs == 200 and few.why.startswith("everything fits")


def test_max_epochs_is_the_default_without_a_budget_and_the_value_when_set():
    assert DistillConfig(teacher="t", time_budget=None).max_epochs == 10
    assert DistillConfig(teacher="t", epochs=4).max_epochs == 4
    assert DistillConfig(teacher="t", epochs=4, time_budget=None).max_epochs == 4


def test_augmented_chunks_sit_at_fixed_offsets_under_any_cap():
    texts = [str(i) for i in range(20_000)]
    assert augmented_chunks(texts, None) == [(0, 8192), (8192, 16384), (16384, 20000)]
    # A cap shares every whole chunk with a larger cap: their cached labels too.
    assert augmented_chunks(texts, 10_000) == [(0, 8192), (8192, 10000)]


def _cfg(tmp_path):
    return DistillConfig(teacher="t", cache_dir=str(tmp_path / "cache"))


def test_label_chunks_stops_where_room_says_and_charges_nothing_for_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(labeling, "AUGMENT_CHUNK", 4)
    texts = [f"{i}.0" for i in range(10)]
    calls = []

    def labeler(rows, what):
        calls.append(list(rows))
        return np.array([[0.0, float(t)] for t in rows], dtype=np.float32)

    asked = []

    def room(rows, seconds):
        asked.append((rows, seconds))
        return rows <= 8

    cfg = _cfg(tmp_path)
    meter = Meter()
    out, hit = label_chunks(cfg, "fp", texts, labeler, "onnx", 2, AugmentedPlan(room=room), meter)
    np.testing.assert_allclose(out[:, 1], range(8))  # the prefix that fit: chunks 1 and 2
    assert calls == [texts[:4], texts[4:8]] and not hit and meter.rows == 8
    # The first chunk's cost is unknown (no rate yet); later ones come from the meter.
    assert asked[0] == (4, 0.0) and asked[1][1] > 0 and asked[2][0] == 10
    calls.clear()
    again, hit = label_chunks(cfg, "fp", texts, labeler, "onnx", 2, AugmentedPlan(limit=8), Meter())
    np.testing.assert_allclose(again, out)
    assert calls == [] and hit  # both chunks read back from the cache
    none, _ = label_chunks(
        cfg, "fp", texts, labeler, "onnx", 2, AugmentedPlan(room=lambda r, s: False), Meter()
    )
    assert none.shape == (0, 2)


def _run(tiny_teacher, tiny_data, **kw):
    aug = AugmentConfig(methods=["mask", "ngram"], n_iter=3)
    base = {
        "teacher": str(tiny_teacher),
        "data": DataConfig(spec=str(tiny_data)),
        "epochs": 3,
        "batch_size": 16,
        "student": {"name": "bilstm", "options": SMALL_BILSTM},
        "augment": aug,
    }
    return DistillConfig(**{**base, **kw})


def test_run_distill_with_roomy_budget_keeps_everything_and_resolves_it(
    tiny_teacher, tiny_data, tmp_path
):
    from edgekd.stages.distill import distill as run_distill

    m = run_distill(_run(tiny_teacher, tiny_data, time_budget=30.0), tmp_path / "a")
    plan = m.time_plan
    assert plan is not None and plan.why.startswith("everything fits")
    assert plan.epochs == 3 and plan.augmented_rows == plan.augmented_candidates > 0
    assert plan.train_rows_per_s > 0 and m.epochs_run == 3
    resolved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert resolved["time_budget"] is None and resolved["epochs"] == 3
    assert resolved["augment"]["max_rows"] == plan.augmented_rows
    assert resolved["augment"]["n_iter"] == 3
    # The resolved config, rerun without a budget, trains the same student.
    again = DistillConfig(**resolved)
    from edgekd.stages.distill import distill as rerun

    rerun(again, tmp_path / "b")
    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in "ab")
    assert all((a[k] == b[k]).all() for k in a)


def test_run_distill_with_tiny_budget_drops_augmentation_and_epochs(
    tiny_teacher, tiny_data, tmp_path
):
    from edgekd.stages.distill import distill as run_distill

    m = run_distill(_run(tiny_teacher, tiny_data, time_budget=0.001), tmp_path / "a")
    plan = m.time_plan
    assert plan is not None and plan.augmented_rows == 0 and m.n_augmented == 0
    assert plan.epochs == 1 and m.epochs_run == 1 and "over budget" in plan.why
    # Its resolved config says "no augmented rows" in a form that reads back.
    resolved = DistillConfig(**yaml.safe_load((tmp_path / "a" / "config.yaml").read_text()))
    assert resolved.augment.max_rows == 0 and resolved.epochs == 1


def test_run_distill_plans_epochs_at_the_probe_taken_after_labelling(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # The first probe (before labelling) sizes the augmented rows; the second, taken
    # just before training, plans the epochs: its rate is the one recorded.
    from edgekd.stages import distill as stage

    # The first reads fast (every variant labelled), the second 0.2 rows/s: one epoch of
    # the few hundred rows fits the 30 minutes, where the first rate planned all 3.
    rates = iter([1e9, 0.2])
    monkeypatch.setattr(stage, "probe_train_rate", lambda *a, **k: next(rates))
    m = stage.distill(_run(tiny_teacher, tiny_data, time_budget=30.0), tmp_path / "a")
    assert m.time_plan is not None and m.time_plan.train_rows_per_s == 0.2
    assert m.time_plan.epochs == 1
    assert next(rates, None) is None  # probed exactly twice


def test_run_distill_takes_the_main_process_plan_not_its_own(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # Under `accelerate launch` each process measures its own rates; the plan trained
    # is the main process's, whatever this one computed.
    from edgekd.artifacts import TimePlan
    from edgekd.stages import distill as stage

    def main(value):
        mains = {"why": "the main process's plan"}
        return value.model_copy(update=mains) if isinstance(value, TimePlan) else value

    monkeypatch.setattr(stage, "main_choice", main)
    m = stage.distill(_run(tiny_teacher, tiny_data, time_budget=30.0), tmp_path / "a")
    assert m.time_plan is not None and m.time_plan.why == "the main process's plan"


def test_run_distill_stops_where_the_main_process_says_its_loss_plateaued(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # This process's loss still falls after epoch 1 (3 epochs run alone); the main's
    # answer "plateaued" ends every process's loop at the same epoch. No budget: the
    # plateau's is then the only yes-or-no the loop takes from the main process.
    from edgekd.distill import trainer
    from edgekd.stages import distill as stage

    alone = stage.distill(_run(tiny_teacher, tiny_data, time_budget=None), tmp_path / "alone")
    assert alone.epochs_run == 3
    monkeypatch.setattr(trainer, "main_choice", lambda v: True if isinstance(v, bool) else v)
    m = stage.distill(_run(tiny_teacher, tiny_data, time_budget=None), tmp_path / "a")
    assert m.epochs_run == 1


def test_run_distill_stops_after_an_epoch_when_the_next_would_overrun(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # The probe reads fast (every epoch planned), the epochs then run slower than it
    # said: the check after epoch 1 finds no time for epoch 2 and ends the run there.
    from edgekd.stages import distill as stage

    monkeypatch.setattr(stage, "probe_train_rate", lambda *a, **k: 1e9)
    monkeypatch.setattr(stage, "RESERVE_S", 30 * 60.0)  # training's share: none left
    m = stage.distill(_run(tiny_teacher, tiny_data, time_budget=30.0), tmp_path / "a")
    assert m.time_plan is not None and m.time_plan.epochs == 3
    assert m.time_plan.cut_after == 1 and m.epochs_run == 1 and m.best_epoch == 1
    resolved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert resolved["epochs"] == 1  # the epochs run, so a rerun gives this student
    stage.distill(DistillConfig(**resolved), tmp_path / "b")
    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in "ab")
    assert all((a[k] == b[k]).all() for k in a)


def test_part_of_epoch_fits_the_steps_the_time_left_holds_at_the_last_epochs_pace():
    from edgekd.distill.trainer import part_of_epoch

    # SST-2 at 5 minutes: a 40 s epoch of 2,300 steps, 29 s left: ⌊29 / 40 × 2,300⌋.
    assert part_of_epoch(40.0, 29.0, 2_300) == 1_667
    assert part_of_epoch(40.0, 4.0, 2_300) == 230  # a tenth of an epoch: still worth it
    assert part_of_epoch(40.0, 3.9, 2_300) is None  # 224 steps, under a tenth
    assert part_of_epoch(40.0, -5.0, 2_300) is None  # past the budget already
    assert part_of_epoch(1.0, 0.5, 3) == 1  # ⌈0.3⌉ = 1 step is the least part
    assert part_of_epoch(40.0, 40.0, 100) == 99  # a whole epoch is no part of one


def test_run_distill_trains_the_part_of_an_epoch_the_clock_leaves_and_reruns_to_it(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # Epoch 1 ends with no whole epoch left in the budget; the time left holds 3 steps
    # of epoch 2 (injected: the clock's share is the rule's, tested above). The run
    # trains them, records them, and its resolved config reruns to the same student.
    from edgekd.distill import trainer
    from edgekd.stages import distill as stage

    monkeypatch.setattr(stage, "probe_train_rate", lambda *a, **k: 1e9)
    monkeypatch.setattr(stage, "RESERVE_S", 30 * 60.0)  # training's share: none left
    monkeypatch.setattr(trainer, "part_of_epoch", lambda took, left, steps: 3)
    m = stage.distill(_run(tiny_teacher, tiny_data, time_budget=30.0), tmp_path / "a")
    assert m.epochs_run == 2 and [h["steps"] for h in m.history][1] == 3
    assert m.history[0]["steps"] > 3  # epoch 1 whole
    assert m.time_plan is not None and m.time_plan.cut_after == 2
    assert m.time_plan.last_epoch_steps == 3
    resolved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert (resolved["epochs"], resolved["last_epoch_steps"]) == (2, 3)
    again = stage.distill(DistillConfig(**resolved), tmp_path / "b")
    assert [h["steps"] for h in again.history] == [h["steps"] for h in m.history]
    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in "ab")
    assert all((a[k] == b[k]).all() for k in a)
    # The same config trained whole, or planned afresh under a budget, is another student.
    whole = DistillConfig(**{**resolved, "last_epoch_steps": None})
    assert stage.distill(whole, tmp_path / "c").history[1]["steps"] > 3
    from edgekd.distill.timebudget import planned_config

    assert planned_config(DistillConfig(**resolved), m.time_plan).last_epoch_steps is None


def test_run_distill_cools_down_over_its_last_fifth_and_reruns_to_it(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # No budget, 5 epochs of L steps: the rate falls to 0 over steps ⌈0.8 × 5L⌉ = 4L
    # to 5L (planned at the end of epoch 4), and the resolved config reruns to them.
    from edgekd.distill import trainer
    from edgekd.stages import distill as stage

    # The last epoch is kept (no selection rows), so the student is the cooled-down one
    # whichever epoch the selection rows would have liked best.
    cfg = _run(
        tiny_teacher, tiny_data, time_budget=None, epochs=5, lr_decay="cooldown", selection_rows=0
    )
    rates: list[float] = []
    real_step = trainer.optimiser_step

    def spy(*a):
        rates.append(a[5])  # the learning rate the step is taken at
        return real_step(*a)

    with monkeypatch.context() as patched:
        patched.setattr(trainer, "optimiser_step", spy)
        m = stage.distill(cfg, tmp_path / "a")
    steps = m.history[0]["steps"]
    # Step s of the cool-down (4L ≤ s < 5L) runs at the full rate × (5L − s) / L.
    assert len(rates) == 5 * steps
    full = rates[4 * steps - 1]
    assert rates[4 * steps :] == pytest.approx(
        [full * (5 * steps - s) / steps for s in range(4 * steps, 5 * steps)]
    )
    assert [h["cooldown"] for h in m.history] == [[None, None]] * 3 + [[4 * steps, 5 * steps]] * 2
    assert m.epochs_run == 5
    resolved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert (resolved["cooldown_from"], resolved["cooldown_to"]) == (4 * steps, 5 * steps)
    stage.distill(DistillConfig(**resolved), tmp_path / "b")
    constant = DistillConfig(**{**resolved, "lr_decay": "none", "cooldown_from": None,
                                "cooldown_to": None})  # fmt: skip
    stage.distill(constant, tmp_path / "c")
    a, b, c = (load_file(str(tmp_path / x / "model.safetensors")) for x in "abc")
    assert all((a[k] == b[k]).all() for k in a)
    assert not all((a[k] == c[k]).all() for k in a)  # the cool-down changed the student


def test_run_distill_starts_its_cool_down_from_the_pace_it_measures_under_a_budget(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # Epochs bought by a budget; after epochs 1, 2, 3 the time left holds 3, 2, 1
    # epochs more (injected: the arithmetic is `steps_that_fit`'s). The run's end is
    # then step 4L every time; its last fifth, ⌈3.2L⌉ to 4L, starts within epoch 4.
    from edgekd.distill import trainer
    from edgekd.stages import distill as stage

    room = iter([3, 2, 1])
    monkeypatch.setattr(stage, "probe_train_rate", lambda *a, **k: 1e9)
    monkeypatch.setattr(trainer, "steps_that_fit", lambda took, left, steps: next(room) * steps)
    cfg = _run(tiny_teacher, tiny_data, time_budget=30.0, epochs=None, lr_decay="cooldown")
    m = stage.distill(cfg, tmp_path / "a")
    steps = m.history[0]["steps"]
    start = math.ceil(3.2 * steps)
    assert m.epochs_run == 4 and m.history[-1]["cooldown"] == [start, 4 * steps]
    assert m.time_plan is not None and m.time_plan.cut_after == 4
    resolved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert resolved["epochs"] == 4 and resolved["time_budget"] is None
    assert (resolved["cooldown_from"], resolved["cooldown_to"]) == (start, 4 * steps)
    again = stage.distill(DistillConfig(**resolved), tmp_path / "b")
    assert again.history[-1]["cooldown"] == [start, 4 * steps]
    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in "ab")
    assert all((a[k] == b[k]).all() for k in a)


def test_run_distill_trains_past_the_forecast_epochs_to_a_cool_down_planned_beyond_them(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # The plan forecasts 2 epochs; after epochs 1, 2, 3 the time left holds 3, 2, 1
    # epochs more, so the run's end is step 4L and its cool-down ⌈3.2L⌉ to 4L, past the
    # forecast. The run trains to it: 4 epochs, the rate at 0 (a loop fixed at the
    # forecast's 2 epochs stopped there, its cool-down never started).
    from edgekd.distill import timebudget, trainer
    from edgekd.stages import distill as stage

    room = iter([3, 2, 1])
    monkeypatch.setattr(stage, "probe_train_rate", lambda *a, **k: 1e9)
    monkeypatch.setattr(timebudget, "plan_epochs", lambda *a, **k: 2)
    monkeypatch.setattr(trainer, "steps_that_fit", lambda took, left, steps: next(room) * steps)
    cfg = _run(tiny_teacher, tiny_data, time_budget=30.0, epochs=None, lr_decay="cooldown")
    m = stage.distill(cfg, tmp_path / "a")
    steps = m.history[0]["steps"]
    assert m.time_plan is not None and m.time_plan.epochs == 2
    assert m.epochs_run == 4 and m.time_plan.cut_after == 4
    assert m.history[-1]["cooldown"] == [math.ceil(3.2 * steps), 4 * steps]


def test_run_distill_cools_down_at_a_plateau_instead_of_stopping(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # The loss plateaus after epoch 2 (2L steps): a cool-down as long as a fifth of the
    # whole run, ⌈2L × 0.2 / 0.8⌉ steps, then the run ends inside epoch 3.
    from edgekd.distill import trainer
    from edgekd.stages import distill as stage

    monkeypatch.setattr(trainer, "plateaued", lambda losses, patience: len(losses) >= 1)
    cfg = _run(
        tiny_teacher, tiny_data, time_budget=30.0, epochs=None, patience=1, lr_decay="cooldown"
    )
    m = stage.distill(cfg, tmp_path / "a")
    steps = m.history[0]["steps"]
    end = 2 * steps + math.ceil(2 * steps * 0.25)
    assert m.history[-1]["cooldown"] == [2 * steps, end]
    assert m.epochs_run == 3 and m.history[-1]["steps"] == end - 2 * steps


def test_cooldown_steps_are_set_together_with_epochs_and_a_cool_down():
    from pydantic import ValidationError

    ok = {"teacher": "t", "epochs": 3, "lr_decay": "cooldown"}
    assert DistillConfig(**ok, cooldown_from=4, cooldown_to=9).cooldown_to == 9
    for bad, match in (
        ({**ok, "cooldown_from": 4}, "set together"),
        ({**ok, "epochs": None, "cooldown_from": 4, "cooldown_to": 9}, "set together"),
        ({**ok, "cooldown_from": 9, "cooldown_to": 9}, "above cooldown_from"),
        ({**ok, "lr_decay": "none", "cooldown_from": 4, "cooldown_to": 9}, "need lr_decay"),
    ):
        with pytest.raises(ValidationError, match=match):
            DistillConfig(**bad)


def test_last_epoch_steps_without_epochs_is_refused():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="set epochs too"):
        DistillConfig(teacher="t", last_epoch_steps=3)
    assert DistillConfig(teacher="t", epochs=2, last_epoch_steps=3).last_epoch_steps == 3


def test_planned_fields_resume_an_interrupted_plan_only_for_the_same_config(tmp_path):
    from edgekd.distill.checkpoint import planned_fields
    from edgekd.io import atomic_dir, write_json

    cfg = DistillConfig(teacher="t", time_budget=10.0)
    planned = cfg.model_copy(
        update={"epochs": 4, "augment": cfg.augment.model_copy(update={"max_rows": 123})}
    )
    folder = tmp_path / ".s.resume"
    with atomic_dir(folder) as tmp:
        write_json(tmp / "state.json", {"config": planned.model_dump(mode="json")})
    fields = planned_fields(folder, cfg)
    assert fields is not None and fields["epochs"] == 4 and fields["augment"].max_rows == 123
    assert planned_fields(folder, cfg.model_copy(update={"seed": 1})) is None
    assert planned_fields(tmp_path / "nowhere", cfg) is None


@pytest.mark.parametrize("minutes", [0, -1])
def test_time_budget_must_be_positive(minutes):
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        DistillConfig(teacher="t", time_budget=minutes)


def test_probe_batches_keep_only_full_batches_when_there_are_enough():
    import random

    from edgekd.distill.timebudget import MIN_FULL_BATCHES, probe_batches

    # 10 full batches of length 3, and 7 lengths with 2 rows each (part-full batches).
    lengths = [3] * (10 * 4) + [n for n in range(10, 17) for _ in range(2)]
    batches = probe_batches(lengths, 4, random.Random(0))
    assert len(batches) == 10 >= MIN_FULL_BATCHES
    assert all(len(b) == 4 and {lengths[i] for i in b} == {3} for b in batches)
    few = probe_batches([3] * 8 + [5, 6], 4, random.Random(0))  # 2 full: time them all
    # A one-row batch trains as that row twice (`bucketed_batches`), so it is timed so.
    assert sorted(len(b) for b in few) == [2, 2, 4, 4]


def test_plan_epochs_fits_every_epoch_when_the_rate_is_unmeasured():
    # Two training rows make one probe batch, none past warm-up: int(inf) was exit 4.
    from edgekd.distill.timebudget import plan_epochs

    assert plan_epochs(60.0, 2, float("inf"), 7) == 7
    assert plan_epochs(60.0, 2, 1.0, 7) == 7 and plan_epochs(1.0, 100, 1.0, 7) == 1


def test_run_distill_resolves_unset_epochs_and_auto_variants_to_numbers(
    tiny_teacher, tiny_data, tmp_path
):
    # No budget: unset epochs mean 10, recorded as 10; auto variants for ~140 training
    # rows (160 less 16 held out to select and their repeats): ⌈300,000 / 141⌉ =
    # 2,128 → the cap, 200.
    from edgekd.stages.distill import distill as run_distill

    cfg = _run(tiny_teacher, tiny_data, time_budget=None, epochs=None, patience=1)
    cfg = cfg.model_copy(update={"augment": AugmentConfig(methods=["mask"], max_rows=50)})
    m = run_distill(cfg, tmp_path / "a")
    resolved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert resolved["epochs"] == 10 and m.epochs_run <= 10
    assert m.n_train + m.n_selection + m.n_overlap_dropped == 160 and m.n_selection == 16
    assert resolved["augment"]["n_iter"] == 200
    assert m.task_shape is not None and m.task_shape.rows == m.n_train


def _shrink_auto(monkeypatch, pool_rows_per_minute: int) -> None:
    """`n_iter: auto` sized for ~140 tiny rows: at least 2 variants per text, no
    300,000-row fill (1 row), and a pool of `pool_rows_per_minute` under a budget."""
    import edgekd.config as config

    monkeypatch.setattr(config, "AUTO_MIN_VARIANTS", 2)
    monkeypatch.setattr(config, "AUTO_VARIANT_ROWS", 1)
    monkeypatch.setattr(config, "AUTO_POOL_ROWS_PER_MINUTE", pool_rows_per_minute)


def test_run_distill_sizes_auto_variants_from_its_budget(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # Sizes shrunk so that ~140 training rows sit below the cap: 2 variants per text for
    # the default budget, ⌈2 × 26 / 13⌉ = 4 for a 26-minute one, recorded as a number.
    # No pool (0 rows a minute): the scale alone.
    from edgekd.stages.distill import distill as run_distill

    _shrink_auto(monkeypatch, 0)
    aug = AugmentConfig(methods=["mask"])
    for minutes, folder, expected in ((13.0, "a", 2), (26.0, "b", 4)):
        cfg = _run(tiny_teacher, tiny_data, time_budget=minutes, epochs=1, augment=aug)
        m = run_distill(cfg, tmp_path / folder)
        resolved = yaml.safe_load((tmp_path / folder / "config.yaml").read_text())
        assert m.task_shape is not None and m.task_shape.variants_per_text == expected
        assert resolved["augment"]["n_iter"] == expected


def test_run_distill_sizes_the_auto_pool_by_the_texts_it_varies(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # A pool of 50 rows a budget minute: 650 rows at 13 minutes, shared by the texts
    # varied (the maximal ones, counted by the run), over the shrunk default's 2.
    from edgekd.data import carve_selection, load_task, varied_rows
    from edgekd.stages.distill import distill as run_distill

    _shrink_auto(monkeypatch, 50)
    aug = AugmentConfig(methods=["mask"])
    cfg = _run(tiny_teacher, tiny_data, time_budget=13.0, epochs=1, augment=aug)
    m = run_distill(cfg, tmp_path / "a")
    train, _, _ = carve_selection(load_task(cfg.data).train, cfg.selection_rows, cfg.seed)
    varied = len(varied_rows(train.texts, "maximal"))
    assert 2 < 650 // varied < 200  # the pool decides, under the cap
    assert m.task_shape is not None and m.task_shape.variants_per_text == 650 // varied
    assert m.task_shape.candidates_at_most == varied * (650 // varied)
    resolved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert resolved["augment"]["n_iter"] == 650 // varied


def test_plateaued_when_the_loss_fell_under_3_percent_over_patience_epochs():
    from edgekd.distill.trainer import plateaued

    assert not plateaued([100.0, 90.0, 80.0], 3)  # too few epochs to tell
    assert not plateaued([100.0, 90.0, 80.0, 96.9], 3)  # 3.1% under epoch 1
    assert plateaued([100.0, 90.0, 80.0, 97.1], 3)  # 2.9%: a plateau
    assert plateaued([100.0, 99.0, 98.5, 98.0, 97.9], 3)  # 99 → 97.9: 1.1%
    assert plateaued([1e-3, 1e-4, 5e-5, 1e-5], 3)  # falling fast, but nothing left


def test_run_distill_stops_budget_bought_epochs_at_a_plateau_and_reruns_to_them(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # Epochs unset: the budget buys them, and a flat loss ends them (here: after epoch
    # 2); the resolved config records 2, so rerunning it gives the same student.
    from edgekd.distill import trainer
    from edgekd.stages import distill as stage

    # The rule reads the losses after the first (scored) epoch: epoch 2's alone, here.
    monkeypatch.setattr(trainer, "plateaued", lambda losses, patience: len(losses) >= 1)
    cfg = _run(tiny_teacher, tiny_data, time_budget=30.0, epochs=None, patience=1)
    m = stage.distill(cfg, tmp_path / "a")
    assert m.epochs_run == 2 and m.time_plan is not None and m.time_plan.cut_after == 2
    resolved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert resolved["epochs"] == 2 and resolved["time_budget"] is None
    stage.distill(DistillConfig(**resolved), tmp_path / "b")  # set epochs: no plateau rule
    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in "ab")
    assert all((a[k] == b[k]).all() for k in a)
    # Epochs the user set are trained as set: the rule is the budget's only.
    m = stage.distill(_run(tiny_teacher, tiny_data, time_budget=30.0), tmp_path / "c")
    assert m.epochs_run == 3


def test_run_distill_trains_epochs_past_the_plan_while_the_clock_has_room(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # The probe after labelling reads so slow a pace that 1 epoch is planned; the epochs
    # then run in a blink of the 30 minutes, so the loop goes on past the forecast, here
    # to the cap of unset epochs (3, shrunk from 200). The resolved config records the 3
    # trained, and rerunning it gives the same student.
    import edgekd.config as config
    from edgekd.stages import distill as stage

    monkeypatch.setattr(config, "BUDGET_MAX_EPOCHS", 3)
    rates = iter([1e9, 1e-3])  # rows sized by the first, epochs planned by the second
    monkeypatch.setattr(stage, "probe_train_rate", lambda *a, **k: next(rates))
    cfg = _run(tiny_teacher, tiny_data, time_budget=30.0, epochs=None)
    m = stage.distill(cfg, tmp_path / "a")
    assert m.time_plan is not None and m.time_plan.epochs == 1
    assert m.epochs_run == 3 and m.time_plan.cut_after == 3
    resolved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert resolved["epochs"] == 3 and resolved["time_budget"] is None
    stage.distill(DistillConfig(**resolved), tmp_path / "b")
    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in "ab")
    assert all((a[k] == b[k]).all() for k in a)
    # Epochs the user set are the most it trains: all 3 of them here, planned 1 or not.
    rates = iter([1e9, 1e-3])
    m = stage.distill(_run(tiny_teacher, tiny_data, time_budget=30.0), tmp_path / "c")
    assert m.time_plan is not None and m.time_plan.epochs == 1 and m.epochs_run == 3
    # A schedule over the planned epochs (a linear decay) must not stretch: 1 trains.
    rates = iter([1e9, 1e-3])
    cfg = _run(tiny_teacher, tiny_data, time_budget=30.0, lr_decay="linear")
    assert stage.distill(cfg, tmp_path / "d").epochs_run == 1


def test_run_distill_resumed_after_its_last_epoch_trains_none_when_a_plateau_ended_it(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # A plateau ends training after epoch 2; the run is killed while it saves its
    # output, after the checkpoint of epoch 2. Rerun, it must not train epoch 3: the
    # first run had decided 2 was the last (it once trained one more, with other weights).
    from edgekd.distill import trainer
    from edgekd.stages import distill as stage

    cfg = _run(tiny_teacher, tiny_data, time_budget=30.0, epochs=None, patience=1)
    with monkeypatch.context() as m:
        m.setattr(trainer, "plateaued", lambda losses, patience: len(losses) >= 1)
        whole = stage.distill(cfg, tmp_path / "whole")

        def killed(*a, **k):
            raise RuntimeError("killed while saving")

        m.setattr(trainer, "plateaued", lambda losses, patience: len(losses) >= 1)
        m.setattr(stage, "save_student", killed)
        with pytest.raises(RuntimeError, match="killed"):
            stage.distill(cfg, tmp_path / "a")
    assert (tmp_path / ".a.resume" / "state.json").is_file() and not (tmp_path / "a").exists()
    # The rerun's own plateau rule would never fire: only the checkpoint can stop it.
    monkeypatch.setattr(trainer, "plateaued", lambda losses, patience: False)
    m = stage.distill(cfg, tmp_path / "a")
    assert m.epochs_run == 2 and [h["epoch"] for h in m.history] == [1, 2]
    resolved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert resolved["epochs"] == 2  # the cut, recorded though this run planned nothing
    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in ("a", "whole"))
    assert all((a[k] == b[k]).all() for k in a) and whole.epochs_run == 2


def _killed_after_checkpoint(monkeypatch, nth: int) -> None:
    """The run dies right after writing its `nth` checkpoint (epoch `nth`)."""
    from edgekd.distill import checkpoint as ckpt

    save, written = ckpt.save, []

    def save_then_die(*a, **k):
        save(*a, **k)
        written.append(1)
        if len(written) == nth:
            raise KeyboardInterrupt("killed after the checkpoint")

    monkeypatch.setattr(ckpt, "save", save_then_die)


def test_run_distill_resumed_under_a_budget_trains_the_epochs_its_clock_has_room_for(
    tiny_teacher, tiny_data, tmp_path, monkeypatch, capsys
):
    # The plan forecasts 1 epoch and the clock buys 2 more (to the cap, shrunk to 3).
    # Killed after epoch 1, the resumed run spends the budget left at the checkpoint:
    # it trains epochs 2 and 3 to the uninterrupted run's weights (with no clock it
    # trained none: the forecast's 1 was done).
    import edgekd.config as config
    from edgekd.stages import distill as stage

    monkeypatch.setattr(config, "BUDGET_MAX_EPOCHS", 3)
    cfg = _run(tiny_teacher, tiny_data, time_budget=30.0, epochs=None)
    with monkeypatch.context() as m:
        rates = iter([1e9, 1e-3])  # rows sized by the first, epochs planned by the second
        m.setattr(stage, "probe_train_rate", lambda *a, **k: next(rates))
        whole = stage.distill(cfg, tmp_path / "whole")
        rates = iter([1e9, 1e-3])
        _killed_after_checkpoint(m, 1)
        with pytest.raises(KeyboardInterrupt):
            stage.distill(cfg, tmp_path / "a")
    state = json.loads((tmp_path / ".a.resume" / "state.json").read_text())
    assert 0 < state["budget_left_s"] < 30 * 60 and state["epoch"] == 1
    assert whole.time_plan is not None and whole.time_plan.epochs == 1 and whole.epochs_run == 3
    capsys.readouterr()
    m = stage.distill(cfg, tmp_path / "a")  # no probe: the checkpoint's plan is kept
    assert m.epochs_run == 3 and [h["epoch"] for h in m.history] == [1, 2, 3]
    # Resumed, not started over (a restart would train the same weights from epoch 1).
    err = capsys.readouterr().err
    assert "resuming from epoch 2" in err
    assert not any(line.startswith("epoch 1:") for line in err.splitlines())
    resolved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert resolved["epochs"] == 3
    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in ("a", "whole"))
    assert all((a[k] == b[k]).all() for k in a)


def test_run_distill_resumed_spends_the_budget_left_at_the_checkpoint_not_a_new_one(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # The same run, its checkpoint saying no time was left after epoch 1: the resumed
    # run trains epoch 2 (the interrupted run had decided on it), then stops.
    import edgekd.config as config
    from edgekd.stages import distill as stage

    monkeypatch.setattr(config, "BUDGET_MAX_EPOCHS", 3)
    cfg = _run(tiny_teacher, tiny_data, time_budget=30.0, epochs=None)
    with monkeypatch.context() as m:
        rates = iter([1e9, 1e-3])
        m.setattr(stage, "probe_train_rate", lambda *a, **k: next(rates))
        _killed_after_checkpoint(m, 1)
        with pytest.raises(KeyboardInterrupt):
            stage.distill(cfg, tmp_path / "a")
    path = tmp_path / ".a.resume" / "state.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "budget_left_s": 0.0}))
    m = stage.distill(cfg, tmp_path / "a")
    assert m.epochs_run == 2


@pytest.mark.parametrize("killed_after", [2, 3])
def test_run_distill_resumed_inside_a_cool_down_past_the_forecast_trains_to_its_end(
    tiny_teacher, tiny_data, tmp_path, monkeypatch, killed_after
):
    # As in the cool-down test above: forecast 2 epochs, the end projected at 4L after
    # epoch 2, the cool-down (⌈3.2L⌉ to 4L) planned after epoch 3. Killed after either,
    # the resumed run trains to 4L, the rate down to 0, to the uninterrupted run's
    # weights (with no clock it stopped at the forecast's 2 epochs, or at 3).
    from edgekd.distill import timebudget, trainer
    from edgekd.stages import distill as stage

    monkeypatch.setattr(stage, "probe_train_rate", lambda *a, **k: 1e9)
    monkeypatch.setattr(timebudget, "plan_epochs", lambda *a, **k: 2)
    cfg = _run(tiny_teacher, tiny_data, time_budget=30.0, epochs=None, lr_decay="cooldown")
    with monkeypatch.context() as m:
        room = iter([3, 2, 1])
        m.setattr(trainer, "steps_that_fit", lambda took, left, steps: next(room) * steps)
        whole = stage.distill(cfg, tmp_path / "whole")
        room = iter([3, 2, 1])
        _killed_after_checkpoint(m, killed_after)
        with pytest.raises(KeyboardInterrupt):
            stage.distill(cfg, tmp_path / "a")
    room = iter([1])  # the time left after epoch 3 (the resumed run's, when it trains it)
    monkeypatch.setattr(trainer, "steps_that_fit", lambda took, left, steps: next(room) * steps)
    m = stage.distill(cfg, tmp_path / "a")
    steps = whole.history[0]["steps"]
    planned = [math.ceil(3.2 * steps), 4 * steps]
    assert whole.epochs_run == 4 and whole.history[-1]["cooldown"] == planned
    assert m.epochs_run == 4 and [h["epoch"] for h in m.history] == [1, 2, 3, 4]
    assert m.history[-1]["cooldown"] == planned
    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in ("a", "whole"))
    assert all((a[k] == b[k]).all() for k in a)


def test_run_distill_resumed_ends_in_the_part_of_an_epoch_the_interrupted_run_chose(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # After epoch 1 the clock leaves room for 3 steps of epoch 2 (`part_of_epoch`), and
    # the run is killed there. The resumed run trains those 3 steps and ends, as the
    # uninterrupted one did (reading its own clock instead, it trained epoch 2 whole).
    from edgekd.distill import trainer
    from edgekd.stages import distill as stage

    monkeypatch.setattr(stage, "probe_train_rate", lambda *a, **k: 1e9)
    # The loop's clock alone runs out (the plan's is untouched): every epoch overruns it.
    monkeypatch.setattr(stage, "RESERVE_S", 1e6)
    monkeypatch.setattr(trainer, "part_of_epoch", lambda took, left, steps: 3)
    cfg = _run(tiny_teacher, tiny_data, time_budget=30.0)  # 3 epochs set
    whole = stage.distill(cfg, tmp_path / "whole")
    assert whole.epochs_run == 2 and whole.history[-1]["steps"] == 3
    with monkeypatch.context() as m:
        _killed_after_checkpoint(m, 1)
        with pytest.raises(KeyboardInterrupt):
            stage.distill(cfg, tmp_path / "a")
    m = stage.distill(cfg, tmp_path / "a")
    assert m.epochs_run == 2 and m.history[-1]["steps"] == 3
    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in ("a", "whole"))
    assert all((a[k] == b[k]).all() for k in a)


def test_run_distill_resumed_from_a_part_epoch_end_still_cools_down_to_its_later_end(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # 4 epochs set, cool-down. After epoch 1 the clock projects the end at 3.5L, after
    # epoch 2 at 4L (the cool-down planned after epoch 3: ⌈3.2L⌉ to 4L). Killed after
    # epoch 1, the resumed run must reach 4L too: the part of epoch 4 projected first is
    # not a cap (it once capped every later projection, and the run ended at 3.5L).
    from edgekd.distill import trainer
    from edgekd.stages import distill as stage

    monkeypatch.setattr(stage, "probe_train_rate", lambda *a, **k: 1e9)
    cfg = _run(tiny_teacher, tiny_data, time_budget=30.0, epochs=4, lr_decay="cooldown")

    def room(*epochs: float):
        left = iter(epochs)
        return lambda took, left_s, steps: int(next(left) * steps)

    with monkeypatch.context() as m:
        m.setattr(trainer, "steps_that_fit", room(2.5, 2, 1))
        whole = stage.distill(cfg, tmp_path / "whole")
        m.setattr(trainer, "steps_that_fit", room(2.5))
        _killed_after_checkpoint(m, 1)
        with pytest.raises(KeyboardInterrupt):
            stage.distill(cfg, tmp_path / "a")
    monkeypatch.setattr(trainer, "steps_that_fit", room(2, 1))
    m = stage.distill(cfg, tmp_path / "a")
    steps = whole.history[0]["steps"]
    assert whole.history[-1]["cooldown"] == [math.ceil(3.2 * steps), 4 * steps]
    assert m.epochs_run == whole.epochs_run == 4
    assert m.history[-1]["cooldown"] == whole.history[-1]["cooldown"]
    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in ("a", "whole"))
    assert all((a[k] == b[k]).all() for k in a)


def test_probe_train_rate_is_the_governors_pace_at_each_thread_count(monkeypatch):
    # Beside a busy neighbour all cores crawl (every parallel region waits on a parked
    # thread) while 1 thread keeps its pace; the loop's governor then trains on 1 and
    # re-times all cores one window in ten, so the plan must read that pace, not all
    # cores' (32 rows/s once planned 1 epoch): (9 × 1,700 + 32) / 10 = 1,533.2.
    import torch

    from edgekd import threads
    from edgekd.distill import timebudget

    seen: list[tuple[int, float]] = []

    def rate_at_current_threads(cfg, model, tok, texts, num_labels, seconds):
        n = torch.get_num_threads()
        seen.append((n, seconds))
        return {2: 32.0, 1: 1700.0}[n]

    monkeypatch.setattr(threads, "thread_counts", lambda cores=None: [2, 1])
    monkeypatch.setattr(timebudget, "_probe", rate_at_current_threads)
    before = torch.get_num_threads()
    assert timebudget.probe_train_rate(None, None, None, [], 2, seconds=3.0) == 1533.2
    assert seen == [(2, 1.5), (1, 1.5)]  # each count its share of the probe's seconds
    assert torch.get_num_threads() == before  # the run's own count is given back


def test_thread_counts_offer_one_thread_only_where_switching_keeps_the_weights(monkeypatch):
    from edgekd import threads

    monkeypatch.setattr(threads, "strict_blas", lambda: True)
    assert threads.thread_counts(4) == [4, 1] and threads.thread_counts(1) == [1]
    monkeypatch.setattr(threads, "strict_blas", lambda: None)
    assert threads.thread_counts(4) == [4]


def test_probe_steps_a_token_state_map_only_when_token_states_are_on(tiny_teacher, monkeypatch):
    # With token_states each real step also maps the student's token states onto the
    # teacher's components (TokenStateLoss, +9% a step on SST-2): the probe's steps must
    # do that work too, or its rate is too high.
    from edgekd.config import DistillConfig
    from edgekd.distill import timebudget
    from edgekd.distill.teacher import load_teacher
    from edgekd.students.bilstm import BiLSTMStudent

    teacher, ttok = load_teacher(str(tiny_teacher))
    texts = ["good film", "bad plot here", "the film", "a great one"] * 20
    student, tok = BiLSTMStudent.prepare(SMALL_BILSTM, texts, 2, teacher, ttok)
    calls: list[bool] = []
    forward = BiLSTMStudent.forward

    def spy(self, *args, **kwargs):
        calls.append(bool(kwargs.get("return_hidden", False)))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(BiLSTMStudent, "forward", spy)
    with_states = DistillConfig(teacher="t", token_states=4, batch_size=8)
    assert timebudget._probe(with_states, student, tok, texts, 2, 0.01) > 0
    assert calls and all(calls)
    calls.clear()
    plain = with_states.model_copy(update={"token_states": 0})
    assert timebudget._probe(plain, student, tok, texts, 2, 0.01) > 0
    assert calls and not any(calls)


def test_probe_steps_make_the_loops_update_with_the_runs_loss(tiny_teacher, monkeypatch):
    # A probe that made its own, simpler step (no clip, a stand-in loss) read 1.38-1.55×
    # the rate its epochs then ran at (benchmarks/probe_honesty.py). Its steps now go
    # through the loop's own update (`optimiser_step`: the clip, Adam, the weight
    # average) with the configured loss, on a copy of the student.
    import torch

    from edgekd.config import DistillConfig
    from edgekd.distill import timebudget, trainer
    from edgekd.distill.losses import HintonKDLoss
    from edgekd.distill.teacher import load_teacher
    from edgekd.students.bilstm import BiLSTMStudent

    teacher, ttok = load_teacher(str(tiny_teacher))
    texts = ["good film", "bad plot here", "the film", "a great one"] * 20
    student, tok = BiLSTMStudent.prepare(SMALL_BILSTM, texts, 2, teacher, ttok)
    before = {k: v.clone() for k, v in student.state_dict().items()}
    seen: dict[str, list] = {"clip": [], "loss": [], "ema": []}
    step, clip, term = trainer.optimiser_step, trainer.clip_gradients, HintonKDLoss.distill_term

    def spy_step(accelerator, loss, optim, params, grad_clip, lr, averaged, model):
        seen["ema"].append(averaged is not None)
        return step(accelerator, loss, optim, params, grad_clip, lr, averaged, model)

    def spy_term(self, s, t):
        seen["loss"].append(self.temperature)
        return term(self, s, t)

    monkeypatch.setattr(trainer, "optimiser_step", spy_step)
    monkeypatch.setattr(
        trainer, "clip_gradients", lambda a, p, n: seen["clip"].append(n) or clip(a, p, n)
    )
    monkeypatch.setattr(HintonKDLoss, "distill_term", spy_term)
    cfg = DistillConfig(teacher="t", batch_size=8, loss="kd", temperature=3.0, grad_clip=0.5)
    assert timebudget._probe(cfg, student, tok, texts, 2, 0.01) > 0
    n = len(seen["clip"])
    assert n >= 6 and seen["clip"] == [0.5] * n and seen["loss"] == [3.0] * n
    assert seen["ema"] == [cfg.ema is not None] * n
    assert all(torch.equal(v, student.state_dict()[k]) for k, v in before.items())


def test_epoch_rate_counts_the_long_rows_the_probe_could_not_fill_a_batch_with():
    from edgekd.distill.timebudget import epoch_rate

    # Steps cost 0.01 s + 0.001 s a padded token; the probe timed full batches of 4 at
    # lengths 3 to 6: 16 rows in 4 × 0.01 + 0.001 × 4 × 18 = 0.112 s, 142.9 rows/s.
    timed = [(4, 4 * n, 0.01 + 0.001 * 4 * n) for n in (3, 4, 5, 6)]
    # The epoch: 8 rows of length 3 (2 batches: 0.02 + 0.024 s) and 4 of 20 (1 batch:
    # 0.01 + 0.08 s): 12 rows in 0.134 s.
    lengths = [3] * 8 + [20] * 4
    assert epoch_rate(timed, lengths, 4) == pytest.approx(12 / 0.134)
    # 2.5 times those rows: 20 of length 3 in 5 batches (0.05 + 0.06 s), 10 of length
    # 20 in 3, the last part-full (0.03 + 0.2 s): 30 rows in 0.34 s.
    assert epoch_rate(timed, lengths, 4, scale=2.5) == pytest.approx(30 / 0.34)


@pytest.mark.parametrize(
    "timed",
    [
        [(4, 12, 0.1)] * 3,  # 3 steps: too few to fit 2 numbers
        [(4, 12, 0.1), (4, 12, 0.2)] * 2,  # one length: a and b are not separable
        [(4, 10, 0.0), (4, 20, 0.2), (4, 30, 0.4), (4, 40, 0.6)],  # a < 0: no cost
        [(4, 10, 0.3), (4, 20, 0.2), (4, 30, 0.1), (4, 40, 0.0)],  # b < 0: no cost
    ],
)
def test_epoch_rate_is_none_when_the_steps_do_not_fit_a_cost(timed):
    from edgekd.distill.timebudget import epoch_rate

    assert epoch_rate(timed, [3, 4, 5], 4) is None


def test_probe_rate_is_the_epochs_over_every_length_the_sample_holds(tiny_teacher, monkeypatch):
    import math

    from edgekd.config import DistillConfig
    from edgekd.distill import timebudget
    from edgekd.distill.teacher import load_teacher
    from edgekd.students.bilstm import BiLSTMStudent

    teacher, ttok = load_teacher(str(tiny_teacher))
    # Many short rows (full batches) and a few long ones that never fill a batch.
    texts = ["good film", "bad plot here", "the film is a great one"] * 40 + [
        " ".join(["good"] * n) for n in (30, 31, 32, 40, 50)
    ]
    student, tok = BiLSTMStudent.prepare(SMALL_BILSTM, texts, 2, teacher, ttok)
    now = [0.0]  # an injected clock: a step costs 0.01 s + 0.001 s a padded token
    pad = tok.pad

    def costed(ids):
        now[0] += 0.01 + 0.001 * len(ids) * max(map(len, ids))
        return pad(ids)

    monkeypatch.setattr(tok, "pad", costed)
    cfg = DistillConfig(teacher="t", batch_size=8)
    rate = timebudget._probe(cfg, student, tok, texts, 2, 1.0, timer=lambda: now[0])
    lengths = [tok.length(x) for x in tok.ids(texts)]
    seconds = sum(math.ceil(c / 8) * 0.01 + 0.001 * n * c for n, c in Counter(lengths).items())
    assert rate == pytest.approx(len(texts) / seconds)


def test_probe_steps_in_the_runs_precision(tiny_teacher, monkeypatch):
    # A bf16 run's steps are ~1.2× faster than fp32's: a probe stepping in fp32 would
    # plan its epochs at the wrong pace.
    from contextlib import nullcontext

    from edgekd.config import DistillConfig
    from edgekd.distill import timebudget, trainer
    from edgekd.distill.teacher import load_teacher
    from edgekd.students.bilstm import BiLSTMStudent

    teacher, ttok = load_teacher(str(tiny_teacher))
    texts = ["good film", "bad plot here", "the film", "a great one"] * 20
    student, tok = BiLSTMStudent.prepare(SMALL_BILSTM, texts, 2, teacher, ttok)
    seen: list[tuple[str, str]] = []

    def spy(precision, device):
        seen.append((precision, device))
        return nullcontext()

    monkeypatch.setattr(trainer, "training_precision", spy)
    cfg = DistillConfig(teacher="t", batch_size=8, precision="bf16")
    assert timebudget._probe(cfg, student, tok, texts, 2, 0.01) > 0
    assert seen and set(seen) == {("bf16", "cpu")}
