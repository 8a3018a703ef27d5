"""The transfer set: training texts plus augmented variants, labelled by the teacher(s).

Teacher logits are computed once per (teacher, texts, max length, augmentation,
runtime) and cached (see `cache.py`). Runtimes (`teacher_runtime`):

- `torch`: the PyTorch fp32 teacher.
- `onnx`: its fp32 ONNX export on onnxruntime (the same logits to ~1e-5, faster).
- `onnx-int8`: its dynamic int8 export for every row (fastest; agreement measured).
- `auto` (default): int8 for the rows it is sure of, fp32 ONNX for the close calls.
  A seeded sample of the transfer texts (never dev) is labelled both ways: half of
  it sets the int8 margin below which fp32 relabels a row, the other half measures
  the result. The first rule leaves a few of the sample's disagreements above the
  margin; if the measure falls under 99.5% argmax agreement, the margin widens to
  cover every one; if that falls under too, fp32 labels everything.
  Below `AUTO_MIN_ROWS` uncached rows, the export would cost more than it saves and
  PyTorch labels them.

Dev rows are always labelled in fp32 (PyTorch, or ONNX when the run uses ONNX):
they are the reference the student is judged against. Texts are labelled once each
(duplicates share a row) in length-sorted batches.

Under `accelerate launch --num_processes N` (a `LabelGroup`), the processes share the
work: each labels every N-th row of each split or augmented chunk the cache lacks, and
every process reassembles the same logits from the gathered shares. The main process
alone reads and writes the cache, calibrates, and exports the ONNX teacher before the
others load it; its clock alone decides how many augmented chunks fit.
"""

from __future__ import annotations

import functools
import hashlib
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
import torch

from edgekd.artifacts import LabelerCalibration
from edgekd.config import DistillConfig
from edgekd.distill.cache import (
    cache_key,
    default_cache_root,
    has_cached,
    hash_texts,
    load_logits,
    load_states,
    store_logits,
    store_states,
    teacher_fingerprint,
)
from edgekd.distill.states import (
    BASIS_ROWS,
    BASIS_TOKENS,
    STATE_SPLITS,
    StateBasis,
    StateSink,
    TokenStates,
    row_states,
)
from edgekd.distill.transfer import Chained, TakenColumn, TextColumn, permute, write_column
from edgekd.errors import EdgeKDError
from edgekd.io import source_digest
from edgekd.progress import console

# (texts, progress description) → logits (N × C, float32), rows in the order of texts
Labeler = Callable[[list[Any], str], np.ndarray]

AGREEMENT_FLOOR = 0.995  # int8 labels only where they agree with fp32 on ≥ 99.5% of rows
CALIBRATION_ROWS = 2_000  # 1,000 rows pick the margin, 1,000 others measure it
# Exporting and quantizing the teacher takes ~25 s on 2 cores; labelling 20,000 rows in
# `auto` instead of PyTorch saves ~27 s on short phrases (~1,300 rows/s against ~470)
# and ~45 s on variants of whole sentences (~850 against ~290): below that, PyTorch.
AUTO_MIN_ROWS = 20_000
# Bump when the augmented-row files change layout (transfer.py): old ones are ignored.
# Other augmenters' code needs no bump: the file's name holds its digest (augment_code).
TRANSFER_VERSION = 1
MARGIN_SLACK = 1.5  # × the int8 margin of the disagreement it covers: room for the tail
# The margin rules `calibrate` tries, loosest first: how many of the picking half's
# disagreements may stay above the margin. On 4,000 variants of SST-2's whole sentences
# (the rows a run labels) over 50 splits (benchmarks/labelling_margin.py, d1a5550), on
# the 2,000 rows neither half saw: sparing 3 of ~12 relabelled 4.4% of rows at 99.85%
# median agreement (worst split 98.8%, where the measuring half passed the floor; one
# split fell back to fp32), sparing none 17.8% at 100% (worst 99.7%). Each relabel
# costs ~2.3 int8 rows (fp32 418 rows/s, int8 980), so 4.4% in place of 17.8% labels
# 1.28× faster. Chosen earlier on short phrases (e191ac8): 5.8% against 11.9%, and
# sparing 4 fell to 99.25% on a split.
SPARE_RULES = (3, 0)


class OnnxTeacher(Protocol):
    """The teacher as ONNX (built by `edgekd.exporters.teacher`, injected from there).
    `sink`: where each call records the rows' token states (None: nowhere). `code`:
    the digest of the code and libraries that export and quantize it, which names the
    int8 labels in the cache."""

    sink: Any
    code: str

    def fp32(self, texts: list[Any], what: str) -> np.ndarray: ...

    def int8(self, texts: list[Any], what: str) -> np.ndarray: ...

    def ready(self, kinds: Sequence[str]) -> None:
        """Export (if not on disk yet) and load each of `kinds` ("fp32", "int8") now."""
        ...


# (config, teacher name, teacher fingerprint) → its ONNX labelers, exported on first use
OnnxRuntime = Callable[[DistillConfig, str, str], OnnxTeacher]


@functools.lru_cache(maxsize=1)
def augment_code() -> str:
    """The digest of the code that makes the variants (`edgekd/distill/augment.py` and
    the text helpers of `edgekd/data.py` it calls): variants an older or edited edgekd
    made are made again, not read back as if this code made them."""
    from edgekd import data
    from edgekd.distill import augment

    return source_digest([Path(augment.__file__), Path(data.__file__)])


