"""Every knob as data: pydantic models, loaded from YAML with `safe_load`.

Every command resolves its config from these models' defaults, a --config file, `-s`
and the options typed, in that order (`edgekd.resolve`); the resolved config is
written beside each artifact (`save_config`) so any result can be reproduced from it.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)

from edgekd import __version__
from edgekd.errors import EdgeKDError
from edgekd.io import (  # the JSON limits and readers live in io; configs read them too
    MAX_DEPTH,
    MAX_JSON_BYTES,
    read_regular,
)
from edgekd.registry import Component, first_error

DEFAULT_BASE = "packaged:all-MiniLM-L6-v2"

# A name that becomes a file or folder name (recipe variants, device specs): no '/', no
# leading '.', so it can never point outside the folder it is joined to.
PLAIN_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"

# Choices named once: the config fields below and the CLI options both use them.
Ensemble = Literal["logits", "probs"]
TeacherRuntime = Literal["auto", "torch", "onnx", "onnx-int8"]
Int8Mode = Literal["dynamic", "static"]
Preset = Literal["auto", "avx2", "avx512_vnni", "arm64"]
Calibration = Literal["minmax", "entropy", "percentile"]
Int8Embedding = Literal["row", "tensor"]


# Seeds reach numpy's RandomState/default_rng, which take 0 ≤ seed < 2**32 (a larger
# or negative one raised only after the teacher had labelled every row).
SEED_LIMIT = 2**32
SEED_RANGE = "0 ≤ seed < 2**32, numpy's limit"


def seed_field(description: str) -> Any:
    """A seed field: 0 by default, checked against numpy's range when the config is read."""
    return Field(0, ge=0, lt=SEED_LIMIT, description=f"{description} ({SEED_RANGE}).")


# Tokens per example: BERT-style models ship 512 positions, long-context encoders up to
# 8,192; past that a batch of 64 rows of attention scores (64·12 heads·8192² fp32)
# is 206 GB, so no config of a text classifier on an edge device means it.
MAX_TOKENS = 8192

# Student sizes (each student's options use these): an edge student is far smaller than
# its teacher, and these are past the largest encoders anyone distils from.
# - widths (embedding, hidden, LSTM units) ≤ 4,096: a BiLSTM of 4·(h·(e+h)+2h)·2 params
#   at h = e = 4,096 is 268M params, 1.1 GB in fp32 (4.3 GB with Adam's gradients and
#   moments); `hidden_size=100000` asked for a 160 GB allocation.
MAX_WIDTH = 4096
# - inner (FFN, MLP) widths ≤ 16,384: 4 × the widest hidden above, BERT's ratio.
MAX_INNER = 16384
# Token-state components (`token_states`) ≤ 256: 2·256 bytes a token cached in float16,
# half a BERT-base state's 768 floats; a student learns the top few well.
MAX_TOKEN_STATES = 256
# - layers ≤ 48 (BERT-large has 24), attention heads ≤ 64 (BERT-large: 16).
MAX_LAYERS = 48
MAX_HEADS = 64
# - a word vocabulary ≤ 1,000,000 rows (BERT's WordPiece has 30,522).
MAX_VOCAB = 1_000_000
# - and the whole student ≤ 350M params, BERT-large's 335M rounded up: 16 bytes a param
#   to train (weights, gradients, Adam's two moments) is 5.6 GB. Each student estimates
#   its count from its options before anything is allocated.
MAX_STUDENT_PARAMS = 350_000_000


def check_student_params(params: int, what: str) -> None:
    """Refuse a student of more than MAX_STUDENT_PARAMS parameters (estimated from its
    options, `what` saying which), before a tensor is allocated."""
    if params > MAX_STUDENT_PARAMS:
        raise ValueError(
            f"the student would have ~{params / 1e6:,.0f}M parameters ({what}), over the "
            f"{MAX_STUDENT_PARAMS / 1e6:,.0f}M cap of an edge student; lower those options"
        )


class StrictModel(BaseModel):
    # Unknown keys are errors: a typo in a YAML file must not be silently ignored. Values
    # are strict: a boolean is not a number (`min_accuracy: false` must not become a
    # limit of 0), "5" is not 5, and NaN or infinity is never a limit or a rate.
    model_config = ConfigDict(
        extra="forbid", protected_namespaces=(), strict=True, allow_inf_nan=False
    )


class DataConfig(StrictModel):
    spec: str = Field(
        "glue/sst2",
        description="HF dataset (`name[/config]`) or a local file/folder (TSV, CSV, JSONL).",
    )
    text_column: str | None = Field(None, description="Text column; auto-detected when unset.")
    label_column: str | None = Field(None, description="Label column; auto-detected when unset.")
    text_pair_column: str | None = Field(
        None, description="Second text of a sentence-pair task (e.g. sentence2, hypothesis)."
    )
    train_split: str = Field("train", description="Split name or file stem for training rows.")
    dev_split: str | None = Field(
        None, description="Split for evaluation; `dev`, `validation` or `valid` when unset."
    )
    max_train: int | None = Field(None, ge=1, description="Random subsample of training rows.")
    max_dev: int | None = Field(None, ge=1, description="Random subsample of dev rows.")
    seed: int = seed_field("Seed for subsampling and for a held-out dev split")
    encoding: str = Field("utf-8", description="Text encoding of local data files.")


class TeacherSchedule(StrictModel):
    """What a run trained, in optimiser steps: written to the resolved config so that
    rerunning it without a budget reproduces the teacher (`StepPlan`)."""

    steps: int = Field(..., ge=1, description="Optimiser steps trained.")
    decay_from: int | None = Field(None, ge=0, description="Step the cool-down started.")
    decay_to: int | None = Field(None, ge=1, description="Step the learning rate reaches 0.")


class TeacherConfig(StrictModel):
    base: str = Field(DEFAULT_BASE, description="HF id or folder of the encoder to fine-tune.")
    data: DataConfig = Field(default_factory=DataConfig)
    time_budget: float | None = Field(
        15.0,
        gt=0,
        description="Minutes for the whole stage; the run ends within it, its cool-down "
        "planned from the rate it measures. null: `epochs` (or the selection score) decides.",
    )
    epochs: float = Field(
        10.0,
        gt=0,
        description="Passes over the training rows at most (may be 0.5); the budget or a "
        "selection score that stopped rising usually ends the run first.",
    )
    lr: float = Field(5e-5, gt=0, description="AdamW peak learning rate of the encoder.")
    head_lr: float | None = Field(
        None, gt=0, description="Peak learning rate of the classifier's output layer; unset: lr."
    )
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay.")
    warmup_ratio: float = Field(
        0.06, ge=0, lt=1, description="Linear warm-up share of the first epoch's steps."
    )
    cooldown: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="Share of the run's steps at its end over which the learning rate falls "
        "linearly to 0.",
    )
    patience: float = Field(
        2.0,
        gt=0,
        description="Epochs since the weights last kept (a score within the selection split's "
        "noise of the best keeps its weights) before the cool-down starts.",
    )
    batch_size: int = Field(32, ge=1, description="Rows per optimiser step (rows).")
    precision: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="Arithmetic of the encoder's forward pass in each fine-tune step (its "
        "backward follows): fp32, or bf16 autocast, its logits back in fp32 (the loss, the "
        "weights, their gradients and AdamW stay fp32). bf16 needs native bf16: an x86 CPU "
        "with AVX512-BF16 or AMX, or a GPU. The probe, the scoring and the saved weights are "
        "fp32 either way.",
    )
    max_length: int | None = Field(
        None,
        ge=8,
        le=MAX_TOKENS,
        description="Tokens per example, longer ones truncated; unset: chosen from the "
        "training rows (99% read whole, at most the encoder's positions).",
    )
    pooling: Literal["auto", "mean", "cls"] = Field(
        "auto",
        description="Sentence vector the head reads: mean of the last layer's tokens, or the "
        "[CLS] pooler of a standard HF classifier; auto: how the base was trained (its "
        "sentence-transformers pooling config), else cls.",
    )
    warm_start: Literal["probe", "none"] = Field(
        "probe",
        description="probe: fit the new head as a linear probe on the frozen encoder before "
        "fine-tuning (LP-FT); none: a random head.",
    )
    eval_every: int = Field(
        300,
        ge=1,
        description="Steps between scorings (selection and dev; also at every epoch's end).",
    )
    selection_rows: int = Field(
        500,
        ge=0,
        description="Training rows held out to pick the kept weights (as in distill); dev is "
        "never read to choose. 0: keep the last.",
    )
    schedule: TeacherSchedule | None = Field(
        None,
        description="Steps and cool-down to train exactly (written by a run to its resolved "
        "config); unset: planned by the run.",
    )
    seed: int = seed_field("Seed for subsampling, initialisation and batch order")


