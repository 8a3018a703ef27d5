"""Vocabulary trimming keeps predictions for texts made only of kept tokens."""

from __future__ import annotations

import torch

from edgekd.students.base import load_student, save_student
from edgekd.students.bilstm import BiLSTMConfig, BiLSTMStudent
from edgekd.students.tokenizer import build_word_tokenizer
from edgekd.students.trim import trim_student

CORPUS = ["good good good film", "bad bad plot", "the film was good", "rare words here"]


def student_dir(tmp_path):
    torch.manual_seed(0)
    tok = build_word_tokenizer(CORPUS, 100, 1, True, 16, specials=("[MASK]",))
    cfg = BiLSTMConfig(embedding_dim=8, hidden_size=4, mlp_size=8, dropout=0.0)
    model = BiLSTMStudent(cfg, tok.vocab_size, 2).eval()
    save_student(tmp_path / "s", model, tok, ["neg", "pos"]) if (
        tmp_path / "s"
    ).mkdir() is None else None
    return tmp_path / "s"


def logits(folder, texts):
    model, tok, _ = load_student(folder)
    with torch.no_grad():
        return model(**{k: torch.from_numpy(v) for k, v in tok(texts).items()})


def test_trimming_keeps_predictions_for_texts_of_kept_tokens(tmp_path):
    src = student_dir(tmp_path)
    report = trim_student(src, tmp_path / "t", CORPUS, min_freq=2)
    # good ×4, film ×2, bad ×2 survive min_freq 2, with [PAD], [UNK], [MASK].
    assert report["vocab_before"] == 12 and report["vocab_after"] == 6
    kept = ["good film", "bad bad good", "film"]
    torch.testing.assert_close(logits(tmp_path / "t", kept), logits(src, kept))
    # A dropped word now reads as [UNK], exactly like a word never seen.
    torch.testing.assert_close(logits(tmp_path / "t", ["good plot"]), logits(src, ["good zzzz"]))


def test_trimming_keeps_at_most_top_k_tokens(tmp_path):
    src = student_dir(tmp_path)
    report = trim_student(src, tmp_path / "t", CORPUS, keep_top=1)
    assert report["vocab_after"] == 3 + 1  # specials + "good"
    _, tok, _ = load_student(tmp_path / "t")
    assert tok.ids(["good bad"]) == [[3, 1]]
