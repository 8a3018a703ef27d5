"""Minimax selection: per source text, the k most divergent candidates."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgekd.distill.minimax import MinimaxSelector, kl_rows


def test_kl_rows_match_hand_computation() -> None:
    teacher = np.array([[0.0, 0.0], [1.0, 1.0]])
    student = np.array([[math.log(3), 0.0], [5.0, 5.0]])
    # Row 0: p = (½, ½), q = (¾, ¼): KL = ½ln(⅔) + ½ln(2). Row 1: equal softmaxes.
    want = 0.5 * math.log(2 / 3) + 0.5 * math.log(2)
    assert kl_rows(teacher, student) == pytest.approx([want, 0.0], abs=1e-12)


def test_minimax_keeps_the_k_most_divergent_candidates_per_source() -> None:
    # Candidates 0-3 come from text 0, 4-5 from text 1, 6 from text 2.
    sources = np.array([0, 0, 0, 0, 1, 1, 2])
    teacher = np.zeros((7, 2))
    # Divergence grows with |margin| of the student's logits.
    margins = np.array([0.1, 3.0, 0.5, 2.0, 0.2, 0.1, 0.0])
    student = np.stack([margins, -margins], axis=1)
    selector = MinimaxSelector(sources, k=2)
    assert selector.n_selected == 2 + 2 + 1
    assert selector.select(teacher, student).tolist() == [1, 3, 4, 5, 6]


def test_minimax_selection_follows_the_current_student() -> None:
    sources = np.array([0, 0, 0])
    teacher = np.zeros((3, 2))
    selector = MinimaxSelector(sources, k=1)
    assert selector.select(teacher, np.array([[2.0, 0], [0, 0], [0, 0]])).tolist() == [0]
    assert selector.select(teacher, np.array([[0, 0], [0, 0], [0, 4.0]])).tolist() == [2]