def augmented_texts(
    cfg: DistillConfig,
    train_texts: list[Any],
    tokenizer: Any,
    teacher: Any = None,
    picked: list[int] | None = None,
) -> tuple[TextColumn, np.ndarray]:
    """Every candidate extra row (deduplicated variants of the training texts) in a
    seeded order and, per row, the index of the training text it came from (int32).
    The run keeps a prefix: `augment.max_rows`, or what its time budget affords.

    The rows are an Arrow file in the cache, memory-mapped (`transfer.py`): they are
    generated once per (training texts, augmentation) and streamed to disk as they are
    made, so a large augmentation costs disk, not memory. `teacher` (the model) is read
    only by an augmenter that reads its vocabulary (`TeacherVocab`: `neighbour`).
    `picked`: the texts varied, `varied_rows` of them, where the caller has them (2 s
    on SST-2's 67k rows)."""
    from edgekd.data import varied_rows
    from edgekd.distill.augment import (
        TeacherVocab,
        build_augmenter,
        methods_of_stage,
        teacher_vocab_readers,
        text_key,
        variants,
    )
    from edgekd.students.tokenizer import is_wordpiece

    # A phrase dataset already holds the parts of its sentences (n-gram variants, in
    # effect): varying the parts again adds little, varying the sentences adds new rows.
    if picked is None:
        picked = varied_rows(train_texts, cfg.augment.sources)
    # Keyed by the augmentation resolved: `n_iter: auto` means more under a budget, and
    # `methods: auto` more methods on a small task (as `distill` records).
    wordpiece = teacher is not None and is_wordpiece(tokenizer)
    resolved = cfg.augment.resolved(len(train_texts), cfg.time_budget, wordpiece, len(picked))
    per_text = int(resolved.n_iter)
    if not methods_of_stage(resolved.listed, "text"):
        return TextColumn.empty(), np.zeros(0, np.int32)
    mask = getattr(tokenizer, "mask_token", None) or "[MASK]"
    key = f"{TRANSFER_VERSION}\x00{augment_code()}\x00{text_key(resolved)}\x00{mask}"
    h = hashlib.sha256(key.encode())
    vocab = None
    if teacher_vocab_readers(resolved):  # the variants are the teacher's too
        vocab = TeacherVocab.of(teacher, tokenizer)
        h.update(vocab.fingerprint().encode())
    hash_texts(h, train_texts)
    path = cache_root(cfg) / "transfer" / f"{h.hexdigest()[:32]}.arrow"
    rows = TextColumn.read(path)  # None: not there yet, or damaged (it is only a cache)
    if rows is None:
        augmenter = build_augmenter(resolved, train_texts, mask, vocab)
        made = path.with_name(f".{path.stem}.made-{os.getpid()}.arrow")
        pairs = bool(train_texts) and not isinstance(train_texts[0], str)
        try:
            with console.status(f"augmenting {len(picked):,} texts × {per_text}"):
                n = write_column(
                    made,
                    (
                        (variant, picked[i])  # back to indices of train_texts
                        for variant, i in variants(
                            [train_texts[i] for i in picked],
                            augmenter,
                            per_text,
                            cfg.augment.seed,
                            known=train_texts,
                        )
                    ),
                    pairs,
                )
                # A seeded order, so that any cap (`max_rows`, or what a time budget
                # affords) keeps a prefix: a larger cap holds every row of a smaller
                # one, and their labels.
                order = np.array(random.Random(cfg.augment.seed).sample(range(n), n), np.int64)
                permute(TextColumn(made), order, path)
        finally:
            made.unlink(missing_ok=True)
        rows = TextColumn(path)
    console.print(
        f"augmentation {'+'.join(m.name for m in resolved.listed)}: {len(rows):,} new rows"
    )
    return rows, rows.sources


def cache_root(cfg: DistillConfig) -> Path:
    """edgekd's cache (`cache_dir`, else $EDGEKD_CACHE, else ~/.cache/edgekd): teacher
    logits in logits/, ONNX teachers in teachers/, augmented rows in transfer/. Nothing
    cached is written outside it."""
    return Path(cfg.cache_dir) if cfg.cache_dir else default_cache_root()


def cache_dir(cfg: DistillConfig) -> Path:
    """The teacher-logit cache."""
    return cache_root(cfg) / "logits"


def deduplicated(labeler: Labeler) -> Labeler:
    """Label each distinct text once (augmentation and phrase datasets repeat rows)."""

    def label(texts: list[Any], what: str) -> np.ndarray:
        first: dict[Any, int] = {}
        distinct: list[Any] = []
        inverse = []
        for t in texts:
            k = t if isinstance(t, str) else tuple(t)
            if k not in first:
                first[k] = len(distinct)
                distinct.append(t)
            inverse.append(first[k])
        if len(distinct) == len(texts):
            return labeler(texts, what)
        return labeler(distinct, what)[np.array(inverse)]

    return label


def torch_labeler(
    cfg: DistillConfig, model: Any, tokenizer: Any, sink: StateSink | None = None
) -> Labeler:
    from edgekd.distill.teacher import teacher_logits

    return lambda texts, what: teacher_logits(
        model, tokenizer, texts, cfg.teacher_batch_size, cfg.teacher_max_length, what, sink
    )


