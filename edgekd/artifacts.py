"""Every file edgekd writes and reads, as a typed model with its file name.

One place for the shapes: a stage writes its result with `Model(...).write(folder)`
and the next stage reads it with `Model.read(folder)`; nobody parses these files by
key. Each JSON artifact carries `kind`, so a reader that finds several kinds under
one pattern (the report globbing `profile*.json`) dispatches on it instead of
guessing from which keys are present.

The fields edgekd reads are typed; measurement details that only travel along (a
guard's timings, a profile's trial list) are allowed as extra fields, so an agent on
a device can report more without a schema change here.
"""

from __future__ import annotations

import math
import os
import re
import stat
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    ValidationInfo,
    computed_field,
    model_validator,
)

from edgekd import __version__
from edgekd.config import DEFAULT_DEVICE, MAX_TOKENS, PLAIN_NAME, AugmentConfig, parse_yaml
from edgekd.errors import EdgeKDError
from edgekd.io import FILE_KINDS, MAX_JSON_BYTES, atomic_write_text, read_json, read_regular
from edgekd.registry import first_error

# ------------------------------------------------------------------ file names
# Non-JSON files of a stage folder; JSON artifacts name theirs in `FILE` below.
WEIGHTS = "model.safetensors"  # a student's weights (safetensors only: never a pickle)
TOKENIZER = "tokenizer.json"
CONFIG = "config.yaml"  # the resolved config, beside every artifact it produced
HF_CONFIG = "config.json"  # a Hugging Face model folder's config
MODEL_FILES = {"fp32": "model.onnx", "int8": "model.int8.onnx"}  # export kind → file
BUNDLE_MODEL = MODEL_FILES["fp32"]  # a bundle's model, whichever kind ships, under one name
# A mean-pooled `edgekd teacher` folder (edgekd.distill.pooled): its config.json carries
# POOLING_KEY = "mean" and this architecture name, which no Hugging Face class has.
POOLING_KEY = "edgekd_pooling"
POOLED_ARCHITECTURE = "EdgeKDPooledClassifier"


def is_pooled(config: Any) -> bool:
    """Whether a loaded HF config is a mean-pooled edgekd teacher's."""
    return getattr(config, POOLING_KEY, None) == "mean"


E2E_MODEL = "model.e2e.onnx"  # string in, label out: the tokenizer inside the graph
PTE = "model.pte"
REPORT_PAGE = "report.html"
PROFILE_GLOB = "profile*.json"
CHECK_GLOB = "check*.json"

A = TypeVar("A", bound="Artifact")
FROM_FILE = "from_file"  # validation context of `Artifact.read`

# ------------------------------------------------------------------ paths read from files


def is_plain_name(name: object) -> bool:
    """A file name written inside an artifact (export.json's `models[*].path`, a bundle
    manifest's `files`) is one plain name in the artifact's own folder: letters, digits,
    '_', '.', '-', not starting with '.'. So it is never absolute, never climbs out with
    '..', never hides, and holds no '/', '\\' or ':'."""
    return isinstance(name, str) and re.fullmatch(PLAIN_NAME, name) is not None


def _plain_name(value: str) -> str:
    if not is_plain_name(value):
        raise ValueError(
            f"{value!r} is not a plain file name in this folder (no '/', '..' or absolute path)"
        )
    return value


# A file name inside the artifact's folder, refused on reading otherwise.
PlainName = Annotated[str, AfterValidator(_plain_name)]


def _within(low: float, high: float) -> AfterValidator:
    """A measured value a gate reads, refused outside [low, high] on reading a file and
    on building one (from a device's profiling agent): a crafted or broken file's -1 ms
    p90 or 1.5 accuracy passed a budget before. Not a finite
    number (NaN, an infinity) stays readable and reads as not measured
    (`edgekd.budget.measured`), which fails the limit: both close the gate."""

    def check(value: float | None) -> float | None:
        if value is not None and math.isfinite(value) and not low <= value <= high:
            raise ValueError(f"{value} is outside {low:g}..{high:g}")
        return value

    return AfterValidator(check)


Share = Annotated[float | None, _within(0, 1)]  # of dev rows: accuracy, agreement, F1
Correlation = Annotated[float | None, _within(-1, 1)]  # MCC; an int8 drop
# Milliseconds or megabytes: 1e9 ms is 11.6 days for one call, 1e9 MB a petabyte; past
# either it is no measurement (and 1e308 overflowed the report's plot axes).
Amount = Annotated[float | None, _within(0, 1e9)]
Count = Annotated[int, Field(ge=0)]  # bytes, rows


