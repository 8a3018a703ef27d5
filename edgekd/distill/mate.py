"""MATE-KD (Rashid et al. 2021, "MATE-KD: Masked Adversarial TExt, a Companion to
Knowledge Distillation", arXiv:2105.05912).

A masked-LM generator G rewrites a share (`mask`, 30% by default) of each text's
tokens: those positions are masked, G predicts a distribution over its vocabulary at
each, and a straight-through Gumbel-softmax draws one token (one-hot forward, the
soft distribution's gradient backward), so x' stays discrete text yet G can learn
from the models' gradients. Teacher f and student g read x' through their own word
embedding tables (one-hot × table), with positions and token types as usual.

- Max step (G learns, f and g fixed): maximise D(x') = KL(σ(f(x')) ‖ σ(g(x'))), i.e.
  Adam on −D for G's weights: G learns to write the text the student gets most wrong.
- Min step (g learns): the configured loss on x plus `weight` · KL(σ(f(x')) ‖ σ(g(x')))
  on a fresh draw from the updated G, which gets no gradient here.

The paper's student loss weighs CE on x, KD on x and KD on x' by ⅓ each; here the
prediction loss on x is edgekd's (`loss`, `ce_weight`) and `weight` scales the x'
term. A max step runs before every `max_every`-th min step (the paper alternates
n_G generator steps with n_S student steps).

Which generator: any masked LM that reads the teacher's vocabulary (same tokens, same
ids), because x' is written in its vocabulary and fed to the teacher as such: for a
BERT-uncased-family teacher (the all-MiniLM-L6-v2 teacher included)
`distilbert-base-uncased` or `google/bert_uncased_L-4_H-256_A-4` (smaller, faster
max steps); for RoBERTa teachers `distilroberta-base`. A small
one is best: the generator runs forward and backward on every max step, and its
job is plausible edits, not a strong language model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.nn.functional as F
from pydantic import Field

from edgekd.config import StrictModel
from edgekd.distill.methods import MethodRun, MethodState, Step, TrainingMethod
from edgekd.errors import EdgeKDError

if TYPE_CHECKING:
    from edgekd.config import DistillConfig


class MateOptions(StrictModel):
    generator: str | None = Field(
        None,
        description="Masked-LM generator, HF id or folder, reading the teacher's vocabulary "
        "(`--generator`).",
    )
    mask: float = Field(0.3, gt=0, le=1, description="Share of each text's tokens rewritten.")
    tau: float = Field(1.0, gt=0, description="Gumbel-softmax temperature of the draw.")
    generator_lr: float = Field(1e-5, gt=0, description="Adam rate of the max step.")
    weight: float = Field(1.0, ge=0, description="Weight of the KD term on rewritten text.")
    max_every: int = Field(1, ge=1, description="A max step before every k-th min step.")


def kl_rows(teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    """KL(σ(teacher) ‖ σ(student)), batch mean, in nats."""
    log_t = F.log_softmax(teacher, dim=-1)
    return (log_t.exp() * (log_t - F.log_softmax(student, dim=-1))).sum(-1).mean()


def load_generator(name_or_path: str, teacher_tokenizer: Any) -> Any:
    """The masked LM (fp32, eval mode: no dropout in its draws), checked to read the
    teacher's vocabulary."""
    from transformers import AutoModelForMaskedLM

    from edgekd.hub import require_hub
    from edgekd.students.tokenizer import hf_tokenizer

    require_hub(name_or_path, "generator")
    try:
        model = AutoModelForMaskedLM.from_pretrained(
            name_or_path, dtype=torch.float32, use_safetensors=True
        )
    except (OSError, ValueError) as e:
        first = str(e).splitlines()[0][:160]
        raise EdgeKDError(
            f"cannot load generator {name_or_path!r} as a masked LM ({first}); pass an HF "
            "masked-LM folder or hub id"
        ) from None
    tok = hf_tokenizer(name_or_path, "generator")
    if tok.get_vocab() != teacher_tokenizer.get_vocab():
        raise EdgeKDError(
            f"generator {name_or_path!r} reads another vocabulary than the teacher; MATE-KD "
            "writes text in the generator's tokens for the teacher to read: pick a masked LM "
            "of the teacher's family (same tokenizer)"
        )
    return model.eval()


