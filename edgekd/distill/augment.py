"""Rule-based augmentation of the transfer set (Tang et al. 2019, arXiv:1903.12136, §3.2).

An `Augmenter` is pure and seeded: `augmenter(texts, rng) -> texts`, one variant
per input text, all randomness drawn from `rng`. `generate` runs one n_iter
times and deduplicates; the teacher then labels every variant (soft logits only).

Tang et al.'s recipe, per word independently: with p_mask replace it by the mask
token, else with p_pos by a random word of the same part-of-speech tag (drawn by
unigram frequency in the training corpus); then, with p_ng, keep only a random
n-gram of the result, n uniform in 1..5. Masking then POS-replacing the words
left unmasked is exactly that "else", so `tang` is mask → pos → ngram.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import random
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, Field

from edgekd.config import AugmentConfig, StrictModel
from edgekd.data import sides_of
from edgekd.errors import EdgeKDError
from edgekd.registry import Component, NoOptions

Tagger = Callable[[list[str]], list[str]]


def words_of(text: str) -> list[str]:
    """Whitespace words, with CJK ideographs split one per word (scripts without spaces)."""
    if text.isascii():  # no ideograph: a character-by-character name lookup took 7 s of
        return text.split()  # a 30 s augmentation for a row of 8,192 words
    out: list[str] = []
    for token in text.split():
        if any(_is_cjk(ch) for ch in token):
            buf = ""
            for ch in token:
                if _is_cjk(ch):
                    if buf:
                        out.append(buf)
                        buf = ""
                    out.append(ch)
                else:
                    buf += ch
            if buf:
                out.append(buf)
        else:
            out.append(token)
    return out


def _is_cjk(ch: str) -> bool:
    return "CJK" in unicodedata.name(ch, "") or "HIRAGANA" in unicodedata.name(ch, "")


class Augmenter:
    """One variant per text: `__call__(texts, rng) -> texts`."""

    name: ClassVar[str]
    Config: ClassVar[type[BaseModel]] = NoOptions  # its options (`{name, options}`)
    # "text": makes new rows before teacher labelling. The registry also holds the
    # training-time methods: "select" (minimax) and "batch" (mixup).
    stage: ClassVar[str] = "text"
    # Whether `from_config` also takes `teacher=` (a `TeacherVocab`): the variants then
    # depend on the teacher, and the transfer set's cache key holds its fingerprint.
    reads_teacher_vocab: ClassVar[bool] = False
    # Whether `words` returns one word per word given, each in its place (a word may be
    # replaced, never moved, dropped or added).
    keeps_places: ClassVar[bool] = False

    def __call__(self, texts: Sequence[Any], rng: random.Random) -> list[Any]:
        """One variant per text; a sentence pair gets each side augmented in turn."""
        return [
            self.one(t, rng) if isinstance(t, str) else tuple(self.one(x, rng) for x in t)
            for t in texts
        ]

    def one(self, text: str, rng: random.Random) -> str:
        return " ".join(self.words(words_of(text), rng))

    @classmethod
    def from_config(cls, options: Any, corpus: Sequence[str], mask_token: str) -> Augmenter:
        """Build from its validated `Config`; `corpus` is the training text (POS statistics)."""
        raise NotImplementedError

    def words(self, words: list[str], rng: random.Random) -> list[str]:
        raise NotImplementedError


class MaskOptions(StrictModel):
    p: float = Field(0.1, ge=0, le=1, description="Per-word mask probability (Tang: 0.1).")


class PosOptions(StrictModel):
    p: float = Field(0.1, ge=0, le=1, description="Per-word POS-swap probability (Tang: 0.1).")


class NgramOptions(StrictModel):
    p: float = Field(0.25, ge=0, le=1, description="Per-text n-gram probability (Tang: 0.25).")
    max_n: int = Field(5, ge=1, description="n of the kept n-gram is uniform in 1..max_n.")


class TangOptions(StrictModel):
    p_mask: float = Field(0.1, ge=0, le=1, description="mask's p.")
    p_pos: float = Field(0.1, ge=0, le=1, description="pos's p.")
    p_ng: float = Field(0.25, ge=0, le=1, description="ngram's p.")
    max_ngram: int = Field(5, ge=1, description="ngram's max_n.")


class MaskAugmenter(Augmenter):
    """Each word becomes the mask token with probability `p`."""

    name = "mask"
    Config = MaskOptions
    keeps_places = True

    def __init__(self, p: float = 0.1, mask_token: str = "[MASK]") -> None:
        self.p, self.mask_token = p, mask_token

    @classmethod
    def from_config(cls, options: Any, corpus: Sequence[str], mask_token: str) -> Augmenter:
        return cls(options.p, mask_token)

    def words(self, words: list[str], rng: random.Random) -> list[str]:
        return [self.mask_token if rng.random() < self.p else w for w in words]


class PosAugmenter(Augmenter):
    """Each word (not a mask token) becomes, with probability `p`, a corpus word of the
    same POS tag, sampled by its unigram frequency in the corpus given to `fit`."""

    name = "pos"
    Config = PosOptions
    keeps_places = True

    def __init__(self, tagger: Tagger, p: float = 0.1, mask_token: str = "[MASK]") -> None:
        self.tagger, self.p, self.mask_token = tagger, p, mask_token
        self.table: dict[str, tuple[list[str], list[int]]] = {}
        self._tags: dict[tuple[str, ...], list[str]] = {}

    @classmethod
    def from_config(cls, options: Any, corpus: Sequence[str], mask_token: str) -> Augmenter:
        return cls(pattern_tagger(), options.p, mask_token).fit(corpus)

    def fit(self, texts: Sequence[Any]) -> PosAugmenter:
        counts: dict[str, Counter[str]] = defaultdict(Counter)
        for text in sides_of(texts):
            words = words_of(text)
            for w, tag in zip(words, self.tags(words), strict=True):
                counts[tag][w] += 1
        # Sorted words and cumulative counts: sampling is one bisect, and the table
        # does not depend on dict order.
        for tag, c in counts.items():
            ordered = sorted(c)
            cum, total = [], 0
            for w in ordered:
                total += c[w]
                cum.append(total)
            self.table[tag] = (ordered, cum)
        return self

    def tags(self, words: list[str]) -> list[str]:
        key = tuple(words)
        if key not in self._tags:  # memo: the same sentence is tagged once, not n_iter times
            tags = self.tagger(words)
            self._tags[key] = tags if len(tags) == len(words) else ["X"] * len(words)
        return self._tags[key]

    def sample(self, tag: str, rng: random.Random) -> str | None:
        if tag not in self.table:
            return None
        words, cum = self.table[tag]
        return words[bisect.bisect_right(cum, rng.random() * cum[-1])]

    def words(self, words: list[str], rng: random.Random) -> list[str]:
        return self.swap(words, self.tags(words), rng)

    def swap(self, words: list[str], tags: list[str], rng: random.Random) -> list[str]:
        """`words` with swaps drawn for the given tags, one per word."""
        if not self.table:
            raise RuntimeError("PosAugmenter.fit(corpus) must run before use")
        out = []
        for w, tag in zip(words, tags, strict=True):
            new = None
            if w != self.mask_token and rng.random() < self.p:
                new = self.sample(tag, rng)
            out.append(new or w)
        return out


class NgramAugmenter(Augmenter):
    """With probability `p`, keep only a random n-gram, n uniform in 1..max_n."""

    name = "ngram"
    Config = NgramOptions

    def __init__(self, p: float = 0.25, max_n: int = 5) -> None:
        self.p, self.max_n = p, max_n

    @classmethod
    def from_config(cls, options: Any, corpus: Sequence[str], mask_token: str) -> Augmenter:
        return cls(options.p, options.max_n)

    def words(self, words: list[str], rng: random.Random) -> list[str]:
        if not words or rng.random() >= self.p:
            return words
        n = min(rng.randint(1, self.max_n), len(words))
        start = rng.randint(0, len(words) - n)
        return words[start : start + n]


class SwapOptions(StrictModel):
    p: float = Field(0.5, ge=0, le=1, description="Per-text probability of one span swap.")
    max_n: int = Field(5, ge=1, description="Each span's length is uniform in 1..max_n words.")


class SwapAugmenter(Augmenter):
    """With probability `p`, a random span of the text (1..max_n words) is replaced by a
    random span (1..max_n words) of another training text: TreeMix-style recombination
    (Zhang et al. 2022, arXiv:2205.06153) without a parser. Mask, POS and n-gram edits
    keep each variant near its source sentence; a swap brings in another sentence's
    words, so the transfer set covers contexts no training sentence has."""

    name = "swap"
    Config = SwapOptions

    def __init__(self, donors: Sequence[list[str]], p: float = 0.5, max_n: int = 5) -> None:
        self.donors = [d for d in donors if d]
        self.p, self.max_n = p, max_n

    @classmethod
    def from_config(cls, options: Any, corpus: Sequence[str], mask_token: str) -> Augmenter:
        return cls([words_of(t) for t in sides_of(corpus)], options.p, options.max_n)

    def words(self, words: list[str], rng: random.Random) -> list[str]:
        if not words or not self.donors or rng.random() >= self.p:
            return words
        donor = self.donors[rng.randrange(len(self.donors))]
        n = min(rng.randint(1, self.max_n), len(words))
        m = min(rng.randint(1, self.max_n), len(donor))
        at, take = rng.randint(0, len(words) - n), rng.randint(0, len(donor) - m)
        return words[:at] + donor[take : take + m] + words[at + n :]


@dataclass(frozen=True, eq=False)
class TeacherVocab:
    """What an augmenter may read of the teacher: its WordPiece pieces in id order,
    their input embeddings (pieces × width), its text normaliser (lower case and
    accents stripped, for an uncased teacher), and the tokenizer's settings besides
    its vocabulary (`spec`, JSON), which the fingerprint holds too."""

    tokens: list[str]
    vectors: np.ndarray
    normalize: Callable[[str], str]
    prefix: str = "##"
    spec: str = ""

    @classmethod
    def of(cls, teacher: Any, tokenizer: Any) -> TeacherVocab:
        """The teacher's; an `EdgeKDError` naming the fix when it has no WordPiece
        tokenizer, or its ids do not number its input table's rows 0..n−1."""
        backend: Any = getattr(tokenizer, "backend_tokenizer", None)
        spec = json.loads(backend.to_str()) if backend is not None else {}
        if spec.get("model", {}).get("type") != "WordPiece" or teacher is None:
            raise EdgeKDError(
                "this augmentation draws words from a WordPiece teacher's vocabulary, and "
                "this teacher's tokenizer is not WordPiece: choose other --augment methods"
            )
        vocab = backend.get_vocab()
        table = teacher.get_input_embeddings().weight.detach().cpu().float().numpy()
        # A crafted tokenizer.json may skip or repeat ids: then the i-th token is not
        # the i-th row, and every neighbour would be another word's.
        if sorted(vocab.values()) != list(range(len(vocab))) or table.shape[0] < len(vocab):
            raise EdgeKDError(
                f"the teacher's tokenizer numbers its {len(vocab):,} pieces other than its "
                f"{table.shape[0]:,} input-embedding rows 0..n-1: fix its tokenizer.json, or "
                "choose other --augment methods"
            )
        normalizer = backend.normalizer
        spec["model"] = {k: v for k, v in spec["model"].items() if k != "vocab"}
        return cls(
            tokens=sorted(vocab, key=vocab.__getitem__),
            vectors=table[: len(vocab)],
            normalize=normalizer.normalize_str if normalizer is not None else str,
            prefix=spec["model"].get("continuing_subword_prefix") or "##",
            spec=json.dumps(spec, sort_keys=True),
        )

    def fingerprint(self) -> str:
        """What the variants depend on: the pieces, their vectors, and the tokenizer's
        normaliser and prefix (`spec`)."""
        h = hashlib.sha256(self.spec.encode() + b"\x00" + "\x00".join(self.tokens).encode())
        h.update(np.ascontiguousarray(self.vectors, dtype=np.float32).tobytes())
        return h.hexdigest()


