"""The yardstick every distill run is measured against: TF-IDF + logistic regression.

What users pick instead of a distilled network is a linear model on word n-grams: it
trains in seconds on a CPU and needs no teacher. A student that does not beat it on
the task's own dev rows is not worth shipping, so `edgekd distill` fits one on the
same training rows, scores it on the same dev rows, and records it beside the student
(`DistillMetrics.tfidf`); `edgekd check` can require a margin over it
(`min_margin_over_baseline`).

The settings are the common ones (word 1-2 grams, scikit-learn's TF-IDF defaults) with
C = 10: on CLINC150's test split C = 10 scored 0.911 where the default C = 1 scored
0.888 (150 labels of 100 rows each regularise hard at C = 1), and sublinear tf changed
nothing (0.910); benchmarks/tasks.py has the table for each shared task.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from edgekd.artifacts import TfidfBaseline
from edgekd.data import Split

C = 10.0
NGRAMS = (1, 2)
# Where no row holds a word of two or more characters (scikit-learn's token pattern:
# single digits, emoji, one-character labels), word n-grams have no vocabulary and
# the fit would fail: characters 1-3 then, inside word boundaries.
CHAR_NGRAMS = (1, 3)
MAX_ITER = 1000  # L-BFGS iterations; CLINC150 converges in ~300


def joined(text: Any) -> str:
    """A row as one string: a pair's two sides are joined by a marker no word matches."""
    return " ||| ".join(text) if isinstance(text, tuple | list) else str(text)


@dataclass(frozen=True)
class Tfidf:
    """A fitted TF-IDF + LR: called on texts, their label ids. `analyzer`: the n-grams it
    reads, "word", or "char" where no training row holds a word (`CHAR_NGRAMS`)."""

    vectorizer: Any
    model: Any
    analyzer: Literal["word", "char"]

    def __call__(self, texts: list[Any]) -> np.ndarray:
        return np.asarray(self.model.predict(self.vectorizer.transform([joined(t) for t in texts])))


def fit_tfidf(train: Split) -> Tfidf:
    """TF-IDF + LR fitted on `train`."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    rows = [joined(t) for t in train.texts]
    vectorizer = TfidfVectorizer(ngram_range=NGRAMS)
    analyzer: Literal["word", "char"] = "word"
    try:
        x = vectorizer.fit_transform(rows)
    except ValueError as e:
        if "empty vocabulary" not in str(e):  # the one refusal these settings can give
            raise
        vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=CHAR_NGRAMS)
        x = vectorizer.fit_transform(rows)
        analyzer = "char"
    with warnings.catch_warnings():
        # Not converged in MAX_ITER is still a fitted model; the score says how good.
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = LogisticRegression(C=C, max_iter=MAX_ITER).fit(x, train.labels)

    return Tfidf(vectorizer, model, analyzer)


def tfidf_baseline(train: Split, dev: Split) -> TfidfBaseline | None:
    """Fit TF-IDF + LR on `train` and score it on `dev`; None when dev is empty or
    training has one label only (nothing to fit)."""
    if not len(dev) or len(set(train.labels)) < 2:
        return None
    start = time.perf_counter()
    predict = fit_tfidf(train)
    predicted = predict(dev.texts)
    return TfidfBaseline(
        accuracy=float((predicted == np.array(dev.labels)).mean()),
        n_train=len(train),
        n_dev=len(dev),
        seconds=round(time.perf_counter() - start, 1),
        analyzer=predict.analyzer,
    )
