"""MATE-KD: the generator's rewrites, its max step (up the teacher-student divergence)
and the student's min step (down it), on tiny random models built here."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from edgekd.distill.mate import MateKD, kl_rows, load_generator
from edgekd.errors import EdgeKDError
from edgekd.students.bert import BertStudent


def build_generator(folder: Path, teacher: Path, seed: int = 0) -> Path:
    """A tiny random masked LM over the teacher's own vocabulary."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    tok = AutoTokenizer.from_pretrained(teacher)
    config = BertConfig(
        vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(seed)
    BertForMaskedLM(config).save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def parts(tiny_teacher, tmp_path_factory):
    from edgekd.distill.teacher import load_teacher

    teacher, t_tok = load_teacher(str(tiny_teacher))
    generator = load_generator(
        str(build_generator(tmp_path_factory.mktemp("gen"), tiny_teacher)), t_tok
    )
    student, tok = BertStudent.prepare({"layers": 1, "init": "random"}, ["x"], 2, teacher, t_tok)
    texts = ["the movie was good", "bad plot", "the actors were really very dull", "fine film"]
    batch = {k: torch.from_numpy(v) for k, v in tok(texts).items()}
    return teacher, t_tok, generator, student.eval(), batch


def make_mate(parts, **kw) -> MateKD:
    teacher, t_tok, generator, _, _ = parts
    return MateKD(teacher, generator, list(t_tok.all_special_ids), t_tok.mask_token_id, **kw)


def divergence_at(mate: MateKD, student, batch, seed: int = 123) -> float:
    """D(x') on one fixed draw (positions and Gumbel noise from `seed`)."""
    mate.rng = torch.Generator().manual_seed(seed)
    where = mate.positions(batch["input_ids"], batch["attention_mask"])
    with torch.no_grad():
        onehot = mate.rewrite(batch["input_ids"], batch["attention_mask"], where)
        return float(mate.divergence(student, batch, where, onehot))


def test_mate_rewrites_only_real_tokens_as_one_hot_draws(parts):
    _, t_tok, _, _, batch = parts
    mate = make_mate(parts, mask=0.5)
    where = mate.positions(batch["input_ids"], batch["attention_mask"])
    ids = batch["input_ids"]
    assert not where[torch.isin(ids, torch.tensor(t_tok.all_special_ids))].any()
    assert not where[batch["attention_mask"] == 0].any()
    assert where.any(1).all()  # every row gets at least one rewrite
    onehot = mate.rewrite(ids, batch["attention_mask"], where)
    assert onehot.shape == (int(where.sum()), mate.vocab)
    assert torch.equal(onehot.sum(-1), torch.ones(len(onehot)))
    assert set(onehot.unique().tolist()) <= {0.0, 1.0}


def test_mate_embed_is_the_table_row_of_each_drawn_token():
    table = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    ids = torch.tensor([[0, 1]])
    where = torch.tensor([[False, True]])
    onehot = torch.tensor([[0.0, 0.0, 1.0]])  # position 1 becomes token 2
    assert MateKD.embed(table, ids, where, onehot).tolist() == [[[1.0, 0.0], [2.0, 2.0]]]


def test_mate_max_step_raises_the_divergence_and_touches_only_the_generator(parts):
    _, _, generator, student, batch = parts
    mate = make_mate(parts, generator_lr=3e-3)
    before = divergence_at(mate, student, batch)
    s_weights = [p.detach().clone() for p in student.parameters()]
    g_weights = [p.detach().clone() for p in generator.parameters()]
    for _ in range(15):
        mate.max_step(student, batch)
    after = divergence_at(mate, student, batch)
    assert after > before
    assert all(torch.equal(a, b) for a, b in zip(s_weights, student.parameters(), strict=True))
    assert all(p.grad is None for p in student.parameters())
    assert not all(
        torch.equal(a, b) for a, b in zip(g_weights, generator.parameters(), strict=True)
    )


def test_mate_min_step_lowers_the_divergence_and_leaves_the_generator(parts):
    _, _, generator, student, batch = parts
    student = type(student)(student.config, student.vocab_size, student.num_labels)
    student.load_state_dict(parts[3].state_dict())
    student.eval()  # no dropout: the same draw scores the same
    mate = make_mate(parts, max_every=10_000)  # one max step, on the first call
    mate(student, student, batch)
    g_weights = [p.detach().clone() for p in generator.parameters()]
    before = divergence_at(mate, student, batch)
    optim = torch.optim.Adam(student.parameters(), lr=1e-2)
    for _ in range(15):
        loss = mate(student, student, batch)
        loss.backward()
        optim.step()
        optim.zero_grad()
    after = divergence_at(mate, student, batch)
    assert after < before
    assert all(torch.equal(a, b) for a, b in zip(g_weights, generator.parameters(), strict=True))


def test_kl_rows_matches_hand_computation():
    import math

    # teacher (½, ½), student (¼, ¾): ½ ln(½/¼) + ½ ln(½/¾) = ½ ln(4/3).
    got = kl_rows(torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, math.log(3)]]))
    assert got.item() == pytest.approx(0.5 * math.log(4 / 3), rel=1e-6)


def test_load_generator_refuses_another_vocabulary(tiny_teacher, tmp_path):
    from conftest import build_other_vocab
    from edgekd.distill.teacher import load_teacher

    other = build_other_vocab(tmp_path / "vocab")
    gen = build_generator(tmp_path / "gen", other)
    _, t_tok = load_teacher(str(tiny_teacher))
    with pytest.raises(EdgeKDError, match="another vocabulary than the teacher"):
        load_generator(str(gen), t_tok)
    (tmp_path / "empty").mkdir()
    with pytest.raises(EdgeKDError, match="cannot load generator"):
        load_generator(str(tmp_path / "empty"), t_tok)
