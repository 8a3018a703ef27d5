"""Labelling and training throughput, quiet and under a concurrent CPU load.

One command: `python benchmarks/labelling_load.py` (needs ../shared). Every figure is
measured in its own subprocess (thread settings are read when torch loads), side by
side in one run; each is the median of `--repeats` timed windows (the labellers'
windows interleaved: one window of each runtime per round).

- labelling: the reference teacher on a seeded sample of SST-2 training rows, with
  PyTorch fp32 (the 0.3 default), onnxruntime fp32, int8, and `auto` (int8 with fp32
  for its close calls, margin calibrated on other rows): rows/s, ratio to PyTorch,
  argmax agreement with PyTorch.
- training: the BiLSTM student's optimiser steps on SST-2 rows (length-bucketed) at
  batch 50 and 256: 2 threads (what 0.3 ran), 2 threads with a short libgomp spin,
  1 thread, and edgekd's `ThreadGovernor` (measures both counts, runs the faster).
  And the default student's step now against before (300-d embeddings from a rank-64
  table, per-tensor Adam, length pools of 50 batches), governed, at batch 50.
- teacher fine-tuning (`edgekd teacher`): AdamW steps of the default base
  (all-MiniLM-L6-v2 with a new 2-label head) at the default batch (32) and length
  (64), on 2 threads, 1 thread and governed.
- the time budget's probe (`edgekd.distill.timebudget.probe_train_rate`, what plans a
  budgeted run's rows and epochs) on the same student and rows: as edgekd runs it (every
  thread count the governor may pick, the fastest) and at all cores only (before
  9c3210b), against the governed training rate at batch 50.
- overlap: `auto` labelling and the governed training step, each alone on both cores
  (how a run spends them: labelling, then training), against one core each at once
  (labelling pinned to core 0 while training runs on core 1, and the reverse
  measurement): what overlapping labelling with training could at most add to a
  budget's training row-passes.
- under load: the same while another process keeps both cores busy (a 2-thread
  PyTorch matmul loop); the ratio loaded/quiet says whether edgekd slows down in
  proportion (≥ 1/3 is the bar; a fair share of 2 cores is 1/2).

Writes benchmarks/results/labelling_load.{json,md}.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work, rows marked "smoke" (smoke.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import smoke
from distill_default import revision  # benchmarks/ is on the path of its own scripts

REPO = Path(__file__).resolve().parents[1]
LIBGOMP_DEFAULT = "300000"
# (GOMP_SPINCOUNT, threads; 0 = edgekd's ThreadGovernor) for the training rows.
SECTIONS = ("label", "train", "finetune", "probe", "overlap")
TRAIN_SETTINGS = [(LIBGOMP_DEFAULT, 2), ("30000", 2), (LIBGOMP_DEFAULT, 1), (LIBGOMP_DEFAULT, 0)]
# Smoke: fixed threads against the governor, one batch size, the same for fine-tuning;
# every labeller (each its own path) and both loads stay.
TRAIN_SETTINGS = smoke.pick(TRAIN_SETTINGS, [(LIBGOMP_DEFAULT, 2), (LIBGOMP_DEFAULT, 0)])
BATCHES = smoke.pick((50, 256), (50,))
FINETUNE_THREADS = smoke.pick((2, 1, 0), (2, 0))


def sample_rows(shared: Path, n: int, seed: int, offset: int = 0) -> list[str]:
    import random

    lines = (shared / "data" / "sst2" / "train.tsv").read_text().splitlines()[1:]
    rows = [line.split("\t")[0] for line in lines]
    random.Random(seed).shuffle(rows)
    return rows[offset : offset + n]


def worker_label(args: argparse.Namespace) -> dict:
    import numpy as np

    from edgekd.config import DistillConfig
    from edgekd.distill.labeling import calibrate, calibration_sample, hybrid_labeler
    from edgekd.distill.teacher import load_teacher, teacher_logits
    from edgekd.exporters.teacher import OnnxLabelers

    teacher = str(args.shared / "models" / "sst2-minilm-teacher")
    texts = sample_rows(args.shared, args.rows, seed=0)
    cfg = DistillConfig(teacher=teacher, cache_dir=str(args.work / "cache"))
    model, tok = load_teacher(teacher)
    onnx = OnnxLabelers(cfg, teacher, "benchmark-reference-teacher")
    if args.runtime == "torch":
        label = lambda t: teacher_logits(model, tok, t, 64, 128, "torch")  # noqa: E731
    elif args.runtime == "onnx":
        label = lambda t: onnx.fp32(t, "onnx")  # noqa: E731
    elif args.runtime == "int8":
        label = lambda t: onnx.int8(t, "int8")  # noqa: E731
    else:
        # Calibrated on other rows than the ones timed, as a run calibrates on a sample.
        calibration = sample_rows(args.shared, smoke.at_most(4000, smoke.ROWS), 0, 20_000)
        cal = calibrate(onnx, calibration_sample(calibration, 0))
        hybrid = hybrid_labeler(onnx, cal.margin)
        label = lambda t: hybrid(t, "auto")  # noqa: E731
    label(texts[:200])  # warm-up: sessions built, first-call costs paid
    if args.endless:  # the other side of an overlap measurement: busy until killed
        print("ready", flush=True)
        while True:
            label(texts)
    times, out = [], None
    for _ in range(args.repeats):
        t = time.perf_counter()
        out = label(texts)
        times.append(time.perf_counter() - t)
    ref = np.load(args.work / "torch.npy") if (args.work / "torch.npy").is_file() else None
    if args.runtime == "torch":
        np.save(args.work / "torch.npy", out)
        ref = out
    agreement = float((out.argmax(1) == ref.argmax(1)).mean()) if ref is not None else None
    return {"rows_per_s": len(texts) / statistics.median(times), "agreement": agreement}


def worker_train(args: argparse.Namespace) -> dict:
    import random

    import torch

    from edgekd.data import bucketed_batches
    from edgekd.threads import ThreadGovernor

    governor = ThreadGovernor() if args.threads == 0 else None  # 0: what edgekd runs
    if governor is None:
        torch.set_num_threads(args.threads)
    before = args.student == "before"
    texts, tok, ids, model = bilstm_setup(args, before)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3, fused=not before)
    lengths = [tok.length(x) for x in ids]
    batches = bucketed_batches(lengths, args.batch, random.Random(0), pool=50 if before else None)
    target = torch.randn(len(texts), 2)

    done = [0]

    def step() -> int:
        idx = batches[done[0] // args.batch % len(batches)]
        enc = {k: torch.from_numpy(v) for k, v in tok.pad([ids[i] for i in idx]).items()}
        loss = ((model(**enc) - target[idx]) ** 2).mean()
        loss.backward()
        optim.step()
        optim.zero_grad()
        done[0] += len(idx)
        return len(idx)

    return rows_per_s(step, governor, args, warmup_s=1.0)


def bilstm_setup(args: argparse.Namespace, before: bool = False) -> tuple[Any, Any, Any, Any]:
    """(texts, tokenizer, ids, model): the default BiLSTM on seeded SST-2 rows."""
    import torch

    from edgekd.students.bilstm import BiLSTMConfig, BiLSTMStudent
    from edgekd.students.tokenizer import build_word_tokenizer

    texts = sample_rows(args.shared, smoke.at_most(20_000, smoke.ROWS), seed=1)
    tok = build_word_tokenizer(texts, 50_000, 1, True, 64)
    torch.manual_seed(0)
    config = BiLSTMConfig(embedding_dim=300, embedding_rank=64) if before else BiLSTMConfig()
    return texts, tok, tok.ids(texts), BiLSTMStudent(config, tok.vocab_size, 2)


def worker_probe(args: argparse.Namespace) -> dict:
    """The time plan's training-rate probe, median of `args.repeats`; `--threads 2`:
    all cores only, as it ran before it timed each count the governor may pick."""
    from edgekd import threads
    from edgekd.config import DistillConfig
    from edgekd.distill.timebudget import probe_train_rate

    if args.threads != 0:
        threads.thread_counts = lambda cores=None: [args.threads]  # type: ignore[assignment]
    texts, tok, _, model = bilstm_setup(args)
    cfg = DistillConfig(teacher="unused", batch_size=args.batch)
    rates = [probe_train_rate(cfg, model, tok, texts, 2) for _ in range(args.repeats)]
    return {"rows_per_s": statistics.median(rates)}


def worker_finetune(args: argparse.Namespace) -> dict:
    """`edgekd teacher`'s step, as `edgekd.distill.teacher.finetune` takes it."""
    import random

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from edgekd.config import TeacherConfig
    from edgekd.distill.teacher import resolve_base
    from edgekd.threads import ThreadGovernor

    governor = ThreadGovernor() if args.threads == 0 else None
    if governor is None:
        torch.set_num_threads(args.threads)
    cfg = TeacherConfig()
    base = resolve_base(cfg.base)
    tok = AutoTokenizer.from_pretrained(base)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=2).train()
    optim = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    texts = sample_rows(args.shared, smoke.at_most(2_000, smoke.ROWS), seed=2)
    rng = random.Random(0)

    def step() -> int:
        batch = rng.sample(texts, cfg.batch_size)
        enc = tok(batch, truncation=True, max_length=cfg.max_length, padding=True,
                  return_tensors="pt")  # fmt: skip
        y = torch.zeros(len(batch), dtype=torch.long)
        loss = torch.nn.functional.cross_entropy(model(**enc).logits, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        optim.zero_grad()
        return len(batch)

    return rows_per_s(step, governor, args, warmup_s=2.0)


def rows_per_s(step: Any, governor: Any, args: argparse.Namespace, warmup_s: float) -> dict:
    """Median rows/s of `step` (one optimiser step, returning its rows) over
    `args.repeats` windows of `args.window` seconds, after a warm-up window."""

    def window(seconds: float) -> float:
        rows, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            n = step()
            rows += n
            if governor is not None:
                governor.step(n)
        return rows / (time.perf_counter() - start)

    window(smoke.pick(warmup_s, smoke.WINDOW_S))
    if args.endless:  # the other side of an overlap measurement: busy until killed
        print("ready", flush=True)
        while True:
            window(60.0)
    return {"rows_per_s": statistics.median(window(args.window) for _ in range(args.repeats))}


def hog(seconds: float) -> subprocess.Popen:
    """Another process keeping both cores busy: a 2-thread PyTorch matmul loop."""
    code = (
        "import time, torch\n"
        "torch.set_num_threads(2)\n"
        "a = torch.randn(1024, 1024)\n"
        f"end = time.time() + {seconds}\n"
        "while time.time() < end: a @ a\n"
    )
    return subprocess.Popen([sys.executable, "-c", code])


def measure(
    args: argparse.Namespace,
    extra: list[str],
    env: dict,
    loaded: bool,
    beside: list[str] | None = None,
) -> dict:
    """A worker's figures (`extra` names it), alone, beside the 2-thread load, or beside
    another worker (`beside`: its arguments; it runs until this one ends, and this one
    starts once it has warmed up)."""
    base = [sys.executable, __file__, "--shared", str(args.shared), "--work", str(args.work)]
    base += ["--rows", str(args.rows), "--repeats", str(args.repeats)]
    base += ["--window", str(args.window)]
    cmd = [*base, *extra]
    load = hog(3600) if loaded else None
    if beside is not None:
        load = subprocess.Popen(
            [*base, *beside, "--endless"], env=env, stdout=subprocess.PIPE, text=True
        )
        assert load.stdout is not None
        if load.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the worker beside ({' '.join(beside)}) ended before it was ready")
    try:
        time.sleep(1.0 if loaded else 0)
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        if load is not None and load.poll() is not None:  # the figure would be "alone"
            raise RuntimeError(f"the process beside ended (exit {load.returncode}) mid-measure")
    finally:
        if load is not None:
            load.kill()
            load.wait()
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    p.add_argument("--work", type=Path, default=REPO / "runs" / "bench-labelling")
    p.add_argument("--rows", type=int, default=3000, help="rows labelled per window")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--window", type=float, default=5.0, help="seconds per training window")
    p.add_argument(
        "--sections",
        nargs="+",
        choices=SECTIONS,
        default=list(SECTIONS),
        help="what to measure; the others keep their rows from the last results",
    )
    p.add_argument("--worker", choices=["label", "train", "finetune", "probe"])
    p.add_argument("--runtime", default="torch")
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--student", choices=["now", "before"], default="now")
    p.add_argument("--cpu", type=int, default=None, help="a worker: run on this core only")
    p.add_argument("--endless", action="store_true", help="a worker: busy until killed")
    args = p.parse_args()
    args.rows = smoke.at_most(args.rows, smoke.ROWS)
    args.repeats = smoke.at_most(args.repeats, smoke.REPEATS)
    args.window = smoke.pick(args.window, min(args.window, smoke.WINDOW_S))
    if args.worker:
        if args.cpu is not None:  # before torch or onnxruntime sizes its thread pools
            os.sched_setaffinity(0, {args.cpu})
        workers = {
            "label": worker_label,
            "train": worker_train,
            "finetune": worker_finetune,
            "probe": worker_probe,
        }
        print(json.dumps(workers[args.worker](args)))
        return
    GOMP_SPINCOUNT = "30000"  # the short spin tried against libgomp's default
    args.work.mkdir(parents=True, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    previous = REPO / "benchmarks" / "results" / "labelling_load.json"
    # A smoke run's rows are no measurement to keep, and a smoke run keeps none.
    rows = [
        r
        for r in (json.loads(previous.read_text()) if previous.is_file() else [])
        if r["what"] not in args.sections and not r.get("smoke") and not smoke.SMOKE
    ]
    # Labellers interleaved, one window each per round: a drift in the machine's speed
    # falls on every runtime alike (run back to back, auto once read faster than the int8
    # it is made of).
    one = argparse.Namespace(**{**vars(args), "repeats": 1})
    runtimes = ("torch", "onnx", "int8", "auto") if "label" in args.sections else ()
    for loaded in (False, True) if runtimes else ():
        env = {**base, "GOMP_SPINCOUNT": GOMP_SPINCOUNT}
        rounds: dict[str, list[dict]] = {runtime: [] for runtime in runtimes}
        for _ in range(args.repeats):
            for runtime in runtimes:
                extra = ["--worker", "label", "--runtime", runtime]
                rounds[runtime].append(measure(one, extra, env, loaded))
        for runtime, figures in rounds.items():
            rate = statistics.median(f["rows_per_s"] for f in figures)
            r = {**figures[0], "rows_per_s": rate}  # agreement: the same rows every round
            rows.append({"what": "label", "runtime": runtime, "loaded": loaded, **r})
            print(rows[-1], flush=True)
    for spin, threads in TRAIN_SETTINGS if "train" in args.sections else ():
        for batch in BATCHES:
            for loaded in (False, True):
                env = {**base, "GOMP_SPINCOUNT": spin}
                extra = ["--worker", "train", "--batch", str(batch), "--threads", str(threads)]
                r = measure(args, extra, env, loaded)
                setting = {"spin": spin, "threads": threads, "batch": batch, "loaded": loaded}
                rows.append({"what": "train", "student": "now", **setting, **r})
                print(rows[-1], flush=True)
    for loaded in (False, True) if "train" in args.sections else ():  # before, governed
        env = {**base, "GOMP_SPINCOUNT": LIBGOMP_DEFAULT}
        extra = ["--worker", "train", "--threads", "0", "--student", "before"]
        r = measure(args, extra, env, loaded)
        setting = {"spin": LIBGOMP_DEFAULT, "threads": 0, "batch": 50, "loaded": loaded}
        rows.append({"what": "train", "student": "before", **setting, **r})
        print(rows[-1], flush=True)
    for threads in FINETUNE_THREADS if "finetune" in args.sections else ():
        for loaded in (False, True):
            env = {**base, "GOMP_SPINCOUNT": LIBGOMP_DEFAULT}
            r = measure(args, ["--worker", "finetune", "--threads", str(threads)], env, loaded)
            rows.append(
                {"what": "finetune", "threads": threads, "loaded": loaded, **r,
                 "revision": revision()}
            )  # fmt: skip
            print(rows[-1], flush=True)
    for threads in (0, 2) if "probe" in args.sections else ():
        for loaded in (False, True):
            env = {**base, "GOMP_SPINCOUNT": LIBGOMP_DEFAULT}
            r = measure(args, ["--worker", "probe", "--threads", str(threads)], env, loaded)
            rows.append(
                {"what": "probe", "threads": threads, "loaded": loaded, **r,
                 "revision": revision()}
            )  # fmt: skip
            print(rows[-1], flush=True)
    if "overlap" in args.sections:
        env = {**base, "GOMP_SPINCOUNT": LIBGOMP_DEFAULT}
        label = ["--worker", "label", "--runtime", "auto"]
        train = ["--worker", "train", "--threads"]
        # Two of the cores this process may run on (a container's CPU set need not be 0-1).
        first, second = (str(c) for c in sorted(os.sched_getaffinity(0))[:2])
        # Alone on both cores (as a run labels, then trains), then one core each at once.
        r = {
            "label_alone": measure(args, label, env, False)["rows_per_s"],
            "train_alone": measure(args, [*train, "0"], env, False)["rows_per_s"],
            "label_beside": measure(
                args, [*label, "--cpu", first], env, False, beside=[*train, "1", "--cpu", second]
            )["rows_per_s"],
            "train_beside": measure(
                args, [*train, "1", "--cpu", second], env, False, beside=[*label, "--cpu", first]
            )["rows_per_s"],
        }
        rows.append({"what": "overlap", **r, "revision": revision()})
        print(rows[-1], flush=True)
    write(rows, args)


# The overlap's ceiling is worked out for a 13-minute SST-2 run (the default budget's
# 780 s, less ~60 s of loading and calibrating) over the rows it labels: 20 variants per
# sentence (115k) and 40 (223k), with the 61k training rows themselves.
OVERLAP_SECONDS = 720.0
OVERLAP_ROWS = (61_399 + 114_881, 61_399 + 223_307)


def overlap_lines(r: dict) -> list[str]:
    """The overlap table and its arithmetic: training row-passes in a budget when the
    labelling runs first on both cores, against the ceiling of labelling on one core while
    the student trains on the other (every labelled row at once usable, which it is not)."""
    lines = [
        "",
        "| labelling (auto) and training (BiLSTM, batch 50) | labelling rows/s | training rows/s |",
        "|---|---|---|",
        f"| one after the other, each on both cores | {r['label_alone']:.0f} | "
        f"{r['train_alone']:.0f} |",
        f"| side by side, one core each | {r['label_beside']:.0f} | {r['train_beside']:.0f} |",
        "",
        f"Training row-passes in {OVERLAP_SECONDS:.0f} s after labelling L rows: one after "
        "the other, (T − L / label_alone) × train_alone; side by side at best, "
        "(L / label_beside) × train_beside + (T − L / label_beside) × train_alone.",
        "",
        "| rows labelled | one after the other | side by side (ceiling) | gain |",
        "|---|---|---|---|",
    ]
    for n in OVERLAP_ROWS:
        after = (OVERLAP_SECONDS - n / r["label_alone"]) * r["train_alone"]
        both = n / r["label_beside"]
        beside = both * r["train_beside"] + (OVERLAP_SECONDS - both) * r["train_alone"]
        lines.append(f"| {n:,} | {after:,.0f} | {beside:,.0f} | {beside / after - 1:+.1%} |")
    lines += ["", f"Overlap measured at revision {r.get('revision', 'unknown')}."]
    return lines


def write(rows: list[dict], args: argparse.Namespace) -> None:
    def get(**kw: object) -> dict:
        return next(r for r in rows if all(r.get(k) == v for k, v in kw.items()))

    torch_quiet = get(what="label", runtime="torch", loaded=False)["rows_per_s"]
    lines = [
        "# Labelling and training throughput, quiet and under load (2 cores)",
        "",
        f"{platform.machine()}, {os.cpu_count()} cores; {args.rows:,} SST-2 training rows "
        f"per labelling window, median of {args.repeats}; load = a 2-thread PyTorch "
        "matmul loop in another process.",
        "",
        "| labeller | rows/s quiet | × PyTorch | agreement | rows/s loaded | loaded/quiet |",
        "|---|---|---|---|---|---|",
    ]
    for runtime in ("torch", "onnx", "int8", "auto"):
        q, ld = (
            get(what="label", runtime=runtime, loaded=False),
            get(what="label", runtime=runtime, loaded=True),
        )
        lines.append(
            f"| {runtime} | {q['rows_per_s']:.0f} | {q['rows_per_s'] / torch_quiet:.2f}× | "
            f"{q['agreement']:.4f} | {ld['rows_per_s']:.0f} | "
            f"{ld['rows_per_s'] / q['rows_per_s']:.2f} |"
        )
    lines += [
        "",
        "| training (the default BiLSTM) | batch | rows/s quiet | rows/s loaded | loaded/quiet |",
        "|---|---|---|---|---|",
    ]
    for setting in sorted({(r["spin"], r["threads"]) for r in rows if r["what"] == "train"}):
        spin, threads = setting
        for batch in sorted({r["batch"] for r in rows if r["what"] == "train"}):
            kw = {"what": "train", "student": "now", "spin": spin, "threads": threads}
            kw["batch"] = batch
            q = get(**kw, loaded=False)["rows_per_s"]
            ld = get(**kw, loaded=True)["rows_per_s"]
            name = (
                f"edgekd (ThreadGovernor), GOMP_SPINCOUNT {spin}"
                if threads == 0
                else f"{threads} thread{'s' * (threads > 1)}, GOMP_SPINCOUNT {spin}"
            )
            lines.append(f"| {name} | {batch} | {q:.0f} | {ld:.0f} | {ld / q:.2f} |")
    now = {s: get(what="train", student="now", threads=0, batch=50, loaded=s) for s in (0, 1)}
    old = {s: get(what="train", student="before", loaded=s) for s in (0, 1)}
    lines += [
        "",
        "| training step, governed, batch 50 | rows/s quiet | rows/s loaded | loaded/quiet |",
        "|---|---|---|---|",
        *(
            f"| {name} | {r[0]['rows_per_s']:.0f} | {r[1]['rows_per_s']:.0f} | "
            f"{r[1]['rows_per_s'] / r[0]['rows_per_s']:.2f} |"
            for name, r in (
                ("before: 300-d from a rank-64 table, per-tensor Adam, pools of 50", old),
                ("now: 64-d table, fused Adam, one-length batches", now),
            )
        ),
        "",
        f"Now / before, quiet: {now[0]['rows_per_s'] / old[0]['rows_per_s']:.2f}×; "
        f"loaded: {now[1]['rows_per_s'] / old[1]['rows_per_s']:.2f}×.",
    ]
    if any(r["what"] == "finetune" for r in rows):
        lines += [
            "",
            "| teacher fine-tuning (all-MiniLM-L6-v2, batch 32, ≤ 64 tokens) | rows/s quiet | "
            "rows/s loaded | loaded/quiet |",
            "|---|---|---|---|",
        ]
        tuned = {r["threads"] for r in rows if r["what"] == "finetune"}
        for threads in [t for t in (2, 1, 0) if t in tuned]:
            q = get(what="finetune", threads=threads, loaded=False)["rows_per_s"]
            ld = get(what="finetune", threads=threads, loaded=True)["rows_per_s"]
            name = (
                "edgekd (ThreadGovernor)"
                if threads == 0
                else f"{threads} thread{'s' * (threads > 1)}"
            )
            lines.append(f"| {name} | {q:.1f} | {ld:.1f} | {ld / q:.2f} |")
        measured = get(what="finetune", threads=0, loaded=False).get("revision", "unknown")
        lines += ["", f"Teacher fine-tuning measured at revision {measured}."]
    if any(r["what"] == "probe" for r in rows):
        lines += [
            "",
            "| time-budget probe (batch 50) | rows/s quiet | rows/s loaded | loaded/quiet |",
            "|---|---|---|---|",
        ]
        for threads, name in ((0, "edgekd: every count the governor may run, the fastest"),
                              (2, "before 9c3210b: all cores only")):  # fmt: skip
            q = get(what="probe", threads=threads, loaded=False)["rows_per_s"]
            ld = get(what="probe", threads=threads, loaded=True)["rows_per_s"]
            lines.append(f"| {name} | {q:.0f} | {ld:.0f} | {ld / q:.2f} |")
        measured = get(what="probe", threads=0, loaded=False).get("revision", "unknown")
        lines += ["", f"Probe measured at revision {measured}."]
    if any(r["what"] == "overlap" for r in rows):
        lines += overlap_lines(get(what="overlap"))
    out = REPO / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    if smoke.SMOKE:
        rows = [{**r, "smoke": True} for r in rows]
    (out / "labelling_load.json").write_text(json.dumps(rows, indent=2) + "\n")
    text = smoke.markdown("\n".join(lines) + "\n")
    (out / "labelling_load.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
