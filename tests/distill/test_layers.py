"""Layer maps, the attention hook, and the PKD / TinyBERT / ALP / DistilBERT / MiniLM losses."""

from __future__ import annotations

import math

import pytest
import torch

from edgekd.distill.layers import (
    ALPLoss,
    Attention,
    DistilBERTLoss,
    Features,
    MiniLMLoss,
    PKDLoss,
    TinyBERTLoss,
    attention_of,
    map_layers,
)


@pytest.mark.parametrize(
    ("kind", "m", "n", "expected"),
    [
        ("uniform", 4, 12, [3, 6, 9, 12]),
        ("uniform", 3, 6, [2, 4, 6]),
        ("uniform", 2, 6, [3, 6]),
        ("top", 4, 12, [9, 10, 11, 12]),
        ("top", 3, 6, [4, 5, 6]),
        ("top", 2, 6, [5, 6]),
        ("bottom", 4, 12, [1, 2, 3, 4]),
        ("bottom", 3, 6, [1, 2, 3]),
        ("bottom", 2, 6, [1, 2]),
    ],
)
def test_layer_map_gives_paper_indices(kind: str, m: int, n: int, expected: list[int]) -> None:
    assert map_layers(kind, m, n) == list(zip(range(1, m + 1), expected, strict=True))


@pytest.mark.parametrize(("m", "n"), [(4, 12), (3, 6), (2, 6)])
def test_layer_map_last_pairs_only_the_top_layers(m: int, n: int) -> None:
    assert map_layers("last", m, n) == [(m, n)]


def test_layer_map_rejects_student_deeper_than_teacher() -> None:
    with pytest.raises(ValueError, match="only 2"):
        map_layers("uniform", 3, 2)
    with pytest.raises(ValueError, match="valid: uniform, top, bottom, last"):
        map_layers("skip", 2, 6)


def feats(vectors: list[list[float]]) -> Features:
    """Features of one row of one token: one [CLS] vector per layer (embeddings first)."""
    hidden = tuple(torch.tensor([[v]], dtype=torch.float32) for v in vectors)
    return Features(torch.zeros(1, 2), hidden, torch.ones(1, 1, dtype=torch.long))


def test_pkd_loss_matches_hand_computation() -> None:
    # Student: embeddings + 1 layer; teacher: embeddings + 2 layers; map `top` → (1, 2).
    student = feats([[9.0, 9.0], [3.0, 4.0]])
    teacher = feats([[1.0, 1.0], [5.0, 5.0], [0.0, 2.0]])
    loss = PKDLoss(1, 2, 2, 2, layer_map="top", weight=1.0)
    # normalised: s = (0.6, 0.8), t = (0, 1); ‖s − t‖² = 0.36 + 0.04 = 0.40
    assert loss(student, teacher).item() == pytest.approx(0.40, abs=1e-6)
    assert loss.weights(1) == (1.0, 1.0)


def test_alp_attention_weights_sum_to_one() -> None:
    torch.manual_seed(0)
    hidden_s = tuple(torch.randn(4, 5, 8) for _ in range(3))
    hidden_t = tuple(torch.randn(4, 5, 16) for _ in range(7))
    mask = torch.ones(4, 5, dtype=torch.long)
    loss = ALPLoss(2, 6, 8, 16)
    alpha, _ = loss.attention(
        Features(torch.zeros(4, 2), hidden_s, mask), Features(torch.zeros(4, 2), hidden_t, mask)
    )
    assert alpha.shape == (4, 2, 6)
    assert torch.allclose(alpha.sum(-1), torch.ones(4, 2))
    assert (alpha > 0).all()


