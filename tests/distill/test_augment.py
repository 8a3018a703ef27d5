import random
from collections import Counter

import pytest

from edgekd.distill.augment import (
    ComposeAugmenter,
    MaskAugmenter,
    NgramAugmenter,
    PosAugmenter,
    SwapAugmenter,
    generate,
    words_of,
)

SENTENCES = [" ".join(f"w{i}" for i in range(10))] * 2000  # 20,000 words


def suffix_tagger(words):
    """A stand-in tagger: the tag is the word's last letter (deterministic, testable)."""
    return [w[-1] for w in words]


def test_words_of_splits_cjk_per_character_and_keeps_spaced_words():
    assert words_of("it 's good") == ["it", "'s", "good"]
    assert words_of("我爱abc电影") == ["我", "爱", "abc", "电", "影"]


def test_mask_rate_matches_p_on_large_sample():
    out = MaskAugmenter(p=0.1)(SENTENCES, random.Random(0))
    rate = sum(s.split().count("[MASK]") for s in out) / 20_000
    assert rate == pytest.approx(0.1, abs=0.01)  # 3σ of a binomial(20000, 0.1) is 0.0064


def test_pos_replaces_within_tag_by_corpus_frequency():
    corpus = ["cat bat"] * 3 + ["hat"] * 1 + ["dog"]  # tag "t": cat 3, bat 3, hat 1
    aug = PosAugmenter(suffix_tagger, p=1.0).fit(corpus)
    draws = Counter(aug(["mat"] * 7000, random.Random(0)))
    assert set(draws) == {"cat", "bat", "hat"}  # never "dog" (tag "g")
    assert draws["hat"] / 7000 == pytest.approx(1 / 7, abs=0.015)
    assert aug(["[MASK] xyz"], random.Random(0)) == ["[MASK] xyz"]  # unknown tag: kept


def test_pos_rate_matches_p():
    # Tag = last digit: each tag "k" holds six equally frequent words (a k, a1k, ..., wk).
    corpus = [f"a{i}" for i in range(50)]
    aug = PosAugmenter(suffix_tagger, p=0.1).fit(corpus + SENTENCES[:1])
    out = aug(SENTENCES, random.Random(1))
    changed = sum(
        a != b
        for s, o in zip(SENTENCES, out, strict=True)
        for a, b in zip(s.split(), o.split(), strict=True)
    )
    # A replacement may draw the same word back: expect p·(1 − P(same)) ≈ 0.1·(1 − 1/6).
    assert 0.07 < changed / 20_000 < 0.1


def test_ngram_keeps_contiguous_span_of_one_to_five_words():
    aug = NgramAugmenter(p=1.0, max_n=5)
    rng = random.Random(0)
    lengths = Counter()
    for _ in range(2000):
        [out] = aug([SENTENCES[0]], rng)
        assert out in SENTENCES[0]  # a contiguous span
        lengths[len(out.split())] += 1
    assert set(lengths) == {1, 2, 3, 4, 5}
    assert min(lengths.values()) > 300  # roughly uniform: 400 each expected


def test_ngram_rate_matches_p():
    out = NgramAugmenter(p=0.25)(SENTENCES, random.Random(2))
    assert sum(o != s for o, s in zip(out, SENTENCES, strict=True)) / 2000 == pytest.approx(
        0.25, abs=0.03
    )


def test_swap_replaces_one_span_with_a_donor_span():
    donors = [[f"d{i}" for i in range(10)]]
    aug = SwapAugmenter(donors, p=1.0, max_n=3)
    rng = random.Random(0)
    source = SENTENCES[0].split()  # w0 .. w9
    spans = Counter()
    for _ in range(2000):
        [out] = aug([SENTENCES[0]], rng)
        words = out.split()
        inserted = [w for w in words if w.startswith("d")]
        assert 1 <= len(inserted) <= 3
        assert " ".join(inserted) in " ".join(donors[0])  # one contiguous donor span
        # What is left of the source is a prefix and a suffix around one gap of 1..3.
        at = words.index(inserted[0])
        kept_before, kept_after = words[:at], words[at + len(inserted) :]
        assert kept_before == source[: len(kept_before)]
        assert kept_after == source[len(source) - len(kept_after) :]
        spans[len(source) - len(kept_before) - len(kept_after)] += 1
    assert set(spans) == {1, 2, 3}


