"""The plan stage: which students fit the device, before any is distilled.

Latency, memory and size depend on a student's shape, not its weights: each
candidate of the grid is built untrained (its vocabulary from the task's training
texts, as distillation builds it), exported exactly as a trained student would be
(the export config, int8 and its guard included), bundled, and profiled on the
target device. The budget's shape limits (`max_bytes`, `max_p90_ms`,
`max_peak_rss_mb`, `max_init_ms`) are judged on those measurements; accuracy limits
wait for the distilled student. Candidates that fit come first, the largest (most
parameters, the most capacity to learn) first: `variants: plan` in a recipe
distils the top ones. `benchmarks/plan_sst2.py` measures how well an untrained
candidate's latency predicts its trained student's.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from edgekd.artifacts import CONFIG, BundleManifest, Candidate, PlanResult, TaskShape
from edgekd.budget import Budget, evaluate, load_budget
from edgekd.config import DEFAULT_WARMUP, DistillConfig, PlanConfig, save_config
from edgekd.errors import EdgeKDError
from edgekd.io import atomic_dir, check_not_input, check_output
from edgekd.progress import console, shown
from edgekd.registry import STUDENTS, Component

# Limits an untrained student can be judged on: they depend on shape alone.
SHAPE_LIMITS = ("max_bytes", "max_p90_ms", "max_peak_rss_mb", "max_init_ms")


# Short keys for the grid's options in candidate names (bilstm-h150-e64); another option
# keeps its own name.
SHORT = {
    "hidden_size": "h",
    "embedding_dim": "e",
    "mlp_size": "m",
    "filters": "k",
    "layers": "l",
    "hidden": "w",
    "heads": "a",
    "ffn": "f",
}


def candidate_name(c: Component) -> str:
    """A plain folder name from the student and its options: bilstm-h150-e64, bert-l2-w128…"""
    order = list(SHORT)
    keys = sorted(c.options, key=lambda k: (order.index(k) if k in SHORT else len(order), k))
    parts = [f"{SHORT.get(k, k)}{c.options[k]}" for k in keys]
    return "-".join([c.name, *parts]).replace("/", "_")


def plan(
    cfg: PlanConfig,
    budget: Budget | str | Path,
    out_dir: str | Path,
    overwrite: bool = False,
    written_grid: bool | None = None,
) -> PlanResult:
    """Build, export, bundle and profile every candidate of `cfg.grid` untrained; judge
    each on `budget`'s shape limits (a model or its YAML, for `cfg.device`); write
    `plan.json` in `out_dir`. `written_grid`: whether the user wrote the grid (unset:
    whether `cfg` sets it), so that a candidate the teacher cannot give is refused
    rather than left out."""
    from edgekd.devices.base import load_spec
    from edgekd.stages.check import budget_for

    budget = budget if isinstance(budget, Budget) else load_budget(budget)
    check_output(out_dir, overwrite)
    check_not_input(out_dir, [cfg.teacher, cfg.data.spec])
    spec = load_spec(cfg.device, host=cfg.host)  # a bad device fails before any work
    defaults = None if spec.name in budget.devices else spec.budget
    b = budget_for(budget, spec.name, spec.threads_for(cfg.threads), defaults)
    limits = {f: float(getattr(b, f)) for f in SHAPE_LIMITS if getattr(b, f) is not None}
    if not limits:
        raise EdgeKDError(
            f"the budget sets none of {', '.join(SHAPE_LIMITS)} for {spec.name}: a plan has "
            "nothing to fit; set one (e.g. max_p90_ms: 5)"
        )
    names = [candidate_name(c) for c in cfg.grid]
    if len(set(names)) < len(names):
        raise EdgeKDError("plan grid lists one candidate twice; drop the copy")

    from edgekd.data import align_labels, load_task, median_tokens
    from edgekd.distill.teacher import load_teacher, teacher_label_names

    data = load_task(cfg.data)
    teacher, teacher_tok = load_teacher(cfg.teacher)
    # Labels in the teacher's order before the selection is carved, as distill does: the
    # selection draws label by label, so another order holds out other rows.
    task, shape = training_rows(align_labels(data, teacher_label_names(teacher.config)))
    console.print(f"plan: a default distill run would train on {shape.describe()}")
    if written_grid is None:
        written_grid = "grid" in cfg.model_fields_set
    # Every candidate built before any is exported or timed: one this teacher cannot
    # give (more layers than it has) stops a grid the user wrote before any work, and
    # leaves the default grid, which the user did not choose, with the rest.
    built: dict[str, tuple[Component, Any, Any]] = {}
    skipped: dict[str, str] = {}
    for name, c in zip(names, cfg.grid, strict=True):
        try:
            built[name] = (c, *build(c, task, teacher, teacher_tok))
        except ValueError as e:  # options that fit the config model but not this teacher
            why = str(e).splitlines()[0]
            if written_grid:
                raise EdgeKDError(f"plan candidate {name}: {why}; fix the grid") from None
            skipped[name] = why
            console.print(f"plan: {shown(name)} left out of the default grid: {shown(why)}")
    if not built:
        raise EdgeKDError(
            "no candidate of the default grid can be built from this teacher; give "
            "candidates it can with --grid"
        )
    seq_len = cfg.seq_len or median_tokens(teacher_tok, task.dev.texts)
    shape_only = Budget(**{f: b.model_dump()[f] for f in SHAPE_LIMITS}, threads=b.threads)
    candidates = []
    with atomic_dir(out_dir, overwrite) as tmp, tempfile.TemporaryDirectory() as work:
        for name in list(built):
            c, model, tok = built.pop(name)  # each candidate freed once measured
            console.print(f"plan: {shown(name)}")  # one plain line per candidate (CI logs)
            m = measure(model, tok, task, cfg, Path(work) / name, b.threads, seq_len)
            failed = [r.limit for r in evaluate(shape_only, m["metrics"]) if not r.passed]
            candidates.append(
                Candidate(
                    name=name,
                    student=c.model_dump(),
                    params=m["params"],
                    model=m["model"],
                    bytes=m["bytes"],
                    bundle_bytes=m["bundle_bytes"],
                    fits=not failed,
                    failed=failed,
                    **{
                        k: m["metrics"].get(k)
                        for k in ("p50_ms", "p90_ms", "peak_rss_mb", "load_ms")
                    },
                )
            )
        result = PlanResult(
            device=spec.name,
            threads=b.threads,
            seq_len=seq_len,
            limits=limits,
            candidates=rank(candidates),
            task_shape=shape,
            skipped=skipped,
        )
        result.write(tmp)
        save_config(cfg, tmp / CONFIG)
    return result


def training_rows(task: Any) -> tuple[Any, TaskShape]:
    """`task` with the training rows distillation builds a vocabulary from: training
    minus the selection rows it holds out (its defaults), so a candidate's embedding
    table has the trained student's rows; and what a default run sizes from them."""
    from edgekd.data import carve_selection, varied_rows

    defaults = DistillConfig(teacher="-")
    train, select, _ = carve_selection(task.train, defaults.selection_rows, defaults.seed)
    varied = len(varied_rows(train.texts, defaults.augment.sources))
    shape = TaskShape.of(
        train.labels, task.num_labels, len(select), defaults.augment, defaults.time_budget, varied
    )
    return replace(task, train=train), shape


