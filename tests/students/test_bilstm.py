import numpy as np
import pytest
import torch

from edgekd.students.base import project_rows, teacher_rows_for
from edgekd.students.bilstm import BiLSTMConfig, BiLSTMStudent
from edgekd.students.tokenizer import build_word_tokenizer, vocab_tokens


def tiny(pooling="max", vocab=50):
    torch.manual_seed(0)
    cfg = BiLSTMConfig(embedding_dim=8, hidden_size=8, mlp_size=8, pooling=pooling, dropout=0.0)
    return BiLSTMStudent(cfg, vocab, 3).eval()


@pytest.mark.parametrize("pooling", ["max", "last"])
def test_bilstm_padded_row_equals_row_alone(pooling):
    model = tiny(pooling)
    ids = torch.tensor([[5, 6, 7, 8, 9], [3, 4, 0, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        both = model(ids, mask)
        alone = model(ids[1:, :2], mask[1:, :2])
    assert both.shape == (2, 3)
    torch.testing.assert_close(both[1:], alone, atol=1e-6, rtol=0)


def test_word_tokenizer_keeps_frequent_words_and_maps_rest_to_unk():
    tok = build_word_tokenizer(
        ["the cat", "the dog", "The CAT!"], max_vocab=4, min_freq=1, lowercase=True, max_length=8
    )
    # the ×3, cat ×2, dog ×1: the cap of 4 leaves dog out.
    assert vocab_tokens(tok) == ["[PAD]", "[UNK]", "the", "cat"]
    assert tok.ids(["the cat dog"]) == [[2, 3, 1]]
    tied = build_word_tokenizer(
        ["b a", "a b"], max_vocab=10, min_freq=1, lowercase=True, max_length=8
    )
    assert vocab_tokens(tied) == ["[PAD]", "[UNK]", "a", "b"]  # ties broken alphabetically


def test_word_tokenizer_splits_cjk_and_never_returns_empty_rows():
    tok = build_word_tokenizer(
        ["我爱电影", "good"], max_vocab=100, min_freq=1, lowercase=True, max_length=3
    )
    ids = tok.ids(["我爱电影", "   "])
    assert len(ids[0]) == 3  # one token per CJK character, cut at max_length
    assert ids[1] == [1]  # whitespace-only text becomes one [UNK]
    enc = tok(["我爱", "good"])
    assert enc["attention_mask"].tolist() == [[1, 1], [1, 0]]


def test_project_rows_keeps_principal_directions_when_narrower():
    g = torch.Generator().manual_seed(0)
    # Variance concentrated in the first two columns: PCA to 2 must keep almost all of it.
    m = torch.randn(200, 6, generator=g) * torch.tensor([10.0, 5.0, 0.1, 0.1, 0.1, 0.1])
    p = project_rows(m, 2)
    assert p.shape == (200, 2)
    kept = p.var(0).sum() / (m - m.mean(0)).var(0).sum()
    assert kept > 0.99
    assert project_rows(m, 8).shape == (200, 8)


def test_teacher_rows_for_word_is_mean_of_its_wordpieces(tiny_teacher):
    from edgekd.distill.teacher import load_teacher

    teacher, ttok = load_teacher(str(tiny_teacher))
    table = teacher.get_input_embeddings().weight.detach()
    rows = teacher_rows_for(["[PAD]", "[UNK]", "goods", "movie"], teacher, ttok, same_vocab=False)
    goods = ttok("goods", add_special_tokens=False)["input_ids"]
    assert len(goods) == 2  # good + ##s
    torch.testing.assert_close(rows[2], table[goods].mean(0))
    torch.testing.assert_close(rows[3], table[ttok.convert_tokens_to_ids("movie")])
    assert rows[0].abs().sum() == 0


def test_prepare_wordpiece_student_keeps_its_texts_pieces_with_their_teacher_rows(tiny_teacher):
    from edgekd.distill.teacher import load_teacher

    teacher, ttok = load_teacher(str(tiny_teacher))
    texts = ["a good movie", "bad goods"]
    model, tok = BiLSTMStudent.prepare(
        {"vocab": "wordpiece", "embedding_dim": 32}, texts, 2, teacher, ttok
    )
    tokens = vocab_tokens(tok)
    # The five specials, then the pieces the texts use, in the teacher's order.
    assert tokens == [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "movie",
        "a",
        "good",
        "bad",
        "##s",
    ]
    table = teacher.get_input_embeddings().weight.detach()
    teacher_ids = ttok.convert_tokens_to_ids(tokens[1:])
    np.testing.assert_allclose(model.embedding.weight[1:].detach().numpy(), table[teacher_ids])
    assert model.embedding.weight[0].abs().sum() == 0


def test_prepare_auto_vocab_is_wordpiece_for_a_wordpiece_teacher(tiny_teacher):
    from edgekd.distill.teacher import load_teacher

    teacher, ttok = load_teacher(str(tiny_teacher))
    model, _ = BiLSTMStudent.prepare({"embedding_dim": 8}, ["good movie"], 2, teacher, ttok)
    assert model.config.vocab == "wordpiece"


def test_prepare_auto_vocab_is_word_when_the_teacher_has_no_wordpiece():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    level = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1}, unk_token="[UNK]"))
    ttok = PreTrainedTokenizerFast(tokenizer_object=level, pad_token="[PAD]", unk_token="[UNK]")
    model, tok = BiLSTMStudent.prepare(
        {"embedding_dim": 8, "init": "random"}, ["good movie"], 2, None, ttok
    )
    assert model.config.vocab == "word"
    assert vocab_tokens(tok)[2:] == ["good", "movie"]


