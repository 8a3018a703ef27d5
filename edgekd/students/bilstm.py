"""The BiLSTM student of Tang et al. 2019, "Distilling Task-Specific Knowledge from
BERT into Simple Neural Networks" (arXiv:1903.12136).

embeddings → one bidirectional LSTM layer → pooling over time → ReLU MLP → logits.
Paper sizes: 300-d embeddings, 150 hidden units per direction, a 400-unit ReLU
layer. Padding is handled with packed sequences, so a padded row gives exactly the
logits of the same row alone (the backward direction never reads padding); the
ONNX export keeps this through the LSTM op's `sequence_lens` input.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import nn

from edgekd.config import (
    MAX_INNER,
    MAX_TOKENS,
    MAX_VOCAB,
    MAX_WIDTH,
    StrictModel,
    check_student_params,
)
from edgekd.data import sides_of
from edgekd.errors import EdgeKDError
from edgekd.students.base import (
    Student,
    dummy_rows,
    project_rows,
    teacher_output_rows,
    teacher_rows_for,
)
from edgekd.students.tokenizer import (
    StudentTokenizer,
    build_word_tokenizer,
    is_wordpiece,
    vocab_tokens,
    wordpiece_from_teacher,
)


class BiLSTMConfig(StrictModel):
    vocab: Literal["auto", "word", "wordpiece"] = Field(
        # auto → wordpiece for a WordPiece teacher. A word vocabulary maps every word
        # the transfer set lacks to one [UNK] row: on SST-2 dev that is 4.8% of words,
        # in 55% of sentences, and on those sentences the word student kept 93.9% of the
        # teacher's accuracy against 98.6% on the rest (0.8413 vs 0.8855, one seed);
        # the teacher's pieces carry such words (0.8622 on them, 0.8693 overall).
        "auto",
        description="Own word vocabulary from the transfer set, or the teacher's WordPiece "
        "cut to the pieces the transfer set uses; auto: wordpiece if the teacher has one.",
    )
    embedding_dim: int = Field(
        # 64, not Tang et al.'s 300: per token and direction the LSTM's input weights cost
        # 4·150·64 = 38k multiply-adds instead of 4·150·300 = 180k (recurrent: 90k), so
        # 270k → 128k, and training ran 2.3× faster (2 cores, batch 50). A rank-64 table
        # projected to 300 would feed the LSTM a linear map of rank ≤ 64 anyway: the
        # same functions, at twice the cost. On SST-2 the 64-d student matched the 300-d
        # one (benchmarks/results/export_sst2.md: 0.8670 vs 0.8578 in int8).
        64,
        ge=2,
        le=MAX_WIDTH,
        description="Width the LSTM reads (Tang et al.: 300).",
    )
    embedding_rank: int | None = Field(
        # 64: a wider table (embedding_dim 300) stays 0.85 MB in int8 for 13k tokens, not
        # 4 MB, and its int8 bundle under 1.8 MB.
        64,
        ge=1,
        le=MAX_WIDTH,
        description="Factorised table: vocab × rank rows, then a rank → embedding_dim "
        "projection (ALBERT-style); bytes scale with rank, not embedding_dim. null: "
        "a plain vocab × embedding_dim table.",
    )
    hidden_size: int = Field(
        150, ge=1, le=MAX_WIDTH, description="LSTM units per direction; Tang et al.: 150."
    )

    @property
    def rank(self) -> int | None:
        """The factorised table's width, or None for a plain table: a rank at or above
        `embedding_dim` would add a projection and save nothing."""
        r = self.embedding_rank
        return r if r is not None and r < self.embedding_dim else None

    mlp_size: int = Field(
        400, ge=1, le=MAX_INNER, description="ReLU layer width; Tang et al.: 400."
    )
    pooling: Literal["max", "last"] = Field(
        "max", description="Max over time, or the concatenated final states of both directions."
    )
    dropout: float = Field(0.1, ge=0, lt=1)
    init: Literal["teacher", "teacher-output", "random"] = Field(
        "teacher",
        description="Start embeddings from the teacher's input table (teacher), or from "
        "what its fine-tuned encoder outputs for each token alone (teacher-output, "
        "model2vec's recipe), PCA to the table's width; or random.",
    )
    max_vocab: int = Field(
        50_000, ge=3, le=MAX_VOCAB, description="Word vocabulary cap (incl. PAD, UNK)."
    )
    min_freq: int = Field(1, ge=1, description="Keep words seen at least this often.")
    lowercase: bool = True
    max_length: int = Field(
        64, ge=1, le=MAX_TOKENS, description="Tokens per text; longer texts are cut."
    )
    pair: bool = Field(
        False, description="Siamese over sentence pairs (set from the data by prepare)."
    )

    @model_validator(mode="after")
    def _size_cap(self) -> BiLSTMConfig:
        # Parameters from the options alone, before anything is allocated: the LSTM
        # (2 directions × 4 gates × (h·(e+h) + 2h)), the MLP and, for a word vocabulary,
        # a table of max_vocab rows (a WordPiece table is the teacher's size, ~30k rows).
        e, h = self.embedding_dim, self.hidden_size
        rows = self.max_vocab if self.vocab == "word" else 30_522
        table = rows * (self.rank or e) + (self.rank or 0) * e
        lstm = 2 * 4 * (h * (e + h) + 2 * h)
        mlp = 2 * h * (4 if self.pair else 1) * self.mlp_size
        check_student_params(
            table + lstm + mlp,
            f"embedding_dim {e}, hidden_size {h}, mlp_size {self.mlp_size}, "
            f"embedding_rank {self.embedding_rank}, {rows:,} vocabulary rows",
        )
        return self


class BiLSTMStudent(Student):
    name = "bilstm"
    Config = BiLSTMConfig
    capabilities = frozenset({"pairs", "mixup", "trim", "pte"})

    def __init__(self, config: BiLSTMConfig, vocab_size: int, num_labels: int) -> None:
        super().__init__(config, vocab_size, num_labels)
        rank = config.rank
        self.embedding = nn.Embedding(vocab_size, rank or config.embedding_dim, padding_idx=0)
        self.embedding_proj = (
            nn.Linear(rank, config.embedding_dim, bias=False) if rank is not None else None
        )
        self.lstm = nn.LSTM(
            config.embedding_dim, config.hidden_size, batch_first=True, bidirectional=True
        )
        self.dropout = nn.Dropout(config.dropout)
        # A pair's features are [h1, h2, h1⊙h2, |h1−h2|]: four encodings wide.
        features = 2 * config.hidden_size * (4 if config.pair else 1)
        self.mlp = nn.Linear(features, config.mlp_size)
        self.classifier = nn.Linear(config.mlp_size, num_labels)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        input_ids_b: torch.Tensor | None = None,
        attention_mask_b: torch.Tensor | None = None,
        mix: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Logits for texts, or for pairs (`*_b`: the second texts) with the siamese
        encoder of Tang et al.: one shared BiLSTM encodes both sides."""
        pooled = self.encode(input_ids, attention_mask, mix)
        if self.config.pair:
            if input_ids_b is None or attention_mask_b is None:
                raise ValueError("a pair student needs input_ids_b and attention_mask_b")
            other = self.encode(input_ids_b, attention_mask_b, mix)
            pooled = torch.cat([pooled, other, pooled * other, (pooled - other).abs()], dim=1)
        hidden = torch.relu(self.mlp(self.dropout(pooled)))
        return self.classifier(self.dropout(hidden))

    def onnx_inputs(self) -> dict[str, dict[int, str]]:
        axes = super().onnx_inputs()
        if self.config.pair:  # the second texts, with their own length axis
            axes |= {
                "input_ids_b": {0: "batch", 1: "sequence_b"},
                "attention_mask_b": {0: "batch", 1: "sequence_b"},
            }
        return axes

    def dummy_inputs(self) -> dict[str, np.ndarray]:
        # Pairs get second texts of lengths 1, 5 and 3 (a one-token side too).
        sides = {"": (7, 4, 1), **({"_b": (1, 5, 3)} if self.config.pair else {})}
        return dummy_rows(self.vocab_size, sides)

    def fixed_length_module(self, int8: bool = False) -> nn.Module:
        """The student on right-padded rows of one length (ExecuTorch); `int8`: its
        weights stored in int8 (`Int8FixedLengthBiLSTM`)."""
        if self.config.pair:
            raise EdgeKDError("the fixed-length form takes single texts; pair models use ONNX")
        return Int8FixedLengthBiLSTM(self) if int8 else FixedLengthBiLSTM(self)

    def trimmed(self, keep: list[int]) -> BiLSTMStudent:
        out = type(self)(self.config, len(keep), self.num_labels)
        state = self.state_dict()
        state["embedding.weight"] = self.embedding.weight.detach()[torch.tensor(keep)].clone()
        out.load_state_dict(state)
        return out.eval()

    def encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        mix: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """One text per row → its pooled BiLSTM states (batch × 2·hidden)."""
        x = self.embedding(input_ids)
        if self.embedding_proj is not None:
            x = self.embedding_proj(x)
        if mix is not None:  # MixKD: the mixed row is as long as the longer of the two
            from edgekd.students.base import mix_embeddings

            x = mix_embeddings(x, attention_mask, *mix)
            attention_mask = torch.maximum(attention_mask, attention_mask[mix[0]])
        lengths = attention_mask.sum(1)
        x = self.dropout(x)
        packed = nn.utils.rnn.pack_padded_sequence(
            x, lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        out, (h_n, _) = self.lstm(packed)
        if self.config.pooling == "last":
            # h_n: (2 directions, batch, hidden): forward's last step, backward's first.
            pooled = torch.cat([h_n[0], h_n[1]], dim=1)
        else:
            out, _ = nn.utils.rnn.pad_packed_sequence(
                out, batch_first=True, total_length=input_ids.shape[1]
            )
            # Padding must never win the max: push it far below any LSTM output (|h| < 1).
            pad = ~attention_mask.bool().unsqueeze(-1)
            pooled = out.masked_fill(pad, -1e4).max(dim=1).values
        return pooled

    @classmethod
    def prepare(
        cls,
        options: dict[str, Any],
        texts: list[str],
        num_labels: int,
        teacher: Any,
        teacher_tokenizer: Any,
    ) -> tuple[BiLSTMStudent, StudentTokenizer]:
        pair = any(not isinstance(t, str) for t in texts[:1])
        config = BiLSTMConfig(**{**options, "pair": pair})
        if config.vocab == "auto":
            kind = "wordpiece" if is_wordpiece(teacher_tokenizer) else "word"
            config = config.model_copy(update={"vocab": kind})
        if config.vocab == "word":
            mask = getattr(teacher_tokenizer, "mask_token", None)
            tok = build_word_tokenizer(
                sides_of(texts),
                config.max_vocab,
                config.min_freq,
                config.lowercase,
                config.max_length,
                specials=(mask,) if mask else (),
            )
        else:
            tok = wordpiece_from_teacher(
                teacher_tokenizer, config.max_length, texts=sides_of(texts)
            )
            # WordPiece ids must not collide with our padding row 0 meaning anything else.
            if tok.pad_id != 0:
                raise ValueError("the teacher's [PAD] id is not 0; use student vocab 'word'")
        model = cls(config, tok.vocab_size, num_labels)
        if config.init != "random" and teacher is not None:
            rows_of = teacher_output_rows if config.init == "teacher-output" else teacher_rows_for
            rows = rows_of(
                vocab_tokens(tok),
                teacher,
                teacher_tokenizer,
                same_vocab=config.vocab == "wordpiece",
            )
            with torch.no_grad():
                # PCA coordinates: with a rank, the table holds the top `rank` of them and
                # the projection starts as the identity into the first `rank` columns.
                init = project_rows(rows, config.rank or config.embedding_dim)
                init[0] = 0.0  # padding row
                model.embedding.weight.copy_(init)
                if model.embedding_proj is not None:
                    model.embedding_proj.weight.copy_(
                        torch.eye(config.embedding_dim, config.rank or 1)
                    )
        return model, tok


class FixedLengthBiLSTM(nn.Module):
    """The BiLSTM student, exact on right-padded rows of one fixed length, no packing."""

    def __init__(self, student: Any) -> None:
        super().__init__()
        self.s = student
        lstm = student.lstm
        self.forward_lstm = nn.LSTM(lstm.input_size, lstm.hidden_size, batch_first=True)
        self.backward_lstm = nn.LSTM(lstm.input_size, lstm.hidden_size, batch_first=True)
        with torch.no_grad():
            for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
                getattr(self.forward_lstm, name).copy_(getattr(lstm, name))
                getattr(self.backward_lstm, name).copy_(getattr(lstm, f"{name}_reverse"))

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        s = self.s
        x = s.embedding(input_ids)
        return s.embedding_proj(x) if s.embedding_proj is not None else x

    def directions(self, x: torch.Tensor, x_rev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward LSTM over `x`, backward LSTM over `x_rev` (each row read backwards)."""
        return self.forward_lstm(x)[0], self.backward_lstm(x_rev)[0]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        s = self.s
        x = self.embed(input_ids)
        lengths = attention_mask.sum(1, keepdim=True)
        pos = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        # Within its length a row is read backwards; padding positions stay in place.
        rev = torch.where(pos < lengths, lengths - 1 - pos, pos)
        index = rev.unsqueeze(-1).expand(-1, -1, x.shape[-1])
        out_f, out_b_rev = self.directions(x, torch.gather(x, 1, index))
        hidden_index = rev.unsqueeze(-1).expand(-1, -1, out_b_rev.shape[-1])
        out_b = torch.gather(out_b_rev, 1, hidden_index)
        if s.config.pooling == "last":
            last = (lengths - 1).unsqueeze(-1).expand(-1, 1, out_f.shape[-1])
            pooled = torch.cat([torch.gather(out_f, 1, last)[:, 0], out_b[:, 0]], dim=1)
        else:
            out = torch.cat([out_f, out_b], dim=-1)
            pad = attention_mask.unsqueeze(-1) == 0
            pooled = out.masked_fill(pad, -1e4).max(dim=1).values
        return s.classifier(torch.relu(s.mlp(pooled)))


def int8_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per output row: w ≈ q · scale[:, None], |q| ≤ 127."""
    scale = w.abs().amax(dim=1).clamp(min=1e-8) / 127
    return torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8), scale


class Int8FixedLengthBiLSTM(FixedLengthBiLSTM):
    """The fixed-length BiLSTM with every weight stored in int8, for ExecuTorch.

    XNNPACK's quantizer turns `nn.Linear` into dynamically quantised int8 kernels but
    has none for an LSTM or an embedding lookup. So the LSTM is written out as
    Linears: each direction's input projection (all steps in one matmul) and its
    recurrent step (one weight, called once per step and stored once), unrolled over
    the fixed length; the quantizer takes those with the MLP and the classifier. The
    embedding table is an int8 buffer with a scale per row, widened to fp32 only at
    the looked-up rows.
    """

    def __init__(self, student: Any) -> None:
        super().__init__(student)
        lstm = student.lstm
        self.hidden = lstm.hidden_size
        table, table_scale = int8_rows(student.embedding.weight.detach())
        self.register_buffer("table", table)
        self.register_buffer("table_scale", table_scale.unsqueeze(1))
        size, four = lstm.input_size, 4 * lstm.hidden_size
        self.input_f, self.input_b = nn.Linear(size, four), nn.Linear(size, four)
        self.step_f = nn.Linear(lstm.hidden_size, four, bias=False)
        self.step_b = nn.Linear(lstm.hidden_size, four, bias=False)
        with torch.no_grad():
            for x, h, suffix in (
                (self.input_f, self.step_f, ""),
                (self.input_b, self.step_b, "_reverse"),
            ):
                x.weight.copy_(getattr(lstm, f"weight_ih_l0{suffix}"))
                # One bias: b_ih + b_hh both add to every step's gates.
                x.bias.copy_(
                    getattr(lstm, f"bias_ih_l0{suffix}") + getattr(lstm, f"bias_hh_l0{suffix}")
                )
                h.weight.copy_(getattr(lstm, f"weight_hh_l0{suffix}"))
        del self.forward_lstm, self.backward_lstm  # written out above

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        s = self.s
        rows = nn.functional.embedding(input_ids, self.table).float()
        x = rows * nn.functional.embedding(input_ids, self.table_scale)
        return s.embedding_proj(x) if s.embedding_proj is not None else x

    def recur(self, gates_in: torch.Tensor, step: nn.Linear) -> torch.Tensor:
        """LSTM steps over precomputed input gates (batch × length × 4·hidden)."""
        h = gates_in.new_zeros(gates_in.shape[0], self.hidden)
        c = torch.zeros_like(h)
        states = []
        for t in range(gates_in.shape[1]):
            i, f, g, o = (gates_in[:, t] + step(h)).chunk(4, dim=-1)  # PyTorch's gate order
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            states.append(h)
        return torch.stack(states, dim=1)

    def directions(self, x: torch.Tensor, x_rev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.recur(self.input_f(x), self.step_f), self.recur(
            self.input_b(x_rev), self.step_b
        )
