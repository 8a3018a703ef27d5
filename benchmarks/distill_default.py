"""The default student, tried as a new user would: SST-2 and CoLA, 3 seeds each.

    python benchmarks/distill_default.py [--shared ../shared] [--seeds 0 1 2]
        [--tasks [sst2] [cola]] [--no-growth] [--no-load]
        [--sweep 5 10 15 30 60 [--loaded] [--sweep-only]] [--quickstart[-only]]
        [--lever FIELD=VALUE ... [--arms-only]] [--reexport]

Per task and seed, from a cold teacher-logit cache (a fresh $EDGEKD_CACHE per run),
the commands of the README, each in its own process:

    edgekd distill --student bilstm --teacher T --data D --out S --seed N
    edgekd export S --out E --int8
    edgekd bundle E --out B

then the bundle scores dev through `edgekd.stages.bundle.Bundle` (what `edgekd
predict` runs: onnxruntime + numpy). Reported: the teacher's dev accuracy (and MCC
for CoLA), the bundle's, their ratio (retention), bundle bytes, the selection
accuracy that chose the epoch, wall time by phase and peak RSS. The SST-2 teacher is
the reference one in ../shared/models; CoLA's is fine-tuned here by `edgekd teacher`
(its defaults: the packaged MiniLM, 2 epochs) and kept in runs/bench-default.

Then the cost growth of augmentation (4,000 SST-2 rows, `tang` with n_iter 1, 5, 20
and 50 over every row, one epoch: transfer rows, wall, peak RSS; the teacher labels with
its int8 ONNX at every size, where `auto` would pick PyTorch under 20,000 rows and
the ONNX export over it, so the rows alone differ), and the labelling and
training rates quiet and under a concurrent CPU load (benchmarks/labelling_load.py,
run as part of this one). Medians over seeds.

`--sweep MINUTES...`: the budget sweep (issue 31). The same commands with
`--time-budget M` for each M, per task and seed: retention, epochs, augmented rows
labelled, and the distill wall used ÷ granted (a run given M minutes should end
between 90% and 102% of them unless it ran out of rows and epochs worth training).
With `--loaded`, each sweep run shares the cores with another process keeping both
busy (a 2-thread matmul loop). `--sweep-only`: the sweep alone (the default-budget
runs, growth and load sections keep their last results). Each (task, load, budget)
row is kept beside the others, with the revision that measured it.

`--quickstart`: per task and seed, `edgekd quickstart --data D --teacher T --seed N`
as the README types it (its recipe: `tang` variants, a 10-minute distill budget, the
teacher's and the student's profiles, the budget check), then `edgekd bundle` of its
export, scored like the runs above; the quickstart's wall, its check's exit code and
its distill's epochs beside. `--quickstart-only`: that section alone (the others keep
their last results).

`--lever FIELD=VALUE` (repeatable; each one arm): the lever ablation on this path.
Per task and seed, the default run and the same with `-s FIELD=VALUE`, one after the
other (side by side in one benchmark run, so both arms meet the same machine), each
scored through its bundle like the rest. The default arm's runs are the default-budget
section's (one run serves both). With `--sweep M...`, the arms run under each budget
instead (`--loaded`: beside the load), and the defaults' arm is that budget's sweep row.
Each (task, arm, budget, revision) row is kept beside the others, measured or not at
this revision. `--arms-only`: the `--lever` arms alone, to be read beside the budget
sweep's row of the same budget (its own revision named): for a change that leaves the
defaults' path as it was, where rerunning them would double the run. It runs no
default-budget, growth or load section.

`--reexport`: after a change to export or bundle alone, the students behind the
default-budget and sweep rows export, bundle and score again at this revision, and
nothing is trained: each row whose every run folder is in runs/bench-default (trained
at the row's revision) gets its new scores and bundle bytes and names both revisions,
trained at one, exported at the other. A budget's run is never rerun for this: its
clock would cut training elsewhere, and the student would be another one.

Writes benchmarks/results/distill_default.json and distill_default.md.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import smoke  # benchmarks/ is on the path of its own scripts

from edgekd.io import tree_bytes

REPO = Path(__file__).resolve().parents[1]
RUNS = smoke.runs_dir(REPO / "runs" / "bench-default")
# Smoke: what a command trains on (the README's commands run whole otherwise).
SMALL = ["--max-train", str(smoke.ROWS), "--epochs", "1"] if smoke.SMOKE else []
# (n_iter, its label) of the growth section; under smoke one size (each takes one path).
GROWTH = smoke.pick(((1, "1×"), (5, "5×"), (20, "20×"), (50, "50×")), ((1, "1×"),))


def revision() -> str:
    """The code a figure was measured with: the commit, `-dirty` with local changes
    outside benchmarks/results (the results of an earlier section, not yet committed,
    change no code)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
         ":(exclude)benchmarks/results"],
        cwd=REPO, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    return f"{commit}-dirty" if commit and changed else commit or "unknown"