def margins(logits: np.ndarray) -> np.ndarray:
    """Top-1 minus top-2 logit per row (logit units): how sure the labeler is."""
    top2 = np.sort(logits, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def pick_margin(fp32: np.ndarray, int8: np.ndarray, spare: int = 0) -> float:
    """The int8 margin under which a row is relabelled in fp32: every disagreement seen
    but the `spare` surest lies below it (with `MARGIN_SLACK`); 0 when int8 disagreed
    on `spare` rows or fewer."""
    wrong = np.sort(margins(int8)[fp32.argmax(1) != int8.argmax(1)])[::-1]
    return float(MARGIN_SLACK * wrong[spare]) if spare < len(wrong) else 0.0


def calibration_sample(texts: Sequence[Any], seed: int) -> list[Any]:
    return random.Random(seed).sample(texts, min(CALIBRATION_ROWS, len(texts)))


def calibrate(
    onnx: OnnxTeacher, sample: list[Any], rules: Sequence[int] = SPARE_RULES
) -> LabelerCalibration:
    """Pick the relabel margin on one half of `sample`, measure it on the other: each of
    `rules` (disagreements spared) in turn, the first that reaches `AGREEMENT_FLOOR`
    labels ("hybrid"); none does: fp32 labels everything ("onnx", with the last rule's
    figures)."""
    f = onnx.fp32(sample, "calibrating labelers (fp32)")
    q = onnx.int8(sample, "calibrating labelers (int8)")
    half = len(sample) // 2
    fb, qb = f[half:], q[half:]
    n = len(fb)
    for spare in rules:
        margin = pick_margin(f[:half], q[:half], spare)
        low = margins(qb) < margin
        hybrid = np.where(low[:, None], fb, qb)
        agree = float((hybrid.argmax(1) == fb.argmax(1)).mean()) if n else 0.0
        if agree >= AGREEMENT_FLOOR:
            break
    return LabelerCalibration(
        choice="hybrid" if agree >= AGREEMENT_FLOOR else "onnx",
        margin=margin,
        spare=spare,
        n=n,
        int8_agreement=float((qb.argmax(1) == fb.argmax(1)).mean()) if n else 0.0,
        hybrid_agreement=agree,
        relabelled=float(low.mean()) if n else 0.0,
        floor=AGREEMENT_FLOOR,
    )


def hybrid_labeler(onnx: OnnxTeacher, margin: float) -> Labeler:
    """int8 logits, with the rows whose int8 margin is under `margin` redone in fp32."""

    def label(texts: list[Any], what: str) -> np.ndarray:
        out = onnx.int8(texts, what)
        low = np.flatnonzero(margins(out) < margin)
        if len(low):
            out[low] = onnx.fp32([texts[i] for i in low], f"{what}: fp32 for close calls")
        return out

    return label


def basis_sample(texts: Sequence[Any], seed: int) -> list[Any]:
    """The rows the token states' basis is fitted on: a seeded sample of the training
    texts (the basis, and so every cached state, is a function of them)."""
    return random.Random(seed).sample(list(texts), min(BASIS_ROWS, len(texts)))


def states_tag(cfg: DistillConfig, fingerprint: str, splits: dict[str, Sequence[Any]]) -> str:
    """What the training splits' cache keys add for their token states: k and the
    basis's inputs (teacher, sample); "" without token states."""
    if not cfg.token_states:
        return ""
    sample = basis_sample(splits["train"], cfg.seed)
    key = cache_key(fingerprint, sample, cfg.teacher_max_length, f"basis{cfg.token_states}")
    return f"+states{cfg.token_states}:{key[:16]}"


def state_sink(
    cfg: DistillConfig, fingerprint: str, model: Any, tokenizer: Any, train: Sequence[Any]
) -> StateSink:
    """The recorder of the token states, with its basis: fitted once per (teacher,
    sample, k) by the PyTorch fp32 teacher on `basis_sample`, and cached."""
    from edgekd.distill.teacher import teacher_logits

    k = cfg.token_states
    special = set(tokenizer.all_special_ids)
    sample = basis_sample(train, cfg.seed)
    key = cache_key(fingerprint, sample, cfg.teacher_max_length, f"basis{k}")
    path = cache_dir(cfg) / f"{key}.basis.safetensors"
    width = int(model.config.hidden_size)
    basis = StateBasis.load(path, k, width)
    if basis is None:
        collected: list[np.ndarray] = []

        class Collect:  # the sample's raw states, before any basis exists
            def record(self, texts: Sequence[Any], hidden: np.ndarray, ids: np.ndarray) -> None:
                collected.extend(row_states(hidden, ids, special))

        teacher_logits(
            model, tokenizer, sample, cfg.teacher_batch_size, cfg.teacher_max_length,
            "token states' basis", Collect(),
        )  # fmt: skip
        tokens = np.concatenate(collected) if collected else np.zeros((0, width), np.float32)
        picked = np.random.default_rng(cfg.seed).permutation(len(tokens))[:BASIS_TOKENS]
        basis = StateBasis.fit(tokens[picked], k)
        basis.save(path)
    return StateSink(basis, special)


class Meter:
    """Rows the teacher labelled in this run (cache hits excluded) and the seconds
    they took: the labelling rate a time budget plans with. In a `LabelGroup`, `rows`
    counts every process's rows and `seconds` the wall time until all were gathered
    (the group's rate), `mine` this process's share of them."""

    def __init__(self) -> None:
        self.rows, self.seconds, self.mine = 0, 0.0, 0

    def add(self, rows: int, seconds: float, mine: int | None = None) -> None:
        self.rows, self.seconds = self.rows + rows, self.seconds + seconds
        self.mine += rows if mine is None else mine

    def rate(self) -> float | None:
        """Rows per second, or None before any row was labelled."""
        return self.rows / self.seconds if self.rows and self.seconds > 0 else None


T = TypeVar("T")


def _itself(value: Any) -> Any:
    return value


def _listed(value: Any) -> list[Any]:
    return [value]


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class LabelGroup:
    """The processes that label one transfer set together (`accelerate launch`), as the
    collective operations labelling needs. `ALONE` is one process: its collectives
    return its own values, so one path serves one process and many. Injected (`process_group`
    builds it from accelerate), so a test runs a group as threads of one process."""

    rank: int = 0
    size: int = 1
    # The main process's value, on every process (the others pass None).
    broadcast: Callable[[Any], Any] = _itself
    # Every process's value, in rank order, on every process.
    gather: Callable[[Any], list[Any]] = _listed
    barrier: Callable[[], None] = _nothing
    local_main: bool = True  # the first process on its machine
    # Processes on other machines, whose cache dir may be their own (not the main's).
    apart: bool = False
    threads: int | None = None  # torch threads while labelling (None: leave them)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def decided(self, choose: Callable[[], T]) -> T:
        """`choose()`, run on the main process only; its result on every process. For
        what the cache holds and what the clock affords: another process's cache and
        clock are not the main's, and processes that chose apart would label, and
        train on, different rows."""
        return self.broadcast(choose() if self.main else None)


ALONE = LabelGroup()


def process_group(state: Any) -> LabelGroup:
    """The processes `accelerate launch` started, from accelerate's `PartialState`;
    `ALONE` when there is one."""
    if state.num_processes == 1:
        return ALONE
    import torch.distributed as dist
    from accelerate.utils import broadcast_object_list

    from edgekd.threads import core_share, processes_here

    def gather(value: Any) -> list[Any]:
        out: list[Any] = [None] * state.num_processes
        dist.all_gather_object(out, value)  # pickled in memory, between our own processes
        return out

    def broadcast(value: Any) -> Any:
        return broadcast_object_list([value], from_process=0)[0]

    return LabelGroup(
        rank=state.process_index,
        size=state.num_processes,
        broadcast=broadcast,
        gather=gather,
        barrier=state.wait_for_everyone,
        local_main=state.is_local_main_process,
        apart=processes_here() < state.num_processes,
        threads=core_share(),
    )


def share(n: int, rank: int, size: int) -> slice:
    """The rows of `n` that process `rank` of `size` labels: every `size`-th, from
    `rank`. Round robin, not blocks: each share then draws from the whole split, so
    shares take alike times even where a file keeps its short rows together (a block
    of them would finish first and wait). A share may be empty (`n` < `size`)."""
    return slice(rank, n, size)


def reassemble(parts: Sequence[np.ndarray], width: int) -> np.ndarray:
    """Logits in row order from each process's share (`share`), parts in rank order."""
    n = sum(len(p) for p in parts)
    out = np.empty((n, width), np.float32)
    for rank, part in enumerate(parts):
        rows = out[share(n, rank, len(parts))]
        if rows.shape != part.shape:
            raise ValueError(f"process {rank} sent {part.shape} logits for {rows.shape} rows")
        rows[...] = part
    return out


def group_logits(
    group: LabelGroup,
    cache: Path,
    key: str,
    texts: Callable[[], list[Any]],
    n: int,
    labeler: Labeler,
    what: str,
    width: int,
    meter: Meter,
    sink: StateSink | None = None,
) -> tuple[np.ndarray, TokenStates | None, bool]:
    """(logits, token states, hit) of the `n` rows of `texts()` under `key` (the main's;
    the others pass ""): from the cache when it holds them, else labelled. The main
    reads its cache and sends a usable entry to every process, so the others never
    read a cache dir, which on another machine may not hold it. Else each labels its
    `share`, every process reassembles the same logits from the gathered shares
    (logits only, never texts), and the main alone stores them: on one machine the
    cache dir is shared, and one writer cannot collide. `ALONE` takes the same path
    (its share is every row, its gather its own part).

    With a `sink` (one process: `teacher_labels` refuses token states in a group) the
    rows' token states are stored beside the logits under the same key; logits without
    their states (or states without logits) are a miss, relabelled together. An entry
    that does not read back as `n` × `width` finite float32 logits is a miss too, said
    in one note and overwritten: it is only a cache, and a rerun must never fail on it."""
    if sink is not None and group.size > 1:  # the others' keys are "": no cache of theirs
        raise ValueError("token states are labelled by one process, not a group")
    states = load_states(cache, key, n, sink.basis.k) if sink is not None else None
    if sink is None or states is not None:
        cached = group.decided(lambda: load_logits(cache, key, rows=n, width=width))
        if cached is not None:
            return cached, states, True
    started = time.perf_counter()
    mine = texts()[share(n, group.rank, group.size)]
    by = f", process {group.rank + 1}" if group.size > 1 else ""
    part = (
        np.ascontiguousarray(labeler(mine, what + by), np.float32)
        if mine
        else np.zeros((0, width), np.float32)
    )
    logits = reassemble(group.gather(part), width)
    if group.main:
        store_logits(cache, key, logits)
    if sink is not None:
        states = sink.states_of(mine)
        store_states(cache, key, states)
        sink.forget(mine)
    # Stored, then timed: the budget's rate is what a chunk costs, its writes included.
    meter.add(n, time.perf_counter() - started, mine=len(mine))
    return logits, states, False


def label_splits(
    cfg: DistillConfig,
    fingerprint: str,
    splits: dict[str, Sequence[Any]],
    labelers: dict[str, tuple[Labeler, str]],
    width: int,
    plan: AugmentedPlan | None = None,
    meter: Meter | None = None,
    group: LabelGroup = ALONE,
    sink: StateSink | None = None,
    states: dict[str, TokenStates] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, bool]]:
    """Logits per named split, each from the cache when its key matches. `labelers`:
    split → (labeler, runtime name in the cache key). The augmented split goes in
    chunks (`label_chunks`, under `plan`); `width` is the number of labels. In a
    `group`, every uncached split or chunk is shared between its processes.
    With a `sink`, the token states of the `STATE_SPLITS` go into `states` too."""
    out, hits = {}, {}
    meter = meter or Meter()
    states = {} if states is None else states
    for split, texts in splits.items():
        labeler, runtime = labelers[split]
        wanted = sink if split in STATE_SPLITS else None
        if split == "augmented":
            out[split], hits[split] = label_chunks(
                cfg, fingerprint, texts, labeler, runtime, width, plan or AugmentedPlan(), meter,
                group, wanted, states,
            )  # fmt: skip
            continue
        key = split_key(cfg, fingerprint, split, texts, runtime) if group.main else ""

        def rows(texts: Sequence[Any] = texts) -> list[Any]:
            return list(texts)

        out[split], split_states, hits[split] = group_logits(
            group, cache_dir(cfg), key, rows, len(texts), labeler, f"teacher logits ({split})",
            width, meter, wanted,
        )  # fmt: skip
        if plan is not None and plan.feed is not None:
            plan.feed.put(split, out[split])
        if split_states is not None:
            states[split] = split_states
        elif sink is not None:  # dev and selection rows: their states teach nothing
            sink.forget(list(texts))
    return out, hits