class MateKD(TrainingMethod):
    """The MATE-KD term of one training run: `__call__` runs the max step when due and
    returns the min step's loss on one batch of the student's (= the teacher's) ids."""

    stage: ClassVar[str] = "adversarial"  # a generator trained against the student
    needs_teacher: ClassVar[bool] = True  # it reads every rewritten batch
    Config = MateOptions

    @classmethod
    def check(cls, cfg: DistillConfig, student_cls: Any, options: MateOptions) -> None:
        if "hidden_states" not in student_cls.capabilities:
            raise EdgeKDError(
                "mate rewrites the teacher's tokens for teacher and student alike; use "
                "--student bert (or mobilebert), which reads them"
            )
        if options.generator is None:
            raise EdgeKDError(
                "mate needs a masked-LM generator that reads the teacher's vocabulary: "
                "pass --generator ID_OR_FOLDER"
            )

    @classmethod
    def build(cls, options: MateOptions, run: MethodRun) -> MateKD:
        if run.tok.tokenizer.get_vocab() != dict(run.teacher_tok.get_vocab()):
            raise EdgeKDError(
                "mate rewrites the teacher's tokens, which the student must read too: use "
                "the bert or mobilebert student with the teacher's vocabulary"
            )
        assert options.generator is not None  # `check` refused a missing one
        return cls(
            run.teacher,
            load_generator(options.generator, run.teacher_tok),
            list(run.teacher_tok.all_special_ids),
            run.teacher_tok.mask_token_id,
            options.mask,
            options.tau,
            options.generator_lr,
            options.weight,
            options.max_every,
            run.cfg.seed,
        )

    def loss(self, step: Step) -> torch.Tensor:
        return self(step.model, step.student, step.batch)

    def state(self) -> MethodState:
        # The generator resumes as trained so far; its draws (positions, Gumbel noise)
        # go on from where they stopped.
        return MethodState(
            modules={"mate_generator": self.generator}, torch_generators={"mate": self.rng}
        )

    def __init__(
        self,
        teacher: Any,
        generator: Any,
        special_ids: list[int],
        mask_id: int,
        mask: float = 0.3,
        tau: float = 1.0,
        generator_lr: float = 1e-5,
        weight: float = 1.0,
        max_every: int = 1,
        seed: int = 0,
    ) -> None:
        self.teacher, self.generator = teacher, generator
        for p in teacher.parameters():  # gradients flow through it, never into it
            p.requires_grad_(False)
        self.special = torch.tensor(sorted(set(special_ids)))
        self.mask_id, self.share, self.tau = mask_id, mask, tau
        self.weight, self.max_every = weight, max_every
        self.vocab = teacher.get_input_embeddings().weight.shape[0]
        self.params = [p for p in generator.parameters() if p.requires_grad]
        self.optim = torch.optim.Adam(self.params, lr=generator_lr)
        self.rng = torch.Generator().manual_seed(seed)
        self.steps = 0
        self.last_max_divergence: float | None = None

    def positions(self, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        """Which tokens are rewritten: each real, non-special token with prob `mask`,
        at least one per row that has any."""
        real = (attention > 0) & ~torch.isin(ids, self.special.to(ids.device))
        draw = torch.rand(ids.shape, generator=self.rng).to(ids.device) < self.share
        chosen = real & draw
        # A row the draw left untouched gets its first rewritable token.
        empty = ~chosen.any(1) & real.any(1)
        first = real.to(torch.int64).argmax(1)
        chosen[empty, first[empty]] = True
        return chosen

    def rewrite(self, ids: torch.Tensor, attention: torch.Tensor, where: torch.Tensor) -> Any:
        """Straight-through one-hot draws (rewritten tokens × vocab) from the generator."""
        masked = ids.masked_fill(where, self.mask_id)
        logits = self.generator(input_ids=masked, attention_mask=attention).logits[where]
        gumbel = -torch.log(
            -torch.log(torch.rand(logits.shape, generator=self.rng) + 1e-20) + 1e-20
        )
        soft = F.softmax(
            (logits[:, : self.vocab] + gumbel.to(logits.device)[:, : self.vocab]) / self.tau, -1
        )
        hard = F.one_hot(soft.argmax(-1), self.vocab).to(soft.dtype)
        return hard - soft.detach() + soft  # forward: one-hot; backward: the soft draw

    @staticmethod
    def embed(
        table: torch.Tensor, ids: torch.Tensor, where: torch.Tensor, onehot: torch.Tensor
    ) -> torch.Tensor:
        """Word embeddings of x': the table's rows, rewritten positions as one-hot × table."""
        rows = F.embedding(ids, table)
        new = torch.zeros_like(rows)
        new[where] = onehot @ table
        return torch.where(where.unsqueeze(-1), new, rows)

    def logits(
        self,
        model: Any,
        table: torch.Tensor,
        batch: dict[str, torch.Tensor],
        where: torch.Tensor,
        onehot: torch.Tensor,
    ) -> torch.Tensor:
        embeds = self.embed(table, batch["input_ids"], where, onehot)
        kwargs: dict[str, Any] = {
            "input_ids": None,
            "attention_mask": batch["attention_mask"],
            "inputs_embeds": embeds,
        }
        if batch.get("token_type_ids") is not None:
            kwargs["token_type_ids"] = batch["token_type_ids"]
        out = model(**kwargs)
        return out if isinstance(out, torch.Tensor) else out.logits

    def divergence(
        self,
        student: Any,
        batch: dict[str, torch.Tensor],
        where: torch.Tensor,
        onehot: torch.Tensor,
    ) -> torch.Tensor:
        """KL(f(x') ‖ g(x')) on the rewritten batch (`student` unwrapped: its own table)."""
        t_table = self.teacher.get_input_embeddings().weight
        teacher = self.logits(self.teacher, t_table, batch, where, onehot)
        return kl_rows(teacher, self.logits(student, word_table(student), batch, where, onehot))

    def max_step(self, student: Any, batch: dict[str, torch.Tensor]) -> float:
        """One Adam step of the generator up the teacher-student divergence; returns
        the divergence before the step. Only the generator's weights get gradients."""
        where = self.positions(batch["input_ids"], batch["attention_mask"])
        divergence = self.divergence(
            student, batch, where, self.rewrite(batch["input_ids"], batch["attention_mask"], where)
        )
        grads = torch.autograd.grad(-divergence, self.params, allow_unused=True)
        for p, g in zip(self.params, grads, strict=True):
            p.grad = g
        self.optim.step()
        self.optim.zero_grad(set_to_none=True)
        return float(divergence.detach())

    def __call__(self, model: Any, student: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The min step's term: `model` the student as training runs it (perhaps wrapped
        by accelerate), `student` the same module unwrapped (its word table)."""
        if self.steps % self.max_every == 0:
            self.last_max_divergence = self.max_step(student, batch)
        self.steps += 1
        where = self.positions(batch["input_ids"], batch["attention_mask"])
        with torch.no_grad():
            onehot = self.rewrite(batch["input_ids"], batch["attention_mask"], where)
            t_table = self.teacher.get_input_embeddings().weight
            teacher = self.logits(self.teacher, t_table, batch, where, onehot)
        student_logits = self.logits(model, word_table(student), batch, where, onehot)
        return self.weight * kl_rows(teacher, student_logits)


def word_table(student: Any) -> torch.Tensor:
    """The student's word embedding table (vocab × width)."""
    return student.encoder().embeddings.word_embeddings.weight  # type: ignore[no-any-return]
