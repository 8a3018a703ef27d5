"""MixKD (Liang et al. 2021, "MixKD: Towards Efficient Distillation of Large-scale
Language Models", arXiv:2011.00593).

Each batch gets one mixed sample per row: x' = λ·x_i + (1−λ)·x_j on word
embeddings, per time step, the shorter sequence padded with zero vectors, j a
random permutation of the batch, λ ~ Beta(a, a) per row (a = 0.4). Added to the
configured loss on the original rows:

    α_SM · H(y', g(x')) + α_TMKD · ‖f(x') − g(x')‖²

with y' = λ·y_i + (1−λ)·y_j (only pairs whose both rows carry gold labels), g the
student, f the teacher, ‖·‖² summed over classes and averaged over the batch
(the paper's d = MSE; α_SM = α_TMKD = 1). With `ce_weight 1` the loss on the
originals is the paper's H(y, g(x)).

How a mixed sample reaches the teacher when the vocabularies differ (a word-level
BiLSTM and a WordPiece teacher): each model mixes in its own embedding space over
aligned spans. Student token p of row i is paired with student token p of row j;
on the teacher side, token p stands for the span of WordPiece pieces of the same
word (found through the student's character offsets), the two spans are padded
with zero vectors to equal length and mixed piece by piece, between the teacher's
own [CLS] and [SEP]. Both models thus see "word p of i mixed with word p of j".
When the student reads the teacher's vocabulary (whole, or cut to the pieces a
transfer set uses), every span is one piece and this is plain per-token mixing.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field

from edgekd.config import StrictModel
from edgekd.distill.losses import NO_LABEL
from edgekd.distill.methods import MethodRun, MethodState, Step, TrainingMethod
from edgekd.errors import EdgeKDError
from edgekd.students.tokenizer import StudentTokenizer

EMPTY = -1  # a position where this side of the pair has no token: a zero vector


class TeacherAlignment:
    """Student token positions → teacher token ids, for mixing on the teacher's side."""

    def __init__(self, student: StudentTokenizer, teacher: Any, teacher_max_length: int) -> None:
        self.student, self.teacher = student, teacher
        self.max_length = teacher_max_length
        # Student id → teacher id when every student token is one of the teacher's (its
        # WordPiece, whole or cut to a transfer set's pieces): then each token is its own
        # span. Re-splitting a piece's text instead would read "##s" as the word "s".
        mine, theirs = student.tokenizer.get_vocab(), teacher.get_vocab()
        self.to_teacher = (
            {i: theirs[t] for t, i in mine.items()} if mine.keys() <= theirs.keys() else None
        )
        self.wrap = not student.add_special_tokens
        self.cls = getattr(teacher, "cls_token_id", None)
        self.sep = getattr(teacher, "sep_token_id", None)
        self.unk = teacher.unk_token_id if teacher.unk_token_id is not None else 0

    @property
    def same_vocab(self) -> bool:
        """Whether the student reads the teacher's own tokens (each token its own span)."""
        return self.to_teacher is not None

    def spans(self, texts: list[str]) -> list[list[list[int]]]:
        """Per text, per student token: the teacher ids it stands for."""
        if self.to_teacher is not None:
            to = self.to_teacher
            out = [
                [[to[i]] for i in ids] for ids in self.student.ids(texts) if isinstance(ids, list)
            ]
        else:
            encs = self.student.tokenizer.encode_batch(
                texts, add_special_tokens=self.student.add_special_tokens
            )
            words = [
                [t[s:e] for s, e in enc.offsets[: self.student.max_length]] or [""]
                for t, enc in zip(texts, encs, strict=True)
            ]
            pieces = self.teacher(words, is_split_into_words=True, add_special_tokens=False)
            out = []
            for i, ws in enumerate(words):
                spans: list[list[int]] = [[] for _ in ws]
                for piece, w in zip(pieces["input_ids"][i], pieces.word_ids(i), strict=True):
                    if w is not None:
                        spans[w].append(piece)
                out.append([s or [self.unk] for s in spans])
        if self.wrap and self.cls is not None and self.sep is not None:
            out = [[[self.cls], *s, [self.sep]] for s in out]
        return out

    def pair_ids(self, texts: list[str], perm: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Two aligned id matrices (batch × T, EMPTY where a side has no piece)."""
        spans = self.spans(texts)
        rows_a, rows_b = [], []
        for i, j in enumerate(perm):
            a, b = spans[i], spans[j]
            ra: list[int] = []
            rb: list[int] = []
            for p in range(max(len(a), len(b))):
                sa = a[p] if p < len(a) else []
                sb = b[p] if p < len(b) else []
                width = max(len(sa), len(sb))
                ra += sa + [EMPTY] * (width - len(sa))
                rb += sb + [EMPTY] * (width - len(sb))
            rows_a.append(ra[: self.max_length])
            rows_b.append(rb[: self.max_length])
        width = max(len(r) for r in rows_a)
        a_ids = torch.full((len(texts), width), EMPTY, dtype=torch.long)
        b_ids = torch.full((len(texts), width), EMPTY, dtype=torch.long)
        for i, (ra, rb) in enumerate(zip(rows_a, rows_b, strict=True)):
            a_ids[i, : len(ra)] = torch.tensor(ra)
            b_ids[i, : len(rb)] = torch.tensor(rb)
        return a_ids, b_ids


def teacher_mixed_logits(
    teacher: Any, a_ids: torch.Tensor, b_ids: torch.Tensor, lam: torch.Tensor
) -> torch.Tensor:
    """The teacher on λ·E(a) + (1−λ)·E(b), via `inputs_embeds`."""
    table = teacher.get_input_embeddings()
    device = table.weight.device
    a_ids, b_ids = a_ids.to(device), b_ids.to(device)
    ea = table(a_ids.clamp_min(0)) * (a_ids >= 0).unsqueeze(-1)
    eb = table(b_ids.clamp_min(0)) * (b_ids >= 0).unsqueeze(-1)
    lam = lam.to(device).view(-1, 1, 1)
    mask = ((a_ids >= 0) | (b_ids >= 0)).long()
    return teacher(inputs_embeds=lam * ea + (1 - lam) * eb, attention_mask=mask).logits


class MixupOptions(StrictModel):
    alpha: float = Field(0.4, gt=0, description="λ ~ Beta(alpha, alpha) (MixKD: 0.4).")
    alpha_sm: float = Field(1.0, ge=0, description="Weight of CE on the mixed gold labels.")
    alpha_tmkd: float = Field(1.0, ge=0, description="Weight of the teacher MSE on mixes.")


class MixKD(TrainingMethod):
    """The MixKD term for one training run; `__call__` gives its loss on one batch."""

    stage: ClassVar[str] = "batch"  # runs inside the training loop, not on the text
    needs_teacher: ClassVar[bool] = True  # the teacher reads each mixed pair
    Config = MixupOptions

    def __init__(
        self,
        teacher: Any,
        alignment: TeacherAlignment,
        alpha: float = 0.4,
        alpha_sm: float = 1.0,
        alpha_tmkd: float = 1.0,
        seed: int = 0,
    ) -> None:
        self.teacher, self.alignment = teacher, alignment
        self.alpha, self.alpha_sm, self.alpha_tmkd = alpha, alpha_sm, alpha_tmkd
        self.rng = np.random.default_rng(seed)

    @classmethod
    def build(cls, options: MixupOptions, run: MethodRun) -> MixKD:
        if run.pairs and not run.tok.add_special_tokens:
            raise EdgeKDError(
                "mixup mixes one token sequence per row; for sentence pairs use --student bert"
            )
        return cls(
            run.teacher,
            TeacherAlignment(run.tok, run.teacher_tok, run.cfg.teacher_max_length),
            options.alpha,
            options.alpha_sm,
            options.alpha_tmkd,
            run.cfg.seed,
        )

    def loss(self, step: Step) -> torch.Tensor:
        return self(step.model, step.batch, step.texts, step.gold)

    def state(self) -> MethodState:
        return MethodState(generators={"mixkd": self.rng})  # its draws go on where they stopped

    def sample(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(perm, λ): a random partner per row and its Beta(a, a) weight."""
        perm = torch.from_numpy(self.rng.permutation(n))
        lam = torch.from_numpy(self.rng.beta(self.alpha, self.alpha, size=n).astype(np.float32))
        return perm, lam

    def __call__(
        self, model: Any, batch: dict[str, torch.Tensor], texts: list[str], labels: torch.Tensor
    ) -> torch.Tensor:
        perm, lam = self.sample(len(texts))
        perm, lam = perm.to(labels.device), lam.to(labels.device)
        student = model(**batch, mix=(perm, lam))
        with torch.no_grad():
            a_ids, b_ids = self.alignment.pair_ids(texts, perm.tolist())
            teacher = teacher_mixed_logits(self.teacher, a_ids, b_ids, lam).to(student.dtype)
        loss = self.alpha_tmkd * (student - teacher.to(student.device)).pow(2).sum(1).mean()
        both = (labels != NO_LABEL) & (labels[perm] != NO_LABEL)
        if self.alpha_sm > 0 and bool(both.any()):
            s, y, y2, w = student[both], labels[both], labels[perm][both], lam[both]
            mixed_ce = w * F.cross_entropy(s, y, reduction="none") + (1 - w) * F.cross_entropy(
                s, y2, reduction="none"
            )
            loss = loss + self.alpha_sm * mixed_ce.mean()
        return loss