def test_swap_rate_matches_p_and_needs_donors():
    aug = SwapAugmenter([["x"]], p=0.3)
    out = aug(SENTENCES, random.Random(3))
    assert sum(o != s for o, s in zip(out, SENTENCES, strict=True)) / 2000 == pytest.approx(
        0.3,
        abs=0.035,  # 3σ of a binomial(2000, 0.3) is 0.031
    )
    assert SwapAugmenter([], p=1.0)(["a b"], random.Random(0)) == ["a b"]


def test_generate_is_deterministic_deduplicated_and_never_empty():
    tang = ComposeAugmenter([MaskAugmenter(0.1), NgramAugmenter(0.25)])
    texts = ["a b c d e f", "g h", "i"]
    first = generate(texts, tang, n_iter=20, seed=0)
    assert first == generate(texts, tang, n_iter=20, seed=0)
    assert first != generate(texts, tang, n_iter=20, seed=1)
    assert len(first) == len(set(first)) and not set(first) & set(texts)
    assert all(t.strip() for t in first)


def test_pos_requires_fit():
    with pytest.raises(RuntimeError, match="fit"):
        PosAugmenter(suffix_tagger)(["a"], random.Random(0))


def test_pattern_tagger_tags_english_offline():
    pytest.importorskip("textblob", reason="textblob not installed")
    from edgekd.distill.augment import pattern_tagger

    assert pattern_tagger()(["a", "charming", "journey", "."]) == ["DT", "JJ", "NN", "."]


def test_tang_builds_mask_pos_ngram_from_config():
    pytest.importorskip("textblob", reason="textblob not installed")
    from edgekd.config import AugmentConfig
    from edgekd.distill.augment import TangAugmenter, build_augmenter

    corpus = ["a charming journey", "a dull film", "the great movie"]
    aug = build_augmenter(AugmentConfig(methods=["tang"]), corpus, "[MASK]")
    assert isinstance(aug, TangAugmenter)
    assert [type(p).__name__ for p in aug.parts] == [
        "MaskAugmenter",
        "PosAugmenter",
        "NgramAugmenter",
    ]
    variants = generate(corpus, aug, n_iter=20, seed=0)
    assert variants and all(v.strip() for v in variants)
    # POS swaps stay within the corpus vocabulary (plus the mask token).
    vocab = {w for t in corpus for w in t.split()} | {"[MASK]"}
    assert {w for v in variants for w in v.split()} <= vocab


def test_compose_tags_each_text_as_written_once_when_earlier_steps_keep_places():
    calls: list[list[str]] = []

    def tagger(words):
        calls.append(list(words))
        return suffix_tagger(words)

    texts = ["cat sat on a mat", "a dog bit"]
    pos = PosAugmenter(tagger, p=0.5).fit(["a cat bit a dog", "sat on mat"])
    calls.clear()
    aug = ComposeAugmenter([MaskAugmenter(p=0.5), ComposeAugmenter([pos])])
    assert aug.parts[1] is pos  # a composition inside another is flattened into it
    out = generate(texts, aug, n_iter=50, seed=0)
    assert len(out) > 10  # many masked variants of each text...
    assert calls == [t.split() for t in texts]  # ...each text tagged once, unmasked
    assert all(len(v.split()) == len(texts[0].split()) or len(v.split()) == 3 for v in out)


def test_compose_tags_the_words_given_when_an_earlier_step_moves_them():
    calls: list[list[str]] = []

    def tagger(words):
        calls.append(list(words))
        return suffix_tagger(words)

    pos = PosAugmenter(tagger, p=0.5).fit(["cat sat on a mat"])
    calls.clear()
    aug = ComposeAugmenter([NgramAugmenter(p=1.0, max_n=2), pos])
    aug(["cat sat on a mat"] * 20, random.Random(0))
    assert calls and all(len(c) <= 2 for c in calls)  # the n-gram's words, not the text's


