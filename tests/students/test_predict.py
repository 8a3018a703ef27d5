"""Scores any predictor is judged by: MCC and macro F1 beside accuracy, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from edgekd.students.predict import class_scores


def test_class_scores_match_hand_computed_values_for_two_labels():
    # gold 1 1 1 0 0, predicted 1 1 0 0 1: TP 2, FN 1, FP 1, TN 1.
    # MCC = (TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (2 − 1) / sqrt(3·3·2·2)
    #     = 1/6; F1(1) = 2·2 / (2·2 + 1 + 1) = 2/3, F1(0) = 2·1 / (2·1 + 1 + 1) = 1/2.
    got = class_scores(np.array([1, 1, 0, 0, 1]), np.array([1, 1, 1, 0, 0]))
    assert got == pytest.approx({"mcc": 1 / 6, "macro_f1": (2 / 3 + 1 / 2) / 2})


def test_class_scores_are_zero_mcc_when_a_model_always_says_the_common_label():
    # CoLA's trap: 7 of 10 acceptable, always predicted: accuracy 0.7, MCC 0 (a
    # constant side has no correlation); F1 is 2·7/(7+10) for the one label predicted
    # and 0 for the other, whose 3 rows are all missed.
    gold = np.array([1] * 7 + [0] * 3)
    got = class_scores(np.ones(10, dtype=int), gold)
    assert got == pytest.approx({"mcc": 0.0, "macro_f1": (14 / 17 + 0.0) / 2})


def test_class_scores_agree_with_scikit_learn_on_many_labels():
    from sklearn.metrics import f1_score, matthews_corrcoef

    rng = np.random.default_rng(0)
    gold = rng.integers(0, 150, 2000)
    pred = np.where(rng.random(2000) < 0.7, gold, rng.integers(0, 160, 2000))  # 10 unseen
    got = class_scores(pred, gold)
    assert got["mcc"] == pytest.approx(matthews_corrcoef(gold, pred))
    assert got["macro_f1"] == pytest.approx(f1_score(gold, pred, average="macro"))


def test_class_scores_of_perfect_and_inverted_predictions_are_the_bounds():
    gold = np.array([0, 1, 0, 1])
    assert class_scores(gold, gold) == {"mcc": 1.0, "macro_f1": 1.0}
    assert class_scores(1 - gold, gold)["mcc"] == pytest.approx(-1.0)
    assert class_scores(np.array([], dtype=int), np.array([], dtype=int)) == {
        "mcc": 0.0,
        "macro_f1": 0.0,
    }
