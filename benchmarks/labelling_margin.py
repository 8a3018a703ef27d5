"""Where `auto` labelling spends its fp32 calls, and what would spend fewer: margin rules
and int8 teachers with parts left in fp32, on the rows a run labels most.

    python benchmarks/labelling_margin.py [--rows 4000] [--splits 50] [--repeats 3]
        [--keep none lookups ...] [--batches 8 64] [--whole]

Rows: a seeded sample of SST-2's augmented candidates, made by the default augmentation
(`tang`) from a seeded sample of the texts a run varies (`augment.sources: maximal`, the
whole sentences: no other training text contains them), deduplicated: the rows a
budgeted run labels most, and where int8 disagrees with fp32 most (98.5% agreement on a
run's calibration sample against 99.4% on training texts,
benchmarks/results/labelling_load.md). Before 2026-11-30 the sample was drawn from all
training texts, most of them short phrases a run does not vary: 13 teacher tokens a row
on average against 21, labelled ~1.7× faster (int8 ~1,540 rows/s against ~900 in a run).

Labellers, each as edgekd runs it (one single-thread onnxruntime session per core, rows
in length-sorted batches of `teacher_batch_size`; PyTorch through `teacher_logits`):
the reference teacher in PyTorch fp32, its fp32 ONNX as the labellers export it (its
last layer run for [CLS] alone; the reference every agreement is against), its dynamic
int8 ONNX as `auto` quantizes it, with `--whole` both ONNX labellers of the whole
graph, and the same int8 with parts kept in fp32 (`KEEP`: the lookups, the classifier,
each layer's FFN output). Rows/s is
the median of `--repeats` passes over the rows, the labellers interleaved pass by pass.
`--batches`: PyTorch, fp32 and int8 also label in calls of those sizes (the call size
side by side; an int8 labeller's close calls are then relabelled by the fp32 of its
own call size).

Margin rules, per int8 labeller: as `calibrate` does, the relabel margin is picked on
1,000 rows and measured on 1,000 others, over `--splits` random splits of the rows:
`MARGIN_SLACK` × the k+1-th largest int8 margin among the disagreements (k of them left
above it), and smaller slacks. Reported: the share of rows relabelled, the hybrid's
agreement with fp32 (median and worst split), and the rows/s it implies,
1 / (1 / int8 + share / fp32), × PyTorch's.

`auto`, per int8 labeller: `calibrate` itself on each split's 2,000 rows (its rules in
turn, the first to reach the floor on the measuring half labels), then its margin
applied to the rows neither half saw (2,000 of 4,000): how often each rule was chosen,
the share relabelled and the agreement there, where the choice did not look.

Writes benchmarks/results/labelling_margin.{json,md}.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import smoke  # benchmarks/ is on the path of its own scripts
from distill_default import cpu, revision

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TEACHER = SHARED / "models" / "sst2-minilm-teacher"
DATA = SHARED / "data" / "sst2"

# Parts of the reference teacher (optimum's BERT export names them so) kept in fp32.
LAYERS = 6


def ffn_out(k: int) -> str:
    return f"/bert/encoder/layer.{k}/output/dense/MatMul"


KEEP: dict[str, Callable[[list[Any]], list[str]]] = {
    "none": lambda nodes: [],
    # Lookups cost no arithmetic: int8 saves bytes there, which a labeller does not need.
    "lookups": lambda nodes: [n.name for n in nodes if n.op_type == "Gather"],
    # Every Gemm: the pooler's dense layer and the classifier (the head on [CLS]).
    "classifier": lambda nodes: [n.name for n in nodes if n.op_type == "Gemm"],
    "ffn-out, all layers": lambda nodes: [ffn_out(k) for k in range(LAYERS)],
    **{f"ffn-out, layer {k}": (lambda nodes, k=k: [ffn_out(k)]) for k in range(LAYERS)},
}
RULES = [(k, slack) for k in (0, 1, 2, 4) for slack in (1.5, 1.25, 1.0)]


def candidates(n_texts: int, rows: int) -> list[str]:
    """`rows` deduplicated `tang` variants of `n_texts` seeded SST-2 training texts, from
    those a run varies (`augment.sources: maximal`)."""
    from edgekd.config import AugmentConfig, DataConfig
    from edgekd.data import load_task, maximal_rows
    from edgekd.distill.augment import build_augmenter, generate

    task = load_task(DataConfig(spec=str(DATA)))
    train = list(task.train.texts)
    varied = [train[i] for i in maximal_rows(train)]
    texts = random.Random(0).sample(varied, min(n_texts, len(varied)))
    resolved = AugmentConfig(methods=["tang"]).resolved(len(texts), None, True)
    made = generate(texts, build_augmenter(resolved, texts, "[MASK]"), 20, 0)  # deduplicated
    return random.Random(1).sample(made, min(rows, len(made)))


class Logits:
    """`calibrate`'s ONNX teacher over logits already computed: texts are row indices."""

    def __init__(self, fp32: np.ndarray, int8: np.ndarray) -> None:
        self._fp32, self._int8 = fp32, int8

    def fp32(self, texts: list[Any], what: str) -> np.ndarray:
        return self._fp32[texts].copy()

    def int8(self, texts: list[Any], what: str) -> np.ndarray:
        return self._int8[texts].copy()


