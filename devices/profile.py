"""`edgekd profile`: time a model on a device with the agent, at batch 1."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from edgekd.artifacts import HF_CONFIG, StudentMeta
from edgekd.config import (
    DEFAULT_DEVICE,
    DEFAULT_RUNS,
    DEFAULT_SEQ_LEN,
    DEFAULT_TRIALS,
    DEFAULT_WARMUP,
    runs_cover_trials,
)
from edgekd.devices.base import load_device
from edgekd.errors import EdgeKDError
from edgekd.io import load_json
from edgekd.students import STUDENT_FILE


def tokenizer_info(model: Path) -> dict[str, Any] | None:
    """Tokenizer file, max length, special tokens and vocab size from files beside `model`."""
    folder = model.parent
    if not (folder / "tokenizer.json").is_file():
        return None
    if (folder / STUDENT_FILE).is_file():
        meta = StudentMeta.read(folder)  # typed and checked: a crafted one is one line
        return {
            "tokenizer": folder / "tokenizer.json",
            "max_length": meta.max_length,
            "special": meta.add_special_tokens,
            "vocab_size": meta.vocab_size,
        }
    if (folder / HF_CONFIG).is_file():
        fix = "re-export the model (optimum-cli export onnx)"
        config = load_json(folder / HF_CONFIG, fix)
        vocab = config.get("vocab_size", 1000) if isinstance(config, dict) else None
        if type(vocab) is not int or vocab < 1:
            raise EdgeKDError(
                f"{folder / HF_CONFIG}: vocab_size {str(vocab)[:40]} is not a positive whole "
                f"number; {fix}"
            )
        return {
            "tokenizer": folder / "tokenizer.json",
            "max_length": 128,
            "special": True,
            "vocab_size": vocab,
        }
    return None


def one_line(text: Any) -> str:
    """A text, or a pair as "first<TAB>second", on one line of the agent's texts file."""
    sides = (text,) if isinstance(text, str) else tuple(text)
    return "\t".join(" ".join(side.split()) for side in sides)


def synthetic_texts(tokenizer_json: Path, words: int, n: int = 64, seed: int = 0) -> list[str]:
    """`n` texts of `words` whole words (no ##pieces, no [SPECIAL]) from a vocabulary."""
    from edgekd.students.tokenizer import read_tokenizer

    fix = "re-create the folder with `edgekd export`"
    vocab = read_tokenizer(tokenizer_json, fix).get_vocab()  # any model type
    return synthetic_words(list(vocab), words, n, seed)


def synthetic_words(vocab: list[str], words: int, n: int = 64, seed: int = 0) -> list[str]:
    import random

    pool = sorted(t for t in vocab if t.isalpha() and not t.startswith(("##", "[")))
    pool = pool or ["a"]
    rng = random.Random(seed)
    return [" ".join(rng.choices(pool, k=words)) for _ in range(n)]


