"""Distillation losses. Each is a `DistillLoss`: (student logits, teacher logits,
gold labels or -100) → scalar, mixed with gold-label cross-entropy by `ce_weight`.

Rows whose label is -100 (teacher-labelled augmented text) get no CE term; the CE
mean is over labelled rows only.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from pydantic import BaseModel, Field

from edgekd.config import StrictModel
from edgekd.registry import NoOptions

NO_LABEL = -100


class DistillLoss:
    """L = ce_weight · H(y, σ(z_s)) + (1 − ce_weight) · D(z_s, z_t)."""

    # The loss's own options (`loss: {name, options}`); ce_weight and temperature are
    # distill fields, shared by every loss and scheduled per epoch.
    Config: ClassVar[type[BaseModel]] = NoOptions

    def __init__(self, ce_weight: float = 0.0, temperature: float = 1.0) -> None:
        if not 0.0 <= ce_weight <= 1.0:
            raise ValueError(f"ce_weight must be in [0, 1], got {ce_weight}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.ce_weight = ce_weight
        self.temperature = temperature

    # Epochs the loss needs before early stopping may cut training (a schedule's length).
    min_epochs: int = 0

    def start_epoch(self, epoch: int) -> None:
        """Called before each epoch (1-based); schedules override it."""

    def distill_term(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def __call__(
        self, student: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor | None = None
    ) -> torch.Tensor:
        loss = (1.0 - self.ce_weight) * self.distill_term(student, teacher)
        if self.ce_weight > 0 and labels is not None and bool((labels != NO_LABEL).any()):
            loss = loss + self.ce_weight * F.cross_entropy(student, labels, ignore_index=NO_LABEL)
        return loss


class LogitMSELoss(DistillLoss):
    """Logit regression (Ba & Caruana 2014; Tang et al. 2019, arXiv:1903.12136).

    D = mean over the batch of ||z_s − z_t||², the squared error summed over classes.
    Tang et al. found it better than KL for a BiLSTM student.
    """

    def distill_term(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        return (student - teacher).pow(2).sum(dim=1).mean()


class HintonKDLoss(DistillLoss):
    """Hinton et al. 2015, "Distilling the Knowledge in a Neural Network" (arXiv:1503.02531).

    D = T² · KL(σ(z_t/T) || σ(z_s/T)), batch mean. The T² keeps the gradient scale
    constant as T changes. With α = 1 − ce_weight this is the paper's
    L = (1 − α)·H(y, σ(z_s)) + α·T²·KL.
    """

    def distill_term(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        t = self.temperature
        log_p_s = F.log_softmax(student / t, dim=1)
        log_p_t = F.log_softmax(teacher / t, dim=1)
        # batchmean as row sums, then their mean: "batchmean" sums batch × classes to one
        # number in per-thread partials past 32,768 values (`edgekd.threads.exact_sum`).
        kl = F.kl_div(log_p_s, log_p_t, log_target=True, reduction="none").sum(1).mean()
        return kl * t * t


class AnnealingOptions(StrictModel):
    tau_max: int = Field(7, ge=1, description="Temperature steps τ_max of stage I (paper: 7).")
    epochs_per_step: int = Field(1, ge=1, description="Epochs k per temperature step.")


class AnnealingKDLoss(DistillLoss):
    """Annealing KD (Jafari et al. 2021, "Annealing Knowledge Distillation", arXiv:2104.07163).

    Stage I, epochs 1..k·τ_max: D = ||z_s − Φ(τ)·z_t||², batch mean, with
    Φ(τ) = 1 − (τ − 1)/τ_max and τ stepping down from τ_max to 1, k epochs per
    step: the student first matches a flattened teacher, then a sharper one.
    Stage II, every later epoch: cross-entropy on gold labels only.
    """

    Config = AnnealingOptions

    def __init__(
        self,
        ce_weight: float = 0.0,
        temperature: float = 1.0,
        tau_max: int = 7,
        epochs_per_step: int = 1,
    ) -> None:
        super().__init__(ce_weight, temperature)
        if tau_max < 1 or epochs_per_step < 1:
            raise ValueError("tau_max and epochs_per_step must be >= 1")
        self.tau_max, self.k = tau_max, epochs_per_step
        self.min_epochs = tau_max * epochs_per_step
        self.stage1_ce_weight = ce_weight
        self.start_epoch(1)

    def tau(self, epoch: int) -> int:
        return max(1, self.tau_max - (epoch - 1) // self.k)

    def phi(self, epoch: int) -> float:
        return 1.0 - (self.tau(epoch) - 1) / self.tau_max

    def start_epoch(self, epoch: int) -> None:
        self.scale = self.phi(epoch)
        # Stage II: gold labels alone.
        self.ce_weight = 1.0 if epoch > self.min_epochs else self.stage1_ce_weight

    def distill_term(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        return (student - self.scale * teacher).pow(2).sum(dim=1).mean()


class UniformTeacherLoss(HintonKDLoss):
    """Label smoothing as KD from a uniform teacher (LSR; Yuan et al. 2020,
    "Revisiting Knowledge Distillation via Label Smoothing Regularization", arXiv:1909.11723).

    D = T² · KL(u || σ(z_s/T)) with u uniform over the C classes: the teacher's
    logits are ignored. With ce_weight = 1 − ε and T = 1 this is cross-entropy
    with label smoothing ε (up to the constant entropy of u).
    """

    def distill_term(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        return super().distill_term(student, torch.zeros_like(student))


def ensemble_logits(
    per_teacher: list[torch.Tensor], mode: str, temperature: float = 1.0
) -> torch.Tensor:
    """Combine teachers (MT-DNN KD, Liu et al. 2019, arXiv:1904.09482).

    `logits`: the mean of the logits. `probs`: the mean of the softened
    distributions p̄ = mean_i σ(z_i/T), returned as logits T·log p̄, so that
    σ(result/T) = p̄ exactly and every loss can consume it unchanged.
    """
    stacked = torch.stack(per_teacher)
    if mode == "logits":
        return stacked.mean(0)
    if mode == "probs":
        probs = F.softmax(stacked / temperature, dim=-1).mean(0)
        return temperature * probs.clamp_min(1e-12).log()
    raise ValueError(f"unknown ensemble mode {mode!r}; valid: logits, probs")
