"""The labellers' last layer for the first token alone, per teacher family, against the
whole graph: rows/s side by side at each family's published shape.

    python benchmarks/first_token.py [--rows 1000] [--repeats 3] [--families ...]

Families: the reference teacher (a fine-tuned MiniLM: a BERT classifier, 6 layers of
384, its own weights), and classifiers of BERT-base, RoBERTa-base, DistilBERT-base and
ELECTRA-small at their published shapes with random weights: the hub is out of reach
here, and a graph's speed depends on its shapes, not on its values. All read the
reference teacher's WordPiece vocabulary (30,522 pieces): a family's own vocabulary
changes the size of a table that is only looked up, not the work per row.

Each teacher is exported by `torch.onnx` twice, whole and with its last layer run for
the first token alone (`first_token_model`, what the labellers export), so the pruning
is the only difference; each is quantized as `auto` quantizes it (dynamic int8, one scale
per embedding table). Rows: `labelling_margin.candidates`, the SST-2 `tang` variants a
budgeted run labels most. Each labeller runs as edgekd runs it (one single-thread
onnxruntime session per core, length-sorted batches of `teacher_batch_size`); rows/s is
the median of `--repeats` passes, the four labellers of a family interleaved pass by
pass. Reported: rows/s, the first-token graph's speed over the whole one's (fp32, int8),
and the largest |logit difference| between the two fp32 graphs (the pruning is exact
up to float rounding; beside it the logits' own standard deviation over the rows, which
random weights keep small); for the reference teacher also int8's argmax agreement with
fp32.

Writes benchmarks/results/first_token.{json,md}.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py): every
family but the reference at a 2-layer, 32-wide shape.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import smoke  # benchmarks/ is on the path of its own scripts
from distill_default import cpu, revision
from labelling_margin import TEACHER, candidates

REPO = Path(__file__).resolve().parents[1]

# The published shapes (each family's base or small model card); `reference` is the
# reference teacher itself.
BERT_BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
             "intermediate_size": 3072}  # fmt: skip
SHAPES: dict[str, tuple[str, dict[str, int]]] = {
    "reference": ("reference", {}),
    "bert-base": ("bert", BERT_BASE),
    "roberta-base": ("roberta", BERT_BASE),
    "distilbert-base": ("distilbert", {"dim": 768, "n_layers": 6, "n_heads": 12,
                                       "hidden_dim": 3072}),
    "electra-small": ("electra", {"embedding_size": 128, "hidden_size": 256,
                                  "num_hidden_layers": 12, "num_attention_heads": 4,
                                  "intermediate_size": 1024}),
}  # fmt: skip
SMOKE_SHAPE = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
               "intermediate_size": 64}  # fmt: skip
SMOKE_DISTIL = {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64}


def classifier(family: str, shape: dict[str, int], vocab: Any) -> tuple[Any, Any, int]:
    """(model in eval, tokenizer, layers) of `family` at `shape`, random weights, 2 labels,
    on `vocab`'s pieces (the reference tokenizer)."""
    import torch
    import transformers as tf

    if family == "reference":
        from edgekd.distill.teacher import load_teacher

        model, tok = load_teacher(str(TEACHER))
        return model.float().eval(), tok, model.config.num_hidden_layers
    torch.manual_seed(0)
    # Named labels: the default LABEL_0/LABEL_1 are left out of a saved config.json, and
    # a labeller reads its labels there.
    labels = {
        "id2label": {0: "negative", 1: "positive"},
        "label2id": {"negative": 0, "positive": 1},
    }
    common = {"vocab_size": vocab.vocab_size, "pad_token_id": vocab.pad_token_id, **labels}
    if family == "distilbert":
        shape = SMOKE_DISTIL if smoke.SMOKE else shape
        model = tf.DistilBertForSequenceClassification(
            tf.DistilBertConfig(**shape, max_position_embeddings=512, **common)
        )
        names = ["input_ids", "attention_mask"]  # DistilBERT takes no token types
        layers = shape["n_layers"]
    else:
        shape = SMOKE_SHAPE if smoke.SMOKE else shape
        config_class, model_class = {
            "bert": (tf.BertConfig, tf.BertForSequenceClassification),
            "roberta": (tf.RobertaConfig, tf.RobertaForSequenceClassification),
            "electra": (tf.ElectraConfig, tf.ElectraForSequenceClassification),
        }[family]
        if family == "electra" and smoke.SMOKE:
            shape = {**shape, "embedding_size": 16}
        # RoBERTa's positions start after the padding index: 514, as its published config.
        positions = 514 if family == "roberta" else 512
        model = model_class(config_class(**shape, max_position_embeddings=positions, **common))
        names = ["input_ids", "token_type_ids", "attention_mask"]
        layers = shape["num_hidden_layers"]
    tok = tf.AutoTokenizer.from_pretrained(str(TEACHER), model_input_names=names)
    return model.eval(), tok, layers


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--families", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    n_rows = smoke.rows(args.rows) or args.rows
    repeats = smoke.at_most(args.repeats, 1)

    from transformers import AutoTokenizer

    from edgekd.config import DistillConfig
    from edgekd.exporters.quantize import DynamicInt8Quantizer
    from edgekd.exporters.teacher import export_torch, first_token_model
    from edgekd.students.predict import OnnxPredictor
    from edgekd.threads import core_share

    rows = candidates(max(n_rows // 4, 50), n_rows)
    vocab = AutoTokenizer.from_pretrained(str(TEACHER))
    tokens = statistics.mean(len(ids) for ids in vocab(rows)["input_ids"])
    cfg = DistillConfig(teacher=str(TEACHER))
    results: list[dict[str, Any]] = []
    for name in args.families:
        family, shape = SHAPES[name]
        model, tok, layers = classifier(family, shape, vocab)
        pruned = first_token_model(model, tok)
        if pruned is None:
            raise SystemExit(f"{name}: first_token_model refused it (its check failed)")
        labellers: dict[str, Callable[[], np.ndarray]] = {}
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            for graph, module in (("whole", model), ("first token", pruned)):
                folder = Path(tmp) / graph.replace(" ", "-")
                folder.mkdir()
                fp32 = folder / "model.onnx"
                export_torch(module, tok, fp32, 17)
                tok.save_pretrained(folder)
                model.config.save_pretrained(folder)
                int8 = folder / "model.int8.onnx"
                DynamicInt8Quantizer(embedding="tensor").quantize(fp32, int8)
                for precision, path in (("fp32", fp32), ("int8", int8)):
                    predictor = OnnxPredictor(
                        path, batch_size=cfg.teacher_batch_size,
                        max_length=cfg.teacher_max_length, threads=1, workers=core_share(),
                    )  # fmt: skip
                    labellers[f"{precision}, {graph}"] = lambda q=predictor: q.logits(rows)
            export_s = time.perf_counter() - started
            rates: dict[str, list[float]] = {k: [] for k in labellers}
            logits: dict[str, np.ndarray] = {}
            for _ in range(repeats):  # interleaved: a drift in the machine's speed falls on all
                for label, run in labellers.items():
                    started = time.perf_counter()
                    logits[label] = run()
                    rates[label].append(len(rows) / (time.perf_counter() - started))
        rate = {k: statistics.median(v) for k, v in rates.items()}
        ref = logits["fp32, whole"]
        agree = logits["int8, first token"].argmax(1) == ref.argmax(1)
        row: dict[str, Any] = {
            "family": name, "layers": layers,
            "weights": "own" if family == "reference" else "random",
            "rows_per_s": rate, "runs_per_s": rates, "export_s": export_s,
            "x_fp32": rate["fp32, first token"] / rate["fp32, whole"],
            "x_int8": rate["int8, first token"] / rate["int8, whole"],
            "max_abs_diff": float(np.abs(logits["fp32, first token"] - ref).max()),
            "int8_agreement": float(agree.mean()),
            # Random weights make logits that barely move between rows: the difference
            # means something beside how far the logits themselves spread.
            "logit_spread": float(ref.std(0).max()),
        }  # fmt: skip
        results.append(row)
        print(
            f"{name}: fp32 {rate['fp32, whole']:.0f} → {rate['fp32, first token']:.0f} rows/s "
            f"({row['x_fp32']:.2f}×), int8 {rate['int8, whole']:.0f} → "
            f"{rate['int8, first token']:.0f} ({row['x_int8']:.2f}×)",
            flush=True,
        )
        del model, pruned

    meta = {
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "cpu": cpu(), "revision": revision(), "rows": len(rows), "tokens_per_row": tokens,
        "repeats": repeats, "smoke": smoke.SMOKE,
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "first_token.json").write_text(
        json.dumps({"meta": meta, "families": results}, indent=2) + "\n"
    )
    lines = [
        *([smoke.NOTE, ""] if smoke.SMOKE else []),
        "# The labellers' last layer for the first token alone, per teacher family",
        "",
        f"{meta['machine']} ({meta['cpu']}); revision {meta['revision']}; {len(rows):,} SST-2 "
        f"`tang` variants ({tokens:.1f} teacher tokens a row); rows/s the median of {repeats} "
        "interleaved passes, one single-thread onnxruntime session per core; both graphs "
        "exported by torch.onnx; int8 dynamic. Random weights but the reference's: speed "
        "depends on shapes alone.",
        "",
        "| family | layers | weights | fp32 whole | fp32 first token | × | int8 whole | "
        "int8 first token | × | max abs logit diff (logits' sd) | int8 agreement |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {r['family']} | {r['layers']} | {r['weights']} | "
            f"{r['rows_per_s']['fp32, whole']:.0f} | {r['rows_per_s']['fp32, first token']:.0f} | "
            f"{r['x_fp32']:.2f}× | {r['rows_per_s']['int8, whole']:.0f} | "
            f"{r['rows_per_s']['int8, first token']:.0f} | {r['x_int8']:.2f}× | "
            f"{r['max_abs_diff']:.1e} ({r['logit_spread']:.1e}) | "
            + (f"{r['int8_agreement']:.4f} |" if r["weights"] == "own" else "– |")
            for r in results
        ),
        "",
    ]
    (args.out / "first_token.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
