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


class StudentTokenizer:
    """Texts → padded `input_ids` and `attention_mask` (int64, batch × longest)."""

    def __init__(self, tokenizer: Tokenizer, max_length: int, add_special_tokens: bool = False):
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.add_special_tokens = add_special_tokens
        self.tokenizer.no_padding()
        if add_special_tokens:
            # Let the tokenizer truncate: it keeps room for [SEP] within max_length.
            self.tokenizer.enable_truncation(max_length)
        else:
            self.tokenizer.no_truncation()
        pad = self.tokenizer.token_to_id(PAD)
        self.pad_id = 0 if pad is None else pad

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size())

    def ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids per text, truncated to `max_length`, never empty (UNK/PAD fill-in)."""
        encs = self.tokenizer.encode_batch(texts, add_special_tokens=self.add_special_tokens)
        out = []
        for enc in encs:
            ids = enc.ids[: self.max_length]
            # A text of only unknown punctuation or whitespace still gets one token, so
            # every row has length >= 1 (packed LSTMs reject empty sequences).
            out.append(ids or [self.tokenizer.token_to_id(UNK) or self.pad_id])
        return out

    def pad(self, batch: list[list[int]]) -> dict[str, np.ndarray]:
        width = max(len(x) for x in batch)
        input_ids = np.full((len(batch), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for i, ids in enumerate(batch):
            input_ids[i, : len(ids)] = ids
            mask[i, : len(ids)] = 1
        return {"input_ids": input_ids, "attention_mask": mask}

    def __call__(self, texts: list[str]) -> dict[str, np.ndarray]:
        return self.pad(self.ids(texts))

    def save(self, folder: Path) -> None:
        self.tokenizer.save(str(folder / "tokenizer.json"))

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
