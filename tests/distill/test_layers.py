"""Layer maps, the pre-softmax attention hook, and the PKD / TinyBERT / ALP losses."""

from __future__ import annotations

import math

import pytest
import torch

from edgekd.distill.layers import (
    ALPLoss,
    Features,
    PKDLoss,
    TinyBERTLoss,
    attention_scores,
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
    s_scores = [torch.tensor([[[[3.0, 9.0], [9.0, 9.0]]]])]  # batch × heads(1) × 2 × 2
    t_scores = [torch.tensor([[[[1.0, 0.0], [0.0, 0.0]]]])]
    loss = TinyBERTLoss(1, 1, 2, 2, layer_map="bottom")
    s = Features(torch.zeros(1, 2), s_hidden, mask, s_scores)
    t = Features(torch.zeros(1, 2), t_hidden, mask, t_scores)
    # embeddings: ((1−1)² + (2−0)²)/2 = 2; hidden: (4 + 4)/2 = 4; attention: (3−1)² = 4
    assert loss(s, t).item() == pytest.approx(2 + 4 + 4)


def test_tinybert_runs_two_stages() -> None:
    loss = TinyBERTLoss(1, 2, 4, 8, stage_epochs=2)
    assert [loss.weights(e) for e in (1, 2, 3)] == [(1.0, 0.0), (1.0, 0.0), (0.0, 1.0)]
    # Widths differ: learned projections for embeddings and hidden states.
    assert sum(p.numel() for p in loss.parameters()) == 2 * 4 * 8


def test_attention_scores_match_eager_attention_probabilities() -> None:
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
    with attention_scores(model) as scores, torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    assert len(scores) == 2
    for raw, probs in zip(scores, out.attentions, strict=True):
        masked = raw.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
        assert torch.allclose(torch.softmax(masked, -1), probs, atol=1e-6)
