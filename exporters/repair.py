"""Accuracy repair: keep the nodes int8 hurts most in fp32, one at a time.

When int8 loses more accuracy than the budget allows, each still-quantized node is
tried in fp32 on its own (an exclusion trial: quantize everything else, score),
the node whose exclusion recovers the most is kept in fp32, and the search repeats
until the drop is within budget, no trial helps, or `max_rounds` is reached. The
report says which nodes stayed fp32 and what that cost in bytes.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

# quantize(src, dst, excluded node names) and score(path) → accuracy
QuantizeFn = Callable[[Path, Path, list[str]], None]
ScoreFn = Callable[[Path], float]


def quantizable_nodes(path: Path, op_types: list[str]) -> list[str]:
    """Names of the fp32 graph's nodes a quantizer would touch, in graph order."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return [n.name for n in graph.node if n.op_type in op_types and n.name]


def repair(
    fp32: Path,
    dst: Path,
    quantize: QuantizeFn,
    score: ScoreFn,
    max_drop: float,
    nodes: list[str],
    max_rounds: int = 5,
    trial_path: Path | None = None,
) -> dict[str, Any]:
    """Write the repaired int8 model to `dst`; return what was kept in fp32 and why.

    Trials are written to `trial_path` (default: a temp folder), which `score` must be
    able to read: e.g. beside `dst`, where its tokenizer and label files are.
    """
    reference = score(fp32)
    excluded: list[str] = []
    quantize(fp32, dst, excluded)
    drop = reference - score(dst)
    report: dict[str, Any] = {"fp32_accuracy": reference, "drop_before": drop, "trials": []}
    with tempfile.TemporaryDirectory() as tmp:
        trial = trial_path or Path(tmp) / "trial.onnx"
        for _ in range(max_rounds):
            if drop <= max_drop:
                break
            results = {}
            for node in (n for n in nodes if n not in excluded):
                quantize(fp32, trial, [*excluded, node])
                results[node] = reference - score(trial)
            if not results:
                break
            node = min(results, key=results.__getitem__)
            report["trials"].append({"excluded_so_far": list(excluded), "drops": results})
            if results[node] >= drop:
                break  # nothing helps any more
            excluded.append(node)
            drop = results[node]
        trial.unlink(missing_ok=True)
    bytes_before = dst.stat().st_size
    quantize(fp32, dst, excluded)
    report.update(
        kept_fp32=excluded,
        drop_after=drop,
        within_budget=drop <= max_drop,
        bytes_cost=dst.stat().st_size - bytes_before,
    )
    return report
