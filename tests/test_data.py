import json
from collections import Counter
from pathlib import Path

import pytest

from edgekd.config import DataConfig
from edgekd.data import length_sorted_batches, load_task
from edgekd.errors import EdgeKDError


def load(spec, **kw):
    return load_task(DataConfig(spec=str(spec), **kw))


def test_load_task_reads_glue_sst2_layout_when_shared_present(shared: Path):
    task = load(shared / "data" / "sst2", max_train=500)
    assert len(task.train) == 500 and len(task.dev) == 872
    assert task.label_names == ["0", "1"]
    assert task.dev.texts[0].startswith("it 's a charming")
    assert task.dev.labels[0] == 1


def test_load_task_detects_headerless_cola_layout_when_shared_present(shared: Path):
    task = load(shared / "data" / "cola", max_train=300)
    assert task.dev.texts[0] == "The sailors rode the breeze clear of the rocks."
    assert set(task.dev.labels) == {0, 1} and len(task.dev) == 1043


def test_load_task_orders_integer_labels_numerically(tmp_path: Path):
    rows = "text,label\n" + "".join(f"row {i},{i % 11}\n" for i in range(33))
    (tmp_path / "train.csv").write_text(rows)
    (tmp_path / "dev.csv").write_text('text,label\n"a, quoted, text",10\nplain,2\n')
    task = load(tmp_path)
    assert task.label_names == [str(i) for i in range(11)]  # "10" after "9", not after "1"
    assert task.dev.texts[0] == "a, quoted, text" and task.dev.labels == [10, 2]


@pytest.mark.parametrize("odd", ["²", "--3", "-"])
def test_load_task_sorts_labels_as_text_when_one_only_looks_numeric(tmp_path: Path, odd):
    # '²'.isdigit() holds and '--3'.lstrip("-") is digits, but int() reads neither.
    rows = "text,label\n" + "".join(f"row {i},{[1, 10, odd][i % 3]}\n" for i in range(30))
    (tmp_path / "train.csv").write_text(rows)
    (tmp_path / "dev.csv").write_text("text,label\nplain,1\n")
    assert load(tmp_path).label_names == sorted(["1", "10", odd])


def test_load_task_reads_jsonl_with_string_labels_and_other_scripts(tmp_path: Path):
    recs = [
        {"review": "とても良い映画", "sentiment": "pos"},
        {"review": "Очень плохо", "sentiment": "neg"},
        {"review": "مقبول", "sentiment": "neutral"},
    ]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in recs))
    (tmp_path / "validation.jsonl").write_text(json.dumps(recs[0]))
    task = load(tmp_path)
    assert task.label_names == ["neg", "neutral", "pos"]
    assert task.train.labels == [2, 0, 1] and task.dev.texts == ["とても良い映画"]


def test_load_task_holds_out_dev_when_single_file(tmp_path: Path):
    f = tmp_path / "all.tsv"
    f.write_text("sentence\tlabel\n" + "".join(f"s{i}\t{i % 2}\n" for i in range(50)))
    task = load(f)
    assert len(task.dev) == 5 and len(task.train) == 45
    assert not set(task.dev.texts) & set(task.train.texts)
    assert "held out 5" in task.notes[0]


def test_load_task_names_column_flag_when_column_missing(tmp_path: Path):
    (tmp_path / "train.tsv").write_text("body\tlabel\nhello\t1\n")
    with pytest.raises(EdgeKDError, match=r"columns: 'body', 'label'.*pass --text-column"):
        load(tmp_path)
    with pytest.raises(EdgeKDError, match=r"no column 'txt'.*fix --text-column"):
        load(tmp_path / "train.tsv", text_column="txt")


def test_load_task_rejects_dev_label_unseen_in_train(tmp_path: Path):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\na\tx\nb\ty\n")
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\nc\tz\n")
    with pytest.raises(EdgeKDError, match=r"dev.tsv row 2 has label 'z'.*never uses"):
        load(tmp_path)


