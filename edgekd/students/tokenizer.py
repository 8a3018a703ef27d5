"""The student's tokenizer: one `tokenizers` JSON file for either vocabulary kind.

- `word`: a word-level vocabulary built from the transfer set (Tang et al. 2019
  used word2vec words). BERT-style normalisation and pre-tokenisation, so CJK
  characters split one per token and punctuation splits off in every script.
- `wordpiece`: the teacher's own WordPiece vocabulary, without [CLS]/[SEP]
  (a BiLSTM has no use for them), cut to the tokens the transfer set uses plus
  every character it uses as a piece, so a word never seen in training still
  splits into pieces the student has trained rows for instead of one [UNK].

Both serialize to `tokenizer.json`, which the ONNX predictor and the deployed
bundle read with the small `tokenizers` library: no torch, no transformers.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from edgekd.errors import EdgeKDError
from edgekd.io import MAX_JSON_BYTES, read_regular

PAD, UNK = "[PAD]", "[UNK]"


# One tokenized row: ids, or (first, second) ids of a sentence pair read by a siamese
# student. Students with [CLS]/[SEP] read a pair as one row: [CLS] a [SEP] b [SEP].
# `PackedRows` hands out its rows as int32 arrays; every reader takes either.
Row = list[int] | tuple[list[int], list[int]] | np.ndarray | tuple[np.ndarray, np.ndarray]

# Texts per `encode_batch` call. A `tokenizers` Encoding holds ids, tokens, offsets and
# masks: ~5 KB per SST-2 sentence (28 tokens), against 112 B for the same ids as int32.
# Encoding a million-row transfer set at once would hold ~5 GB of them; 1,024 at a time
# holds ~5 MB.
ENCODE_CHUNK = 1_024


class PackedRows:
    """Token id rows in one flat int32 array with offsets: 4 B per token and 8 B per
    row, where a list of Python ints costs ~40 B per token. Indexing gives a row (an
    int32 view, or a pair's two views); slicing gives a `PackedRows` sharing the arrays.
    """

    def __init__(self, flat: np.ndarray, offsets: np.ndarray, second: PackedRows | None = None):
        self.flat, self.offsets, self.second = flat, offsets, second

    @classmethod
    def from_rows(cls, rows: list[list[int]]) -> PackedRows:
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in rows], out=offsets[1:])
        flat = np.fromiter((i for r in rows for i in r), dtype=np.int32, count=int(offsets[-1]))
        return cls(flat, offsets)

    @classmethod
    def concat(cls, parts: list[PackedRows]) -> PackedRows:
        """One-sided rows end to end (a pair's sides are packed and joined apart)."""
        if not parts:
            return cls(np.zeros(0, np.int32), np.zeros(1, np.int64))
        starts = np.cumsum([0] + [len(p.flat) for p in parts[:-1]])
        offsets = np.concatenate(
            [np.zeros(1, np.int64)]
            + [p.offsets[1:] - p.offsets[0] + s for p, s in zip(parts, starts, strict=True)]
        )
        flat = np.concatenate([p.flat[p.offsets[0] : p.offsets[-1]] for p in parts])
        return cls(flat, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                raise ValueError("PackedRows slices take step 1")
            second = self.second[start:stop] if self.second is not None else None
            return PackedRows(self.flat, self.offsets[start : stop + 1], second)
        row = self.flat[self.offsets[i] : self.offsets[i + 1]]
        return row if self.second is None else (row, self.second[i])

    def __iter__(self) -> Any:
        return (self[i] for i in range(len(self)))

    def lengths(self) -> np.ndarray:
        """Tokens per row (both sides of a pair)."""
        n = np.diff(self.offsets)
        return n if self.second is None else n + self.second.lengths()


class StudentTokenizer:
    """Texts → padded `input_ids` and `attention_mask` (int64, batch × longest).

    With special tokens, `token_type_ids` too (1 after the first [SEP], for pairs).
    Sentence pairs without special tokens (the siamese BiLSTM) give each side its
    own `input_ids`/`attention_mask` and `input_ids_b`/`attention_mask_b`.
    """

    def __init__(self, tokenizer: Tokenizer, max_length: int, add_special_tokens: bool = False):
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.add_special_tokens = add_special_tokens
        self.tokenizer.no_padding()
        self.type_sep: int | None = None
        if add_special_tokens:
            # Let the tokenizer truncate: it keeps room for [SEP] within max_length.
            self.tokenizer.enable_truncation(max_length)
            # The token after which a pair's second text (type 1) starts, if the
            # template has types at all (BERT's does, RoBERTa's does not).
            probe = self.tokenizer.encode("a", "b", add_special_tokens=True)
            if 1 in probe.type_ids and probe.type_ids.index(1) > 0:
                self.type_sep = probe.ids[probe.type_ids.index(1) - 1]
        else:
            self.tokenizer.no_truncation()
        pad = self.tokenizer.token_to_id(PAD)
        self.pad_id = 0 if pad is None else pad

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size())

    def ids(self, texts: list[Any]) -> list[Row]:
        """Token ids per text, truncated to `max_length`, never empty (UNK/PAD fill-in)."""
        if texts and not isinstance(texts[0], str) and not self.add_special_tokens:
            firsts = self.ids([a for a, _ in texts])
            seconds = self.ids([b for _, b in texts])
            return list(zip(firsts, seconds, strict=True))  # type: ignore[arg-type]
        from edgekd.data import cut_row

        out: list[Row] = []
        fill = [self.tokenizer.token_to_id(UNK) or self.pad_id]
        for start in range(0, len(texts), ENCODE_CHUNK):
            # Texts that did not come through the loader (`edgekd predict`, the API) are
            # cut as it cuts them: words no model reads are never tokenized.
            chunk = [
                cut_row(t) if isinstance(t, str) else tuple(map(cut_row, t))
                for t in texts[start : start + ENCODE_CHUNK]
            ]
            for enc in self.tokenizer.encode_batch(
                chunk, add_special_tokens=self.add_special_tokens
            ):
                # A text of only unknown punctuation or whitespace still gets one token,
                # so every row has length >= 1 (packed LSTMs reject empty sequences).
                out.append(enc.ids[: self.max_length] or fill)
        return out

    def packed_ids(self, texts: list[Any]) -> PackedRows:
        """`ids(texts)` stored compactly (`PackedRows`), built `ENCODE_CHUNK` texts at a
        time: a transfer set's ids cost ~4 B per token, whatever its size."""
        if texts and not isinstance(texts[0], str) and not self.add_special_tokens:
            first = self.packed_ids([a for a, _ in texts])
            first.second = self.packed_ids([b for _, b in texts])
            return first
        parts = [
            PackedRows.from_rows(self.ids(texts[a : a + ENCODE_CHUNK]))  # type: ignore[arg-type]
            for a in range(0, len(texts), ENCODE_CHUNK)
        ]
        return PackedRows.concat(parts)

    @staticmethod
    def length(row: Row) -> int:
        return len(row[0]) + len(row[1]) if isinstance(row, tuple) else len(row)

    def pad(self, batch: list[Row]) -> dict[str, np.ndarray]:
        if isinstance(batch[0], tuple):
            first = self.pad([a for a, _ in batch])  # type: ignore[misc]
            second = self.pad([b for _, b in batch])  # type: ignore[misc]
            return {**first, **{f"{k}_b": v for k, v in second.items()}}
        width = max(len(x) for x in batch)
        input_ids = np.full((len(batch), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for i, ids in enumerate(batch):
            input_ids[i, : len(ids)] = ids
            mask[i, : len(ids)] = 1
        out = {"input_ids": input_ids, "attention_mask": mask}
        if self.type_sep is not None:
            is_sep = input_ids == self.type_sep
            before = np.cumsum(is_sep, axis=1) - is_sep  # separators strictly before
            out["token_type_ids"] = ((before >= 1) & (mask == 1)).astype(np.int64)
        return out

    def __call__(self, texts: list[Any]) -> dict[str, np.ndarray]:
        return self.pad(self.ids(texts))

    def save(self, folder: Path) -> None:
        # Compact JSON: a 13k-word vocabulary is 206 KB instead of 313 KB pretty-printed,
        # a sixth of a 1.8 MB bundle.
        self.tokenizer.save(str(folder / "tokenizer.json"), pretty=False)

    @classmethod
    def load(
        cls,
        folder: Path,
        max_length: int,
        add_special_tokens: bool = False,
        rows: int | None = None,
    ):
        """The folder's tokenizer.json; `rows`: the model's embedding rows (`read_tokenizer`)."""
        fix = "re-create the folder with `edgekd distill`"
        tokenizer = read_tokenizer(folder / "tokenizer.json", fix, rows)
        return cls(tokenizer, max_length, add_special_tokens)


def hf_tokenizer(name_or_path: str, what: str) -> Any:
    """The fast Hugging Face tokenizer of the model folder or hub id `name_or_path` (the
    `what`: "teacher", "base"); a folder whose tokenizer files are missing or damaged
    is refused in one line (transformers and tokenizers raise anything from a bare
    Exception to a TypeError there)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name_or_path, use_fast=True)
    except Exception as e:
        why = str(e).strip().splitlines()[0][:120] if str(e).strip() else ""
        raise EdgeKDError(
            f"cannot load the tokenizer of {what} {name_or_path!r} ({type(e).__name__}: {why}); "
            "its folder needs the tokenizer files it was saved with (tokenizer.json, or "
            "vocab.txt and tokenizer_config.json)"
        ) from e


def read_tokenizer(path: Path, fix: str, rows: int | None = None) -> Any:
    """A `tokenizers` tokenizer from the tokenizer.json at `path`, a regular file of at
    most MAX_JSON_BYTES (a 250k-piece multilingual one is ~17 MB); one that the library
    cannot read is refused in one line naming `fix` (it raises a bare Exception).
    `rows`: the model's embedding rows; a piece whose id is not under it is refused
    here, where a crafted id of 10**6 failed inside the model (an internal error) on
    the first text that held the piece."""
    text = read_regular(path, "tokenizer", fix, MAX_JSON_BYTES).decode("utf-8", "replace")
    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception as e:
        why = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        raise EdgeKDError(
            f"{path} is not a tokenizer file the tokenizers library reads ({why}); {fix}"
        ) from None
    if rows is not None:
        top = max(tokenizer.get_vocab(with_added_tokens=True).values(), default=-1)
        if top >= rows:
            raise EdgeKDError(
                f"{path} has a piece of id {top:,}, past the model's {rows:,} embedding rows; {fix}"
            )
    return tokenizer


def word_pipeline(lowercase: bool) -> tuple[Any, Any]:
    normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
    return normalizer, pre_tokenizers.BertPreTokenizer()


def build_word_tokenizer(
    texts: list[str],
    max_vocab: int,
    min_freq: int,
    lowercase: bool,
    max_length: int,
    specials: tuple[str, ...] = (),
) -> StudentTokenizer:
    """A word-level vocabulary of the most frequent words in `texts`.

    `specials` (e.g. the teacher's "[MASK]", used by augmentation) get ids right
    after PAD and UNK and are matched whole, never split at their brackets. Ties
    in frequency are broken alphabetically so the same texts always give the
    same ids, whatever the hash seed.
    """
    normalizer, pre_tok = word_pipeline(lowercase)
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(w for w, _ in pre_tok.pre_tokenize_str(normalizer.normalize_str(text)))
    ranked = sorted((w for w, c in counts.items() if c >= min_freq), key=lambda w: (-counts[w], w))
    vocab = {PAD: 0, UNK: 1}
    for w in specials:
        vocab.setdefault(w, len(vocab))
    for w in ranked[: max(0, max_vocab - len(vocab))]:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tok
    tok.add_special_tokens([PAD, UNK, *specials])
    return StudentTokenizer(tok, max_length)


def is_wordpiece(teacher_tokenizer: Any) -> bool:
    """Whether the teacher's fast tokenizer is a WordPiece model (BERT-style)."""
    backend = getattr(teacher_tokenizer, "backend_tokenizer", None)
    return backend is not None and json.loads(backend.to_str())["model"]["type"] == "WordPiece"


def wordpiece_from_teacher(
    teacher_tokenizer: Any,
    max_length: int,
    add_special_tokens: bool = False,
    texts: list[str] | None = None,
    extra: int = 0,
) -> StudentTokenizer:
    """The teacher's fast tokenizer as a standalone `tokenizers` object; with
    `add_special_tokens`, texts get the teacher's [CLS] … [SEP] (BERT students).

    With `texts`, only the tokens they need (`needed_pieces`): the teacher splits
    them exactly as before, and the table is the task's size, not the teacher's
    (SST-2: 30,522 → ~11.3k rows, 1.95 → 0.73 MB in int8 at 64-d); and the teacher's
    first `extra` pieces besides (`first_pieces`), for words the texts lack.
    """
    backend = getattr(teacher_tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError("the teacher has no fast tokenizer; use student vocab 'word'")
    tok = StudentTokenizer(Tokenizer.from_str(backend.to_str()), max_length, add_special_tokens)
    if texts is None:
        return tok
    return remap_tokenizer(tok, sorted(set(needed_pieces(tok, texts)) | first_pieces(tok, extra)))


def needed_pieces(tok: StudentTokenizer, texts: list[str]) -> list[int]:
    """Ids of the WordPiece tokens `texts` use, the special tokens, and every
    character they use both as a word start and as a continuation ("c", "##c").

    Greedy longest-match-first picks the same pieces from any subset that holds the
    pieces it picked before, so the texts tokenize exactly as with the full
    vocabulary. A new word made of seen characters always splits (down to single
    characters at worst) into tokens the student trained: it is never [UNK].
    """
    model = json.loads(tok.tokenizer.to_str())["model"]
    if model["type"] != "WordPiece":
        raise ValueError(f"a {model['type']} vocabulary has no pieces to keep; use vocab 'word'")
    prefix = model["continuing_subword_prefix"]
    used: set[int] = {tok.pad_id}
    for start in range(0, len(texts), ENCODE_CHUNK):  # Encodings are large: a chunk at a time
        for enc in tok.tokenizer.encode_batch(
            texts[start : start + ENCODE_CHUNK], add_special_tokens=False
        ):
            used.update(enc.ids)
    vocab = tok.tokenizer.get_vocab()
    specials = set(tok.tokenizer.get_added_tokens_decoder())
    words = used - specials  # the specials' brackets and letters are not characters in use
    chars = {c for t, i in vocab.items() if i in words for c in t.removeprefix(prefix)}
    singles = {vocab[t] for c in chars for t in (c, prefix + c) if t in vocab}
    return sorted(used | singles | specials)


def first_pieces(tok: StudentTokenizer, n: int) -> set[int]:
    """Ids of the vocabulary's first `n` pieces, placeholders such as [unused7] left out.

    BERT's vocabulary lists ~1,000 single characters first, then its words and pieces
    from the most frequent ("the" is id 1996 of 30,522), so its first 10,000 are ~9,000
    common words and pieces. A small task's transfer set misses many words its real
    texts use: CLINC150 at 10 rows per label uses 1,935 pieces, and 9.1% of its test
    split's pieces (in 41% of its texts) are none of them, so those words split into
    smaller pieces; with the first 10,000 kept besides, 2.2% (in 14% of the texts;
    benchmarks/NOTES.md). Their rows start from the teacher like every other (`init`)."""
    if n <= 0:
        return set()
    placeholder = re.compile(r"^\[[^\]]*\]$")
    vocab = tok.tokenizer.get_vocab()
    ordered = sorted((i, t) for t, i in vocab.items() if not placeholder.match(t))
    return {i for i, _ in ordered[:n]}


def remap_tokenizer(tok: StudentTokenizer, keep: list[int]) -> StudentTokenizer:
    """A tokenizer over the kept tokens, ids renumbered 0..len(keep)-1 in old order."""
    spec = json.loads(tok.tokenizer.to_str())
    new_id = {old: new for new, old in enumerate(keep)}
    model = spec["model"]
    if model["type"] not in ("WordLevel", "WordPiece"):
        raise EdgeKDError(f"cannot trim a {model['type']} vocabulary; use vocab word or wordpiece")
    model["vocab"] = {t: new_id[i] for t, i in model["vocab"].items() if i in new_id}
    if model.get("unk_token") not in model["vocab"]:
        raise EdgeKDError("the vocabulary has no [UNK] token to map dropped words to")
    spec["added_tokens"] = [
        {**t, "id": new_id[t["id"]]} for t in spec["added_tokens"] if t["id"] in new_id
    ]
    post = spec.get("post_processor") or {}
    for special in (post.get("special_tokens") or {}).values():
        special["ids"] = [new_id[i] for i in special["ids"]]
    return StudentTokenizer(
        Tokenizer.from_str(json.dumps(spec)), tok.max_length, tok.add_special_tokens
    )


def vocab_tokens(tok: StudentTokenizer) -> list[str]:
    """Tokens in id order."""
    vocab = tok.tokenizer.get_vocab()
    return sorted(vocab, key=vocab.__getitem__)