# Per-epoch schedules for loss attributes (temperature, ce_weight, ...), as data:
# `schedules: {temperature: {kind: linear, start: 4, end: 1}}` in a distill config
# sets `loss.temperature` before every epoch.
class Schedule(StrictModel):
    kind: Literal["constant", "linear", "cosine", "step"] = "linear"
    start: float
    end: float = Field(0.0, description="Value at the last epoch (ignored by constant).")
    every: int = Field(1, ge=1, description="step: epochs between drops.")
    factor: float = Field(0.5, gt=0, description="step: multiplier per drop.")

    def value(self, epoch: int, epochs: int) -> float:
        """Value at `epoch` (1-based) of `epochs`; linear/cosine go start → end."""
        progress = 0.0 if epochs <= 1 else (epoch - 1) / (epochs - 1)
        if self.kind == "constant":
            return self.start
        if self.kind == "linear":
            return self.start + (self.end - self.start) * progress
        if self.kind == "cosine":
            return self.end + (self.start - self.end) * (1 + math.cos(math.pi * progress)) / 2
        return self.start * self.factor ** ((epoch - 1) // self.every)


# `augment.n_iter: auto`: twice Tang et al.'s 20 variants per training text, or more on
# a small task, up to ~this many candidate rows; the time budget then labels the prefix
# it affords. Distinct rows teach a student more than passes over the same rows, measured
# per task against the earlier sizes (20 variants, ~150,000 rows), 3 seeds, 13 minutes
# (benchmarks/results/levers.md, epoch_average_sst2*.md):
#   SST-2 (61k rows), 20 → 40: dev 0.8716 → 0.8784 (median; 14 → 9 epochs);
#   CLINC150 at 10 rows per class (1,348), 112 → 200: test 0.8653 → 0.8680, every seed up;
#   CoLA (8,041), 20 → 40: MCC 21.8 → 20.5 (median; the mean rose 20.8 → 21.4).
# Two tasks of three gain on the median: the bar a default clears (issue 31). Without a
# budget, tasks of ≥ 7,500 rows keep 40 (SST-2, CoLA, CLINC150 whole); under one, the
# pool below is larger.
AUTO_VARIANT_ROWS = 300_000
AUTO_MAX_VARIANTS = 200
AUTO_MIN_VARIANTS = 40  # 2 × Tang et al.'s 20
# Both sizes are for the default budget; a larger one scales them in proportion, since
# each candidate costs one labelling and a pass per epoch, both linear in the rows. Left
# at 20, SST-2 labelled all of its 115k candidates within 10 minutes and a 30-minute
# budget bought epochs 11-37 over the same rows, with no gain (0.8704 at both). Grown as
# √(30 / 13) instead (61 variants, 334k rows: 8.2 minutes labelling, 6.9 epochs against
# 12.6 and 3.8), SST-2's dev score was level from epoch 4 and its bundle 7 dev rows
# under the 93 variants' (seed 0, benchmarks/NOTES.md).
DEFAULT_BUDGET_MINUTES = 13.0
# Under a time budget `auto` draws a pool, and the plan labels the seeded prefix of it
# that leaves `MIN_EPOCHS` (3) epochs over the labelled rows: drawn rows past what the
# CPU labels cost only their drawing. Sized by minutes alone, at the rates of one CPU,
# SST-2's 93 variants per sentence at 30 minutes ran out on a CPU 1.6× as fast, which
# then spent its minutes on 10 epochs over 499k rows, where 200 variants (1.03M rows,
# 3-4 epochs) scored 0.8842 → 0.8876 on the 3-seed median, and at 13 minutes 0.8784 →
# 0.8842; CoLA at 13 minutes, 40 → 130 variants (this rule's), MCC median 20.85 → 23.81
# (benchmarks/NOTES.md). So the pool holds up to this many rows per budget minute:
# ~1.2× what the fastest CPU measured labels and still trains 3 epochs on (2,222
# labelling and 6,427 training rows/s: 60 / (1 / 2,222 + 3 / 6,427) = 65,400 rows a
# minute). Rows are counted before deduplication, which drops a fifth of SST-2's
# variants (1,277,000 → 1,028,510) and 43% of CoLA's (1,035,190 → 588,497).
AUTO_POOL_ROWS_PER_MINUTE = 80_000
# `augment.methods: auto`: Tang et al.'s rules, and on a small task TinyBERT's neighbour
# words ahead of them. A small task is one that `n_iter: auto` gives more than its 40
# variants per text: fewer than 300,000 / 40 = 7,500 training texts. Its test texts hold
# words its training texts lack (7.8% of CLINC150-10's dev pieces, 2.3% of SST-2's), and
# a neighbour brings such words into the transfer set in a real context. Measured per
# task, 3 seeds, 13 minutes (benchmarks/results/levers.md): CLINC150 at 10 rows per
# class +3.7 points, at 25 rows per class +2.0 (0.9200 → 0.9397, every seed up); SST-2
# (67k texts) -0.46 points, and CLINC150 whole (14,442 texts) +0.20, inside its seeds'
# 0.5-point spread, for a 47% larger bundle: both left at tang by this rule. Neighbour
# reads the teacher's WordPiece vocabulary: another teacher's small task gets tang alone.
SMALL_TASK_TEXTS = AUTO_VARIANT_ROWS // AUTO_MIN_VARIANTS


class AugmentConfig(StrictModel):
    methods: list[Component] | Literal["auto"] = Field(
        # Tang et al.'s rules by default (auto: alone on a task of 7,500 texts or more): on
        # SST-2 the int8 BiLSTM's best epoch rose from 0.866 to 0.877 (which epoch ships
        # depends on the selection split: 0.844-0.862 in one default run), and on a
        # held-out 3-class task retention from 95.6% to 99.6%.
        # Not swap+tang with 40 variants under the budget: 3 seeds scored 0.8739 each
        # (benchmarks/results/distill_swap_tang_n40.md) against this default's 0.8750.
        "auto",
        description="Augmenters in order, each a name or {name, options}: text augmenters "
        "(mask, pos, ngram; tang = all three; swap; neighbour), `minimax` (select among their "
        "variants) and `mixup` (MixKD). Options are each augmenter's own (`edgekd distill "
        f"--help`). auto: tang, and neighbour,tang on a small task (under {SMALL_TASK_TEXTS:,} "
        "training texts) with a WordPiece teacher; the resolved config lists what ran.",
    )
    n_iter: int | Literal["auto"] = Field(
        "auto",
        description="Augmented variants drawn per training text (Tang: 20); auto: "
        f"{AUTO_MIN_VARIANTS}, or "
        f"enough for ~{AUTO_VARIANT_ROWS:,} candidate rows on a small task (at most "
        f"{AUTO_MAX_VARIANTS} per text), both × budget / {DEFAULT_BUDGET_MINUTES:g} minutes "
        f"past the default budget; under a time budget, up to {AUTO_POOL_ROWS_PER_MINUTE:,} "
        "rows per minute of it, of which the run labels what it affords.",
    )
    max_rows: int | None = Field(
        # 0 is what a time budget too short to label any augmented row resolves to.
        None,
        ge=0,
        description="Seeded subsample of the deduplicated augmented rows (0: none).",
    )
    sources: Literal["maximal", "all"] = Field(
        "maximal",
        description="Texts to vary: those no other training text contains (a phrase "
        "dataset's whole sentences, whose parts it already holds; every text otherwise), "
        "or all.",
    )
    order: Literal["seeded", "uncertain", "uncertain-per-text"] = Field(
        "seeded",
        description="Which variants the teacher labels first when not all fit (a budget or "
        "max_rows): seeded (a uniform sample); uncertain (a scout, the student trained on "
        "100,000 gold rows, is least sure of them); uncertain-per-text (each text's "
        "least sure variant first, then each one's second, ...).",
    )
    seed: int = seed_field("Seed for drawing the augmented variants")

    @field_validator("n_iter")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError("n_iter must be at least 1, or auto")
        return value

    @property
    def listed(self) -> list[Component]:
        """The methods as listed; for `auto`, the part it holds on every task (tang).
        What a check before the data is read may rely on."""
        return [Component(name="tang")] if self.methods == "auto" else self.methods

    def methods_for(self, n_texts: int, wordpiece: bool) -> list[Component]:
        """`methods`, or what auto means for `n_texts` training texts and a teacher whose
        tokenizer is (`wordpiece`) or is not WordPiece."""
        if self.methods != "auto":
            return self.methods
        small = n_texts < SMALL_TASK_TEXTS and wordpiece
        return [Component(name=n) for n in (["neighbour", "tang"] if small else ["tang"])]

    def describe_auto(self, n_texts: int, wordpiece: bool) -> str:
        """One line on what `methods: auto` means for this task, and why."""
        names = ", ".join(m.name for m in self.methods_for(n_texts, wordpiece))
        if n_texts >= SMALL_TASK_TEXTS:
            why = f"{n_texts:,} training texts, not a small task"
        elif not wordpiece:
            why = (
                f"a small task, {n_texts:,} training texts; neighbour left out, as it reads "
                "a WordPiece teacher's vocabulary and this one's is not"
            )
        else:
            why = f"a small task, {n_texts:,} training texts < {SMALL_TASK_TEXTS:,}"
        return f"augment: {names} (auto: {why})"

    def resolved(
        self, n_texts: int, minutes: float | None, wordpiece: bool, varied: int | None = None
    ) -> AugmentConfig:
        """This config with every auto made a value for the task (`n_texts` training
        texts, `varied` of them varied, a budget of `minutes`, a WordPiece teacher or
        not): what a run records."""
        return self.model_copy(
            update={
                "n_iter": self.variants_per_text(n_texts, minutes, varied),
                "methods": self.methods_for(n_texts, wordpiece),
            }
        )

    def variants_per_text(
        self, n_texts: int, minutes: float | None = None, varied: int | None = None
    ) -> int:
        """`n_iter`, or what auto means for `n_texts` training texts, `varied` of them
        varied (`sources`; None: all), under a budget of `minutes` (None: no budget, sized
        as the default's, every row labelled: 40 per SST-2 text). Under a budget, at least
        that scaled by minutes past the default's (⌈40 × 30 / 13⌉ = 93 at 30), or the pool
        the plan labels a prefix of: SST-2's 6,385 sentences at 13 minutes, ⌊80,000 × 13 /
        6,385⌋ = 162 variants each."""
        if isinstance(self.n_iter, int):
            return self.n_iter
        scale = max(1.0, (minutes or 0.0) / DEFAULT_BUDGET_MINUTES)
        wanted = math.ceil(AUTO_VARIANT_ROWS * scale / max(n_texts, 1))
        sized = min(AUTO_MAX_VARIANTS, max(math.ceil(AUTO_MIN_VARIANTS * scale), wanted))
        if minutes is None:
            return sized
        pool = int(AUTO_POOL_ROWS_PER_MINUTE * minutes) // max(
            n_texts if varied is None else varied, 1
        )
        return min(AUTO_MAX_VARIANTS, max(sized, pool))

    @field_validator("methods")
    @classmethod
    def _each_once(cls, value: list[Component] | str) -> list[Component] | str:
        if isinstance(value, str):
            return value
        names = [m.name for m in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"augmenter {twice[0]!r} is listed twice; list it once")
        return value