AUGMENT_CHUNK = 8_192  # augmented rows per cache file: a killed run redoes at most one


class AugmentedPlan:
    """How many augmented rows to label: at most `limit`, and, with `room`, only while
    `room(rows, seconds)` agrees to grow the set to `rows` at an estimated cost of
    `seconds` of labelling (0 for a cached chunk). With a `feed`
    (`edgekd.distill.early.LabelFeed`), each split's logits and each chunk's are put
    there as they are made, for the student training meanwhile; a chunk's cost is then
    read from the last chunk labelled (the rate while the student trains), and no
    chunk starts once `feed.stop` is set."""

    def __init__(
        self,
        limit: int | None = None,
        room: Callable[[int, float], bool] | None = None,
        feed: Any = None,
    ) -> None:
        self.limit, self.room, self.feed = limit, room, feed


def augmented_chunks(texts: Sequence[Any], limit: int | None) -> list[tuple[int, int]]:
    """[start, stop) of each chunk of `texts[:limit]`, at fixed offsets so that a cap
    shares every whole chunk with a larger one (and its cached labels)."""
    n = len(texts) if limit is None else min(limit, len(texts))
    return [(a, min(a + AUGMENT_CHUNK, n)) for a in range(0, n, AUGMENT_CHUNK)]


def label_chunks(
    cfg: DistillConfig,
    fingerprint: str,
    texts: Sequence[Any],
    labeler: Labeler,
    runtime: str,
    width: int,
    plan: AugmentedPlan,
    meter: Meter,
    group: LabelGroup = ALONE,
    sink: StateSink | None = None,
    states: dict[str, TokenStates] | None = None,
) -> tuple[np.ndarray, bool]:
    """Logits of a prefix of `texts`: chunk by chunk, each cached on its own (an
    interrupted run keeps its finished chunks), stopping where `plan` says. In a
    `group`, the main process's `plan` decides each chunk for every process (its
    meter holds the group's rate), and the processes share each chunk's rows.
    With a `sink`, the prefix's token states go into `states["augmented"]`."""
    parts, all_hit = [np.zeros((0, width), np.float32)], True
    state_parts: list[TokenStates] = []
    feed = plan.feed
    last = Meter()  # the last chunk labelled: its rate, with a feed
    for a, b in augmented_chunks(texts, plan.limit):
        if feed is not None and feed.stop.is_set():
            break
        key = split_key(cfg, fingerprint, "augmented", texts[a:b], runtime) if group.main else ""

        def fits(a: int = a, b: int = b, key: str = key, last: Meter = last) -> bool:
            rate = meter.rate() if feed is None else (last.rate() or meter.rate())
            cached = has_cached(cache_dir(cfg), key)
            cost = 0.0 if cached or rate is None else (b - a) / rate
            return plan.room is None or plan.room(b, cost)

        if not group.decided(fits):
            break

        def rows(a: int = a, b: int = b) -> list[Any]:
            return list(texts[a:b])

        what = f"teacher logits (augmented {b:,} of {len(texts):,})"
        chunk = Meter()
        logits, chunk_states, hit = group_logits(
            group, cache_dir(cfg), key, rows, b - a, labeler, what, width, chunk, sink
        )
        meter.add(chunk.rows, chunk.seconds, chunk.mine)
        if chunk.rows:
            last = chunk
        if chunk_states is not None:
            state_parts.append(chunk_states)
        parts.append(logits)
        if feed is not None:
            feed.put_chunk(logits)
        all_hit = all_hit and hit
    if sink is not None and states is not None:
        states["augmented"] = TokenStates.concat(state_parts, sink.basis.k)
    return np.concatenate(parts), all_hit


