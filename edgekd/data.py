"""Load a text-classification task from a local file/folder or a Hugging Face dataset.

Whatever the source, the result is a `TaskData`: train and dev `Split`s of
(text, label id) and the label names, ids ordered the same way every time
(integer labels numerically, string labels alphabetically, or the dataset's own
`ClassLabel` order).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import random
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekd.config import DataConfig
from edgekd.errors import EdgeKDError
from edgekd.io import parse_json, read_regular
from edgekd.progress import console, shown

TEXT_COLUMNS = ("sentence", "text", "content", "review", "document", "sentence1", "question")
LABEL_COLUMNS = ("label", "labels", "class", "category", "target", "sentiment")
DEV_SPLITS = ("dev", "validation", "valid", "val")
SUFFIXES = (".tsv", ".csv", ".jsonl", ".json")
# A held-out share of rows when a single file has no dev split: 10% is the usual
# compromise between a stable accuracy estimate and training rows lost.
HELD_OUT_SHARE = 0.1
# A row is read up to its 8,192nd word and 256 KiB. No model edgekd builds reads past
# 8,192 tokens (token lengths are ranged to that), and the tokenizers it meets make at
# least one token per whitespace word (but for words of only zero-width or control
# characters, which they drop), so the words cut are, all but always, words no model
# would read.
# Without the cut, every per-word step (augmenters, the POS tagger, tokenizers) paid
# for the whole row: one 5 MB row cost gigabytes. 256 KiB is 32 characters per kept
# word; a 5,000-word review (~30 KB) is far inside both.
MAX_ROW_WORDS = 8192
MAX_ROW_CHARS = 1 << 18
_WORD = re.compile(r"\S+")

# GLUE sentences can exceed csv's default 128 KiB field limit in other tasks.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


# A row's text: one string, or a (first, second) pair for sentence-pair tasks.
Text = str | tuple[str, str]


@dataclass
class Split:
    texts: list[Text]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.texts)

    def subsample(self, n: int | None, seed: int) -> Split:
        """A seeded random subset of `n` rows, kept in their original order."""
        if n is None or n >= len(self):
            return self
        keep = sorted(random.Random(seed).sample(range(len(self)), n))
        return Split([self.texts[i] for i in keep], [self.labels[i] for i in keep])


@dataclass
class TaskData:
    train: Split
    dev: Split
    label_names: list[str]
    source: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def num_labels(self) -> int:
        return len(self.label_names)


# An inference batch (a teacher labelling, in PyTorch or onnxruntime) holds `batch_size`
# rows of up to 128 tokens, or as many longer rows as that many tokens: short tasks batch
# as they always did, while 512-token rows go 16 at a time (of 64). Attention scores hold
# rows × heads × length² floats: 16 × 12 × 512² × 4 B = 200 MB for MiniLM, where 64 such
# rows took 805 MB per layer (and 800 reviews' labelling peaked at 17.5 GB in onnxruntime).
TOKENS_PER_ROW = 128


def length_sorted_batches(
    lengths: list[int], batch_size: int, max_tokens: int | None = None
) -> list[list[int]]:
    """Index batches of similar lengths: padding waste drops from ~2× to a few %. With
    `max_tokens`, a batch also stops before rows × its longest row would pass it (a
    batch always holds at least one row)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    if max_tokens is None:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    batches: list[list[int]] = []
    for i in order:  # ascending, so the row added is the batch's longest
        if (
            not batches
            or len(batches[-1]) >= batch_size
            or ((len(batches[-1]) + 1) * lengths[i] > max_tokens)
        ):
            batches.append([])
        batches[-1].append(i)
    return batches