class NeighbourOptions(StrictModel):
    p: float = Field(
        0.4, ge=0, le=1, description="Per-word replacement probability (TinyBERT: 0.4)."
    )
    k: int = Field(15, ge=1, le=1000, description="Nearest pieces drawn from (TinyBERT: 15).")
    pieces: int = Field(
        10_000,
        ge=1,
        le=1_000_000,
        description="Replacements come from the teacher's first N whole-word pieces "
        "(its most frequent words).",
    )


class NeighbourAugmenter(Augmenter):
    """Each word that is one whole teacher piece becomes, with probability `p`, one of
    its `k` nearest pieces by the cosine of the teacher's input embeddings, drawn from
    the teacher's first `pieces` whole-word pieces: TinyBERT's data augmentation (Jiao
    et al. 2020, arXiv:1909.10351, §3.1), with the teacher's own table standing in for
    GloVe and for a masked-LM head, which a fine-tuned classifier lacks.

    Tang's POS swap only draws words the training texts already hold; a small task's
    test texts use many more (41% of CLINC150-10's hold a piece its 1,500 training
    texts lack). A neighbour brings a new word into the transfer set in a real
    context, so the student trains a row for it, and the teacher labels the result."""

    name = "neighbour"
    Config = NeighbourOptions
    reads_teacher_vocab = True
    keeps_places = True

    def __init__(
        self, neighbours: dict[str, list[str]], normalize: Callable[[str], str], p: float = 0.4
    ) -> None:
        self.neighbours, self.normalize, self.p = neighbours, normalize, p
        # Each word's normal form, once: the normaliser costs ~3 µs a call, and each
        # training word is read n_iter times (40 on SST-2: ~40 s uncached).
        self.normal: dict[str, str] = {}

    @classmethod
    def from_config(
        cls,
        options: Any,
        corpus: Sequence[str],
        mask_token: str,
        teacher: TeacherVocab | None = None,
    ) -> Augmenter:
        if teacher is None:
            raise ValueError("neighbour reads the teacher's vocabulary; pass teacher=")
        words = {w for text in sides_of(corpus) for w in words_of(text)}
        table = neighbour_table(teacher, words, options.pieces, options.k)
        return cls(table, teacher.normalize, options.p)

    def words(self, words: list[str], rng: random.Random) -> list[str]:
        out = []
        for w in words:
            if w not in self.normal:
                self.normal[w] = self.normalize(w)
            near = self.neighbours.get(self.normal[w])
            out.append(near[rng.randrange(len(near))] if near and rng.random() < self.p else w)
        return out