def test_load_task_rejects_missing_label_and_empty_file(tmp_path: Path):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\na\t1\nb\t\n")
    with pytest.raises(EdgeKDError, match=r"train.tsv row 3 has no label"):
        load(tmp_path / "train.tsv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(EdgeKDError, match=r"empty.csv is empty"):
        load(tmp_path / "empty.csv")


def test_load_task_rejects_single_label_and_bad_path(tmp_path: Path):
    (tmp_path / "one.tsv").write_text("sentence\tlabel\na\t1\nb\t1\n")
    with pytest.raises(EdgeKDError, match="needs two or more"):
        load(tmp_path / "one.tsv")
    with pytest.raises(EdgeKDError, match="no such file or folder"):
        load(tmp_path / "missing.tsv")


def test_load_task_reads_saved_datasetdict_with_classlabel(tmp_path: Path):
    import datasets

    feats = datasets.Features(
        {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])}
    )
    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(
                {"text": ["a", "b", "c"], "label": [0, 1, 1]}, feats
            ),
            "validation": datasets.Dataset.from_dict({"text": ["d"], "label": [1]}, feats),
            "test": datasets.Dataset.from_dict({"text": ["e"], "label": [-1]}, feats),
        }
    )
    dd.save_to_disk(str(tmp_path / "saved"))
    task = load(tmp_path / "saved")
    assert task.label_names == ["neg", "pos"] and task.dev.labels == [1]


@pytest.mark.parametrize("damage", ["splits-missing", "arrow-garbage"])
def test_load_task_refuses_a_damaged_save_to_disk_folder_in_one_line(tmp_path, damage):
    import datasets

    folder = tmp_path / "saved"
    if damage == "splits-missing":  # the listing, none of what it lists
        folder.mkdir()
        (folder / "dataset_dict.json").write_text('{"splits": ["train"]}')
    else:
        rows = {"text": ["a", "b"], "label": [0, 1]}
        datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(folder)
        for arrow in folder.rglob("*.arrow"):
            arrow.write_bytes(b"not arrow at all" * 64)
    with pytest.raises(EdgeKDError, match="is not a dataset `save_to_disk` wrote") as e:
        load(folder)
    assert "\n" not in str(e.value)