def test_words_of_splits_ascii_text_as_the_general_rule_does():
    text = "it 's a\tgood , long   film"
    assert words_of(text) == words_of(text + " 我")[:-1] == text.split()


def test_swap_from_config_takes_every_side_of_the_corpus_as_donors():
    from edgekd.config import AugmentConfig
    from edgekd.distill.augment import build_augmenter

    corpus = ["a charming journey", "a dull film", ("the great movie", "my pair side")]
    cfg = AugmentConfig(methods=["swap", {"name": "ngram", "options": {"p": 0.0}}])
    aug = build_augmenter(cfg, corpus, "[MASK]")
    assert [type(p).__name__ for p in aug.parts] == ["SwapAugmenter", "NgramAugmenter"]
    # Donors are every side of every text, as words.
    assert sorted(map(tuple, aug.parts[0].donors)) == sorted(
        tuple(t.split())
        for t in ["a charming journey", "a dull film", "the great movie", "my pair side"]
    )
    variants = generate(corpus[:2], aug, n_iter=20, seed=0)
    vocab = {
        w
        for t in ["a charming journey", "a dull film", "the great movie", "my pair side"]
        for w in t.split()
    }
    assert variants and {w for v in variants for w in v.split()} <= vocab


def test_augmenters_apply_to_each_side_of_a_sentence_pair():
    pairs = [("a b c d", "e f g h")] * 500
    out = MaskAugmenter(p=0.5)(pairs, random.Random(0))
    assert all(isinstance(v, tuple) and len(v) == 2 for v in out)
    # Each side is masked independently: both sides change, not always together.
    first = sum(v[0] != pairs[0][0] for v in out)
    second = sum(v[1] != pairs[0][1] for v in out)
    both = sum(v[0] != pairs[0][0] and v[1] != pairs[0][1] for v in out)
    assert first > 400 and second > 400 and both < first
    variants = generate([("a b", "c d")], MaskAugmenter(p=0.5), n_iter=30, seed=0)
    assert len(set(variants)) == len(variants) and ("a b", "c d") not in variants
    assert all(x.strip() for v in variants for x in v)


def test_augmented_texts_vary_only_maximal_rows_and_map_sources_back():
    from edgekd.config import DistillConfig
    from edgekd.distill.labeling import augmented_texts

    train = ["the film is good fun", "is good", "good fun", "a dull plot", "dull"]
    cfg = DistillConfig(
        teacher="t", augment={"methods": [{"name": "mask", "options": {"p": 0.5}}], "n_iter": 8}
    )
    rows, sources = augmented_texts(cfg, train, None)
    # Only rows 0 and 3 are varied (the others sit inside them), and no variant repeats
    # a training text.
    assert rows and set(sources) == {0, 3} and not set(rows) & set(train)
    for row, src in zip(rows, sources, strict=False):
        assert len(row.split()) == len(train[src].split())  # masking keeps the length
    every = cfg.model_copy(update={"augment": cfg.augment.model_copy(update={"sources": "all"})})
    assert set(augmented_texts(every, train, None)[1]) > {0, 3}


def toy_vocab(tokens, vectors):
    import numpy as np

    from edgekd.distill.augment import TeacherVocab

    return TeacherVocab(tokens, np.array(vectors, dtype=np.float32), str.lower)


# Pieces in id order and 2-d input embeddings: "good" sits between "great" (nearest)
# and "fine"; "##ish", "a" and "42" are never replacements (a continuation, one letter,
# not letters); "[unused0]" neither.
TOKENS = ["[PAD]", "[unused0]", "good", "great", "fine", "##ish", "a", "42", "bad", "awful"]
VECTORS = [[0, 0], [1, 1], [1, 0], [1, 0.1], [1, 0.3], [1, 0.05], [1, 0.02], [1, 0.01],
           [-1, 0], [-1, 0.1]]  # fmt: skip


def test_neighbour_table_ranks_whole_word_pieces_by_cosine_and_leaves_out_the_word():
    from edgekd.distill.augment import neighbour_table

    vocab = toy_vocab(TOKENS, VECTORS)
    table = neighbour_table(vocab, {"Good", "bad", "unknown", "##ish"}, pieces=100, k=2)
    # Keys are whole pieces after the normaliser (Good → good); ##ish and a word the
    # teacher splits get none.
    assert table == {"good": ["great", "fine"], "bad": ["awful", "fine"]}


