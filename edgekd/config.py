"""Every knob as data: pydantic models, loaded from YAML with `safe_load`.

CLI options override fields (`override`); the resolved config is written beside
each artifact (`save_config`) so any result can be reproduced from it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal, TypeVar

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

from edgekd.errors import EdgeKDError

DEFAULT_BASE = "packaged:all-MiniLM-L6-v2"

# A name that becomes a file or folder name (recipe variants, device specs): no '/', no
# leading '.', so it can never point outside the folder it is joined to.
PLAIN_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"

# Choices named once: the config fields below and the CLI options both use them.
Ensemble = Literal["logits", "probs"]
TeacherRuntime = Literal["torch", "onnx-int8"]
Int8Mode = Literal["dynamic", "static"]
Preset = Literal["auto", "avx2", "avx512_vnni", "arm64"]
Calibration = Literal["minmax", "entropy", "percentile"]


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
    seed: int = Field(0, description="Seed for subsampling and for a held-out dev split.")
    encoding: str = Field("utf-8", description="Text encoding of local data files.")


class TeacherConfig(StrictModel):
    base: str = Field(DEFAULT_BASE, description="HF id or folder of the encoder to fine-tune.")
    data: DataConfig = Field(default_factory=DataConfig)
    epochs: float = Field(2.0, gt=0, description="Passes over the training rows (may be 0.5).")
    lr: float = Field(5e-5, gt=0, description="AdamW peak learning rate.")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay.")
    warmup_ratio: float = Field(0.06, ge=0, lt=1, description="Linear warm-up share of steps.")
    batch_size: int = Field(32, ge=1, description="Rows per optimiser step (rows).")
    max_length: int = Field(64, ge=8, description="Tokens per example, longer ones truncated.")
    eval_every: int = Field(
        300, ge=1, description="Steps between dev evaluations (also at every epoch's end)."
    )
    seed: int = Field(0, description="Seed for subsampling, initialisation and batch order.")


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


class AugmentConfig(StrictModel):
    methods: list[str] = Field(
        default_factory=list,
        description="Text augmenters in order (mask, pos, ngram; tang = all three), plus "
        "`minimax` (select among their variants) and `mixup` (MixKD).",
    )
    p_mask: float = Field(0.1, ge=0, le=1, description="Per-word mask probability (Tang: 0.1).")
    p_pos: float = Field(0.1, ge=0, le=1, description="Per-word POS-swap probability (0.1).")
    p_ng: float = Field(0.25, ge=0, le=1, description="Per-text n-gram probability (0.25).")
    max_ngram: int = Field(5, ge=1, description="n of the kept n-gram is uniform in 1..max.")
    n_iter: int = Field(
        20, ge=1, description="Augmented variants drawn per training text (Tang: 20)."
    )
    max_rows: int | None = Field(
        None, ge=1, description="Seeded subsample of the deduplicated augmented rows."
    )
    minimax_k: int = Field(
        2, ge=1, description="minimax: candidates kept per text each epoch (most divergent)."
    )
    mixup_alpha: float = Field(0.4, gt=0, description="mixup: λ ~ Beta(a, a) (MixKD: 0.4).")
    alpha_sm: float = Field(1.0, ge=0, description="mixup: weight of CE on mixed labels.")
    alpha_tmkd: float = Field(1.0, ge=0, description="mixup: weight of teacher MSE on mixes.")
    seed: int = 0


class DistillConfig(StrictModel):
    teacher: str = Field(..., description="HF id or folder of a fine-tuned classifier.")
    extra_teachers: list[str] = Field(
        default_factory=list, description="More teachers: distil from the ensemble of all."
    )
    ensemble: Ensemble = Field(
        "logits", description="Average teachers' logits, or their softened distributions (T)."
    )
    data: DataConfig = Field(default_factory=DataConfig)
    student: str = Field("bilstm", description="Registered student name.")
    student_options: dict[str, Any] = Field(
        default_factory=dict, description="Fields of the student's own config class."
    )
    augment: AugmentConfig = Field(default_factory=AugmentConfig)
    loss: str = Field("mse", description="Registered loss: `mse` (Tang et al.) or `kd` (Hinton).")
    loss_options: dict[str, Any] = Field(
        default_factory=dict, description="Extra loss arguments, e.g. tau_max for `annealing`."
    )
    assistant: dict[str, Any] | None = Field(
        None,
        description="TAKD: fields of a first run (e.g. student: bert, student_options: "
        "{layers: 3}) whose student then teaches this one.",
    )
    intermediate: str | None = Field(
        None, description="Intermediate-layer loss for a BERT student: pkd, tinybert or alp."
    )
    intermediate_options: dict[str, Any] = Field(
        default_factory=dict,
        description="layer_map (uniform, top, bottom, last), weight, stage_epochs.",
    )
    schedules: dict[str, Schedule] = Field(
        default_factory=dict, description="Per-epoch values for loss attributes (temperature)."
    )
    temperature: float = Field(1.0, gt=0, description="Softmax temperature T for kd.")
    ce_weight: float = Field(
        0.0, ge=0, le=1, description="Weight α of cross-entropy on gold labels, 0..1."
    )
    epochs: int = Field(10, ge=1, description="Passes over the transfer set (at most).")
    batch_size: int = Field(50, ge=1, description="Rows per optimiser step (Tang et al.: 50).")
    lr: float | None = Field(
        None, gt=0, description="Adam learning rate; unset: the student's (bilstm 1e-3, bert 5e-5)."
    )
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(5.0, gt=0, description="Max global gradient norm.")
    patience: int = Field(
        3, ge=1, description="Epochs without dev gain before stopping early (epochs)."
    )
    teacher_runtime: TeacherRuntime = Field(
        "torch", description="Label with PyTorch fp32, or a dynamic int8 ONNX export (faster)."
    )
    teacher_batch_size: int = Field(64, ge=1, description="Rows per teacher forward pass.")
    teacher_max_length: int = Field(128, ge=8, description="Teacher tokens per example.")
    cache_dir: str | None = Field(None, description="Teacher-logit cache folder.")
    seed: int = Field(0, description="Seed for subsampling, augmentation, init and batches.")

    @field_validator("assistant")
    @classmethod
    def _assistant_fields(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # Checked here so a typo fails when the file is read, not after run 1.
        keys = set(value or {})
        unknown = sorted(keys - set(cls.model_fields) | keys & {"assistant"})
        if unknown:
            raise ValueError(f"unknown assistant field(s) {unknown}; use distill fields")
        return value


class ProfileConfig(StrictModel):
    """`edgekd profile` and a recipe's profile stage: batch-1 timing on each device."""

    devices: list[str] = Field(
        default_factory=lambda: ["local-cpu"], min_length=1, description="Device names or specs."
    )
    hosts: dict[str, str] = Field(default_factory=dict, description="ssh device → [user@]host.")
    threads: int | None = Field(
        None, ge=0, description="onnxruntime intra-op threads (0: all cores); unset: the device's."
    )
    runs: int = Field(200, ge=1, description="Timed runs in all, split into trials.")
    trials: int = Field(5, ge=1, description="Trials; p50/p90 are medians of the trials' own.")
    warmup: int = Field(20, ge=0, description="Untimed runs first.")
    seq_lens: list[int] = Field(
        default_factory=lambda: [64],
        min_length=1,
        description="Tokens per synthetic input; several: a sweep.",
    )
    vs: str | None = Field(None, description="Time this second model alternately; the ratio.")
    processes: int = Field(1, ge=1, description="--vs: agent processes (interval spans them).")

    @model_validator(mode="after")
    def _runs_cover_trials(self) -> ProfileConfig:
        if self.runs < self.trials:
            raise ValueError(f"runs {self.runs} < trials {self.trials}: each trial needs a run")
        if min(self.seq_lens) < 1:
            raise ValueError(f"seq_lens {self.seq_lens}: lengths are at least 1 token")
        return self


