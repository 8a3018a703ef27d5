"""`augment.order`: the scout's order of the augmented candidates (edgekd.distill.active)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import SMALL_BILSTM
from edgekd.config import AugmentConfig, DistillConfig
from edgekd.distill.active import logit_gaps, scout_order, train_scout, uncertain_order
from edgekd.students.base import predict_logits

WORDS = ["good", "bad", "film", "the", "great", "awful", "plot", "fine"]


def test_logit_gaps_are_the_top_two_logits_apart():
    logits = np.array([[1.0, 3.0, 2.0], [0.5, 0.5, -1.0], [-2.0, -4.0, 7.0]], np.float32)
    assert logit_gaps(logits).tolist() == [1.0, 0.0, 9.0]
    assert logit_gaps(np.ones((3, 1), np.float32)).tolist() == [0.0, 0.0, 0.0]


def test_uncertain_order_puts_the_smallest_gap_first_and_keeps_ties_in_order():
    assert uncertain_order(np.array([0.5, 0.1, 0.3, 0.1])).tolist() == [1, 3, 2, 0]


def test_uncertain_order_per_text_takes_each_texts_least_sure_variant_first():
    # Text 0: rows 0 (0.9), 1 (0.2); text 1: rows 2 (0.5), 3 (0.1), 4 (0.3).
    # Round 0: row 3 (0.1), row 1 (0.2); round 1: row 4 (0.3), row 0 (0.9); round 2: row 2.
    gaps, sources = np.array([0.9, 0.2, 0.5, 0.1, 0.3]), np.array([0, 0, 1, 1, 1])
    assert uncertain_order(gaps, sources).tolist() == [3, 1, 4, 0, 2]


@pytest.fixture(autouse=True)
def _small_scout(monkeypatch):
    from edgekd.distill import active

    monkeypatch.setattr(active, "SCOUT_ROWS", 160)  # 2 epochs of the 80 rows below


def rows(n: int, seed: int) -> tuple[list[str], list[int]]:
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 7)))) for _ in range(n)]
    return texts, [int("good" in t or "great" in t) for t in texts]


@pytest.fixture
def prepared(tiny_teacher):
    from edgekd.distill.teacher import load_teacher
    from edgekd.students.bilstm import BiLSTMStudent

    teacher, ttok = load_teacher(str(tiny_teacher))
    texts, labels = rows(80, 0)
    candidates, _ = rows(60, 1)
    torch.manual_seed(0)
    student, tok = BiLSTMStudent.prepare(SMALL_BILSTM, texts + candidates, 2, teacher, ttok)
    return student, tok, texts, labels, candidates


def config(order: str, seed: int = 0) -> DistillConfig:
    return DistillConfig(teacher="t", augment=AugmentConfig(order=order), batch_size=8, seed=seed)


def test_scout_order_seeded_is_the_candidates_own_order(prepared):
    student, tok, texts, labels, candidates = prepared
    sources = np.zeros(len(candidates), np.int32)
    got = scout_order(config("seeded"), student, tok, texts, labels, candidates, sources)
    assert got.tolist() == list(range(len(candidates)))


def test_scout_order_uncertain_ranks_by_a_trained_scouts_gaps_and_touches_nothing(prepared):
    student, tok, texts, labels, candidates = prepared
    before = {k: v.clone() for k, v in student.state_dict().items()}
    rng_before = torch.random.get_rng_state()
    sources = np.arange(len(candidates)) % 7
    order = scout_order(config("uncertain"), student, tok, texts, labels, candidates, sources)
    assert sorted(order.tolist()) == list(range(len(candidates)))
    # The scout that ordered them: its gaps rise along the order.
    scout = train_scout(config("uncertain"), student, tok, texts, labels)
    gaps = logit_gaps(predict_logits(scout, tok, tok.ids(candidates)))
    assert np.all(np.diff(gaps[order]) >= 0)
    # Trained: its gaps are not the untrained student's.
    untrained = logit_gaps(predict_logits(student, tok, tok.ids(candidates)))
    assert not np.allclose(gaps, untrained)
    # The student and the run's generator are as they were: the scout is a copy.
    assert all(torch.equal(before[k], v) for k, v in student.state_dict().items())
    assert torch.equal(torch.random.get_rng_state(), rng_before)
    # The same seed, the same order; another seed, another scout.
    again = scout_order(config("uncertain"), student, tok, texts, labels, candidates, sources)
    assert again.tolist() == order.tolist()
    other = scout_order(config("uncertain", 1), student, tok, texts, labels, candidates, sources)
    assert other.tolist() != order.tolist()


def test_scout_order_per_text_spreads_the_prefix_over_the_texts(prepared):
    student, tok, texts, labels, candidates = prepared
    sources = np.arange(len(candidates)) % 6  # 10 variants for each of 6 texts
    c = config("uncertain-per-text")
    order = scout_order(c, student, tok, texts, labels, candidates, sources)
    assert sorted(sources[order[:6]].tolist()) == list(range(6))
    scout = train_scout(c, student, tok, texts, labels)
    gaps = logit_gaps(predict_logits(scout, tok, tok.ids(candidates)))
    for text in range(6):  # within a text, least sure first
        mine = [i for i in order.tolist() if sources[i] == text]
        assert np.all(np.diff(gaps[mine]) >= 0)


def test_scout_order_is_the_same_on_one_and_two_threads(prepared, monkeypatch):
    # The governor may switch the scout's thread count under load: neither the scout
    # nor the order may move. Its share of the cores is set to 1, then 2, so the scout
    # really trains at each count (a 160-row scout ends inside one 2-second window:
    # the governor alone would never switch it).
    from edgekd import threads

    if not threads.strict_blas():
        pytest.skip("torch's BLAS is not MKL in strict mode: thread counts change weights")
    student, tok, texts, labels, candidates = prepared
    sources = np.zeros(len(candidates), np.int32)
    used: list[int] = []
    step = threads.ThreadGovernor.step

    def counted(self, rows):
        used.append(torch.get_num_threads())
        return step(self, rows)

    monkeypatch.setattr(threads.ThreadGovernor, "step", counted)
    scouts, orders, counts = [], [], []
    for cores in (1, 2):
        monkeypatch.setattr(threads, "core_share", lambda cores=cores: cores)
        used.clear()
        scouts.append(train_scout(config("uncertain"), student, tok, texts, labels))
        counts.append(set(used))
        orders.append(
            scout_order(config("uncertain"), student, tok, texts, labels, candidates, sources)
        )
    assert counts[0] == {1} and 2 in counts[1]
    one, two = (s.state_dict() for s in scouts)
    assert all(torch.equal(one[k], two[k]) for k in one)
    assert orders[0].tolist() == orders[1].tolist()


def test_scout_order_scores_the_candidates_a_slice_at_a_time(prepared, monkeypatch):
    from edgekd.distill import active

    student, tok, texts, labels, candidates = prepared
    sources = np.zeros(len(candidates), np.int32)
    whole = scout_order(config("uncertain"), student, tok, texts, labels, candidates, sources)
    monkeypatch.setattr(active, "SCORE_ROWS", 7)  # 60 rows: 9 slices
    sliced = scout_order(config("uncertain"), student, tok, texts, labels, candidates, sources)
    assert sliced.tolist() == whole.tolist()


def test_train_scout_trains_on_its_rows_epoch_after_epoch_whatever_the_tasks_size(
    prepared, monkeypatch
):
    # 80 rows: 100 rows are one epoch and part of the next, stopping at the batch that
    # reaches 100 (one-length batches: not all hold 8 rows).
    from edgekd.students.bilstm import BiLSTMStudent

    student, tok, texts, labels, _ = prepared
    seen: list[int] = []
    forward = BiLSTMStudent.forward

    def spy(self, input_ids, *args, **kwargs):
        seen.append(len(input_ids))
        return forward(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(BiLSTMStudent, "forward", spy)
    train_scout(config("uncertain"), student, tok, texts, labels, rows=100)
    assert sum(seen) >= 100 > sum(seen[:-1]) and sum(seen) > len(texts)
    seen.clear()
    train_scout(config("uncertain"), student, tok, texts, labels, rows=20)
    assert sum(seen) >= 20 > sum(seen[:-1])  # under one epoch: cut short