def test_load_task_uses_hub_name_and_config_when_not_a_path(monkeypatch):
    import datasets

    monkeypatch.setattr("edgekd.hub.hub_unreachable", lambda: None)

    calls = []

    def fake_load_dataset(*args):
        calls.append(args)
        return datasets.DatasetDict(
            {
                "train": datasets.Dataset.from_dict({"sentence": ["x", "y"], "label": [0, 1]}),
                "validation": datasets.Dataset.from_dict({"sentence": ["z"], "label": [1]}),
            }
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    task = load("glue/sst2")
    assert calls == [("glue", "sst2")] and task.dev.texts == ["z"]


def test_load_task_fails_fast_when_hub_host_does_not_resolve(offline_hub):
    with pytest.raises(EdgeKDError, match=r"cannot resolve no-such-host.invalid\); point --data"):
        load("glue/sst2")


def test_load_task_reports_hub_error_when_dataset_fails_to_load(monkeypatch):
    import datasets

    def missing(*args):
        raise FileNotFoundError(f"Dataset {args} doesn't exist")

    monkeypatch.setattr("edgekd.hub.hub_unreachable", lambda: None)
    monkeypatch.setattr(datasets, "load_dataset", missing)
    with pytest.raises(EdgeKDError, match=r"FileNotFoundError.*check the name"):
        load("nobody/nothing")


def test_length_sorted_batches_cover_every_index_once():
    batches = length_sorted_batches([5, 1, 3, 2, 4], 2)
    assert batches == [[1, 3], [2, 4], [0]]


def test_load_task_reads_sentence_pairs_from_the_pair_column(pair_data: Path):
    task = load(pair_data, text_pair_column="sentence2")
    assert len(task.train) == 160 and task.label_names == ["0", "1"]
    first, second = task.train.texts[0]
    assert isinstance(first, str) and isinstance(second, str) and first and second
    with pytest.raises(EdgeKDError, match=r"no column 'hypothesis'.*fix --text-pair-column"):
        load(pair_data, text_pair_column="hypothesis")


def test_load_task_reads_pairs_from_jsonl_and_rejects_an_empty_side(tmp_path: Path):
    rows = [{"premise": "a cat", "hypothesis": "an animal", "label": "entail"}] * 3
    rows.append({"premise": "x", "hypothesis": " ", "label": "other"})
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(EdgeKDError, match="row 4 has an empty text"):
        load(tmp_path / "d.jsonl", text_column="premise", text_pair_column="hypothesis")


def test_bucketed_batches_cover_every_row_once_with_little_padding():
    import random

    from edgekd.data import bucketed_batches

    rng = random.Random(0)
    lengths = [rng.randint(1, 60) for _ in range(1000)]
    batches = bucketed_batches(lengths, 10, random.Random(1), pool=20)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    assert padded < 1.1 * sum(lengths)  # random batches of 10 would pad ~1.6×
    assert batches == bucketed_batches(lengths, 10, random.Random(1), pool=20)
    assert batches != bucketed_batches(lengths, 10, random.Random(2), pool=20)


def test_bucketed_batches_by_default_hold_one_length_each_in_new_orders():
    import math
    import random

    from edgekd.data import bucketed_batches

    rng = random.Random(0)
    lengths = [rng.randint(1, 5) for _ in range(1000)]  # ~200 rows per length
    batches = bucketed_batches(lengths, 10, random.Random(1))
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert all(len({lengths[i] for i in b}) == 1 for b in batches)
    # At most one short batch per length: the count is fixed by the lengths alone, so
    # the in-place refill of the training loop's batch list keeps its length.
    assert len(batches) == sum(math.ceil(n / 10) for n in Counter(lengths).values())
    # Same lengths, new company: which rows share a batch changes with the seed.
    other = bucketed_batches(lengths, 10, random.Random(2))
    assert {frozenset(b) for b in batches} != {frozenset(b) for b in other}


def test_numeric_labels_normalise_to_one_class_per_value(tmp_path: Path):
    # 1, 1.0, "1" and " 1 " are one class; 0 and 0.0 another: binary data stays binary.
    rows = [
        {"text": "a", "label": 1},
        {"text": "b", "label": 1.0},
        {"text": "c", "label": "1"},
        {"text": "d", "label": " 1 "},
        {"text": "e", "label": 0},
        {"text": "f", "label": "0.0"},
    ]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "dev.jsonl").write_text('{"text": "g", "label": 1.0}\n')
    task = load(tmp_path)
    assert task.label_names == ["0", "1"]
    assert task.train.labels == [1, 1, 1, 1, 0, 0] and task.dev.labels == [1]