def test_alp_loss_matches_hand_computation() -> None:
    # One student layer s = (1, 0); teacher layers t1 = (1, 0), t2 = (0, 1).
    # α = softmax(1, 0) = (e/(e+1), 1/(e+1)); c = (α1, α2); MSE = ((1−α1)² + α2²)/2 = α2².
    student = feats([[0.0, 0.0], [1.0, 0.0]])
    teacher = feats([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    a2 = 1 / (math.e + 1)
    assert ALPLoss(1, 2, 2, 2)(student, teacher).item() == pytest.approx(a2**2, rel=1e-5)


def test_tinybert_loss_matches_hand_computation_and_skips_padding() -> None:
    # Batch 1, 2 tokens, the second is padding: only token 0 and pair (0, 0) count.
    mask = torch.tensor([[1, 0]])
    s_hidden = (torch.tensor([[[1.0, 2.0], [50.0, 50.0]]]), torch.tensor([[[0.0, 0.0], [7, 7]]]))
    t_hidden = (torch.tensor([[[1.0, 0.0], [0.0, 0.0]]]), torch.tensor([[[2.0, 2.0], [0, 0]]]))
    # One head of width 1: scores are q_i·k_j. Only pair (0, 0) counts: 1·3 vs 1·1.
    s_att = [
        Attention(
            torch.tensor([[[1.0], [3.0]]]), torch.tensor([[[3.0], [9.0]]]), torch.zeros(1, 2, 1), 1
        )
    ]
    t_att = [
        Attention(
            torch.tensor([[[1.0], [0.0]]]), torch.tensor([[[1.0], [0.0]]]), torch.zeros(1, 2, 1), 1
        )
    ]
    loss = TinyBERTLoss(1, 1, 2, 2, layer_map="bottom")
    s = Features(torch.zeros(1, 2), s_hidden, mask, s_att)
    t = Features(torch.zeros(1, 2), t_hidden, mask, t_att)
    # embeddings: ((1−1)² + (2−0)²)/2 = 2; hidden: (4 + 4)/2 = 4; attention: (3−1)² = 4
    assert loss(s, t).item() == pytest.approx(2 + 4 + 4)


def test_tinybert_runs_two_stages() -> None:
    loss = TinyBERTLoss(1, 2, 4, 8, stage_epochs=2)
    assert [loss.weights(e) for e in (1, 2, 3)] == [(1.0, 0.0), (1.0, 0.0), (0.0, 1.0)]
    # Widths differ: learned projections for embeddings and hidden states.
    assert sum(p.numel() for p in loss.parameters()) == 2 * 4 * 8


def test_attention_hook_scores_match_eager_attention_probabilities() -> None:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=32,
        attn_implementation="eager",
    )
    model = BertModel(config).eval()
    ids = torch.randint(0, 30, (2, 5))
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    with attention_of(model) as found, torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    assert len(found) == 2
    for attention, probs in zip(found, out.attentions, strict=True):
        masked = attention.scores().masked_fill(mask[:, None, None, :] == 0, float("-inf"))
        assert torch.allclose(torch.softmax(masked, -1), probs, atol=1e-6)


def test_distilbert_loss_matches_hand_computation_and_skips_padding() -> None:
    # Student embeddings + 1 layer, teacher embeddings + 2 layers, map `uniform` → (1, 2).
    # Token 0: s = (1, 0), t = (1, 1): cos = 1/√2. Token 1: s = (0, 2), t = (0, 5): cos 1.
    # Token 2 is padding. L = mean(1 − 1/√2, 0) = (1 − 1/√2)/2.
    mask = torch.tensor([[1, 1, 0]])
    s_hidden = (torch.zeros(1, 3, 2), torch.tensor([[[1.0, 0.0], [0.0, 2.0], [-9.0, 1.0]]]))
    t_layer = torch.tensor([[[1.0, 1.0], [0.0, 5.0], [1.0, 0.0]]])
    t_hidden = (torch.zeros(1, 3, 2), torch.zeros(1, 3, 2), t_layer)
    loss = DistilBERTLoss(1, 2, 2, 2)
    got = loss(
        Features(torch.zeros(1, 2), s_hidden, mask), Features(torch.zeros(1, 2), t_hidden, mask)
    )
    assert got.item() == pytest.approx((1 - 1 / math.sqrt(2)) / 2, rel=1e-6)
    assert loss.pairs == [(1, 2)]
    assert DistilBERTLoss.student_defaults == {"layer_init": "uniform"}


def test_distilbert_is_blind_to_scale() -> None:
    torch.manual_seed(0)
    h = torch.randn(2, 4, 8)
    mask = torch.ones(2, 4, dtype=torch.long)
    s = Features(torch.zeros(2, 2), (h, 3.0 * h), mask)
    t = Features(torch.zeros(2, 2), (h, h), mask)
    assert DistilBERTLoss(1, 1, 8, 8)(s, t).item() == pytest.approx(0.0, abs=1e-6)


def test_minilm_loss_matches_hand_computation() -> None:
    # One head of width 1, two tokens, nothing padded. Teacher q = k = v = (0, 0): its
    # relations are uniform (½, ½). Student q = (1, 1), k = (0, ln 3), v = (1, 0):
    #   attention row i: softmax(q_i·k) = softmax(0, ln 3) = (¼, ¾) for both rows;
    #   value relation: row 0 softmax(1, 0), row 1 softmax(0, 0) = (½, ½).
    # KL(u ‖ p) = Σ ½·ln(½ / p_j).
    def kl_uniform(p: list[float]) -> float:
        return sum(0.5 * math.log(0.5 / x) for x in p)

    e = math.e
    attention = kl_uniform([0.25, 0.75])  # both query rows
    values = (kl_uniform([e / (e + 1), 1 / (e + 1)]) + 0.0) / 2
    s_att = Attention(
        torch.tensor([[[1.0], [1.0]]]), torch.tensor([[[0.0], [math.log(3)]]]),
        torch.tensor([[[1.0], [0.0]]]), 1,
    )  # fmt: skip
    zeros = torch.zeros(1, 2, 1)
    t_att = Attention(zeros, zeros, zeros, 1)
    mask = torch.ones(1, 2, dtype=torch.long)
    hidden = (torch.zeros(1, 2, 1), torch.zeros(1, 2, 1))
    s = Features(torch.zeros(1, 2), hidden, mask, [s_att])
    t = Features(torch.zeros(1, 2), hidden, mask, [t_att])
    loss = MiniLMLoss(1, 1, 1, 1)
    assert loss(s, t).item() == pytest.approx(attention + values, rel=1e-5)
    assert loss.pairs == [(1, 1)]  # the last layers


def test_minilm_ignores_padding_and_needs_no_projection_across_widths() -> None:
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    s_att = Attention(*(torch.randn(2, 4, 8) for _ in range(3)), heads=2)
    t_att = Attention(*(torch.randn(2, 4, 16) for _ in range(3)), heads=4)
    loss = MiniLMLoss(2, 3, 8, 16, relation_heads=2)
    assert sum(p.numel() for p in loss.parameters()) == 0

    def feats(att: Attention, width: int) -> Features:
        return Features(torch.zeros(2, 2), (torch.zeros(2, 4, width),) * 4, mask, [att] * 3)

    before = loss(feats(s_att, 8), feats(t_att, 16))
    # Whatever sits at padded positions changes nothing.
    noisy = Attention(*(x.clone() for x in (s_att.q, s_att.k, s_att.v)), heads=2)
    for x in (noisy.q, noisy.k, noisy.v):
        x[0, 3] = 100.0
        x[1, 2:] = -50.0
    assert loss(feats(noisy, 8), feats(t_att, 16)).item() == pytest.approx(before.item(), rel=1e-5)
    assert before.item() > 0
    # A student equal to the teacher scores 0.
    assert loss(feats(t_att, 16), feats(t_att, 16)).item() == pytest.approx(0.0, abs=1e-6)


def test_minilm_refuses_widths_that_do_not_split_into_its_heads() -> None:
    from transformers import BertConfig, BertModel

    def bert(hidden: int, heads: int) -> BertModel:
        return BertModel(BertConfig(vocab_size=20, hidden_size=hidden, num_hidden_layers=1,
                                    num_attention_heads=heads, intermediate_size=16))  # fmt: skip

    with pytest.raises(ValueError, match="relation_heads"):
        MiniLMLoss(1, 1, 12, 16).check_models(bert(12, 3), bert(16, 8))
    MiniLMLoss(1, 1, 12, 16, relation_heads=4).check_models(bert(12, 3), bert(16, 8))