def cpu() -> str:
    """The CPU a figure was measured on: a budget is minutes, so what it buys (epochs,
    rows) and the score that follows depend on it (SST-2's default student trained 8
    epochs in 13 minutes at 74b704f and 3 at e50e7d8, on 2 cores of other CPUs)."""
    from edgekd.devices.agent import cpu_model

    return cpu_model()


def run(argv: list[str], env: dict[str, str], codes: tuple[int, ...] = (0,)) -> dict[str, float]:
    """Run one command; its wall seconds, peak RSS (MB, from its own rusage) and exit
    code, which must be one of `codes` (a gate's 1, a failed check, is a result)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in codes:
        raise SystemExit(f"failed ({code}): {' '.join(argv)}")
    return {"wall_s": round(wall, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "code": code}


def slug(setting: str) -> str:
    """`FIELD=VALUE` as one file or folder name, whatever the value holds ('/', spaces)."""
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", setting)


def edgekd(*args: str) -> list[str]:
    return [sys.executable, "-m", "edgekd", *args]


def mcc(pred: list[int], gold: list[int]) -> float:
    """Matthews correlation (binary), CoLA's metric."""
    tp = sum(p == 1 and g == 1 for p, g in zip(pred, gold, strict=True))
    tn = sum(p == 0 and g == 0 for p, g in zip(pred, gold, strict=True))
    fp = sum(p == 1 and g == 0 for p, g in zip(pred, gold, strict=True))
    fn = sum(p == 0 and g == 1 for p, g in zip(pred, gold, strict=True))
    den = ((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)) ** 0.5
    return (tp * tn - fp * fn) / den if den else 0.0


def dev_scores(predict: Any, data: Path, label_names: list[str]) -> dict[str, float]:
    """Accuracy and MCC of `predict(texts) → label names` on `data`'s dev split."""
    from edgekd.config import DataConfig
    from edgekd.data import align_labels, load_task

    task = align_labels(load_task(DataConfig(spec=str(data))), label_names)
    names = predict(task.dev.texts)
    pred = [label_names.index(n) for n in names]
    gold = list(task.dev.labels)
    acc = sum(p == g for p, g in zip(pred, gold, strict=True)) / len(gold)
    return {"accuracy": acc, "mcc": mcc(pred, gold)}


def finished(folder: Path) -> dict | None:
    """The result a run left in `folder` at this revision (an interrupted benchmark
    reuses finished runs); else None, and `folder` emptied for the run."""
    if (folder / "result.json").is_file():
        done = json.loads((folder / "result.json").read_text())
        if done.get("revision") == revision() and not revision().endswith("-dirty"):
            return dict(done)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return None


def bundle_scores(folder: Path, data: Path, label_names: list[str]) -> dict[str, float]:
    """Dev scores of the bundle in `folder`, through `Bundle` (what `edgekd predict`
    runs: onnxruntime + numpy)."""
    from edgekd.stages.bundle import Bundle

    bundle = Bundle(folder, threads=0)

    def predict(texts: list[str]) -> list[str]:
        return [r["label"] for r in bundle.predict(texts)]

    return dev_scores(predict, data, label_names)


def teacher_scores(teacher: Path, data: Path) -> tuple[dict[str, float], list[str]]:
    from edgekd.distill.teacher import load_predictor

    predictor = load_predictor(teacher)
    names = predictor.label_names

    def predict(texts: list[str]) -> list[str]:
        return [names[i] for i in predictor.logits(texts).argmax(1)]

    return dev_scores(predict, data, names), names


def cola_teacher(shared: Path, env: dict[str, str]) -> Path:
    out = RUNS / "cola-teacher"
    if not (out / "metrics.json").is_file():
        run(
            edgekd("teacher", "--data", str(shared / "data" / "cola"), "--out", str(out), *SMALL),
            env,
        )
    return out


