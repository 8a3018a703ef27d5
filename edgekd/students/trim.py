"""Vocabulary trimming for the BiLSTM: drop embedding rows the task never needs.

The embedding table is most of a BiLSTM's bytes (13,813 words × 300 for SST-2's
word vocabulary: 16.6 MB fp32, 4.1 MB int8). Trimming keeps the special tokens and
the tokens the transfer set uses, most frequent first, down to those seen at least
`min_freq` times and at most `keep_top` of them; every other token maps to [UNK].
Texts made only of kept tokens get exactly the same ids' rows, so the same logits.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, cast

from torch import nn

from edgekd.errors import EdgeKDError
from edgekd.students.base import load_student, save_student
from edgekd.students.tokenizer import StudentTokenizer, remap_tokenizer


def token_counts(tok: StudentTokenizer, texts: list[Any]) -> Counter[int]:
    """How often each token id occurs in `texts` (both sides of pairs)."""
    counts: Counter[int] = Counter()
    for row in tok.ids(texts):
        for part in row if isinstance(row, tuple) else (row,):
            counts.update(part)
    return counts


def kept_ids(
    tok: StudentTokenizer, counts: Counter[int], min_freq: int, keep_top: int | None
) -> list[int]:
    """Old ids to keep, in their old order: specials first, then the chosen tokens."""
    specials = {t.content for t in tok.tokenizer.get_added_tokens_decoder().values()}
    vocab = tok.tokenizer.get_vocab()
    special_ids = {vocab[s] for s in specials if s in vocab} | {tok.pad_id}
    ranked = sorted(
        (i for i, c in counts.items() if c >= min_freq and i not in special_ids),
        key=lambda i: (-counts[i], i),
    )
    chosen = set(ranked[:keep_top] if keep_top is not None else ranked)
    return sorted(special_ids | chosen)


def trim_student(
    student_dir: str | Path,
    out_dir: str | Path,
    texts: list[Any],
    min_freq: int = 1,
    keep_top: int | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write a trimmed copy of a student folder (capability "trim"); return what changed."""
    from edgekd.io import atomic_dir, check_output

    check_output(out_dir, overwrite)
    model, tok, labels = load_student(student_dir)
    if "trim" not in model.capabilities:
        raise EdgeKDError(f"student {model.name!r} cannot be trimmed (no 'trim' capability)")
    keep = kept_ids(tok, token_counts(tok, texts), min_freq, keep_top)
    new_tok = remap_tokenizer(tok, keep)
    # A student with the "trim" capability keeps its token table as an nn.Embedding
    # (`TableStudent.embedding`); `Student` itself declares no table.
    table = cast(nn.Embedding, model.embedding).weight.detach()
    trimmed = model.trimmed(keep)
    report = {
        "vocab_before": model.vocab_size,
        "vocab_after": len(keep),
        "embedding_bytes_fp32_before": table.numel() * 4,
        "embedding_bytes_fp32_after": len(keep) * table.shape[1] * 4,
        "min_freq": min_freq,
        "keep_top": keep_top,
    }
    with atomic_dir(out_dir, overwrite) as tmp:
        save_student(tmp, trimmed, new_tok, labels)
        for extra in ("config.yaml",):
            if (Path(student_dir) / extra).is_file():
                (tmp / extra).write_bytes((Path(student_dir) / extra).read_bytes())
    return report