def auto_rule(
    ref: np.ndarray, q: np.ndarray, pick: int, splits: int, rules: tuple[int, ...]
) -> dict[str, Any]:
    """`calibrate` with `rules` on 2 × `pick` rows per split, its choice applied to the
    rest."""
    from edgekd.distill.labeling import calibrate, margins

    gold = ref.argmax(1)
    chosen: list[str] = []
    shares, agrees = [], []
    for s in range(splits):
        idx = np.random.default_rng(s).permutation(len(ref))
        cal = calibrate(Logits(ref, q), idx[: 2 * pick].tolist(), rules)
        rest = idx[2 * pick :]
        low = margins(q[rest]) < cal.margin if cal.choice == "hybrid" else np.ones(len(rest), bool)
        hybrid = np.where(low[:, None], ref[rest], q[rest])
        chosen.append(f"spare {cal.spare}" if cal.choice == "hybrid" else "fp32")
        shares.append(float(low.mean()))
        agrees.append(float((hybrid.argmax(1) == gold[rest]).mean()))
    return {
        "rules": list(rules),
        "chosen": {c: chosen.count(c) for c in sorted(set(chosen))},
        "relabelled": statistics.median(shares), "relabelled_worst": max(shares),
        "agreement_median": statistics.median(agrees), "agreement_worst": min(agrees),
        "held_out": len(ref) - 2 * pick,
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=4_000)
    p.add_argument("--splits", type=int, default=50)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--keep", nargs="+", choices=list(KEEP), default=list(KEEP))
    p.add_argument(
        "--whole", action="store_true",
        help="Also label with the teacher's whole graph (fp32 and int8), its last layer run "
        "for every token as before `first_token`, exported by optimum (as it was) and by "
        "torch.onnx (as the first-token graph is): the pruning measured side by side.",
    )  # fmt: skip
    p.add_argument(
        "--batches", type=int, nargs="*", default=[],
        help="Also label in calls of these sizes (PyTorch, fp32 and int8), interleaved with "
        "the rest: the call size measured side by side.",
    )  # fmt: skip
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    n_rows = smoke.rows(args.rows) or args.rows
    splits = smoke.at_most(args.splits, 2)
    repeats = smoke.at_most(args.repeats, 1)
    keeps = smoke.pick(args.keep, ["none", "lookups"])

    import onnx

    from edgekd.artifacts import MODEL_FILES
    from edgekd.config import DistillConfig
    from edgekd.distill.labeling import CALIBRATION_ROWS, SPARE_RULES, margins
    from edgekd.distill.teacher import load_teacher, teacher_logits
    from edgekd.exporters.quantize import DynamicInt8Quantizer
    from edgekd.exporters.teacher import export_teacher, export_torch
    from edgekd.students.predict import OnnxPredictor
    from edgekd.threads import core_share

    rows = candidates(max(n_rows // 4, 50), n_rows)
    # `calibrate`'s halves: rows that pick a margin, and as many that measure it.
    pick = min(CALIBRATION_ROWS // 2, len(rows) // 2)
    model, tok = load_teacher(str(TEACHER))
    model = model.float().eval()
    cfg = DistillConfig(teacher=str(TEACHER))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "teacher"
        fp32_path = export_teacher(str(TEACHER), folder, first_token=True)  # as labellers are
        nodes = list(onnx.load(str(fp32_path), load_external_data=False).graph.node)

        def predictor(path: Path, batch: int = cfg.teacher_batch_size) -> OnnxPredictor:
            return OnnxPredictor(
                path, batch_size=batch, max_length=cfg.teacher_max_length,
                threads=1, workers=core_share(),
            )  # fmt: skip

        fp32 = predictor(fp32_path)
        labellers: dict[str, Callable[[], np.ndarray]] = {
            "torch": lambda: teacher_logits(model, tok, rows, cfg.teacher_batch_size),
            "fp32": lambda: fp32.logits(rows),
        }
        kept: dict[str, list[str]] = {}  # per int8 labeller, the nodes it keeps in fp32
        fp32_of: dict[str, str] = {}  # per int8 labeller, the fp32 one for its close calls
        for i, name in enumerate(keeps):
            label = f"int8, fp32 {name}" if name != "none" else "int8"
            kept[label] = KEEP[name](nodes)
            path = folder / f"model.int8-{i}.onnx"  # beside its config and tokenizer
            DynamicInt8Quantizer(exclude_nodes=kept[label], embedding="tensor").quantize(
                fp32_path, path
            )
            labellers[label] = lambda q=predictor(path): q.logits(rows)
            fp32_of[label] = "fp32"
        if args.whole:  # every token through the last layer, as before `first_token`
            # Through optimum (the whole graph labellers had), and through torch.onnx as
            # the first-token graph is: the pruning alone is the second pair's ratio.
            whole = {"optimum": export_teacher(str(TEACHER), Path(tmp) / "whole")}
            whole["torch.onnx"] = Path(tmp) / "whole-torch" / MODEL_FILES["fp32"]
            whole["torch.onnx"].parent.mkdir()
            export_torch(model, tok, whole["torch.onnx"], 17)
            model.config.save_pretrained(whole["torch.onnx"].parent)
            tok.save_pretrained(whole["torch.onnx"].parent)
            for how, path in whole.items():
                int8_whole = path.with_name("model.int8.onnx")
                DynamicInt8Quantizer(embedding="tensor").quantize(path, int8_whole)
                f, i = f"fp32, whole graph ({how})", f"int8, whole graph ({how})"
                labellers[f] = lambda q=predictor(path): q.logits(rows)
                labellers[i] = lambda q=predictor(int8_whole): q.logits(rows)
                fp32_of[i] = f
        if args.batches:
            int8_path = folder / "model.int8-calls.onnx"
            DynamicInt8Quantizer(embedding="tensor").quantize(fp32_path, int8_path)
        for b in args.batches:
            labellers[f"torch, calls of {b}"] = lambda b=b: teacher_logits(model, tok, rows, b)
            labellers[f"fp32, calls of {b}"] = lambda q=predictor(fp32_path, b): q.logits(rows)
            labellers[f"int8, calls of {b}"] = lambda q=predictor(int8_path, b): q.logits(rows)
            fp32_of[f"int8, calls of {b}"] = f"fp32, calls of {b}"

        rates: dict[str, list[float]] = {k: [] for k in labellers}
        logits: dict[str, np.ndarray] = {}
        for _ in range(repeats):  # interleaved: a drift in the machine's speed falls on all
            for name, label in labellers.items():
                started = time.perf_counter()
                logits[name] = label()
                rates[name].append(len(rows) / (time.perf_counter() - started))
    rate = {k: statistics.median(v) for k, v in rates.items()}
    ref = logits["fp32"]
    gold = ref.argmax(1)

    results: list[dict[str, Any]] = []
    for name in labellers:
        q = logits[name]
        row: dict[str, Any] = {
            "labeller": name, "rows_per_s": rate[name], "x_torch": rate[name] / rate["torch"],
            "agreement": float((q.argmax(1) == gold).mean()),
            "max_abs_diff": float(np.abs(q - ref).max()), "kept_fp32": kept.get(name, []),
        }  # fmt: skip
        if name.startswith("int8"):
            row["rules"] = []
            for k, slack in RULES:
                shares, agrees = [], []
                for s in range(splits):
                    idx = np.random.default_rng(s).permutation(len(rows))
                    a, b = idx[:pick], idx[pick : 2 * pick]
                    wrong = np.sort(margins(q[a])[q[a].argmax(1) != gold[a]])[::-1]
                    margin = slack * wrong[k] if k < len(wrong) else 0.0
                    low = margins(q[b]) < margin
                    hybrid = np.where(low[:, None], ref[b], q[b])
                    shares.append(float(low.mean()))
                    agrees.append(float((hybrid.argmax(1) == gold[b]).mean()))
                share = statistics.median(shares)
                hybrid_rate = 1.0 / (1.0 / rate[name] + share / rate[fp32_of[name]])
                row["rules"].append(
                    {
                        "k": k, "slack": slack, "relabelled": share,
                        "agreement_median": statistics.median(agrees),
                        "agreement_worst": min(agrees), "rows_per_s": hybrid_rate,
                        "x_torch": hybrid_rate / rate["torch"],
                    }
                )  # fmt: skip
            # `auto`'s rules, and the one rule it had before (no disagreement spared)
            row["auto"] = [auto_rule(ref, q, pick, splits, r) for r in (SPARE_RULES, (0,))]
            for u in row["auto"]:
                auto_rate = 1.0 / (1.0 / rate[name] + u["relabelled"] / rate[fp32_of[name]])
                u |= {"rows_per_s": auto_rate, "x_torch": auto_rate / rate["torch"]}
        results.append(row)
        print(f"{name}: {rate[name]:.0f} rows/s, agreement {row['agreement']:.4f}", flush=True)

    meta = {
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "cpu": cpu(), "revision": revision(), "rows": len(rows),
        "splits": splits, "repeats": repeats, "pick": pick, "smoke": smoke.SMOKE,
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "labelling_margin.json").write_text(
        json.dumps({"meta": meta, "labellers": results}, indent=2) + "\n"
    )
    lines = [
        "# Labelling: fp32 close calls, margin rules and fp32 parts (SST-2 candidates)",
        "",
        f"{meta['machine']}; revision {meta['revision']}; {len(rows):,} deduplicated `tang` "
        f"variants of the texts a run varies (`sources: maximal`); rows/s the median of "
        f"{repeats} interleaved passes; agreement: argmax against the fp32 ONNX teacher.",
        "",
        "| labeller | rows/s | × PyTorch | agreement | max abs logit diff |",
        "|---|---|---|---|---|",
        *(
            f"| {r['labeller']} | {r['rows_per_s']:.0f} | {r['x_torch']:.2f}× | "
            f"{r['agreement']:.4f} | {r['max_abs_diff']:.3f} |"
            for r in results
        ),
        "",
        f"Margin rules: the relabel margin is slack × the k+1-th largest int8 margin among "
        f"the disagreements on {pick:,} rows, measured on {pick:,} others, {splits} splits; "
        "rows/s = 1 / (1 / int8 + relabelled / fp32).",
        "",
        "| labeller | k | slack | relabelled | agreement (median) | agreement (worst) | "
        "rows/s | × PyTorch |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {r['labeller']} | {u['k']} | {u['slack']} | {u['relabelled']:.3f} | "
            f"{u['agreement_median']:.4f} | {u['agreement_worst']:.4f} | "
            f"{u['rows_per_s']:.0f} | {u['x_torch']:.2f}× |"
            for r in results
            for u in r.get("rules", [])
        ),
        "",
        f"`auto` (`calibrate` on {2 * pick:,} rows per split, its rules in turn: the "
        f"disagreements spared), its choice applied to the rows neither half saw; {splits} "
        "splits.",
        "",
        "| labeller | rules | rule chosen (splits) | relabelled (median, most) | "
        "agreement (median) | agreement (worst) | rows/s | × PyTorch |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {r['labeller']} | {', '.join(map(str, u['rules']))} | "
            + ", ".join(f"{c}: {n}" for c, n in u["chosen"].items())
            + f" | {u['relabelled']:.3f}, {u['relabelled_worst']:.3f} | "
            f"{u['agreement_median']:.4f} | {u['agreement_worst']:.4f} | "
            f"{u['rows_per_s']:.0f} | {u['x_torch']:.2f}× |"
            for r in results
            for u in r.get("auto", [])
        ),
        "",
    ]
    (args.out / "labelling_margin.md").write_text(smoke.markdown("\n".join(lines)))


if __name__ == "__main__":
    main()