def split_key(
    cfg: DistillConfig, fingerprint: str, split: str, texts: Sequence[Any], runtime: str
) -> str:
    from edgekd.distill.augment import text_key

    augmentation = text_key(cfg.augment) if split == "augmented" else "none"
    return cache_key(fingerprint, texts, cfg.teacher_max_length, augmentation, runtime)


def calibration_path(cfg: DistillConfig, key: str) -> Path:
    return cache_dir(cfg) / f"{key}.calibration.json"


def cached_calibration(
    cfg: DistillConfig, key: str, onnx: OnnxTeacher, sample: list[Any]
) -> LabelerCalibration:
    """`calibrate`, once per (teacher, sample): stored beside the logits it decides."""
    path = calibration_path(cfg, key)
    if path.is_file():
        try:
            return LabelerCalibration.read(path)
        except EdgeKDError:  # damaged: it is only a cache
            pass
    result = calibrate(onnx, sample)
    path.parent.mkdir(parents=True, exist_ok=True)
    result.write(path)  # atomic (a temporary file renamed over it)
    return result


def teacher_labels(
    cfg: DistillConfig,
    splits: dict[str, Sequence[Any]],
    teacher: Any,
    tokenizer: Any,
    label_names: list[str],
    onnx_runtime: OnnxRuntime | None = None,
    plan: AugmentedPlan | None = None,
    group: LabelGroup = ALONE,
    states: dict[str, TokenStates] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, bool], dict[str, Any]]:
    """Logits for every split from the configured teacher(s) and runtime.

    `splits["augmented"]`, when given, holds every candidate row: the calibration
    sample is drawn from all of them (so a cap never changes it), but only the prefix
    `plan` allows is labelled, and its logits cover that prefix.
    Returns (logits, cache hits, runtime report: what labelled the transfer set, why,
    the calibration when int8 took part, and rows/s over the rows labelled).

    In a `group` (`accelerate launch`), call it on every process: each labels a share
    of the uncached rows and every process returns the same logits, hits and report
    (which adds `rows_by_process`: the rows each labelled, in rank order).

    With `cfg.token_states` (one process), `states` gets the token states of the
    training splits' rows (`STATE_SPLITS`), recorded from the same forward passes.
    """
    from edgekd.distill.teacher import load_teacher, teacher_label_names

    per_teacher: list[dict[str, np.ndarray]] = []
    hits: dict[str, bool] = {}
    report: dict[str, Any] = {"runtime": cfg.teacher_runtime}
    plan = plan or AugmentedPlan()
    width = len(label_names)
    sink = None
    if cfg.token_states:
        if group.size > 1:
            raise EdgeKDError(
                "token_states are labelled by one process: run distill once without "
                "accelerate launch (its cache then serves every process), or drop token_states"
            )
        sink = state_sink(
            cfg, teacher_fingerprint(cfg.teacher, teacher), teacher, tokenizer, splits["train"]
        )
    for i, name in enumerate([cfg.teacher, *cfg.extra_teachers]):
        model, tok = (teacher, tokenizer) if i == 0 else load_teacher(name)
        if teacher_label_names(model.config) != label_names:
            raise EdgeKDError(
                f"teacher {name} has labels {teacher_label_names(model.config)}, "
                f"the first teacher {label_names}; ensemble teachers must agree"
            )
        fp = teacher_fingerprint(name, model)
        meter = Meter()
        if group.size == 1:
            labelers, info = choose_labelers(
                cfg, name, fp, splits, model, tok, onnx_runtime, plan.limit, sink
            )
            logits, teacher_hits = label_splits(
                cfg, fp, splits, labelers, width, plan, meter, sink=sink, states=states
            )
        else:
            from edgekd.threads import torch_threads

            with torch_threads(group.threads):
                labelers, info = shared_labelers(
                    group, cfg, name, fp, splits, model, tok, onnx_runtime, plan.limit
                )
                logits, teacher_hits = label_splits(
                    cfg, fp, splits, labelers, width, plan, meter, group
                )
        if i == 0:
            hits = teacher_hits  # the first teacher's cache use is the one reported
            report.update(info)
            if meter.rows:
                report["rows_per_s"] = round(meter.rows / max(meter.seconds, 1e-9), 1)
            if group.size > 1:
                report["rows_by_process"] = group.gather(meter.mine)
            if "augmented" in logits:
                # The first teacher chose how many augmented rows fit; the others match.
                plan = AugmentedPlan(limit=len(logits["augmented"]))
        per_teacher.append(logits)
        del model
    if len(per_teacher) == 1:
        return per_teacher[0], hits, report
    from edgekd.distill.losses import ensemble_logits

    combined = {
        split: ensemble_logits(
            [torch.from_numpy(t[split]) for t in per_teacher], cfg.ensemble, cfg.temperature
        ).numpy()
        for split in splits
    }
    return combined, hits, report


