import pytest

from edgekd.data import Split, TaskData
from edgekd.errors import EdgeKDError
from edgekd.teacher import align_labels


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
