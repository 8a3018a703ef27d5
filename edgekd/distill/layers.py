"""Intermediate-layer distillation for transformer students: layer maps, PKD, TinyBERT, ALP-KD.

Each `LayerLoss` is an `nn.Module` (its learned projections train with the
student) called with the student's and the teacher's `Features` of one batch:
logits, hidden states (embedding output first, then one per layer, each
batch × tokens × width), attention masks and, when `needs_scores`, the
pre-softmax attention scores of every layer.

Layer maps send student layer m (1..M) to teacher layer g(m) (1..N):
`uniform` g(m) = round(m·N/M), `top` g(m) = m + N − M, `bottom` g(m) = m,
`last` M → N only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, Field
from torch import nn

from edgekd.config import StrictModel
from edgekd.students.base import map_layers


@dataclass
class Features:
    logits: torch.Tensor
    hidden: tuple[torch.Tensor, ...]
    mask: torch.Tensor
    scores: list[torch.Tensor] | None = None


@contextmanager
def attention_scores(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Collect each layer's pre-softmax attention scores QKᵀ/√d (batch × heads × T × T)
    during forward passes of a BERT-family encoder, in layer order.

    transformers' SDPA attention never materialises the scores; hooks on the query
    and key projections rebuild them exactly, whatever the attention kernel.
    """
    needed = ("query", "key", "num_attention_heads", "attention_head_size")
    layers = [m for m in model.modules() if all(hasattr(m, a) for a in needed)]
    if not layers:
        raise ValueError("no BERT-style self-attention (query/key) modules found")
    out: list[torch.Tensor] = []
    handles = []
    for layer in layers:
        cache: dict[str, torch.Tensor] = {}

        def grab(name: str, cache: dict[str, torch.Tensor] = cache) -> Any:
            def hook(_m: nn.Module, _i: Any, output: torch.Tensor) -> None:
                cache[name] = output

            return hook

        def on_layer(m: Any, _i: Any, _o: Any, cache: dict[str, Any] = cache) -> None:
            b, t, _ = cache["q"].shape
            h, d = int(m.num_attention_heads), int(m.attention_head_size)
            q = cache["q"].view(b, t, h, d).transpose(1, 2)
            k = cache["k"].view(b, t, h, d).transpose(1, 2)
            out.append(q @ k.transpose(-1, -2) / math.sqrt(d))

        handles += [
            layer.get_submodule("query").register_forward_hook(grab("q")),
            layer.get_submodule("key").register_forward_hook(grab("k")),
            layer.register_forward_hook(on_layer),
        ]
    try:
        yield out
    finally:
        for handle in handles:
            handle.remove()


def hf_features(model: Any, batch: dict[str, torch.Tensor], scores: bool) -> Features:
    """Features of a Hugging Face `*ForSequenceClassification` (the teacher)."""
    with attention_scores(model) if scores else nullcontext() as collected:
        out = model(**batch, output_hidden_states=True)
    return Features(out.logits, out.hidden_states, batch["attention_mask"], collected)


def student_features(model: Any, batch: dict[str, torch.Tensor], scores: bool) -> Features:
    """Features of a student whose forward takes `return_hidden=True` (BertStudent)."""
    with attention_scores(model) if scores else nullcontext() as collected:
        logits, hidden = model(**batch, return_hidden=True)
    return Features(logits, hidden, batch["attention_mask"], collected)


def cls_vectors(hidden: tuple[torch.Tensor, ...], layers: list[int]) -> torch.Tensor:
    """[CLS] (first-token) vectors of the given layers: len(layers) × batch × width."""
    return torch.stack([hidden[i][:, 0] for i in layers])