@pytest.mark.parametrize("label", ["NaN", '"nan"', '""', "null"])
def test_a_missing_or_nan_label_is_an_error_naming_the_row(tmp_path: Path, label: str):
    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "a", "label": 1}\n{"text": "b", "label": ' + label + "}\n")
    with pytest.raises(EdgeKDError, match=r"t.jsonl row 2 has no label"):
        load(path)


def test_a_json_array_file_is_read_like_json_lines(tmp_path: Path):
    rows = [{"text": f"t{i}", "label": i % 2} for i in range(20)]
    (tmp_path / "rows.json").write_text(json.dumps(rows, indent=2))
    task = load(tmp_path / "rows.json")
    assert len(task.train) + len(task.dev) == 20 and task.label_names == ["0", "1"]


def test_non_utf8_text_names_the_byte_and_encoding_reads_it(tmp_path: Path):
    path = tmp_path / "train.tsv"
    body = "sentence\tlabel\n" + "".join(f"caf\xe9 {i}\t{i % 2}\n" for i in range(20))
    path.write_bytes(body.encode("latin-1"))
    with pytest.raises(EdgeKDError, match=r"byte offset 18: b'\\xe9'.*--encoding"):
        load(path)
    assert load(path, encoding="latin-1").train.texts[0].startswith("café")


def test_duplicate_column_names_are_refused(tmp_path: Path):
    (tmp_path / "d.csv").write_text("text,text,label\na,b,1\nc,d,0\n")
    with pytest.raises(EdgeKDError, match="two columns named 'text'"):
        load(tmp_path / "d.csv")


def test_maximal_rows_are_those_no_other_row_contains():
    from edgekd.data import maximal_rows

    texts = ["a good movie", "Good", "good movie", "a bad day", "bad day", "A GOOD MOVIE", "meh"]
    # "good", "good movie" and "bad day" sit inside longer rows; the repeat of row 0 is one.
    assert maximal_rows(texts) == [0, 3, 6]


def test_varied_rows_are_the_maximal_ones_or_all_by_sources():
    from edgekd.data import varied_rows

    texts = ["a good movie", "good movie", "meh"]
    assert varied_rows(texts, "maximal") == [0, 2]
    assert varied_rows(texts, "all") == [0, 1, 2]


def test_carve_selection_holds_out_whole_sentences_and_drops_their_phrases():
    from edgekd.data import Split, carve_selection

    sentences = [f"movie {i} was really quite good" for i in range(30)]
    phrases = [f"movie {i} was" for i in range(30)] + ["really quite good", "good"]
    train = Split(sentences + phrases, [i % 3 for i in range(len(sentences) + len(phrases))])
    left, select, dropped = carve_selection(train, 5, seed=0)
    # A tenth of 62 rows caps the selection at 6; 5 asked for.
    assert len(select) == 5 and all(t in sentences for t in select.texts)
    # Each held-out sentence takes its own "movie i was" along; the shared phrases
    # ("really quite good", "good") are inside every sentence, so they leave too.
    assert dropped == 5 + 2 and len(left) == 62 - 5 - 7
    assert not any(t in s for t in left.texts for s in select.texts)
    # Labels travel with their rows.
    assert all(
        train.labels[train.texts.index(t)] == y
        for t, y in zip(left.texts, left.labels, strict=False)
    )
    again = carve_selection(train, 5, seed=0)
    assert again[1].texts == select.texts  # seeded
    assert carve_selection(train, 0, seed=0) == (train, Split([], []), 0)


def test_carve_selection_leaves_every_label_a_training_row_when_its_texts_repeat():
    from edgekd.data import Split, carve_selection

    # Two distinct texts, 20 times each: holding one of each out would drop every copy.
    train = Split(["good film", "bad film"] * 20, [1, 0] * 20)
    assert carve_selection(train, 500, seed=0) == (train, Split([], []), 0)
    # One label of one text beside one that varies: that label's rows all stay in, and
    # the other's row is held out alone.
    train = Split(["great"] * 10 + ["bad film", "poor film"] * 5, [1] * 10 + [0] * 10)
    left, select, dropped = carve_selection(train, 500, seed=0)
    assert left.labels.count(1) == 10 and select.texts == ["poor film"] and dropped == 4
    # A label whose rows all lie inside another label's held-out row: no selection.
    rows = [f"very good film number {i}" for i in range(30)] + ["good film"] * 10
    train = Split(rows, [0] * 30 + [1] * 10)
    assert carve_selection(train, 500, seed=0) == (train, Split([], []), 0)


def test_carve_selection_caps_at_a_tenth_of_the_rows():
    from edgekd.data import Split, carve_selection

    train = Split([f"row number {i}" for i in range(40)], [0] * 40)
    left, select, dropped = carve_selection(train, 500, seed=0)
    assert (len(left), len(select), dropped) == (36, 4, 0)


def test_carve_selection_takes_one_row_per_label_when_150_labels_hold_10_each():
    from edgekd.data import Split, carve_selection

    train = Split([f"intent {y} row {i}" for y in range(150) for i in range(10)],
                  [y for y in range(150) for _ in range(10)])  # fmt: skip
    left, select, _ = carve_selection(train, 500, seed=0)
    # A tenth of 1,500 rows: 150, one from each label, so every label trains on 9.
    assert sorted(select.labels) == list(range(150))
    assert sorted(Counter(left.labels).values()) == [9] * 150


def test_carve_selection_draws_each_label_by_its_share_with_largest_remainders():
    import random

    from edgekd.data import stratified

    labels = [0] * 55 + [1] * 45
    picked = stratified(list(range(100)), labels, 10, random.Random(0))
    # 10 × 0.55 = 5.5 and 10 × 0.45 = 4.5: 5 + 4, and the one left goes by a seeded tie.
    counts = Counter(labels[i] for i in picked)
    assert counts == {0: 5, 1: 5}  # seed 0's tie draw gives the extra row to label 1
    again = Counter(labels[i] for i in stratified(list(range(100)), labels, 10, random.Random(1)))
    assert again == {0: 6, 1: 4}  # seed 1's, to label 0: either way 5 + 4 + 1
    three = [0] * 70 + [1] * 20 + [2] * 10
    counts = Counter(three[i] for i in stratified(list(range(100)), three, 10, random.Random(1)))
    assert counts == {0: 7, 1: 2, 2: 1}  # exact shares, nothing left to break ties
    assert len(set(stratified(list(range(100)), three, 10, random.Random(1)))) == 10


# ---------------------------------------------------------------- crafted data files


def rows_tsv(n: int = 6) -> str:
    return "sentence\tlabel\n" + "".join(f"row {i}\t{i % 2}\n" for i in range(n))


@pytest.mark.parametrize("other", ["train.csv", "train.jsonl"])
def test_load_task_refused_naming_both_when_a_folder_holds_two_train_files(tmp_path, other):
    (tmp_path / "train.tsv").write_text(rows_tsv())
    (tmp_path / other).write_text("text,label\na,0\nb,1\n")
    with pytest.raises(EdgeKDError) as e:
        load(tmp_path)
    message = str(e.value)
    assert "train.tsv and" in message and other in message
    assert "move the ones not to use out" in message and "--data" in message
    # Passing the file alone, as the message says, reads it.
    assert len(load(tmp_path / "train.tsv").train) > 0


def test_load_task_refused_when_two_dev_files_share_a_split(tmp_path):
    (tmp_path / "train.tsv").write_text(rows_tsv())
    (tmp_path / "dev.tsv").write_text(rows_tsv(2))
    (tmp_path / "dev.jsonl").write_text('{"text": "a", "label": 0}\n')
    with pytest.raises(EdgeKDError, match=r"dev\.tsv and dev\.jsonl for the one dev split"):
        load(tmp_path)


@pytest.mark.parametrize(
    ("text", "kind"), [({"en": "good film"}, "an object"), (["good", "film"], "a list")]
)
def test_load_task_refused_when_a_jsonl_text_is_an_object_or_list(tmp_path, text, kind):
    recs = [{"text": "fine", "label": 0}, {"text": text, "label": 1}]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in recs))
    with pytest.raises(EdgeKDError, match=rf"record 2: 'text' holds {kind}, not text") as e:
        load(tmp_path / "train.jsonl")
    assert "write the text as a string" in str(e.value)


