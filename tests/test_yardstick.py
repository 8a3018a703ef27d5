"""The TF-IDF + LR yardstick: fitted on the run's rows, scored on its dev rows."""

import numpy as np

from edgekd.data import Split
from edgekd.yardstick import fit_tfidf, joined, tfidf_baseline


def test_tfidf_baseline_learns_word_labels_and_scores_dev():
    train = Split(["good film", "great film", "bad film", "awful film"] * 5, [1, 1, 0, 0] * 5)
    dev = Split(["good", "awful", "great", "film bad"], [1, 0, 1, 1])
    got = tfidf_baseline(train, dev)
    # Three of four right: "film bad" is labelled 1 here and reads as bad.
    assert got is not None and got.accuracy == 0.75
    assert (got.n_train, got.n_dev) == (20, 4) and got.seconds >= 0
    assert got.analyzer == "word"


def test_tfidf_baseline_is_none_when_nothing_to_fit_or_score():
    assert tfidf_baseline(Split(["a", "b"], [0, 0]), Split(["a"], [0])) is None
    assert tfidf_baseline(Split(["a", "b"], [0, 1]), Split([], [])) is None


def test_fit_tfidf_reads_both_sides_of_a_pair():
    # The label is set by the second side only: a model reading the first would fail.
    pairs = [("same words", "good"), ("same words", "bad")] * 6
    predict = fit_tfidf(Split(pairs, [1, 0] * 6))
    assert predict([("same words", "bad"), ("same words", "good")]).tolist() == [0, 1]
    assert joined(("a", "b")) == "a ||| b" and joined("a") == "a"
    assert isinstance(predict(["x"]), np.ndarray)


def test_tfidf_baseline_reads_characters_when_no_row_holds_a_word():
    # Single characters: no word of the default token pattern, so no word vocabulary.
    train = Split(["😀", "5", "😡", "7"] * 5, [1, 1, 0, 0] * 5)
    got = tfidf_baseline(train, Split(["😀", "😡", "5"], [1, 0, 1]))
    assert got is not None and got.analyzer == "char" and got.accuracy == 1.0
    assert fit_tfidf(Split(["good film", "bad film"], [1, 0])).analyzer == "word"