def profile_model(
    model: str | Path,
    device: str = DEFAULT_DEVICE,
    threads: int | None = None,
    runs: int = DEFAULT_RUNS,
    warmup: int = DEFAULT_WARMUP,
    seq_len: int = DEFAULT_SEQ_LEN,
    texts: list[Any] | None = None,
    trials: int = DEFAULT_TRIALS,
    vs: str | Path | None = None,
    host: str | None = None,
    processes: int = 1,
    exit_thresholds: list[float] | None = None,
) -> dict[str, Any]:
    """Run the agent on `device`: `runs` timed calls in `trials` trials after `warmup`.

    Alone, a model is also timed tokenize+infer end to end, cycling through
    `texts` (without them, synthetic texts of `seq_len` words from its own
    vocabulary). With `vs`, both models are timed alternately on synthetic
    `seq_len`-token inputs and the result holds their ratio (`vs`); with
    `processes` > 1 the agent runs that many times and the ratio's interval
    spans the variation between processes (`combine_processes`). `exit_thresholds`:
    an early-exit model is also timed at each, on `texts`, with its mean exit layer.
    """
    dev = load_device(device, host=host)
    files = {"model": existing(model)}
    threads = dev.spec.threads_for(threads)
    try:
        runs_cover_trials(runs, trials)  # the configs' rule, for a direct call too
    except ValueError as e:
        raise EdgeKDError(f"{e}; raise --runs") from None
    info = tokenizer_info(files["model"])
    args = [
        "--threads",
        str(threads),
        "--runs",
        str(runs),
        "--trials",
        str(trials),
        "--warmup",
        str(warmup),
        "--seq-len",
        str(seq_len),
        "--vocab-size",
        str(info["vocab_size"] if info else 1000),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "texts.txt"
        if vs is not None:
            files["vs"] = existing(vs)
            other = tokenizer_info(files["vs"])
            args += ["--vs-vocab-size", str(other["vocab_size"] if other else 1000)]
            if reads_strings(files["model"]) or reads_strings(files["vs"]):
                # End to end on both sides: the same texts, each through its tokenizer.
                texts = texts or synthetic_texts_for(files["model"], files["vs"], seq_len)
                files["texts"] = write_texts(staged, texts)
                for side, meta, prefix in (("tokenizer", info, ""), ("vs-tokenizer", other, "vs-")):
                    if meta:
                        files[side] = meta["tokenizer"]
                        args += [f"--{prefix}max-length", str(meta["max_length"])]
                        args += [f"--{prefix}special-tokens"] if meta["special"] else []
        elif info or reads_strings(files["model"]):
            texts = texts or synthetic_texts_for(files["model"], None, seq_len)
            files["texts"] = write_texts(staged, texts)
            if info and not reads_strings(files["model"]):
                files["tokenizer"] = info["tokenizer"]
                args += ["--max-length", str(info["max_length"])]
                if info["special"]:
                    args.append("--special-tokens")
        if exit_thresholds and vs is None and "tokenizer" in files:
            args += ["--exit-thresholds", ",".join(f"{t:g}" for t in exit_thresholds)]
        results = [dev.run_agent(files, args) for _ in range(processes if vs is not None else 1)]
    result = combine_processes(results) if len(results) > 1 else results[0]
    result["device"] = dev.spec.name
    return result


def write_texts(path: Path, texts: list[Any]) -> Path:
    path.write_text("\n".join(one_line(t) for t in texts) + "\n", encoding="utf-8")
    return path


def reads_strings(model: Path) -> bool:
    """Whether an ONNX model takes a string tensor (a `model.e2e.onnx`)."""
    import onnx

    try:
        graph = onnx.load(str(model), load_external_data=False).graph
    except Exception as e:
        raise EdgeKDError(
            f"{model} is not a valid ONNX model ({type(e).__name__}); pass an .onnx file from "
            "`edgekd export`"
        ) from None
    return any(i.type.tensor_type.elem_type == onnx.TensorProto.STRING for i in graph.input)


def is_early_exit(model: Path) -> bool:
    """Whether an ONNX model takes an `exit_threshold` (an early-exit export). A file
    that is missing or no ONNX model is not one; `profile_model` says what is wrong."""
    import onnx

    try:
        graph = onnx.load(str(model), load_external_data=False).graph
    except Exception:
        return False
    return any(i.name == "exit_threshold" for i in graph.input)


def synthetic_texts_for(model: Path, other: Path | None, words: int) -> list[str]:
    """Synthetic texts from the vocabulary of whichever model has one: a tokenizer.json
    beside it, else the vocabulary inside a one-file model's tokenizer op."""
    for m in (model, other):
        if m is not None and (meta := tokenizer_info(m)):
            return synthetic_texts(meta["tokenizer"], words)
    import onnx

    vocab = graph_vocabulary(onnx.load(str(model), load_external_data=False).graph)
    if vocab:
        return synthetic_words(vocab, words)
    raise EdgeKDError(f"{model} has no tokenizer to draw texts from; pass --data")


def graph_vocabulary(graph: Any) -> list[str]:
    """The vocabulary inside a one-file model (`exporters/e2e.py`): its WordpieceTokenizer's
    `vocab` (JSON, piece → id), else a word vocabulary's LabelEncoder keys. The e2e
    export tokenizes each row inside a Loop, so the ops sit in the Loop's body graph:
    every subgraph is searched, not only the top level."""
    import onnx

    words: list[str] = []
    for node in graph.node:
        for a in node.attribute:
            if node.op_type == "WordpieceTokenizer" and a.name == "vocab":
                try:  # the file may be crafted: a vocabulary is a JSON object, or none
                    vocab = json.loads(a.s.decode())
                except (ValueError, RecursionError):  # not UTF-8, not JSON, too deep
                    vocab = None
                if isinstance(vocab, dict) and vocab:
                    return [str(piece) for piece in vocab]
            if node.op_type == "LabelEncoder" and a.name == "keys_strings":
                words = words or [k.decode("utf-8", "replace") for k in a.strings]
            subgraphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
            for sub in subgraphs:
                if found := graph_vocabulary(sub):
                    return found
    return words


def combine_processes(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One `--vs` result from several agent processes: pooled trial ratios, their
    median, a two-level bootstrap interval, and per-process medians of each model."""
    import statistics

    from edgekd.devices.agent import bootstrap_ci

    groups = [r["vs"]["trial_ratios"] for r in runs]
    p90 = [r["vs"]["p90_trial_ratios"] for r in runs]
    out = {**runs[0], "vs": {**runs[0]["vs"], "b": dict(runs[0]["vs"]["b"])}}
    for key in ("p50_ms", "p90_ms", "p99_ms", "iqr_ms", "load_ms"):
        out[key] = statistics.median(r[key] for r in runs)
        out["vs"]["b"][key] = statistics.median(r["vs"]["b"][key] for r in runs)
    out["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    out["vs"].update(
        trial_ratios=[x for g in groups for x in g],
        ratio_b_over_a=statistics.median(x for g in groups for x in g),
        ratio_ci95=list(bootstrap_ci(groups, seed=0)),
        process_ratios=[r["vs"]["ratio_b_over_a"] for r in runs],
        p90_trial_ratios=[x for g in p90 for x in g],
        p90_ratio_b_over_a=statistics.median(x for g in p90 for x in g),
        p90_ratio_ci95=list(bootstrap_ci(p90, seed=0)),
        processes=len(runs),
    )
    return out


def existing(model: str | Path) -> Path:
    path = Path(model)
    if not path.is_file():
        raise EdgeKDError(f"{path} does not exist; pass an .onnx file from `edgekd export`")
    return path