def file_inside(folder: str | Path, name: str, fix: str) -> Path:
    """`folder/name`, checked to be a regular file inside `folder` that no link leads
    to: the one rule for every file edgekd finds by name in an input folder (an export,
    a bundle, a student) or reads a name of from a file there.

    `name` is one or more names joined by '/', none empty, hidden (so never '..') or
    holding '\\' or NUL: never absolute, never climbing out. Every step below `folder`
    is looked at without following links, and a symlink anywhere is refused naming it,
    whether it points in or out (a link where a file is expected is how a crafted
    folder gets /etc/passwd shipped inside a bundle).
    `folder` itself is the user's to name and may be reached through links. A FIFO,
    device or socket is refused too (reading it would block or never end), and so is a
    missing file. Every refusal is one line ending in `fix`."""
    folder = Path(folder)
    parts = name.split("/") if isinstance(name, str) else [""]
    if not all(p and not p.startswith(".") and "\\" not in p and "\0" not in p for p in parts):
        raise EdgeKDError(
            f"{name!r} is not a plain file name inside {folder} (no absolute path, '..' or "
            f"hidden part); {fix}"
        )
    path = folder
    for i, part in enumerate(parts):
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            raise EdgeKDError(f"{path} does not exist; {fix}") from None
        except OSError as e:
            raise EdgeKDError(f"cannot read {path} ({e.strerror}); {fix}") from None
        if stat.S_ISLNK(mode):
            raise EdgeKDError(
                f"{path} is a symlink; edgekd follows no links inside {folder}: put the file "
                f"itself there, or {fix}"
            )
        last = i == len(parts) - 1
        if not last and not stat.S_ISDIR(mode):
            raise EdgeKDError(f"{path} is not a folder; {fix}")
        if last and not stat.S_ISREG(mode):
            if stat.S_ISDIR(mode):
                raise EdgeKDError(f"{path} is a folder, not a file; {fix}")
            kind = FILE_KINDS.get(stat.S_IFMT(mode), "a special file")
            raise EdgeKDError(f"{path} is {kind}, not a regular file; {fix}")
    return path


class Nested(BaseModel):
    """A typed section of an artifact. Fields read like attributes; `x["field"]` reads
    the same field (for code that walks artifacts generically), never a guessed key."""

    # strict: a string is not a number, a boolean is not a count (a gate reading "12" as
    # 12 bytes would pass on a corrupted file); extra details ride along.
    model_config = ConfigDict(extra="allow", strict=True)

    def __getitem__(self, key: str) -> Any:
        if key not in self.__class__.model_fields and key not in (self.model_extra or {}):
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return (
            isinstance(key, str)
            and (key in self.__class__.model_fields or key in (self.model_extra or {}))
            and getattr(self, key) is not None
        )

    def get(self, key: str, default: Any = None) -> Any:
        """A field or extra by name (for renderers that take optional columns)."""
        value = getattr(self, key, None)
        return default if value is None else value


