"""A MobileBERT student (Sun et al. 2020, "MobileBERT: a Compact Task-Agnostic BERT for
Resource-Limited Devices", arXiv:2004.02984).

transformers' MobileBERT architecture: each layer squeezes the `hidden`-wide
inter-block feature map through a linear bottleneck to a narrow `bottleneck` width,
attends and runs a stack of `ffn_stacks` small FFNs there, and widens back; word
embeddings are `embedding` wide, and a kernel-3 "trigram" of them is projected to
`hidden`. The inter-block width defaults to the teacher's, as the paper's IB-BERT
teacher shares it with the student, so layer-wise feature-map transfer compares the
two without a projection; the student trains with the `mobilebert` intermediate loss
(feature maps and attention, then prediction KD: `edgekd.distill.layers`) unless
another is named.

Initialisation from the teacher: word rows are the teacher's projected onto their
top `embedding` principal directions (`project_rows`), position and token-type rows
are copied when `hidden` is the teacher's width; every layer starts from scratch.
The paper pre-trains the student task-agnostically (distillation on Wikipedia and
books) before the task; edgekd does not, so on a task's few thousand rows a
MobileBERT student starts far behind a BERT student copied from the teacher's layers
(measured in benchmarks/results/methods_sst2.md).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, model_validator
from torch import nn

from edgekd.config import (
    MAX_HEADS,
    MAX_INNER,
    MAX_LAYERS,
    MAX_TOKENS,
    MAX_WIDTH,
    StrictModel,
    check_student_params,
)
from edgekd.students.base import project_rows
from edgekd.students.bert import BertStudent, check_positions
from edgekd.students.tokenizer import StudentTokenizer


class MobileBertStudentConfig(StrictModel):
    layers: int | None = Field(
        None,
        ge=1,
        le=MAX_LAYERS,
        description="Layers; unset: the teacher's (MobileBERT matches its depth).",
    )
    hidden: int | None = Field(
        None,
        ge=8,
        le=MAX_WIDTH,
        description="Inter-block width; unset: the teacher's (no projection).",
    )
    bottleneck: int = Field(
        128, ge=8, le=MAX_WIDTH, description="Intra-block (bottleneck) width (paper 128)."
    )
    embedding: int = Field(128, ge=8, le=MAX_WIDTH, description="Word embedding width (paper 128).")
    heads: int = Field(
        4, ge=1, le=MAX_HEADS, description="Attention heads at the bottleneck width (paper 4)."
    )
    ffn: int = Field(
        512, ge=8, le=MAX_INNER, description="Inner width of each stacked FFN (paper 512)."
    )
    # 16: the paper stacks 4; more is past any published MobileBERT.
    ffn_stacks: int = Field(4, ge=1, le=16, description="FFNs per layer (paper 4).")
    normalization: Literal["no_norm", "layer_norm"] = Field(
        "no_norm", description="no_norm: the paper's element-wise affine, faster than LayerNorm."
    )
    init: Literal["teacher", "random"] = Field(
        "teacher", description="Word, position and token-type rows from the teacher."
    )
    dropout: float = Field(0.1, ge=0, lt=1)
    max_length: int = Field(
        64,
        ge=4,
        le=MAX_TOKENS,
        description="Tokens per text incl. [CLS] and [SEP]; at most max_position_embeddings.",
    )
    tokenizer: str | None = Field(
        None, description="HF tokenizer (id or folder); unset: the teacher's vocabulary."
    )
    # Copied from the teacher at prepare time so a saved student rebuilds exactly.
    max_position_embeddings: int = Field(512, ge=4, le=MAX_TOKENS)
    type_vocab_size: int = Field(2, ge=1, le=1024)

    @model_validator(mode="after")
    def _fits(self) -> MobileBertStudentConfig:
        check_positions(self.max_length, self.max_position_embeddings)
        if self.layers is not None and self.hidden is not None:
            # Per layer: in/out projections hidden↔bottleneck (2·(2·h·b)), attention at
            # the bottleneck (4·b²), ffn_stacks FFNs (2·b·f each); biases are noise.
            h, b = self.hidden, self.bottleneck
            per_layer = 4 * h * b + 4 * b * b + self.ffn_stacks * 2 * b * self.ffn
            check_student_params(
                self.layers * per_layer + 3 * self.embedding * h,
                f"layers {self.layers}, hidden {h}, bottleneck {b}, ffn {self.ffn} × "
                f"ffn_stacks {self.ffn_stacks}",
            )
        return self


class MobileBertStudent(BertStudent):
    name = "mobilebert"
    Config = MobileBertStudentConfig  # type: ignore[assignment]
    hf_architecture: ClassVar[str] = "MobileBertForSequenceClassification"
    base_prefix: ClassVar[str] = "mobilebert"
    # onnxruntime's BERT fusions look for LayerNorm and one FFN per layer: not this graph.
    fuses: ClassVar[bool] = False
    # Layer-wise feature-map and attention transfer, then prediction KD (the paper's).
    default_intermediate: ClassVar[str | None] = "mobilebert"
    # Its layers start from scratch: twice the rate of a BERT student, whose layers are
    # the teacher's and need only fine-tuning (5e-5).
    default_lr = 1e-4

    def __init__(self, config: Any, vocab_size: int, num_labels: int) -> None:
        from transformers import MobileBertConfig, MobileBertModel

        nn.Module.__init__(self)
        self.config, self.vocab_size, self.num_labels = config, vocab_size, num_labels
        self.init_notes: list[str] = []
        self.hf_config = MobileBertConfig(
            vocab_size=vocab_size,
            hidden_size=config.hidden,
            num_hidden_layers=config.layers,
            num_attention_heads=config.heads,
            intermediate_size=config.ffn,
            embedding_size=config.embedding,
            intra_bottleneck_size=config.bottleneck,
            true_hidden_size=config.bottleneck,
            num_feedforward_networks=config.ffn_stacks,
            normalization_type=config.normalization,
            hidden_dropout_prob=config.dropout,
            attention_probs_dropout_prob=config.dropout,
            max_position_embeddings=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size,
            num_labels=num_labels,
            attn_implementation="eager",
        )
        self.mobilebert = MobileBertModel(self.hf_config)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.hidden or 0, num_labels)
        self.hf_tokenizer: Any = None
        self.exits = nn.ModuleList()  # no early exit: its layers export as one graph

    @classmethod
    def teacher_defaults(cls, tc: Any) -> dict[str, Any]:
        return {
            "layers": getattr(tc, "num_hidden_layers", 4),
            "hidden": getattr(tc, "hidden_size", 256),
            "max_position_embeddings": getattr(tc, "max_position_embeddings", 512),
            "type_vocab_size": getattr(tc, "type_vocab_size", 2),
        }

    @classmethod
    def check_shape(cls, config: Any) -> None:
        if config.bottleneck % config.heads:
            raise ValueError(
                f"bottleneck {config.bottleneck} is not a multiple of heads {config.heads}"
            )

    def init_from_teacher(
        self, teacher: Any, teacher_tokenizer: Any, tok: StudentTokenizer
    ) -> list[str]:
        same = self.hf_tokenizer.get_vocab() == teacher_tokenizer.get_vocab()
        return copy_teacher_embeddings(self, teacher, tok, teacher_tokenizer, same)


def copy_teacher_embeddings(
    student: MobileBertStudent, teacher: Any, tok: StudentTokenizer, t_tok: Any, same: bool
) -> list[str]:
    """Word rows from the teacher's (its own rows, or the mean of its pieces' rows for
    another vocabulary: `teacher_rows_for`), projected to the embedding width; positions
    and token types copied when the widths allow. What was done, in words."""
    from edgekd.students.base import teacher_rows_for
    from edgekd.students.tokenizer import vocab_tokens

    ours = student.mobilebert.embeddings
    t_base = getattr(teacher, "base_model", None)
    t_emb = getattr(t_base, "embeddings", None)
    if t_emb is None or not hasattr(teacher, "get_input_embeddings"):
        return ["teacher is not BERT-shaped: student starts from scratch"]
    notes = []
    rows = teacher_rows_for(vocab_tokens(tok), teacher, t_tok, same_vocab=same)
    table = project_rows(rows, ours.word_embeddings.embedding_dim)
    # The padding row stays zero: the trigram input then sees padding as the zeros it
    # pads the sequence's ends with, so a padded row predicts as it does alone.
    table[tok.pad_id] = 0.0
    with torch.no_grad():
        ours.word_embeddings.weight.copy_(table)
    notes.append(f"word embeddings: {rows.shape[1]} → {table.shape[1]} wide (PCA of the teacher's)")
    for name in ("position_embeddings", "token_type_embeddings"):
        theirs = getattr(t_emb, name, None)
        mine = getattr(ours, name)
        if theirs is not None and theirs.weight.shape == mine.weight.shape:
            with torch.no_grad():
                mine.weight.copy_(theirs.weight)
            notes.append(f"{name}: copied")
        else:
            notes.append(f"{name}: shapes differ, random init")
    notes.append("layers: random init (no task-agnostic pre-training)")
    return notes