class EarlyPass(StrictModel):
    """One pass trained while the teacher labelled (`edgekd.distill.early`)."""

    augmented_rows: int = Field(ge=0, description="Augmented rows it covered (a prefix).")
    steps: int = Field(ge=1, description="Optimiser steps it ran.")


# Epochs when neither `epochs` nor a time budget decides (Tang et al. train 10-30).
DEFAULT_EPOCHS = 10
# The most a time budget buys when `epochs` is unset. Rows are few on small tasks, so
# the budget's time is spent on passes: CLINC150 at 10 rows per class (19k augmented
# rows) trained 10 epochs in 35 s of a 13-minute budget and scored 0.819 on dev,
# still rising 1-3 points an epoch. The selection score's early stop ends such runs
# once passes stop paying; this cap only bounds a task of a few rows.
BUDGET_MAX_EPOCHS = 200


class DistillConfig(StrictModel):
    teacher: str = Field(..., description="HF id or folder of a fine-tuned classifier.")
    extra_teachers: list[str] = Field(
        default_factory=list, description="More teachers: distil from the ensemble of all."
    )
    ensemble: Ensemble = Field(
        "logits", description="Average teachers' logits, or their softened distributions (T)."
    )
    data: DataConfig = Field(default_factory=DataConfig)
    student: Component = Field(
        default_factory=lambda: Component(name="bilstm"),
        description="Registered student, a name or {name, options}: bilstm, cnn, bert, mobilebert.",
    )
    augment: AugmentConfig = Field(default_factory=AugmentConfig)
    loss: Component = Field(
        default_factory=lambda: Component(name="mse"),
        description="Registered loss: mse (Tang et al.), kd (Hinton), annealing, uniform.",
    )
    assistant: dict[str, Any] | None = Field(
        None,
        description="TAKD: fields of a first run (e.g. student: {name: bert, options: "
        "{layers: 3}}) whose student then teaches this one.",
    )
    intermediate: Component | None = Field(
        None,
        description="Intermediate-layer loss for a BERT student: pkd, tinybert, alp, "
        "distilbert or minilm.",
    )
    schedules: dict[str, Schedule] = Field(
        default_factory=dict, description="Per-epoch values for loss attributes (temperature)."
    )
    temperature: float = Field(1.0, gt=0, description="Softmax temperature T for kd.")
    ce_weight: float = Field(
        0.0, ge=0, le=1, description="Weight α of cross-entropy on gold labels, 0..1."
    )
    epochs: int | None = Field(
        None,
        ge=1,
        description="Passes over the transfer set (at most; the selection score may stop "
        "earlier). Unset: as many as the time budget affords after labelling, up to "
        f"{BUDGET_MAX_EPOCHS}; {DEFAULT_EPOCHS} without a budget.",
    )
    last_epoch_steps: int | None = Field(
        None,
        ge=1,
        description="Optimiser steps of the last of `epochs` (what a time budget that "
        "had room for part of an epoch trained, recorded so its config reruns to it). "
        "null: the whole epoch.",
    )
    time_budget: float | None = Field(
        # Distill, export and bundle in 15 minutes on 2 cores: export (~6 s), bundle
        # (<1 s) and process starts fit easily in the 2 minutes left.
        DEFAULT_BUDGET_MINUTES,
        gt=0,
        description="Minutes for the whole run: augmented rows, then epochs, are cut to fit "
        "from the labelling and training rates measured in the run. null: no cut.",
    )
    batch_size: int = Field(50, ge=1, description="Rows per optimiser step (Tang et al.: 50).")
    lr: float | None = Field(
        None, gt=0, description="Adam learning rate; unset: the student's (bilstm 1e-3, bert 5e-5)."
    )
    weight_decay: float = Field(0.0, ge=0)
    lr_decay: Literal["none", "linear", "cosine", "cooldown"] = Field(
        "none",
        description="Learning rate over the steps: constant (none); down to 0 over the "
        "planned steps (linear, cosine); or constant, then linearly down to 0 over the last "
        "`cooldown` share of the steps the run ends up training (cooldown: under a time "
        "budget its end is projected from each epoch's measured pace, and a plateau or "
        "early stop starts one instead of stopping).",
    )
    cooldown: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="Share of the run's steps at its end over which `lr_decay: cooldown` "
        "brings the learning rate to 0.",
    )
    cooldown_from: int | None = Field(
        None,
        ge=0,
        description="Optimiser step the cool-down started (`lr_decay: cooldown`; written by "
        "a run to its resolved config, with cooldown_to, so it reruns to the same rates). "
        "null: planned by the run.",
    )
    cooldown_to: int | None = Field(
        None,
        ge=1,
        description="Optimiser step at which the cool-down's learning rate reaches 0 (a "
        "budget may have stopped the run before it); set with cooldown_from.",
    )
    warmup_ratio: float = Field(
        0.0, ge=0, lt=1, description="Share of the planned steps with a linear warm-up."
    )
    grad_clip: float = Field(5.0, gt=0, description="Max global gradient norm.")
    precision: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="Arithmetic of the student's forward pass in training (its backward "
        "follows): fp32, or bf16 autocast, its outputs back in fp32 (the losses, the teacher, "
        "the weights, their gradients and Adam stay fp32). bf16 needs native bf16: an x86 CPU "
        "with AVX512-BF16 or AMX, or a GPU. Scoring and export are fp32 either way.",
    )
    ema: float | None = Field(
        # Measured on SST-2 (same rows, same steps): dev +0.1 / +1.2 / +0.7 points at
        # epochs 1 / 2 / 3 over the raw weights.
        0.25,
        gt=0,
        description="Score and keep an exponential moving average of the weights over about "
        "this many epochs (0.25: the last quarter epoch counts most). null: the raw weights.",
    )
    epoch_average: int | None = Field(
        None,
        ge=0,
        description="η: score and keep a polynomial-decay average of the epochs' weights "
        "(Shamir & Zhang 2013), in which epoch i weighs ∝ i·(i+1)···(i+η−1): η=0 uniform, "
        "η=1 ∝ i; each epoch's own weights are still scored and recorded. null: keep an "
        "epoch's own weights.",
    )
    token_states: int = Field(
        0,
        ge=0,
        le=MAX_TOKEN_STATES,
        description="Distil the teacher's last-layer token states too, projected on their top "
        "k principal components (0: logits only). For students that read the teacher's "
        "WordPiece pieces (bilstm, cnn); cached beside the logits.",
    )
    token_states_weight: float = Field(
        1.0, ge=0, description="Weight of the token-state term beside the logit loss."
    )
    patience: int = Field(
        3,
        ge=1,
        description="Epochs scoring below the kept one beyond the selection split's noise "
        "before stopping early.",
    )
    selection_rows: int = Field(
        500,
        ge=0,
        description="Training rows held out to pick the epoch (whole sentences; their "
        "phrases leave training too); dev is never read to choose. 0: keep the last epoch.",
    )
    teacher_runtime: TeacherRuntime = Field(
        "auto",
        description="Label with int8 ONNX and fp32 ONNX for its close calls (auto, "
        "checked ≥ 99.5% agreement), fp32 ONNX (onnx), int8 ONNX (onnx-int8) or PyTorch.",
    )
    teacher_batch_size: int = Field(64, ge=1, description="Rows per teacher forward pass.")
    teacher_max_length: int = Field(
        128,
        ge=8,
        le=MAX_TOKENS,
        description="Teacher tokens per example; a teacher with fewer positions is refused. "
        "Unset: the length an `edgekd teacher` folder was trained at, else 128 (lowered to "
        "a teacher's positions).",
    )
    cache_dir: str | None = Field(
        None,
        description="edgekd's cache folder (teacher logits, ONNX teachers, augmented rows); "
        "default $EDGEKD_CACHE or ~/.cache/edgekd.",
    )
    seed: int = seed_field("Seed for subsampling, augmentation, init and batches")
    overlap: bool = Field(
        False,
        description="Under a time budget, train the student on the rows already labelled "
        "while the teacher labels the rest, on one core fewer (the early passes); the "
        "passes run are written to early_passes. Off by default: on SST-2 it trained 1.6× "
        "the rows but labelled fewer, and scored 0.5 points under.",
    )
    early_passes: list[EarlyPass] | None = Field(
        None,
        description="Passes trained before the epochs: written by a run that trained them "
        "while its teacher labelled, so its config reruns them (after labelling, on the "
        "same rows). null: none, or the time budget's run decides.",
    )

    @model_validator(mode="before")
    @classmethod
    def _student_option_at_the_top(cls, data: Any) -> Any:
        # `-s hidden_size=300` (or `hidden_size: 300`) reads as a student option but names
        # no distill field: say the path that sets it.
        if not isinstance(data, dict) or set(data) <= set(cls.model_fields):
            return data
        from edgekd.registry import STUDENTS

        for key in set(data) - set(cls.model_fields):
            if any(key in STUDENTS.config_model(n).model_fields for n in STUDENTS.names()):
                raise EdgeKDError(
                    f"distill has no field {key!r}; a student option is set as "
                    f"-s student.options.{key}=VALUE (in a file: under student.options)"
                )
        return data

    @property
    def max_epochs(self) -> int:
        """`epochs`, or what it means unset: the budget's cap, or the default."""
        if self.epochs is not None:
            return self.epochs
        return BUDGET_MAX_EPOCHS if self.time_budget is not None else DEFAULT_EPOCHS

    @model_validator(mode="after")
    def _early_passes_within_the_rows(self) -> DistillConfig:
        cap, passes = self.augment.max_rows, self.early_passes or []
        over = [p.augmented_rows for p in passes if cap is not None and p.augmented_rows > cap]
        if over:
            raise ValueError(
                f"early_passes cover up to {max(over):,} augmented rows, above "
                f"augment.max_rows {cap:,}; raise max_rows or drop early_passes"
            )
        return self

    @model_validator(mode="after")
    def _last_epoch_of_set_epochs(self) -> DistillConfig:
        if self.last_epoch_steps is not None and self.epochs is None:
            raise ValueError("last_epoch_steps is the last of `epochs` steps: set epochs too")
        start, end = self.cooldown_from, self.cooldown_to
        if start is None and end is None:
            return self
        if start is None or end is None or self.epochs is None:
            raise ValueError("cooldown_from and cooldown_to are set together, with epochs")
        if end <= start:
            raise ValueError("cooldown_to must be above cooldown_from")
        if self.lr_decay != "cooldown":
            raise ValueError("cooldown_from and cooldown_to need lr_decay: cooldown")
        return self

    @field_validator("assistant")
    @classmethod
    def _assistant_fields(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # Checked here so a typo fails when the file is read, not after run 1.
        keys = set(value or {})
        unknown = sorted(keys - set(cls.model_fields) | keys & {"assistant"})
        if unknown:
            raise ValueError(f"unknown assistant field(s) {unknown}; use distill fields")
        return value

    def assistant_config(self) -> DistillConfig:
        """TAKD's first run: this config with `assistant`'s fields over it."""
        if self.assistant is None:
            raise ValueError("no assistant: this config is one run")
        base = self.model_dump(exclude={"assistant"})
        return validate(DistillConfig, {**base, **self.assistant}, "assistant")

    @model_validator(mode="after")
    def _component_options(self) -> DistillConfig:
        # Each component's options against its own config model, through its registry,
        # when the config is read: a typo is one line before any data or teacher loads.
        # (This imports the components' modules, torch included; `--help` never gets here.)
        from edgekd.registry import AUGMENTERS, LAYER_LOSSES, LOSSES, STUDENTS

        if "early_exit" in self.student.options:  # the student option with a flag of its own
            able = [
                n for n in STUDENTS.names() if "early_exit" in STUDENTS.config_model(n).model_fields
            ]
            if self.student.name not in able:
                raise EdgeKDError(
                    f"--early-exit needs a {' or '.join(able)} student (not "
                    f"{self.student.name}); add --student {able[0]}"
                )
        STUDENTS.options(self.student, "student")
        LOSSES.options(self.loss, "loss")
        own = getattr(STUDENTS.get(self.student.name), "default_intermediate", None)
        if (
            own is not None
            and self.intermediate is None
            and "intermediate" not in self.model_fields_set
        ):
            self.intermediate = Component(name=own)
        if self.intermediate is not None:
            LAYER_LOSSES.options(self.intermediate, "intermediate")
            # A method that comes with its own student setup (DistilBERT: every other
            # teacher layer) gives it, unless the student's options say otherwise; the
            # resolved config then records what ran.
            wants = getattr(LAYER_LOSSES.get(self.intermediate.name), "student_defaults", {})
            fields = STUDENTS.config_model(self.student.name).model_fields
            for key, value in wants.items():
                if key in fields:
                    self.student.options.setdefault(key, value)
        for method in self.augment.listed:
            AUGMENTERS.options(method, f"augment.methods.{method.name}")
        return self

    @model_validator(mode="after")
    def _teacher_positions(self) -> DistillConfig:
        # A teacher reads at most max_position_embeddings tokens: a longer
        # teacher_max_length failed inside its forward pass (an index error, exit 4) on
        # the first long text, after data had loaded. Checked here for teachers that are
        # local folders; the default 128 drops to a smaller teacher's positions.
        for teacher in [self.teacher, *self.extra_teachers]:
            positions = teacher_positions(teacher)
            if positions is not None:
                self.fit_teacher_positions(teacher, positions)
        return self

    def fit_teacher_positions(self, teacher: str, positions: int) -> None:
        """Refuse (ValueError) lengths past a teacher's `positions`, or lower the default
        teacher_max_length to them. Run when the config is read for local teachers, and
        by `distill` once a hub teacher has loaded (its config is known only then)."""
        from edgekd.registry import STUDENTS

        fields = STUDENTS.config_model(self.student.name).model_fields
        # A BERT-style student copies the teacher's positions unless told otherwise.
        copies = {"max_position_embeddings", "max_length"} <= set(fields) and (
            "max_position_embeddings" not in self.student.options
        )
        length = copies and self.student.options.get("max_length", fields["max_length"].default)
        if teacher == self.teacher and copies and length > positions:
            raise ValueError(
                f"student.options.max_length {length} exceeds the teacher {teacher}'s "
                f"max_position_embeddings {positions}, which the student copies; set "
                f"student.options.max_length ≤ {positions}"
            )
        if self.teacher_max_length <= positions:
            return
        if "teacher_max_length" not in self.model_fields_set:
            self.teacher_max_length = max(8, positions)
            # Still the default, lowered (assignment marks a field as the user's): a
            # later default, such as the length the teacher trained at, may replace it.
            self.model_fields_set.discard("teacher_max_length")
            return
        raise ValueError(
            f"teacher_max_length {self.teacher_max_length} exceeds the teacher {teacher}'s "
            f"max_position_embeddings {positions}; set teacher_max_length ≤ {positions}"
        )


def teacher_positions(teacher: str) -> int | None:
    """Tokens a local teacher folder's model can read (its config.json's
    max_position_embeddings, less RoBERTa's padding offset); None when unknown (a hub id,
    no config, or a config without the field)."""
    path = Path(teacher) / "config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(read_regular(path, "teacher config", "fix the teacher", MAX_JSON_BYTES))
    except (EdgeKDError, ValueError):
        return None  # the teacher's own loading says what is wrong with it
    return positions_of(data) if isinstance(data, dict) else None


def positions_of(data: dict[str, Any]) -> int | None:
    """Tokens a model with this config (a config.json's fields) can read; None when
    it does not say."""
    positions = data.get("max_position_embeddings")
    if not isinstance(positions, int) or isinstance(positions, bool) or positions < 1:
        return None
    # RoBERTa-style position ids start after the padding index: 514 positions read 512.
    if "roberta" in str(data.get("model_type", "")) or data.get("model_type") == "camembert":
        pad = data.get("pad_token_id", 1)
        positions -= (pad if isinstance(pad, int) else 1) + 1
    return positions if positions >= 1 else None


# Export and timing ranges:
# - opsets from 13 (the oldest the exporters emit: LayerNormalization, QDQ per-channel)
#   up to the installed onnx's newest (checked in ExportConfig, as it varies).
MIN_OPSET = 13
# - a fixed-shape batch ≤ 4,096 rows: an edge accelerator runs batch 1..64.
MAX_BATCH = 4096
# - 1,024 threads or processes: past the largest CPUs (a 2-socket 192-core host has 768
#   hardware threads).
MAX_THREADS = 1024
# - 1,000,000 timed runs: at 1 ms a run, 17 minutes (the default's 0.2 s).
MAX_RUNS = 1_000_000

# Timing defaults, written once: ProfileConfig and PlanConfig take them, a recipe's
# profile and plan sections take those fields, and `profile_model` its keyword defaults.
DEFAULT_DEVICE = "local-cpu"  # this machine's CPU (devices/specs/local-cpu.yaml)
DEFAULT_RUNS = 200
DEFAULT_TRIALS = 5
DEFAULT_WARMUP = 20
DEFAULT_SEQ_LEN = 64  # tokens per synthetic input


class ProfileConfig(StrictModel):
    """`edgekd profile` and a recipe's profile stage: batch-1 timing on each device."""

    devices: list[str] = Field(
        default_factory=lambda: [DEFAULT_DEVICE],
        min_length=1,
        description="Device names or specs.",
    )
    hosts: dict[str, str] = Field(default_factory=dict, description="ssh device → [user@]host.")
    threads: int | None = Field(
        None,
        ge=0,
        le=MAX_THREADS,
        description="onnxruntime intra-op threads (0: all cores); unset: the device's.",
    )
    # The upper bounds of runs, trials, processes and seq_lens are checked in
    # `_ranges` below, as an EdgeKDError: `edgekd check` builds this model directly from
    # its flags, where a pydantic error would not be turned into one line.
    runs: int = Field(
        DEFAULT_RUNS, ge=1, description=f"Timed runs in all, split into trials (≤ {MAX_RUNS:,})."
    )
    trials: int = Field(
        DEFAULT_TRIALS, ge=1, description="Trials; p50/p90 are medians of the trials' own (≤ runs)."
    )
    warmup: int = Field(DEFAULT_WARMUP, ge=0, le=MAX_RUNS, description="Untimed runs first.")
    seq_lens: list[int] = Field(
        default_factory=lambda: [DEFAULT_SEQ_LEN],
        min_length=1,
        description="Tokens per synthetic input; several: a sweep.",
    )
    vs: str | None = Field(None, description="Time this second model alternately; the ratio.")
    processes: int = Field(
        # 3: one process's interval is overconfident (it missed 0 on identical models 6
        # times in 40, three processes' once: benchmarks/results/baseline_gate.md).
        3,
        ge=1,
        description=f"--vs: agent processes (interval spans them; ≤ {MAX_THREADS:,}).",
    )

    @model_validator(mode="after")
    def _runs_cover_trials(self) -> ProfileConfig:
        runs_cover_trials(self.runs, self.trials)
        return self

    @model_validator(mode="after")
    def _ranges(self) -> ProfileConfig:
        # EdgeKDError, not ValueError: pydantic passes it through unchanged, so a direct
        # `ProfileConfig(...)` (edgekd check) refuses in one line too.
        if min(self.seq_lens) < 1 or max(self.seq_lens) > MAX_TOKENS:
            raise EdgeKDError(
                f"seq_lens {self.seq_lens}: lengths are at least 1 token and at most "
                f"{MAX_TOKENS:,} (and the model's max_position_embeddings); fix --seq-len / "
                "seq_lens"
            )
        if self.runs > MAX_RUNS:
            raise EdgeKDError(f"runs {self.runs:,} is over {MAX_RUNS:,}; fix --runs / runs")
        if self.processes > MAX_THREADS:
            raise EdgeKDError(
                f"processes {self.processes:,} is over {MAX_THREADS:,}; fix --processes"
            )
        return self


class BaselineTiming(ProfileConfig):
    """`edgekd check --baseline`: this run's model and the baseline's timed side by side,
    alternating, in `processes` agents; a regression is called only when the ratio's 95%
    interval clears the budget's margin (benchmarks/results/baseline_gate.md)."""

    # Twice the profile's runs and trials: the verdict rests on a ratio's interval.
    runs: int = Field(400, ge=1, description=f"Timed runs per model per process (≤ {MAX_RUNS:,}).")
    trials: int = Field(10, ge=2, description="Trials per process, each a ratio pair (≤ runs).")


class ExportConfig(StrictModel):
    opset: int = Field(
        17,
        ge=MIN_OPSET,
        description=f"ONNX opset of the exported graph: {MIN_OPSET} up to what the installed "
        "onnx supports (onnx.defs.onnx_opset_version()).",
    )
    # A recipe or the Python API ships int8 unless told not to, as a budget gates int8
    # by default. The command line asks for it with a flag (`edgekd export --int8`): there
    # an int8 option without it is an error, not a silent no-op. `command_line` is that
    # default, under a --config file's (edgekd.resolve).
    int8: StrictBool = Field(
        True,
        description="Also write model.int8.onnx (refused if slower than fp32; see guard).",
        json_schema_extra={"command_line": False},
    )
    int8_mode: Int8Mode = Field(
        "dynamic",
        description="dynamic: int8 weights, activations scaled at run time (LSTM-capable); "
        "static: QDQ with activation ranges calibrated on training rows.",
    )
    preset: Preset = Field(
        "auto", description="Target CPU for int8 types; auto reads this CPU's flags."
    )
    per_channel: bool | None = Field(None, description="Per-channel weight scales (preset's).")
    reduce_range: bool | None = Field(None, description="7-bit weights (preset's).")
    int8_embedding: Int8Embedding = Field(
        "row",
        description="int8 embedding tables: row (one scale per row, 4 bytes a row; closer to "
        "fp32) or tensor (onnxruntime's one scale per table).",
    )
    calibration: Calibration = Field(
        "minmax", description="Static int8: how activation ranges are calibrated."
    )
    calibration_samples: int = Field(
        # 100,000 rows: ranges settle within a few hundred; more only costs time.
        256,
        ge=1,
        le=100_000,
        description="Static int8: training rows run for calibration (rows).",
    )
    guard: bool = Field(
        True,
        description="Time int8 against fp32 here; refuse int8 if it runs at least 1.25× "
        "fp32's latency (then try the other presets and formats).",
    )
    max_int8_drop: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Accuracy repair: keep sensitive nodes fp32 until int8 loses at most this "
        "much dev accuracy (0..1, e.g. 0.003 = 0.3 points).",
    )
    atol: float = Field(1e-4, gt=0, description="Max |ONNX − PyTorch| on logits (fp32).")
    exit_threshold: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Early-exit students: the normalised-entropy threshold the graphs ship "
        "with (0: every layer runs); unset: the fastest that meets exit_min_agreement and "
        "exit_min_accuracy on the rows distill held out.",
    )
    exit_min_agreement: float = Field(
        0.99,
        ge=0,
        le=1,
        description="Early exit, threshold unset: share of held-out rows that must keep the "
        "full model's prediction, at its 95% lower bound (a budget's min_agreement, with "
        "--budget).",
    )
    exit_min_accuracy: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Early exit, threshold unset: accuracy on the held-out rows it must keep "
        "(a budget's min_accuracy, with --budget).",
    )
    mobile: bool = Field(
        False, description="Also write the ORT-format model and a mobile usability report."
    )
    executorch: bool = Field(
        False, description="Also write an ExecuTorch .pte (BiLSTM, XNNPACK partitioner)."
    )
    e2e: bool = Field(
        False,
        description="Also write model.e2e.onnx: string in, label and probabilities out, the "
        "tokenizer in the graph (needs onnxruntime-extensions to run).",
    )
    fixed_shape: str | None = Field(
        None,
        pattern=r"^\d+x\d+$",
        description="BATCHxSEQUENCE: a fixed-shape variant (NNAPI/CoreML need one).",
    )
    formats: list[Component] = Field(
        default_factory=list,
        description="More registered export formats, each a name or {name, options} "
        "(the built-in onnx, int8, ort and pte have the switches above).",
    )

    @field_validator("opset")
    @classmethod
    def _opset_known(cls, value: int) -> int:
        import onnx

        newest = onnx.defs.onnx_opset_version()
        if value > newest:
            raise ValueError(
                f"opset {value} is newer than the installed onnx {onnx.__version__} knows "
                f"({newest}); use {MIN_OPSET}..{newest}"
            )
        return value

    @field_validator("fixed_shape")
    @classmethod
    def _fixed_shape_sane(cls, value: str | None) -> str | None:
        if value is None:
            return value
        batch, seq = (int(n) for n in value.split("x"))
        if not (1 <= batch <= MAX_BATCH and 1 <= seq <= MAX_TOKENS):
            raise ValueError(
                f"fixed_shape {value}: BATCHxSEQUENCE takes batch 1..{MAX_BATCH:,} and "
                f"sequence 1..{MAX_TOKENS:,} (at most the model's max_position_embeddings)"
            )
        return value

    @field_validator("formats")
    @classmethod
    def _formats_registered(cls, value: list[Component]) -> list[Component]:
        from edgekd.registry import FORMATS

        for c in value:
            if c.name in BUILTIN_FORMATS:
                raise ValueError(f"{c.name} is not listed in formats: {BUILTIN_FORMATS[c.name]}")
            FORMATS.options(c, f"formats.{c.name}")  # registered, and its options valid
        return value

    @field_validator("int8", mode="before")
    @classmethod
    def _int8_is_a_switch(cls, value: Any) -> Any:
        # `int8: static` reads naturally but is a mode, not the switch: say how to write
        # it instead of "not a valid boolean".
        if value is None or value in ("dynamic", "static", "none"):
            raise ValueError(
                f"int8 is true or false (got {value!r}); "
                "write `int8: true` and `int8_mode: static` for static QDQ"
            )
        return value

    @model_validator(mode="after")
    def _options_need_their_mode(self) -> ExportConfig:
        # Defaults are left alone, so a config dumped with every field reloads cleanly;
        # a value that could not take effect is an error, not a silent no-op.
        defaults = {name: f.default for name, f in type(self).model_fields.items()}
        changed = {k for k in defaults if getattr(self, k) != defaults[k]}
        if not self.int8:
            moot = sorted(changed & INT8_OPTIONS)
            if moot:
                raise ValueError(
                    f"{', '.join(moot)} only {_apply(moot)} to int8 models; add --int8 (int8: true)"
                )
        if self.int8_mode != "static":
            moot = sorted(changed & STATIC_OPTIONS)
            if moot:
                raise ValueError(
                    f"{', '.join(moot)} only {_apply(moot)} to static int8; add --int8-mode "
                    "static (int8_mode: static)"
                )
        return self


