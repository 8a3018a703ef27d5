"""What a resume costs: `edgekd distill` on 20,000 SST-2 rows (and at most 80,000
augmented), killed with SIGKILL in the middle of an epoch, then rerun with the same
command.

One command: `python benchmarks/resume_cost.py` (needs ../shared). Four runs of the
same distillation, one after the other on this machine, teacher logits cached first so
no run pays for labelling:
  whole:    uninterrupted;
  one-core: uninterrupted, pinned to one core (its ThreadGovernor runs 1 thread);
  killed:   SIGKILL once epoch `--kill-after` has printed its line (so mid-epoch);
  resumed:  the same command again.
Reported: seconds from start to the first epoch line minus that epoch's own seconds
(start-up: data, cached logits, student, and for `resumed` the checkpoint) for `whole`
and `resumed`, the work lost to the kill, total seconds, and whether `resumed` and
`one-core` end with the same model.safetensors sha256 as `whole`.
Then the same under a time budget (`--budget` minutes, no `--epochs`: the clock
chooses the rows and the epochs): uninterrupted, and killed half-way into the epoch
after `--kill-after` then rerun. Reported: the epochs each trained, the seconds the
checkpoint held of the budget, and the walls against the budget (the resumed run
spends what was left, its own start-up included, so the two together take about the
budget plus the part of an epoch the kill cut off, beyond which each pays only its
interpreter start and its saving). A kill that lands after the run ended, or a run
that fails, is named in the table. Writes benchmarks/results/resume_cost.{json,md}.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import smoke  # benchmarks/ is on the path of its own scripts
from distill_default import cpu, revision

REPO = Path(__file__).resolve().parents[1]
EPOCH = re.compile(r"^epoch (\d+): .*, ([\d.]+) s$")
LEFT = re.compile(r"^time budget: (\d+) s left at the checkpoint")


def argv(args: argparse.Namespace, out: Path, budget: float | None = None) -> list[str]:
    # Under a budget the clock chooses the epochs (and the rows): no `--epochs`.
    length = ["--epochs", str(args.epochs)] if budget is None else ["--time-budget", str(budget)]
    return [
        sys.executable, "-m", "edgekd", "distill",
        "--teacher", str(args.shared / "models" / "sst2-minilm-teacher"),
        "--data", str(args.shared / "data" / "sst2"), "--max-train", str(args.rows),
        *length, "--patience", "99", "--seed", "0", "--out", str(out),
        # The transfer set capped: 40 variants of 20,000 rows would take ~8 minutes to
        # label and ~3 an epoch.
        "--max-augmented", str(smoke.at_most(args.augmented, smoke.AUGMENTED)),
    ]  # fmt: skip


def one_core() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def run(
    cmd: list[str], env: dict[str, str], kill_after: int | None = None, pinned: bool = False
) -> dict:
    """Run `cmd`, timing each stderr line; SIGKILL after epoch `kill_after`'s line."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, stderr=subprocess.PIPE, text=True, preexec_fn=one_core if pinned else None
    )
    assert proc.stderr is not None
    epochs, resumed_from, left_s = [], None, None
    for line in proc.stderr:
        now = time.perf_counter() - start
        if line.startswith("resuming from epoch"):
            resumed_from = int(line.split()[3])
        if left := LEFT.match(line):
            left_s = int(left[1])
        m = EPOCH.match(line.strip())
        if m:
            epochs.append({"epoch": int(m[1]), "at_s": now, "epoch_s": float(m[2])})
            if kill_after is not None and int(m[1]) == kill_after:
                time.sleep(0.5 * epochs[-1]["epoch_s"])  # half-way into the next epoch
                proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = epochs[0] if epochs else None
    return {
        "seconds": round(time.perf_counter() - start, 2),
        "returncode": proc.returncode,
        "epochs": epochs,
        "resumed_from": resumed_from,
        "budget_left_s": left_s,
        "startup_s": round(first["at_s"] - first["epoch_s"], 2) if first else None,
    }


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    p.add_argument("--work", type=Path, default=smoke.runs_dir(REPO / "runs" / "bench-resume"))
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--augmented", type=int, default=80_000, help="Augmented rows at most.")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--kill-after", type=int, default=2)
    p.add_argument("--budget", type=float, default=4.0, help="Minutes, for the budget runs.")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    args.rows = smoke.at_most(args.rows, smoke.ROWS)
    # Smoke: killed in the last epoch, the fewest that leave one to resume. Not after
    # epoch 1: its first-call costs make it several times the next, so half of it
    # (the wait before the kill) can outlast the whole of epoch 2.
    args.epochs = smoke.at_most(args.epochs, args.kill_after + 1)
    if not (args.shared / "data" / "sst2" / "train.tsv").is_file():
        sys.exit(f"{args.shared} has no data/sst2: pass --shared")
    args.work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "EDGEKD_CACHE": str(args.work / "cache")}
    # Label once, so every timed run reads the same cached teacher logits.
    warm = run([*argv(args, args.work / "warm"), "--epochs", "1"], env)
    whole = run(argv(args, args.work / "whole"), env)
    pinned = run(argv(args, args.work / "one-core"), env, pinned=True)
    killed = run(argv(args, args.work / "student"), env, kill_after=args.kill_after)
    resumed = run(argv(args, args.work / "student"), env)
    same = sha256(args.work / "whole" / "model.safetensors") == sha256(
        args.work / "student" / "model.safetensors"
    )
    same_one_core = sha256(args.work / "whole" / "model.safetensors") == sha256(
        args.work / "one-core" / "model.safetensors"
    )
    # Under a budget: the clock's choices differ run to run, so no sha256; the epochs
    # and the walls are the figures. Smoke: half a minute.
    budget = smoke.at_most(args.budget, 0.5)
    whole_b = run(argv(args, args.work / "whole-budget", budget), env)
    killed_b = run(argv(args, args.work / "budget", budget), env, kill_after=args.kill_after)
    resumed_b = run(argv(args, args.work / "budget", budget), env)
    # The epochs the killed run finished, then those the resumed one trained (a set: a
    # kill before a checkpoint was written would have the resumed run train one again).
    trained_b = sorted({e["epoch"] for e in killed_b["epochs"] + resumed_b["epochs"]})
    # Under a budget the clock may end the run before the kill lands (the resumed run
    # then finds no checkpoint): the table says so rather than print figures of nothing.
    faults = [
        f"{name} exited {r['returncode']}"
        for name, r, ok in (
            ("uninterrupted", whole_b, 0),
            ("killed", killed_b, -signal.SIGKILL),
            ("resumed", resumed_b, 0),
        )
        if r["returncode"] != ok
    ]
    killed_at = max((e["epoch"] for e in killed_b["epochs"]), default=0)
    epoch_s = [e["epoch_s"] for e in whole["epochs"]]
    result = {
        "smoke": smoke.SMOKE,
        "revision": revision(),
        "cpu": cpu(),
        "rows": args.rows,
        "augmented_at_most": args.augmented,
        "epochs": args.epochs,
        "killed_after_epoch": args.kill_after,
        "killed_returncode": killed["returncode"],
        "resumed_from_epoch": resumed["resumed_from"],
        "same_weights_sha256": same,
        "one_core_same_weights_sha256": same_one_core,
        "startup_s": {"fresh": whole["startup_s"], "resumed": resumed["startup_s"]},
        "resume_overhead_s": round(resumed["startup_s"] - whole["startup_s"], 2),
        "median_epoch_s": round(statistics.median(epoch_s), 2),
        "seconds": {
            "labelling_run": warm["seconds"],
            "whole": whole["seconds"],
            "one_core": pinned["seconds"],
            "killed": killed["seconds"],
            "resumed": resumed["seconds"],
        },
        "runs": {"whole": whole, "one_core": pinned, "killed": killed, "resumed": resumed},
        "budget": {
            "minutes": budget,
            "whole_epochs": len(whole_b["epochs"]),
            "whole_s": whole_b["seconds"],
            "killed_s": killed_b["seconds"],
            "resumed_from_epoch": resumed_b["resumed_from"],
            "left_at_checkpoint_s": resumed_b["budget_left_s"],
            "resumed_s": resumed_b["seconds"],
            "resumed_epochs": len(trained_b),  # the killed and the resumed runs together
            "killed_after_epoch": killed_at,
            "faults": faults,
            "resumed_returncode": resumed_b["returncode"],
            "runs": {"whole": whole_b, "killed": killed_b, "resumed": resumed_b},
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "resume_cost.json").write_text(json.dumps(result, indent=2) + "\n")
    s = result["seconds"]
    md = [
        f"# Resume cost: distill, {args.rows:,} SST-2 rows and at most {args.augmented:,} "
        f"augmented, {args.epochs} epochs, 2 cores",
        "",
        f"Revision {result['revision']}, {result['cpu']}.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| start-up, fresh run (data, cached logits, student) | {whole['startup_s']} s |",
        f"| start-up, resumed run (+ checkpoint load) | {resumed['startup_s']} s |",
        f"| start-up difference, resumed − fresh | {result['resume_overhead_s']} s |",
        f"| median epoch | {result['median_epoch_s']} s |",
        f"| killed after epoch / resumed from epoch | {args.kill_after} / "
        f"{resumed['resumed_from']} |",
        f"| wall: uninterrupted / killed + resumed | {s['whole']} s / "
        f"{round(s['killed'] + s['resumed'], 2)} s |",
        f"| same weights (sha256) as uninterrupted | {'yes' if same else 'NO'} |",
        f"| uninterrupted on one core: same weights | {'yes' if same_one_core else 'NO'} |",
        f"| wall: uninterrupted on one core | {s['one_core']} s |",
        "",
        f"Under a {budget:g}-minute budget (`--time-budget`, no `--epochs`):",
        "",
        "| figure | value |",
        "|---|---|",
        f"| uninterrupted: epochs, wall | {len(whole_b['epochs'])}, {whole_b['seconds']} s |",
        f"| killed after epoch / resumed from epoch | {killed_at} / {resumed_b['resumed_from']} |",
        *([f"| **not a measurement** | {'; '.join(faults)} |"] if faults else []),
        f"| budget left at the checkpoint (the resumed run's clock) | "
        f"{resumed_b['budget_left_s']} s |",
        f"| killed + resumed: epochs, wall | {len(trained_b)}, {killed_b['seconds']} s + "
        f"{resumed_b['seconds']} s = {round(killed_b['seconds'] + resumed_b['seconds'], 2)} s |",
    ]
    text = smoke.markdown("\n".join(md) + "\n")
    (args.out / "resume_cost.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