@dataclass(frozen=True)
class LabelerChoice:
    """What labels each split, and the report of why. Chosen on one process and sent to
    the others in a group: processes that chose apart would label one split two ways,
    and the main would cache mixed logits under one key."""

    transfer: str  # the transfer splits' labeler: "torch", "fp32", "int8" or "hybrid"
    tag: str  # their runtime name in the cache key
    margin: float = 0.0  # hybrid: the int8 margin under which fp32 relabels a row
    info: dict[str, Any] = field(default_factory=dict)  # the report: used, why, calibration
    states: str = ""  # `states_tag`: the token states the training splits carry, if any
    code: str = ""  # the ONNX teacher's `code`: every process's int8 must be the main's

    def tags(self, splits: Sequence[str]) -> dict[str, str]:
        """Each split's runtime name in the cache key: dev is labelled in fp32; the
        training splits name their token states."""
        if self.transfer == "torch":
            names = {s: "torch" for s in splits}
        else:
            names = {s: "onnx" if s == "dev" else self.tag for s in splits}
        return {s: t + (self.states if s in STATE_SPLITS else "") for s, t in names.items()}

    def kinds(self) -> list[str]:
        """The ONNX models it labels with (none for torch)."""
        if self.transfer == "torch":
            return []
        return ["fp32", "int8"] if self.transfer in ("int8", "hybrid") else ["fp32"]