def test_neighbour_table_draws_only_from_the_first_pieces():
    from edgekd.distill.augment import neighbour_table

    vocab = toy_vocab(TOKENS, VECTORS)
    # The first 3 whole-word pieces are good, great, fine: "awful" is past them.
    assert neighbour_table(vocab, {"bad"}, pieces=3, k=1) == {"bad": ["fine"]}


def test_neighbour_table_breaks_cosine_ties_by_piece_id():
    from edgekd.distill.augment import neighbour_table

    tokens = ["[PAD]", "cat", "dog", "cow", "pig"]
    vectors = [[0, 0], [1, 0], [0, 1], [0, -1], [0, 2]]  # dog, cow, pig: cosine 0, 0, 0
    table = neighbour_table(toy_vocab(tokens, vectors), {"cat"}, pieces=10, k=3)
    assert table == {"cat": ["dog", "cow", "pig"]}


def test_neighbour_replaces_each_word_with_a_neighbour_at_rate_p():
    from edgekd.distill.augment import NeighbourAugmenter

    aug = NeighbourAugmenter({"good": ["great", "fine"]}, str.lower, p=1.0)
    assert aug.one("a Good plot", random.Random(0)) in ("a great plot", "a fine plot")
    never = NeighbourAugmenter({"good": ["great"]}, str.lower, p=0.0)
    assert never.one("a good plot", random.Random(0)) == "a good plot"
    half = NeighbourAugmenter({"good": ["great"]}, str.lower, p=0.5)
    out = half([" ".join(["good"] * 10)] * 1000, random.Random(0))
    replaced = sum(row.split().count("great") for row in out)
    assert 4_700 < replaced < 5_300  # 10,000 draws at p = 0.5


def test_neighbour_needs_a_teacher_vocabulary():
    from edgekd.config import AugmentConfig
    from edgekd.distill.augment import build_augmenter

    with pytest.raises(ValueError, match="reads the teacher's vocabulary"):
        build_augmenter(AugmentConfig(methods=["neighbour"]), ["a good plot"], "[MASK]")


def test_teacher_vocab_lines_up_pieces_with_input_embeddings(tiny_teacher):
    from edgekd.distill.augment import TeacherVocab
    from edgekd.distill.teacher import load_teacher

    teacher, tok = load_teacher(str(tiny_teacher))
    vocab = TeacherVocab.of(teacher, tok)
    assert vocab is not None and vocab.tokens[tok.convert_tokens_to_ids("good")] == "good"
    table = teacher.get_input_embeddings().weight.detach().numpy()
    assert (vocab.vectors == table[: len(vocab.tokens)]).all()
    assert vocab.normalize("GOOD") == "good"


def test_neighbour_variants_are_keyed_by_the_teachers_embeddings(
    tiny_teacher, tmp_path, monkeypatch
):
    import shutil

    import torch

    from edgekd.config import DistillConfig
    from edgekd.distill import augment
    from edgekd.distill.labeling import augmented_texts
    from edgekd.distill.teacher import load_teacher

    cfg = DistillConfig(
        teacher="t",
        augment={"methods": [{"name": "neighbour", "options": {"p": 1.0, "k": 1}}], "n_iter": 4},
    )
    train = ["a good movie", "a bad plot"]
    teacher, tok = load_teacher(str(tiny_teacher))
    rows, sources = augmented_texts(cfg, train, tok, teacher)
    for row, source in zip(rows, sources, strict=True):  # word for word, never the same
        assert len(row.split()) == len(train[source].split()) and row != train[source]
    # The same teacher again: the cached rows, not a second augmentation.
    monkeypatch.setattr(augment, "build_augmenter", lambda *a, **k: pytest.fail("re-augmented"))
    assert list(augmented_texts(cfg, train, tok, teacher)[0]) == list(rows)
    # Other embeddings are other neighbours: the cached rows are not reused for them.
    copy = tmp_path / "other"
    shutil.copytree(tiny_teacher, copy)
    other, _ = load_teacher(str(copy))
    with torch.no_grad():
        other.get_input_embeddings().weight.mul_(-1).add_(1.0)
    monkeypatch.undo()
    again, _ = augmented_texts(cfg, train, tok, other)
    assert again.path != rows.path


