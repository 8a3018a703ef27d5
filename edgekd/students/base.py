"""The `Student` abstraction and the student folder format.

A student folder holds `model.safetensors`, `tokenizer.json`, `student.json`
(name, config, label map, max length) and, from `edgekd distill`, the resolved
`config.yaml` and `metrics.json`. Weights load through safetensors only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import BaseModel, ValidationError
from torch import nn

from edgekd.artifacts import StudentMeta
from edgekd.data import length_sorted_batches
from edgekd.errors import EdgeKDError
from edgekd.registry import STUDENTS, first_error
from edgekd.students import STUDENT_FILE
from edgekd.students.tokenizer import StudentTokenizer


class Student(nn.Module):
    """A classifier over token ids: `forward(input_ids, attention_mask) -> logits`.

    Subclasses set `name` and `Config` (a pydantic model of their knobs) and
    implement `prepare`, which builds the vocabulary and the initialised model.
    `forward` also takes `mix=(perm, λ)` (MixKD: mix each row's word embeddings
    with row perm[i]'s); students with hidden states take `return_hidden=True`.
    """

    name: ClassVar[str]
    Config: ClassVar[type[BaseModel]]
    default_lr: ClassVar[float] = 1e-3  # Adam; Tang et al.'s BiLSTM setting
    # What the rest of edgekd may do with this student, so no code outside students/
    # tests a student's name: "hidden_states" (forward(..., return_hidden=True): layer
    # losses, teaching an assistant run), "pairs" (sentence-pair input), "mixup" (MixKD
    # on one token sequence per row), "trim" (`trimmed`), "pte" (`fixed_length_module`).
    capabilities: ClassVar[frozenset[str]] = frozenset()
    # Its ONNX exporter ("module:Class"); the generic one traces `forward` with the
    # inputs and axes the student declares (`onnx_inputs`, `dummy_inputs`).
    exporter: ClassVar[str] = "edgekd.exporters.torch_onnx:TorchOnnxExporter"
    # The intermediate-layer loss it trains with when the config names none (MobileBERT:
    # its layer-wise transfer); None: logits only.
    default_intermediate: ClassVar[str | None] = None

    def __init__(self, config: Any, vocab_size: int, num_labels: int) -> None:
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        self.num_labels = num_labels
        self.init_notes: list[str] = []  # what `prepare` copied from the teacher

    def save_extra(self, folder: Path, id2label: list[str]) -> None:
        """Write files beyond weights, tokenizer and student.json (none by default)."""

    def onnx_inputs(self) -> dict[str, dict[int, str]]:
        """Graph inputs in `forward`'s order, each with its dynamic axes."""
        return {
            "input_ids": {0: "batch", 1: "sequence"},
            "attention_mask": {0: "batch", 1: "sequence"},
        }

    def dummy_inputs(self) -> dict[str, np.ndarray]:
        """Inputs that exercise every dynamic axis: three rows of lengths 7, 4 and 1
        padded to 7 check batching, padding and the shortest text in one run."""
        return dummy_rows(self.vocab_size, {"": (7, 4, 1)})

    def fixed_length_module(self) -> nn.Module:
        """The same logits from a graph `torch.export` can trace at one fixed length
        (capability "pte")."""
        raise NotImplementedError(f"student {self.name!r} has no fixed-length form")

    def trimmed(self, keep: list[int]) -> Student:
        """A copy whose vocabulary is the rows `keep` of this one (capability "trim")."""
        raise NotImplementedError(f"student {self.name!r} cannot be trimmed")

    @classmethod
    def for_task(cls, options: dict[str, Any], n_texts: int, wordpiece: bool) -> dict[str, Any]:
        """`options` with every `auto` made a value for a task of `n_texts` training
        texts and a WordPiece teacher or not: what a run records. None here."""
        return options

    @classmethod
    def prepare(
        cls,
        options: dict[str, Any],
        texts: list[str],
        num_labels: int,
        teacher: Any,
        teacher_tokenizer: Any,
    ) -> tuple[Student, StudentTokenizer]:
        raise NotImplementedError

    def params(self) -> dict[str, int]:
        total = sum(p.numel() for p in self.parameters())
        emb = sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Embedding))
        return {"params": total, "params_without_embeddings": total - emb}


