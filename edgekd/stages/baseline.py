"""This run against a baseline (`edgekd check --baseline`): regressions, not limits.

A baseline is what a previous run left: an `edgekd export` folder, a bundle (folder
or .zip), or a `profile*.json` whose model file still exists. Each metric is judged
the way its noise asks:

- latency (p50, p90): both model files timed alternately in the same agent session
  on the same device, several processes; a regression is called only when the 95%
  interval of the now/baseline ratio lies wholly above 1 + margin;
- accuracy and agreement: row by row on the same dev rows (the exports' recorded
  predictions), an exact interval for the paired drop (McNemar's conditioning);
- bytes: exact, no interval.

A metric that cannot be measured (no model file to time, no per-row predictions,
other dev rows) reads as not measured, and the check fails: a gate never passes on
missing evidence.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from edgekd.artifacts import (
    BUNDLE_MODEL,
    PROFILE_GLOB,
    BundleManifest,
    DevPredictions,
    ExportReport,
    ProfileResult,
    RegressionResult,
    read_profile,
)
from edgekd.budget import DEFAULT_MARGINS, REGRESSIONS, Budget
from edgekd.config import ProfileConfig
from edgekd.errors import EdgeKDError


@dataclass
class Side:
    """One side of the comparison: the model file to time and what was recorded."""

    model: Path | None  # the ONNX file; None: nothing to time
    bytes: int | None
    predictions: DevPredictions | None  # holding this side's model under `kind`
    kind: Literal["fp32", "int8"] | None


def export_side(folder: Path, kind: str) -> Side:
    """The `kind` model ("int8", "fp32" or "shipped") of an export folder."""
    report = ExportReport.read(folder)
    chosen = report.shipped() if kind == "shipped" else kind
    if chosen not in report.models:
        raise EdgeKDError(
            f"{folder} has no {chosen} model (has: {', '.join(report.models)}); "
            "set `model:` in the budget to one both runs have"
        )
    entry = report.models[chosen]  # type: ignore[index]
    preds = DevPredictions.read(folder) if DevPredictions.path(folder).is_file() else None
    return Side(folder / entry.path, entry.bytes, preds, chosen)  # type: ignore[arg-type]


@contextmanager
def baseline_side(path: Path, kind: str) -> Iterator[Side]:
    """The baseline at `path`; a bundle .zip is verified and unpacked for the check's
    length (its model file is timed)."""
    from edgekd.stages.bundle import Bundle

    if path.is_dir() and ExportReport.path(path).is_file():
        yield export_side(path, kind)
    elif path.suffix == ".zip" or BundleManifest.path(path).is_file():
        bundle = Bundle(path)  # verifies every sha256 before anything is read
        m: BundleManifest = bundle.manifest
        if kind not in ("shipped", m.model):
            raise EdgeKDError(
                f"baseline bundle {path} ships the {m.model} model, the budget gates {kind}; "
                "set `model: shipped` in the budget"
            )
        model = bundle.folder / BUNDLE_MODEL
        yield Side(model, model.stat().st_size, m.predictions, m.model)
    elif path.is_file() and path.suffix == ".json":
        prof = read_profile(path)
        if not isinstance(prof, ProfileResult):
            raise EdgeKDError(f"{path} is a --seq-len sweep; pass a single profile as baseline")
        model = Path(prof.model)
        yield Side(model if model.is_file() else None, prof.bytes, None, None)
    elif path.is_dir() and any(path.glob(PROFILE_GLOB)):
        with baseline_side(sorted(path.glob(PROFILE_GLOB))[-1], kind) as side:
            yield side
    else:
        raise EdgeKDError(
            f"--baseline {path} is no export folder, bundle or profile JSON; pass the "
            "previous run's `edgekd export --out` folder or its bundle"
        )


def current_side(artifacts: list[Path], kind: str) -> Side:
    """This run: the one export folder among the artifacts."""
    exports = [d for d in artifacts if d.is_dir() and ExportReport.path(d).is_file()]
    if len(exports) != 1:
        raise EdgeKDError(
            f"--baseline compares one export with it, the artifacts hold {len(exports)}; "
            "pass this run's `edgekd export --out` folder"
        )
    return export_side(exports[0], kind)


def margins(budget: Budget) -> dict[str, float]:
    """Each baseline margin: the budget's, else the default."""
    return {
        f: DEFAULT_MARGINS[f] if getattr(budget, f) is None else float(getattr(budget, f))
        for f in REGRESSIONS
    }


def compare(
    budget: Budget,
    baseline: Side,
    now: Side,
    timing: ProfileConfig,
    host: str | None = None,
) -> list[RegressionResult]:
    """Every baseline metric of `budget` (its margins, else the defaults), judged."""
    m = margins(budget)
    out = [size_change(baseline, now, m["max_bytes_regression"])]
    out += [
        row_change(baseline, now, metric, m[f"max_{metric}_drop"])
        for metric in ("accuracy", "agreement")
    ]
    out += latency_change(baseline, now, m["max_latency_regression"], timing, host)
    return out


