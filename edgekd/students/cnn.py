"""A convolutional student: Kim 2014, "Convolutional Neural Networks for Sentence
Classification" (arXiv:1408.5882), on edgekd's token table and head.

embeddings → for each window width w, `filters` ReLU features of every w consecutive
tokens → max over the text → ReLU MLP → logits.

Why beside the BiLSTM: an LSTM reads a text one token at a time, each step a matmul
that waits for the last, so a 2-core CPU cannot spread a step's small product over its
cores; a window's features are one matmul over every position of the batch at once.

Each width's convolution is written as one `Linear` over the w token vectors of each
window side by side, which exports as ONNX MatMul: onnxruntime's dynamic int8
quantizes it like the MLP (its quantized Conv is the slower ConvInteger kernel).

Windows are "full": w − 1 zero vectors pad each side, so a text shorter than a window
still has features, and every window touching at least one token counts (n + w − 1 of
them for n tokens). Padding tokens are zero vectors too (the mask multiplies them
out), so a padded row gives exactly the logits of the row alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field, field_validator, model_validator
from torch import nn

from edgekd.config import MAX_INNER, check_student_params
from edgekd.students.table import TableConfig, TableStudent

MAX_WINDOW = 16  # tokens per window; wider windows read phrases an MLP sees as a bag anyway


class CNNConfig(TableConfig):
    widths: list[int] = Field(
        # 1 to 4 tokens: a WordPiece text splits words into pieces, so a window of 4
        # pieces spans ~2-3 words (Kim's 3-5 are words); width 1 is a bag of tokens.
        default_factory=lambda: [1, 2, 3, 4],
        min_length=1,
        max_length=8,
        description="Window widths in tokens; each adds `filters` features.",
    )
    filters: int = Field(128, ge=1, le=MAX_INNER, description="Features per window width.")

    @field_validator("widths")
    @classmethod
    def _widths(cls, value: list[int]) -> list[int]:
        bad = [w for w in value if not 1 <= w <= MAX_WINDOW]
        if bad:
            raise ValueError(f"window widths must be 1..{MAX_WINDOW} tokens, got {bad}")
        if len(set(value)) < len(value):
            raise ValueError(f"window widths repeat: {value}; list each once")
        return value

    @model_validator(mode="after")
    def _size_cap(self) -> CNNConfig:
        e, k = self.embedding_dim, self.filters
        rows, table = self.table_params()
        windows = sum(w * e * k + k for w in self.widths)
        check_student_params(
            table + windows + self.head_params(len(self.widths) * k),
            f"embedding_dim {e}, widths {self.widths}, filters {k}, mlp_size {self.mlp_size}, "
            f"embedding_rank {self.embedding_rank}, {rows:,} vocabulary rows",
        )
        return self


class CNNStudent(TableStudent):
    name = "cnn"
    Config = CNNConfig

    def build_encoder(self, config: CNNConfig) -> None:
        self.windows = nn.ModuleList(
            nn.Linear(w * config.embedding_dim, config.filters) for w in config.widths
        )

    @staticmethod
    def encoded_width(config: CNNConfig) -> int:
        return len(config.widths) * config.filters

    @staticmethod
    def token_width(config: CNNConfig) -> int:
        return len(config.widths) * config.filters

    def run(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        mix: tuple[torch.Tensor, torch.Tensor] | None,
        tokens: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(pooled features, and with `tokens` each token's features: those of the
        window of each width that ends at it, batch × T × widths·filters)."""
        x, attention_mask = self.embed(input_ids, attention_mask, mix)
        mask = attention_mask.to(x.dtype)
        x = self.dropout(x) * mask.unsqueeze(-1)
        t = x.shape[1]
        lengths = mask.sum(1, keepdim=True)  # batch × 1
        pooled, ending = [], []
        for w, linear in zip(self.config.widths, self.windows, strict=True):
            padded = F.pad(x, (0, 0, w - 1, w - 1))  # batch × (t + 2w − 2) × e
            # Window j holds tokens j − w + 1 … j: the w shifted views side by side.
            windows = torch.cat([padded[:, i : i + t + w - 1] for i in range(w)], dim=-1)
            h = torch.relu(linear(windows))  # batch × (t + w − 1) × filters
            # Windows past the text read only padding: zeroed, they never win a max of
            # ReLU outputs (≥ 0) over the n + w − 1 windows that touch a token.
            position = torch.arange(t + w - 1, device=x.device, dtype=x.dtype).unsqueeze(0)
            touches = (position < lengths + (w - 1)).to(x.dtype)
            pooled.append((h * touches.unsqueeze(-1)).max(dim=1).values)
            if tokens:  # window j ends at token j (it holds tokens j − w + 1 … j)
                ending.append(h[:, :t] * mask.unsqueeze(-1))
        return torch.cat(pooled, dim=1), (torch.cat(ending, dim=-1) if tokens else None)
