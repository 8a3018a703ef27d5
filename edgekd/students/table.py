"""What the token-table students share: the BiLSTM and the CNN differ only in the
encoder between a token table and a classifier head.

- A vocabulary: the teacher's WordPiece pieces cut to those the transfer set uses
  (`vocab: wordpiece`, the default for a WordPiece teacher), or an own word list.
- An embedding table, optionally factorised (vocab × rank, then rank → width), started
  from the teacher (`init`), with padding row 0 held at the zero vector.
- A head: dropout, a ReLU MLP layer and the classifier, over one pooled vector per text
  (`encode`), or per sentence pair Tang et al.'s siamese features [h1, h2, h1⊙h2,
  |h1−h2|] from one shared encoder.

A subclass builds its encoder in `build_encoder`, says how wide its pooled vector and
its token states are (`encoded_width`, `token_width`) and implements `run`; encode,
prepare, pairs, trimming and the ONNX inputs come from here.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import nn

from edgekd.config import (
    MAX_INNER,
    MAX_TOKENS,
    MAX_VOCAB,
    MAX_WIDTH,
    SMALL_TASK_TEXTS,
    StrictModel,
)
from edgekd.data import sides_of
from edgekd.errors import EdgeKDError
from edgekd.students.base import (
    Student,
    dummy_rows,
    mix_embeddings,
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

# Rows of a WordPiece table before `trim` cuts it: BERT-uncased's vocabulary, what the
# size caps count (the table is the teacher's size until then).
WORDPIECE_ROWS = 30_522

# `init: auto` and `extra_pieces: auto` on a small task (the threshold `augment.methods:
# auto` uses: under 7,500 training texts) with a WordPiece teacher. Its transfer set is
# variants of a few hundred texts, so many words of the texts it will meet are not among
# its pieces, or sit in it only in the few contexts those texts give. The teacher's first
# 10,000 pieces (~1,000 single characters, then its words from the most frequent) give
# such words a row; the teacher-output start gives every row what the fine-tuned encoder
# made of it, so an unseen "superb" starts beside a seen "great". SST-2 cut to 400 rows
# per label (benchmarks/NOTES.md, one seed, 6 epochs): dev 0.672 (neither), 0.700
# (pieces), 0.698 (teacher-output), 0.713 (both; TF-IDF 0.692); end to end (tasks.py,
# int8) 68.2 → 71.3 against TF-IDF's 69.6; side by side over 3 seeds (levers.md) the int8
# median 0.6915 → 0.7167. CLINC150 at 10 rows per class, each alone when tang was the
# default (levers.md, 3 seeds): pieces +1.07 points, teacher-output +0.20; both together
# over today's neighbour variants, 3 seeds: median 0.9067 → 0.9090 (7 of 3,000 dev
# rows), for an int8 file of 1.21 MB instead of 0.95; CLINC150-25 (3,366 texts), a tie
# (median 0.9403 both, mean +0.18). It stays for the smallest tasks' floor. On SST-2's 67k texts
# teacher-output lost 0.46 points and the pieces 0.57 at 13 minutes: a task that large
# keeps the input table and its own pieces. The int8 files measured with both: 1.20 MB
# (sst2-400), 1.21 MB (clinc150-10), 1.25 MB (clinc150-25).
SMALL_TASK_EXTRA_PIECES = 10_000


class TableConfig(StrictModel):
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
    embedding_dim: int = Field(64, ge=2, le=MAX_WIDTH, description="Width the encoder reads.")
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
    mlp_size: int = Field(
        400, ge=1, le=MAX_INNER, description="ReLU layer width; Tang et al.: 400."
    )
    dropout: float = Field(0.1, ge=0, lt=1)
    init: Literal["auto", "teacher", "teacher-output", "random"] = Field(
        "auto",
        description="Start embeddings from the teacher's input table (teacher), or from "
        "what its fine-tuned encoder outputs for each token alone (teacher-output, "
        "model2vec's recipe), PCA to the table's width; or random. auto: teacher-output "
        f"on a small task (under {SMALL_TASK_TEXTS:,} training texts) with a WordPiece "
        "teacher, else teacher.",
    )
    max_vocab: int = Field(
        50_000, ge=3, le=MAX_VOCAB, description="Word vocabulary cap (incl. PAD, UNK)."
    )
    min_freq: int = Field(1, ge=1, description="Keep words seen at least this often.")
    extra_pieces: Annotated[int, Field(ge=0, le=MAX_VOCAB)] | Literal["auto"] = Field(
        "auto",
        description="With a WordPiece vocabulary: also keep the teacher's first N pieces "
        "(its most frequent), for words the transfer set lacks; each costs a table row. "
        f"auto: {SMALL_TASK_EXTRA_PIECES:,} on a small task with a WordPiece teacher, "
        "else 0.",
    )
    lowercase: bool = True
    max_length: int = Field(
        64, ge=1, le=MAX_TOKENS, description="Tokens per text; longer texts are cut."
    )
    pair: bool = Field(
        False, description="Siamese over sentence pairs (set from the data by prepare)."
    )

    @model_validator(mode="after")
    def _pieces_need_wordpiece(self) -> TableConfig:
        if self.extra_pieces not in (0, "auto") and self.vocab == "word":
            raise ValueError("extra_pieces keeps teacher WordPiece pieces; use vocab wordpiece")
        return self

    @property
    def rank(self) -> int | None:
        """The factorised table's width, or None for a plain table: a rank at or above
        `embedding_dim` would add a projection and save nothing."""
        r = self.embedding_rank
        return r if r is not None and r < self.embedding_dim else None

    def table_params(self) -> tuple[int, int]:
        """(rows, parameters) of the table and its projection, from the options alone:
        a word table has `max_vocab` rows, a WordPiece one the teacher's ~30k."""
        rows = self.max_vocab if self.vocab == "word" else WORDPIECE_ROWS
        e = self.embedding_dim
        return rows, rows * (self.rank or e) + (self.rank or 0) * e

    def head_params(self, encoded: int) -> int:
        """The MLP's weights over `encoded`-wide vectors (four of them for a pair)."""
        return encoded * (4 if self.pair else 1) * self.mlp_size


