"""The fast labelers: deduplication, the int8 margin, calibration and the auto choice."""

import threading

import numpy as np
import pytest

from edgekd.config import DataConfig, DistillConfig
from edgekd.distill import labeling
from edgekd.distill.labeling import (
    ALONE,
    AugmentedPlan,
    LabelGroup,
    Meter,
    calibrate,
    deduplicated,
    hybrid_labeler,
    label_chunks,
    label_splits,
    margins,
    pick_margin,
    process_group,
    reassemble,
    share,
    teacher_labels,
)


class FakeOnnx:
    """fp32 logits [0, x] per text x (a float as text); int8 flips the rows in `flip`.
    `code`: what the exporter's digest would be."""

    def __init__(self, flip=(), code="0" * 64):
        self.flip, self.calls, self.code = set(flip), {"fp32": [], "int8": []}, code

    def fp32(self, texts, what):
        self.calls["fp32"].append(list(texts))
        return np.array([[0.0, float(t)] for t in texts], dtype=np.float32)

    def int8(self, texts, what):
        self.calls["int8"].append(list(texts))
        out = self.fp32(texts, what)
        self.calls["fp32"].pop()
        for i, t in enumerate(texts):
            if t in self.flip:
                out[i, 1] = -out[i, 1]  # the sign of x decides the class: int8 gets it wrong
        return out


def test_margins_are_top1_minus_top2_logit():
    logits = np.array([[1.0, 3.0, 2.5], [0.0, -1.0, -4.0]])
    np.testing.assert_allclose(margins(logits), [0.5, 1.0])


def test_pick_margin_is_slack_times_largest_disagreeing_int8_margin():
    fp32 = np.array([[0, 1.0], [0, -0.2], [0, 0.3], [0, 2.0]])
    int8 = np.array([[0, 1.1], [0, 0.1], [0, -0.4], [0, 2.0]])  # rows 1 and 2 disagree
    # int8 margins of the disagreeing rows: 0.1 and 0.4 → 1.5 × 0.4 = 0.6
    assert pick_margin(fp32, int8) == pytest.approx(0.6)
    assert pick_margin(fp32, fp32) == 0.0  # no disagreement: int8 is trusted everywhere


def test_pick_margin_leaves_the_spare_surest_disagreements_above_it():
    fp32 = np.array([[0, 1.0], [0, -0.2], [0, 0.3], [0, 2.0]])
    int8 = np.array([[0, -0.9], [0, 0.1], [0, -0.4], [0, 2.0]])  # rows 0, 1, 2 disagree
    # disagreeing int8 margins, surest first: 0.9, 0.4, 0.1
    assert pick_margin(fp32, int8, spare=1) == pytest.approx(1.5 * 0.4)
    assert pick_margin(fp32, int8, spare=2) == pytest.approx(1.5 * 0.1)
    assert pick_margin(fp32, int8, spare=3) == 0.0  # 3 disagreements, 3 spared: int8 alone


def test_hybrid_labeler_redoes_only_low_margin_rows_in_fp32():
    onnx = FakeOnnx(flip={"0.1"})
    out = hybrid_labeler(onnx, margin=0.5)(["2.0", "0.1", "-3.0", "0.4"], "x")
    np.testing.assert_allclose(out[:, 1], [2.0, 0.1, -3.0, 0.4])  # 0.1 repaired by fp32
    assert onnx.calls["fp32"] == [["0.1", "0.4"]]  # margins 0.1 and 0.4 < 0.5


def test_calibrate_picks_margin_on_one_half_and_measures_on_the_other():
    # First half: int8 flips 0.2 (margin 0.2 → threshold 0.3). Second half: it flips
    # 0.25 (repaired: 0.25 < 0.3) and 0.9 (not repaired: 0.9 ≥ 0.3).
    first = ["0.2", "1.0", "2.0", "3.0"]
    second = ["0.25", "0.9", "4.0", "5.0"]
    cal = calibrate(FakeOnnx(flip={"0.2", "0.25", "0.9"}), first + second)
    assert cal.margin == pytest.approx(0.3)
    assert (cal.n, cal.int8_agreement, cal.hybrid_agreement) == (4, 0.5, 0.75)
    assert cal.relabelled == 0.25 and cal.choice == "onnx"  # 75% < 99.5%: fp32 for all
    clean = calibrate(FakeOnnx(flip={"0.2", "0.25"}), first + second)
    assert (clean.hybrid_agreement, clean.choice) == (1.0, "hybrid")