def save_student(
    folder: Path, model: Student, tokenizer: StudentTokenizer, id2label: list[str]
) -> None:
    from safetensors.torch import save_file

    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"))
    tokenizer.save(folder)
    StudentMeta(
        student=model.name,
        config=model.config.model_dump(mode="json"),
        vocab_size=model.vocab_size,
        num_labels=model.num_labels,
        id2label=id2label,
        max_length=tokenizer.max_length,
        add_special_tokens=tokenizer.add_special_tokens,
    ).write(folder)
    model.save_extra(folder, id2label)


def is_student_dir(path: Path) -> bool:
    return (path / STUDENT_FILE).is_file()


def load_student(folder: str | Path) -> tuple[Student, StudentTokenizer, list[str]]:
    """Load a student folder written by `save_student` (safetensors only)."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    folder = Path(folder)
    if not is_student_dir(folder):
        raise EdgeKDError(
            f"{folder} is not a student folder (no {STUDENT_FILE}); "
            "pass the --out folder of `edgekd distill`"
        )
    meta = StudentMeta.read(folder)  # a crafted or damaged file: one line naming the fix
    cls = STUDENTS.get(meta.student)
    redo = "re-create the folder with `edgekd distill`"
    try:
        config = cls.Config.model_validate(meta.config)
    except ValidationError as e:
        field, message = first_error(e)
        raise EdgeKDError(f"{folder / STUDENT_FILE}: config.{field}: {message}; {redo}") from None
    weights = folder / "model.safetensors"

    def refuse(why: str) -> EdgeKDError:
        return EdgeKDError(
            f"{weights} does not hold the {meta.student} student that {STUDENT_FILE} "
            f"describes ({why}); {redo}"
        )

    try:
        # Shapes first, on the meta device (nothing allocated): a crafted vocab_size of
        # 10¹² would otherwise ask for terabytes before the weights are compared.
        with torch.device("meta"):
            wanted = {
                k: tuple(v.shape)
                for k, v in cls(config, meta.vocab_size, meta.num_labels).state_dict().items()
            }
    except Exception:  # a student that cannot be built there: the strict load below checks
        wanted = None
    try:
        with safe_open(str(weights), framework="pt") as f:
            stored = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    except (OSError, SafetensorError) as e:
        raise refuse(str(e).splitlines()[0][:120]) from None
    if wanted is not None and wanted != stored:
        differ = sorted(k for k in wanted.keys() | stored.keys() if wanted.get(k) != stored.get(k))
        raise refuse(
            f"{differ[0]}: {stored.get(differ[0])} stored, {wanted.get(differ[0])} described"
        )
    model = cls(config, meta.vocab_size, meta.num_labels)
    try:
        model.load_state_dict(load_file(str(weights)))
    except (RuntimeError, OSError, SafetensorError) as e:  # not what student.json describes
        raise refuse(str(e).splitlines()[0][:120]) from None
    model.eval()
    tok = StudentTokenizer.load(folder, meta.max_length, meta.add_special_tokens, meta.vocab_size)
    return model, tok, list(meta.id2label)


def project_rows(matrix: torch.Tensor, dim: int, seed: int = 0) -> torch.Tensor:
    """Fit `matrix` (rows × width) into `dim` columns.

    Narrower: PCA onto the top `dim` principal directions, which keeps the most
    variance of the teacher's geometry. Wider: extra columns of small noise (also
    when fewer rows than `dim` leave fewer principal directions than columns).
    """
    from edgekd.threads import one_thread

    with one_thread():  # LAPACK's SVD and `std` split work by thread: one start everywhere
        return _project_rows(matrix, dim, seed)


def _project_rows(matrix: torch.Tensor, dim: int, seed: int) -> torch.Tensor:
    width = matrix.shape[1]
    if dim == width:
        return matrix.clone()
    if dim < width:
        centered = matrix - matrix.mean(0, keepdim=True)
        _, _, v = torch.linalg.svd(centered, full_matrices=False)
        matrix = centered @ v[:dim].T
        width = matrix.shape[1]
        if width == dim:
            return matrix
    g = torch.Generator().manual_seed(seed)
    extra = torch.randn(matrix.shape[0], dim - width, generator=g) * matrix.std() * 0.1
    return torch.cat([matrix, extra], dim=1)


def teacher_rows_for(
    tokens: list[str], teacher: Any, teacher_tokenizer: Any, same_vocab: bool
) -> torch.Tensor:
    """One teacher input-embedding row per student token.

    With the teacher's own tokens (`same_vocab`, perhaps a subset), rows are copied
    token by token. With a word vocabulary, a word's row is the mean of the rows of
    its WordPiece pieces, so the student starts from the teacher's lexical knowledge,
    not from noise.
    """
    table = teacher.get_input_embeddings().weight.detach().float()
    if same_vocab:
        return table[teacher_tokenizer.convert_tokens_to_ids(tokens)].clone()
    rows = torch.zeros(len(tokens), table.shape[1])
    unk_id = teacher_tokenizer.unk_token_id
    pieces = teacher_tokenizer(tokens, add_special_tokens=False)["input_ids"]
    for i, (tok, ids) in enumerate(zip(tokens, pieces, strict=True)):
        if tok == "[PAD]":
            continue  # padding stays the zero vector
        rows[i] = table[ids].mean(0) if ids else table[unk_id]
    return rows


# Pieces of one student token fed to the teacher for its output row: a word of more
# is rare (a URL, a long number) and its first 16 pieces carry what it means.
MAX_TOKEN_PIECES = 16


def teacher_output_rows(
    tokens: list[str],
    teacher: Any,
    teacher_tokenizer: Any,
    same_vocab: bool,
    batch_size: int = 256,
) -> torch.Tensor:
    """One row per student token: what the fine-tuned teacher's encoder *outputs* for
    it, alone between [CLS] and [SEP], its last layer averaged over the token's own
    pieces (model2vec's distillation of static embeddings, Tulkens & van Dongen 2024).

    The input table (`teacher_rows_for`) holds what a piece *is* before any layer read
    it; the output row holds what the fine-tuned layers made of it, the task included
    (a sentiment teacher's "dull" and "superb" sit apart on its head's direction).
    Padding stays the zero vector. Run on one thread, in length-sorted batches, so a
    student starts from the same bits on any machine (~1 s for 13k words on MiniLM)."""
    from edgekd.threads import one_thread

    if same_vocab:
        pieces = [[i] for i in teacher_tokenizer.convert_tokens_to_ids(tokens)]
    else:
        pieces = teacher_tokenizer(tokens, add_special_tokens=False)["input_ids"]
    unk = teacher_tokenizer.unk_token_id
    pieces = [(ids or [unk])[:MAX_TOKEN_PIECES] for ids in pieces]
    cls, sep = teacher_tokenizer.cls_token_id, teacher_tokenizer.sep_token_id
    pad = teacher_tokenizer.pad_token_id or 0
    encoder = teacher.base_model
    width = teacher.config.hidden_size
    rows = torch.zeros(len(tokens), width)
    order = sorted(range(len(tokens)), key=lambda i: len(pieces[i]))
    with one_thread(), torch.inference_mode():
        for a in range(0, len(order), batch_size):
            idx = order[a : a + batch_size]
            longest = max(len(pieces[i]) for i in idx)
            ids = torch.full((len(idx), longest + 2), pad, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for r, i in enumerate(idx):
                n = len(pieces[i])
                ids[r, : n + 2] = torch.tensor([cls, *pieces[i], sep])
                mask[r, : n + 2] = 1
            hidden = encoder(input_ids=ids, attention_mask=mask).last_hidden_state.float()
            own = mask.clone()
            own[:, 0] = 0  # [CLS]
            own[torch.arange(len(idx)), mask.sum(1) - 1] = 0  # [SEP]
            weights = own.unsqueeze(-1).to(hidden.dtype)
            rows[idx] = (hidden * weights).sum(1) / weights.sum(1).clamp_min(1.0)
    for i, tok in enumerate(tokens):
        if tok == "[PAD]":
            rows[i] = 0.0
    return rows


def model_device(model: torch.nn.Module) -> torch.device:
    """The device `model`'s weights live on: a model trained under accelerate sits on the
    GPU when there is one, and the inputs of every pass that reads it must follow it."""
    return next(model.parameters()).device


def predict_logits(
    model: torch.nn.Module, tok: StudentTokenizer, ids: list[Any], batch_size: int = 256
) -> np.ndarray:
    """Student logits for pre-tokenized rows, batched by similar length."""
    model.eval()
    device = model_device(model)
    out: np.ndarray | None = None
    with torch.inference_mode():
        for idx in length_sorted_batches([tok.length(x) for x in ids], batch_size):
            enc = {
                k: torch.from_numpy(v).to(device) for k, v in tok.pad([ids[i] for i in idx]).items()
            }
            logits = model(**enc).float().cpu().numpy()
            if out is None:
                out = np.zeros((len(ids), logits.shape[1]), dtype=np.float32)
            out[idx] = logits
    assert out is not None
    return out


LAYER_MAPS = ("uniform", "top", "bottom", "last")


def map_layers(kind: str, student_layers: int, teacher_layers: int) -> list[tuple[int, int]]:
    """(student layer, teacher layer) pairs, both 1-based."""
    m_, n_ = student_layers, teacher_layers
    if kind not in LAYER_MAPS:
        raise ValueError(f"unknown layer map {kind!r}; valid: {', '.join(LAYER_MAPS)}")
    if m_ > n_:
        raise ValueError(f"the student has {m_} layers, the teacher only {n_}; use fewer layers")
    if kind == "last":
        return [(m_, n_)]
    if kind == "top":
        return [(m, m + n_ - m_) for m in range(1, m_ + 1)]
    if kind == "bottom":
        return [(m, m) for m in range(1, m_ + 1)]
    # Round half up, so 6 → 4 gives 2, 3, 5, 6 and a divisible N gives exact multiples.
    return [(m, math.floor(m * n_ / m_ + 0.5)) for m in range(1, m_ + 1)]


def mix_embeddings(
    x: torch.Tensor, mask: torch.Tensor, perm: torch.Tensor, lam: torch.Tensor
) -> torch.Tensor:
    """λ·x_i + (1−λ)·x_perm(i) per time step (batch × T × d); padding counts as zero."""
    x = x * mask.unsqueeze(-1).to(x.dtype)
    lam = lam.view(-1, 1, 1).to(x.dtype)
    return lam * x + (1 - lam) * x[perm]


def dummy_rows(vocab_size: int, sides: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Seeded ids and masks per input suffix ("" or "_b"), rows of the given lengths."""
    rng = np.random.default_rng(0)
    out = {}
    for suffix, lengths in sides.items():
        ids = rng.integers(1, vocab_size, size=(len(lengths), max(lengths)), dtype=np.int64)
        mask = np.ones_like(ids)
        for row, length in enumerate(lengths):
            mask[row, length:] = 0
            ids[row, length:] = 0
        out.update({f"input_ids{suffix}": ids, f"attention_mask{suffix}": mask})
    return out
