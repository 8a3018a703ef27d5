"""The early passes: the student trains on what the teacher has labelled while it
labels the rest, and a run's recorded passes replay to the same weights."""

import copy
import itertools
import time

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from conftest import SMALL_BILSTM
from edgekd.config import AugmentConfig, DataConfig, DistillConfig
from edgekd.distill import labeling
from edgekd.distill.early import LabelFeed, early_passes, overlaps, run_labelling
from edgekd.distill.labeling import AugmentedPlan, Meter, label_chunks
from edgekd.errors import EdgeKDError
from edgekd.registry import STUDENTS

# One length (the same four words in 24 orders): one-length batches are then full, 5 of
# 8 rows to the 40 training rows, and the passes' steps are plain arithmetic.
ORDERS = list(itertools.permutations(["good", "bad", "film", "plot"]))
TEXTS = [" ".join(ORDERS[i % len(ORDERS)]) for i in range(120)]
N_TRAIN = 40  # the first 40 rows are the training rows; the other 80, augmented


def _cfg(**kw):
    base = {
        "teacher": "t",
        "batch_size": 8,
        "student": {"name": "bilstm", "options": SMALL_BILSTM},
        "seed": 3,
    }
    return DistillConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def teacher(tiny_teacher):
    from edgekd.distill.teacher import load_teacher

    return load_teacher(str(tiny_teacher))


def _student(cfg, teacher):
    torch.manual_seed(cfg.seed)
    return STUDENTS.get("bilstm").prepare(cfg.student.options, TEXTS, 2, *teacher)


def _logits(n, seed):
    return np.random.default_rng(seed).normal(size=(n, 2)).astype(np.float32)


class ScriptedFeed(LabelFeed):
    """A feed whose labelling is a script, not a thread: after the `k`-th step the
    next chunk arrives (`arrivals`), and after `last` steps labelling is done."""

    def __init__(self, train, chunks, arrivals, last):
        super().__init__(cores=2)
        self.put("train", train)
        self.pending, self.arrivals, self.last = list(chunks), list(arrivals), last
        self.steps = 0

    def stepped(self):
        self.steps += 1
        while self.arrivals and self.steps >= self.arrivals[0]:
            self.arrivals.pop(0)
            self.put_chunk(self.pending.pop(0))
        if self.steps >= self.last:
            self.done.set()


@pytest.fixture
def scripted(monkeypatch):
    """Every step of an early pass tells the feed (the script's clock is its steps)."""
    from edgekd.distill import trainer  # early_passes imports its step from here

    step = trainer.optimiser_step
    feeds = []

    def counted(*a, **k):
        step(*a, **k)
        for feed in feeds:
            feed.stepped()

    monkeypatch.setattr(trainer, "optimiser_step", counted)
    return feeds


def test_label_feed_leaves_a_core_to_the_student_only_while_it_trains():
    feed = LabelFeed(cores=2)
    assert feed.workers() == 2  # labelling alone: both cores
    feed.training.set()
    assert feed.workers() == 1
    feed.done.set()
    assert feed.workers() == 2
    assert LabelFeed(cores=1).workers() == 1


def test_label_feed_gives_the_augmented_prefix_in_chunk_order():
    feed = LabelFeed(cores=2)
    feed.put_chunk(np.full((3, 2), 1.0, np.float32))
    feed.put_chunk(np.full((3, 2), 2.0, np.float32))
    assert feed.augmented_rows() == 6
    np.testing.assert_array_equal(feed.augmented(4)[:, 0], [1, 1, 1, 2])
    assert feed.trained_by(10.0) == 0.0  # no step yet: no pace
    feed.trained_rows, feed.trained_s = 300, 2.0
    assert feed.trained_by(10.0) == 300 + 150 * 10.0


def test_early_passes_cover_the_chunks_labelled_when_each_starts_and_end_with_labelling(
    scripted, teacher
):
    cfg = _cfg()
    model, tok = _student(cfg, teacher)
    chunks = [_logits(40, 1), _logits(40, 2)]
    # 40 training rows in batches of 8: 5 steps a pass. The first chunk lands after
    # step 3 (inside pass 1), the second after step 12, and labelling ends at step 20.
    feed = ScriptedFeed(_logits(N_TRAIN, 0), chunks, arrivals=[3, 12], last=20)
    scripted.append(feed)
    labels = [i % 2 for i in range(N_TRAIN)] + [0] * 80
    threads = torch.get_num_threads()
    passes = early_passes(cfg, model, tok, TEXTS, labels, N_TRAIN, feed=feed)
    # Pass 1: 40 rows, 5 steps (to step 5). Pass 2: 80 rows, 10 steps (to 15); the
    # second chunk came at step 12, inside it. Pass 3: 120 rows, cut at step 20.
    assert passes == [(0, 5), (40, 10), (80, 5)]
    assert feed.trained_rows == 20 * 8
    assert torch.get_num_threads() == threads and not feed.training.is_set()  # restored


