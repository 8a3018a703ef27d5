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