def test_prepare_extra_pieces_start_from_their_teacher_rows(tiny_teacher):
    from edgekd.distill.teacher import load_teacher

    teacher, ttok = load_teacher(str(tiny_teacher))
    options = {"vocab": "wordpiece", "embedding_dim": 32, "extra_pieces": 6}
    texts = ["a good movie"]
    model, tok = BiLSTMStudent.prepare(options, texts, 2, teacher, ttok)
    plain, _ = BiLSTMStudent.prepare({**options, "extra_pieces": 0}, texts, 2, teacher, ttok)
    tokens = vocab_tokens(tok)
    assert model.vocab_size == len(tokens) > plain.vocab_size
    # The option reaches the tokenizer as given, not off by one or as a default.
    from edgekd.students import table as table_module

    asked: list[int] = []
    real = table_module.wordpiece_from_teacher

    def spy(*a, **k):
        asked.append(k["extra"])
        return real(*a, **k)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(table_module, "wordpiece_from_teacher", spy)
        BiLSTMStudent.prepare(options, texts, 2, teacher, ttok)
    assert asked == [6]
    table = teacher.get_input_embeddings().weight.detach()
    np.testing.assert_allclose(
        model.embedding.weight[1:].detach().numpy(),
        table[ttok.convert_tokens_to_ids(tokens[1:])],
    )


@pytest.mark.parametrize(
    ("options", "n_texts", "wordpiece", "want"),
    [
        ({}, 713, True, {"init": "teacher-output", "extra_pieces": 10_000}),
        ({}, 7_499, True, {"init": "teacher-output", "extra_pieces": 10_000}),
        ({}, 7_500, True, {"init": "teacher", "extra_pieces": 0}),
        ({}, 713, False, {"init": "teacher", "extra_pieces": 0}),  # measured with WordPiece
        ({"vocab": "word"}, 713, True, {"vocab": "word", "init": "teacher-output",
                                        "extra_pieces": 0}),
        ({"init": "random", "extra_pieces": 3}, 713, True, {"init": "random", "extra_pieces": 3}),
        ({"init": "auto", "extra_pieces": "auto"}, 60_000, True,
         {"init": "teacher", "extra_pieces": 0}),
    ],
)  # fmt: skip
def test_for_task_resolves_auto_init_and_pieces_by_task_size(options, n_texts, wordpiece, want):
    assert BiLSTMStudent.for_task(options, n_texts, wordpiece) == want


