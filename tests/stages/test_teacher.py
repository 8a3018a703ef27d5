"""The teacher stage: a fine-tune whose kept weights the selection split chooses."""

import numpy as np

from edgekd.config import DataConfig, TeacherConfig
from edgekd.stages.teacher import teacher as run_teacher


def test_teacher_keeps_the_step_the_selection_split_chooses_and_reports_its_dev(
    tmp_path, tiny_data, monkeypatch
):
    from conftest import build_tiny_bert
    from edgekd.data import carve_selection, load_task
    from edgekd.distill import teacher as module

    # Scripted scores: the selection rows are all right at the first scoring and all
    # wrong after; dev the reverse. The first step's weights must be kept, and its dev
    # score (0) reported: the later, better dev scores chose nothing.
    task = load_task(DataConfig(spec=str(tiny_data)))
    select = carve_selection(task.train, 500, 0)[1]
    calls = {"select": 0, "dev": 0}
    real = module.teacher_logits

    def scripted(model, tokenizer, texts, **kw):
        if texts not in (select.texts, task.dev.texts):
            return real(model, tokenizer, texts, **kw)
        split, gold = (
            ("select", select.labels) if texts == select.texts else ("dev", task.dev.labels)
        )
        calls[split] += 1
        right = (calls[split] == 1) == (split == "select")
        gold = np.array(gold)
        return np.eye(2, dtype=np.float32)[gold if right else 1 - gold]

    monkeypatch.setattr(module, "teacher_logits", scripted)
    base = build_tiny_bert(tmp_path / "base", classifier=False)
    cfg = TeacherConfig(
        base=str(base), data=DataConfig(spec=str(tiny_data)), epochs=2, batch_size=16,
        max_length=16, eval_every=5,
    )  # fmt: skip
    m = run_teacher(cfg, tmp_path / "t")
    first = m["history"][0]
    assert (first["selection_accuracy"], first["dev_accuracy"]) == (1.0, 0.0)
    assert all(h["dev_accuracy"] == 1.0 for h in m["history"][1:])
    assert m["best_step"] == first["step"] == 5
    assert (m["dev_accuracy"], m["selection_accuracy"]) == (0.0, 1.0)
    assert m["n_selection"] == 16 and m["n_train"] + 16 + m["n_overlap_dropped"] == 160