def bucketed_batches(
    lengths: list[int], batch_size: int, rng: random.Random, pool: int | None = None
) -> list[list[int]]:
    """Shuffled training batches of similar lengths (bucketing).

    Default (`pool` None): every batch holds rows of one length, drawn in a new order
    each epoch; each length's last batch may be short. Two reasons. Speed: the BiLSTM
    trained ~30% faster than on pools (SST-2 lengths, 2 cores). Reproducibility: the
    packed LSTM sums a mixed-length batch in an order that depends on the thread count
    (weights ~5e-7 apart after 20 steps on 1 vs 2 threads), and the ThreadGovernor
    picks threads by measured speed, so one seed gave two students; one-length batches
    come out bit-identical on any count (tests/test_threads.py).

    A batch of one row is that row twice (when `batch_size` > 1): oneDNN's LSTM backward
    on a single row sums in a thread-count-dependent order even in MKL's strict mode
    (`edgekd.threads`), and SST-2's rarest lengths leave such batches every epoch. Two
    copies give the same mean loss and, with their own dropout masks, a fair gradient.

    With `pool`: shuffle, cut into pools of `pool` batches, sort each pool by length,
    batch it; lengths mix where a pool's sorted run crosses from one to the next.
    Either way the batch order is shuffled.
    """
    order = list(range(len(lengths)))
    rng.shuffle(order)
    batches = []
    if pool is None:
        by_length: dict[int, list[int]] = {}
        for i in order:
            by_length.setdefault(lengths[i], []).append(i)
        for group in by_length.values():
            batches += [group[i : i + batch_size] for i in range(0, len(group), batch_size)]
    else:
        for start in range(0, len(order), batch_size * pool):
            chunk = sorted(order[start : start + batch_size * pool], key=lengths.__getitem__)
            batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    if batch_size > 1:
        batches = [b * 2 if len(b) == 1 else b for b in batches]
    rng.shuffle(batches)
    return batches


# ---------------------------------------------------------------- selection split


def _words(text: Text) -> tuple[str, ...]:
    side = text if isinstance(text, str) else "\x01".join(text)
    return tuple(side.lower().split())


def maximal_rows(texts: Sequence[Text]) -> list[int]:
    """Indices of the rows no other row contains as a run of words (case-insensitive),
    first occurrence of each. In a phrase dataset these are the whole sentences; in
    most datasets, every distinct row. Rows are looked up by hashed windows
    (`edgekd.overlap`), so a long row costs its length, not its length cubed."""
    return _maximal([_words(t) for t in texts])


def varied_rows(texts: Sequence[Text], sources: str) -> list[int]:
    """Indices of the training texts augmentation varies (`augment.sources`): with
    `maximal`, those no other text contains (a phrase dataset's whole sentences, whose
    parts it already holds; every distinct text otherwise), else all."""
    return maximal_rows(texts) if sources == "maximal" else list(range(len(texts)))


def _maximal(words: list[tuple[str, ...]]) -> list[int]:
    from edgekd.overlap import contained

    first: dict[tuple[str, ...], int] = {}
    for i, w in enumerate(words):
        if w:
            first.setdefault(w, i)
    distinct = list(first)
    inner = contained(distinct, distinct, same=True)
    return [first[w] for w, x in zip(distinct, inner, strict=True) if not x]


def stratified(
    candidates: list[int], labels: Sequence[int], k: int, rng: random.Random
) -> list[int]:
    """`k` of `candidates`, each label's share proportional to its share of them
    (largest remainders, ties drawn by `rng`), the rows within a label drawn by `rng`.

    A plain draw is unfair to small classes: 150 rows drawn from 150 labels of 10
    rows each (CLINC150 at 10 rows per class) take none from ~55 labels and 3 or more
    from ~12, which then train on 7 rows or fewer; drawn by share, each gives one."""
    k = min(k, len(candidates))
    if k <= 0:
        return []
    by_label: dict[int, list[int]] = {}
    for i in candidates:
        by_label.setdefault(labels[i], []).append(i)
    exact = {y: k * len(rows) / len(candidates) for y, rows in by_label.items()}
    quota = {y: math.floor(q) for y, q in exact.items()}
    ties = {y: rng.random() for y in sorted(by_label)}
    by_remainder = sorted(by_label, key=lambda y: (quota[y] - exact[y], ties[y]))
    for y in by_remainder[: k - sum(quota.values())]:
        quota[y] += 1
    return [i for y in sorted(by_label) for i in rng.sample(by_label[y], quota[y])]