def test_load_task_refused_when_a_jsonl_text_is_null(tmp_path):
    recs = [{"text": "fine", "label": 0}, {"text": None, "label": 1}]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in recs))
    with pytest.raises(EdgeKDError, match=r"row 2 has an empty text; drop the row"):
        load(tmp_path / "train.jsonl")  # never the string "None"


def test_load_task_refused_when_a_jsonl_record_has_a_key_twice(tmp_path):
    (tmp_path / "train.jsonl").write_text(
        '{"text": "a", "label": 0}\n{"text": "b", "label": 1, "label": 0}\n'
    )
    with pytest.raises(EdgeKDError, match=r"train\.jsonl line 2 has the key 'label' twice"):
        load(tmp_path / "train.jsonl")


def test_load_task_refused_when_a_jsonl_record_is_nested_10000_deep(tmp_path):
    deep = '{"text": "a", "label": 0, "x": ' + "[" * 10_000 + "]" * 10_000 + "}"
    (tmp_path / "train.jsonl").write_text(deep + "\n")
    with pytest.raises(EdgeKDError, match=r"line 1 is nested deeper than 64 levels"):
        load(tmp_path / "train.jsonl")


def test_load_task_refused_at_once_when_the_data_file_is_a_fifo(tmp_path):
    import os
    import signal

    fifo = tmp_path / "train.tsv"
    os.mkfifo(fifo)

    def alarm(signum, frame):
        raise KeyboardInterrupt("blocked on the FIFO")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(10)
    try:
        with pytest.raises(EdgeKDError, match=r"is a FIFO \(named pipe\), not a regular file"):
            load(fifo)
        with pytest.raises(EdgeKDError, match="FIFO"):
            load(tmp_path)  # found by name in a folder, too
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_load_task_refused_when_a_split_file_in_the_folder_is_a_symlink(tmp_path):
    outside = tmp_path / "elsewhere.tsv"
    outside.write_text(rows_tsv())
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.tsv").symlink_to(outside)
    with pytest.raises(EdgeKDError, match=r"train\.tsv is a symlink.*--data FILE"):
        load(data)
    assert len(load(outside).train) > 0  # the file itself, named by the user, is read


