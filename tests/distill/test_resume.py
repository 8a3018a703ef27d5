"""kill -9 mid-epoch, rerun the same command: it resumes from the last finished epoch
and ends with the same weights, byte for byte, as a run that was never interrupted,
at whatever thread counts each run's ThreadGovernor picked (edgekd.threads)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import FEW_VARIANTS, NATIVE_BF16, SMALL_BILSTM, make_rows, write_tsv


def distill_argv(
    teacher: Path, data: Path, out: Path, epochs: int = 6, extra: tuple[str, ...] = ()
) -> list[str]:
    return [
        sys.executable, "-m", "edgekd", "distill", "--teacher", str(teacher),
        "--data", str(data), "--out", str(out), "--epochs", str(epochs), "--patience", "99",
        "-s", "student.options.embedding_dim=16", "-s", "student.options.hidden_size=8",
        "-s", "student.options.mlp_size=16",
        # No clock in the plan: a time budget sizes the transfer set and the epochs from
        # measured rates, which a loaded machine changes between the two runs.
        "--max-augmented", "4000", "-s", "time_budget=null",
        # 2 variants per text draw 8,000 candidates for the 4,000 kept, not auto's 75
        # per text (300,000, each one augmented before the cut).
        "-s", "augment.n_iter=2", *extra,
    ]  # fmt: skip


def one_core() -> None:
    """Run a child on one core: its ThreadGovernor then uses 1 thread throughout, while
    the killed and the resumed runs use what their governors pick (all cores when
    quiet, 1 when loaded, switching as the load changes): equal weights mean the
    thread count never changes the student, not only that resuming is exact."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def bigger_data(tmp_path_factory) -> Path:
    # 4,000 rows: epochs long enough (~0.3 s) to be killed inside one.
    folder = tmp_path_factory.mktemp("data")
    write_tsv(folder / "train.tsv", make_rows(4000, seed=1))
    write_tsv(folder / "dev.tsv", make_rows(200, seed=2))
    return folder


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        (),
        ("-s", "epoch_average=1"),  # the epochs' average is restored, not restarted
        # A cool-down over the last 70% of 6 epochs starts at step ⌈1.8 L⌉, planned after
        # epoch 1: the resumed run follows the plan its checkpoint recorded.
        ("-s", "lr_decay=cooldown", "-s", "cooldown=0.7"),
    ],
    ids=["plain", "epoch_average", "cooldown"],
)
def test_distill_killed_mid_epoch_resumes_to_the_same_weights(
    tmp_path, tiny_teacher, bigger_data, extra
):
    env = {**os.environ, "EDGEKD_CACHE": str(tmp_path / "cache")}
    whole = tmp_path / "whole"
    subprocess.run(distill_argv(tiny_teacher, bigger_data, whole, extra=extra), env=env,
                   check=True, capture_output=True, preexec_fn=one_core)  # fmt: skip
    if "cooldown=0.7" in extra:  # the share set is the share planned, not the default 0.2
        steps = json.loads((whole / "metrics.json").read_text())["history"][0]["steps"]
        resolved = yaml.safe_load((whole / "config.yaml").read_text())
        assert (resolved["cooldown_from"], resolved["cooldown_to"]) == (
            math.ceil((1.0 - 0.7) * 6 * steps),  # ⌈1.8 L⌉, as the float rounds
            6 * steps,
        )

    out = tmp_path / "s"
    proc = subprocess.Popen(
        distill_argv(tiny_teacher, bigger_data, out, extra=extra), env=env,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:  # epoch 2 done: the kill lands in epoch 3, mid-way
        if line.startswith("epoch 2:"):
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert not out.exists()  # nothing half-written at --out
    assert (tmp_path / ".s.resume" / "state.json").is_file()

    again = subprocess.run(
        distill_argv(tiny_teacher, bigger_data, out, extra=extra), env=env,
        capture_output=True, text=True,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    resumed = [x for x in again.stderr.splitlines() if x.startswith("resuming from epoch")]
    assert resumed and resumed[0].split()[3] in ("2", "3"), again.stderr
    assert "epoch 1:" not in again.stderr  # finished epochs are not trained again
    assert sha256(out / "model.safetensors") == sha256(whole / "model.safetensors")
    assert not (tmp_path / ".s.resume").exists()  # done: the checkpoint is gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "s", "whole"]


def test_a_changed_config_does_not_resume_and_names_the_field(
    tmp_path, tiny_teacher, tiny_data, monkeypatch
):
    from edgekd.config import DataConfig, DistillConfig
    from edgekd.distill import checkpoint as ckpt
    from edgekd.stages import distill as stage
    from edgekd.stages.distill import distill as run_distill

    cfg = DistillConfig(
        teacher=str(tiny_teacher), data=DataConfig(spec=str(tiny_data)), epochs=2,
        student={"name": "bilstm", "options": SMALL_BILSTM},
        augment={"n_iter": FEW_VARIANTS},  # three runs train here: few rows
    )  # fmt: skip
    # Keep the checkpoint of a first run (a finished run removes what edgekd owns).
    monkeypatch.setattr(stage, "discard_checkpoint", lambda out: None)
    run_distill(cfg, tmp_path / "s")
    assert (tmp_path / ".s.resume" / "state.json").is_file()
    printed: list[str] = []
    monkeypatch.setattr(
        ckpt.console, "print", lambda *a, **k: printed.append(" ".join(map(str, a)))
    )
    run_distill(cfg.model_copy(update={"lr": 0.01}), tmp_path / "s")
    assert any("not resuming" in p and "config.lr (None → 0.01) changed" in p for p in printed), (
        printed
    )
    printed.clear()
    # The same config as the last run's: it resumes (both its epochs done: none to train).
    run_distill(cfg.model_copy(update={"lr": 0.01}), tmp_path / "s")
    assert any(p.startswith("resuming from epoch 3") for p in printed), printed


def _wrong_shape(tensors: dict, prefix: str) -> None:
    key = next(k for k in sorted(tensors) if k.startswith(prefix) and tensors[k].ndim)
    tensors[key] = tensors[key].flatten()[:1].clone()


# Ways a checkpoint whose fingerprint matches (the config and rows are in plain JSON, so
# anyone can copy them) may still not fit: each changes state.json or the tensors.
TAMPERED = {
    "model tensor shape": lambda meta, t: _wrong_shape(t, "model."),
    "optimiser moment shape": lambda meta, t: _wrong_shape(t, "optim."),
    "best weights shape": lambda meta, t: _wrong_shape(t, "best."),
    "epoch not a count": lambda meta, t: meta.update(epoch="2"),
    "history of another length": lambda meta, t: meta.update(history=meta["history"][:1]),
    "history record not numbers": lambda meta, t: meta["history"][0].update(train_loss="x"),
    "numpy generator state": lambda meta, t: meta["rng"]["numpy"].__setitem__(1, [1, 2]),
}


@pytest.mark.parametrize("tamper", list(TAMPERED), ids=list(TAMPERED))
def test_a_checkpoint_that_does_not_fit_starts_over_to_the_same_weights(
    tmp_path, tiny_teacher, tiny_data, monkeypatch, tamper
):
    from safetensors.torch import load_file, save_file

    from edgekd.config import DataConfig, DistillConfig
    from edgekd.distill import checkpoint as ckpt
    from edgekd.stages import distill as stage
    from edgekd.stages.distill import distill as run_distill

    cfg = DistillConfig(
        teacher=str(tiny_teacher), data=DataConfig(spec=str(tiny_data)), epochs=2,
        student={"name": "bilstm", "options": SMALL_BILSTM}, augment={"n_iter": FEW_VARIANTS},
    )  # fmt: skip
    monkeypatch.setattr(stage, "discard_checkpoint", lambda out: None)
    run_distill(cfg, tmp_path / "s")
    first = sha256(tmp_path / "s" / "model.safetensors")
    state = tmp_path / ".s.resume"
    meta = json.loads((state / "state.json").read_text())
    tensors = load_file(str(state / "state.safetensors"))
    TAMPERED[tamper](meta, tensors)
    (state / "state.json").write_text(json.dumps(meta))
    save_file(tensors, str(state / "state.safetensors"))
    printed: list[str] = []
    monkeypatch.setattr(
        ckpt.console, "print", lambda *a, **k: printed.append(" ".join(map(str, a)))
    )
    run_distill(cfg, tmp_path / "s")
    assert any("does not fit this run" in p and "starting over" in p for p in printed), printed
    # Trained from the start, with the weights, moments and generators as they were
    # before the checkpoint was read: the first run's bytes.
    assert sha256(tmp_path / "s" / "model.safetensors") == first


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", pytest.param("bf16", marks=NATIVE_BF16)])
def test_teacher_killed_mid_epoch_resumes_to_the_same_weights(tmp_path, bigger_data, precision):
    # On one thread and on two, killed or not: bf16 steps are as thread-exact as fp32's.
    from conftest import build_tiny_bert

    base = build_tiny_bert(tmp_path / "base", classifier=False)

    def argv(out: Path) -> list[str]:
        return [
            sys.executable, "-m", "edgekd", "teacher", "--base", str(base),
            "--data", str(bigger_data), "--out", str(out), "--epochs", "4",
            "--batch-size", "64", "--max-length", "16", "--max-train", "1500",
            "-s", "time_budget=null",  # a budget's end depends on the speed of each run
            "-s", f"precision={precision}",
        ]  # fmt: skip

    # The uninterrupted run on one core, the others at default threads (`one_core`).
    whole = tmp_path / "whole"
    subprocess.run(argv(whole), check=True, capture_output=True, preexec_fn=one_core)
    out = tmp_path / "t"
    proc = subprocess.Popen(argv(out), stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("epoch 2/4:"):
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    again = subprocess.run(argv(out), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert "resuming from epoch" in again.stderr and "epoch 1/4" not in again.stderr
    assert sha256(out / "model.safetensors") == sha256(whole / "model.safetensors")
    assert not (tmp_path / ".t.resume").exists()


def test_discard_checkpoint_removes_only_what_its_marker_lists(tmp_path):
    from edgekd.distill.checkpoint import checkpoint_dir, discard_checkpoint
    from edgekd.io import atomic_dir, write_json

    out = tmp_path / "s"
    with atomic_dir(checkpoint_dir(out)) as tmp:
        write_json(tmp / "state.json", {"epoch": 1})
    discard_checkpoint(out)
    assert not checkpoint_dir(out).exists()  # edgekd's own: gone whole

    # A crafted checkpoint folder (a marker listing a path outside it) loses nothing.
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    folder = checkpoint_dir(out)
    folder.mkdir()
    (folder / "notes.txt").write_text("also mine")
    marker = {"written_by": "edgekd", "files": ["../victim.txt", "notes.txt"]}
    (folder / ".edgekd.json").write_text(json.dumps(marker))
    discard_checkpoint(out)
    assert victim.read_text() == "mine" and (folder / "notes.txt").read_text() == "also mine"


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [
        (412.5, 412.5),
        (-3, -3.0),  # a run past its budget: the resumed one has nothing left
        ("412", None),
        (True, None),
        (float("nan"), None),
        (2**1100, None),  # past a float's range
        ([1], None),
    ],
)
def test_budget_left_reads_a_finite_number_of_seconds_or_none(tmp_path, recorded, expected):
    from edgekd.distill.checkpoint import budget_left
    from edgekd.io import atomic_dir

    folder = tmp_path / ".s.resume"
    with atomic_dir(folder) as tmp:  # NaN is not JSON: written as Python's json writes it
        (tmp / "state.json").write_text(json.dumps({"epoch": 1, "budget_left_s": recorded}))
    assert budget_left(folder) == expected
    assert budget_left(tmp_path / "nowhere") is None


def test_resumed_clock_holds_what_was_left_and_never_more_than_the_budget():
    from edgekd.distill.timebudget import RESERVE_S, Clock
    from edgekd.stages.distill import resumed_clock

    clock = Clock(10.0, start=0.0)  # a 10-minute budget
    assert resumed_clock(clock, None) is None  # an older checkpoint: no clock
    kept = resumed_clock(clock, 120.0)
    assert kept is not None and kept.start == 0.0 and kept.budget_s == 120.0 + RESERVE_S
    # A file may say anything: capped at a new run's 600 s less the reserve.
    crafted = resumed_clock(clock, 1e12)
    assert crafted is not None and crafted.budget_s == 600.0
    spent = resumed_clock(clock, -50.0)
    assert spent is not None and spent.budget_s == RESERVE_S