class Artifact(Nested):
    """A JSON file edgekd writes: `FILE` is its name inside the stage folder."""

    FILE: ClassVar[str]
    MADE_BY: ClassVar[str]  # the command that writes it, for the fix in an error
    # Layout versions this edgekd reads. A file whose `format` is another (a newer
    # edgekd's, or crafted) is refused: read as version 1 it was silently trusted.
    FORMATS: ClassVar[tuple[int, ...]] = (1,)

    # Which edgekd wrote the file, so a bundle, an export or a bug report names it. Made
    # in this process: this edgekd's; read from a file: what the file says (None from
    # before edgekd recorded it, 0.1.0), nested artifacts too; `write` stamps the
    # writer's. Provenance only: no reader acts on it (`format` says what can be read).
    edgekd_version: str | None = Field(
        default_factory=lambda: __version__, description="The edgekd that wrote this file."
    )

    @model_validator(mode="before")
    @classmethod
    def _unversioned_file(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and (info.context or {}).get(FROM_FILE):
            return {"edgekd_version": None, **data}
        return data

    @classmethod
    def path(cls, where: str | Path) -> Path:
        """`where` itself when it names a .json file, else `where/FILE`."""
        where = Path(where)
        return where if where.suffix == ".json" else where / cls.FILE

    @classmethod
    def read(cls: type[A], where: str | Path) -> A:
        path = cls.path(where)
        data = read_json(path)
        if not isinstance(data, dict):
            raise EdgeKDError(
                f"{path} is not a JSON object; re-create {path.name} with `{cls.MADE_BY}`"
            )
        version = data.get("format", 1)  # files from before a format field are version 1
        if type(version) is not int or version not in cls.FORMATS:
            raise EdgeKDError(
                f"{path} is format {str(version)[:20]}, which this edgekd does not read "
                f"(it reads {', '.join(map(str, cls.FORMATS))}); re-create it with "
                f"`{cls.MADE_BY}`, or upgrade edgekd"
            )
        try:  # a file without a version stays without one: it is not this edgekd's
            return cls.model_validate(data, context={FROM_FILE: True})
        except ValidationError as e:
            field, message = first_error(e)
            raise EdgeKDError(
                f"{path} is not a valid {cls.FILE} ({field}: {message}); re-create it "
                f"with `{cls.MADE_BY}`"
            ) from None

    def write(self, where: str | Path) -> Path:
        path = self.path(where)
        stamped = self.model_copy(update={"edgekd_version": __version__})
        atomic_write_text(path, stamped.model_dump_json(indent=2, exclude_none=True) + "\n")
        return path


# ------------------------------------------------------------------ student, teacher


class StudentMeta(Artifact):
    """`student.json`: what it takes to rebuild a student and read its outputs; copied
    beside its ONNX exports so a bundle knows its labels and tokenizer settings."""

    FILE: ClassVar[str] = "student.json"
    MADE_BY: ClassVar[str] = "edgekd distill"
    kind: Literal["student"] = "student"
    student: str
    config: dict[str, Any]
    vocab_size: int = Field(..., ge=1)
    num_labels: int = Field(..., ge=2)
    id2label: list[str]
    max_length: int = Field(..., ge=1, le=MAX_TOKENS)  # as distill bounds it; 10**9 lifted the cap
    add_special_tokens: bool = False

    @model_validator(mode="after")
    def _a_name_per_label(self) -> StudentMeta:
        if len(self.id2label) != self.num_labels:
            raise ValueError(f"{self.num_labels} labels but {len(self.id2label)} names in id2label")
        return self


class TimePlan(Nested):
    """What a distill run's time budget chose, from rates measured in the run: how many
    augmented rows to label and how many epochs to train (`time_plan` in its metrics).
    The resolved config states the choice as plain fields (`epochs`,
    `augment.max_rows`), so rerunning it without the budget gives the same student."""

    budget_s: float  # the whole run, load to saved student (seconds)
    train_rows_per_s: float  # student training, measured on probe steps
    label_rows_per_s: float | None = None  # teacher labelling in this run; None: all cached
    augmented_candidates: int  # variants generated
    augmented_rows: int  # of them, labelled and trained on
    epochs: int  # planned passes over the transfer set
    planned_s: float  # estimated wall time of the whole run (seconds)
    why: str  # one line: what bound the choice
    # Epochs run when the check after each epoch found the next would not fit (the
    # epochs ran slower than the probe read), or when they ran on past `epochs` (faster
    # than it read, and the rate has no schedule over the planned steps) to the clock,
    # `--epochs`, a plateau or an early stop; None: the plan held.
    cut_after: int | None = None
    # Steps of epoch `cut_after` when the time left held only part of it; None: whole.
    last_epoch_steps: int | None = None


class TaskShape(Nested):
    """What distillation sizes from the data (`TaskShape.of`, the one rule; `distill`
    records it in its metrics, `plan` shows a default run's before any run): the rows
    per class it trains on, the rows held out to select, and the augmented variants per
    text (more under a budget over the default's)."""

    rows: int  # training rows, the selection rows held out
    labels: int
    min_per_class: int  # the fewest training rows any label has
    median_per_class: float
    selection_rows: int  # held out of training to pick the epoch
    variants_per_text: int  # `augment.n_iter`, resolved
    candidates_at_most: int  # texts varied × variants, before deduplication

    @classmethod
    def of(
        cls,
        labels: Sequence[int],
        num_labels: int,
        selection_rows: int,
        augment: AugmentConfig,
        minutes: float | None = None,
        varied: int | None = None,
    ) -> TaskShape:
        """`minutes`: the run's time budget (None: none), and `varied`: the texts
        augmentation varies (None: all), which size `n_iter: auto`."""
        counts = sorted(Counter(labels).get(k, 0) for k in range(num_labels)) or [0]
        varied = len(labels) if varied is None else varied
        per_text = augment.variants_per_text(len(labels), minutes, varied)
        return cls(
            rows=len(labels),
            labels=num_labels,
            min_per_class=counts[0],
            median_per_class=float(statistics.median(counts)),
            selection_rows=selection_rows,
            variants_per_text=per_text,
            candidates_at_most=varied * per_text,
        )

    def describe(self) -> str:
        return (
            f"{self.rows:,} training rows over {self.labels} labels ({self.min_per_class:,} "
            f"to a label at least, median {self.median_per_class:,g}), {self.selection_rows:,} "
            f"held out to select; {self.variants_per_text} augmented variants per text "
            f"(≤ {self.candidates_at_most:,} rows)"
        )


class TfidfBaseline(Nested):
    """TF-IDF + logistic regression fitted on the run's training rows and scored on its
    dev rows (`edgekd.yardstick`): what the student must beat to be worth shipping."""

    accuracy: float
    n_train: int
    n_dev: int
    seconds: float
    # Word 1-2 grams; "char" (1-3 grams) where no training row holds a word.
    analyzer: Literal["word", "char"] = "word"


class DistillMetrics(Artifact):
    FILE: ClassVar[str] = "metrics.json"
    MADE_BY: ClassVar[str] = "edgekd distill"
    kind: Literal["distill"] = "distill"
    teacher: str
    student: str
    teacher_accuracy: float
    student_accuracy: float
    agreement: float
    params: int
    lr: float
    n_train: int
    n_dev: int
    labels: list[str]
    time_plan: TimePlan | None = None
    processes: int = 1  # training processes (`accelerate launch --num_processes`)
    tfidf: TfidfBaseline | None = Field(None, description="The yardstick on the same rows.")
    task_shape: TaskShape | None = Field(None, description="What the run sized from the data.")


class LabelerCalibration(Artifact):
    """How the teacher's int8 ONNX labels compare with its fp32 labels, on a seeded
    sample of the transfer texts (never dev): half picks the margin below which an
    int8 label is redone in fp32, the other half measures the result. Cached beside
    the teacher logits it decided (`<key>.calibration.json`)."""

    FILE: ClassVar[str] = "calibration.json"
    MADE_BY: ClassVar[str] = "edgekd distill"
    kind: Literal["calibration"] = "calibration"
    choice: Literal["hybrid", "onnx"]  # what labels the transfer set: int8+fp32, or fp32
    margin: float  # top-1 minus top-2 int8 logit below which fp32 relabels (logit units)
    spare: int = 0  # the picking half's disagreements the margin left above it (its rule)
    n: int  # rows in the measuring half
    int8_agreement: float  # int8 alone vs fp32, argmax, on the measuring half
    hybrid_agreement: float  # int8 with low-margin rows relabelled, same rows
    relabelled: float  # fraction of the measuring half relabelled in fp32
    floor: float  # the agreement the hybrid must reach, else fp32 labels everything


class TeacherMetrics(Artifact):
    FILE: ClassVar[str] = "metrics.json"
    MADE_BY: ClassVar[str] = "edgekd teacher"
    kind: Literal["teacher"] = "teacher"
    dev_accuracy: float = Field(..., description="Of the kept weights; dev chose nothing.")
    selection_accuracy: float | None = Field(None, description="What chose the kept weights.")
    # What `distill` reads to label as the teacher learnt: its tokens per text (the
    # default teacher_max_length) and the sentence vector its head reads.
    max_length: int | None = Field(None, ge=8, le=MAX_TOKENS)
    pooling: Literal["mean", "cls"] | None = None


# ------------------------------------------------------------------ export


class ExportedModel(Nested):
    """One exported model (fp32 or int8) of an export folder."""

    path: PlainName = Field(..., description="File name inside the export folder.")
    # Measured values may be absent: a limit on one then reads as not measured and fails.
    bytes: Count | None = None
    accuracy: Share = None
    mcc: Correlation = Field(None, description="Matthews correlation on the dev rows, -1..1.")
    macro_f1: Share = Field(None, description="F1 averaged over labels, dev rows, 0..1.")
    agreement: Share = Field(None, description="Share of dev rows agreeing with PyTorch, 0..1.")
    max_abs_diff: float | None = None


class E2EModel(Nested):
    """`model.e2e.onnx` of an export (`edgekd export --e2e`)."""

    path: PlainName
    source: Literal["fp32", "int8"]  # the model behind the in-graph tokenizer
    bytes: int
    rows: int  # dev rows predicted both ways
    # With the Python tokenizer path, the same rows batched alike on both sides at batch
    # 1, 8 and 32 (exporters/e2e.py BATCH_SIZES): 1.0, or there is no export.
    label_agreement: float
    max_probability_diff: float  # the largest of the batches'
    max_probability_diff_by_batch: dict[str, float] = Field(
        default_factory=dict,
        description="Batch size → max |probability difference| there; exports from "
        "before batching checked batch 1 alone and have none.",
    )


class ExitPoint(Nested):
    """One early-exit threshold measured on a set of rows."""

    threshold: float
    accuracy: float
    agreement: float = Field(..., description="Share of rows predicted as the full model does.")
    agreement_low: float | None = Field(
        None, description="Its Wilson 95% one-sided lower bound; the threshold rule reads this."
    )
    mean_exit_layer: float = Field(..., description="Layers run per row on average (1..M).")


class EarlyExit(Nested):
    """An early-exit student's export (FastBERT): the threshold its graphs ship with,
    how it was chosen, and each threshold measured on held-out rows and on dev."""

    layers: int
    threshold: float = Field(..., description="The graphs' default `exit_threshold`.")
    chosen_by: str = Field(..., description="How: given, or the rule it met on which rows.")
    selection: list[ExitPoint] = Field(
        default_factory=list, description="PyTorch, on the rows distill held out."
    )
    dev: dict[Literal["fp32", "int8"], list[ExitPoint]] = Field(
        default_factory=dict, description="Each exported graph, on dev rows."
    )
    ties: int = Field(0, description="Rows whose exit layer differed within 1e-5 of a threshold.")


class ExportReport(Artifact):
    FILE: ClassVar[str] = "export.json"
    MADE_BY: ClassVar[str] = "edgekd export"
    kind: Literal["export"] = "export"
    student: str | None = Field(None, description="The student folder exported.")
    atol: float | None = Field(None, description="Tolerance the ONNX logits were held to.")
    models: dict[Literal["fp32", "int8"], ExportedModel]
    student_accuracy: Share = None
    teacher_accuracy: Share = None
    tfidf_accuracy: Share = Field(
        None, description="TF-IDF + LR on the same dev rows (the student's distill run)."
    )
    int8_refused: bool = False
    int8_drop: Correlation = None
    n_dev: Count | None = None
    formats: list[str] = Field(default_factory=list, description="Formats written, in order.")
    e2e: E2EModel | None = None
    early_exit: EarlyExit | None = None

    def shipped(self) -> Literal["fp32", "int8"]:
        """The model a deployment takes: int8 when the export kept one."""
        return "int8" if "int8" in self.models else "fp32"

    def model_paths(self, folder: Path) -> list[Path]:
        return [folder / m.path for m in self.models.values()]


def _ids_from_text(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return [int(v) for v in value.split(",")] if value else []
        except ValueError:
            raise ValueError("not a comma-separated list of label ids") from None
    return value


# Label ids, one per dev row, written as "0,1,1,0" (a JSON list indented one id per line
# would be ~10 B a row; this is 2).
Ids = Annotated[
    list[int],
    BeforeValidator(_ids_from_text),
    PlainSerializer(lambda v: ",".join(map(str, v)), return_type=str),
]


class DevPredictions(Artifact):
    """`predictions.json`: every exported model's label on every dev row, beside the
    gold labels and PyTorch's. It lets `edgekd check --baseline` judge accuracy and
    agreement per row (paired) against another export scored on the same rows."""

    FILE: ClassVar[str] = "predictions.json"
    MADE_BY: ClassVar[str] = "edgekd export"
    kind: Literal["predictions"] = "predictions"
    rows_sha256: str = Field(..., description="The dev texts and gold labels, in order.")
    labels: Ids  # gold label ids, in the student's label order
    reference: Ids  # the PyTorch student's argmax on the same rows
    models: dict[Literal["fp32", "int8"], Ids]

    @model_validator(mode="after")
    def _one_row_each(self) -> DevPredictions:
        lengths = {len(self.reference), *(len(p) for p in self.models.values())}
        if lengths != {len(self.labels)}:
            raise ValueError(f"{len(self.labels)} labels but predictions of lengths {lengths}")
        return self


# ------------------------------------------------------------------ profile


class ExitTiming(Nested):
    """An early-exit model at one threshold, timed on real rows at batch 1."""

    threshold: float
    mean_exit_layer: float
    p50_ms: float
    p90_ms: float
    noisy: bool = False


class ProfileResult(Artifact):
    """One model timed on one device at one input length (`edgekd profile`)."""

    FILE: ClassVar[str] = "profile.json"
    MADE_BY: ClassVar[str] = "edgekd profile"
    kind: Literal["profile"] = "profile"
    model: str
    device: str = DEFAULT_DEVICE
    threads: int
    # Measured values may be absent: a limit on one then reads as not measured and fails.
    bytes: Count | None = None
    seq_len: Count | None = None
    p50_ms: Amount = None
    p90_ms: Amount = None
    load_ms: Amount = None
    peak_rss_mb: Amount = None
    noisy: bool = False
    end_to_end: dict[str, Any] | None = None
    vs: dict[str, Any] | None = None
    early_exit: list[ExitTiming] | None = Field(
        None, description="Early-exit models: each threshold on the dev rows (--data)."
    )

    @staticmethod
    def file_name(device: str, model: Path) -> str:
        return f"profile-{device}-{model.stem}.json"


class ProfileSweep(Artifact):
    """Several input lengths of one model (`edgekd profile --seq-len 16,32,64`)."""

    FILE: ClassVar[str] = "profile.json"
    MADE_BY: ClassVar[str] = "edgekd profile"
    kind: Literal["profile-sweep"] = "profile-sweep"
    sweep: list[ProfileResult]


def read_profile(path: Path) -> ProfileResult | ProfileSweep:
    """A `profile*.json`: one profile or a sweep, told apart by `kind`."""
    data = read_json(path)
    if isinstance(data, dict) and data.get("kind") == "profile-sweep":
        return ProfileSweep.read(path)
    return ProfileResult.read(path)


# ------------------------------------------------------------------ check


class LimitResult(BaseModel):
    """One budget limit against its measured value (None: not measured, fails)."""

    # "passed" and "status" are written for readers of the JSON; derived on reading.
    model_config = ConfigDict(frozen=True, extra="ignore")
    limit: str
    metric: str
    op: Literal["<=", ">="]
    threshold: float
    measured: float | None = None  # None: not measured (the limit fails)
    unit: str

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        if self.measured is None:
            return False
        if self.op == "<=":
            return self.measured <= self.threshold
        return self.measured >= self.threshold

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status(self) -> str:
        return "missing" if self.measured is None else ("pass" if self.passed else "FAIL")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()

    def threshold_text(self) -> str:
        return f"{self.op} {show(self.threshold, self.unit)}"

    def measured_text(self) -> str:
        return "—" if self.measured is None else show(self.measured, self.unit)


def show(value: float, unit: str) -> str:
    """A limit's value for people: bytes in full with separators, others to 4 digits."""
    if unit == "B":
        return f"{value:,.0f} B"
    return f"{value:,.4g} {unit}".strip()


class RegressionResult(BaseModel):
    """One metric of this run against a baseline's (`edgekd check --baseline`).

    `worse` is how much worse this run is, in the margin's unit: a fraction of the
    baseline for latency and bytes (0.07: 7% slower), a drop of 0..1 for accuracy and
    agreement. A regression is called when `ci95` (the 95% interval of `worse`) lies
    wholly above `margin`; a metric measured exactly (bytes) has no interval and its
    point value is judged. None anywhere it is needed: not measured, the check fails.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")
    limit: str  # the budget field, e.g. max_latency_regression
    metric: str  # p50_ms, p90_ms, bytes, accuracy, agreement
    unit: str  # of baseline and now
    margin: float
    baseline: float | None = None
    now: float | None = None
    worse: float | None = None
    ci95: tuple[float, float] | None = None
    how: str = ""  # how it was measured, for people: "side by side, 3 processes"
    note: str | None = None  # why it was not measured, with the fix

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        if self.worse is None:
            return False
        low = self.ci95[0] if self.ci95 is not None else self.worse
        return low <= self.margin

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status(self) -> str:
        return "missing" if self.worse is None else ("pass" if self.passed else "FAIL")

    def relative(self) -> bool:
        """Latency and bytes are judged relative to the baseline, accuracy absolutely."""
        return self.metric not in ("accuracy", "agreement")

    def change_text(self) -> str:
        """Now against the baseline, signed: +7.0% for latency, −0.34 pt for accuracy."""
        if self.worse is None:
            return "—"
        if self.relative():
            text = f"{100 * self.worse:+.1f}%"
            if self.ci95 is not None:
                text += f" [{100 * self.ci95[0]:+.1f}, {100 * self.ci95[1]:+.1f}]"
            return text
        # Points of accuracy, now − baseline (+ 0.0 turns −0.0 into 0.0 for printing).
        text = f"{-100 * self.worse + 0.0:+.2f} pt"
        if self.ci95 is not None:
            lo, hi = (-100 * c + 0.0 for c in reversed(self.ci95))
            text += f" [{lo:+.2f}, {hi:+.2f}]"
        return text

    def margin_text(self) -> str:
        if self.relative():
            return f"≤ +{100 * self.margin:g}%"
        return f"drop ≤ {100 * self.margin:g} pt"

    def value_text(self, value: float | None) -> str:
        if value is None:
            return "—"
        return show(value, self.unit) if self.relative() else f"{value:.4f}"


class CheckResult(Artifact):
    """`edgekd check`'s verdict: the same shape from the CLI, a recipe or quickstart."""

    model_config = ConfigDict(extra="forbid")
    FILE: ClassVar[str] = "check.json"
    MADE_BY: ClassVar[str] = "edgekd check"
    kind: Literal["check"] = "check"
    budget: str | None = Field(None, description="The budget file, when one was given.")
    model: Literal["int8", "fp32"]
    device: str | None = None
    passed: bool
    limits: list[LimitResult]
    baseline: str | None = Field(None, description="The baseline compared against, if any.")
    regressions: list[RegressionResult] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @staticmethod
    def file_name(device: str | None) -> str:
        return f"check-{device}.json" if device else "check.json"

    @staticmethod
    def junit_name(device: str | None) -> str:
        """The JUnit XML of the same verdict, written beside it."""
        return f"junit-{device}.xml" if device else "junit.xml"

    def title(self) -> str:
        return f"edgekd budget: {self.model} model" + (f" on {self.device}" if self.device else "")


# ------------------------------------------------------------------ plan


class Candidate(Nested):
    """One untrained student of `edgekd plan`: its shape, what it costs on the device,
    and whether that fits the budget's latency, memory and size limits."""

    name: str  # e.g. bilstm-h150-e64: a recipe variant's name
    student: dict[str, Any]  # {name, options}, as distill.student takes it
    params: int
    model: Literal["fp32", "int8"]  # what its export ships
    bytes: Count  # the shipped model file
    bundle_bytes: Count  # model + tokenizer + student.json, what `edgekd bundle` ships
    p50_ms: Amount = None
    p90_ms: Amount = None
    peak_rss_mb: Amount = None
    load_ms: Amount = None
    fits: bool
    failed: list[str] = Field(default_factory=list)  # the limits it misses


class PlanResult(Artifact):
    FILE: ClassVar[str] = "plan.json"
    MADE_BY: ClassVar[str] = "edgekd plan"
    kind: Literal["plan"] = "plan"
    device: str
    threads: int
    seq_len: int
    limits: dict[str, float]  # the budget limits judged (latency, memory, size)
    candidates: list[Candidate]  # fitting first, largest first; then the rest
    task_shape: TaskShape | None = None  # what a default distill run sizes from the data
    # Candidates of the default grid this teacher cannot give (name → why), left out.
    skipped: dict[str, str] = Field(default_factory=dict)

    def top(self, n: int) -> list[Candidate]:
        return [c for c in self.candidates if c.fits][:n]


# ------------------------------------------------------------------ run, bundle, others


class StageMarker(Artifact):
    """A recipe stage's cache key, inside the folder the stage wrote."""

    FILE: ClassVar[str] = ".stage.json"
    MADE_BY: ClassVar[str] = "edgekd run"
    kind: Literal["stage"] = "stage"
    stage: str
    key: str


class StageRecord(Nested):
    stage: str
    folder: str
    key: str
    status: Literal["ran", "cached"]
    seconds: float


class RunManifest(Artifact):
    FILE: ClassVar[str] = "manifest.json"
    MADE_BY: ClassVar[str] = "edgekd run"
    kind: Literal["run"] = "run"
    recipe: str
    recipe_sha256: str | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)
    resolved: dict[str, Any]
    versions: dict[str, str]
    inputs: dict[str, str]
    seq_len: int
    stages: list[StageRecord]
    passed: bool
    started: str
    seconds: float


class BundleFile(Nested):
    sha256: str
    bytes: Count


class BundleManifest(Artifact):
    FILE: ClassVar[str] = "manifest.json"
    MADE_BY: ClassVar[str] = "edgekd bundle"
    kind: Literal["bundle"] = "bundle"
    format: int = 1
    model: Literal["fp32", "int8"] = Field(..., description="Which exported model ships.")
    e2e: bool = Field(False, description="It ships as model.e2e.onnx, tokenizer inside.")
    files: dict[PlainName, BundleFile] = Field(..., min_length=1)
    bytes: Count
    accuracy: Share = None
    labels: list[str]
    profile: ProfileResult | None = None
    # The shipped model's dev predictions (one model under its kind), so a bundle can
    # be a baseline whose accuracy is compared row by row.
    predictions: DevPredictions | None = None


# ------------------------------------------------------------------ model card
# A bundle's README.md: YAML front matter as the Hugging Face Hub reads it (the keys
# and the `model-index` shape of huggingface/hub-docs modelcard.md), then Markdown for
# people. Only measured values go in; one that was not measured is absent, not zero.


class CardMetric(Nested):
    """One measured value of `model-index`: a metric id, the value, and for people
    what was measured on what."""

    type: str  # accuracy, agreement, latency_p50_ms, latency_p90_ms, model_bytes, ...
    value: float | int  # strict: bytes stay an int
    name: str


class CardDataset(Nested):
    type: str = Field(..., description="A Hub dataset id; `local` or `unknown` otherwise.")
    name: str


class CardTask(Nested):
    type: Literal["text-classification"] = "text-classification"
    name: str = "Text Classification"


class CardResult(Nested):
    task: CardTask = Field(default_factory=CardTask)
    dataset: CardDataset
    metrics: list[CardMetric] = Field(..., min_length=1)


class CardModel(Nested):
    name: str
    results: list[CardResult]


class CardEdgekd(Nested):
    """The front matter's `edgekd:` block: what the Hub has no key for."""

    version: str = Field(..., description="The edgekd that wrote the bundle.")
    model: Literal["fp32", "int8"] = Field(..., description="The exported model that ships.")
    e2e: bool = False
    student: str
    student_options: dict[str, Any] = Field(..., description="The student's resolved config.")
    labels: list[str]
    params: int | None = None
    teacher_accuracy: float | None = Field(None, description="On the same dev rows.")
    dev_rows: int | None = None
    dev_rows_sha256: str | None = Field(None, description="The dev texts and gold labels.")
    data: str | None = Field(None, description="The Hub dataset distilled on.")
    # The resolved config.yaml beside the student (`distill`) and beside the export
    # (`export`), by sha256: they hold local paths, so the card points at them instead.
    config_sha256: dict[str, str] = Field(default_factory=dict)


def _card_string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Plain only for words no YAML reader takes for anything but a string; the rest
    # double-quoted, line breaks escaped as \n. So a label "x\n---" stays on one line
    # (nothing can close the front matter early), and "1e3", "no" or "0o17" stay strings
    # for YAML 1.2 readers too (the Hub's), not only for PyYAML's 1.1.
    plain = _PLAIN_WORD.fullmatch(value) is not None and value.lower() not in _YAML_WORDS
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=None if plain else '"')


