"""MixKD: embedding mixing, the student↔teacher span alignment, and the loss."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from edgekd.distill.mixup import (
    EMPTY,
    MixKD,
    TeacherAlignment,
    teacher_mixed_logits,
)
from edgekd.students.base import mix_embeddings
from edgekd.students.tokenizer import build_word_tokenizer, wordpiece_from_teacher


def test_mix_embeddings_pads_the_shorter_row_with_zeros() -> None:
    x = torch.tensor([[[1.0], [2.0], [3.0]], [[10.0], [20.0], [99.0]]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    mixed = mix_embeddings(x, mask, torch.tensor([1, 0]), torch.tensor([0.25, 0.5]))
    # row 0: 0.25·(1,2,3) + 0.75·(10,20,0); row 1: 0.5·(10,20,0) + 0.5·(1,2,3)
    assert mixed[:, :, 0].tolist() == [[7.75, 15.5, 0.75], [5.5, 11.0, 1.5]]


@pytest.fixture(scope="module")
def teacher_tok(tiny_teacher: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_teacher)


def test_alignment_maps_each_word_to_its_wordpieces(teacher_tok) -> None:
    student = build_word_tokenizer(["the films were good"], 100, 1, True, 16)
    align = TeacherAlignment(student, teacher_tok, 32)
    assert not align.same_vocab
    (spans,) = align.spans(["The films, good"])
    ids = teacher_tok.convert_tokens_to_ids
    # [CLS] the film ##s , good [SEP]: "films" is one student word, two teacher pieces.
    assert spans == [
        [teacher_tok.cls_token_id],
        ids(["the"]),
        ids(["film", "##s"]),
        [teacher_tok.unk_token_id],  # "," is not in the tiny teacher's vocabulary
        ids(["good"]),
        [teacher_tok.sep_token_id],
    ]


def test_alignment_maps_a_cut_wordpiece_student_token_by_token(teacher_tok) -> None:
    student = wordpiece_from_teacher(teacher_tok, 16, texts=["the films were good"])
    align = TeacherAlignment(student, teacher_tok, 32)
    assert align.same_vocab
    (spans,) = align.spans(["films good"])
    ids = teacher_tok.convert_tokens_to_ids
    # The student's ids are renumbered, and its "##s" must reach the teacher's "##s".
    assert spans == [
        [teacher_tok.cls_token_id],
        ids(["film"]),
        ids(["##s"]),
        ids(["good"]),
        [teacher_tok.sep_token_id],
    ]


def test_pair_ids_align_spans_and_mark_missing_pieces(teacher_tok) -> None:
    student = build_word_tokenizer(["films good the"], 100, 1, True, 16)
    align = TeacherAlignment(student, teacher_tok, 32)
    a, b = align.pair_ids(["films good", "the"], [1, 0])
    ids = teacher_tok.convert_tokens_to_ids
    cls, sep = teacher_tok.cls_token_id, teacher_tok.sep_token_id
    # Row 0 pairs "films good" with "the": word 1 is film ##s vs the + nothing; word 2
    # is good vs [SEP]; row "the" has nothing left for the final [SEP].
    assert a[0].tolist() == [cls, *ids(["film", "##s", "good"]), sep]
    assert b[0].tolist() == [cls, ids("the"), EMPTY, sep, EMPTY]


def test_teacher_mixed_logits_equal_plain_logits_when_lambda_is_one(tiny_teacher: Path) -> None:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    teacher = AutoModelForSequenceClassification.from_pretrained(tiny_teacher).eval()
    tok = AutoTokenizer.from_pretrained(tiny_teacher)
    texts = ["the films were good", "bad plot"]
    align = TeacherAlignment(wordpiece_from_teacher(tok, 32, True), tok, 32)
    assert align.same_vocab
    a, b = align.pair_ids(texts, [1, 0])
    with torch.no_grad():
        mixed = teacher_mixed_logits(teacher, a, b, torch.tensor([1.0, 1.0]))
        plain = teacher(**tok(texts, padding=True, return_tensors="pt")).logits
    # Row 0 is the longer one, so λ = 1 gives exactly its logits; row 1's mask grew
    # to row 0's length (zero vectors there), so only row 0 must match bit for bit.
    assert torch.allclose(mixed[0], plain[0], atol=1e-5)


def test_mixkd_loss_is_teacher_mse_plus_mixed_cross_entropy() -> None:
    class Fixed(torch.nn.Module):
        def forward(self, input_ids, attention_mask, mix=None):
            assert mix is not None
            return torch.tensor([[1.0, 0.0], [0.0, 0.0]])

    class Teacher:
        def __call__(self, inputs_embeds, attention_mask):
            return type("Out", (), {"logits": torch.zeros(len(inputs_embeds), 2)})()

        def get_input_embeddings(self) -> torch.nn.Embedding:
            return torch.nn.Embedding(4, 3)

    class Align:
        def pair_ids(self, texts, perm):
            return torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.long)

    term = MixKD(Teacher(), Align(), alpha_sm=0.5, alpha_tmkd=2.0)  # type: ignore[arg-type]
    term.sample = lambda n: (torch.tensor([1, 0]), torch.tensor([0.25, 1.0]))  # type: ignore[method-assign]
    batch = {"input_ids": torch.zeros(2, 3, dtype=torch.long), "attention_mask": torch.ones(2, 3)}
    labels = torch.tensor([1, 0])
    loss = term(Fixed(), batch, ["a", "b"], labels)
    # TMKD: ‖(1,0) − 0‖² = 1 and 0 → mean 0.5, × 2 = 1.
    # SM: row 0: 0.25·CE(y=1) + 0.75·CE(y=0) on logits (1, 0); row 1: CE(y=0) on (0, 0).
    ce1, ce0 = math.log(1 + math.e), math.log(1 + math.exp(-1))
    sm = ((0.25 * ce1 + 0.75 * ce0) + math.log(2)) / 2
    assert loss.item() == pytest.approx(1.0 + 0.5 * sm, rel=1e-5)
