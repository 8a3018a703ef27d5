"""Intermediate-layer distillation for transformer students: layer maps, PKD, TinyBERT,
ALP-KD, DistilBERT, MiniLM.

Each `LayerLoss` is an `nn.Module` (its learned projections train with the
student) called with the student's and the teacher's `Features` of one batch:
logits, hidden states (embedding output first, then one per layer, each
batch × tokens × width), attention masks and, when `needs_attention`, every
layer's projected queries, keys and values (`Attention`).

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
from edgekd.threads import exact_sum


@dataclass
class Attention:
    """One self-attention layer's projected queries, keys and values (batch × T × width,
    the heads side by side) and its head count."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    heads: int

    @staticmethod
    def split(x: torch.Tensor, heads: int) -> torch.Tensor:
        """batch × T × width → batch × heads × T × (width / heads)."""
        b, t, width = x.shape
        if width % heads:
            raise ValueError(f"width {width} does not split into {heads} heads")
        return x.view(b, t, heads, width // heads).transpose(1, 2)

    def relation(self, a: torch.Tensor, b: torch.Tensor, heads: int | None) -> torch.Tensor:
        """Scaled dot products a·bᵀ/√d per head: batch × heads × T × T."""
        a, b = self.split(a, heads or self.heads), self.split(b, heads or self.heads)
        return a @ b.transpose(-1, -2) / math.sqrt(a.shape[-1])

    def scores(self, heads: int | None = None) -> torch.Tensor:
        """Pre-softmax attention scores QKᵀ/√d; with the layer's own heads, exactly
        the scores its attention softmaxes."""
        return self.relation(self.q, self.k, heads)

    def value_relation(self, heads: int | None = None) -> torch.Tensor:
        """MiniLM's value relation VVᵀ/√d, before its softmax."""
        return self.relation(self.v, self.v, heads)


@dataclass
class Features:
    logits: torch.Tensor
    hidden: tuple[torch.Tensor, ...]
    mask: torch.Tensor
    attention: list[Attention] | None = None

    def float(self) -> Features:
        """These features in fp32 (a bf16 forward's, so every loss on them is fp32)."""
        attention = self.attention and [
            Attention(a.q.float(), a.k.float(), a.v.float(), a.heads) for a in self.attention
        ]
        hidden = tuple(h.float() for h in self.hidden)
        return Features(self.logits.float(), hidden, self.mask, attention)


@contextmanager
def attention_of(model: nn.Module) -> Iterator[list[Attention]]:
    """Collect each self-attention layer's `Attention` (queries, keys, values) during
    forward passes of a BERT-family encoder (BERT, MobileBERT), in layer order.

    transformers' SDPA attention never materialises the scores; hooks on the query,
    key and value projections rebuild them exactly, whatever the attention kernel.
    """
    needed = ("query", "key", "value", "num_attention_heads", "attention_head_size")
    layers = [m for m in model.modules() if all(hasattr(m, a) for a in needed)]
    if not layers:
        raise ValueError("no BERT-style self-attention (query/key/value) modules found")
    out: list[Attention] = []
    handles = []
    for layer in layers:
        cache: dict[str, torch.Tensor] = {}

        def grab(name: str, cache: dict[str, torch.Tensor] = cache) -> Any:
            def hook(_m: nn.Module, _i: Any, output: torch.Tensor) -> None:
                cache[name] = output

            return hook

        def on_layer(m: Any, _i: Any, _o: Any, cache: dict[str, Any] = cache) -> None:
            out.append(Attention(cache["q"], cache["k"], cache["v"], int(m.num_attention_heads)))

        handles += [
            layer.get_submodule(name).register_forward_hook(grab(name[0]))
            for name in ("query", "key", "value")
        ]
        handles.append(layer.register_forward_hook(on_layer))
    try:
        yield out
    finally:
        for handle in handles:
            handle.remove()


def hf_features(model: Any, batch: dict[str, torch.Tensor], attention: bool) -> Features:
    """Features of a Hugging Face `*ForSequenceClassification` (the teacher)."""
    with attention_of(model) if attention else nullcontext() as collected:
        out = model(**batch, output_hidden_states=True)
    return Features(out.logits, out.hidden_states, batch["attention_mask"], collected)


def student_features(model: Any, batch: dict[str, torch.Tensor], attention: bool) -> Features:
    """Features of a student whose forward takes `return_hidden=True` (BertStudent)."""
    with attention_of(model) if attention else nullcontext() as collected:
        logits, hidden = model(**batch, return_hidden=True)
    return Features(logits, hidden, batch["attention_mask"], collected)


def cls_vectors(hidden: tuple[torch.Tensor, ...], layers: list[int]) -> torch.Tensor:
    """[CLS] (first-token) vectors of the given layers: len(layers) × batch × width."""
    return torch.stack([hidden[i][:, 0] for i in layers])


def masked_mse(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the positions where `mask` (broadcastable to a) is 1."""
    mask = mask.to(a.dtype).expand_as(a)
    return exact_sum((a - b).pow(2) * mask) / exact_sum(mask).clamp_min(1.0)


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
    needs_attention = False  # True: `Features.attention` is collected
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

    def check_models(self, student: nn.Module, teacher: nn.Module) -> None:
        """Raise ValueError when these two models cannot be compared (before training)."""

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

    needs_attention = True
    same_tokens = True

    default_stage_epochs = 2

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.proj_embed = self.projection()
        self.proj_hidden = self.projection()

    def forward(self, student: Features, teacher: Features) -> torch.Tensor:
        assert student.attention is not None and teacher.attention is not None
        token = student.mask.unsqueeze(-1)
        loss = masked_mse(self.proj_embed(student.hidden[0]), teacher.hidden[0], token)
        pair_mask = (student.mask.unsqueeze(-1) * student.mask.unsqueeze(-2)).unsqueeze(1)
        for m, n in self.pairs:
            loss = loss + masked_mse(self.proj_hidden(student.hidden[m]), teacher.hidden[n], token)
            a_s, a_t = student.attention[m - 1].scores(), teacher.attention[n - 1].scores()
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


def attention_width(model: nn.Module) -> tuple[int, int]:
    """(query width, heads) of a model's first self-attention layer."""
    for m in model.modules():
        query, heads = getattr(m, "query", None), getattr(m, "num_attention_heads", None)
        if isinstance(query, nn.Linear) and isinstance(heads, int):
            return query.out_features, heads
    raise ValueError("no BERT-style self-attention (query/key/value) modules found")


def token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of batch × T `values` over the real tokens (mask 1)."""
    mask = mask.to(values.dtype)
    return exact_sum(values * mask) / exact_sum(mask).clamp_min(1.0)


class DistilBERTLoss(LayerLoss):
    """DistilBERT's cosine loss (Sanh et al. 2019, "DistilBERT, a distilled version of
    BERT", arXiv:1910.01108).

    L_cos = Σ_m mean over real tokens of (1 − cos(h_s^m W, h_t^g(m))), added to the
    prediction loss. The paper aligns the last hidden states of a student initialised
    from every other teacher layer; here every mapped layer (`uniform` by default, so
    student layer m learns from the teacher layer it was copied from; `last`: the
    paper's one pair), and the student's `layer_init` defaults to `uniform` with it
    (`student_defaults`). W is a learned projection when the widths differ (DistilBERT
    kept the teacher's width, so it had none). Cosine compares directions only: it
    leaves the student's scale free, unlike TinyBERT's MSE.
    """

    # Options this loss gives the student unless the user set them (the paper's init).
    student_defaults: ClassVar[dict[str, Any]] = {"layer_init": "uniform"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.proj = self.projection()

    def forward(self, student: Features, teacher: Features) -> torch.Tensor:
        loss = student.logits.new_zeros(())
        for m, n in self.pairs:
            cos = F.cosine_similarity(self.proj(student.hidden[m]), teacher.hidden[n], dim=-1)
            loss = loss + token_mean(1.0 - cos, student.mask)
        return loss


class MiniLMOptions(LayerOptions):
    layer_map: Literal["uniform", "top", "bottom", "last"] = Field(
        "last", description="Layer pairs compared (MiniLM: the last layers only)."
    )
    relation_heads: int | None = Field(
        None,
        ge=1,
        description="Heads queries, keys and values are split into for the relations; unset: "
        "the teacher's (with the student's own count, its real attention distributions).",
    )


def relation_kl(teacher: torch.Tensor, student: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over batch, heads and real query tokens of KL(softmax(teacher) ‖ softmax(student))
    row by row (batch × heads × T × T relations), padding keys left out of both softmaxes."""
    # −1e9, not −inf: a padded key then has probability 0 and log-probability ≈ −1e9 on
    # both sides, so its KL term is 0 · (finite) = 0, never 0 · (−inf − −inf) = nan.
    keys = mask[:, None, None, :] == 0
    log_t = torch.log_softmax(teacher.masked_fill(keys, -1e9), dim=-1)
    log_s = torch.log_softmax(student.masked_fill(keys, -1e9), dim=-1)
    kl = (log_t.exp() * (log_t - log_s)).sum(-1)  # batch × heads × T
    queries = mask[:, None, :].to(kl.dtype).expand_as(kl)
    return exact_sum(kl * queries) / exact_sum(queries).clamp_min(1.0)


class MiniLMLoss(LayerLoss):
    """MiniLM (Wang et al. 2020, "MiniLM: Deep Self-Attention Distillation for
    Task-Agnostic Compression of Pre-Trained Transformers", arXiv:2002.10957).

    L = KL(A_t ‖ A_s) + KL(VR_t ‖ VR_s) on the last layers (`layer_map` `last`), with
    A = softmax(QKᵀ/√d_k) the attention distributions and VR = softmax(VVᵀ/√d_k) the
    value relations, per head, averaged over heads and real query tokens. Both are
    T × T per head whatever the width, so a student of any width needs no projection.
    Heads: the relations are taken over `relation_heads` (unset: the teacher's count),
    splitting the concatenated queries, keys and values (MiniLMv2's multi-head
    relations, arXiv:2012.15828) so that head counts may differ too; when they equal
    the student's own heads, A is exactly its attention distribution.
    """

    Config: ClassVar[type[BaseModel]] = MiniLMOptions
    needs_attention = True
    same_tokens = True

    def __init__(self, *args: Any, relation_heads: int | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("layer_map", "last")
        super().__init__(*args, **kwargs)
        self.relation_heads = relation_heads

    def check_models(self, student: nn.Module, teacher: nn.Module) -> None:
        t_width, t_heads = attention_width(teacher)
        s_width, _ = attention_width(student)
        heads = self.relation_heads or t_heads
        for who, width in (("student", s_width), ("teacher", t_width)):
            if width % heads:
                raise ValueError(
                    f"the {who}'s attention width {width} does not split into {heads} relation "
                    "heads; set relation_heads to a divisor of both widths"
                )

    def forward(self, student: Features, teacher: Features) -> torch.Tensor:
        assert student.attention is not None and teacher.attention is not None
        loss = student.logits.new_zeros(())
        for m, n in self.pairs:
            a_s, a_t = student.attention[m - 1], teacher.attention[n - 1]
            heads = self.relation_heads or a_t.heads
            loss = loss + relation_kl(a_t.scores(heads), a_s.scores(heads), student.mask)
            loss = loss + relation_kl(
                a_t.value_relation(heads), a_s.value_relation(heads), student.mask
            )
        return loss


def attention_kl(teacher: Attention, student: Attention, mask: torch.Tensor) -> torch.Tensor:
    """KL(A_t ‖ A_s) of two layers' attention distributions, head by head, averaged over
    heads and real query tokens; with different head counts, of their head means (each
    still a distribution over the keys)."""
    if teacher.heads == student.heads:
        return relation_kl(teacher.scores(), student.scores(), mask)
    keys = mask[:, None, None, :] == 0

    def head_mean(a: Attention) -> torch.Tensor:
        return torch.softmax(a.scores().masked_fill(keys, -1e9), dim=-1).mean(1, keepdim=True)

    # Back to scores whose softmax is the head mean: its log (masked keys ~ −1e9 again).
    log = [head_mean(a).clamp_min(1e-30).log() for a in (teacher, student)]
    return relation_kl(log[0], log[1], mask)


class MobileBERTLoss(LayerLoss):
    """MobileBERT's layer-wise knowledge transfer (Sun et al. 2020, "MobileBERT: a Compact
    Task-Agnostic BERT for Resource-Limited Devices", arXiv:2004.02984).

    L = Σ_m [ MSE(H_s^m W, H_t^g(m)) + KL(A_t^g(m) ‖ A_s^m) ]: feature-map transfer on each
    mapped layer's output over real tokens (W a learned projection only when the widths
    differ; the mobilebert student's inter-block width is the teacher's) and attention
    transfer on its distributions (`attention_kl`). Two stages, as the paper trains:
    `stage_epochs` of this term alone, then prediction KD alone. All layers are
    transferred at once: the paper's auxiliary knowledge transfer, not its progressive
    one (layer by layer, lower layers frozen), which needs an epoch budget per layer.
    """

    needs_attention = True
    same_tokens = True
    default_stage_epochs = 1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.proj = self.projection()

    def forward(self, student: Features, teacher: Features) -> torch.Tensor:
        assert student.attention is not None and teacher.attention is not None
        token = student.mask.unsqueeze(-1)
        loss = student.logits.new_zeros(())
        for m, n in self.pairs:
            loss = loss + masked_mse(self.proj(student.hidden[m]), teacher.hidden[n], token)
            loss = loss + attention_kl(
                teacher.attention[n - 1], student.attention[m - 1], student.mask
            )
        return loss