_PLAIN_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*(?: [A-Za-z0-9_./-]+)*")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf"}


class _CardDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # no &id001 anchors: every value written out where it is used


_CardDumper.add_representer(str, _card_string)


class ModelCard(Nested):
    """`README.md` of a bundle: the front matter's fields, and `body` (the Markdown
    below it, not part of the front matter)."""

    model_config = ConfigDict(populate_by_name=True)
    FILE: ClassVar[str] = "README.md"
    # A card is a few KB, but it copies student.json's labels and options, which may be
    # as large as any JSON edgekd reads.
    MAX_BYTES: ClassVar[int] = 2 * MAX_JSON_BYTES

    pipeline_tag: Literal["text-classification"] = "text-classification"
    library_name: Literal["onnx"] = "onnx"
    tags: list[str] = Field(default_factory=list)
    base_model: str | None = Field(None, description="The teacher, when it is a Hub model.")
    datasets: list[str] | None = Field(None, description="Hub datasets distilled on.")
    model_index: list[CardModel] = Field(..., alias="model-index")
    edgekd: CardEdgekd
    body: str = Field("", exclude=True)

    def front_matter(self) -> str:
        data = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        # width: no line folding, so a long value is one line as well
        return yaml.dump(
            data, Dumper=_CardDumper, allow_unicode=True, sort_keys=False, width=1 << 30
        )

    def text(self) -> str:
        return f"---\n{self.front_matter()}---\n\n{self.body}"

    def write(self, folder: str | Path) -> Path:
        path = Path(folder) / self.FILE
        atomic_write_text(path, self.text())
        return path

    @classmethod
    def read(cls, where: str | Path) -> ModelCard:
        """A card file (or a folder holding one), its front matter read with a safe loader."""
        path = Path(where)
        path = path / cls.FILE if path.is_dir() else path
        fix = "rebuild the bundle with `edgekd bundle`"
        text = read_regular(path, "model card", fix, cls.MAX_BYTES).decode("utf-8", "replace")
        head, sep, body = text.partition("\n---\n")
        if not text.startswith("---\n") or not sep:
            raise EdgeKDError(f"{path} has no `---` front matter; {fix}")
        try:
            return cls.model_validate({**parse_yaml(head[4:]), "body": body.lstrip("\n")})
        except (yaml.YAMLError, TypeError, ValueError) as e:  # ValidationError included
            why = (str(e).splitlines() or [type(e).__name__])[0][:120]
            raise EdgeKDError(f"{path} front matter is not a model card ({why}); {fix}") from None


