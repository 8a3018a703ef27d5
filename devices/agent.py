"""Profiling agent: one self-contained script run on the target (stdlib, numpy,
onnxruntime; `tokenizers` only for the optional end-to-end timing).

    python agent.py --model model.onnx --threads 1 --runs 200 --trials 5 --seq-len 64

prints one JSON object: latency percentiles in ms (medians over trials), their
IQR and trial spread, session load ms, peak RSS, the onnxruntime version and the
CPU model. `--vs other.onnx` times two models alternately and reports the ratio.
It runs in its own process so the RSS it reports is the model's, not the caller's
(torch alone is ~300 MB). Python 3.8+ on the device, so no newer syntax here.
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
from typing import Any


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
    feed: dict[str, np.ndarray] = {}
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


# A trial median this far from the others means the machine was busy during part of
# the run: 10% is about 3x the trial-to-trial spread seen on an idle core here.
NOISY_SPREAD = 0.10


def trial_stats(trials: list[list[float]]) -> dict:
    """Percentiles as the median over trials of each trial's own, plus pooled IQR.

    A burst of background load spoils one trial, not the median of five, so the
    reported p50/p90 survive a noisy machine; `trial_spread` (range of trial p50s
    over their median) says how much the trials disagreed.
    """
    per = [summarize(t) for t in trials]
    pooled = sorted(ms for t in trials for ms in t)
    # Not floats only: the trial count, the per-trial p50s and the noisy flag join them.
    out: dict[str, Any] = summarize(pooled)
    for key in ("p50_ms", "p90_ms", "p99_ms"):
        out[key] = statistics.median(p[key] for p in per)
    medians = [p["p50_ms"] for p in per]
    out["iqr_ms"] = percentile(pooled, 75) - percentile(pooled, 25)
    out["trials"] = len(trials)
    out["trial_p50_ms"] = medians
    out["trial_spread"] = (max(medians) - min(medians)) / out["p50_ms"] if out["p50_ms"] else 0.0
    out["noisy"] = out["trial_spread"] > NOISY_SPREAD
    return out


def timed_trials(fn, runs: int, warmup: int, trials: int) -> list[list[float]]:
    """`runs` timed calls split into `trials` equal trials after one warm-up."""
    per_trial = max(1, runs // trials)
    for _ in range(warmup):
        fn()
    return [time_runs(fn, per_trial, 0) for _ in range(trials)]


def bootstrap_ci(groups: list[list[float]], seed: int, n: int = 2000, level: float = 0.95):
    """Percentile-bootstrap confidence interval for the median of the pooled values.

    With several groups (one per agent process) it resamples groups, then values
    within each, so the interval spans process-to-process variation (memory
    placement, clock state), which no amount of trials inside one process sees.
    """
    import random

    rng = random.Random(seed)
    meds = []
    for _ in range(n):
        picked = rng.choices(groups, k=len(groups)) if len(groups) > 1 else groups
        meds.append(statistics.median([v for g in picked for v in rng.choices(g, k=len(g))]))
    meds.sort()
    tail = (1 - level) / 2
    return meds[int(tail * (n - 1))], meds[int((1 - tail) * (n - 1))]


def alternate(fa, fb, runs: int, warmup: int, trials: int, seed: int) -> dict:
    """Time two models in alternating trials (A B B A ...) and compare them.

    Alternating in one process puts both under the same machine state, so slow
    drift (thermal throttling, a neighbour's job) hits both; the ratio per trial
    pair cancels it, and its median gets a bootstrap 95% interval.
    """
    per_trial = max(1, runs // trials)
    for _ in range(warmup):
        fa()
        fb()
    ta: list[list[float]] = []
    tb: list[list[float]] = []
    for i in range(trials):
        order = ((ta, fa), (tb, fb)) if i % 2 == 0 else ((tb, fb), (ta, fa))
        for sink, fn in order:
            sink.append(time_runs(fn, per_trial, 0))
    ratios = [statistics.median(tb[i]) / statistics.median(ta[i]) for i in range(trials)]
    # The same per trial pair for the tail: p90 over p90 (a trial of 20 calls gives its
    # p90 from the two slowest; a regression gate on p90 reads this ratio).
    p90 = [percentile(sorted(tb[i]), 90) / percentile(sorted(ta[i]), 90) for i in range(trials)]
    lo, hi = bootstrap_ci([ratios], seed)
    lo90, hi90 = bootstrap_ci([p90], seed)
    return {
        "a": trial_stats(ta),
        "b": trial_stats(tb),
        "ratio_b_over_a": statistics.median(ratios),
        "ratio_ci95": [lo, hi],
        "trial_ratios": ratios,
        "p90_ratio_b_over_a": statistics.median(p90),
        "p90_ratio_ci95": [lo90, hi90],
        "p90_trial_ratios": p90,
    }


def takes_text(session) -> bool:
    """Whether the model reads strings (a `model.e2e.onnx`: its tokenizer is inside)."""
    return any(i.type == "tensor(string)" for i in session.get_inputs())


def text_call(session, texts: list[str]):
    """One call per text, cycling: a line "first<TAB>second" is a pair. A pair model's
    `text` input has rank 2 and reads one [first, second] row, [1, 2] (a line without a
    tab: the text on both sides, as `row_feed` times a siamese model); a single-text
    model's, rank 1, reads [1]."""
    import numpy as np

    text = session.get_inputs()[0]
    if len(text.shape) == 2:
        sides = [t.split("\t") for t in texts]
        rows = [np.array([s if len(s) == 2 else [s[0], s[0]]], dtype=object) for s in sides]
    else:
        rows = [np.array(t.split("\t")) for t in texts]
    state = {"i": 0}

    def one() -> None:
        session.run(None, {text.name: rows[state["i"] % len(rows)]})
        state["i"] += 1

    return one


def row_feed(tok, names, text: str, max_length: int, special: bool) -> dict:
    """One text (a line "first<TAB>second" is a pair) as a batch-1 feed of `names`."""
    import numpy as np

    def row(ids: list[int], suffix: str = "") -> dict:
        ids = ids[:max_length] or [0]
        return {
            "input_ids" + suffix: np.array([ids], dtype=np.int64),
            "attention_mask" + suffix: np.ones((1, len(ids)), dtype=np.int64),
        }

    first, _, second = text.partition("\t")
    if "input_ids_b" in names:  # siamese: each side on its own (one text: both sides)
        feed = row(tok.encode(first, add_special_tokens=False).ids)
        feed.update(row(tok.encode(second or first, add_special_tokens=False).ids, "_b"))
    else:
        enc = tok.encode(first, second or None, add_special_tokens=special)
        feed = row(enc.ids)
        types = enc.type_ids[:max_length] or [0]
        feed["token_type_ids"] = np.array([types], dtype=np.int64)
    return {k: v for k, v in feed.items() if k in names}


def load_tokenizer(tokenizer_path: str):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_path)
    tok.no_padding()
    tok.no_truncation()
    return tok