def uncached_rows(
    cfg: DistillConfig,
    fingerprint: str,
    splits: dict[str, Sequence[Any]],
    tags: dict[str, str],
    limit: int | None,
) -> int:
    """Rows of the splits in `tags` (augmented: up to `limit`) whose logits are not cached."""
    parts = (  # one chunk's texts at a time
        (split, v[a:b] if split == "augmented" else v)
        for split, v in splits.items()
        if split in tags
        for a, b in (augmented_chunks(v, limit) if split == "augmented" else [(0, len(v))])
    )
    return sum(
        len(v)
        for split, v in parts
        if not has_cached(cache_dir(cfg), split_key(cfg, fingerprint, split, v, tags[split]))
    )


def choose_labelers(
    cfg: DistillConfig,
    name: str,
    fingerprint: str,
    splits: dict[str, Sequence[Any]],
    model: Any,
    tokenizer: Any,
    onnx_runtime: OnnxRuntime | None,
    limit: int | None = None,
    sink: StateSink | None = None,
) -> tuple[dict[str, tuple[Labeler, str]], dict[str, Any]]:
    """Per split, the labeler and its cache name; and what was chosen, with why.
    Nothing is exported or calibrated while the cache holds every split. With a
    `sink`, the labelers record the rows' token states there."""
    choice, onnx = decide_labelers(cfg, name, fingerprint, splits, onnx_runtime, limit)
    return build_labelers(choice, cfg, model, tokenizer, onnx, splits, sink), choice.info


def decide_labelers(
    cfg: DistillConfig,
    name: str,
    fingerprint: str,
    splits: dict[str, Sequence[Any]],
    onnx_runtime: OnnxRuntime | None,
    limit: int | None = None,
) -> tuple[LabelerChoice, OnnxTeacher | None]:
    """The choice `choose_labelers` makes (calibrating "auto" and "onnx-int8" through
    the cache), and the ONNX teacher where it labels."""
    runtime = cfg.teacher_runtime
    states = states_tag(cfg, fingerprint, splits)
    if runtime == "torch":
        return LabelerChoice("torch", "torch", info={"used": "torch"}, states=states), None
    transfer = {k: v for k, v in splits.items() if k != "dev"}
    # Drawn from the rows as one sequence, without copying them out of their files; from
    # the candidates in their seeded order, whatever order `augment.order` labels them in
    # (the same rows: the same sample, margin and keys for the training rows).
    seeded = [v.column if isinstance(v, TakenColumn) else v for v in transfer.values()]
    sample = calibration_sample(Chained(seeded), cfg.seed)
    # Made now, exported at first use only (a cached run exports nothing): its `code`
    # names the int8 labels, which another quantizer, CPU or onnxruntime labels apart.
    # fp32's ("onnx") keep their name: an fp32 export is PyTorch's logits to ~1e-5 (the
    # reference teacher: 5.5e-6 at most over 4,000 SST-2 variants), whoever exported it.
    onnx = onnx_runtime(cfg, name, fingerprint) if onnx_runtime is not None else None
    # The batch size too: dynamic int8 scales each call by its own rows' range, so the
    # same row's int8 logits move with the rows batched beside it (~1 logit apart, 1% of
    # argmaxes, between calls of 64 and 256 rows: benchmarks/NOTES.md).
    code = f"{onnx.code[:16]}b{cfg.teacher_batch_size}" if onnx is not None else ""
    # The rules name the key: the logits a margin labelled are cached under it, so
    # another rule calibrates (and labels) afresh instead of meeting the old margin's.
    rules = "calibration" + "".join(f":{k}" for k in SPARE_RULES) + f":{code}"
    cal_key = cache_key(fingerprint, sample, cfg.teacher_max_length, rules)
    # auto's labels depend on the margin its calibration picks: the key names the sample.
    tag = {"auto": f"auto:{cal_key[:16]}", "onnx-int8": f"onnx-int8:{code}"}.get(runtime, runtime)
    if runtime == "auto":
        tags = LabelerChoice("hybrid", tag, states=states).tags(list(transfer))
        pending = uncached_rows(cfg, fingerprint, transfer, tags, limit)
        if 0 < pending < AUTO_MIN_ROWS and not calibration_path(cfg, cal_key).is_file():
            why = f"{pending:,} rows to label, under {AUTO_MIN_ROWS:,}: not worth an export"
            used = {"used": "torch", "why": why}
            return LabelerChoice("torch", "torch", info=used, states=states), None
    if onnx is None:  # the ONNX export lives a layer up (exporters): injected
        raise EdgeKDError(f"teacher_runtime {runtime!r} needs the ONNX teacher; use torch")
    info: dict[str, Any] = {"used": runtime}
    if runtime not in ("onnx-int8", "auto") or not sample:
        return LabelerChoice("fp32", tag, info=info, states=states, code=onnx.code), onnx
    cal = cached_calibration(cfg, cal_key, onnx, sample)
    info["calibration"] = cal.model_dump(exclude={"kind"})
    if runtime == "onnx-int8":
        return LabelerChoice("int8", tag, info=info, states=states, code=onnx.code), onnx
    if cal.choice == "hybrid":
        info |= {"used": "hybrid"}
        return LabelerChoice("hybrid", tag, cal.margin, info, states, onnx.code), onnx
    info["used"] = "onnx"
    info["why"] = (
        f"int8 with fp32 close calls agreed on {cal.hybrid_agreement:.2%}, "
        f"under {AGREEMENT_FLOOR:.1%}: fp32 labels everything"
    )
    return LabelerChoice("fp32", tag, info=info, states=states, code=onnx.code), onnx