def test_prepare_reads_an_unresolved_auto_as_a_large_task(tiny_teacher):
    from edgekd.distill.teacher import load_teacher

    teacher, ttok = load_teacher(str(tiny_teacher))
    texts = ["a good movie"]
    model, tok = BiLSTMStudent.prepare({"embedding_dim": 32}, texts, 2, teacher, ttok)
    assert model.config.init == "teacher" and model.config.extra_pieces == 0
    large = {"embedding_dim": 32, "init": "teacher", "extra_pieces": 0}
    same, same_tok = BiLSTMStudent.prepare(large, texts, 2, teacher, ttok)
    assert vocab_tokens(tok) == vocab_tokens(same_tok)
    torch.testing.assert_close(model.embedding.weight, same.embedding.weight)


def test_extra_pieces_are_refused_with_a_word_vocabulary():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="use vocab wordpiece"):
        BiLSTMConfig(vocab="word", extra_pieces=100)


def test_prepare_extra_pieces_refused_when_the_teacher_has_no_wordpiece():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from edgekd.errors import EdgeKDError

    level = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1}, unk_token="[UNK]"))
    ttok = PreTrainedTokenizerFast(tokenizer_object=level, pad_token="[PAD]", unk_token="[UNK]")
    with pytest.raises(EdgeKDError, match="extra_pieces to 0"):
        BiLSTMStudent.prepare({"init": "random", "extra_pieces": 5}, ["good movie"], 2, None, ttok)