def size_change(baseline: Side, now: Side, margin: float) -> RegressionResult:
    r = RegressionResult(
        limit="max_bytes_regression", metric="bytes", unit="B", margin=margin, how="exact"
    )
    if not baseline.bytes or now.bytes is None:
        return r.model_copy(update={"note": "the baseline or this run records no model size"})
    return r.model_copy(
        update={
            "baseline": float(baseline.bytes),
            "now": float(now.bytes),
            "worse": now.bytes / baseline.bytes - 1,
        }
    )


def row_change(baseline: Side, now: Side, metric: str, margin: float) -> RegressionResult:
    """Accuracy (against gold) or agreement (against each side's own PyTorch student),
    paired row by row."""
    r = RegressionResult(limit=f"max_{metric}_drop", metric=metric, unit="", margin=margin)
    a, b = baseline.predictions, now.predictions
    if a is None or b is None or baseline.kind is None or now.kind is None:
        whose = "the baseline" if a is None else "this run"
        return r.model_copy(
            update={"note": f"{whose} records no per-row dev predictions; re-export it"}
        )
    if a.rows_sha256 != b.rows_sha256:
        return r.model_copy(
            update={
                "note": "the two runs were scored on different dev rows; export both on "
                "the same data (--data)"
            }
        )
    truth = (np.array(a.labels), np.array(b.labels))
    if metric == "agreement":
        truth = (np.array(a.reference), np.array(b.reference))
    ok_a = np.array(a.models[baseline.kind]) == truth[0]
    ok_b = np.array(b.models[now.kind]) == truth[1]
    worse_rows = int((ok_a & ~ok_b).sum())  # right in the baseline, wrong now
    better_rows = int((~ok_a & ok_b).sum())
    n = len(ok_a)
    lo, hi = paired_drop_ci(worse_rows, better_rows, n)
    return r.model_copy(
        update={
            "baseline": float(ok_a.mean()),
            "now": float(ok_b.mean()),
            "worse": (worse_rows - better_rows) / n,
            "ci95": (lo, hi),
            "how": f"per row, {n:,} rows: {worse_rows} now wrong, {better_rows} now right",
        }
    )


def latency_change(
    baseline: Side, now: Side, margin: float, timing: ProfileConfig, host: str | None
) -> list[RegressionResult]:
    """p50 and p90: both models timed alternately, now/baseline with its interval."""
    from edgekd.devices.profile import profile_model

    rs = [
        RegressionResult(limit="max_latency_regression", metric=metric, unit="ms", margin=margin)
        for metric in REGRESSIONS["max_latency_regression"]
    ]
    if baseline.model is None or now.model is None:
        note = "the baseline holds no model file to time beside this run's; keep it there"
        return [r.model_copy(update={"note": note}) for r in rs]
    device = timing.devices[0]
    result = profile_model(
        baseline.model,
        device,
        timing.threads,
        timing.runs,
        timing.warmup,
        timing.seq_lens[0],
        None,
        timing.trials,
        vs=now.model,
        host=host,
        processes=timing.processes,
    )
    vs = result["vs"]
    how = (
        f"side by side on {result['device']}, {timing.processes} process(es) × "
        f"{timing.trials} trials, seq {timing.seq_lens[0]}"
    )
    out = []
    for r, key in zip(rs, ("", "p90_"), strict=True):
        lo, hi = vs[f"{key}ratio_ci95"]
        out.append(
            r.model_copy(
                update={
                    "baseline": result[r.metric],
                    "now": vs["b"][r.metric],
                    "worse": vs[f"{key}ratio_b_over_a"] - 1,
                    "ci95": (lo - 1, hi - 1),
                    "how": how,
                }
            )
        )
    return out


# ------------------------------------------------------------------ paired accuracy


def paired_drop_ci(worse: int, better: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact interval for the paired drop (worse − better) / n.

    Only the discordant rows carry information (McNemar): given m = worse + better of
    them, `worse` is Binomial(m, p) and the drop is m/n · (2p − 1). A Clopper-Pearson
    interval for p maps to one for the drop. Identical predictions (m = 0) give [0, 0];
    5 rows worse and none better in 872 give [−0.0003, +0.0057]: not yet a regression,
    as McNemar's exact test (p = 2⁻⁵ · 2 = 0.06) says.
    """
    m = worse + better
    if m == 0:
        return 0.0, 0.0
    tail = (1 - level) / 2
    p_lo = 0.0 if worse == 0 else beta_quantile(tail, worse, m - worse + 1)
    p_hi = 1.0 if worse == m else beta_quantile(1 - tail, worse + 1, m - worse)
    return m / n * (2 * p_lo - 1), m / n * (2 * p_hi - 1)


def beta_quantile(q: float, a: float, b: float) -> float:
    """The q-quantile of Beta(a, b), by bisection on its CDF (60 halvings: 1e-18)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if beta_cdf(mid, a, b) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def beta_cdf(x: float, a: float, b: float) -> float:
    """Regularized incomplete beta I_x(a, b) for integer a, b ≥ 1: the binomial tail
    P(Binomial(a + b − 1, x) ≥ a), summed in log space (no overflow at 10⁵ rows)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    n, k0 = int(a + b - 1), int(a)
    lx, l1x = math.log(x), math.log1p(-x)
    logs = [
        math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lx + (n - k) * l1x
        for k in range(k0, n + 1)
    ]
    top = max(logs)
    return min(1.0, math.exp(top) * sum(math.exp(v - top) for v in logs))
