"""int8 must beat fp32: time them side by side and keep int8 only where it is faster.

The most common complaint about ONNX int8 is that it runs slower than fp32 on the
user's CPU (tiny matrices where quantize/dequantize overhead dominates, a kernel
path the CPU lacks). So every int8 candidate is timed against fp32 in the same
process, alternating, on the same input; the fastest candidate that beats fp32
wins, and if none does, int8 is refused with the measured reason.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# (paths, feed) → median latency in ms per path, measured side by side
Timer = Callable[[dict[str, Path], dict[str, np.ndarray]], dict[str, float]]


def side_by_side(
    paths: dict[str, Path],
    feed: dict[str, np.ndarray],
    rounds: int = 5,
    runs: int = 30,
    threads: int = 1,
) -> dict[str, float]:
    """Median p50 latency (ms) per model, all fed `feed` (see `measure`)."""
    timed = measure(paths, {name: feed for name in paths}, rounds, runs, threads)
    return {name: t["p50"] for name, t in timed.items()}


def measure(
    paths: dict[str, Path],
    feeds: dict[str, dict[str, np.ndarray]],
    rounds: int = 5,
    runs: int = 30,
    threads: int = 1,
) -> dict[str, dict[str, float]]:
    """p50 and p90 (ms) per model: the median over rounds of each round's percentile.

    Models take turns within every round, so a noisy neighbour slows all alike. Each
    model reads its own feed (filtered to its graph's inputs).
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3  # errors only (an early-exit graph's threshold warns)
    sessions = {
        name: ort.InferenceSession(str(p), options, providers=["CPUExecutionProvider"])
        for name, p in paths.items()
    }
    inputs = {
        name: {i.name: feeds[name][i.name] for i in s.get_inputs() if i.name in feeds[name]}
        for name, s in sessions.items()
    }
    for name, s in sessions.items():  # warm-up: first runs allocate and pick kernels
        for _ in range(5):
            s.run(None, inputs[name])
    per_round: dict[str, dict[str, list[float]]] = {n: {"p50": [], "p90": []} for n in sessions}
    for _ in range(rounds):
        for name, s in sessions.items():
            times = []
            for _ in range(runs):
                t = time.perf_counter()
                s.run(None, inputs[name])
                times.append((time.perf_counter() - t) * 1000.0)
            times.sort()
            per_round[name]["p50"].append(statistics.median(times))
            per_round[name]["p90"].append(times[int(0.9 * (len(times) - 1))])
    return {n: {k: statistics.median(v) for k, v in d.items()} for n, d in per_round.items()}


def pick_fastest_int8(
    fp32: Path,
    candidates: dict[str, Path],
    feed: dict[str, np.ndarray],
    timer: Timer | None = None,
) -> dict[str, Any]:
    """Time fp32 and every int8 candidate; return the decision with its evidence.

    `chosen` is the fastest candidate strictly faster than fp32, or None (refuse int8).
    """
    ms = (timer or side_by_side)({"fp32": fp32, **candidates}, feed)
    best = min(candidates, key=lambda name: ms[name])
    decision: dict[str, Any] = {"latency_ms": ms, "chosen": None}
    if ms[best] < ms["fp32"]:
        decision["chosen"] = best
        decision["speedup_vs_fp32"] = ms["fp32"] / ms[best]
    else:
        decision["reason"] = (
            f"no int8 variant beat fp32 on this CPU: fastest {best} {ms[best]:.3f} ms vs "
            f"fp32 {ms['fp32']:.3f} ms; shipping fp32"
        )
    return decision