def test_neighbour_refused_for_a_teacher_without_wordpiece():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from edgekd.config import DistillConfig
    from edgekd.distill.labeling import augmented_texts
    from edgekd.errors import EdgeKDError

    level = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tok = PreTrainedTokenizerFast(tokenizer_object=level, pad_token="[PAD]", unk_token="[UNK]")
    cfg = DistillConfig(teacher="t", augment={"methods": ["neighbour"], "n_iter": 2})
    with pytest.raises(EdgeKDError, match="choose other --augment methods"):
        augmented_texts(cfg, ["a good plot"], tok, object())


def test_auto_methods_leave_neighbour_out_for_a_teacher_without_wordpiece():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from edgekd.config import DistillConfig
    from edgekd.distill.labeling import augmented_texts

    level = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tok = PreTrainedTokenizerFast(tokenizer_object=level, pad_token="[PAD]", unk_token="[UNK]")
    # A small task, where auto would add neighbour: it cannot read this teacher, so the
    # run gets Tang's rules alone instead of a refusal. (`object()`: never read.)
    cfg = DistillConfig(teacher="t", augment={"n_iter": 3})
    rows, _ = augmented_texts(cfg, ["a good plot here", "a bad film"], tok, object())
    tang = DistillConfig(teacher="t", augment={"methods": ["tang"], "n_iter": 3})
    assert list(rows) == list(augmented_texts(tang, ["a good plot here", "a bad film"], tok)[0])


def test_neighbour_table_never_returns_the_word_itself_when_k_reaches_every_candidate():
    from edgekd.distill.augment import neighbour_table

    tokens = ["[PAD]", "cat", "dog"]
    table = neighbour_table(toy_vocab(tokens, [[0, 0], [1, 0], [0, 1]]), {"cat"}, 10, k=5)
    assert table == {"cat": ["dog"]}
    assert neighbour_table(toy_vocab(tokens, [[0, 0], [1, 0], [0, 1]]), {"cat"}, 1, k=5) == {
        "cat": []
    }


def test_teacher_vocab_refused_when_ids_skip_a_row(tiny_teacher, tmp_path):
    import json

    from transformers import PreTrainedTokenizerFast

    from edgekd.distill.augment import TeacherVocab
    from edgekd.distill.teacher import load_teacher
    from edgekd.errors import EdgeKDError

    teacher, tok = load_teacher(str(tiny_teacher))
    spec = json.loads(tok.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    last = max(vocab, key=vocab.__getitem__)
    vocab[last] += 1  # one id past the table: the pieces and rows no longer line up
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    crafted = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    with pytest.raises(EdgeKDError, match=r"fix its tokenizer\.json"):
        TeacherVocab.of(teacher, crafted)


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ({"augment": {"methods": ["neighbour", "tang"]}}, "--augment neighbour draws words"),
        ({"student": {"name": "bilstm", "options": {"extra_pieces": 10}}}, "extra_pieces=0"),
    ],
)
def test_teacher_vocabulary_readers_refused_for_a_word_level_teacher(sets, message):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from edgekd.config import DistillConfig
    from edgekd.distill.trainer import check_teacher_vocabulary
    from edgekd.errors import EdgeKDError

    level = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tok = PreTrainedTokenizerFast(tokenizer_object=level, pad_token="[PAD]", unk_token="[UNK]")
    with pytest.raises(EdgeKDError, match=message):
        check_teacher_vocabulary(DistillConfig(teacher="t", **sets), tok)
    check_teacher_vocabulary(DistillConfig(teacher="t"), tok)  # the defaults read none
    auto = {"student": {"name": "bilstm", "options": {"extra_pieces": "auto"}}}
    check_teacher_vocabulary(DistillConfig(teacher="t", **auto), tok)  # auto: 0 here
