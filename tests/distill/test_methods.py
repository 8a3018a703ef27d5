"""Training-time methods on one hook protocol (`edgekd.distill.methods`): which run,
what they refuse before any data, what a checkpoint keeps of them, and the early-exit
term by hand."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from edgekd.config import DistillConfig
from edgekd.distill.methods import (
    EarlyExit,
    MethodRun,
    MethodState,
    TrainingMethod,
    build_methods,
    check_methods,
    listed_methods,
    methods_state,
)
from edgekd.distill.minimax import MinimaxSelector
from edgekd.errors import EdgeKDError
from edgekd.registry import AUGMENTERS, STUDENTS


def config(*methods: Any) -> DistillConfig:
    return DistillConfig(teacher="t", augment={"methods": list(methods)})


def test_listed_methods_skip_text_augmenters_and_keep_the_order_given():
    found = listed_methods(config("minimax", "tang", {"name": "mixup", "options": {"alpha": 0.2}}))
    assert [cls.__name__ for cls, _ in found] == ["MinimaxSelector", "MixKD"]
    assert found[1][1].alpha == 0.2  # the method's own validated options


def test_listed_methods_refuse_two_that_select_rows(monkeypatch):
    class OtherSelector(MinimaxSelector):
        pass

    monkeypatch.setitem(AUGMENTERS._entries, "other", OtherSelector)
    with pytest.raises(EdgeKDError, match="MinimaxSelector and OtherSelector both choose"):
        listed_methods(config("tang", "minimax", "other"))


def test_listed_methods_refuse_a_non_text_augmenter_that_is_no_training_method(monkeypatch):
    class Loose:
        stage = "batch"

    monkeypatch.setitem(AUGMENTERS._entries, "loose", Loose)
    with pytest.raises(EdgeKDError, match="'loose' has stage 'batch' but is no TrainingMethod"):
        listed_methods(config("loose"))


@pytest.mark.parametrize(
    ("methods", "student", "message"),
    [
        (["minimax"], "bilstm", "add a text augmenter, e.g. --augment tang,minimax"),
        (["mate"], "bilstm", "use --student bert"),
        (["mate"], "bert", "pass --generator ID_OR_FOLDER"),
    ],
)
def test_check_methods_runs_each_methods_own_check(methods, student, message):
    with pytest.raises(EdgeKDError, match=message):
        check_methods(config(*methods), STUDENTS.get(student))


class Student:
    """What `build` reads of a student: its exits and their weight."""

    def __init__(self, exits: int, weight: float = 1.0) -> None:
        self.exits = [object()] * exits
        self.config = type("C", (), {"exit_weight": weight})()


def run_of(cfg: DistillConfig, student: Any) -> MethodRun:
    return MethodRun(cfg, student, None, None, None, np.array([0, 0, 1]), 2)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exits", "weight", "on"), [(0, 1.0, False), (2, 1.0, True), (2, 0.0, False)]
)
def test_early_exit_is_implied_only_by_a_student_with_weighted_exits(exits, weight, on):
    built = build_methods(run_of(config("tang"), Student(exits, weight)))
    assert [type(m) for m in built] == ([EarlyExit] if on else [])


def test_build_methods_gives_listed_then_implied_methods():
    built = build_methods(
        run_of(config("tang", {"name": "minimax", "options": {"k": 1}}), Student(1))
    )
    assert [type(m) for m in built] == [MinimaxSelector, EarlyExit]
    assert built[0].n_selected == 2  # k = 1 of each of the 2 source texts' candidates


class Keeps(TrainingMethod):
    def __init__(self, key: str) -> None:
        self.key = key

    def state(self) -> MethodState:
        return MethodState(generators={self.key: np.random.default_rng(0)})


def test_methods_state_merges_and_refuses_a_key_claimed_twice():
    assert set(methods_state([Keeps("a"), Keeps("b")]).generators) == {"a", "b"}
    with pytest.raises(EdgeKDError, match="Keeps keeps checkpoint state under 'a'"):
        methods_state([Keeps("a"), Keeps("a")])


def test_exit_self_distillation_matches_hand_computation():
    import math

    from edgekd.distill.layers import Features
    from edgekd.distill.methods import exit_self_distillation

    class TwoExits:
        def layer_logits(self, hidden, final, mask):
            return [torch.zeros(1, 2), torch.tensor([[0.0, 3.0]]), final]

    final = torch.tensor([[0.0, math.log(3)]])  # q = (¼, ¾)
    features = Features(final, (torch.zeros(1, 1, 2),) * 3, torch.ones(1, 1))
    # Exit 1: p = (½, ½), KL(p ‖ q) = ½ ln(½/¼) + ½ ln(½/¾) = ½ ln(4/3).
    # Exit 2: p = (1 − s, s), s = σ(3): KL = (1−s) ln((1−s)/¼) + s ln(s/¾).
    s = 1 / (1 + math.exp(-3))
    want = 0.5 * math.log(4 / 3) + (1 - s) * math.log((1 - s) / 0.25) + s * math.log(s / 0.75)
    assert exit_self_distillation(TwoExits(), features).item() == pytest.approx(want, rel=1e-5)


def test_exit_self_distillation_trains_the_exits_and_leaves_the_backbone(tiny_teacher):
    from edgekd.distill.layers import student_features
    from edgekd.distill.methods import exit_self_distillation
    from edgekd.distill.teacher import load_teacher
    from edgekd.students.bert import BertStudent

    teacher = load_teacher(str(tiny_teacher))
    model, tok = BertStudent.prepare({"layers": 2, "early_exit": True}, ["x"], 2, *teacher)
    torch.manual_seed(0)
    with torch.no_grad():
        model.exits[0].classifier.weight.normal_()  # unlike the last layer's head
    batch = {k: torch.from_numpy(v) for k, v in tok(["good film", "dull plot"]).items()}
    loss = exit_self_distillation(model, student_features(model.eval(), batch, False))
    loss.backward()
    assert loss.item() > 0
    assert model.exits[0].classifier.weight.grad.abs().sum() > 0
    # The backbone and the last layer's classifier (the target) get nothing from it.
    assert all(p.grad is None for p in model.bert.parameters())
    assert model.classifier.weight.grad is None
