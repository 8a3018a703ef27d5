"""The student's tokenizer: one `tokenizers` JSON file for either vocabulary kind.

- `word`: a word-level vocabulary built from the transfer set (Tang et al. 2019
  used word2vec words). BERT-style normalisation and pre-tokenisation, so CJK
  characters split one per token and punctuation splits off in every script.
- `wordpiece`: the teacher's own WordPiece vocabulary, without [CLS]/[SEP]
  (a BiLSTM has no use for them).

Both serialize to `tokenizer.json`, which the ONNX predictor and the deployed
bundle read with the small `tokenizers` library: no torch, no transformers.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

PAD, UNK = "[PAD]", "[UNK]"


# One tokenized row: ids, or (first, second) ids of a sentence pair read by a siamese
# student. Students with [CLS]/[SEP] read a pair as one row: [CLS] a [SEP] b [SEP].
Row = list[int] | tuple[list[int], list[int]]


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
        encs = self.tokenizer.encode_batch(texts, add_special_tokens=self.add_special_tokens)
        out: list[Row] = []
        for enc in encs:
            ids = enc.ids[: self.max_length]
            # A text of only unknown punctuation or whitespace still gets one token, so
            # every row has length >= 1 (packed LSTMs reject empty sequences).
            out.append(ids or [self.tokenizer.token_to_id(UNK) or self.pad_id])
        return out

    @staticmethod
    def length(row: Row) -> int:
        return len(row) if isinstance(row, list) else len(row[0]) + len(row[1])

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
    def load(cls, folder: Path, max_length: int, add_special_tokens: bool = False):
        return cls(
            Tokenizer.from_file(str(folder / "tokenizer.json")), max_length, add_special_tokens
        )


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


def wordpiece_from_teacher(
    teacher_tokenizer: Any, max_length: int, add_special_tokens: bool = False
) -> StudentTokenizer:
    """The teacher's fast tokenizer as a standalone `tokenizers` object; with
    `add_special_tokens`, texts get the teacher's [CLS] … [SEP] (BERT students)."""
    backend = getattr(teacher_tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError("the teacher has no fast tokenizer; use student vocab 'word'")
    return StudentTokenizer(Tokenizer.from_str(backend.to_str()), max_length, add_special_tokens)


def vocab_tokens(tok: StudentTokenizer) -> list[str]:
    """Tokens in id order."""
    vocab = tok.tokenizer.get_vocab()
    return sorted(vocab, key=vocab.__getitem__)
