"""The student's tokenizers: the teacher's WordPiece cut to a transfer set's pieces."""

from pathlib import Path

import pytest

from edgekd.students.tokenizer import (
    first_pieces,
    needed_pieces,
    vocab_tokens,
    wordpiece_from_teacher,
)

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


def test_first_pieces_are_the_lowest_ids_without_placeholders(tmp_path):
    from transformers import BertTokenizerFast

    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[unused0]", "[UNK]", *PIECES]))
    full = wordpiece_from_teacher(BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt")), 16)
    assert sorted(vocab_tokens(full)[i] for i in first_pieces(full, 3)) == ["good", "goodness", "x"]
    assert first_pieces(full, 0) == set()


def test_wordpiece_subset_keeps_extra_pieces_and_still_tokenizes_its_texts_like_the_teacher(
    teacher_tok,
):
    texts = ["good goodness"]
    sub = wordpiece_from_teacher(teacher_tok, 16, texts=texts, extra=8)
    tokens = vocab_tokens(sub)
    # The first 8 pieces after the specials: good, goodness, x, g, o, d, n, e; and the
    # texts' own (##o, ##d, ##e, ##s): "x", unseen in the texts, has a row now.
    assert tokens == [*SPECIALS, *PIECES[:8], "s", "##o", "##d", "##e", "##s"]
    assert sub.tokenizer.encode("x", add_special_tokens=False).tokens == ["x"]
    # "x" is the 3rd piece: kept from extra=3 on, not at 2 (an off-by-one would show).
    for extra, pieces in ((2, ["[UNK]"]), (3, ["x"])):
        cut = wordpiece_from_teacher(teacher_tok, 16, texts=texts, extra=extra)
        assert cut.tokenizer.encode("x", add_special_tokens=False).tokens == pieces
    assert sub.tokenizer.encode(texts[0], add_special_tokens=False).tokens == teacher_tok.tokenize(
        texts[0]
    )


def test_packed_ids_equal_ids_across_encode_chunks_and_pairs(monkeypatch):
    from edgekd.students import tokenizer as tk
    from edgekd.students.tokenizer import build_word_tokenizer

    monkeypatch.setattr(tk, "ENCODE_CHUNK", 2)  # 5 texts: chunks of 2, 2 and 1
    texts = ["the cat", "a dog runs", "   ", "the the the cat", "dog"]
    tok = build_word_tokenizer(texts, max_vocab=50, min_freq=1, lowercase=True, max_length=3)
    packed = tok.packed_ids(texts)
    assert [r.tolist() for r in packed] == tok.ids(texts)
    assert packed.lengths().tolist() == [2, 3, 1, 3, 1]  # cut at 3; whitespace → one [UNK]
    tail = packed[3:]
    assert len(tail) == 2 and [r.tolist() for r in tail] == tok.ids(texts[3:])
    assert (
        tok.pad(list(packed))["input_ids"].tolist() == tok.pad(tok.ids(texts))["input_ids"].tolist()
    )
    pairs = [("the cat", "dog"), ("a dog runs", "the")]
    packed_pairs = tok.packed_ids(pairs)
    assert [(a.tolist(), b.tolist()) for a, b in packed_pairs] == tok.ids(pairs)
    assert packed_pairs.lengths().tolist() == [3, 4]
    assert len(tok.packed_ids([])) == 0