def one_run(
    task: str,
    teacher: Path,
    data: Path,
    seed: int,
    env: dict[str, str],
    budget: float | None = None,
    loaded: bool = False,
    settings: tuple[str, ...] = (),
) -> dict:
    """One seed's distill, export and bundle; with `budget`, under `--time-budget
    budget` (and, `loaded`, beside a 2-core load for the distill); `settings`: distill's
    `-s FIELD=VALUE` overrides beside the defaults (other benchmarks' arms)."""
    folder = run_folder(task, seed, budget, loaded, settings)
    done = finished(folder)
    if done is not None:
        return done
    cache = Path(tempfile.mkdtemp(prefix="edgekd-cold-"))
    env = {**env, "EDGEKD_CACHE": str(cache)}  # cold: the teacher labels everything
    s, b = folder / "student", folder / "bundle"
    minutes = [] if budget is None else ["--time-budget", f"{budget:g}"]
    from labelling_load import hog  # (it imports this module: not at the top)

    load = hog(60 * (budget or 0) + 600) if loaded else None
    try:
        distill = run(
            edgekd("distill", "--student", "bilstm", "--teacher", str(teacher), "--data",
                   str(data), "--out", str(s), "--seed", str(seed), *minutes, *SMALL,
                   *(arg for setting in settings for arg in ("-s", setting))),
            env,
        )  # fmt: skip
    finally:
        if load is not None:
            load.kill()
            load.wait()
    phases = {"distill": distill, **export_and_bundle(folder, env)}
    shutil.rmtree(cache, ignore_errors=True)
    metrics = json.loads((s / "metrics.json").read_text())
    scores = bundle_scores(b, data, metrics["labels"])
    result = {
        "task": task,
        "seed": seed,
        "revision": revision(),
        "cpu": cpu(),
        "student": scores,
        "bundle_bytes": tree_bytes(b),
        "selection_accuracy": metrics.get("selection_accuracy"),
        "best_epoch": metrics["best_epoch"],
        "epochs_run": metrics["epochs_run"],
        "n_train": metrics["n_train"],
        "n_augmented": metrics["n_augmented"],
        "n_selection": metrics["n_selection"],
        "time_plan": metrics.get("time_plan"),
        "teacher_runtime": metrics.get("teacher_runtime"),
        "distill_seconds": metrics["seconds"],
        "phases": phases,
        "total_wall_s": round(sum(p["wall_s"] for p in phases.values()), 1),
        "budget_min": budget,
        "loaded": loaded,
        # The distill process's wall clock (its start-up included) ÷ the minutes granted.
        "used_of_granted": None if budget is None else distill["wall_s"] / (60 * budget),
        "history": metrics["history"],  # per epoch: losses, selection and dev scores
        "ended_by": (metrics.get("time_plan") or {}).get("why"),
        "cut_after": (metrics.get("time_plan") or {}).get("cut_after"),
    }
    (folder / "result.json").write_text(json.dumps(result, indent=2))
    return result


def run_folder(
    task: str,
    seed: int,
    budget: float | None = None,
    loaded: bool = False,
    settings: tuple[str, ...] = (),
) -> Path:
    name = f"{task}-seed{seed}"
    if budget is not None:
        name += f"-{budget:g}min" + ("-loaded" if loaded else "")
    return RUNS / (name + "".join(f"-{slug(setting)}" for setting in settings))


def export_and_bundle(folder: Path, env: dict[str, str], *again: str) -> dict[str, dict]:
    """`edgekd export --int8` and `edgekd bundle` of the student in `folder` (`again`:
    `--overwrite`, replacing what they wrote before)."""
    s, e, b = folder / "student", folder / "export", folder / "bundle"
    return {
        "export": run(edgekd("export", str(s), "--out", str(e), "--int8", *again), env),
        "bundle": run(edgekd("bundle", str(e), "--out", str(b), *again), env),
    }


def reexport(result: dict[str, Any], shared: Path, env: dict[str, str]) -> list[str]:
    """`--reexport`: the default-budget, sweep and lever rows whose every run folder is
    here, trained at the row's revision, exported, bundled and scored again at this one
    (their medians and bundle bytes with them). Each run keeps what its own export
    measured under `reexported.before`, beside the re-export's revision, CPU and
    timings. Return the rows it changed."""
    changed = []
    done: dict[Path, dict[str, Any]] = {}  # a folder behind two rows is exported once
    sections = [(s, result.get(s, {})) for s in ("tasks", "sweep", "levers")]
    for section, rows in sections:
        for key, row in rows.items():
            # A lever row's key: `task | arm | revision` or `task | arm | M min | revision`.
            arm = key.split(" | ")[1] if section == "levers" else "defaults"
            settings = () if arm == "defaults" else tuple(arm.split())
            folders = [
                run_folder(
                    r["task"], r["seed"], r.get("budget_min"), r.get("loaded", False), settings
                )
                for r in row["runs"]
            ]
            trained = [
                json.loads((f / "result.json").read_text()).get("revision")
                if (f / "result.json").is_file() and (f / "student").is_dir()
                else None
                for f in folders
            ]
            if trained != [r["revision"] for r in row["runs"]]:
                continue
            for r, folder in zip(row["runs"], folders, strict=True):
                before = r.get("reexported", {}).get("before") or {
                    "student": r["student"], "bundle_bytes": r["bundle_bytes"]
                }  # fmt: skip
                if folder not in done:
                    phases = export_and_bundle(folder, env, "--overwrite")
                    metrics = json.loads((folder / "student" / "metrics.json").read_text())
                    b = folder / "bundle"
                    done[folder] = {
                        "student": bundle_scores(b, shared / "data" / r["task"], metrics["labels"]),
                        "bundle_bytes": tree_bytes(b),
                        "reexported": {"revision": revision(), "cpu": cpu(), "phases": phases},
                    }  # fmt: skip
                r.update(done[folder])
                r["reexported"] = {**done[folder]["reexported"], "before": before}
                (folder / "result.json").write_text(json.dumps(r, indent=2))
            row["median"].update(median_scores(row["runs"], row["teacher"]))
            if "bundle_bytes" in row["median"]:
                row["median"]["bundle_bytes"] = statistics.median(
                    r["bundle_bytes"] for r in row["runs"]
                )
            row["export_revision"] = revision()
            changed.append(f"{section}: {key}")
    return changed