# ---------------------------------------------------------------- long rows


def test_cut_row_keeps_the_words_a_model_can_read():
    from edgekd.data import MAX_ROW_CHARS, MAX_ROW_WORDS, cut_row

    short = "a perfectly ordinary review " * 1000  # 4,000 words: untouched, same object
    assert cut_row(short) is short
    long = " ".join(f"w{i}" for i in range(MAX_ROW_WORDS + 500))
    assert cut_row(long).split() == long.split()[:MAX_ROW_WORDS]
    padded = " ".join(["w"] * MAX_ROW_WORDS) + "   \n"  # only whitespace past the cap
    assert cut_row(padded) is padded
    # One 5 MB "word" (no spaces): cut at the character cap.
    assert cut_row("x" * 5_000_000) == "x" * MAX_ROW_CHARS
    # Long words: the character cap falls inside one, which goes whole.
    words = ("y" * 40 + " ") * 7000
    kept = cut_row(words)
    assert len(kept) <= MAX_ROW_CHARS and set(kept.split()) == {"y" * 40}
    # Other whitespace separates words too: ideographic space, no-break space.
    cjk = "intro " + ("語" * 40 + "\u3000") * 7000
    assert len(cut_row(cjk)) > MAX_ROW_CHARS - 50 and len(cut_row(cjk).split()) > 6000
    # Never empty: leading whitespace past the cap keeps the words after it.
    assert cut_row(" " * 300_000 + "a b c") == "a b c"
    assert cut_row("   " + "x" * 300_000) == "x" * MAX_ROW_CHARS


def test_load_task_cuts_huge_rows_and_says_so(tmp_path, capsys):
    from edgekd.data import MAX_ROW_WORDS

    huge = " ".join(["good"] * 800_000)  # ~4 MB on one line
    (tmp_path / "train.tsv").write_text(
        f"sentence\tlabel\n{huge}\t1\nbad film\t0\n{huge}\t0\ngood film\t1\n"
    )
    (tmp_path / "dev.tsv").write_text(f"sentence\tlabel\n{huge}\t1\nfine\t0\n")
    task = load(tmp_path)
    assert [len(t.split()) for t in task.train.texts] == [MAX_ROW_WORDS, 2, MAX_ROW_WORDS, 2]
    assert len(task.dev.texts[0].split()) == MAX_ROW_WORDS
    note = "3 rows longer than 8,192 words or 256 KiB were cut there"
    assert any(note in n for n in task.notes)
    assert "data: " + note in capsys.readouterr().err