def tokenized_call(session, tokenizer_path: str, texts: list[str], max_length: int, special: bool):
    """Tokenize + infer one text per call, cycling through `texts`."""
    tok = load_tokenizer(tokenizer_path)
    names = {i.name for i in session.get_inputs()}
    state = {"i": 0}

    def one() -> None:
        text = texts[state["i"] % len(texts)]
        state["i"] += 1
        session.run(None, row_feed(tok, names, text, max_length, special))

    return one


# The graph input an early-exit model (edgekd export of a --early-exit student) takes
# its threshold by; an initializer too, so callers that never feed it get the default.
EXIT_THRESHOLD = "exit_threshold"


def exit_sweep(
    session,
    tokenizer_path: str,
    texts: list[str],
    thresholds: list[float],
    max_length: int,
    special: bool,
    runs: int,
    warmup: int,
    trials: int,
) -> list:
    """An early-exit model at each threshold: mean exit layer over `texts` (each at
    batch 1) and latency of the model call, texts pre-tokenized and cycled. The
    thresholds take turns trial by trial, so a slow spell of the machine falls on all
    of them alike."""
    import numpy as np

    tok = load_tokenizer(tokenizer_path)
    names = {i.name for i in session.get_inputs()}
    feeds = [row_feed(tok, names, t, max_length, special) for t in texts]
    out = []
    calls = []
    for threshold in thresholds:
        value = np.array(threshold, dtype=np.float32)
        layers = [
            int(session.run(["exit_layer"], {**f, EXIT_THRESHOLD: value})[0][0]) for f in feeds
        ]
        state = {"i": 0}

        def one(value=value, state=state) -> None:
            session.run(None, {**feeds[state["i"] % len(feeds)], EXIT_THRESHOLD: value})
            state["i"] += 1

        calls.append(one)
        out.append({"threshold": threshold, "mean_exit_layer": statistics.fmean(layers)})
    per_trial = max(1, runs // trials)
    timed: list[list[list[float]]] = [[] for _ in thresholds]  # threshold → trial → ms
    for one in calls:
        for _ in range(warmup):
            one()
    for _ in range(trials):
        for i, one in enumerate(calls):
            timed[i].append(time_runs(one, per_trial, 0))
    for i, entry in enumerate(out):
        entry.update(trial_stats(timed[i]))
    return out


def end_to_end(
    session,
    tokenizer_path: str,
    texts: list[str],
    max_length: int,
    special: bool,
    runs: int,
    warmup: int,
    trials: int,
) -> dict:
    """Tokenize + infer one text at a time, cycling through `texts`."""
    one = tokenized_call(session, tokenizer_path, texts, max_length, special)
    return trial_stats(timed_trials(one, runs, warmup, trials))


def open_session(ort, path: str, threads: int, provider: str):
    if provider not in ort.get_available_providers():
        raise SystemExit(
            f"execution provider {provider} is not in this onnxruntime build "
            f"({', '.join(ort.get_available_providers())}); fix the device spec"
        )
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    # Errors only: an early-exit graph's overridable exit_threshold warns at every load.
    options.log_severity_level = 3
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    providers = [provider] + (
        ["CPUExecutionProvider"] if provider != "CPUExecutionProvider" else []
    )
    t = time.perf_counter()
    try:
        session = ort.InferenceSession(path, options, providers=providers)
    except Exception as e:
        # A model.e2e.onnx: its tokenizer ops come from onnxruntime-extensions, loaded
        # only for it (the library adds ~3 MB, which a plain model's RSS must not carry).
        library = extensions_library()
        if "ai.onnx.contrib" not in str(e) or library is None:
            raise
        t = time.perf_counter()
        options.register_custom_ops_library(library)
        session = ort.InferenceSession(path, options, providers=providers)
    return session, (time.perf_counter() - t) * 1000.0


def extensions_library():
    """onnxruntime-extensions' operator library, found without importing the package
    (its import pulls in onnx and more: ~3 s and ~300 MB). None: not installed.
    edgekd.students.predict has the same lookup; this agent must stand alone."""
    import importlib.util

    spec = importlib.util.find_spec("onnxruntime_extensions")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for name in sorted(os.listdir(folder)):
            if name.startswith("_extensions_pydll") and name.endswith((".so", ".pyd", ".dylib")):
                return os.path.join(folder, name)
    return None


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=200, help="timed runs in all, split into trials")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--vocab-size", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cpu-affinity", help="comma-separated cores to pin this process to")
    p.add_argument("--provider", default="CPUExecutionProvider")
    p.add_argument("--vs", help="a second model, timed alternately with --model")
    p.add_argument("--vs-vocab-size", type=int, default=None)
    p.add_argument("--texts", help="file of texts, one per line, for end-to-end timing")
    p.add_argument("--tokenizer", help="tokenizer.json for end-to-end timing")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--special-tokens", action="store_true")
    p.add_argument("--vs-tokenizer", help="--vs model's tokenizer.json: both timed end to end")
    p.add_argument("--vs-max-length", type=int, default=128)
    p.add_argument("--vs-special-tokens", action="store_true")
    p.add_argument(
        "--exit-thresholds",
        help="comma-separated: time an early-exit model at each threshold on --texts",
    )
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args(argv)

    import numpy as np  # noqa: F401  (fail here, clearly, if numpy is missing)
    import onnxruntime as ort

    if args.cpu_affinity:  # pin before the session creates its thread pool
        cores = {int(c) for c in args.cpu_affinity.split(",")}
        if not hasattr(os, "sched_setaffinity"):
            raise SystemExit(f"this OS ({sys.platform}) cannot pin cores; drop cpu_affinity")
        try:
            os.sched_setaffinity(0, cores)
        except OSError:
            raise SystemExit(
                f"cpu_affinity {sorted(cores)}: this machine has cores "
                f"{sorted(os.sched_getaffinity(0))}; fix the device spec"
            ) from None
    rss_before = peak_rss_mb()
    session, load_ms = open_session(ort, args.model, args.threads, args.provider)
    texts = []
    if args.texts:
        with open(args.texts, encoding="utf-8") as f:
            texts = [line.rstrip("\n") for line in f if line.strip()]
    if takes_text(session) and not texts:
        raise SystemExit(f"{args.model} reads strings: pass --texts")
    result = {
        "model": os.path.abspath(args.model),
        "bytes": os.path.getsize(args.model),
        "threads": args.threads,
        "cpu_affinity": sorted(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else None,
        "provider": session.get_providers()[0],
        "runs": args.runs,
        "warmup": args.warmup,
        "seq_len": args.seq_len,
        "batch": 1,
    }
    if args.vs:
        other, other_load = open_session(ort, args.vs, args.threads, args.provider)
        vocab = args.vs_vocab_size or args.vocab_size
        # End to end (string in, label out) when either side reads strings: both sides
        # then take the same texts, each through its own tokenizer or its graph's.
        text_mode = takes_text(session) or takes_text(other)
        if text_mode and not texts:
            raise SystemExit("a model that reads strings is timed on texts: pass --texts")

        def call(sess, vocab_size, tokenizer, max_length, special):
            if takes_text(sess):
                return text_call(sess, texts)
            if text_mode:
                if not tokenizer:
                    raise SystemExit("timing a model end to end needs its tokenizer.json")
                return tokenized_call(sess, tokenizer, texts, max_length, special)
            feed = synthetic_feed(sess, args.seq_len, vocab_size, args.seed)
            return lambda: sess.run(None, feed)

        cmp = alternate(
            call(session, args.vocab_size, args.tokenizer, args.max_length, args.special_tokens),
            call(other, vocab, args.vs_tokenizer, args.vs_max_length, args.vs_special_tokens),
            args.runs,
            args.warmup,
            args.trials,
            args.seed,
        )
        result.update(cmp.pop("a"), load_ms=load_ms, end_to_end_timing=text_mode)
        cmp["b"].update(
            model=os.path.abspath(args.vs), bytes=os.path.getsize(args.vs), load_ms=other_load
        )
        result["vs"] = cmp
    elif takes_text(session):  # string in, label out: the timing is end to end already
        ms = timed_trials(text_call(session, texts), args.runs, args.warmup, args.trials)
        result.update(trial_stats(ms), load_ms=load_ms, end_to_end_timing=True)
    else:
        feed = synthetic_feed(session, args.seq_len, args.vocab_size, args.seed)
        ms = timed_trials(lambda: session.run(None, feed), args.runs, args.warmup, args.trials)
        result.update(trial_stats(ms), load_ms=load_ms)
    result.update(onnxruntime=ort.__version__, cpu=cpu_model(), machine=platform.machine())
    if texts and args.tokenizer and not args.vs and not takes_text(session):
        result["end_to_end"] = end_to_end(
            session,
            args.tokenizer,
            texts,
            args.max_length,
            args.special_tokens,
            args.runs,
            args.warmup,
            args.trials,
        )
    if args.exit_thresholds:
        if not (texts and args.tokenizer):
            raise SystemExit("an early-exit sweep runs on real texts: pass --texts and --tokenizer")
        result["early_exit"] = exit_sweep(
            session,
            args.tokenizer,
            texts,
            [float(x) for x in args.exit_thresholds.split(",")],
            args.max_length,
            args.special_tokens,
            args.runs,
            args.warmup,
            args.trials,
        )
    result["peak_rss_mb"] = peak_rss_mb()
    result["rss_before_load_mb"] = rss_before
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f)
    return result


if __name__ == "__main__":
    print(json.dumps(main()))
