"""Profiling agent: one self-contained script run on the target (stdlib, numpy,
onnxruntime; `tokenizers` only for the optional end-to-end timing).

    python agent.py --model model.onnx --threads 1 --runs 200 --seq-len 64

prints one JSON object: latency percentiles in ms, session load ms, peak RSS,
the onnxruntime version and the CPU model. It runs in its own process so the
RSS it reports is the model's, not the caller's (torch alone is ~300 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "processor\t: arm")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def peak_rss_mb() -> float:
    """Peak resident memory of this process, MB.

    On Linux (and Android) VmHWM belongs to this process's own address space, which
    exec starts afresh. ru_maxrss does not: it carries over the parent's peak across
    fork and exec, so a child of a 700 MB torch process would report 700 MB.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024  # bytes vs KiB


def percentile(sorted_ms: list[float], q: float) -> float:
    """Linear-interpolated percentile of an ascending list, q in [0, 100]."""
    k = (len(sorted_ms) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(sorted_ms) - 1)
    return sorted_ms[lo] + (sorted_ms[hi] - sorted_ms[lo]) * (k - lo)


def summarize(ms: list[float]) -> dict[str, float]:
    s = sorted(ms)
    mean = statistics.fmean(s)
    return {
        "p50_ms": percentile(s, 50),
        "p90_ms": percentile(s, 90),
        "p99_ms": percentile(s, 99),
        "mean_ms": mean,
        "min_ms": s[0],
        "stdev_ms": statistics.pstdev(s),
        "throughput_per_s": 1000.0 / mean if mean > 0 else 0.0,
    }


def synthetic_feed(session, seq_len: int, vocab_size: int, seed: int) -> dict:
    """Batch-1 inputs for every graph input: ids in [1, vocab), masks of ones."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feed = {}
    for inp in session.get_inputs():
        shape = [1 if i == 0 else seq_len for i in range(len(inp.shape))] or [1]
        for i, dim in enumerate(inp.shape):  # keep fixed dims of a fixed-shape graph
            if isinstance(dim, int) and dim > 0:
                shape[i] = dim
        if "float" in inp.type:
            feed[inp.name] = rng.standard_normal(shape).astype(np.float32)
        elif "mask" in inp.name:
            feed[inp.name] = np.ones(shape, dtype=np.int64)
        elif "token_type" in inp.name:
            feed[inp.name] = np.zeros(shape, dtype=np.int64)
        else:
            feed[inp.name] = rng.integers(1, max(2, vocab_size), size=shape, dtype=np.int64)
    return feed


def time_runs(fn, runs: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000.0)
    return out


def end_to_end(
    session,
    tokenizer_path: str,
    texts: list[str],
    max_length: int,
    special: bool,
    runs: int,
    warmup: int,
) -> dict[str, float]:
    """Tokenize + infer one text at a time, cycling through `texts`."""
    import numpy as np
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_path)
    tok.no_padding()
    tok.no_truncation()
    names = {i.name for i in session.get_inputs()}
    state = {"i": 0}

    def row(ids: list[int], suffix: str = "") -> dict:
        ids = ids[:max_length] or [0]
        return {
            "input_ids" + suffix: np.array([ids], dtype=np.int64),
            "attention_mask" + suffix: np.ones((1, len(ids)), dtype=np.int64),
        }

    def one() -> None:
        # A line "first<TAB>second" is a sentence pair.
        first, _, second = texts[state["i"] % len(texts)].partition("\t")
        state["i"] += 1
        if "input_ids_b" in names:  # siamese: each side on its own (one text: both sides)
            feed = row(tok.encode(first, add_special_tokens=False).ids)
            feed.update(row(tok.encode(second or first, add_special_tokens=False).ids, "_b"))
        else:
            enc = tok.encode(first, second or None, add_special_tokens=special)
            feed = row(enc.ids)
            types = enc.type_ids[:max_length] or [0]
            feed["token_type_ids"] = np.array([types], dtype=np.int64)
        session.run(None, {k: v for k, v in feed.items() if k in names})

    return summarize(time_runs(one, runs, warmup))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--vocab-size", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--texts", help="file of texts, one per line, for end-to-end timing")
    p.add_argument("--tokenizer", help="tokenizer.json for end-to-end timing")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--special-tokens", action="store_true")
    args = p.parse_args(argv)

    import numpy as np  # noqa: F401  (fail here, clearly, if numpy is missing)
    import onnxruntime as ort

    rss_before = peak_rss_mb()
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    t = time.perf_counter()
    session = ort.InferenceSession(args.model, options, providers=["CPUExecutionProvider"])
    load_ms = (time.perf_counter() - t) * 1000.0
    feed = synthetic_feed(session, args.seq_len, args.vocab_size, args.seed)
    ms = time_runs(lambda: session.run(None, feed), args.runs, args.warmup)
    result = {
        "model": os.path.abspath(args.model),
        "bytes": os.path.getsize(args.model),
        "threads": args.threads,
        "runs": args.runs,
        "warmup": args.warmup,
        "seq_len": args.seq_len,
        "batch": 1,
        **summarize(ms),
        "load_ms": load_ms,
        "onnxruntime": ort.__version__,
        "cpu": cpu_model(),
        "machine": platform.machine(),
    }
    if args.texts and args.tokenizer:
        with open(args.texts, encoding="utf-8") as f:
            texts = [line.rstrip("\n") for line in f if line.strip()]
        e2e = end_to_end(
            session,
            args.tokenizer,
            texts,
            args.max_length,
            args.special_tokens,
            args.runs,
            args.warmup,
        )
        result["end_to_end"] = e2e
    result["peak_rss_mb"] = peak_rss_mb()
    result["rss_before_load_mb"] = rss_before
    return result


if __name__ == "__main__":
    print(json.dumps(main()))
