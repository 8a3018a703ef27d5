"""Memory and time on long rows: `edgekd teacher` and `edgekd distill` with defaults on
a long-review task, and `edgekd distill` on data holding one huge row.

One command: `python benchmarks/long_rows.py` (no ../shared needed: the data is made
here, seeded). The tasks:
  reviews:  800 training and 200 dev rows of synthetic reviews, lengths log-normal with
            a median of 176 words, the longest 1,287 (the shape of the issue's task:
            movie reviews), 2 labels set by sentiment words among filler;
  row-1500, row-25k, row-5mb:  the first 200 training rows of `reviews` plus one row
            of 1,500 words, 25,000 words, or ~5 MB (800,000 words).
Each command runs as its own child process; its peak RSS is the child's maximum
resident set (`getrusage(RUSAGE_CHILDREN)` read by a fresh wrapper process per run),
its time the wall clock around it. The teacher is the packaged all-MiniLM-L6-v2
fine-tuned by `edgekd teacher` (defaults, 1 epoch); every distill uses it, with
defaults (`reviews`) or `--epochs 1 -s augment.n_iter=2` (the huge-row tasks, which
measure the row, not the epochs). Writes benchmarks/results/long_rows.{json,md}.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path

import smoke  # benchmarks/ is on the path of its own scripts

REPO = Path(__file__).resolve().parents[1]
POSITIVE = ["good", "great", "fine", "love", "superb", "fun", "wonderful", "moving"]
NEGATIVE = ["bad", "awful", "poor", "hate", "dull", "boring", "tedious", "weak"]
FILLER = [
    *("the", "movie", "plot", "was", "a", "and", "film", "actors", "really", "very"),
    *("story", "scene", "director", "script", "camera", "music", "long", "short"),
    *("character", "ending", "time", "people", "they", "this", "that", "it", "of", "in"),
]
# Runs a command and prints its peak RSS in KiB: RUSAGE_CHILDREN of a process that has
# had exactly one child is that child's maximum resident set.
WRAPPER = (
    "import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)"
)


def review(rng: random.Random, words: int) -> tuple[str, int]:
    label = rng.randint(0, 1)
    text = [rng.choice(FILLER) for _ in range(words)]
    for _ in range(max(1, words // 30)):  # one sentiment word per 30
        text.insert(rng.randint(0, len(text)), rng.choice(POSITIVE if label else NEGATIVE))
    return " ".join(text), label


def write(folder: Path, split: str, rows: list[tuple[str, int]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    body = "".join(f"{t}\t{y}\n" for t, y in rows)
    (folder / f"{split}.tsv").write_text("sentence\tlabel\n" + body)


def make_tasks(root: Path, train: int, dev: int, huge: dict[str, int]) -> dict[str, Path]:
    rng = random.Random(0)

    # A smoke run (the README test) checks wiring: short rows but the one longest, so the
    # real teacher it fine-tunes reads 200 rows of ~20 words, not of ~176 (282 s in CI).
    median = smoke.pick(176, 20)

    def lengths(n: int) -> list[int]:
        out = [min(1287, max(5, int(math.exp(rng.gauss(math.log(median), 0.7))))) for _ in range(n)]
        out[0] = 1287
        return out

    reviews = {s: [review(rng, k) for k in lengths(n)] for s, n in (("train", train), ("dev", dev))}
    tasks = {"reviews": root / "reviews"}
    for split, rows in reviews.items():
        write(tasks["reviews"], split, rows)
    for name, words in huge.items():
        tasks[name] = root / name
        write(tasks[name], "train", [*reviews["train"][:200], review(rng, words)])
        write(tasks[name], "dev", reviews["dev"])
    return tasks


def measure(cmd: list[str], log: Path) -> dict:
    start = time.perf_counter()
    with log.open("w") as f:
        done = subprocess.run(
            [sys.executable, "-c", WRAPPER, *cmd], stdout=subprocess.PIPE, stderr=f, text=True
        )
    kib, rc = done.stdout.split()[-2:]
    return {
        "returncode": int(rc),
        "peak_rss_mib": round(int(kib) / 1024),
        "seconds": round(time.perf_counter() - start, 1),
        "notes": [x for x in log.read_text().splitlines() if x.startswith("data: ")],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, default=smoke.runs_dir(REPO / "runs" / "bench-long"))
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    # Under smoke, 60 rows: the real teacher fine-tunes 2 steps of 32 (at 200: 6 steps,
    # 15 s on 2 cores), and 6 are held out to select.
    train, dev = smoke.at_most(800, 60), smoke.at_most(200, 40)
    huge = smoke.pick(
        {"row-1500": 1500, "row-25k": 25_000, "row-5mb": 800_000}, {"row-5mb": 800_000}
    )
    args.work.mkdir(parents=True, exist_ok=True)
    tasks = make_tasks(args.work / "data", train, dev, huge)
    edgekd = [sys.executable, "-m", "edgekd"]
    teacher = args.work / "teacher"
    results = {}
    results["teacher reviews"] = measure(
        [*edgekd, "teacher", "--data", str(tasks["reviews"]), "--out", str(teacher),
         "--epochs", "1", "--overwrite"],
        args.work / "teacher.log",
    )  # fmt: skip
    quick = ["--epochs", "1", "-s", "augment.n_iter=2"]
    for name, data in tasks.items():
        if smoke.SMOKE and name == "reviews":  # the one-long-row distill runs the same path
            continue
        extra = quick if name != "reviews" else []
        results[f"distill {name}"] = measure(
            [*edgekd, "distill", "--teacher", str(teacher), "--data", str(data),
             "--out", str(args.work / f"student-{name}"), "--overwrite", *extra],
            args.work / f"distill-{name}.log",
        )  # fmt: skip
    meta = {"smoke": smoke.SMOKE, "train_rows": train, "dev_rows": dev, "huge_rows": huge}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "long_rows.json").write_text(json.dumps({**meta, "runs": results}, indent=2))
    md = [
        "# Long rows: peak memory and time, 2 cores",
        "",
        "| command | exit | peak RSS | wall | what edgekd said |",
        "|---|---|---|---|---|",
    ]
    for name, r in results.items():
        said = "; ".join(n.removeprefix("data: ") for n in r["notes"]) or "-"
        md.append(
            f"| {name} | {r['returncode']} | {r['peak_rss_mib']:,} MiB | {r['seconds']} s "
            f"| {said} |"
        )
    text = smoke.markdown("\n".join(md) + "\n")
    (args.out / "long_rows.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
