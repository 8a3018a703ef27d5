import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import FEW_VARIANTS, NATIVE_BF16, SMALL_BILSTM
from edgekd.artifacts import StudentMeta
from edgekd.config import DataConfig, DistillConfig
from edgekd.distill.trainer import native_bf16
from edgekd.errors import EdgeKDError
from edgekd.stages.distill import distill as run_distill


def cfg(teacher, data, **kw):
    # No augmentation unless a test asks for it (the default, tang, has its own tests).
    kw = {
        "epochs": 2,
        "batch_size": 16,
        "student": {"name": "bilstm", "options": SMALL_BILSTM},
        "augment": {"methods": []},
        **kw,
    }
    return DistillConfig(teacher=str(teacher), data=DataConfig(spec=str(data)), **kw)


def test_run_distill_writes_student_folder_with_metrics(tiny_teacher, tiny_data, tmp_path):
    m = run_distill(cfg(tiny_teacher, tiny_data), tmp_path / "s")
    files = {p.name for p in (tmp_path / "s").iterdir()}
    assert {
        "model.safetensors",
        "tokenizer.json",
        "student.json",
        "config.yaml",
        "metrics.json",
    } <= files
    for key in ("teacher_accuracy", "student_accuracy", "agreement", "params"):
        assert key in m
    assert 0 <= m["agreement"] <= 1 and m["n_dev"] == 40
    # A tenth of the 160 rows is held out to pick the epoch; rows inside them leave too.
    assert m["n_selection"] == 16
    assert m["n_train"] + m["n_selection"] + m["n_overlap_dropped"] == 160
    assert set(m["seconds"]) >= {"teacher_logits", "train", "tfidf"}
    # Each epoch's own steps, timed apart from its scoring: what a budget's probe is
    # measured against (benchmarks/probe_honesty.py).
    assert all(0 < h["train_seconds"] < m["seconds"]["train"] for h in m["history"])
    # The yardstick: TF-IDF + LR on the same training rows, scored on the same dev rows.
    assert m["tfidf"]["n_train"] == m["n_train"] and m["tfidf"]["n_dev"] == 40
    assert 0 <= m["tfidf"]["accuracy"] <= 1
    assert json.loads((tmp_path / "s" / "student.json").read_text())["id2label"] == [
        "negative",
        "positive",
    ]


def test_run_distill_same_seed_gives_identical_student(tiny_teacher, tiny_data, tmp_path):
    run_distill(cfg(tiny_teacher, tiny_data, loss="kd", temperature=2.0), tmp_path / "a")
    run_distill(cfg(tiny_teacher, tiny_data, loss="kd", temperature=2.0), tmp_path / "b")
    run_distill(cfg(tiny_teacher, tiny_data, loss="kd", temperature=2.0, seed=1), tmp_path / "c")
    a, b, c = (load_file(str(tmp_path / x / "model.safetensors")) for x in "abc")
    assert all((a[k] == b[k]).all() for k in a)
    assert any((a[k] != c[k]).any() for k in a)


@NATIVE_BF16
def test_run_distill_same_seed_gives_identical_student_when_bf16(tiny_teacher, tiny_data, tmp_path):
    run_distill(cfg(tiny_teacher, tiny_data, precision="bf16"), tmp_path / "a")
    run_distill(cfg(tiny_teacher, tiny_data, precision="bf16"), tmp_path / "b")
    run_distill(cfg(tiny_teacher, tiny_data), tmp_path / "c")
    a, b, c = (load_file(str(tmp_path / x / "model.safetensors")) for x in "abc")
    assert all((a[k] == b[k]).all() for k in a)
    assert any((a[k] != c[k]).any() for k in a)  # the steps did run in bf16
    assert all(v.dtype == torch.float32 for v in a.values())  # fp32 weights, as fp32 runs'
    assert "precision: bf16" in (tmp_path / "a" / "config.yaml").read_text()