class ExportConfig(StrictModel):
    opset: int = Field(17, ge=13, description="ONNX opset of the exported graph.")
    # The CLI spells int8 as a flag (`edgekd export --int8`, off unless given); a recipe
    # or the Python API ships int8 unless told not to, as a budget gates int8 by default.
    int8: StrictBool = Field(
        True, description="Also write model.int8.onnx (kept only if it beats fp32; see guard)."
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
    calibration: Calibration = Field(
        "minmax", description="Static int8: how activation ranges are calibrated."
    )
    calibration_samples: int = Field(
        256, ge=1, description="Static int8: training rows run for calibration (rows)."
    )
    guard: bool = Field(
        True, description="Time int8 against fp32 here; keep int8 only if it is faster."
    )
    max_int8_drop: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Accuracy repair: keep sensitive nodes fp32 until int8 loses at most this "
        "much dev accuracy (0..1, e.g. 0.003 = 0.3 points).",
    )
    atol: float = Field(1e-4, gt=0, description="Max |ONNX − PyTorch| on logits (fp32).")
    mobile: bool = Field(
        False, description="Also write the ORT-format model and a mobile usability report."
    )
    executorch: bool = Field(
        False, description="Also write an ExecuTorch .pte (BiLSTM, XNNPACK partitioner)."
    )
    fixed_shape: str | None = Field(
        None,
        pattern=r"^\d+x\d+$",
        description="BATCHxSEQUENCE: a fixed-shape variant (NNAPI/CoreML need one).",
    )

    @field_validator("int8", mode="before")
    @classmethod
    def _int8_is_a_switch(cls, value: Any) -> Any:
        # Before 0.2 `int8` held the mode; say how to write it now instead of
        # "not a valid boolean".
        if value is None or value in ("dynamic", "static", "none"):
            raise ValueError(
                f"int8 is true or false since edgekd 0.2 (got {value!r}); "
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
                raise ValueError(f"{', '.join(moot)} only apply to int8; set int8: true")
        if self.int8_mode != "static":
            moot = sorted(changed & STATIC_OPTIONS)
            if moot:
                raise ValueError(
                    f"{', '.join(moot)} only apply to static int8; set int8_mode: static"
                )
        return self


# Export options with no effect without int8, and those with none without static int8.
INT8_OPTIONS = {"int8_mode", "preset", "per_channel", "reduce_range", "max_int8_drop"}
STATIC_OPTIONS = {"calibration", "calibration_samples"}


M = TypeVar("M", bound=BaseModel)


class _Loader(yaml.SafeLoader):
    """SafeLoader (plain data only, never Python objects) that reads `1e-3` as a number.

    YAML 1.1, which PyYAML implements, wants a dot in a float (`1.0e-3`) and reads
    `1e-3` as a string; with strict config fields that would reject the way everyone
    writes a learning rate. YAML 1.2's float pattern fixes it."""


_Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:float"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def parse_yaml(text: str) -> Any:
    """YAML text as plain data (a file's, or one `key=value` override's value)."""
    return yaml.load(text, Loader=_Loader)


def load_yaml(path: str | Path) -> Any:
    """Read YAML as plain data; a SafeLoader never constructs Python objects."""
    try:
        with open(path, encoding="utf-8") as f:
            return parse_yaml(f.read())
    except FileNotFoundError:
        raise EdgeKDError(f"config file {path} does not exist; check the path", 2) from None
    except IsADirectoryError:
        raise EdgeKDError(f"{path} is a folder; pass the YAML file", 2) from None
    except UnicodeDecodeError as e:
        raise EdgeKDError(
            f"{path} is not UTF-8 text (byte offset {e.start}); save it as UTF-8", 2
        ) from None
    except yaml.YAMLError as e:
        first = str(e).splitlines()[0]
        raise EdgeKDError(f"{path} is not valid YAML ({first}); fix the syntax", 2) from None


def validate(model: type[M], data: Any, source: str) -> M:
    """Build `model` from plain data, turning pydantic errors into one line."""
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise EdgeKDError(
            f"{source}: field '{where}': {err['msg']} ({len(e.errors())} error(s)); fix that field",
            2,
        ) from None


def refuse_unknown(what: str, valid: list[str], options: dict[str, Any], flag: str) -> None:
    """One line naming the first option `what` does not take, and the ones it does."""
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise EdgeKDError(
            f"{what} has no option {unknown[0]!r}; valid: {', '.join(valid) or 'none'} ({flag})"
        )


def check_options(what: str, model: type[M], options: dict[str, Any], flag: str) -> M:
    """A component's options validated against its own config model, before any data is
    read: an unknown or bad field is one line naming it and the valid ones."""
    refuse_unknown(what, list(model.model_fields), options, flag)
    return validate(model, options, f"{what} ({flag})")


def override(cfg: M, **fields: Any) -> M:
    """Return `cfg` with every non-None field replaced, re-validated."""
    updates = {k: v for k, v in fields.items() if v is not None}
    return validate(type(cfg), {**cfg.model_dump(), **updates}, "command-line options")


def save_config(cfg: BaseModel, path: str | Path) -> None:
    from edgekd.io import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
