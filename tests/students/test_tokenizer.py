"""The student's tokenizers: the teacher's WordPiece cut to a transfer set's pieces."""

from pathlib import Path

import pytest

from edgekd.students.tokenizer import needed_pieces, vocab_tokens, wordpiece_from_teacher

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PIECES = ["good", "goodness", "x", "g", "o", "d", "n", "e", "s", "##o", "##d", "##e", "##s"]
PIECES += ["##ness", "##x"]


@pytest.fixture
def teacher_tok(tmp_path: Path):
    from transformers import BertTokenizerFast

    (tmp_path / "vocab.txt").write_text("\n".join(SPECIALS + PIECES) + "\n")
    return BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt"), do_lower_case=True)


def test_needed_pieces_are_used_tokens_specials_and_seen_characters(teacher_tok):
    full = wordpiece_from_teacher(teacher_tok, 16)
    kept = [vocab_tokens(full)[i] for i in needed_pieces(full, ["good goodness"])]
    # g, o, d, n, e, s were seen: each as a word start and a continuation where the
    # teacher has one (it has no ##g, ##n); x and ##ness were not used.
    assert kept == [
        *SPECIALS,
        "good",
        "goodness",
        "g",
        "o",
        "d",
        "n",
        "e",
        "s",
        "##o",
        "##d",
        "##e",
        "##s",
    ]


def test_wordpiece_subset_tokenizes_its_texts_like_the_teacher(teacher_tok):
    texts = ["Good goodness", "goods"]
    sub = wordpiece_from_teacher(teacher_tok, 16, texts=texts)
    for text in texts:
        assert sub.tokenizer.encode(text, add_special_tokens=False).tokens == teacher_tok.tokenize(
            text
        )


def test_wordpiece_subset_splits_an_unseen_word_into_pieces_not_unk(teacher_tok):
    sub = wordpiece_from_teacher(teacher_tok, 16, texts=["good goodness"])
    assert sub.tokenizer.encode("goods dose", add_special_tokens=False).tokens == [
        "good",
        "##s",
        "d",
        "##o",
        "##s",
        "##e",
    ]
    # A character the texts never used has no trained row: that word is [UNK].
    assert sub.tokenizer.encode("x", add_special_tokens=False).tokens == ["[UNK]"]
    assert sub.pad_id == 0