def test_early_passes_replayed_give_the_weights_the_overlapped_run_trained(scripted, teacher):
    cfg = _cfg()
    model, tok = _student(cfg, teacher)
    start = copy.deepcopy(model.state_dict())
    train, chunks = _logits(N_TRAIN, 0), [_logits(40, 1), _logits(40, 2)]
    feed = ScriptedFeed(train, chunks, arrivals=[4, 9], last=17)
    scripted.append(feed)
    labels = [i % 2 for i in range(N_TRAIN)] + [0] * 80
    torch.manual_seed(11)
    passes = early_passes(cfg, model, tok, TEXTS, labels, N_TRAIN, feed=feed)
    scripted.clear()
    again, _ = _student(cfg, teacher)
    again.load_state_dict(start)
    torch.manual_seed(11)  # the same generator state as the overlapped run's start
    early_passes(
        cfg, again, tok, TEXTS, labels, N_TRAIN, replay=passes, train_logits=train,
        augmented_logits=np.concatenate(chunks),
    )  # fmt: skip
    trained = model.state_dict()
    assert any(not torch.equal(start[k], trained[k]) for k in start)  # it trained
    assert all(torch.equal(trained[k], again.state_dict()[k]) for k in trained)


def test_early_passes_end_at_once_when_labelling_finished_before_the_training_rows(teacher):
    cfg = _cfg()
    model, tok = _student(cfg, teacher)
    feed = LabelFeed(cores=2)
    feed.done.set()  # e.g. labelling failed before the training split's logits
    assert early_passes(cfg, model, tok, TEXTS, [0] * 120, N_TRAIN, feed=feed) == []


def test_early_passes_take_a_feed_or_a_replay_not_both(teacher):
    cfg = _cfg()
    model, tok = _student(cfg, teacher)
    with pytest.raises(ValueError, match="feed or a replay"):
        early_passes(cfg, model, tok, TEXTS, [0] * 120, N_TRAIN)


def test_run_labelling_hands_the_exception_to_the_caller_and_marks_the_feed_done():
    feed = LabelFeed(cores=2)

    def fails():
        raise RuntimeError("teacher broke")

    thread, out = run_labelling(feed, fails)
    thread.join(timeout=30)
    assert feed.done.is_set() and isinstance(out[0], RuntimeError)
    thread, out = run_labelling(LabelFeed(cores=2), lambda: 42)
    thread.join(timeout=30)
    assert out == [42]


def test_label_chunks_puts_each_chunk_in_the_feed_and_stops_when_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(labeling, "AUGMENT_CHUNK", 4)
    texts = [f"augmented {i}" for i in range(10)]
    feed = LabelFeed(cores=2)

    def labeler(rows, what):
        if feed.augmented_rows() >= 4:
            feed.stop.set()  # the student failed after the first chunk: no third one
        return np.array([[0.0, float(t.split()[1])] for t in rows], np.float32)

    cfg = DistillConfig(teacher="t", cache_dir=str(tmp_path))
    logits, _ = label_chunks(cfg, "fp", texts, labeler, "x", 2, AugmentedPlan(feed=feed), Meter())
    np.testing.assert_array_equal(logits[:, 1], range(8))  # chunks 1 and 2, not 3
    np.testing.assert_array_equal(feed.augmented(8)[:, 1], range(8))


def test_overlaps_only_the_plain_loop_of_one_process_with_a_core_to_spare():
    assert not overlaps(_cfg(time_budget=10.0), processes=1, cores=2)  # off by default
    plain = _cfg(time_budget=10.0, overlap=True)
    assert overlaps(plain, processes=1, cores=2)
    assert not overlaps(plain, processes=2, cores=2)  # accelerate launch
    assert not overlaps(plain, processes=1, cores=1)  # no core to spare
    for change in (
        {"overlap": False},
        {"time_budget": None},
        {"early_passes": [{"augmented_rows": 0, "steps": 1}]},  # a rerun replays them
        {"teacher_runtime": "torch"},
        {"extra_teachers": ["u"]},
        {"token_states": 8},
        {"augment": AugmentConfig(methods=["tang", "mixup"])},  # a training-time method
        {"loss": {"name": "annealing"}, "epochs": 20},  # its first epochs: another loss
        {"intermediate": "pkd", "student": {"name": "bert", "options": {"layers": 1}}},
        {"loss": "kd", "schedules": {"temperature": {"kind": "linear", "start": 4, "end": 2}}},
    ):
        assert not overlaps(_cfg(**{"time_budget": 10.0, "overlap": True, **change}), 1, 2), change