def masked_mse(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the positions where `mask` (broadcastable to a) is 1."""
    mask = mask.to(a.dtype).expand_as(a)
    return ((a - b).pow(2) * mask).sum() / mask.sum().clamp_min(1.0)


class LayerOptions(StrictModel):
    layer_map: Literal["uniform", "top", "bottom", "last"] = Field(
        "uniform", description="Teacher layer each student layer learns from (PKD-skip: uniform)."
    )
    weight: float | None = Field(None, ge=0, description="Weight of this term; unset: the loss's.")
    stage_epochs: int | None = Field(
        None, ge=0, description="Epochs of this term alone first; unset: the loss's (TinyBERT 2)."
    )


class LayerLoss(nn.Module):
    """Base: pick the layer pairs; `forward(student, teacher) -> scalar`.

    `stage_epochs` > 0 gives TinyBERT's two-stage schedule: epochs 1..stage_epochs
    train this term alone, later epochs the prediction loss alone.
    """

    Config: ClassVar[type[BaseModel]] = LayerOptions
    needs_scores = False
    same_tokens = False  # True when the loss compares token positions, not [CLS] only
    default_weight = 1.0
    default_stage_epochs = 0

    def __init__(
        self,
        student_layers: int,
        teacher_layers: int,
        student_width: int,
        teacher_width: int,
        layer_map: str = "uniform",
        weight: float | None = None,
        stage_epochs: int | None = None,
    ) -> None:
        super().__init__()
        self.pairs = map_layers(layer_map, student_layers, teacher_layers)
        self.student_layers, self.teacher_layers = student_layers, teacher_layers
        self.student_width, self.teacher_width = student_width, teacher_width
        self.weight = self.default_weight if weight is None else weight
        self.stage_epochs = self.default_stage_epochs if stage_epochs is None else stage_epochs
        if self.weight < 0 or self.stage_epochs < 0:
            raise ValueError("weight and stage_epochs must be >= 0")

    def projection(self) -> nn.Module:
        """A learned W (student → teacher width) when widths differ, else identity."""
        if self.student_width == self.teacher_width:
            return nn.Identity()
        return nn.Linear(self.student_width, self.teacher_width, bias=False)

    def weights(self, epoch: int) -> tuple[float, float]:
        """(weight of this term, weight of the prediction loss) at `epoch` (1-based)."""
        if self.stage_epochs <= 0:
            return self.weight, 1.0
        return (self.weight, 0.0) if epoch <= self.stage_epochs else (0.0, 1.0)


class PKDLoss(LayerLoss):
    """Patient KD (Sun et al. 2019, "Patient Knowledge Distillation for BERT Model
    Compression", arXiv:1908.09355).

    L_PT = Σ_m mean_batch ‖ h_s^m/‖h_s^m‖ − h_t^g(m)/‖h_t^g(m)‖ ‖²  over the [CLS] vectors
    of the mapped layers (PKD-skip = `uniform`, PKD-last = `top`), added to the
    prediction loss with weight β (`weight`; the paper searched 10..1000).
    """

    default_weight = 100.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.proj = self.projection()

    def forward(self, student: Features, teacher: Features) -> torch.Tensor:
        s = F.normalize(self.proj(cls_vectors(student.hidden, [m for m, _ in self.pairs])), dim=-1)
        t = F.normalize(cls_vectors(teacher.hidden, [n for _, n in self.pairs]), dim=-1)
        return (s - t).pow(2).sum(-1).mean(-1).sum()


class TinyBERTLoss(LayerLoss):
    """TinyBERT (Jiao et al. 2020, "TinyBERT: Distilling BERT for Natural Language
    Understanding", arXiv:1909.10351), task-specific stage.

    L = MSE(E_s W_e, E_t) + Σ_m [ MSE(H_s^m W_h, H_t^g(m)) + MSE(A_s^m, A_t^g(m)) ]
    over real (non-padding) tokens and token pairs, with A the pre-softmax attention
    scores, head by head (the paper's (1/h)·Σ_i MSE(A_i^S, A_i^T)), or averaged over
    heads when the head counts differ. Two stages: `stage_epochs` epochs of this
    term alone, then prediction-layer KD alone. Teacher and student must tokenize
    alike (the BERT student reads the teacher's vocabulary).
    """

    needs_scores = True
    same_tokens = True

    default_stage_epochs = 2

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.proj_embed = self.projection()
        self.proj_hidden = self.projection()

    def forward(self, student: Features, teacher: Features) -> torch.Tensor:
        assert student.scores is not None and teacher.scores is not None
        token = student.mask.unsqueeze(-1)
        loss = masked_mse(self.proj_embed(student.hidden[0]), teacher.hidden[0], token)
        pair_mask = (student.mask.unsqueeze(-1) * student.mask.unsqueeze(-2)).unsqueeze(1)
        for m, n in self.pairs:
            loss = loss + masked_mse(self.proj_hidden(student.hidden[m]), teacher.hidden[n], token)
            a_s, a_t = student.scores[m - 1], teacher.scores[n - 1]
            if a_s.shape[1] != a_t.shape[1]:  # head counts differ: compare head means
                a_s, a_t = a_s.mean(1, keepdim=True), a_t.mean(1, keepdim=True)
            loss = loss + masked_mse(a_s, a_t, pair_mask)
        return loss


class ALPLoss(LayerLoss):
    """ALP-KD (Passban et al. 2021, "ALP-KD: Attention-Based Layer Projection for
    Knowledge Distillation", arXiv:2012.14022).

    Each student layer j attends over all teacher layers k (their [CLS] vectors):
    α_jk = softmax_k(h_s^j · h_t^k), c_j = Σ_k α_jk h_t^k, L = Σ_j MSE(h_s^j, c_j);
    h_s is first projected to the teacher's width when they differ. The layer map is
    not used: every student layer sees every teacher layer.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.proj = self.projection()

    def attention(self, student: Features, teacher: Features) -> tuple[torch.Tensor, torch.Tensor]:
        """(α: batch × M × N, whose rows sum to 1; projected student [CLS]: batch × M × d)."""
        s = self.proj(cls_vectors(student.hidden, list(range(1, self.student_layers + 1))))
        t = cls_vectors(teacher.hidden, list(range(1, self.teacher_layers + 1)))
        s, t = s.transpose(0, 1), t.transpose(0, 1)  # batch × layers × width
        return torch.softmax(s @ t.transpose(1, 2), dim=-1), s

    def forward(self, student: Features, teacher: Features) -> torch.Tensor:
        alpha, s = self.attention(student, teacher)
        t = cls_vectors(teacher.hidden, list(range(1, self.teacher_layers + 1))).transpose(0, 1)
        context = alpha @ t
        return (s - context).pow(2).mean(dim=(0, 2)).sum()


def encoder_shape(model: Any) -> tuple[int, int]:
    """(layers, width) of a BERT-style model (teacher or BertStudent)."""
    config = getattr(model, "hf_config", None) or model.config
    return int(config.num_hidden_layers), int(config.hidden_size)