def quickstart_run(task: str, teacher: Path, data: Path, seed: int, env: dict[str, str]) -> dict:
    """One seed's `edgekd quickstart` (cold teacher-logit cache), its export bundled and
    scored through the bundle like `one_run`'s."""
    folder = RUNS / f"{task}-seed{seed}-quickstart"
    done = finished(folder)
    if done is not None:
        return done
    cache = Path(tempfile.mkdtemp(prefix="edgekd-cold-"))
    env = {**env, "EDGEKD_CACHE": str(cache)}
    q, b = folder / "quickstart", folder / "bundle"
    # Smoke: the distill's rows capped, and the profiles' fewest calls.
    small = ["-s", f"distill.augment.max_rows={smoke.AUGMENTED}", "-s",
             f"profile.runs={smoke.RUNS}", "-s", f"profile.trials={smoke.TRIALS}"]  # fmt: skip
    # Exit 1 is the budget check failing (the student over 6 points under its teacher):
    # a result to report, not a broken run.
    quick = run(
        edgekd("quickstart", "--data", str(data), "--teacher", str(teacher), "--out", str(q),
               "--seed", str(seed), *SMALL, *(small if smoke.SMOKE else [])),
        env, codes=(0, 1),
    )  # fmt: skip
    packed = run(edgekd("bundle", str(q / "student" / "export"), "--out", str(b)), env)
    shutil.rmtree(cache, ignore_errors=True)
    metrics = json.loads((q / "student" / "student" / "metrics.json").read_text())
    result = {
        "task": task,
        "seed": seed,
        "revision": revision(),
        "cpu": cpu(),
        "student": bundle_scores(b, data, metrics["labels"]),
        "bundle_bytes": tree_bytes(b),
        "epochs_run": metrics["epochs_run"],
        "best_epoch": metrics["best_epoch"],
        "n_augmented": metrics["n_augmented"],
        "time_plan": metrics.get("time_plan"),
        "distill_seconds": metrics["seconds"],
        "quickstart": quick,
        "bundle": packed,
        "check_code": quick["code"],
        # The distill stage's own seconds (in the quickstart's process) ÷ its budget.
        "used_of_granted": (
            sum(metrics["seconds"].values()) / metrics["time_plan"]["budget_s"]
            if metrics.get("time_plan")
            else None
        ),
    }
    (folder / "result.json").write_text(json.dumps(result, indent=2))
    return result