def test_run_distill_refuses_bf16_before_loading_data_when_no_native_bf16(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    from edgekd.distill import trainer
    from edgekd.stages import distill as stage

    def no_data(*a, **k):
        raise AssertionError("the data was read before the refusal")

    monkeypatch.setattr(trainer, "native_bf16", lambda: False)
    monkeypatch.setattr(stage, "load_task", no_data)
    with pytest.raises(EdgeKDError, match="use precision=fp32"):
        run_distill(cfg(tiny_teacher, tiny_data, precision="bf16"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_run_distill_reuses_cached_teacher_logits(tiny_teacher, tiny_data, tmp_path):
    first = run_distill(cfg(tiny_teacher, tiny_data), tmp_path / "a")
    second = run_distill(cfg(tiny_teacher, tiny_data, epochs=1), tmp_path / "b")
    assert first["cache_hits"] == {"train": False, "dev": False, "selection": False}
    assert second["cache_hits"] == {"train": True, "dev": True, "selection": True}


def test_run_distill_rejects_bare_encoder_and_leaves_nothing(tmp_path, tiny_data):
    from conftest import build_tiny_bert

    bare = build_tiny_bert(tmp_path / "bare", classifier=False)
    with pytest.raises(EdgeKDError, match="not a fine-tuned sequence classifier"):
        run_distill(cfg(bare, tiny_data), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_run_distill_rejects_label_count_mismatch(tiny_teacher, tmp_path):
    (tmp_path / "d").mkdir()
    rows = "sentence\tlabel\n" + "".join(f"w{i}\t{i % 3}\n" for i in range(9))
    (tmp_path / "d" / "train.tsv").write_text(rows)
    (tmp_path / "d" / "dev.tsv").write_text(rows)
    with pytest.raises(EdgeKDError, match=r"teacher has 2 labels.*data has 3"):
        run_distill(cfg(tiny_teacher, tmp_path / "d"), tmp_path / "out")


def test_train_student_stops_after_patience_and_keeps_best_epoch(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    import numpy as np

    # Scripted predictions: on the selection rows epoch 1 is all right, then all wrong;
    # on dev it is the reverse. With patience 2 the loop must stop after epoch 3 and
    # keep epoch 1: the selection split chooses, dev is only recorded.
    from edgekd.data import carve_selection, load_task
    from edgekd.distill import trainer

    task = load_task(DataConfig(spec=str(tiny_data)))
    select = np.array(carve_selection(task.train, 500, 0)[1].labels)
    dev = np.array(task.dev.labels)
    calls = {"dev": 0, "select": 0}

    def scripted(model, tok, ids, batch_size=256):
        split, gold = ("dev", dev) if len(ids) == len(dev) else ("select", select)
        calls[split] += 1
        right = (calls[split] == 1) == (split == "select")
        return np.eye(2, dtype=np.float32)[gold if right else 1 - gold]

    monkeypatch.setattr(trainer, "predict_logits", scripted)
    m = run_distill(cfg(tiny_teacher, tiny_data, epochs=10, patience=2), tmp_path / "s")
    assert (m["best_epoch"], m["epochs_run"]) == (1, 3)
    assert [h["selection_accuracy"] for h in m["history"]] == [1.0, 0.0, 0.0]
    assert [h["dev_accuracy"] for h in m["history"]] == [0.0, 1.0, 1.0]
    assert m["selection_accuracy"] == 1.0


def test_train_student_keeps_last_epoch_when_selection_rows_is_zero(
    tiny_teacher, tiny_data, tmp_path
):
    m = run_distill(
        cfg(tiny_teacher, tiny_data, epochs=3, patience=1, selection_rows=0), tmp_path / "s"
    )
    assert (m["best_epoch"], m["epochs_run"], m["n_selection"]) == (3, 3, 0)
    assert m["n_train"] == 160 and "selection_accuracy" not in m


def test_run_distill_adds_teacher_labelled_augmented_rows(tiny_teacher, tiny_data, tmp_path):
    from edgekd.config import AugmentConfig
    from edgekd.students.base import load_student

    aug = AugmentConfig(methods=["mask", "ngram"], n_iter=3, max_rows=200)
    m = run_distill(cfg(tiny_teacher, tiny_data, augment=aug), tmp_path / "a")
    assert 0 < m["n_augmented"] <= 200 and m["cache_hits"]["augmented"] is False
    # The word vocabulary keeps the teacher's mask token whole.
    _, tok, _ = load_student(tmp_path / "a")
    mask_id = tok.tokenizer.token_to_id("[MASK]")
    assert mask_id is not None and tok.ids(["good [MASK] movie"])[0][1] == mask_id
    again = run_distill(cfg(tiny_teacher, tiny_data, augment=aug, epochs=1), tmp_path / "b")
    assert again["n_augmented"] == m["n_augmented"] and again["cache_hits"]["augmented"] is True


def test_run_distill_auto_methods_add_neighbour_on_a_small_task_and_record_them(
    tiny_teacher, tiny_data, tmp_path, capsys
):
    import yaml

    # The default augmentation (methods: auto) on a task of a few hundred texts and a
    # WordPiece teacher: neighbour words ahead of Tang's rules, stated as what ran.
    first = run_distill(cfg(tiny_teacher, tiny_data, augment={"n_iter": 2}), tmp_path / "a")
    resolved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert [m["name"] for m in resolved["augment"]["methods"]] == ["neighbour", "tang"]
    err = capsys.readouterr().err
    assert "augment: neighbour, tang (auto: a small task" in err
    # The student's auto options too: the teacher-output start and the teacher's pieces.
    options = resolved["student"]["options"]
    assert options == {**SMALL_BILSTM, "init": "teacher-output", "extra_pieces": 10_000}
    assert "student: init teacher-output, extra_pieces 10000 (auto, a small task)" in err
    student = StudentMeta.read(tmp_path / "a")
    assert student.config["init"] == "teacher-output" and student.config["extra_pieces"] == 10_000
    # The resolved config reruns the same augmentation: its rows, from the cache.
    again = run_distill(DistillConfig.model_validate(resolved), tmp_path / "b")
    assert again["n_augmented"] == first["n_augmented"] > 0
    assert again["cache_hits"]["augmented"] is True
    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in "ab")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_run_distill_auto_student_options_keep_the_input_table_on_a_larger_task(
    tiny_teacher, tiny_data, tmp_path, capsys, monkeypatch
):
    import yaml

    from edgekd.stages import distill as stage
    from edgekd.students import table

    # tiny_data's ~140 training texts read as a large task when the threshold is 100.
    monkeypatch.setattr(stage, "SMALL_TASK_TEXTS", 100)
    monkeypatch.setattr(table, "SMALL_TASK_TEXTS", 100)
    run_distill(cfg(tiny_teacher, tiny_data, epochs=1), tmp_path / "a")
    resolved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert resolved["student"]["options"] == {**SMALL_BILSTM, "init": "teacher", "extra_pieces": 0}
    err = capsys.readouterr().err
    assert "student: init teacher, extra_pieces 0 (auto, not a small task)" in err


def test_run_distill_augments_sentence_pairs_side_by_side(tiny_teacher, pair_data, tmp_path):
    # Pairs go to disk as two text columns and come back as (a, b) tuples: the teacher
    # reads them joined, the siamese student side by side.
    from edgekd.config import AugmentConfig

    aug = AugmentConfig(methods=["mask"], n_iter=2)
    c = cfg(tiny_teacher, pair_data, augment=aug, epochs=1)
    c.data.text_pair_column = "sentence2"  # without it, sentence1 alone is the text
    m = run_distill(c, tmp_path / "p")
    assert StudentMeta.read(tmp_path / "p").config["pair"] is True
    assert m["n_augmented"] > m["n_train"] / 2 and m["cache_hits"]["augmented"] is False
    assert m["history"][0]["transfer_rows"] == m["n_train"] + m["n_augmented"]


def test_run_distill_writes_every_cached_file_inside_the_cache_dir(
    tiny_teacher, tiny_data, tmp_path
):
    # --cache-dir names the cache's root, as $EDGEKD_CACHE does: logits, the ONNX teacher
    # and the augmented rows all go under it, never beside it.
    from edgekd.config import AugmentConfig

    aug = AugmentConfig(methods=["mask"], n_iter=2)
    c = cfg(tiny_teacher, tiny_data, augment=aug, epochs=1, teacher_runtime="onnx")
    run_distill(c.model_copy(update={"cache_dir": str(tmp_path / "mine")}), tmp_path / "s")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "s"]
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == [
        "logits",
        "teachers",
        "transfer",
    ]


def test_run_distill_capped_rerun_reads_the_uncapped_runs_chunks(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # A budgeted run's resolved config states its cap (augment.max_rows): rerunning it
    # must reuse the labelled chunks, not label them again under a new cache key.
    from edgekd.config import AugmentConfig
    from edgekd.distill import labeling

    monkeypatch.setattr(labeling, "AUGMENT_CHUNK", 4)
    aug = AugmentConfig(methods=["mask"], n_iter=2)
    m = run_distill(cfg(tiny_teacher, tiny_data, augment=aug, epochs=1), tmp_path / "a")
    assert m["n_augmented"] > 8 and m["cache_hits"]["augmented"] is False
    capped = aug.model_copy(update={"max_rows": 8})
    again = run_distill(cfg(tiny_teacher, tiny_data, augment=capped, epochs=1), tmp_path / "b")
    assert again["n_augmented"] == 8 and again["cache_hits"]["augmented"] is True


def test_run_distill_rejects_unknown_augmenter_before_any_work(tiny_data, tmp_path):
    from edgekd.config import AugmentConfig

    with pytest.raises(
        EdgeKDError,
        match="unknown augmenter 'shuffle'; valid names: mask, mate, minimax, mixup, neighbour, "
        "ngram, pos, swap, tang",
    ):
        augment = AugmentConfig(methods=["shuffle"])
        run_distill(cfg("no/teacher", tiny_data, augment=augment), tmp_path / "out")


def test_run_distill_applies_schedules_each_epoch(tiny_teacher, tiny_data, tmp_path):
    from edgekd.config import Schedule

    m = run_distill(
        cfg(
            tiny_teacher,
            tiny_data,
            loss="kd",
            epochs=3,
            patience=5,
            schedules={"temperature": Schedule(kind="linear", start=4, end=2)},
        ),
        tmp_path / "s",
    )
    assert [h["temperature"] for h in m["history"]] == [4.0, 3.0, 2.0]


def test_run_distill_annealing_needs_its_schedule_length(tiny_data, tmp_path):
    with pytest.raises(EdgeKDError, match=r"needs at least 7 epochs \(got 2\)"):
        run_distill(cfg("no/teacher", tiny_data, loss="annealing"), tmp_path / "out")
    with pytest.raises(EdgeKDError, match=r"loss 'mse' has no option 'tau'; valid: none"):
        run_distill(
            cfg("no/teacher", tiny_data, loss={"name": "mse", "options": {"tau": 3}}),
            tmp_path / "out",
        )


def test_run_distill_ensemble_averages_teachers(tiny_teacher, tiny_data, tmp_path, monkeypatch):
    import numpy as np

    from conftest import build_tiny_bert
    from edgekd.data import load_task
    from edgekd.distill.teacher import load_teacher, teacher_logits
    from edgekd.stages import distill as stage

    other = build_tiny_bert(tmp_path / "other", seed=7)
    dev = load_task(DataConfig(spec=str(tiny_data))).dev
    mean = sum(teacher_logits(*load_teacher(str(t)), dev.texts) for t in (tiny_teacher, other)) / 2
    seen = {}
    real = stage.train_student

    def spy(cfg, model, tok, train, train_logits, select, dev_split, dev_logits, *rest, **kw):
        seen["dev"] = dev_logits
        return real(
            cfg, model, tok, train, train_logits, select, dev_split, dev_logits, *rest, **kw
        )

    monkeypatch.setattr(stage, "train_student", spy)
    m = run_distill(cfg(tiny_teacher, tiny_data, extra_teachers=[str(other)]), tmp_path / "s")
    np.testing.assert_allclose(seen["dev"], mean, rtol=1e-5, atol=1e-6)
    assert m["teacher_accuracy"] == float((mean.argmax(1) == np.array(dev.labels)).mean())
    assert m["extra_teachers"] == [str(other)]


def test_run_distill_labels_with_int8_onnx_teacher_and_reports_it(
    tiny_teacher, tiny_data, tmp_path
):
    m = run_distill(cfg(tiny_teacher, tiny_data, teacher_runtime="onnx-int8"), tmp_path / "a")
    report = m["teacher_runtime"]
    assert (report["runtime"], report["used"]) == ("onnx-int8", "onnx-int8")
    # Measured on half of the transfer rows (never dev): the other half picked a margin.
    calibration = report["calibration"]
    assert (
        calibration["n"]
        == (m["n_train"] + m["n_selection"]) - (m["n_train"] + m["n_selection"]) // 2
    )
    assert 0 <= calibration["int8_agreement"] <= calibration["hybrid_agreement"] <= 1
    assert report["rows_per_s"] > 0
    again = run_distill(cfg(tiny_teacher, tiny_data, teacher_runtime="onnx-int8"), tmp_path / "b")
    assert again["cache_hits"]["train"] is True
    # The fp32 and int8 caches are separate entries.
    torch_run = run_distill(cfg(tiny_teacher, tiny_data), tmp_path / "c")
    assert torch_run["cache_hits"]["train"] is False


BERT = {"layers": 1, "max_length": 16}


@pytest.mark.parametrize(
    "extra",
    [
        {"intermediate": "pkd"},
        {"intermediate": "alp"},
        {"intermediate": "minilm"},
        {"intermediate": {"name": "tinybert", "options": {"stage_epochs": 1}}, "epochs": 3},
        {"augment": {"methods": ["mixup"]}},
        {"augment": {"methods": ["mask", "mixup"], "n_iter": 2}, "intermediate": "pkd"},
    ],
)
def test_run_distill_trains_bert_student_with_each_method(tiny_teacher, tiny_data, tmp_path, extra):
    kw = {"student": {"name": "bert", "options": BERT}, **extra}
    m = run_distill(cfg(tiny_teacher, tiny_data, **kw), tmp_path / "s")
    layer = extra.get("intermediate")
    assert m["intermediate"] == (layer["name"] if isinstance(layer, dict) else layer)
    assert "layer 1←1: copied" in m["init"]
    assert (tmp_path / "s" / "config.json").is_file()  # an HF folder too


@NATIVE_BF16
@pytest.mark.parametrize(
    "extra",
    [
        {"intermediate": "minilm"},  # attention relations, from the bf16 forward's q, k, v
        {"intermediate": {"name": "tinybert", "options": {"stage_epochs": 1}}, "epochs": 3},
        {"augment": {"methods": ["mask", "mixup"], "n_iter": 2}, "intermediate": "pkd"},
        {"loss": "kd", "temperature": 2.0},
    ],
)
def test_run_distill_trains_bert_student_with_each_method_when_bf16(
    tiny_teacher, tiny_data, tmp_path, extra
):
    kw = {"student": {"name": "bert", "options": BERT}, "precision": "bf16", **extra}
    m = run_distill(cfg(tiny_teacher, tiny_data, **kw), tmp_path / "s")
    assert m["epochs_run"] == kw.get("epochs", 2)
    assert all(math.isfinite(h["train_loss"]) for h in m["history"])


def test_run_distill_distilbert_initialises_from_every_other_layer(
    tiny_teacher, tiny_data, tmp_path
):
    import yaml

    kw = {"student": {"name": "bert", "options": BERT}, "intermediate": "distilbert"}
    m = run_distill(cfg(tiny_teacher, tiny_data, **kw), tmp_path / "s")
    # The 2-layer teacher's uniform map sends the one student layer to teacher layer 2.
    assert "layer 1←2: copied" in m["init"] and m["intermediate"] == "distilbert"
    resolved = yaml.safe_load((tmp_path / "s" / "config.yaml").read_text())
    assert resolved["student"]["options"]["layer_init"] == "uniform"
    # The user's own choice stands.
    first = {"name": "bert", "options": {**BERT, "layer_init": "first"}}
    m = run_distill(cfg(tiny_teacher, tiny_data, **{**kw, "student": first}), tmp_path / "t")
    assert "layer 1←1: copied" in m["init"]


def test_run_distill_mobilebert_transfers_layers_then_predictions(
    tiny_teacher, tiny_data, tmp_path
):
    import yaml

    small = {"layers": 1, "bottleneck": 16, "embedding": 8, "heads": 2, "ffn": 16}
    kw = {"student": {"name": "mobilebert", "options": small}, "epochs": 2}
    m = run_distill(cfg(tiny_teacher, tiny_data, **kw), tmp_path / "s")
    # Its own layer-wise transfer unless named otherwise: epoch 1 transfers feature maps
    # and attention, epoch 2 distils predictions (and only it can be kept).
    assert m["intermediate"] == "mobilebert" and m["best_epoch"] == 2
    resolved = yaml.safe_load((tmp_path / "s" / "config.yaml").read_text())
    assert resolved["intermediate"] == {"name": "mobilebert", "options": {}}
    assert (tmp_path / "s" / "config.json").is_file()
    # Another intermediate loss, or none, when the config says so.
    m = run_distill(cfg(tiny_teacher, tiny_data, **kw, intermediate=None), tmp_path / "t")
    assert m["intermediate"] is None


def test_run_distill_mate_kd_trains_a_bert_student_against_a_generator(
    tiny_teacher, tiny_data, tmp_path
):
    from distill.test_mate import build_generator

    gen = str(build_generator(tmp_path / "gen", tiny_teacher))
    mate = {"name": "mate", "options": {"generator": gen, "max_every": 2}}
    kw = {"student": {"name": "bert", "options": BERT}, "augment": {"methods": [mate]}}
    import yaml

    m = run_distill(cfg(tiny_teacher, tiny_data, **kw), tmp_path / "s")
    assert m["epochs_run"] == 2
    resolved = yaml.safe_load((tmp_path / "s" / "config.yaml").read_text())
    assert resolved["augment"]["methods"] == [mate]
    if native_bf16():  # its generator's step and table lookups stay fp32 under bf16
        bf16 = run_distill(cfg(tiny_teacher, tiny_data, **kw, precision="bf16"), tmp_path / "b")
        assert bf16["epochs_run"] == 2
    # The student must read the teacher's tokens, and a generator is needed.
    with pytest.raises(EdgeKDError, match="use --student bert"):
        run_distill(cfg(tiny_teacher, tiny_data, augment={"methods": [mate]}), tmp_path / "t")
    bare = {**kw, "augment": {"methods": ["mate"]}}
    with pytest.raises(EdgeKDError, match="pass --generator"):
        run_distill(cfg(tiny_teacher, tiny_data, **bare), tmp_path / "u")


def test_run_distill_minilm_trains_a_narrower_student_with_other_heads(
    tiny_teacher, tiny_data, tmp_path
):
    # Teacher: width 32, 2 heads. Student: width 16, 4 heads; relations over 2 heads.
    narrow = {**BERT, "hidden": 16, "heads": 4, "ffn": 32}
    kw = {"student": {"name": "bert", "options": narrow}, "intermediate": "minilm"}
    m = run_distill(cfg(tiny_teacher, tiny_data, **kw), tmp_path / "s")
    assert m["intermediate"] == "minilm"
    bad = {"name": "minilm", "options": {"relation_heads": 3}}
    with pytest.raises(EdgeKDError, match="does not split into 3 relation heads"):
        run_distill(cfg(tiny_teacher, tiny_data, **{**kw, "intermediate": bad}), tmp_path / "t")


def test_run_distill_tinybert_first_stage_epochs_are_never_best(tiny_teacher, tiny_data, tmp_path):
    kw = {"student": {"name": "bert", "options": BERT}, "intermediate": "tinybert"}
    m = run_distill(cfg(tiny_teacher, tiny_data, epochs=3, **kw), tmp_path / "s")
    assert m["best_epoch"] == 3  # stage 1 (epochs 1-2) trains hidden layers only
    with pytest.raises(EdgeKDError, match="raise --epochs above 2"):
        run_distill(cfg(tiny_teacher, tiny_data, epochs=2, **kw), tmp_path / "t")
    # The epochs' average starts at the first epoch that can be kept: there it is that
    # epoch's own weights (stage 1's untrained head weighs nothing), so the 3-epoch
    # run keeps the same student with it as without.
    m = run_distill(cfg(tiny_teacher, tiny_data, epochs=3, epoch_average=1, **kw), tmp_path / "a")
    assert "epoch_dev_accuracy" not in m["history"][0]  # stage 1: nothing averaged yet
    third = m["history"][2]
    assert third["dev_accuracy"] == third["epoch_dev_accuracy"] and m["best_epoch"] == 3
    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in "sa")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


def test_run_distill_mixup_same_seed_gives_identical_student(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # MixKD runs the teacher every step, and BERT's sums depend on the thread count: on
    # a busy machine the governor's switches between 1 and 2 threads made two runs of one
    # seed differ. Pinned to one core (as `taskset -c 0` pins a user's run) they match.
    import edgekd.threads

    monkeypatch.setattr(edgekd.threads, "available_cores", lambda: 1)
    mix = {"augment": {"methods": ["mixup"]}}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        run_distill(cfg(tiny_teacher, tiny_data, seed=seed, **mix), tmp_path / name)
    a, b, c = (load_file(str(tmp_path / x / "model.safetensors")) for x in "abc")
    assert all((a[k] == b[k]).all() for k in a)
    assert any((a[k] != c[k]).any() for k in a)


def test_run_distill_minimax_trains_on_k_picks_per_text(tiny_teacher, tiny_data, tmp_path):
    aug = {
        "methods": [
            {"name": "mask", "options": {"p": 0.5}},
            {"name": "minimax", "options": {"k": 1}},
        ],
        "n_iter": 4,
    }
    c = cfg(tiny_teacher, tiny_data, augment=aug)
    m = run_distill(c, tmp_path / "s")
    from edgekd.data import carve_selection, load_task
    from edgekd.distill.labeling import augmented_texts

    train = carve_selection(load_task(c.data).train, c.selection_rows, c.seed)[0]
    rows, sources = augmented_texts(c, train.texts, None)
    assert m["n_augmented"] == len(rows) > m["n_train"]
    # Each epoch: the training rows + one pick per text that has any variant.
    picks = len(set(sources))
    assert 100 < picks < len(rows)
    assert [h["transfer_rows"] for h in m["history"]] == [m["n_train"] + picks] * 2


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"augment": {"methods": ["minimax"]}}, "add a text augmenter"),
        ({"intermediate": "pkd"}, "use --student bert"),
        (
            {"student": "bert", "intermediate": "nope"},
            "valid names: alp, distilbert, minilm, mobilebert, pkd, tinybert",
        ),
        (
            {"student": "bert", "intermediate": {"name": "pkd", "options": {"layer_map": "x"}}},
            "'uniform', 'top', 'bottom' or 'last'; fix intermediate.options.layer_map",
        ),
    ],
)
def test_run_distill_refuses_impossible_method_combinations(
    tiny_teacher, tiny_data, tmp_path, kw, message
):
    with pytest.raises(EdgeKDError, match=message):
        run_distill(cfg(tiny_teacher, tiny_data, **{"student": "bilstm", **kw}), tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_run_distill_takd_chains_teacher_assistant_student(tiny_teacher, tiny_data, tmp_path):
    assistant = {"student": {"name": "bert", "options": BERT}}
    m = run_distill(cfg(tiny_teacher, tiny_data, assistant=assistant), tmp_path / "s")
    a = json.loads((tmp_path / "s" / "assistant" / "metrics.json").read_text())
    assert (tmp_path / "s" / "assistant" / "config.json").is_file()  # an HF classifier
    assert m["teacher"] == str(tiny_teacher) and m["student"] == "bilstm"
    assert m["assistant_accuracy"] == a["student_accuracy"]  # the student's teacher
    assert m["teacher_accuracy"] == a["teacher_accuracy"]  # the original teacher
    import yaml

    resolved = yaml.safe_load((tmp_path / "s" / "config.yaml").read_text())
    helper = yaml.safe_load((tmp_path / "s" / "assistant" / "config.yaml").read_text())
    assert resolved["teacher"] == helper["teacher"] == str(tiny_teacher)
    # Resolved, not as given: the choices both runs made (the student's learning rate
    # and epochs at the top; the assistant's, where they differ, in its section) ...
    assert resolved["assistant"]["student"] == assistant["student"]
    assert resolved["lr"] == m["lr"] and isinstance(resolved["augment"]["n_iter"], int)
    assert resolved["assistant"]["lr"] == helper["lr"] != resolved["lr"]
    # ... so the top level with the assistant's section over it is the assistant run.
    rerun = {**resolved, **resolved["assistant"]}
    assert {k: v for k, v in rerun.items() if k != "assistant"} == {
        k: v for k, v in helper.items() if k != "assistant"
    }
    with pytest.raises(EdgeKDError, match="use an assistant with student: bert"):
        run_distill(cfg(tiny_teacher, tiny_data, assistant={}), tmp_path / "t")


@pytest.mark.parametrize("bf16_in", ["student", "assistant"])
def test_run_distill_takd_refuses_either_runs_bad_config_before_loading_data(
    tiny_teacher, tiny_data, tmp_path, monkeypatch, bf16_in
):
    # The student run's refusal must not wait for the assistant run to have trained.
    from edgekd.distill import trainer
    from edgekd.stages import distill as stage

    def no_data(*a, **k):
        raise AssertionError("the data was read before the refusal")

    monkeypatch.setattr(trainer, "native_bf16", lambda: False)
    monkeypatch.setattr(stage, "load_task", no_data)
    assistant = {"student": {"name": "bert", "options": BERT}, "precision": "fp32"}
    if bf16_in == "assistant":
        assistant["precision"] = "bf16"
    kw = {"precision": "bf16" if bf16_in == "student" else "fp32", "assistant": assistant}
    with pytest.raises(EdgeKDError, match="use precision=fp32"):
        run_distill(cfg(tiny_teacher, tiny_data, **kw), tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_run_distill_pkd_feeds_each_model_its_own_tokens(tiny_teacher, tiny_data, tmp_path):
    from conftest import build_other_vocab

    vocab = str(build_other_vocab(tmp_path / "vocab"))
    options = {**BERT, "tokenizer": vocab}
    kw = {"student": {"name": "bert", "options": options}}
    m = run_distill(cfg(tiny_teacher, tiny_data, intermediate="pkd", **kw), tmp_path / "s")
    assert m["vocab_size"] == 9 and m["intermediate"] == "pkd"
    # TinyBERT compares token positions: it needs the teacher's own vocabulary.
    with pytest.raises(EdgeKDError, match="must read the teacher's vocabulary"):
        run_distill(
            cfg(tiny_teacher, tiny_data, intermediate="tinybert", epochs=3, **kw), tmp_path / "t"
        )


def test_train_student_keeps_the_averaged_weights_when_ema_is_set(
    tiny_teacher, tiny_data, tmp_path
):
    raw = run_distill(cfg(tiny_teacher, tiny_data, epochs=2, ema=None), tmp_path / "raw")
    ema = run_distill(cfg(tiny_teacher, tiny_data, epochs=2, ema=0.5), tmp_path / "ema")
    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in ("raw", "ema"))
    # Same seed, same steps: only the kept weights differ (the average lags the steps).
    assert a.keys() == b.keys() and any((a[k] != b[k]).any() for k in a)
    assert raw["history"][0]["train_loss"] == ema["history"][0]["train_loss"]


def test_train_student_keeps_the_epochs_average_and_records_each_epochs_own_score(
    tiny_teacher, tiny_data, tmp_path
):
    # Without a budget or a decaying rate, epoch k's weights are those a k-epoch run
    # keeps (selection_rows 0: the last): the uniform average (η = 0) of 3 epochs is
    # the mean of the 1-, 2- and 3-epoch students, up to float rounding.
    one = {"time_budget": None, "selection_rows": 0}
    for k in (1, 2, 3):
        run_distill(cfg(tiny_teacher, tiny_data, epochs=k, **one), tmp_path / f"e{k}")
    m = run_distill(cfg(tiny_teacher, tiny_data, epochs=3, epoch_average=0, **one), tmp_path / "a")
    epochs = [load_file(str(tmp_path / f"e{k}" / "model.safetensors")) for k in (1, 2, 3)]
    average = load_file(str(tmp_path / "a" / "model.safetensors"))
    for key, value in average.items():
        if value.is_floating_point():
            mean = sum(e[key] for e in epochs) / 3
            torch.testing.assert_close(value, mean, rtol=1e-5, atol=1e-6)
    assert any((average[k] != epochs[2][k]).any() for k in average)
    # Each epoch's own score beside the average's; epoch 1's average is epoch 1 itself.
    plain = json.loads((tmp_path / "e3" / "metrics.json").read_text())["history"]
    own = [h["epoch_dev_accuracy"] for h in m["history"]]
    assert own == [h["dev_accuracy"] for h in plain]
    assert m["history"][0]["dev_accuracy"] == own[0]


def two_processes() -> list[str]:
    """`accelerate launch` of two CPU processes on one machine, as users spell it."""
    import socket
    import sys

    with socket.socket() as s:  # a free port for the processes to meet on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu"]
    launch += ["--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no"]
    return [*launch, "--dynamo_backend", "no", "--main_process_port", str(port)]


def distill_command(teacher: Path, data: Path, out: Path, *extra: str) -> list[str]:
    """`edgekd distill` of the small BiLSTM, 2 epochs, as a module (after `python`)."""
    distill = ["-m", "edgekd", "distill", "--student", "bilstm", "--teacher", str(teacher)]
    distill += ["--data", str(data), "--out", str(out), "--epochs", "2", *extra]
    for key, value in {
        **{f"student.options.{k}": v for k, v in SMALL_BILSTM.items()},
        "batch_size": 16,
        # Not auto's ~28,000 candidates: two processes train them in lock-step at batch 16.
        "augment.n_iter": FEW_VARIANTS,
    }.items():
        distill += ["-s", f"{key}={value}"]
    return distill


@pytest.mark.slow
def test_distill_under_accelerate_launch_trains_one_student_on_two_processes(
    tiny_teacher, tiny_data, tmp_path
):
    # Two CPU processes (torch.distributed over gloo), the user's spelling: they share
    # the labelling, the main writes the cache; the time budget's choices (rows kept,
    # epochs, an early cut) are the main's on both, or they would deadlock or diverge.
    import subprocess

    out = tmp_path / "s"
    done = subprocess.run(
        two_processes() + distill_command(tiny_teacher, tiny_data, out),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["processes"] == 2 and metrics["time_plan"] is not None
    assert metrics["n_augmented"] > 0  # the default augmentation, labelled once
    assert 1 <= metrics["epochs_run"] <= 2 and (out / "model.safetensors").is_file()
    assert not list(tmp_path.glob(".*"))  # no checkpoint or temp folder left behind


@pytest.mark.slow
def test_distill_under_accelerate_launch_shares_labelling_and_caches_one_process_logits(
    tiny_teacher, tiny_data, tmp_path
):
    # Each of two processes labels a share of the rows; the main alone writes them into
    # the cache, and they equal, entry by entry, what one process caches for the rows.
    import os
    import subprocess
    import sys

    import numpy as np
    from safetensors.numpy import load_file

    torch_runtime = ("--teacher-runtime", "torch")  # the tiny set: no ONNX export
    metrics = {}
    for name, launch in (("one", [sys.executable]), ("two", two_processes())):
        out = tmp_path / name
        env = {**os.environ, "EDGEKD_CACHE": str(tmp_path / f"cache-{name}")}
        done = subprocess.run(
            launch + distill_command(tiny_teacher, tiny_data, out, *torch_runtime),
            capture_output=True, text=True, timeout=600, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        metrics[name] = json.loads((out / "metrics.json").read_text())
    two = metrics["two"]
    assert two["processes"] == 2 and two["n_augmented"] == metrics["one"]["n_augmented"] > 0
    # Every row the run labelled, split between the processes (each labelled a share).
    rows = two["n_train"] + two["n_selection"] + two["n_dev"] + two["n_augmented"]
    shares = two["teacher_runtime"]["rows_by_process"]
    assert sum(shares) == rows and all(0 < n < rows for n in shares)
    assert "rows_by_process" not in metrics["one"]["teacher_runtime"]
    assert 1 <= two["epochs_run"] <= 2 and (tmp_path / "two" / "model.safetensors").is_file()
    # One cache, written once: the same entries as one process's, the same logits.
    entries = {
        name: {p.name: p for p in (tmp_path / f"cache-{name}" / "logits").glob("*.safetensors")}
        for name in ("one", "two")
    }
    assert entries["two"].keys() == entries["one"].keys() and len(entries["two"]) >= 4
    for key, path in entries["two"].items():
        got, want = load_file(str(path))["logits"], load_file(str(entries["one"][key]))["logits"]
        np.testing.assert_allclose(got, want, atol=1e-5)
        assert (got.argmax(1) == want.argmax(1)).all()
    assert not list((tmp_path / "cache-two" / "logits").glob("*.tmp-*"))


def test_run_distill_recomputes_cached_logits_of_the_wrong_shape(tiny_teacher, tiny_data, tmp_path):
    # A cache entry of another shape (a crafted or stale file) is a miss, not a crash:
    # every rerun would otherwise fail until the cache was cleared by hand.
    import os

    import numpy as np
    from safetensors.numpy import save_file

    run_distill(cfg(tiny_teacher, tiny_data, epochs=1), tmp_path / "a")
    entries = list(Path(os.environ["EDGEKD_CACHE"]).rglob("*.safetensors"))
    assert entries
    for path in entries:
        save_file({"logits": np.zeros((3, 5), np.float32)}, str(path))
    m = run_distill(cfg(tiny_teacher, tiny_data, epochs=1), tmp_path / "b")
    assert m["cache_hits"] == {"train": False, "dev": False, "selection": False}
    assert m["n_dev"] == 40


def test_run_distill_cnn_student_trains_then_exports_an_int8_model_that_agrees(
    tiny_teacher, tiny_data, tmp_path
):
    from edgekd.config import ExportConfig
    from edgekd.stages.export import export as run_export

    options = {"embedding_dim": 16, "filters": 8, "mlp_size": 16}
    m = run_distill(
        cfg(tiny_teacher, tiny_data, student={"name": "cnn", "options": options}), tmp_path / "s"
    )
    meta = StudentMeta.read(tmp_path / "s")
    assert meta.student == "cnn" and meta.config["widths"] == [1, 2, 3, 4]
    assert m["epochs_run"] == 2
    report = run_export(ExportConfig(guard=False), tmp_path / "s", tmp_path / "e")
    assert set(report["models"]) == {"fp32", "int8"}
    # The fp32 graph is the student (validated); int8 rounds it: on 40 dev rows it may
    # flip a close call, not the model.
    fp32, int8 = report["models"]["fp32"], report["models"]["int8"]
    assert fp32["accuracy"] == pytest.approx(m["student_accuracy"])
    assert abs(int8["accuracy"] - fp32["accuracy"]) <= 0.1


def test_run_distill_uncertain_order_labels_the_scouts_rows_and_reruns_to_them(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    # Capped at 12 candidates: the teacher labels the scout's 12 least sure, not the
    # seeded 12, and the resolved config reruns to the same rows and the same student.
    import numpy as np
    import yaml

    from edgekd.config import AugmentConfig
    from edgekd.distill import active
    from edgekd.stages import distill as stage

    monkeypatch.setattr(active, "SCOUT_ROWS", 400)  # a few epochs of the tiny task
    labelled: list[list[str]] = []
    orders: list[list[int]] = []
    candidates: list[list[str]] = []
    teacher_labels, scout_order = stage.teacher_labels, stage.scout_order

    def spy_labels(cfg, splits, *args, **kwargs):
        logits = teacher_labels(cfg, splits, *args, **kwargs)
        labelled.append(list(splits["augmented"][: len(logits[0]["augmented"])]))
        return logits

    def spy_order(*args, **kwargs):
        candidates.append(list(args[5]))
        orders.append(scout_order(*args, **kwargs).tolist())
        return np.array(orders[-1])

    monkeypatch.setattr(stage, "teacher_labels", spy_labels)
    monkeypatch.setattr(stage, "scout_order", spy_order)
    aug = AugmentConfig(methods=["mask"], n_iter=3, max_rows=12)
    seeded = run_distill(cfg(tiny_teacher, tiny_data, augment=aug, epochs=1), tmp_path / "a")
    assert seeded["n_augmented"] == 12 and "scout" not in seeded["seconds"] and not orders
    scouted = aug.model_copy(update={"order": "uncertain"})
    m = run_distill(cfg(tiny_teacher, tiny_data, augment=scouted, epochs=1), tmp_path / "b")
    assert m["n_augmented"] == 12 and "scout" in m["seconds"] and len(orders) == 1
    rows, order = candidates[0], orders[0]
    assert len(rows) > 12 and sorted(order) == list(range(len(rows)))
    assert labelled[0] == rows[:12]  # seeded: the first 12 candidates
    assert labelled[1] == [rows[i] for i in order[:12]] != labelled[0]  # the scout's 12
    config = (tmp_path / "b" / "config.yaml").read_text()
    resolved = DistillConfig.model_validate(yaml.safe_load(config))
    assert resolved.augment.order == "uncertain" and resolved.augment.max_rows == 12
    run_distill(resolved, tmp_path / "c")
    assert labelled[2] == labelled[1] and orders[1] == order
    weights = "model.safetensors"
    assert (tmp_path / "b" / weights).read_bytes() == (tmp_path / "c" / weights).read_bytes()


def test_run_distill_refuses_an_order_without_a_text_augmenter(tiny_data, tmp_path):
    from edgekd.config import AugmentConfig

    with pytest.raises(EdgeKDError, match="add one"):
        augment = AugmentConfig(methods=["mixup"], order="uncertain")
        run_distill(cfg("no/teacher", tiny_data, augment=augment), tmp_path / "out")
    assert not (tmp_path / "out").exists()