def test_bilstm_mix_with_lambda_one_is_the_plain_forward():
    model = tiny()
    ids = torch.tensor([[5, 6, 7], [3, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        plain = model(ids, mask)
        mixed = model(ids, mask, mix=(torch.tensor([1, 0]), torch.tensor([1.0, 0.0])))
    # Row 0 with λ = 1 is itself; row 1 with λ = 0 is row 0's words.
    torch.testing.assert_close(mixed, plain[[0, 0]], atol=1e-6, rtol=0)


def test_siamese_bilstm_encodes_each_side_with_the_shared_encoder():
    torch.manual_seed(0)
    cfg = BiLSTMConfig(embedding_dim=8, hidden_size=4, mlp_size=8, dropout=0.0, pair=True)
    model = BiLSTMStudent(cfg, 50, 2).eval()
    assert model.mlp.in_features == 4 * 2 * 4  # [h1, h2, h1⊙h2, |h1−h2|], 2·hidden each
    a = torch.tensor([[5, 6, 7], [8, 0, 0]])
    b = torch.tensor([[9, 0], [3, 4]])
    with torch.no_grad():
        got = model(a, (a != 0).long(), b, (b != 0).long())
        h1, h2 = model.encode(a, (a != 0).long()), model.encode(b, (b != 0).long())
        feats = torch.cat([h1, h2, h1 * h2, (h1 - h2).abs()], dim=1)
        want = model.classifier(torch.relu(model.mlp(feats)))
        alone = model(a[1:, :1], a[1:, :1].ne(0).long(), b[1:], b[1:].ne(0).long())
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got[1:], alone, atol=1e-6, rtol=0)  # padding never leaks


def test_tokenizers_split_pairs_for_siamese_and_join_them_for_bert(tiny_teacher):
    from transformers import AutoTokenizer

    from edgekd.students.tokenizer import wordpiece_from_teacher

    word = build_word_tokenizer(["good film", "bad plot"], 10, 1, True, 8)
    enc = word([("good film", "bad"), ("plot", "good bad plot")])
    assert set(enc) == {"input_ids", "attention_mask", "input_ids_b", "attention_mask_b"}
    assert enc["attention_mask_b"].tolist() == [[1, 0, 0], [1, 1, 1]]
    hf = AutoTokenizer.from_pretrained(tiny_teacher)
    bert = wordpiece_from_teacher(hf, 32, add_special_tokens=True)
    pairs = [("the film", "good"), ("bad", "the plot was dull")]
    want = hf([p[0] for p in pairs], [p[1] for p in pairs], padding=True, return_tensors="np")
    got = bert(pairs)
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        assert got[key].tolist() == want[key].tolist(), key


def test_factorised_embeddings_store_rank_columns_and_project_up():
    torch.manual_seed(0)
    cfg = BiLSTMConfig(embedding_dim=12, embedding_rank=3, hidden_size=4, mlp_size=8, dropout=0.0)
    model = BiLSTMStudent(cfg, 50, 2).eval()
    assert model.embedding.weight.shape == (50, 3)
    assert model.embedding_proj.weight.shape == (12, 3)
    assert model.params()["params"] - model.params()["params_without_embeddings"] == 50 * 3
    ids = torch.tensor([[5, 6, 0]])
    with torch.no_grad():
        assert model(ids, (ids != 0).long()).shape == (1, 2)


def test_factorised_init_keeps_the_top_principal_coordinates(tiny_teacher):
    from edgekd.distill.teacher import load_teacher

    teacher, t_tok = load_teacher(str(tiny_teacher))
    texts = ["the movie was good", "bad plot", "awful actors", "a fun film"]
    options = {"embedding_dim": 8, "embedding_rank": 2, "hidden_size": 4, "mlp_size": 8}
    model, _ = BiLSTMStudent.prepare(options, texts, 2, teacher, t_tok)
    full, _ = BiLSTMStudent.prepare({**options, "embedding_rank": None}, texts, 2, teacher, t_tok)
    with torch.no_grad():
        up = model.embedding_proj(model.embedding.weight)
    # The factorised table starts as the full table's top-2 PCA columns, rest zero.
    torch.testing.assert_close(up[:, :2], full.embedding.weight[:, :2], atol=1e-5, rtol=0)
    assert float(up[:, 2:].abs().max()) == 0.0


def test_teacher_output_rows_are_the_encoders_mean_over_each_tokens_own_pieces(tiny_teacher):
    from edgekd.distill.teacher import load_teacher
    from edgekd.students.base import teacher_output_rows

    teacher, ttok = load_teacher(str(tiny_teacher))
    words = ["[PAD]", "movie", "unbelievably", "good"]
    rows = teacher_output_rows(words, teacher, ttok, same_vocab=False, batch_size=2)
    assert rows.shape == (4, teacher.config.hidden_size) and float(rows[0].abs().sum()) == 0.0
    for i, word in enumerate(words[1:], start=1):
        # By hand, one word at a time: [CLS] pieces [SEP], the pieces' positions averaged.
        enc = ttok(word, return_tensors="pt")
        with torch.no_grad():
            hidden = teacher.base_model(**enc).last_hidden_state[0]
        torch.testing.assert_close(rows[i], hidden[1:-1].mean(0), atol=1e-5, rtol=0)
    # The teacher's own pieces (a WordPiece student) give the same row for a one-piece word.
    pieces = teacher_output_rows(["good"], teacher, ttok, same_vocab=True)
    torch.testing.assert_close(pieces[0], rows[3], atol=1e-5, rtol=0)


def test_prepare_teacher_output_init_starts_from_the_output_rows_not_the_input_table(
    tiny_teacher,
):
    from edgekd.distill.teacher import load_teacher
    from edgekd.students.base import teacher_output_rows

    teacher, ttok = load_teacher(str(tiny_teacher))
    texts = ["the movie was good", "bad plot", "awful actors", "a fun film"]
    options = {"embedding_dim": 4, "embedding_rank": None, "hidden_size": 4, "mlp_size": 8}
    out, tok = BiLSTMStudent.prepare({**options, "init": "teacher-output"}, texts, 2, teacher, ttok)
    table, _ = BiLSTMStudent.prepare(options, texts, 2, teacher, ttok)
    want = project_rows(teacher_output_rows(vocab_tokens(tok), teacher, ttok, same_vocab=True), 4)
    want[0] = 0.0
    torch.testing.assert_close(out.embedding.weight.detach(), want)
    assert not torch.allclose(out.embedding.weight, table.embedding.weight)
