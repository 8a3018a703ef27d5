"""Distillation methods side by side on SST-2 with the reference teacher, 3 seeds each.

    python benchmarks/methods_sst2.py [--shared ../shared] [--seeds 0 1 2]

Students and methods (issue 3): BiLSTM no-KD (CE on gold labels), KD (logit MSE,
Tang et al.), KD + tang augmentation, KD + mixup (MixKD), annealing KD, and TAKD
(teacher → 3-layer BERT assistant → BiLSTM); a 3-layer BERT (first 3 teacher
layers) with logit KD, PKD, TinyBERT and ALP-KD; KD vs MixKD for the BiLSTM at 1%
and 10% of the training set (the BiLSTM rows are the 10% setting). Every run sees
the same dev set (all 872 rows) and,
within a section, the same training subsample (data seed 0); seeds change the
student's initialisation, shuffling and mixup draws.

The whole sweep is sized for under 2 hours on 2 CPU cores by subsampling (the
sizes are in the JSON and the table): BiLSTM runs train on 6,734 of the 67,349
training rows (10%), plus 13,468 augmented rows for KD+tang; BERT runs on 2,000.
Finished runs are kept in runs/bench-methods and skipped on a rerun.

Writes benchmarks/results/methods_sst2.json and methods_sst2.md.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import smoke  # benchmarks/ is on the path of its own scripts

REPO = Path(__file__).resolve().parents[1]
RUNS = smoke.runs_dir(REPO / "runs" / "bench-methods")

SST2_TRAIN = 67_349
# BiLSTM runs train on 10% of SST-2, which is also MixKD's "10%" setting; the tang
# transfer set adds twice that many teacher-labelled variants.
BILSTM_ROWS, AUG_ROWS, BERT_ROWS = SST2_TRAIN // 10, 2 * (SST2_TRAIN // 10), 2_000
# Each method alone, at fixed epochs: no augmentation and no time budget unless the
# method is the augmentation (the distill defaults turn both on).
PLAIN = {"augment": {"methods": []}, "time_budget": None}
BILSTM = {"student": "bilstm", "epochs": 8, "patience": 3, **PLAIN}
BERT3 = {
    "student": {"name": "bert", "options": {"layers": 3}},
    "epochs": 3,
    "batch_size": 32,
    **PLAIN,
}

# name → (section, train rows, config fields). Order matters: TAKD reads bert3/KD.
METHODS: dict[str, tuple[str, int, dict[str, Any]]] = {
    "bilstm/no-KD": ("bilstm", BILSTM_ROWS, {**BILSTM, "ce_weight": 1.0}),
    "bilstm/KD": ("bilstm", BILSTM_ROWS, BILSTM),
    "bilstm/KD+tang": (
        "bilstm",
        BILSTM_ROWS,
        {**BILSTM, "augment": {"methods": ["tang"], "n_iter": 20, "max_rows": AUG_ROWS}},
    ),
    "bilstm/KD+mixup": ("bilstm", BILSTM_ROWS, {**BILSTM, "augment": {"methods": ["mixup"]}}),
    # 5 annealing epochs (τ = 5..1), then 3 epochs of CE on gold labels.
    "bilstm/annealing": (
        "bilstm",
        BILSTM_ROWS,
        {**BILSTM, "loss": {"name": "annealing", "options": {"tau_max": 5}}},
    ),
    "bert3/KD": ("bert3", BERT_ROWS, BERT3),
    "bert3/PKD": ("bert3", BERT_ROWS, {**BERT3, "intermediate": "pkd"}),
    # TinyBERT: 2 intermediate-only epochs, then the same 3 prediction epochs.
    "bert3/TinyBERT": ("bert3", BERT_ROWS, {**BERT3, "intermediate": "tinybert", "epochs": 5}),
    "bert3/ALP": ("bert3", BERT_ROWS, {**BERT3, "intermediate": "alp"}),
    "bilstm/TAKD (bert3 assistant)": ("bilstm", BILSTM_ROWS, {**BILSTM, "teacher": "bert3/KD"}),
    "1%/KD": ("low-data", SST2_TRAIN // 100, BILSTM),
    "1%/MixKD": ("low-data", SST2_TRAIN // 100, {**BILSTM, "augment": {"methods": ["mixup"]}}),
}

# Published orderings (methods.md, last section) as (lower, higher) pairs of rows.
ORDERINGS = [
    ("No-KD < KD (Tang et al.)", "bilstm/no-KD", "bilstm/KD"),
    ("KD < KD + augmentation (Tang et al.)", "bilstm/KD", "bilstm/KD+tang"),
    ("KD < MixKD at 1% (Liang et al.)", "1%/KD", "1%/MixKD"),
    ("KD < MixKD at 10% (Liang et al.)", "bilstm/KD", "bilstm/KD+mixup"),
    ("KD < annealing KD (Jafari et al.)", "bilstm/KD", "bilstm/annealing"),
    ("KD < TAKD (Mirzadeh et al.)", "bilstm/KD", "bilstm/TAKD (bert3 assistant)"),
    ("TAKD ≲ annealing KD (Jafari et al.)", "bilstm/TAKD (bert3 assistant)", "bilstm/annealing"),
    ("logit KD ≤ PKD, 3-layer BERT (Sun et al.)", "bert3/KD", "bert3/PKD"),
    ("logit KD ≤ ALP-KD, 3-layer BERT (Passban et al.)", "bert3/KD", "bert3/ALP"),
    ("logit KD ≤ TinyBERT, 3-layer BERT (Jiao et al.)", "bert3/KD", "bert3/TinyBERT"),
]
# Smoke: the methods differ in fields but for TAKD, which reads its assistant's run; with
# bilstm/KD one ordering is judged too.
SMOKE_METHODS = ("bilstm/KD", "bert3/KD", "bilstm/TAKD (bert3 assistant)")


def run_one(name: str, seed: int, shared: Path, teacher: str) -> dict[str, Any]:
    from edgekd.config import DataConfig, DistillConfig
    from edgekd.stages.distill import distill as run_distill

    _, rows, fields = METHODS[name]
    out = RUNS / f"{name.replace('/', '_').replace(' ', '_')}-s{seed}"
    if (out / "metrics.json").is_file():
        return json.loads((out / "metrics.json").read_text())
    fields = dict(fields)
    if smoke.SMOKE:  # one epoch; TinyBERT's 2 intermediate-only epochs stay (5 − 3 + 1 = 3)
        fields["epochs"] = fields["epochs"] - BERT3["epochs"] + 1 if "intermediate" in fields else 1
    if fields.get("teacher", "").startswith("bert3/"):
        assistant = RUNS / f"{fields['teacher'].replace('/', '_')}-s{seed}"
        fields["teacher"] = str(assistant)
    cfg = DistillConfig.model_validate(
        {
            "teacher": teacher,
            **fields,
            "data": DataConfig(
                spec=str(shared / "data" / "sst2"), max_train=smoke.rows(rows), seed=0
            ),
            "seed": seed,
        }
    )
    start = time.perf_counter()
    metrics = run_distill(cfg, out).model_dump()
    metrics["wall_seconds"] = time.perf_counter() - start
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    return metrics


def summarise(results: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    table = {}
    for name, runs in results.items():
        acc = [r["student_accuracy"] for r in runs]
        table[name] = {
            "section": METHODS[name][0],
            "train_rows": METHODS[name][1],
            "augmented_rows": runs[0]["n_augmented"],
            "mean": statistics.mean(acc),
            "std": statistics.stdev(acc) if len(acc) > 1 else 0.0,
            "per_seed": acc,
            "agreement": statistics.mean(r["agreement"] for r in runs),
            "teacher_accuracy": runs[0]["teacher_accuracy"],
            "params": runs[0]["params"],
            "epochs_run": [r["epochs_run"] for r in runs],
            "minutes": statistics.mean(r.get("wall_seconds", 0) for r in runs) / 60,
        }
    return table


def orderings(table: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for claim, low, high in ORDERINGS:
        if low in table and high in table:
            lo, hi = table[low], table[high]
            diff = hi["mean"] - lo["mean"]
            # "Held" needs the gap to exceed both runs' seed spread, not just its sign.
            noise = max(lo["std"], hi["std"])
            verdict = "held" if diff > noise else ("reversed" if diff < -noise else "within noise")
            out.append({"claim": claim, "difference": diff, "noise": noise, "verdict": verdict})
    return out


def markdown(table: dict[str, dict[str, Any]], checks: list[dict[str, Any]], meta: dict) -> str:
    lines = [
        "# Distillation methods on SST-2 (reference teacher, dev accuracy, mean ± std over "
        f"{meta['seeds']} seeds)",
        "",
        f"Teacher dev accuracy {meta['teacher_accuracy']:.4f}. {meta['machine']}.",
        "",
        "The bert3 rows are this sweep's: every one predicted the majority class after its "
        "first epoch (63 steps at 5e-5, no warm-up). The small-BERT methods are re-run, with "
        "the new ones and CoLA, by benchmarks/methods_bert.py (methods_bert_sst2.md, "
        "methods_bert_cola.md); bert3/KD stays here as TAKD's assistant.",
        "",
        "| method | train rows | augmented | dev acc | ± | retention | agreement | params | "
        "min/run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in table.items():
        lines.append(
            f"| {name} | {row['train_rows']:,} | {row['augmented_rows']:,} | "
            f"{row['mean']:.4f} | {row['std']:.4f} | "
            f"{row['mean'] / meta['teacher_accuracy']:.1%} | {row['agreement']:.4f} | "
            f"{row['params']:,} | {row['minutes']:.1f} |"
        )
    lines += ["", "| published ordering | Δ mean | seed spread | verdict |", "|---|---|---|---|"]
    for c in checks:
        lines.append(
            f"| {c['claim']} | {c['difference']:+.4f} | {c['noise']:.4f} | {c['verdict']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", nargs="*", help="Run only these method names.")
    args = parser.parse_args()
    args.seeds = args.seeds[: smoke.at_most(len(args.seeds), smoke.REPEATS)]
    teacher = str(args.shared / "models" / "sst2-minilm-teacher")
    names = args.only or list(smoke.pick(METHODS, SMOKE_METHODS))
    results: dict[str, list[dict[str, Any]]] = {}
    start = time.perf_counter()
    for seed in args.seeds:
        for name in names:
            print(f"== {name} seed {seed}", flush=True)
            results.setdefault(name, []).append(run_one(name, seed, args.shared, teacher))
    table = summarise(results)
    checks = orderings(table)
    meta = {
        "smoke": smoke.SMOKE,
        "seeds": len(args.seeds),
        "teacher": teacher,
        "teacher_accuracy": next(iter(table.values()))["teacher_accuracy"],
        "machine": f"{platform.processor() or platform.machine()}, torch CPU",
        "sweep_minutes": (time.perf_counter() - start) / 60,
        "sizes": {"bilstm_rows": BILSTM_ROWS, "augmented_rows": AUG_ROWS, "bert_rows": BERT_ROWS},
    }
    out = REPO / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "methods_sst2.json").write_text(
        json.dumps({"meta": meta, "table": table, "orderings": checks}, indent=1)
    )
    text = smoke.markdown(markdown(table, checks, meta))
    (out / "methods_sst2.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