def test_load_task_cuts_each_side_of_a_pair(tmp_path):
    from edgekd.data import MAX_ROW_WORDS

    huge = " ".join(["x"] * (MAX_ROW_WORDS + 5))
    rows = "".join(f"{huge}\tshort {i}\t{i % 2}\n" for i in range(4))
    (tmp_path / "train.tsv").write_text("sentence1\tsentence2\tlabel\n" + rows)
    task = load(tmp_path / "train.tsv", text_pair_column="sentence2")
    a, b = task.train.texts[0]
    assert len(a.split()) == MAX_ROW_WORDS and b.startswith("short")


def test_length_sorted_batches_hold_a_token_budget_when_given():
    lengths = [4] * 10 + [100] * 5 + [1000]
    batches = length_sorted_batches(lengths, 8, max_tokens=400)
    # 8 rows of 4 tokens; the 2 left with 2 of 100 tokens (4 × 100 = 400); the other
    # 3 of 100; the 1,000-token row alone (a batch always holds a row).
    assert [len(b) for b in batches] == [8, 4, 3, 1]
    assert all(len(b) * max(lengths[i] for i in b) <= 400 or len(b) == 1 for b in batches)
    assert length_sorted_batches(lengths, 8) == length_sorted_batches(lengths, 8, None)


def test_bucketed_batches_never_train_one_row_alone():
    import random

    from edgekd.data import bucketed_batches

    lengths = [3] * 9 + [7] + [5] * 5  # 9 = 4 + 4 + 1; one row of 7; 5 = 4 + 1
    batches = bucketed_batches(lengths, 4, random.Random(0))
    assert sorted(len(b) for b in batches) == [2, 2, 2, 4, 4, 4]
    doubled = [b for b in batches if len(b) == 2]
    assert all(b[0] == b[1] for b in doubled)  # the row twice: the same mean loss
    assert sorted({i for b in batches for i in b}) == list(range(len(lengths)))
    assert all(len(b) == 1 for b in bucketed_batches([1, 2], 1, random.Random(0)))


def test_task_shape_counts_rows_per_label_and_resolves_auto_variants():
    from edgekd.artifacts import TaskShape
    from edgekd.config import AugmentConfig

    labels = [0] * 9 + [1] * 9 + [2] * 5  # and label 3 has no rows
    shape = TaskShape.of(labels, 4, selection_rows=3, augment=AugmentConfig())
    assert (shape.rows, shape.labels, shape.min_per_class) == (23, 4, 0)
    assert shape.median_per_class == 7.0  # of 0, 5, 9, 9
    # ⌈300,000 / 23⌉ = 13,044 variants wanted: capped at 200.
    assert (shape.variants_per_text, shape.candidates_at_most) == (200, 4_600)
    # A 26-minute budget doubles the candidates: ⌈600,000 / 23⌉ still meets the cap.
    assert TaskShape.of(labels, 4, 3, AugmentConfig(), minutes=26.0).variants_per_text == 200
    big = [0, 1] * 50_000  # 100,000 rows: 40 by default, ⌈40 × 26 / 13⌉ = 80 at 26 minutes
    assert TaskShape.of(big, 2, 3, AugmentConfig()).variants_per_text == 40
    assert TaskShape.of(big, 2, 3, AugmentConfig(), minutes=26.0).variants_per_text == 80
    # 5,000 of them varied (a phrase dataset's sentences): a pool of 80,000 rows a
    # minute, 2,080,000 // 5,000 = 416 per sentence, capped at 200; at most 5,000 × 200.
    pooled = TaskShape.of(big, 2, 3, AugmentConfig(), minutes=26.0, varied=5_000)
    assert (pooled.variants_per_text, pooled.candidates_at_most) == (200, 1_000_000)
    fixed = TaskShape.of(labels, 4, 3, AugmentConfig(n_iter=5))
    assert fixed.variants_per_text == 5
    assert fixed.describe() == (
        "23 training rows over 4 labels (0 to a label at least, median 7), 3 held out to "
        "select; 5 augmented variants per text (≤ 115 rows)"
    )