def rank(candidates: list[Candidate]) -> list[Candidate]:
    """Fitting candidates first, most parameters first (the most capacity that fits);
    then the rest, smallest first (the nearest to fitting)."""
    fit = sorted((c for c in candidates if c.fits), key=lambda c: (-c.params, c.p90_ms or 0))
    rest = sorted((c for c in candidates if not c.fits), key=lambda c: c.params)
    return fit + rest


def build(c: Component, task: Any, teacher: Any, teacher_tok: Any) -> tuple[Any, Any]:
    """(model, tokenizer) of candidate `c` untrained, as a distill run on this task would
    start it; ValueError where this teacher cannot give it."""
    import torch

    from edgekd.students.tokenizer import is_wordpiece

    torch.manual_seed(0)
    kind = STUDENTS.get(c.name)
    # The options a distill run on this task resolves (a small task's table is larger).
    options = kind.for_task(c.options, len(task.train.texts), is_wordpiece(teacher_tok))
    return kind.prepare(options, task.train.texts, task.num_labels, teacher, teacher_tok)


def measure(
    model: Any,
    tok: Any,
    task: Any,
    cfg: PlanConfig,
    folder: Path,
    threads: int,
    seq_len: int,
) -> dict[str, Any]:
    """One candidate untrained (`build`): exported as configured, bundled, profiled."""
    from edgekd.devices.profile import profile_model
    from edgekd.stages.bundle import make_bundle
    from edgekd.stages.export import export as run_export
    from edgekd.students.base import save_student

    (folder / "student").mkdir(parents=True)
    save_student(folder / "student", model.eval(), tok, task.label_names)
    report = run_export(cfg.export, folder / "student", folder / "export", cfg.data)
    shipped = report.shipped()
    path = folder / "export" / report.models[shipped].path
    make_bundle(folder / "export", folder / "bundle", shipped)
    prof = profile_model(
        path,
        cfg.device,
        threads,
        cfg.runs,
        min(DEFAULT_WARMUP, cfg.runs),  # the profile's warm-up, within the runs
        seq_len,
        None,
        cfg.trials,
        host=cfg.host,
    )
    metrics = {
        "bytes": report.models[shipped].bytes,
        **{k: prof.get(k) for k in ("p50_ms", "p90_ms", "peak_rss_mb", "load_ms")},
    }
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "model": shipped,
        "bytes": report.models[shipped].bytes or path.stat().st_size,
        "bundle_bytes": BundleManifest.read(folder / "bundle").bytes,
        "metrics": {k: float(v) for k, v in metrics.items() if v is not None},
    }