def test_run_distill_overlapped_records_its_passes_and_its_config_reruns_to_it(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # The teacher's labelling is held open until the student has stepped on 3 batches,
    # so the run trains early passes whatever this machine's speed; the resolved config
    # then replays them after labelling (from the cache) and gives the same weights.
    from edgekd.stages import distill as stage

    real = stage.teacher_labels

    def held_open(*a, **k):
        out = real(*a, **k)
        feed = a[6].feed
        deadline = time.monotonic() + 120  # a guard against a hang, not a timing
        while feed.trained_rows < 3 * 16 and time.monotonic() < deadline:
            time.sleep(0.01)
        return out

    monkeypatch.setattr(stage, "teacher_labels", held_open)
    monkeypatch.setattr(stage, "core_share", lambda: 2)  # a core to spare on any machine
    monkeypatch.setattr(stage, "probe_train_rate", lambda *a, **k: 1e9)
    cfg = DistillConfig(
        teacher=str(tiny_teacher), data=DataConfig(spec=str(tiny_data)), epochs=2,
        batch_size=16, student={"name": "bilstm", "options": SMALL_BILSTM},
        augment=AugmentConfig(methods=["mask", "ngram"], n_iter=3), time_budget=30.0,
        overlap=True,
    )  # fmt: skip
    m = stage.distill(cfg, tmp_path / "a")
    resolved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    passes = resolved["early_passes"]
    assert passes and sum(p["steps"] for p in passes) >= 3
    assert m.seconds["early_passes"] > 0
    monkeypatch.setattr(stage, "teacher_labels", real)
    again = stage.distill(DistillConfig(**resolved), tmp_path / "b")
    assert again.seconds["early_passes"] > 0  # replayed, not overlapped: no budget
    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in "ab")
    assert all((a[k] == b[k]).all() for k in a)


def test_early_passes_replayed_over_rows_the_run_lacks_are_refused_naming_the_fix(teacher):
    cfg = _cfg()
    model, tok = _student(cfg, teacher)
    with pytest.raises(EdgeKDError, match=r"early_passes\[0\] covers 60 augmented rows; this"):
        early_passes(
            cfg, model, tok, TEXTS, [0] * 120, N_TRAIN, replay=[(60, 2)],
            train_logits=_logits(N_TRAIN, 0), augmented_logits=_logits(40, 1),
        )  # fmt: skip


def test_resumed_replay_run_does_not_replay_its_passes_over_the_checkpoint(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # A config with early passes, killed after its epochs were checkpointed: the rerun
    # resumes the checkpoint's weights, which came after the passes; replaying them
    # again would only cost their time (and, were the loop to use them, change nothing).
    from edgekd.stages import distill as stage

    calls = []
    real = stage.early_passes
    monkeypatch.setattr(stage, "early_passes", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(stage, "discard_checkpoint", lambda out: None)
    cfg = DistillConfig(
        teacher=str(tiny_teacher), data=DataConfig(spec=str(tiny_data)), epochs=2,
        batch_size=16, student={"name": "bilstm", "options": SMALL_BILSTM},
        augment=AugmentConfig(methods=["mask", "ngram"], n_iter=3), time_budget=None,
        early_passes=[{"augmented_rows": 0, "steps": 4}],
    )  # fmt: skip
    stage.distill(cfg, tmp_path / "s")
    assert calls == [1]
    again = stage.distill(cfg, tmp_path / "s")  # both epochs in the checkpoint
    assert calls == [1] and "early_passes" not in again.seconds


def test_early_passes_step_in_the_runs_precision(teacher, monkeypatch):
    from contextlib import nullcontext

    from edgekd.distill import trainer

    seen: list[tuple[str, str]] = []

    def spy(precision, device):
        seen.append((precision, device))
        return nullcontext()

    monkeypatch.setattr(trainer, "training_precision", spy)
    cfg = _cfg(precision="bf16")
    model, tok = _student(cfg, teacher)
    train = _logits(N_TRAIN, 0)
    replay = [(0, 3)]  # one pass over the training rows, 3 steps
    early_passes(cfg, model, tok, TEXTS, [0] * 120, N_TRAIN, replay=replay, train_logits=train)
    assert seen == [("bf16", "cpu")] * 3