def growth(shared: Path, env: dict[str, str]) -> list[dict]:
    """4,000 SST-2 rows, tang over every row with n_iter 1 / 5 / 20 / 50, one epoch."""
    rows, train = [], str(smoke.at_most(4000, smoke.ROWS))
    for n_iter, factor in GROWTH:
        cache = Path(tempfile.mkdtemp(prefix="edgekd-cold-"))
        out = RUNS / f"growth-{n_iter}"
        shutil.rmtree(out, ignore_errors=True)
        cost = run(
            edgekd("distill", "--teacher", str(shared / "models" / "sst2-minilm-teacher"),
                   "--data", str(shared / "data" / "sst2"), "--out", str(out),
                   "--max-train", train, "--augment", "tang", "--n-iter", str(n_iter),
                   "-s", "augment.sources=all", "--epochs", "1",
                   "-s", "teacher_runtime=onnx-int8"),
            {**env, "EDGEKD_CACHE": str(cache)},
        )  # fmt: skip
        shutil.rmtree(cache, ignore_errors=True)
        m = json.loads((out / "metrics.json").read_text())
        rows.append(
            {"augmentation": factor, "n_iter": n_iter,
             "transfer_rows": m["n_train"] + m["n_augmented"], **cost}
        )  # fmt: skip
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    # `--tasks` with none: the growth and load sections only.
    p.add_argument("--tasks", nargs="*", default=["sst2", "cola"], choices=["sst2", "cola"])
    p.add_argument("--no-growth", action="store_true")
    p.add_argument("--no-load", action="store_true")
    p.add_argument("--sweep", type=float, nargs="*", default=[], help="Budgets (minutes).")
    p.add_argument("--loaded", action="store_true", help="Sweep beside a 2-core load.")
    p.add_argument("--sweep-only", action="store_true")
    p.add_argument("--quickstart", action="store_true", help="Also run `edgekd quickstart`.")
    p.add_argument("--quickstart-only", action="store_true")
    p.add_argument(
        "--lever", action="append", default=[], metavar="FIELD=VALUE",
        help="An arm beside the defaults on the same seeds (repeat for more arms; "
        "space-separated settings make one arm).",
    )  # fmt: skip
    p.add_argument(
        "--arms-only", action="store_true",
        help="Run the --lever arms without the defaults' arm (each read beside the budget "
        "sweep's row of its budget).",
    )  # fmt: skip
    p.add_argument(
        "--reexport", action="store_true",
        help="Train nothing: export, bundle and score again the students of the rows found "
        "under runs/bench-default (after an export change).",
    )  # fmt: skip
    args = p.parse_args()
    if args.arms_only and not args.lever:
        p.error("--arms-only runs the --lever arms: name at least one")
    args.seeds = args.seeds[: smoke.at_most(len(args.seeds), smoke.REPEATS)]
    shared = args.shared.resolve()
    env = dict(os.environ)
    RUNS.mkdir(parents=True, exist_ok=True)
    if args.reexport:
        kept = REPO / "benchmarks" / "results" / "distill_default.json"
        result = json.loads(kept.read_text())
        changed = reexport(result, shared, env)
        print("re-exported:", "; ".join(changed) or "no row's runs are here")
        write(result)
        return
    tasks: dict[str, Any] = {}
    sweep: dict[str, Any] = {}
    quick: dict[str, Any] = {}
    levers: dict[str, Any] = {}
    for task in args.tasks:
        if args.lever or args.sweep:
            arms, defaults = arm_runs(task, shared, args, env)
            levers.update(arms if args.lever else {})
            sweep.update(defaults)  # under --sweep the defaults' arm is the sweep's row
        if args.quickstart or args.quickstart_only:
            quick[task] = quickstart_section(task, shared, args.seeds, env)
        if args.sweep_only or args.quickstart_only or args.arms_only:
            continue
        data, teacher = shared / "data" / task, task_teacher(task, shared, env)
        t_scores, _ = teacher_scores(teacher, data)
        runs = [one_run(task, teacher, data, seed, env) for seed in args.seeds]
        med = statistics.median
        tasks[task] = {
            "revision": revision(),
            "teacher": t_scores,
            "runs": runs,
            "median": {
                **median_scores(runs, t_scores),
                "bundle_bytes": med(r["bundle_bytes"] for r in runs),
                "total_wall_s": med(r["total_wall_s"] for r in runs),
                **{
                    f"{phase}_s": med(r["distill_seconds"].get(phase, 0.0) for r in runs)
                    for phase in runs[0]["distill_seconds"]
                },
                "export_s": med(r["phases"]["export"]["wall_s"] for r in runs),
                "bundle_s": med(r["phases"]["bundle"]["wall_s"] for r in runs),
                "peak_rss_mb": med(r["phases"]["distill"]["peak_rss_mb"] for r in runs),
            },
        }
    # Sections not measured in this run (other tasks, --no-growth, --no-load) keep their
    # last measured values, each stamped with the revision that measured it; a smoke
    # run's are no measurement, and a smoke run keeps none.
    previous_path = REPO / "benchmarks" / "results" / "distill_default.json"
    previous = json.loads(previous_path.read_text()) if previous_path.is_file() else {}
    if smoke.SMOKE or previous.get("smoke"):
        previous = {}
    result: dict[str, Any] = {
        "smoke": smoke.SMOKE,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "tasks": {**previous.get("tasks", {}), **tasks},
        "sweep": {**previous.get("sweep", {}), **sweep},
        "quickstart": {**previous.get("quickstart", {}), **quick},
        "levers": {**previous.get("levers", {}), **levers},
    }
    if args.sweep_only or args.quickstart_only or args.arms_only:
        args.no_growth = args.no_load = True
    if not args.no_growth:
        result["growth"] = {"revision": revision(), "rows": growth(shared, env)}
    elif "growth" in previous:
        result["growth"] = previous["growth"]
    if not args.no_load:
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "labelling_load.py")], check=True)
        load = REPO / "benchmarks" / "results" / "labelling_load.json"
        result["load"] = {"revision": revision(), "rows": json.loads(load.read_text())}
    elif "load" in previous:
        result["load"] = previous["load"]
    write(result)


def median_scores(runs: list[dict], teacher: dict[str, float]) -> dict[str, float]:
    """The bundle's accuracy and MCC over seeds (medians), and accuracy ÷ the teacher's."""
    accuracy = statistics.median(r["student"]["accuracy"] for r in runs)
    return {
        "accuracy": accuracy,
        "mcc": statistics.median(r["student"]["mcc"] for r in runs),
        "retention": accuracy / teacher["accuracy"],
    }


def quickstart_section(task: str, shared: Path, seeds: list[int], env: dict) -> dict:
    """Every seed's quickstart on `task`, and their medians."""
    data, teacher = shared / "data" / task, task_teacher(task, shared, env)
    t_scores, _ = teacher_scores(teacher, data)
    runs = [quickstart_run(task, teacher, data, seed, env) for seed in seeds]
    med = statistics.median
    return {
        "revision": revision(),
        "teacher": t_scores,
        "runs": runs,
        "median": {
            **median_scores(runs, t_scores),
            "bundle_bytes": med(r["bundle_bytes"] for r in runs),
            "wall_s": med(r["quickstart"]["wall_s"] for r in runs),
            "epochs_run": med(r["epochs_run"] for r in runs),
        },
    }


def task_teacher(task: str, shared: Path, env: dict[str, str]) -> Path:
    if task == "sst2":
        return shared / "models" / "sst2-minilm-teacher"
    return cola_teacher(shared, env)