def carve_selection(train: Split, rows: int, seed: int) -> tuple[Split, Split, int]:
    """(train left, selection, rows dropped for overlap): a held-out split from `train`
    that chooses the epoch and the early stop, so dev is never read to pick anything.

    Phrase datasets (SST-2 holds 67k phrases of 6.9k sentences) repeat a sentence in
    its parts: a held-out sentence whose phrases stay in training would score what
    was learnt by heart. So the selection is drawn from the *maximal* rows (no other
    row contains them as a run of words), and every training row that is a run of
    words inside a selected row is dropped. For data of whole sentences this drops
    only duplicates. Pairs are compared side by side as one sequence.
    """
    if rows <= 0 or len(train) < 2:
        return train, Split([], []), 0
    words = [_words(t) for t in train.texts]
    candidates = _maximal(words)
    rng = random.Random(seed)
    # At most a tenth of the training rows, so small data keeps most of its rows.
    k = min(rows, len(candidates), max(1, len(train) // 10))
    picked = stratified(candidates, train.labels, k, rng)
    from edgekd.overlap import contained

    for _ in range(2):
        chosen = set(picked)
        taken = contained(words, [words[i] for i in picked])
        keep = [i for i in range(len(words)) if i not in chosen and not taken[i]]
        lost = set(train.labels) - {train.labels[i] for i in keep}
        if not lost:
            break
        # A label whose every training row was held out, or lies inside one, would not
        # train at all (a label of one distinct text, repeated): its rows stay in.
        picked = [i for i in picked if train.labels[i] not in lost]
    else:  # its rows lie inside another label's held-out rows: no selection at all
        return train, Split([], []), 0
    dropped = len(train) - len(keep) - len(picked)
    picked.sort()
    return (
        Split([train.texts[i] for i in keep], [train.labels[i] for i in keep]),
        Split([train.texts[i] for i in picked], [train.labels[i] for i in picked]),
        dropped,
    )


# ---------------------------------------------------------------- raw rows


@dataclass
class RawSplit:
    """Rows as read, before labels become ids; `where(i)` names row i for errors."""

    texts: list[Any]
    labels: list[Any]
    origin: str
    label_names: list[str] | None = None  # from a ClassLabel feature, when present
    first_row: int = 2  # file line of rows[0] (1-based; 2 when a header precedes)

    def where(self, i: int) -> str:
        return f"{self.origin} row {i + self.first_row}"


def _pick(
    columns: list[str],
    wanted: str | None,
    candidates: tuple[str, ...],
    what: str,
    flag: str,
    origin: str,
) -> str:
    if wanted is not None:
        if wanted not in columns:
            raise EdgeKDError(
                f"{origin} has no column {wanted!r} (columns: {', '.join(map(repr, columns))}); "
                f"fix {flag}"
            )
        return wanted
    lowered = {c.lower(): c for c in columns}
    for c in candidates:
        if c in lowered:
            return lowered[c]
    raise EdgeKDError(
        f"{origin}: cannot tell which column holds the {what} "
        f"(columns: {', '.join(map(repr, columns))}); pass {flag}"
    )


def _read_text(path: Path, cfg: DataConfig) -> str:
    """The file decoded whole, so a bad byte is named by its offset in the file. Only a
    regular file is opened: a FIFO or device is refused before a read could block."""
    data = read_regular(path, "data file", "pass a .tsv, .csv or .jsonl file (a regular file)")
    try:
        return data.decode(cfg.encoding)
    except LookupError:
        raise EdgeKDError(
            f"--encoding {cfg.encoding!r} is no known encoding; e.g. latin-1"
        ) from None
    except UnicodeDecodeError as e:
        raise EdgeKDError(
            f"{path} is not {cfg.encoding} text (byte offset {e.start}: "
            f"{data[e.start : e.start + 1]!r}); convert it, or pass --encoding (e.g. latin-1)"
        ) from None


def _read_delimited(path: Path, cfg: DataConfig) -> RawSplit:
    delimiter = "\t" if path.suffix == ".tsv" else ","
    f = io.StringIO(_read_text(path, cfg), newline="")
    if delimiter == "\t":  # GLUE TSVs hold bare quotes inside sentences: read literally
        reader = csv.reader(f, delimiter=delimiter, quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(f, delimiter=delimiter)
    rows = [r for r in reader if r]
    if not rows:
        raise EdgeKDError(f"{path} is empty; give a file with a header and at least one row")
    head = [c.strip() for c in rows[0]]
    known = {c.lower() for c in TEXT_COLUMNS + LABEL_COLUMNS}
    wanted = {cfg.text_column, cfg.label_column, cfg.text_pair_column} - {None}
    has_header = any(c.lower() in known or c in wanted for c in head)
    if has_header:
        twice = sorted({c for c in head if head.count(c) > 1})
        if twice:
            raise EdgeKDError(f"{path} has two columns named {twice[0]!r}; rename one")
        columns, body, first_row = head, rows[1:], 2
    else:
        columns, body, first_row = [str(i) for i in range(len(head))], rows, 1
    text_col, label_col = cfg.text_column, cfg.label_column
    if not has_header and text_col is None and label_col is None:
        # GLUE CoLA layout: no header; source, label, original label, sentence.
        if len(head) == 4 and head[1] in {"0", "1"}:
            text_col, label_col = "3", "1"
        else:
            raise EdgeKDError(
                f"{path} has no header row; pass --text-column and --label-column as "
                "0-based column numbers"
            )
    text_col = _pick(columns, text_col, TEXT_COLUMNS, "text", "--text-column", str(path))
    label_col = _pick(columns, label_col, LABEL_COLUMNS, "label", "--label-column", str(path))
    pair_col = _pair_column(columns, cfg, str(path))
    ti, li = columns.index(text_col), columns.index(label_col)
    pi = columns.index(pair_col) if pair_col else None
    last = max(ti, li, pi or 0)
    texts: list[Any] = []
    labels = []
    for n, row in enumerate(body):
        if len(row) <= last:
            raise EdgeKDError(
                f"{path} row {n + first_row} has {len(row)} fields, expected at least "
                f"{last + 1}; fix the row or the delimiter"
            )
        texts.append(row[ti] if pi is None else (row[ti], row[pi]))
        labels.append(row[li])
    return RawSplit(texts, labels, str(path), first_row=first_row)


def _pair_column(columns: list[str], cfg: DataConfig, origin: str) -> str | None:
    """The second text's column of a sentence-pair task, when one is asked for."""
    if cfg.text_pair_column is None:
        return None
    return _pick(columns, cfg.text_pair_column, (), "second text", "--text-pair-column", origin)


def _read_jsonl(path: Path, cfg: DataConfig) -> RawSplit:
    """JSON Lines (one object per line), or one JSON array of objects."""
    text = _read_text(path, cfg)
    records: list[Any] = []
    if text.lstrip().startswith("["):
        try:
            records = parse_json(text, str(path))
        except json.JSONDecodeError as e:
            raise EdgeKDError(
                f"{path} is not a valid JSON array ({e.msg}, line {e.lineno}); fix it or "
                "write one object per line"
            ) from None
    else:
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(parse_json(line, f"{path} line {n}"))
            except json.JSONDecodeError as e:
                raise EdgeKDError(
                    f"{path} line {n} is not JSON ({e.msg}); one object per line"
                ) from None
    bad = next((i for i, r in enumerate(records) if not isinstance(r, dict)), None)
    if bad is not None:
        raise EdgeKDError(f"{path} record {bad + 1} is not a JSON object; give field: value pairs")
    if not records:
        raise EdgeKDError(f"{path} is empty; give at least one JSON object per line")
    columns = list(records[0])
    text_col = _pick(columns, cfg.text_column, TEXT_COLUMNS, "text", "--text-column", str(path))
    label_col = _pick(
        columns, cfg.label_column, LABEL_COLUMNS, "label", "--label-column", str(path)
    )
    pair_col = _pair_column(columns, cfg, str(path))
    texts: list[Any] = []
    labels = []
    for n, r in enumerate(records):
        for col in (text_col, label_col, pair_col):
            if col is not None and col not in r:
                raise EdgeKDError(f"{path} record {n + 1} lacks {col!r}; add the field")
        for col in (text_col, pair_col):
            # A text is a string (a number reads as its digits); an object or list would
            # train on its Python repr, so it is refused.
            if col is not None and isinstance(r[col], dict | list):
                kind = "an object" if isinstance(r[col], dict) else "a list"
                raise EdgeKDError(
                    f"{path} record {n + 1}: {col!r} holds {kind}, not text; write the text "
                    "as a string, or name the text field with --text-column"
                )
        text = r[text_col] if r[text_col] is None else str(r[text_col])  # None: no text
        texts.append(text if pair_col is None else (r[text_col], r[pair_col]))
        labels.append(r[label_col])
    return RawSplit(texts, labels, str(path), first_row=1)


def _read_file(path: Path, cfg: DataConfig) -> RawSplit:
    if path.suffix in (".tsv", ".csv"):
        return _read_delimited(path, cfg)
    if path.suffix in (".jsonl", ".json"):
        return _read_jsonl(path, cfg)
    raise EdgeKDError(f"{path}: unsupported file type {path.suffix!r}; use .tsv, .csv or .jsonl")


def _find_split_file(folder: Path, names: tuple[str, ...]) -> Path | None:
    """The one file of `folder` holding the first split of `names` found, as NAME.tsv,
    .csv, .jsonl or .json. Two files for one split (train.tsv and train.csv) are refused,
    never one picked silently. The file must be a regular file in `folder` itself: a
    symlink there is refused (`file_inside`)."""
    from edgekd.artifacts import file_inside

    for name in names:
        found = [
            f"{name}{suffix}" for suffix in SUFFIXES if os.path.lexists(folder / f"{name}{suffix}")
        ]
        if len(found) > 1:
            raise EdgeKDError(
                f"{folder} holds {' and '.join(found)} for the one {name} split; move the "
                f"ones not to use out of that folder, or pass one file alone with --data "
                f"{folder / found[0]}"
            )
        if found:
            return file_inside(folder, found[0], "pass the data file itself with --data FILE")
    return None


def _load_local(path: Path, cfg: DataConfig) -> tuple[RawSplit, RawSplit | None]:
    if not path.is_dir():  # a file; anything but a regular one is refused when read
        return _read_file(path, cfg), None
    if (path / "dataset_dict.json").is_file():  # a `DatasetDict.save_to_disk` folder
        import datasets

        try:
            saved = datasets.load_from_disk(str(path))
        # A folder with its dataset_dict.json but not the splits it lists, or their
        # files damaged: datasets raises FileNotFoundError, ValueError, pyarrow's errors…
        except Exception as e:
            why = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
            raise EdgeKDError(
                f"--data {path} is not a dataset `save_to_disk` wrote ({type(e).__name__}: "
                f"{why}); save it again, or give .tsv, .csv or .jsonl files"
            ) from e
        return _from_hf(saved, cfg, str(path))
    train = _find_split_file(path, (cfg.train_split,))
    if train is None:
        raise EdgeKDError(
            f"{path} has no {cfg.train_split}.tsv/.csv/.jsonl; add one or pass --data FILE"
        )
    dev_names = (cfg.dev_split,) if cfg.dev_split else DEV_SPLITS
    dev = _find_split_file(path, dev_names)
    if dev is None and cfg.dev_split:
        raise EdgeKDError(f"{path} has no {cfg.dev_split}.tsv/.csv/.jsonl; fix --dev-split")
    return _read_file(train, cfg), (_read_file(dev, cfg) if dev else None)


def _from_hf(dd: Any, cfg: DataConfig, origin: str) -> tuple[RawSplit, RawSplit | None]:
    if cfg.train_split not in dd:
        raise EdgeKDError(
            f"{origin} has no split {cfg.train_split!r} (splits: {', '.join(dd)}); "
            "pass --train-split"
        )
    dev_name = cfg.dev_split or next((s for s in DEV_SPLITS if s in dd), None)
    if dev_name is not None and dev_name not in dd:
        raise EdgeKDError(f"{origin} has no split {dev_name!r} (splits: {', '.join(dd)})")

    def convert(split: str) -> RawSplit:
        ds = dd[split]
        cols = list(ds.column_names)
        where = f"{origin}[{split}]"
        text_col = _pick(cols, cfg.text_column, TEXT_COLUMNS, "text", "--text-column", where)
        label_col = _pick(cols, cfg.label_column, LABEL_COLUMNS, "label", "--label-column", where)
        pair_col = _pair_column(cols, cfg, where)
        feature = ds.features[label_col]
        names = list(feature.names) if hasattr(feature, "names") else None
        texts = list(ds[text_col])
        if pair_col is not None:
            texts = list(zip(texts, ds[pair_col], strict=True))
        return RawSplit(texts, list(ds[label_col]), where, names, first_row=0)

    return convert(cfg.train_split), (convert(dev_name) if dev_name else None)


def _load_hub(spec: str, cfg: DataConfig) -> tuple[RawSplit, RawSplit | None]:
    hint = "point --data at a local copy, e.g. --data ../shared/data/sst2"
    if not os.environ.get("HF_HUB_OFFLINE"):
        hint += ", or set HF_HUB_OFFLINE=1 to use a cached copy"
    from edgekd.hub import hub_unreachable

    reason = hub_unreachable()
    if reason:
        raise EdgeKDError(
            f"cannot load dataset {spec!r} from the Hugging Face Hub ({reason}); {hint}"
        )
    import datasets

    # `glue/sst2` is (name, config); `stanfordnlp/imdb` is one repo id. Try the
    # (name, config) reading first, then the whole spec as a repo id.
    attempts: list[tuple[str, ...]] = []
    if "/" in spec:
        name, _, config = spec.rpartition("/")
        attempts.append((name, config))
    attempts.append((spec,))
    error: Exception | None = None
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)  # its retry warnings would bury our one-line error
    try:
        for args in attempts:
            try:
                return _from_hf(datasets.load_dataset(*args), cfg, spec)
            except EdgeKDError:
                raise
            except Exception as e:  # the hub raises many types: offline, 404, bad config
                error = e
    finally:
        hub_log.setLevel(level)
    raise EdgeKDError(
        f"could not load dataset {spec!r} from the Hugging Face Hub "
        f"({type(error).__name__}: {str(error).splitlines()[0][:120]}); check the name, or "
        f"{hint}"
    )


# ---------------------------------------------------------------- labels


def _label_key(value: Any) -> str | None:
    """One spelling per class: `1`, `1.0`, `"1"` and `" 1 "` are all "1"; None, NaN, "nan"
    and "" are no label (None)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(int(value))
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text or None
    if not math.isfinite(number):
        return None
    return str(int(number)) if number.is_integer() else repr(number)


def _integer(key: str) -> bool:
    """Whether `int(key)` reads it: an optional minus, then decimal digits. Not
    `isdigit`, which also holds for '²' (int refuses it), nor a `lstrip("-")`, which
    passes '--3'."""
    digits = key[1:] if key.startswith("-") else key
    return digits.isdecimal()


def _label_names(train: RawSplit) -> list[str]:
    if train.label_names is not None:
        return train.label_names
    keys = set(map(_label_key, train.labels))
    if None in keys:  # named here, before "a single label" could hide it
        row = next(i for i, v in enumerate(train.labels) if _label_key(v) is None)
        raise EdgeKDError(f"{train.where(row)} has no label; fill it in or drop the row")
    names = {k for k in keys if k is not None}
    if all(_integer(k) for k in names):
        return sorted(names, key=int)
    return sorted(names)


def cut_row(text: str) -> str:
    """`text` up to the end of its `MAX_ROW_WORDS`-th word, and of its last word that
    ends within `MAX_ROW_CHARS` characters (a first word longer than that is cut at the
    cap); `text` itself when nothing but whitespace would go. Words are runs of
    non-whitespace as Python reads it (U+3000 and no-break spaces separate words too)."""
    if len(text) <= MAX_ROW_WORDS:  # fewer characters than the cap has words
        return text
    end = None
    for n, word in enumerate(_WORD.finditer(text), 1):
        if word.end() > MAX_ROW_CHARS:
            if n == 1:  # one word past the cap: its first characters
                return text[word.start() : word.start() + MAX_ROW_CHARS]
            break
        end = word.end()
        if n == MAX_ROW_WORDS:
            break
    if end is None:  # only whitespace
        return text
    return text if not text[end:].strip() else text[:end]


def _to_ids(raw: RawSplit, names: list[str]) -> tuple[Split, int]:
    """The rows with label ids, and how many had a text cut (`cut_row`)."""
    index = {n: i for i, n in enumerate(names)}
    ids: list[int] = []
    for i, value in enumerate(raw.labels):
        if raw.label_names is not None:  # ClassLabel ints; -1 marks "no label" (GLUE test)
            if not isinstance(value, int) or not 0 <= value < len(names):
                raise EdgeKDError(
                    f"{raw.where(i)} has label {value!r}, not one of 0..{len(names) - 1}; "
                    "use a labelled split"
                )
            ids.append(value)
            continue
        key = _label_key(value)
        if key is None:
            raise EdgeKDError(f"{raw.where(i)} has no label; fill it in or drop the row")
        if key not in index:
            raise EdgeKDError(
                f"{raw.where(i)} has label {key!r}, which the training split never uses "
                f"(labels: {', '.join(names)}); fix the label or add training rows for it"
            )
        ids.append(index[key])
    texts: list[Text] = []
    cut = 0
    for i, text in enumerate(raw.texts):
        sides = text if isinstance(text, tuple) else (text,)
        if any(side is None or not str(side).strip() for side in sides):
            raise EdgeKDError(f"{raw.where(i)} has an empty text; drop the row")
        whole = [str(side) for side in sides]
        kept = [cut_row(side) for side in whole]
        cut += kept != whole
        texts.append(kept[0] if len(kept) == 1 else (kept[0], kept[1]))
    return Split(texts, ids), cut


# ---------------------------------------------------------------- entry point


def load_task(cfg: DataConfig) -> TaskData:
    """Load train and dev splits as label ids, subsampled as `cfg` asks."""
    path = Path(cfg.spec).expanduser()
    if path.exists():
        raw_train, raw_dev = _load_local(path, cfg)
    elif cfg.spec.startswith((".", "/", "~")) or Path(cfg.spec).suffix in SUFFIXES:
        raise EdgeKDError(f"--data {cfg.spec}: no such file or folder; check the path")
    else:
        raw_train, raw_dev = _load_hub(cfg.spec, cfg)
    if not raw_train.texts:
        raise EdgeKDError(f"{raw_train.origin} has no rows; give at least one labelled row")
    names = _label_names(raw_train)
    if len(names) < 2:
        raise EdgeKDError(
            f"{raw_train.origin} has a single label ({names[0]!r}); a classifier needs two or more"
        )
    train, cut = _to_ids(raw_train, names)
    notes = []
    if raw_dev is None:
        # No dev split: hold out a seeded share of train, never the same rows twice.
        order = list(range(len(train)))
        random.Random(cfg.seed).shuffle(order)
        n_dev = max(1, int(len(order) * HELD_OUT_SHARE))
        dev_idx, train_idx = sorted(order[:n_dev]), sorted(order[n_dev:])
        dev = Split([train.texts[i] for i in dev_idx], [train.labels[i] for i in dev_idx])
        train = Split([train.texts[i] for i in train_idx], [train.labels[i] for i in train_idx])
        notes.append(f"no dev split: held out {n_dev} of the training rows (seed {cfg.seed})")
    else:
        if not raw_dev.texts:
            raise EdgeKDError(f"{raw_dev.origin} has no rows; give at least one labelled row")
        dev, cut_dev = _to_ids(raw_dev, names)
        cut += cut_dev
    if cut:
        rows = f"{cut:,} row{'s' if cut != 1 else ''}"
        notes.append(
            f"{rows} longer than {MAX_ROW_WORDS:,} words or {MAX_ROW_CHARS // 1024} KiB were "
            f"cut there (no model reads past {MAX_ROW_WORDS:,} tokens)"
        )
    for note in notes:
        console.print(f"data: {shown(note)}")
    return TaskData(
        train=train.subsample(cfg.max_train, cfg.seed),
        dev=dev.subsample(cfg.max_dev, cfg.seed),
        label_names=names,
        source=cfg.spec,
        notes=notes,
    )


def median_tokens(tokenizer: Any, texts: Sequence[Any]) -> int:
    """Median length in `tokenizer`'s tokens (an HF tokenizer) of the first 2,000 texts:
    the input length a task's deployment will really see."""
    import statistics

    sample = list(texts[:2000])
    lengths = [
        len(tokenizer(*([t] if isinstance(t, str) else list(t)))["input_ids"]) for t in sample
    ]
    return int(statistics.median(lengths)) if lengths else 64


def sides_of(texts: Sequence[Any]) -> list[str]:
    """Every string in `texts`, both sides of each sentence pair."""
    return [x for t in texts for x in ((t,) if isinstance(t, str) else t)]


def align_labels(task: TaskData, teacher_names: list[str]) -> TaskData:
    """Re-index `task` labels into a model's logit order (`teacher_names`).

    Data labels match teacher labels by name ("positive"), else, when the data's
    labels are the integers 0..C-1 or the teacher's names are generic
    (`LABEL_k`), by position.
    """
    if len(teacher_names) != task.num_labels:
        raise EdgeKDError(
            f"the teacher has {len(teacher_names)} labels ({', '.join(teacher_names)}) but the "
            f"data has {task.num_labels} ({', '.join(task.label_names)}); use a teacher "
            "fine-tuned on this task"
        )
    lowered = [n.lower() for n in teacher_names]
    if all(n.lower() in lowered for n in task.label_names):
        mapping = [lowered.index(n.lower()) for n in task.label_names]
    elif task.label_names == [str(i) for i in range(task.num_labels)] or all(
        n.upper().startswith("LABEL_") for n in teacher_names
    ):  # positional
        mapping = list(range(task.num_labels))
    else:
        raise EdgeKDError(
            f"cannot match data labels ({', '.join(task.label_names)}) to the teacher's "
            f"({', '.join(teacher_names)}); rename the labels in the data to the teacher's"
        )
    # Generic teacher names (LABEL_0...) carry no meaning: keep the data's names then.
    generic = all(n.upper().startswith("LABEL_") for n in teacher_names)
    names = (
        [task.label_names[mapping.index(i)] for i in range(len(mapping))]
        if generic
        else teacher_names
    )

    def remap(split: Split) -> Split:
        return Split(split.texts, [mapping[y] for y in split.labels])

    return TaskData(remap(task.train), remap(task.dev), names, task.source, task.notes)