# Neighbours are ranked on float64 cosines rounded to this many decimals, ties by piece
# id: the order BLAS sums a dot product in (its thread count) moves a cosine by ~1e-16,
# which changes a rounded value only within that of a rounding boundary.
COSINE_DECIMALS = 6
# Cosines held at a time (float64): 8M = 64 MB, so 800 words against 10,000 candidates;
# rounding and the self mask hold about as much again.
NEIGHBOUR_CELLS = 8_000_000


def neighbour_table(
    teacher: TeacherVocab, words: set[str], pieces: int, k: int
) -> dict[str, list[str]]:
    """For each of `words` that is one whole teacher piece (after the teacher's
    normaliser), its `k` nearest pieces among the teacher's first `pieces` whole-word
    pieces (letters only, two or more), by cosine, nearest first; itself left out."""
    index = {t: i for i, t in enumerate(teacher.tokens)}

    def whole(token: str) -> bool:
        return len(token) > 1 and token.isalpha() and not token.startswith(teacher.prefix)

    candidates = [i for i, t in enumerate(teacher.tokens) if whole(t)][:pieces]
    keys = sorted({index[n] for n in map(teacher.normalize, words) if n in index and whole(n)})
    if not candidates or not keys:
        return {}

    def unit(ids: Sequence[int]) -> np.ndarray:  # float64 rows of length 1
        rows = teacher.vectors[np.asarray(ids)].astype(np.float64)
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)

    cand = np.array(candidates)
    cand_unit = unit(candidates)
    out: dict[str, list[str]] = {}
    step = max(1, NEIGHBOUR_CELLS // len(candidates))
    for start in range(0, len(keys), step):
        chunk = keys[start : start + step]
        cos = np.round(unit(chunk) @ cand_unit.T, COSINE_DECIMALS)
        cos[cand[None, :] == np.array(chunk)[:, None]] = -np.inf  # not itself
        for row, key in zip(cos, chunk, strict=True):
            # The k largest (and all tied with the k-th), then by cosine and id.
            near = np.flatnonzero(row > -np.inf)
            if len(near) > k:
                kth = np.partition(row[near], len(near) - k)[len(near) - k]
                near = near[row[near] >= kth]
            order = near[np.lexsort((cand[near], -row[near]))][:k]
            out[teacher.tokens[key]] = [teacher.tokens[cand[j]] for j in order]
    return out


class ComposeAugmenter(Augmenter):
    """Apply augmenters in order to the same word list (a composition inside another is
    flattened into it: the same steps in the same order).

    A POS swap after steps that keep every word's place (mask, neighbour) reads the tags
    of the text as written, tagged once per text: tagging each variant's masked words
    anew cost ~1 ms per 20 words, 100 times per text (a row of 8,192 words: 19 s of a
    30 s augmentation), and the tagger reads `[MASK]` as a word it does not know."""

    name = "compose"

    def __init__(self, parts: Sequence[Augmenter]) -> None:
        self.parts: list[Augmenter] = [
            q for p in parts for q in (p.parts if isinstance(p, ComposeAugmenter) else [p])
        ]

    def words(self, words: list[str], rng: random.Random) -> list[str]:
        source, placed = words, True  # placed: every word is still where it was written
        for part in self.parts:
            if isinstance(part, PosAugmenter) and placed:
                words = part.swap(words, part.tags(source), rng)
            else:
                words = part.words(words, rng)
            placed = placed and part.keeps_places
        return words


class TangAugmenter(ComposeAugmenter):
    """Tang et al.'s full recipe: mask → POS swap → n-gram."""

    name = "tang"
    Config = TangOptions

    @classmethod
    def from_config(cls, options: Any, corpus: Sequence[str], mask_token: str) -> Augmenter:
        return cls(
            [
                MaskAugmenter(options.p_mask, mask_token),
                PosAugmenter(pattern_tagger(), options.p_pos, mask_token).fit(corpus),
                NgramAugmenter(options.p_ng, options.max_ngram),
            ]
        )


def methods_of_stage(methods: Sequence[Component], stage: str) -> list[Component]:
    """The methods that run at `stage` ("text", "select" or "batch"), in order."""
    from edgekd.registry import AUGMENTERS

    return [m for m in methods if AUGMENTERS.get(m.name).stage == stage]


def text_key(cfg: AugmentConfig) -> str:
    """What the augmented rows depend on (training-time methods left out), for caching.
    Not `max_rows`: a cap keeps a prefix of the same seeded order, so a capped run (or
    a budgeted run's resolved config, which states its cap) reuses the chunks labelled
    without one. Not `order`: it orders the same candidates (a reordered prefix's
    chunks have keys of their own, each hashing its rows)."""
    fields = cfg.model_dump(exclude={"methods", "max_rows", "order"})
    fields["methods"] = [m.model_dump() for m in methods_of_stage(cfg.listed, "text")]
    return json.dumps(fields, sort_keys=True)


def teacher_vocab_readers(cfg: AugmentConfig) -> list[str]:
    """The text augmenters of `cfg` that read the teacher's vocabulary (`TeacherVocab`)."""
    from edgekd.registry import AUGMENTERS

    text = methods_of_stage(cfg.listed, "text")
    return [m.name for m in text if AUGMENTERS.get(m.name).reads_teacher_vocab]


def build_augmenter(
    cfg: AugmentConfig,
    corpus: Sequence[str],
    mask_token: str,
    teacher: TeacherVocab | None = None,
) -> Augmenter:
    """The config's text augmenters, by registered name, composed in the order given."""
    from edgekd.registry import AUGMENTERS

    methods = methods_of_stage(cfg.listed, "text")
    if not methods:
        text = [n for n in AUGMENTERS.names() if AUGMENTERS.get(n).stage == "text"]
        raise ValueError(f"no text augmenter among the methods ({', '.join(text)})")
    parts = []
    for m in methods:
        cls = AUGMENTERS.get(m.name)
        options = AUGMENTERS.options(m, f"augment.methods.{m.name}")
        extra = {"teacher": teacher} if cls.reads_teacher_vocab else {}
        parts.append(cls.from_config(options, corpus, mask_token, **extra))
    return parts[0] if len(parts) == 1 else ComposeAugmenter(parts)


def generate(texts: Sequence[Any], augmenter: Augmenter, n_iter: int, seed: int) -> list[Any]:
    """`n_iter` variants of every text, deduplicated, originals and empties dropped."""
    return generate_with_sources(texts, augmenter, n_iter, seed)[0]


def generate_with_sources(
    texts: Sequence[Any],
    augmenter: Augmenter,
    n_iter: int,
    seed: int,
    known: Sequence[Any] = (),
) -> tuple[list[Any], list[int]]:
    """`generate`, plus the index of the text each variant came from (`variants`,
    collected)."""
    out, sources = [], []
    for variant, i in variants(texts, augmenter, n_iter, seed, known):
        out.append(variant)
        sources.append(i)
    return out, sources


def variants(
    texts: Sequence[Any],
    augmenter: Augmenter,
    n_iter: int,
    seed: int,
    known: Sequence[Any] = (),
) -> Iterator[tuple[Any, int]]:
    """Each new variant of `texts` with the index of the text it came from, as made.

    Order is deterministic: iteration by iteration, text by text. A variant that
    two texts produce is kept once, for the first; one in `texts` or `known` (the
    other training texts) is not kept. Seen rows are remembered by an 8-byte digest,
    not their text, so a caller that writes the variants away holds ~70 B per row.
    """
    from edgekd.distill.transfer import digest

    rng = random.Random(seed)
    seen = {digest(t) for t in texts} | {digest(t) for t in known}
    for _ in range(n_iter):
        for i, variant in enumerate(augmenter(texts, rng)):
            if not all(x.strip() for x in sides_of([variant])):
                continue
            d = digest(variant)
            if d not in seen:
                seen.add(d)
                yield variant, i


def pattern_tagger() -> Tagger:
    """English Penn-Treebank tags from TextBlob's bundled Pattern tagger (MIT; a Brill-style
    lexicon plus contextual rules, shipped inside the PyPI package, no download)."""
    try:
        from textblob.en.taggers import PatternTagger
    except ImportError as e:
        raise RuntimeError("POS augmentation needs `pip install textblob==0.20.1`") from e
    tagger = PatternTagger()

    def tag(words: list[str]) -> list[str]:
        return [t for _, t in tagger.tag(" ".join(words), tokenize=False)]

    return tag
