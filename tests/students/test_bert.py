"""The small-BERT student: sizes, initialisation from the teacher, HF folder layout."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import build_other_vocab
from edgekd.students.base import load_student, save_student
from edgekd.students.bert import BertStudent


@pytest.fixture(scope="module")
def teacher(tiny_teacher: Path):
    from edgekd.distill.teacher import load_teacher

    return load_teacher(str(tiny_teacher))


def layer_weight(model, i: int) -> torch.Tensor:
    bert = model.bert
    return bert.encoder.layer[i].attention.self.query.weight


@pytest.mark.parametrize(("layer_init", "copied_from"), [("first", 0), ("uniform", 1)])
def test_bert_student_copies_teacher_layers_when_shapes_match(teacher, layer_init, copied_from):
    model, tok = BertStudent.prepare({"layers": 1, "layer_init": layer_init}, ["x"], 2, *teacher)
    # A 2-layer teacher, a 1-layer student: `first` takes layer 1, `uniform` layer 2.
    assert torch.equal(layer_weight(model, 0), layer_weight(teacher[0], copied_from))
    assert torch.equal(
        model.bert.embeddings.word_embeddings.weight,
        teacher[0].bert.embeddings.word_embeddings.weight,
    )
    assert torch.equal(model.classifier.weight, teacher[0].classifier.weight)
    assert tok.add_special_tokens and tok.vocab_size == teacher[1].vocab_size


def test_bert_student_starts_from_scratch_when_width_differs(teacher):
    model, _ = BertStudent.prepare(
        {"layers": 1, "hidden": 16, "heads": 2, "ffn": 24}, ["x"], 2, *teacher
    )
    assert model.bert.config.hidden_size == 16 and model.bert.config.intermediate_size == 24
    assert model.init_notes[0] == "embeddings: 0/5 tensors copied"
    assert all("random init" in note for note in model.init_notes[1:])


def test_bert_student_refuses_more_layers_than_the_teacher(teacher):
    with pytest.raises(ValueError, match="only 2"):
        BertStudent.prepare({"layers": 3}, ["x"], 2, *teacher)


def test_bert_student_with_all_teacher_layers_reproduces_the_teacher(teacher):
    # Self-distillation (Born-Again) starts here: same architecture, same weights.
    model, tok = BertStudent.prepare({"layers": 2}, ["x"], 2, *teacher)
    model.eval()
    enc = {k: torch.from_numpy(v) for k, v in tok(["good film", "the plot was dull"]).items()}
    with torch.no_grad():
        want = teacher[0](**enc).logits
        got = model(**enc)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_bert_student_folder_is_a_hugging_face_classifier(teacher, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model, tok = BertStudent.prepare({"layers": 1}, ["x"], 2, *teacher)
    model.eval()
    save_student(tmp_path, model, tok, ["negative", "positive"])
    hf = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    hf_tok = AutoTokenizer.from_pretrained(tmp_path)
    assert hf.config.id2label == {0: "negative", 1: "positive"}
    texts = ["good film", "awful"]
    with torch.no_grad():
        want = hf(**hf_tok(texts, padding=True, return_tensors="pt")).logits
        reloaded, tok2, names = load_student(tmp_path)
        got = reloaded(**{k: torch.from_numpy(v) for k, v in tok2(texts).items()})
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    assert names == ["negative", "positive"]


def test_bert_student_mix_with_lambda_one_is_the_plain_forward(teacher):
    model, tok = BertStudent.prepare({"layers": 1}, ["x"], 2, *teacher)
    model.eval()
    enc = {k: torch.from_numpy(v) for k, v in tok(["good film", "awful"]).items()}
    with torch.no_grad():
        plain = model(**enc)
        mixed = model(**enc, mix=(torch.tensor([1, 0]), torch.ones(2)))
    # Row 0 is the longer: its mixed mask is its own, so λ = 1 changes nothing.
    torch.testing.assert_close(mixed[0], plain[0], atol=1e-5, rtol=0)


def test_bert_student_with_its_own_vocabulary_maps_rows_from_teacher_pieces(teacher, tmp_path):
    model, tok = BertStudent.prepare(
        {"layers": 1, "tokenizer": str(build_other_vocab(tmp_path / "vocab"))}, ["x"], 2, *teacher
    )
    assert tok.vocab_size == 9 and model.init_notes[-1].startswith("word embeddings: 9 rows")
    assert model.init_notes[0] == "embeddings: 4/5 tensors copied"  # all but the word table
    t_model, t_tok = teacher
    t_table = t_model.bert.embeddings.word_embeddings.weight
    s_table = model.bert.embeddings.word_embeddings.weight
    good = t_tok.convert_tokens_to_ids("good")
    film, s_ = t_tok.convert_tokens_to_ids(["film", "##s"])
    torch.testing.assert_close(s_table[5], t_table[good])
    torch.testing.assert_close(s_table[6], (t_table[film] + t_table[s_]) / 2)  # "films"


def test_uncertainty_is_normalised_entropy() -> None:
    import math

    from edgekd.students.bert import uncertainty

    rows = [[0.0, 0.0], [0.0, math.log(3)], [0.0, 0.0, 0.0], [0.0, 100.0]]
    # (¼, ¾): −(¼ ln ¼ + ¾ ln ¾)/ln 2 = 0.8113; uniform: 1 whatever the classes; one-hot: 0.
    want = [1.0, -(0.25 * math.log(0.25) + 0.75 * math.log(0.75)) / math.log(2), 1.0, 0.0]
    got = [uncertainty(torch.tensor(row)).item() for row in rows]
    assert got == pytest.approx(want, abs=1e-5)


def early_exit_student(teacher, layers: int = 2):
    model, tok = BertStudent.prepare({"layers": layers, "early_exit": True}, ["x"], 2, *teacher)
    return model.eval(), tok


def test_early_exit_student_has_one_exit_per_layer_but_the_last(teacher):
    model, _ = early_exit_student(teacher)
    assert len(model.exits) == 1 and "early_exit" in model.capabilities
    # Each exit starts as the pooler + classifier.
    assert torch.equal(model.exits[0].classifier.weight, model.classifier.weight)
    assert torch.equal(model.exits[0].dense.weight, model.bert.pooler.dense.weight)
    assert model.init_notes[-1] == "exits 1..1: copies of the pooler and classifier"
    with pytest.raises(ValueError, match="at least 2 layers"):
        BertStudent.prepare({"layers": 1, "early_exit": True}, ["x"], 2, *teacher)


def test_early_exit_stops_each_row_at_its_first_certain_layer(teacher):
    model, tok = early_exit_student(teacher)
    enc = {k: torch.from_numpy(v) for k, v in tok(["good film", "the plot was dull"]).items()}
    with torch.no_grad():
        # Exit 1 made as certain for every row: logits (0, 3) whatever the input, whose
        # uncertainty is 0.2754 (p = σ(3) = 0.9526: −(p ln p + (1−p) ln(1−p))/ln 2).
        model.exits[0].classifier.weight.zero_()
        model.exits[0].classifier.bias.copy_(torch.tensor([0.0, 3.0]))
        full = model(**enc)
        logits, layer = model.early_exit(**enc, threshold=0.0)
        torch.testing.assert_close(logits, full)
        assert layer.tolist() == [2, 2]
        logits, layer = model.early_exit(**enc, threshold=0.3)
        assert layer.tolist() == [1, 1]
        torch.testing.assert_close(logits, torch.tensor([[0.0, 3.0], [0.0, 3.0]]))
        _, layer = model.early_exit(**enc, threshold=0.27)  # 0.2754 is not below 0.27
        assert layer.tolist() == [2, 2]


def test_early_exit_student_saves_and_loads_its_exits(teacher, tmp_path):
    model, tok = early_exit_student(teacher)
    with torch.no_grad():
        model.exits[0].classifier.bias.fill_(3.0)
    save_student(tmp_path, model, tok, ["negative", "positive"])
    reloaded, _, _ = load_student(tmp_path)
    assert torch.equal(reloaded.exits[0].classifier.bias, model.exits[0].classifier.bias)
    # The folder stays a transformers classifier: the exits are edgekd's own extra.
    assert set(model.hf_classifier().state_dict()) == {
        k for k in model.state_dict() if not k.startswith("exits.")
    }