# The built-in export formats and the switch each is asked for with instead of `formats`.
BUILTIN_FORMATS = {
    "onnx": "fp32 ONNX is always written",
    "int8": "set int8: true (edgekd export --int8)",
    "ort": "set mobile: true (edgekd export --mobile)",
    "pte": "set executorch: true (edgekd export --executorch)",
    "e2e": "set e2e: true (edgekd export --e2e)",
}
# Export options with no effect without int8, and those with none without static int8.
INT8_OPTIONS = {
    "int8_mode", "preset", "per_channel", "reduce_range", "int8_embedding", "max_int8_drop"
}  # fmt: skip
STATIC_OPTIONS = {"calibration", "calibration_samples"}


def _apply(fields: list[str]) -> str:
    return "applies" if len(fields) == 1 else "apply"


# The candidates `edgekd plan` builds when none are given: Tang et al.'s BiLSTM at three
# widths × two embedding sizes, the CNN at three filter counts, and BERT students of 2
# and 4 layers at two widths (heads of 64 dims, FFN 4 × width). Each is `{name, options}`
# as in `distill.student`.
DEFAULT_GRID: list[dict[str, Any]] = [
    *(
        {"name": "bilstm", "options": {"hidden_size": h, "embedding_dim": e}}
        for h in (64, 150, 300)
        for e in (64, 128)
    ),
    *({"name": "cnn", "options": {"filters": k}} for k in (64, 128, 256)),
    *(
        {"name": "bert", "options": {"layers": n, "hidden": w, "heads": w // 64, "ffn": 4 * w}}
        for n in (2, 4)
        for w in (128, 256)
    ),
]


class PlanConfig(StrictModel):
    """`edgekd plan`: untrained candidates exported and timed on the target device."""

    teacher: str = Field(..., description="The teacher the students would learn from.")
    data: DataConfig = Field(..., description="The task: vocabulary, labels, dev texts.")
    grid: list[Component] = Field(
        default_factory=lambda: [Component.model_validate(c) for c in DEFAULT_GRID],
        min_length=1,
        description="Candidate students, each {name, options} as distill.student takes.",
    )
    device: str = Field(DEFAULT_DEVICE, description="Device name or spec path to time on.")
    host: str | None = Field(None, description="[user@]host of an ssh device.")
    threads: int | None = Field(
        None, ge=0, le=MAX_THREADS, description="Unset: the budget's thread count."
    )
    seq_len: int | None = Field(
        None, ge=1, le=MAX_TOKENS, description="Tokens per timed input; unset: median dev length."
    )
    runs: int = Field(DEFAULT_RUNS, ge=1, le=MAX_RUNS)
    trials: int = Field(DEFAULT_TRIALS, ge=1, le=MAX_RUNS)
    top: int = Field(3, ge=1, description="Candidates a recipe's `variants: plan` distils.")
    export: ExportConfig = Field(
        default_factory=lambda: ExportConfig(), description="As each student would be exported."
    )

    @field_validator("grid")
    @classmethod
    def _students_registered(cls, value: list[Component]) -> list[Component]:
        from edgekd.registry import STUDENTS

        for i, c in enumerate(value):
            STUDENTS.options(c, f"grid[{i}]")  # registered, and its options valid
        return value

    @model_validator(mode="after")
    def _runs_cover_trials(self) -> PlanConfig:
        runs_cover_trials(self.runs, self.trials)
        return self


def runs_cover_trials(runs: int, trials: int) -> None:
    """The timing rule of every config that times (ProfileConfig, PlanConfig): at
    least one timed run per trial."""
    if runs < trials:
        raise ValueError(f"runs {runs} < trials {trials}: each trial needs a run")


M = TypeVar("M", bound=BaseModel)


# Limits on a config file (YAML or JSON), checked while it is read so a crafted file
# is refused with one line instead of hanging or exhausting memory:
# - 1 MiB: the largest config edgekd ships (a recipe) is ~1.5 KB and a plan grid of a
#   hundred candidates ~10 KB; anything near a megabyte is the wrong file.
MAX_CONFIG_BYTES = 1 << 20
# - 100,000 values once aliases are expanded: a 1 KB YAML file of nested aliases
#   ("billion laughs") names 10^9 values, which validating would walk one by one; a real
#   config has a few hundred.
MAX_NODES = 100_000


class YAMLRefused(yaml.YAMLError):
    """Well-formed YAML that edgekd will not read: a key twice in one mapping, nesting
    past MAX_DEPTH, more than MAX_NODES values once aliases are expanded, or an alias
    that contains itself. Its message says what and where, without the file name."""


class _Loader(yaml.SafeLoader):
    """SafeLoader (plain data only, never Python objects) that reads `1e-3` as a number,
    and refuses what YAMLRefused lists.

    YAML 1.1, which PyYAML implements, wants a dot in a float (`1.0e-3`) and reads
    `1e-3` as a string; with strict config fields that would reject the way everyone
    writes a learning rate. YAML 1.2's float pattern fixes it."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        # The composer recurses once per level: stop at MAX_DEPTH, long before Python's
        # recursion limit, and before the rest of the document is even parsed.
        nests = self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent)
        if nests:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise YAMLRefused(f"line {line}: nested deeper than {MAX_DEPTH} levels")
        try:
            return super().compose_node(parent, index)
        finally:
            if nests:
                self._depth -= 1

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node, 1, {}, set())
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        # Before SafeLoader merges `<<:` keys (a merge may override, by design): the
        # keys written in this mapping itself must differ, or the last would silently win.
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: SafeLoader names it below
                    continue
                if duplicate:
                    raise YAMLRefused(
                        f"line {key_node.start_mark.line + 1}: key {key!r} appears twice in "
                        "one mapping (the last would silently win)"
                    )
        return super().construct_mapping(node, deep)


def _expanded_size(
    node: Any, level: int, memo: dict[int, tuple[int, int]], path: set[int]
) -> tuple[int, int]:
    """(values under `node` with every alias expanded, its nesting height); refuses a
    document past MAX_NODES or MAX_DEPTH that way, or an alias that holds itself. Each
    node is walked once (an alias shares its anchor's node), at most MAX_DEPTH deep."""
    if isinstance(node, yaml.ScalarNode):
        return 1, 0
    key = id(node)
    line = node.start_mark.line + 1
    if key in path:
        raise YAMLRefused(f"line {line}: an alias refers to a list or mapping that holds it")
    if key not in memo:
        if level > MAX_DEPTH:
            raise YAMLRefused(f"line {line}: nested deeper than {MAX_DEPTH} levels (via aliases)")
        path.add(key)
        children = (
            node.value
            if isinstance(node, yaml.SequenceNode)
            else [n for pair in node.value for n in pair]
        )
        count, height = 1, 0
        for child in children:
            n, h = _expanded_size(child, level + 1, memo, path)
            count, height = count + n, max(height, h)
            if count > MAX_NODES:
                raise YAMLRefused(
                    f"line {line}: more than {MAX_NODES:,} values once aliases are expanded"
                )
        path.discard(key)
        memo[key] = (count, height + 1)
    count, height = memo[key]
    if level + height - 1 > MAX_DEPTH:
        raise YAMLRefused(f"line {line}: nested deeper than {MAX_DEPTH} levels (via aliases)")
    return count, height


def _construct_number(loader: _Loader, node: Any) -> float | int:
    """A YAML 1.2 float, but `2e6` (e-notation with no point) whole: an int. Strict int
    fields (max_train, n_iter, max_bytes) take it, as float fields take any int, so a
    count is written as everyone writes one; `2.0e6` stays a float, and so does one past
    2**53, where a float no longer holds every whole number (1e30 is not 10**30)."""
    value: float = loader.construct_yaml_float(node)
    whole = "." not in node.value and value.is_integer() and abs(value) <= 2**53
    return int(value) if whole else value


# A tag of edgekd's own for the implicit resolver below: an explicit `!!float 3` keeps
# YAML's float constructor and stays a float.
NUMBER_TAG = "tag:edgekd,2026:number"
_Loader.add_constructor(NUMBER_TAG, _construct_number)
_Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:float"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    NUMBER_TAG,
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def parse_yaml(text: str) -> Any:
    """YAML text as plain data (a file's, or one `key=value` override's value); raises
    YAMLRefused for a repeated key, deep nesting or an alias bomb."""
    return yaml.load(text, Loader=_Loader)


def load_yaml(path: str | Path) -> Any:
    """Read YAML (or JSON, which is YAML) as plain data; a SafeLoader never constructs
    Python objects. A file that is not a regular one, is over MAX_CONFIG_BYTES, repeats
    a key, or nests past MAX_DEPTH is refused in one line naming it."""
    data = read_regular(
        path, "config file", "pass the YAML file itself (a regular file)", MAX_CONFIG_BYTES
    )
    try:
        return parse_yaml(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise EdgeKDError(
            f"{path} is not UTF-8 text (byte offset {e.start}); save it as UTF-8", 2
        ) from None
    except YAMLRefused as e:
        raise EdgeKDError(f"{path} {e}; fix that file", 2) from None
    except yaml.YAMLError as e:
        first = str(e).splitlines()[0]
        raise EdgeKDError(f"{path} is not valid YAML ({first}); fix the syntax", 2) from None


def load_fields(path: str | Path | None) -> dict[str, Any]:
    """A config file's fields as plain data (none: no file); anything but a mapping is
    refused naming the file."""
    data = load_yaml(path) if path else {}
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise EdgeKDError(
            f"{path} holds a YAML {type(data).__name__}; a config is a mapping of fields "
            "(`field: value` lines): fix that file"
        )
    return data


def validate(model: type[M], data: Any, source: str) -> M:
    """Build `model` from plain data, turning pydantic errors into one line."""
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as e:
        where, message = first_error(e)
        err = e.errors()[0]
        if not err["loc"]:  # a rule across fields (a model validator): in its own words
            raise EdgeKDError(f"{source}: {message.removeprefix('Value error, ')}", 2) from None
        if err["type"] == "extra_forbidden":  # a typo or a field of another config
            valid = fields_at(model, err["loc"][:-1])
            if valid:
                message = f"no such field; valid: {', '.join(valid)}"
        raise EdgeKDError(
            f"{source}: field '{where}': {message} ({len(e.errors())} error(s)); fix that field",
            2,
        ) from None


def fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """The fields of the config model at `loc` inside `model` (a pydantic error's
    location), or None where the path leaves typed models (a list, a dict of options)."""
    current = model
    for part in loc:
        info = current.model_fields.get(part) if isinstance(part, str) else None
        if info is None:
            return None
        kinds = get_args(info.annotation) or (info.annotation,)  # `X | None` → X
        nested = [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)]
        if len(nested) != 1:
            return None
        current = nested[0]
    return list(current.model_fields)


def parse_sets(pairs: list[str] | None, flag: str = "--set") -> dict[str, Any]:
    """`a.b=value` pairs → {dotted field: value}; values are YAML (`300`, `true`, `[a, b]`)."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or "" in key.strip().split("."):
            raise EdgeKDError(f"{flag} {pair!r} is not field=value; e.g. {flag} epochs=4")
        try:
            out[key.strip()] = parse_yaml(value)
        except YAMLRefused as e:
            raise EdgeKDError(f"{flag} {pair!r}: the value {e}; fix it") from None
        except yaml.YAMLError:  # an unbalanced [ or {
            raise EdgeKDError(f"{flag} {pair!r}: the value is not YAML; quote it") from None
    return out


def apply_sets(
    data: Any,
    sets: dict[str, Any],
    model: type[BaseModel] | None = None,
    flag: str = "--set",
    spell: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Plain config data with each dotted field set: the one override syntax of every
    command and of recipes. A step into a list of components picks the one of that
    name (`augment.methods.minimax.options.k`), and a bare component name is short for
    `{name: ...}`, so `student.options.hidden_size=300` works on `student: bilstm`.
    With `model` (the config the data is for), a section the data leaves out starts
    from its default component: `student.options.x` on a file without `student`.
    `flag` names where the fields came from in an error; `spell` says how the user
    writes a dotted field (`augment.methods`: `--augment`)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise EdgeKDError(f"the config must be a YAML mapping of fields, not {type(data).__name__}")
    for dotted, value in sets.items():
        *parents, leaf = dotted.split(".")
        node: Any = data
        cls = model
        for i, part in enumerate(parents):
            here = ".".join(parents[: i + 1])
            if isinstance(node, list):
                node, cls = _component_in(node, part, here, flag, spell or {}), None
                continue
            default, section, component = _section_default(cls, part)
            child = node.setdefault(part, default)
            if child == "auto" and not component:
                named = parents[i + 1] if i + 1 < len(parents) else "tang"
                raise EdgeKDError(
                    f"{flag} {dotted}: {here} is auto (chosen from the data) and lists no "
                    f"{named!r} yet; add {named} to {(spell or {}).get(here, here)} first"
                )
            if component and isinstance(child, str):  # a bare name: `student: bilstm`
                child = node[part] = {"name": child}
            cls = section
            if not isinstance(child, dict | list):
                raise EdgeKDError(f"{flag} {dotted}: {here} is not a section (it holds a value)")
            node = child
        if isinstance(node, list):
            raise EdgeKDError(f"{flag} {dotted}: name a field of one entry of {'.'.join(parents)}")
        node[leaf] = value
    return data


def _section_default(model: type[BaseModel] | None, name: str) -> tuple[Any, Any, bool]:
    """(what a missing section `name` of `model` starts as, the model of that section,
    whether it is a component, which a bare name may stand for)."""
    if model is None:
        return {}, None, False
    section = getattr(model, "SECTIONS", {}).get(name)  # a dict field read as a config
    if section is not None:
        return {}, section, False
    info = model.model_fields.get(name)
    if info is None:
        return {}, None, False
    default = info.get_default(call_default_factory=True)
    component = info.annotation is Component or Component in get_args(info.annotation)
    if isinstance(default, Component):
        return {"name": default.name}, None, True
    if isinstance(default, list) and default and isinstance(default[0], Component):
        return [c.model_dump() for c in default], None, True
    if default == "auto":  # augment.methods: chosen from the data, no entries yet
        return default, None, False
    if isinstance(default, BaseModel):
        return {}, type(default), False
    return {}, None, component


def _component_in(
    items: list[Any], name: str, where: str, flag: str, spell: dict[str, str]
) -> dict[str, Any]:
    """The entry of a component list named `name`, as a mapping (made one in place)."""
    for i, item in enumerate(items):
        if item == name:
            items[i] = {"name": name}
            return items[i]  # type: ignore[no-any-return]
        if isinstance(item, dict) and item.get("name") == name:
            return item
    names = [x if isinstance(x, str) else x.get("name") for x in items if isinstance(x, str | dict)]
    listed = where.rpartition(".")[0] or where
    raise EdgeKDError(
        f"{flag}: {listed} has no {name!r} (it lists {', '.join(map(str, names)) or 'none'}); "
        f"add {name} to {spell.get(listed, listed)} first"
    )


def override(cfg: M, **fields: Any) -> M:
    """Return `cfg` with every non-None field replaced, re-validated."""
    updates = {k: v for k, v in fields.items() if v is not None}
    return validate(type(cfg), {**cfg.model_dump(), **updates}, "command-line options")


def config_header() -> str:
    """The first line of every resolved config.yaml: the edgekd that wrote it."""
    return f"# Resolved by edgekd {__version__}: every field this run used, defaults filled in.\n"


def save_config(cfg: BaseModel, path: str | Path) -> None:
    """Write `cfg` as YAML under `config_header()`. The version is a comment, not a field:
    the fields stay exactly the model's (an extra one is refused on reading), so the file
    loads back through `--config` or `load_yaml` + `validate` as it was written."""
    from edgekd.io import atomic_write_text

    body = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
    atomic_write_text(path, config_header() + body)
