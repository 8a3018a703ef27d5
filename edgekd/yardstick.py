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
from collections.abc import Callable
from typing import Any

import numpy as np

from edgekd.artifacts import TfidfBaseline
from edgekd.data import Split

C = 10.0
NGRAMS = (1, 2)
MAX_ITER = 1000  # L-BFGS iterations; CLINC150 converges in ~300


def joined(text: Any) -> str:
    """A row as one string: a pair's two sides are joined by a marker no word matches."""
    return " ||| ".join(text) if isinstance(text, tuple | list) else str(text)


def fit_tfidf(train: Split) -> Callable[[list[Any]], np.ndarray]:
    """TF-IDF + LR fitted on `train`; returns a function from texts to label ids."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = TfidfVectorizer(ngram_range=NGRAMS)
    x = vectorizer.fit_transform([joined(t) for t in train.texts])
    with warnings.catch_warnings():
        # Not converged in MAX_ITER is still a fitted model; the score says how good.
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = LogisticRegression(C=C, max_iter=MAX_ITER).fit(x, train.labels)

    def predict(texts: list[Any]) -> np.ndarray:
        return np.asarray(model.predict(vectorizer.transform([joined(t) for t in texts])))

    return predict


def tfidf_baseline(train: Split, dev: Split) -> TfidfBaseline | None:
    """Fit TF-IDF + LR on `train` and score it on `dev`; None when dev is empty or
    training has one label only (nothing to fit)."""
    if not len(dev) or len(set(train.labels)) < 2:
        return None
    start = time.perf_counter()
    predicted = fit_tfidf(train)(dev.texts)
    return TfidfBaseline(
        accuracy=float((predicted == np.array(dev.labels)).mean()),
        n_train=len(train),
        n_dev=len(dev),
        seconds=round(time.perf_counter() - start, 1),
    )
