"""The MobileBERT student: bottleneck shape, embeddings from the teacher, padding, HF
folder, ONNX export; and its layer-wise transfer loss by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from edgekd.distill.layers import Attention, Features, MobileBERTLoss, attention_of
from edgekd.students.base import load_student, save_student
from edgekd.students.mobilebert import MobileBertStudent

SMALL = {"layers": 2, "bottleneck": 16, "embedding": 8, "heads": 2, "ffn": 24, "ffn_stacks": 2}


@pytest.fixture(scope="module")
def teacher(tiny_teacher: Path):
    from edgekd.distill.teacher import load_teacher

    return load_teacher(str(tiny_teacher))


def test_mobilebert_student_keeps_the_teacher_width_between_blocks(teacher):
    model, tok = MobileBertStudent.prepare(SMALL, ["x"], 2, *teacher)
    config = model.hf_config
    # Inter-block width = the teacher's 32; attention and FFNs at the 16-wide bottleneck.
    assert config.hidden_size == 32 and config.true_hidden_size == 16
    assert config.num_hidden_layers == 2 and config.num_feedforward_networks == 2
    enc = {k: torch.from_numpy(v) for k, v in tok(["good film", "dull"]).items()}
    with torch.no_grad():
        _, hidden = model.eval()(**enc, return_hidden=True)
    assert [tuple(h.shape[1:]) for h in hidden][-1] == (enc["input_ids"].shape[1], 32)
    # Attention at the bottleneck: queries 16 wide in 2 heads.
    with attention_of(model) as found, torch.no_grad():
        model(**enc)
    assert len(found) == 2 and found[0].q.shape[-1] == 16 and found[0].heads == 2


def test_mobilebert_student_starts_from_the_teachers_embeddings(teacher):
    model, tok = MobileBertStudent.prepare(SMALL, ["x"], 2, *teacher)
    t_emb = teacher[0].bert.embeddings
    ours = model.mobilebert.embeddings
    assert torch.equal(ours.position_embeddings.weight, t_emb.position_embeddings.weight)
    assert torch.equal(ours.token_type_embeddings.weight, t_emb.token_type_embeddings.weight)
    table = ours.word_embeddings.weight
    assert table.shape == (tok.vocab_size, 8)
    assert torch.count_nonzero(table[tok.pad_id]) == 0
    # PCA: the 8 columns are uncorrelated and in decreasing variance.
    rows = table[torch.arange(table.shape[0]) != tok.pad_id]
    var = rows.var(0)
    assert torch.all(var[:-1] >= var[1:] - 1e-6)
    assert "layers: random init (no task-agnostic pre-training)" in model.init_notes


def test_mobilebert_student_predicts_a_padded_row_as_it_predicts_it_alone(teacher):
    model, tok = MobileBertStudent.prepare(SMALL, ["x"], 2, *teacher)
    model.eval()
    texts = ["good film", "the plot was dull and the actors were bad"]
    batch = {k: torch.from_numpy(v) for k, v in tok(texts).items()}
    alone = {k: torch.from_numpy(v) for k, v in tok(texts[:1]).items()}
    with torch.no_grad():
        torch.testing.assert_close(model(**batch)[0], model(**alone)[0], atol=1e-5, rtol=0)


def test_mobilebert_student_folder_is_a_hugging_face_classifier(teacher, tmp_path):
    from transformers import AutoModelForSequenceClassification

    model, tok = MobileBertStudent.prepare(SMALL, ["x"], 2, *teacher)
    save_student(tmp_path, model.eval(), tok, ["negative", "positive"])
    hf = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert type(hf).__name__ == "MobileBertForSequenceClassification"
    reloaded, tok2, _ = load_student(tmp_path)
    enc = {k: torch.from_numpy(v) for k, v in tok2(["good film", "awful"]).items()}
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**enc), hf(**enc).logits, atol=1e-6, rtol=0)


def test_mobilebert_export_validates_against_pytorch_on_padded_rows(teacher, tmp_path):
    from edgekd.exporters.bert import BertExporter

    model, tok = MobileBertStudent.prepare(SMALL, ["x"], 2, *teacher)
    real = tok(["the movie was good", "bad", "the actors were really very dull and boring"])
    exporter = BertExporter(atol=1e-5)
    assert exporter.export(model.eval(), tmp_path / "m.onnx", [real]) <= 1e-5
    assert exporter.fusions == {}  # BERT's fusions do not fit its bottleneck graph


def test_mobilebert_loss_matches_hand_computation() -> None:
    # One layer pair, two tokens (the second is padding), equal widths 2, one head each.
    mask = torch.tensor([[1, 0]])
    s_hidden = (torch.zeros(1, 2, 2), torch.tensor([[[1.0, 3.0], [50.0, 50.0]]]))
    t_hidden = (torch.zeros(1, 2, 2), torch.tensor([[[0.0, 1.0], [0.0, 0.0]]]))
    zeros = torch.zeros(1, 2, 1)
    s_att = Attention(zeros, zeros, zeros, 1)
    t_att = Attention(zeros, zeros, zeros, 1)
    loss = MobileBERTLoss(1, 1, 2, 2)
    s = Features(torch.zeros(1, 2), s_hidden, mask, [s_att])
    t = Features(torch.zeros(1, 2), t_hidden, mask, [t_att])
    # Feature maps: token 0 only, ((1 − 0)² + (3 − 1)²)/2 = 2.5. Attention: with one real
    # key both put all mass on it: KL 0.
    assert loss(s, t).item() == pytest.approx(2.5)
    assert [loss.weights(e) for e in (1, 2)] == [(1.0, 0.0), (0.0, 1.0)]  # then prediction KD


def test_mobilebert_attention_transfer_compares_head_means_when_head_counts_differ() -> None:
    # Teacher: 2 heads of width 1 over 2 real tokens (head 1 reads column 0, head 2
    # column 1). A 1-head student with zero queries attends uniformly.
    q = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    k = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    t_att = Attention(q, k, torch.zeros(1, 2, 2), 2)
    s_att = Attention(torch.zeros(1, 2, 1), torch.zeros(1, 2, 1), torch.zeros(1, 2, 1), 1)
    mask = torch.ones(1, 2, dtype=torch.long)
    hidden = (torch.zeros(1, 2, 2), torch.zeros(1, 2, 2))
    loss = MobileBERTLoss(1, 1, 2, 2)
    s = Features(torch.zeros(1, 2), hidden, mask, [s_att])
    t = Features(torch.zeros(1, 2), hidden, mask, [t_att])
    # Head 1, query 0: scores (1, 0); query 1: (0, 0). Head 2, query 0: (0, 0); query 1:
    # (0, 1). Mean, query 0: ((σ + ½)/2, ...) with σ = e/(e+1): not uniform, so KL > 0,
    # and equal for both queries by symmetry: KL(m ‖ ½) with m = ((σ + ½)/2, (1.5 − σ)/2).
    sigma = math.e / (math.e + 1)
    m = [(sigma + 0.5) / 2, (1.5 - sigma) / 2]
    want = sum(p * math.log(p / 0.5) for p in m)
    assert loss(s, t).item() == pytest.approx(want, rel=1e-5)


def test_mobilebert_student_exports_to_int8_through_the_export_stage(teacher, tiny_data, tmp_path):
    import onnx

    from edgekd.config import DataConfig, ExportConfig
    from edgekd.stages.export import export as run_export

    model, tok = MobileBertStudent.prepare(SMALL, ["x"], 2, *teacher)
    (tmp_path / "s").mkdir()
    save_student(tmp_path / "s", model.eval(), tok, ["negative", "positive"])
    report = run_export(
        ExportConfig(guard=False), tmp_path / "s", tmp_path / "e", DataConfig(spec=str(tiny_data))
    )
    assert report["models"]["fp32"]["max_abs_diff"] <= 1e-4
    ops = {n.op_type for n in onnx.load(str(tmp_path / "e" / "model.int8.onnx")).graph.node}
    assert "MatMulInteger" in ops or "DynamicQuantizeMatMul" in ops