def arm_runs(task: str, shared: Path, args: argparse.Namespace, env: dict) -> tuple[dict, dict]:
    """Per budget (`--sweep`'s, else the default) and seed, the default run then each
    `--lever` arm's (side by side: the same machine, minutes apart): rows keyed `task |
    arm | revision` (`task | arm | M min | revision` under a budget), the defaults' arm
    included; and, under a budget, the defaults' arm again as the sweep's rows, keyed
    `task | quiet|loaded | M min` (with no `--lever`, the budget sweep alone)."""
    data, teacher = shared / "data" / task, task_teacher(task, shared, env)
    t_scores, _ = teacher_scores(teacher, data)
    rows: dict[str, dict] = {}
    sweep: dict[str, dict] = {}
    for minutes in args.sweep or [None]:
        arms: dict[str, list[dict]] = {
            **({} if args.arms_only else {"defaults": []}),
            **{lever: [] for lever in args.lever},
        }
        for seed in args.seeds:
            for arm, runs in arms.items():
                # One arm may set several fields: "batch_size=100 lr=0.0014".
                settings = () if arm == "defaults" else tuple(arm.split())
                runs.append(one_run(task, teacher, data, seed, env, minutes, args.loaded, settings))
        budget = (
            "" if minutes is None else f" | {minutes:g} min" + (" loaded" if args.loaded else "")
        )
        for arm, runs in arms.items():
            row = row_of(runs, t_scores, "epochs_run", "n_augmented", "bundle_bytes",
                         *(("used_of_granted",) if minutes is not None else ()))  # fmt: skip
            rows[f"{task} | {arm}{budget} | {revision()}"] = row
        if minutes is not None and "defaults" in arms:
            key = f"{task} | {'loaded' if args.loaded else 'quiet'} | {minutes:g} min"
            sweep[key] = row_of(
                arms["defaults"], t_scores, "epochs_run", "n_augmented", "used_of_granted"
            )
    return rows, sweep


def row_of(runs: list[dict], teacher: dict[str, float], *medians: str) -> dict:
    """One table row of `runs`: their scores' medians and those of the `medians` keys."""
    return {
        "revision": revision(),
        "teacher": teacher,
        "runs": runs,
        "median": {
            **median_scores(runs, teacher),
            **{key: statistics.median(r[key] for r in runs) for key in medians},
        },
    }