class TableStudent(Student):
    """A token table, an encoder (the subclass's) and the MLP head."""

    Config: ClassVar[type[TableConfig]]
    capabilities: ClassVar[frozenset[str]] = frozenset({"pairs", "mixup", "trim", "token_states"})

    def __init__(self, config: Any, vocab_size: int, num_labels: int) -> None:
        super().__init__(config, vocab_size, num_labels)
        rank = config.rank
        # Creation order is the order random weights are drawn in (and the optimiser's
        # parameter order): table, encoder, head, as the BiLSTM always had it.
        self.embedding = nn.Embedding(vocab_size, rank or config.embedding_dim, padding_idx=0)
        self.embedding_proj = (
            nn.Linear(rank, config.embedding_dim, bias=False) if rank is not None else None
        )
        self.build_encoder(config)
        self.dropout = nn.Dropout(config.dropout)
        # A pair's features are [h1, h2, h1⊙h2, |h1−h2|]: four encodings wide.
        features = self.encoded_width(config) * (4 if config.pair else 1)
        self.mlp = nn.Linear(features, config.mlp_size)
        self.classifier = nn.Linear(config.mlp_size, num_labels)

    def build_encoder(self, config: Any) -> None:
        """Create the encoder's modules as attributes (before the head's)."""
        raise NotImplementedError

    @staticmethod
    def encoded_width(config: Any) -> int:
        """Width of `encode`'s vector per text."""
        raise NotImplementedError

    def encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        mix: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """One text per row → its pooled vector (batch × `encoded_width`)."""
        return self.run(input_ids, attention_mask, mix, tokens=False)[0]

    @staticmethod
    def token_width(config: Any) -> int:
        """Width of `encode_tokens`' state per token."""
        raise NotImplementedError

    def encode_tokens(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(pooled vector as `encode` gives it, and each token's state: batch × T ×
        `token_width`), from one pass: what `token_states` distils into."""
        pooled, tokens = self.run(input_ids, attention_mask, None, tokens=True)
        assert tokens is not None
        return pooled, tokens

    def run(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        mix: tuple[torch.Tensor, torch.Tensor] | None,
        tokens: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The encoder: (pooled vector, and with `tokens` each token's state, zero past
        the text's end). MixKD's `mix` is applied to the token vectors first."""
        raise NotImplementedError

    def embed(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        mix: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Token vectors (batch × T × embedding_dim) and the mask they cover. MixKD
        mixes rows here: a mixed row is as long as the longer of its two."""
        x = self.embedding(input_ids)
        if self.embedding_proj is not None:
            x = self.embedding_proj(x)
        if mix is not None:
            x = mix_embeddings(x, attention_mask, *mix)
            attention_mask = torch.maximum(attention_mask, attention_mask[mix[0]])
        return x, attention_mask

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        input_ids_b: torch.Tensor | None = None,
        attention_mask_b: torch.Tensor | None = None,
        mix: tuple[torch.Tensor, torch.Tensor] | None = None,
        return_hidden: bool = False,
    ) -> Any:
        """Logits for texts, or for pairs (`*_b`: the second texts) with the siamese
        encoder of Tang et al.: one shared encoder reads both sides. `return_hidden`:
        (logits, (token states of the first texts,)), for `token_states`."""
        tokens = None
        if return_hidden:
            pooled, tokens = self.encode_tokens(input_ids, attention_mask)
        else:
            pooled = self.encode(input_ids, attention_mask, mix)
        if self.config.pair:
            if input_ids_b is None or attention_mask_b is None:
                raise ValueError("a pair student needs input_ids_b and attention_mask_b")
            other = self.encode(input_ids_b, attention_mask_b, mix)
            pooled = torch.cat([pooled, other, pooled * other, (pooled - other).abs()], dim=1)
        hidden = torch.relu(self.mlp(self.dropout(pooled)))
        logits = self.classifier(self.dropout(hidden))
        return (logits, (tokens,)) if tokens is not None else logits

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

    def trimmed(self, keep: list[int]) -> TableStudent:
        out = type(self)(self.config, len(keep), self.num_labels)
        state = self.state_dict()
        state["embedding.weight"] = self.embedding.weight.detach()[torch.tensor(keep)].clone()
        out.load_state_dict(state)
        return out.eval()

    @classmethod
    def for_task(cls, options: dict[str, Any], n_texts: int, wordpiece: bool) -> dict[str, Any]:
        """`init` and `extra_pieces` for the task: on a small one (under
        `SMALL_TASK_TEXTS` training texts) with a WordPiece teacher, the teacher-output
        start and `SMALL_TASK_EXTRA_PIECES` of its pieces (with a word vocabulary, the
        start alone); else the input-table start and the transfer set's own pieces."""
        config = cls.Config(**options)
        small = n_texts < SMALL_TASK_TEXTS
        out = dict(options)
        if config.init == "auto":  # measured with WordPiece teachers only
            out["init"] = "teacher-output" if small and wordpiece else "teacher"
        if config.extra_pieces == "auto":
            words = config.vocab == "word" or not wordpiece
            out["extra_pieces"] = SMALL_TASK_EXTRA_PIECES if small and not words else 0
        return out

    @classmethod
    def prepare(
        cls,
        options: dict[str, Any],
        texts: list[str],
        num_labels: int,
        teacher: Any,
        teacher_tokenizer: Any,
    ) -> tuple[TableStudent, StudentTokenizer]:
        pair = any(not isinstance(t, str) for t in texts[:1])
        # `texts` holds the augmented rows too, so it cannot tell a small task: an `auto`
        # `distill` has not resolved (`for_task`, from the training texts) means a large one.
        options = cls.for_task(options, SMALL_TASK_TEXTS, is_wordpiece(teacher_tokenizer))
        config = cls.Config(**{**options, "pair": pair})
        if config.vocab == "auto":
            kind = "wordpiece" if is_wordpiece(teacher_tokenizer) else "word"
            config = config.model_copy(update={"vocab": kind})
        if config.vocab == "word":
            if config.extra_pieces:  # auto chose words: the teacher has no WordPiece
                raise EdgeKDError(
                    "extra_pieces needs a WordPiece teacher; this one's tokenizer is not: "
                    "set student option extra_pieces to 0"
                )
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
                teacher_tokenizer, config.max_length, texts=sides_of(texts),
                extra=int(config.extra_pieces),  # resolved above: never auto here
            )  # fmt: skip
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