class TrimReport(Artifact):
    FILE: ClassVar[str] = "trim.json"
    MADE_BY: ClassVar[str] = "edgekd trim"
    kind: Literal["trim"] = "trim"
    vocab_before: int
    vocab_after: int
    dev_accuracy_before: float | None = None
    dev_accuracy_after: float | None = None


class ReportPoint(Nested):
    """One model of a report: what its Pareto plot places."""

    label: str  # e.g. "student int8", "teacher fp32"
    accuracy: float | None = None
    bytes: int
    p50_ms: dict[str, float | None] = Field(
        default_factory=dict, description="Device → p50 latency at batch 1 (None: unmeasured)."
    )


class ReportPoints(Artifact):
    """`points.json` beside `report.html`: the report's models as data, for scripts."""

    FILE: ClassVar[str] = "points.json"
    MADE_BY: ClassVar[str] = "edgekd report"
    kind: Literal["report-points"] = "report-points"
    points: list[ReportPoint]


class EvalResult(Artifact):
    FILE: ClassVar[str] = "eval.json"
    MADE_BY: ClassVar[str] = "edgekd eval"
    kind: Literal["eval"] = "eval"
    model: str
    accuracy: float
    n: int


class SummaryRow(Nested):
    """One model of the quickstart table (None: not measured)."""

    model: str
    accuracy: float | None = None
    bytes: int | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    e2e_p50_ms: float | None = Field(None, description="Tokenize + infer one dev text, ms.")


class QuickstartSummary(Artifact):
    FILE: ClassVar[str] = "quickstart.json"
    MADE_BY: ClassVar[str] = "edgekd quickstart"
    kind: Literal["quickstart"] = "quickstart"
    rows: list[SummaryRow]
    seconds: float
    seq_len: int
    check: CheckResult
    tfidf_accuracy: float | None = Field(None, description="The yardstick on the same rows.")