# Picking half: int8 flips six rows, margins 0.6 to 0.1; the loosest rule spares the 3
# surest (0.6, 0.5, 0.4): margin 1.5 × 0.3 = 0.45. The widest: 1.5 × 0.6 = 0.9.
PICK = ["0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "1.0", "2.0"]
CHECK = ["0.25", "0.55", "3.0", "4.0", "5.0", "6.0", "7.0", "8.0"]


def test_calibrate_labels_with_the_loosest_rule_when_it_holds_on_the_other_half():
    assert labeling.SPARE_RULES == (3, 0)
    flips = set(PICK[:6]) | {"0.25"}  # 0.25 < 0.45: repaired
    cal = calibrate(FakeOnnx(flip=flips), PICK + CHECK)
    assert (cal.choice, cal.spare, cal.hybrid_agreement) == ("hybrid", 3, 1.0)
    assert cal.margin == pytest.approx(0.45)
    assert cal.relabelled == 0.125  # 0.25 alone of the 8 checking rows is under 0.45
    widest = calibrate(FakeOnnx(flip=flips), PICK + CHECK, rules=(0,))  # none spared
    assert (widest.spare, widest.margin) == (0, pytest.approx(0.9))


def test_calibrate_widens_the_margin_when_the_loosest_rule_falls_under_the_floor():
    flips = set(PICK[:6]) | {"0.55"}  # 0.55 ≥ 0.45 stays wrong; < 0.9 is repaired
    cal = calibrate(FakeOnnx(flip=flips), PICK + CHECK)
    assert (cal.choice, cal.spare, cal.hybrid_agreement) == ("hybrid", 0, 1.0)
    assert cal.margin == pytest.approx(0.9)
    assert cal.relabelled == 0.25  # 0.25 and 0.55 are under 0.9


def test_deduplicated_labels_each_distinct_text_once_in_order():
    seen = []

    def labeler(texts, what):
        seen.append(list(texts))
        return np.array([[len(t), 0.0] for t in texts], dtype=np.float32)

    out = deduplicated(labeler)(["aa", "b", "aa", ("x", "yy"), ("x", "yy")], "x")
    assert seen == [["aa", "b", ("x", "yy")]]
    np.testing.assert_allclose(out[:, 0], [2, 1, 2, 2, 2])


def dcfg(teacher, data, **kw):
    student = {"name": "bilstm", "options": {"embedding_dim": 8, "hidden_size": 4, "mlp_size": 8}}
    return DistillConfig(
        teacher=str(teacher), data=DataConfig(spec=str(data)), epochs=1, student=student, **kw
    )


def test_auto_runtime_labels_small_sets_with_torch_and_says_why(tiny_teacher, tiny_data, tmp_path):
    from edgekd.stages.distill import distill

    m = distill(dcfg(tiny_teacher, tiny_data), tmp_path / "s")
    report = m["teacher_runtime"]
    assert (report["runtime"], report["used"]) == ("auto", "torch")
    assert "under 20,000: not worth an export" in report["why"]


def test_auto_runtime_labels_with_int8_and_fp32_close_calls_when_large(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    from edgekd.distill.teacher import load_teacher, teacher_logits
    from edgekd.stages.distill import distill

    monkeypatch.setattr(labeling, "AUTO_MIN_ROWS", 0)  # the tiny set counts as large
    m = distill(dcfg(tiny_teacher, tiny_data), tmp_path / "s")
    report = m["teacher_runtime"]
    assert report["used"] in ("hybrid", "onnx") and report["calibration"]["n"] > 0
    assert report["calibration"]["hybrid_agreement"] >= report["calibration"]["int8_agreement"]
    # Dev is labelled in fp32: the teacher accuracy equals PyTorch's.
    from edgekd.data import load_task

    dev = load_task(DataConfig(spec=str(tiny_data))).dev
    ref = teacher_logits(*load_teacher(str(tiny_teacher)), dev.texts).argmax(1)
    assert m["teacher_accuracy"] == float((ref == np.array(dev.labels)).mean())
    again = distill(dcfg(tiny_teacher, tiny_data), tmp_path / "t")
    assert all(again["cache_hits"].values())
    assert again["teacher_runtime"]["calibration"] == report["calibration"]  # cached too


@pytest.mark.parametrize("runtime, renamed", [("auto", True), ("onnx-int8", True), ("onnx", False)])
def test_decide_labelers_names_int8_labels_by_the_exporters_code(
    tmp_path, monkeypatch, runtime, renamed
):
    # An edited quantizer (or onnxruntime) labels otherwise: int8's cached logits (and
    # auto's calibration) must not be read back under its name. fp32's, PyTorch's logits
    # to ~1e-5 whoever exported them, keep theirs, as does dev (labelled in fp32).
    monkeypatch.setattr(labeling, "AUTO_MIN_ROWS", 0)
    cfg = DistillConfig(teacher="t", teacher_runtime=runtime, cache_dir=str(tmp_path))
    splits = {"train": TRANSFER, "dev": ["1.5", "-2.5"]}

    def tags(code):
        choice, onnx = labeling.decide_labelers(
            cfg, "t", "f" * 64, splits, lambda *a: FakeOnnx(CLOSE, code)
        )
        assert onnx is not None and onnx.code == choice.code == code  # sent to a group
        return choice.tags(list(splits))

    before, after = tags("a" * 64), tags("b" * 64)
    assert before["dev"] == after["dev"] == "onnx"
    assert (before["train"] != after["train"]) is renamed
    assert tags("a" * 64) == before  # the same code: the same names (the cache is read)
    # int8's calibration, made by each code once and read back by the same code.
    calibrations = list(tmp_path.rglob("*.calibration.json"))
    assert len(calibrations) == (2 if renamed else 0)
    # Another batch size labels int8 otherwise (a call is quantized by its own rows).
    cfg = cfg.model_copy(update={"teacher_batch_size": 16})
    assert (tags("a" * 64)["train"] != before["train"]) is renamed


def test_torch_labeler_calls_the_teacher_with_the_configs_batch_size(monkeypatch):
    from edgekd.distill import teacher

    asked = []
    monkeypatch.setattr(teacher, "teacher_logits", lambda m, t, texts, size, *a: asked.append(size))
    for size in (None, 40):
        cfg = DistillConfig(teacher="t", **({"teacher_batch_size": size} if size else {}))
        labeling.torch_labeler(cfg, None, None)(["a row"], "rows")
        assert asked[-1] == (size or 64)


# ------------------------------------------------------------------ processes sharing work


class ThreadRanks:
    """`size` ranks of a LabelGroup as threads of this process: a gather posts each
    rank's value and meets at a barrier, then meets again so no rank posts the next
    round's value before every rank has read this one's."""

    def __init__(self, size=2, apart=False):
        self.size, self.apart = size, apart
        self.wall = threading.Barrier(size, timeout=60)
        self.slots = [None] * size
        self.collectives = [0] * size  # per rank: broadcasts + gathers + barriers

    def group(self, rank):
        def gather(value):
            self.collectives[rank] += 1
            self.slots[rank] = value
            self.wall.wait()
            out = list(self.slots)
            self.wall.wait()
            return out

        def broadcast(value):
            self.collectives[rank] -= 1  # counted once, by the gather it runs on
            return gather(value)[0]

        def barrier():
            self.collectives[rank] += 1
            self.wall.wait()

        # apart: every rank on a machine of its own, so each is its machine's first.
        return LabelGroup(
            rank=rank, size=self.size, broadcast=broadcast, gather=gather, barrier=barrier,
            local_main=self.apart or rank == 0, apart=self.apart,
        )  # fmt: skip

    def run(self, work):
        """`work(rank, group)` on every rank at once; the results in rank order."""
        results, errors = [None] * self.size, []

        def go(rank):
            try:
                results[rank] = work(rank, self.group(rank))
            except BaseException as e:  # the first error is the cause; others follow it
                errors.append(e)
                self.wall.abort()

        threads = [threading.Thread(target=go, args=(r,)) for r in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results


def never(*args):
    raise AssertionError("a collective was called")


@pytest.mark.parametrize("n, size", [(0, 2), (1, 3), (2, 3), (7, 2), (9, 3), (10, 4), (5, 1)])
def test_shares_cover_every_row_once_and_reassemble_in_row_order(n, size):
    rows = np.arange(n)
    shares = [rows[share(n, rank, size)] for rank in range(size)]
    assert sorted(np.concatenate(shares).tolist()) == list(range(n))  # each row exactly once
    assert max(map(len, shares)) - min(map(len, shares)) <= 1  # uneven by one row at most
    logits = np.stack([rows, -rows], axis=1).astype(np.float32)
    parts = [logits[share(n, rank, size)] for rank in range(size)]
    np.testing.assert_array_equal(reassemble(parts, 2), logits)


def test_reassemble_refuses_a_share_of_the_wrong_length():
    parts = [np.zeros((2, 2), np.float32), np.zeros((2, 2), np.float32)]
    with pytest.raises(ValueError, match="process 1 sent"):
        reassemble([*parts, np.zeros((0, 2), np.float32)], 2)  # 4 rows: rank 1's share is 1


def _cfg(cache):
    return DistillConfig(teacher="t", cache_dir=str(cache))


def numbered(texts, what):
    """Logits [0, i] for the text "<split> i"."""
    return np.array([[0.0, float(t.split()[-1])] for t in texts], dtype=np.float32)


def recording(seen):
    def labeler(texts, what):
        seen.extend(texts)
        return numbered(texts, what)

    return labeler


def group_splits():
    # selection has fewer rows than processes; augmented spans three chunks of 4.
    return {
        "train": [f"train {i}" for i in range(7)],
        "dev": [f"dev {i}" for i in range(3)],
        "selection": ["selection 0"],
        "augmented": [f"augmented {i}" for i in range(10)],
    }


def test_label_splits_in_a_group_shares_rows_and_equals_one_process(tmp_path, monkeypatch):
    monkeypatch.setattr(labeling, "AUGMENT_CHUNK", 4)
    splits = group_splits()
    every = [t for texts in splits.values() for t in texts]
    solo, _ = label_splits(
        _cfg(tmp_path / "solo"), "fp", splits, dict.fromkeys(splits, (numbered, "x")), 2
    )
    # Each rank has a cache dir of its own, as on two machines: the main's is the one.
    caches = [tmp_path / "main", tmp_path / "other"]
    seen, meters = [[], []], [Meter(), Meter()]

    def work(rank, group):
        labelers = dict.fromkeys(splits, (recording(seen[rank]), "x"))
        return label_splits(
            _cfg(caches[rank]), "fp", splits, labelers, 2, None, meters[rank], group
        )

    for logits, hits in ThreadRanks().run(work):
        assert logits.keys() == solo.keys() and not any(hits.values())
        for split in solo:
            np.testing.assert_array_equal(logits[split], solo[split])
    # Each rank labelled its share only: every other row of each split and chunk.
    assert seen[0][:4] == ["train 0", "train 2", "train 4", "train 6"]
    assert seen[1][:3] == ["train 1", "train 3", "train 5"]
    assert not set(seen[0]) & set(seen[1]) and sorted(seen[0] + seen[1]) == sorted(every)
    # The group's rate: the main counts every process's rows; each its own share.
    assert meters[0].rows == meters[1].rows == len(every)
    assert (meters[0].mine, meters[1].mine) == (len(seen[0]), len(seen[1]))
    # Only the main writes: 3 splits + 3 chunks in its cache, nothing in the other's.
    assert len(list((caches[0] / "logits").glob("*.safetensors"))) == 6
    assert not caches[1].exists()

    # Again: the main's cache holds everything; the other, whose own cache is empty,
    # gets the main's logits and labels nothing.
    seen = [[], []]
    for logits, hits in ThreadRanks().run(work):
        assert all(hits.values())
        for split in solo:
            np.testing.assert_array_equal(logits[split], solo[split])
    assert seen == [[], []] and not caches[1].exists()


def test_label_chunks_in_a_group_keeps_as_many_chunks_as_the_main_budget_allows(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(labeling, "AUGMENT_CHUNK", 4)
    texts = [f"augmented {i}" for i in range(10)]
    asked = []

    def main_room(rows, seconds):
        asked.append(rows)
        return rows <= 8

    def work(rank, group):
        # The other rank's clock would take every row, or raise if it were ever asked.
        room = main_room if rank == 0 else never
        plan = AugmentedPlan(room=room)
        cfg = _cfg(tmp_path / str(rank))
        return label_chunks(cfg, "fp", texts, numbered, "x", 2, plan, Meter(), group)

    for logits, hit in ThreadRanks().run(work):
        np.testing.assert_array_equal(logits[:, 1], range(8))
        assert not hit
    assert asked == [4, 8, 10]  # one decision per chunk, the main's


class RecordingOnnx:
    """FakeOnnx that logs (call, rank, description, texts) in one list shared by ranks."""

    def __init__(self, rank, events, flip=()):
        self.rank, self.events, self.fake = rank, events, FakeOnnx(flip)
        self.code = self.fake.code

    def fp32(self, texts, what):
        self.events.append(("fp32", self.rank, what, list(texts)))
        return self.fake.fp32(texts, what)

    def int8(self, texts, what):
        self.events.append(("int8", self.rank, what, list(texts)))
        return self.fake.int8(texts, what)

    def ready(self, kinds):
        self.events.append(("ready", self.rank, ",".join(kinds), []))


def fake_teacher():
    from types import SimpleNamespace

    return SimpleNamespace(config=SimpleNamespace(id2label={0: "neg", 1: "pos"}, num_labels=2))


# Transfer rows: int8 flips the six at ±0.2 (margin 0.2), sure of every other (|x| ≥ 1).
CLOSE = ["0.2", "-0.2", "0.20", "-0.20", "0.200", "-0.200"]
TRANSFER = CLOSE + [f"{s}{x}.5" for x in range(1, 13) for s in ("", "-")]


@pytest.mark.parametrize("runtime", ["auto", "onnx"])
@pytest.mark.parametrize("apart", [False, True])
def test_teacher_labels_in_a_group_calibrates_and_exports_on_the_main_only(
    tmp_path, monkeypatch, runtime, apart
):
    monkeypatch.setattr(labeling, "AUTO_MIN_ROWS", 0)  # the small set counts as large
    splits = {"train": TRANSFER, "dev": ["1.0", "-2.0", "0.2"]}
    names = ["neg", "pos"]

    def cfg(cache):
        return DistillConfig(teacher="fake", teacher_runtime=runtime, cache_dir=str(cache))

    solo_onnx = RecordingOnnx(0, [], flip=CLOSE)
    solo, _, solo_report = teacher_labels(
        cfg(tmp_path / "solo"), splits, fake_teacher(), None, names,
        lambda *a: solo_onnx, None,
    )  # fmt: skip
    events = []
    made = []

    def work(rank, group):
        def onnx_runtime(*args):
            made.append(rank)
            return RecordingOnnx(rank, events, flip=CLOSE)

        return teacher_labels(
            cfg(tmp_path / f"rank{rank}"), splits, fake_teacher(), None, names,
            onnx_runtime, None, group,
        )  # fmt: skip

    results = ThreadRanks(apart=apart).run(work)
    for logits, _, report in results:
        for split in splits:
            np.testing.assert_allclose(logits[split], solo[split], atol=1e-5)
            assert (logits[split].argmax(1) == solo[split].argmax(1)).all()
        # One choice, one calibration (its margin included) for every process.
        mine = {k: v for k, v in report.items() if k not in ("rows_per_s", "rows_by_process")}
        assert mine == {k: v for k, v in solo_report.items() if k != "rows_per_s"}
    if runtime == "auto":  # the hybrid ran, with a margin that relabels the close calls
        assert solo_report["used"] == "hybrid" and solo_report["calibration"]["margin"] > 0.2
    assert set(made) == {0, 1}
    # Calibration rows are the main's alone; every other row is labelled by one rank.
    assert not [e for e in events if "calibrating" in e[2] and e[1] != 0]
    labelled = [
        [t for call, r, what, texts in events if r == rank and call in ("int8", "fp32")
         and "calibrating" not in what and "close calls" not in what for t in texts]
        for rank in (0, 1)
    ]  # fmt: skip
    assert sorted(labelled[0] + labelled[1]) == sorted(TRANSFER + splits["dev"])
    assert results[0][2]["rows_by_process"] == results[1][2]["rows_by_process"]
    assert results[0][2]["rows_by_process"] == [len(labelled[0]), len(labelled[1])]
    assert min(map(len, labelled)) > 0
    # The main exports before the broadcast lets the other load; on a machine of its own
    # the other exports too (its cache may lack it) before it labels, on the main's it
    # only loads what the main exported.
    readies = [(r, kinds) for call, r, kinds, _ in events if call == "ready"]
    kinds = "fp32,int8" if runtime == "auto" else "fp32"
    assert readies == ([(0, kinds), (1, kinds)] if apart else [(0, kinds)])
    others = [e for e in events if e[1] == 1]
    assert events.index(others[0]) > events.index(("ready", 0, kinds, []))
    assert others[0][0] == ("ready" if apart else "int8" if runtime == "auto" else "fp32")
    # Only the main wrote logits and the calibration.
    assert list((tmp_path / "rank0").rglob("*.safetensors"))
    assert not (tmp_path / "rank1").exists()


@pytest.mark.parametrize("runtime", ["auto", "onnx-int8", "onnx"])
def test_teacher_labels_in_a_group_refuses_a_process_whose_int8_differs_from_the_mains(
    tmp_path, monkeypatch, runtime
):
    # On a machine of its own, another install or CPU quantizes the teacher otherwise:
    # its int8 labels would be cached under the main's name. It stops before labelling;
    # fp32 labels (the fix the message names) do not depend on it.
    from edgekd.errors import EdgeKDError

    monkeypatch.setattr(labeling, "AUTO_MIN_ROWS", 0)
    splits = {"train": TRANSFER, "dev": ["1.5", "-2.5"]}
    names = ["neg", "pos"]
    events = []

    def work(rank, group):
        def onnx_runtime(*args):
            onnx = RecordingOnnx(rank, events, flip=CLOSE)
            onnx.code = str(rank) * 64
            return onnx

        cfg = DistillConfig(
            teacher="fake", teacher_runtime=runtime, cache_dir=str(tmp_path / f"rank{rank}")
        )
        return teacher_labels(cfg, splits, fake_teacher(), None, names, onnx_runtime, None, group)

    if runtime == "onnx":
        results = ThreadRanks(apart=True).run(work)
        assert all(len(logits["train"]) == len(TRANSFER) for logits, _, _ in results)
        return
    with pytest.raises(EdgeKDError, match="process 1 would label with another int8"):
        ThreadRanks(apart=True).run(work)
    assert not [e for e in events if e[1] == 1 and e[0] in ("int8", "fp32")]


def test_a_group_of_one_labels_every_row_itself_through_the_group_path(tmp_path, monkeypatch):
    # One process takes the group path: its share is every row, and its collectives
    # hand back its own values (a barrier would wait for nobody).
    monkeypatch.setattr(labeling, "AUGMENT_CHUNK", 4)
    sent: list[object] = []

    def own(value):
        sent.append(value)
        return value

    alone = LabelGroup(broadcast=own, gather=lambda v: [own(v)], barrier=never)
    splits = group_splits()
    logits, _ = label_splits(
        _cfg(tmp_path), "fp", splits, dict.fromkeys(splits, (numbered, "x")), 2, None, None,
        alone,
    )  # fmt: skip
    np.testing.assert_array_equal(logits["augmented"][:, 1], range(10))
    gathered = [v for v in sent if isinstance(v, np.ndarray) and len(v)]
    assert sum(len(v) for v in gathered) == sum(len(t) for t in splits.values())
    cfg = DistillConfig(teacher="fake", teacher_runtime="onnx", cache_dir=str(tmp_path / "t"))
    _, _, report = teacher_labels(
        cfg, {"train": TRANSFER}, fake_teacher(), None, ["neg", "pos"],
        lambda *a: FakeOnnx(), None, alone,
    )  # fmt: skip
    assert "rows_by_process" not in report
    from types import SimpleNamespace

    assert process_group(SimpleNamespace(num_processes=1)) is ALONE  # one process: no group


def test_process_group_takes_rank_and_core_share_from_accelerate(monkeypatch):
    from types import SimpleNamespace

    from edgekd.threads import available_cores

    waited = []
    state = SimpleNamespace(
        num_processes=2, process_index=1, is_local_main_process=False,
        wait_for_everyone=lambda: waited.append(1),
    )  # fmt: skip
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # torchrun's: both on this machine
    group = process_group(state)
    assert (group.rank, group.size, group.main, group.local_main, group.apart) == (
        1, 2, False, False, False,
    )  # fmt: skip
    assert group.threads == max(1, available_cores() // 2)
    group.barrier()
    assert waited == [1]
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")  # one process per machine
    assert process_group(state).apart and process_group(state).threads == available_cores()


def test_group_logits_refuses_token_states_in_a_group(tmp_path):
    # The other processes pass "" for the key: with states they would read and write a
    # cache entry of no name, and skip the main's collectives.
    group = LabelGroup(rank=0, size=2)
    with pytest.raises(ValueError, match="one process"):
        labeling.group_logits(
            group, tmp_path, "k", lambda: ["a"], 1, numbered, "x", 2, labeling.Meter(), object()
        )  # type: ignore[arg-type]