def write(result: dict[str, Any]) -> None:
    out = REPO / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "distill_default.json").write_text(json.dumps(result, indent=2))
    lines = [
        "# The default student (`edgekd distill --student bilstm`, export --int8, bundle)",
        "",
        f"{result['machine']}; cold teacher-logit cache per run; medians over seeds.",
        "",
        "| task | seeds | teacher acc | teacher MCC | bundle acc (int8) | MCC | retention | "
        "bundle bytes | wall (distill+export+bundle) | revision | CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task, t in result["tasks"].items():
        m = t["median"]
        lines.append(
            f"| {task} | {len(t['runs'])} | {t['teacher']['accuracy']:.4f} | "
            f"{t['teacher']['mcc']:.3f} | {m['accuracy']:.4f} | {m['mcc']:.3f} | "
            f"{m['retention']:.2%} | {m['bundle_bytes']:,.0f} | "
            f"{m['total_wall_s'] / 60:.1f} min | {revisions(t)} | {cpus(t['runs'])} |"
        )
    lines += ["", "| task | seed | bundle acc | selection acc (chose the epoch) | epochs | "
              "augmented rows | wall by phase (s) |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for task, t in result["tasks"].items():
        for r in t["runs"]:
            phases = ", ".join(f"{k} {v:.0f}" for k, v in r["distill_seconds"].items())
            phases += f", export {r['phases']['export']['wall_s']:.0f}"
            phases += f", bundle {r['phases']['bundle']['wall_s']:.0f}"
            sel = r["selection_accuracy"]
            lines.append(
                f"| {task} | {r['seed']} | {r['student']['accuracy']:.4f} | "
                f"{'—' if sel is None else f'{sel:.4f}'} | {r['best_epoch']}/{r['epochs_run']} | "
                f"{r['n_augmented']:,} | {phases} |"
            )
    if result.get("sweep"):
        lines += ["", "Budget sweep (`--sweep`): the same commands under `--time-budget M`; "
                  "medians over seeds; used = the distill process's wall ÷ the minutes "
                  "granted.", "",
                  "| task | machine | budget | seeds | bundle acc | MCC | retention | epochs | "
                  "augmented rows | used | each seed | revision | CPU |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for key, row in result["sweep"].items():
            task, load, budget = key.split(" | ")
            m = row["median"]
            each = ", ".join(
                f"{r['student']['accuracy']:.4f} ({r['epochs_run']} ep, "
                f"{100 * r['used_of_granted']:.0f}%)"
                for r in row["runs"]
            )
            lines.append(
                f"| {task} | {load} | {budget} | {len(row['runs'])} | {m['accuracy']:.4f} | "
                f"{m['mcc']:.3f} | {m['retention']:.2%} | {m['epochs_run']:g} | "
                f"{m['n_augmented']:,.0f} | {100 * m['used_of_granted']:.0f}% | {each} | "
                f"{revisions(row)} | {cpus(row['runs'])} |"
            )
    if result.get("quickstart"):
        lines += ["", "`edgekd quickstart` (`--quickstart`: the README's command, its 10-minute "
                  "distill budget and `tang` variants), its export bundled and scored through "
                  "the bundle; wall = the whole quickstart (distill, export, both profiles, "
                  "check, report); check = its exit code (1: a budget limit failed).", "",
                  "| task | seeds | teacher acc | bundle acc (int8) | MCC | retention | "
                  "bundle bytes | wall | each seed (epochs, distill wall used, check) | "
                  "revision | CPU |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for task, t in result["quickstart"].items():
            m = t["median"]
            each = ", ".join(
                f"{r['student']['accuracy']:.4f} ({r['epochs_run']} ep, "
                f"{used(r.get('used_of_granted'))} of the distill budget, exit {r['check_code']})"
                for r in t["runs"]
            )
            lines.append(
                f"| {task} | {len(t['runs'])} | {t['teacher']['accuracy']:.4f} | "
                f"{m['accuracy']:.4f} | {m['mcc']:.3f} | {m['retention']:.2%} | "
                f"{m['bundle_bytes']:,.0f} | {m['wall_s'] / 60:.1f} min | {each} | "
                f"{t['revision']} | {cpus(t['runs'])} |"
            )
    if result.get("levers"):
        lines += ["", "Levers on this path (`--lever FIELD=VALUE`): per seed the default run "
                  "and the same with `-s FIELD=VALUE`, side by side in one benchmark run "
                  "(an arm run alone, `--arms-only`, is read beside the budget sweep's row "
                  "of its budget, each row naming its revision); scored through the int8 "
                  "bundle; medians over seeds.", "",
                  "| task | arm | seeds | bundle acc | MCC | retention | each seed (epochs, "
                  "augmented rows) | bundle bytes | revision | CPU |",
                  "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for key, row in result["levers"].items():
            # `task | arm | revision`, or `task | arm | M min | revision` under a budget.
            task, arm, *budget, _ = key.split(" | ")
            shown = ("defaults" if arm == "defaults" else f"`{arm}`") + "".join(
                f", {b}" for b in budget
            )
            m = row["median"]
            each = ", ".join(
                f"{r['student']['accuracy']:.4f} ({r['epochs_run']} ep, {r['n_augmented']:,})"
                for r in row["runs"]
            )
            lines.append(
                f"| {task} | {shown} | "
                f"{len(row['runs'])} | {m['accuracy']:.4f} | {m['mcc']:.3f} | "
                f"{m['retention']:.2%} | {each} | {m['bundle_bytes']:,.0f} | "
                f"{revisions(row)} | {cpus(row['runs'])} |"
            )
    if "growth" in result:
        lines += ["", "Cost growth (4,000 SST-2 rows, tang over every row, one epoch, "
                  "labelled by the int8 ONNX teacher at every size; "
                  f"revision {result['growth']['revision']}):", "",
                  "| augmentation | transfer rows | wall (s) | peak RSS (MB) |",
                  "|---|---|---|---|"]  # fmt: skip
        for g in result["growth"]["rows"]:
            lines.append(
                f"| {g['augmentation']} | {g['transfer_rows']:,} | {g['wall_s']:.0f} | "
                f"{g['peak_rss_mb']:.0f} |"
            )
    if "load" in result:
        lines += [
            "",
            "Labelling and training quiet and under load, as this benchmark last ran "
            f"benchmarks/labelling_load.py (revision {result['load']['revision']}): the "
            "`load` rows of distill_default.json; labelling_load.md holds that script's "
            "newest run, at the revisions it names.",
        ]
    (out / "distill_default.md").write_text(smoke.markdown("\n".join(lines) + "\n"))
    if result.get("sweep"):
        plot_sweep(result["sweep"], out / "distill_sweep.png")


def revisions(row: dict[str, Any]) -> str:
    """The revision a row was measured at; re-exported (`--reexport`), both."""
    exported = row.get("export_revision")
    trained = row.get("revision", "?")
    return trained if exported is None else f"{trained}, exported at {exported}"


def used(share: float | None) -> str:
    return "?" if share is None else f"{share:.0%}"


def cpus(runs: list[dict], vendor: bool = False) -> str:
    """The CPUs a row's runs were measured on (rows from before they were recorded: ?);
    `vendor`: each one's first word, for a plot label ("AMD", "Intel")."""
    names = {r.get("cpu") or "?" for r in runs} or {"?"}
    if vendor:
        return "/".join(sorted({(n.replace("(R)", "").split() or ["?"])[0] for n in names}))
    return ", ".join(sorted(names))


def label_spot(
    x: float,
    y: float,
    size: tuple[float, float],
    below: bool,
    placed: list[tuple[float, ...]],
    right_edge: float,
) -> tuple[bool, bool, int]:
    """Where the label of point (x, y), `size` (minutes wide, score units tall), goes:
    (right of x?, below y?, how many label heights away). The first spot, in order of
    preference (`below` first, right before left, nearest first), that covers no label
    in `placed` and ends left of `right_edge`; else the first that ends there. The
    chosen box joins `placed`. 13 and 15 minutes are a label's width apart on a 5-30
    minute axis, so their labels can meet."""
    wide, high = size

    def box(right: bool, down: bool, level: int) -> tuple[float, ...]:
        x0 = x if right else x - wide
        y0 = y - (level + 1) * high if down else y + level * high
        return (x0, x0 + wide, y0, y0 + high)

    spots = [
        (right, down, level)
        for level in (0, 1, 2)
        for down in (below, not below)
        for right in (True, False)
        if not right or x + wide <= right_edge
    ]
    for spot in spots:
        x0, x1, y0, y1 = box(*spot)
        if not any(x0 < b1 and b0 < x1 and y0 < c1 and c0 < y1 for b0, b1, c0, c1 in placed):
            placed.append(box(*spot))
            return spot
    placed.append(box(*spots[0]))
    return spots[0]


def plot_sweep(sweep: dict[str, Any], path: Path) -> None:
    """Accuracy per minute granted: each (task, machine) series' median bundle score
    against the budget, beside 98% and 99% of its teacher (the issue's targets), in
    the report's style (`edgekd report`'s colours, grid, 110 dpi)."""
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot
    import matplotlib.pyplot as plt

    from edgekd.stages.report import FRONT_COLOUR, OTHER_COLOUR

    series: dict[tuple[str, str], list[tuple[float, float, float, str]]] = {}
    most = max((len(row.get("runs", [])) for row in sweep.values()), default=0)
    for key, row in sweep.items():
        task, load, budget = key.split(" | ")
        minutes = float(budget.removesuffix(" min"))
        # Each point names its revision and CPU: rows measured at other revisions, on
        # other machines, stay, and a budget buys less on a slower CPU.
        where = f"{row['revision'][:7]}, {cpus(row.get('runs', []), vendor=True)}"
        if (n := len(row.get("runs", []))) < most:  # a point still short of its seeds
            where += f", {n} seed{'s' if n > 1 else ''}"
        if row.get("export_revision"):  # trained at one revision, exported at another
            where += f"\nexported at {row['export_revision'][:7]}"
        point = (minutes, row["median"]["accuracy"], row["teacher"]["accuracy"], where)
        series.setdefault((task, load), []).append(point)
    tasks = sorted({task for task, _ in series})
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.5 * len(tasks), 4.6), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        teacher = 0.0
        # Labels placed so far, as boxes in (minutes, score) units: a label is ~3.5
        # minutes wide and a line of it ~3% of the score axis high (7 pt on an axis
        # ~3.6 inches tall); the axis spans the points and the 98%/99% lines, plus
        # `margins`' 12% each side.
        ends = [p[1] for (n, _), ps in series.items() if n == task for p in ps] + [
            share * p[2] for (n, _), ps in series.items() if n == task for p in ps
            for share in (0.98, 0.99)
        ]  # fmt: skip
        span = 1.24 * (max(ends) - min(ends))
        # A label is ~14% of the minute axis wide (3.5 minutes on a 5-30 axis); the
        # axis runs 5% past the last budget (matplotlib's default margin).
        budgets = [p[0] for (n, _), ps in series.items() if n == task for p in ps]
        width = 1.1 * (max(budgets) - min(budgets)) or 25
        wide, right_edge = 0.14 * width, max(budgets) + 0.05 * width
        placed: list[tuple[float, float, float, float]] = []
        for (name, load), points in sorted(series.items()):
            if name != task:
                continue
            points.sort()
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            teacher = points[0][2]
            colour = OTHER_COLOUR if load == "quiet" else "#7f7f7f"
            ax.plot(xs, ys, marker="o", color=colour, label=f"int8 bundle ({load})")
            # A label goes on the side away from the other line at its budget (quiet
            # above, loaded below where only one ran): at one budget the two lines
            # often sit within a label's height of each other.
            others = {
                q[0]: q[1] for (n, other), qs in series.items() if n == task and other != load
                for q in qs
            }  # fmt: skip
            for x, y, where in zip(xs, ys, [p[3] for p in points], strict=True):
                below = y < others[x] if x in others else load != "quiet"
                high = (where.count("\n") + 2.5) * 0.03 * (span or 1)
                right, below, level = label_spot(x, y, (wide, high), below, placed, right_edge)
                tx = x + (1 if right else -1) * 0.006 * width
                ty = y + (-1 if below else 1) * (0.01 * span + level * high)
                ax.annotate(f"{y:.4f}\n{where}", (x, y), xytext=(tx, ty),
                            va="top" if below else "bottom", ha="left" if right else "right",
                            fontsize=7, linespacing=1.0,
                            arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "#7f7f7f"}
                            if level else None)  # fmt: skip
        for share, style in ((0.99, "--"), (0.98, ":")):
            ax.axhline(share * teacher, color=FRONT_COLOUR, ls=style, lw=1,
                       label=f"{share:.0%} of the teacher ({share * teacher:.4f})")  # fmt: skip
        ax.set_xlabel("--time-budget, minutes (2 cores)")
        ax.set_ylabel("dev accuracy (median over seeds)")
        ax.set_title(f"{task}: accuracy per minute granted")
        ax.grid(True, alpha=0.3)
        ax.margins(y=0.12)  # room for the labels of the highest and lowest points
        ax.legend(fontsize=8, loc="best")  # a lone point sits low right, where its label goes
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