def build_labelers(
    choice: LabelerChoice,
    cfg: DistillConfig,
    model: Any,
    tokenizer: Any,
    onnx: OnnxTeacher | None,
    splits: dict[str, Sequence[Any]],
    sink: StateSink | None = None,
) -> dict[str, tuple[Labeler, str]]:
    """Per split, the labeler `choice` names and its cache name; with a `sink`, each
    records the token states of the rows it labels there."""
    tags = choice.tags(list(splits))
    if choice.transfer == "torch":
        torch_fn = deduplicated(torch_labeler(cfg, model, tokenizer, sink))
        return {s: (torch_fn, tags[s]) for s in splits}
    assert onnx is not None  # decide_labelers gives it with every ONNX choice
    if sink is not None:
        onnx.sink = sink  # OnnxLabelers records each call's token states there
    fp32 = deduplicated(onnx.fp32)
    if choice.transfer == "int8":
        chosen = deduplicated(onnx.int8)
    elif choice.transfer == "hybrid":
        chosen = deduplicated(hybrid_labeler(onnx, choice.margin))
    else:
        chosen = fp32
    return {s: (fp32 if s == "dev" else chosen, tags[s]) for s in splits}


def shared_labelers(
    group: LabelGroup,
    cfg: DistillConfig,
    name: str,
    fingerprint: str,
    splits: dict[str, Sequence[Any]],
    model: Any,
    tokenizer: Any,
    onnx_runtime: OnnxRuntime | None,
    limit: int | None,
) -> tuple[dict[str, tuple[Labeler, str]], dict[str, Any]]:
    """`choose_labelers` for a group: the main process chooses (and calibrates, and
    writes the calibration), every process builds the labelers of that choice. Where
    rows are left to label with ONNX, the main exports the teacher before it sends the
    choice: the broadcast is the barrier the others wait at, and they load its files."""
    onnx: OnnxTeacher | None = None

    def choose() -> tuple[LabelerChoice, bool]:
        nonlocal onnx
        choice, onnx = decide_labelers(cfg, name, fingerprint, splits, onnx_runtime, limit)
        tags = choice.tags(list(splits))
        exports = onnx is not None and uncached_rows(cfg, fingerprint, splits, tags, limit) > 0
        if onnx is not None and exports:
            onnx.ready(choice.kinds())
        return choice, exports

    choice, exports = group.decided(choose)
    if choice.transfer != "torch" and not group.main:
        if onnx_runtime is None:  # the main has refused this run already
            raise EdgeKDError(f"teacher_runtime {cfg.teacher_runtime!r} needs the ONNX teacher")
        onnx = onnx_runtime(cfg, name, fingerprint)  # loads the main's export at first use
        if exports and "int8" in choice.kinds() and onnx.code != choice.code:
            # Its int8 labels would differ from the main's, cached under the main's name.
            raise EdgeKDError(
                f"process {group.rank} would label with another int8 than process 0's "
                f"(labeller code {onnx.code[:12]} against {choice.code[:12]}: another edgekd, "
                "onnxruntime or CPU); run one edgekd install on alike machines, or "
                "--teacher-runtime onnx"
            )
    if exports and group.apart:
        # A machine of its own may keep its own cache dir, without the main's export: its
        # first process exports there (when missing) while the others on it wait.
        if group.local_main and not group.main and onnx is not None:
            onnx.ready(choice.kinds())
        group.barrier()
    return build_labelers(choice, cfg, model, tokenizer, onnx, splits), choice.info
