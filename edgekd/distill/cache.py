"""Teacher logits are computed once and cached on disk.

The key hashes everything that changes them: the teacher's files (or hub
revision), the exact texts, the teacher's max length and the augmentation spec,
so a rerun with the same inputs skips the teacher entirely. Files are
safetensors: loading a cache never unpickles anything.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekd.io import sha256_file

CACHE_VERSION = 1


def default_cache_root() -> Path:
    """$EDGEKD_CACHE, else ~/.cache/edgekd."""
    return Path(os.environ.get("EDGEKD_CACHE") or Path.home() / ".cache" / "edgekd")


def teacher_fingerprint(name_or_path: str, model: Any | None = None) -> str:
    """sha256 over the teacher folder's files; for a hub id, its resolved commit."""
    path = Path(name_or_path)
    h = hashlib.sha256()
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            if f.name in ("metrics.json", "README.md"):
                continue  # notes beside the weights do not change the logits
            h.update(f.relative_to(path).as_posix().encode())
            h.update(sha256_file(f).encode())
    else:
        commit = getattr(getattr(model, "config", None), "_commit_hash", None)
        h.update(f"{name_or_path}@{commit}".encode())
    return h.hexdigest()


def cache_key(
    teacher_fp: str,
    texts: Sequence[Any],
    max_length: int,
    augmentation: str = "none",
    runtime: str = "torch",
) -> str:
    h = hashlib.sha256()
    h.update(
        json.dumps(
            {
                "v": CACHE_VERSION,
                "teacher": teacher_fp,
                "max_length": max_length,
                "augmentation": augmentation,
                "runtime": runtime,
                "n": len(texts),
            }
        ).encode()
    )
    hash_texts(h, texts)
    return h.hexdigest()[:32]


def row_bytes(text: Any) -> bytes:
    """A text or a pair as bytes: a pair's sides joined by \x01 (it never occurs in text)."""
    return (text if isinstance(text, str) else "\x01".join(text)).encode("utf-8")


def hash_texts(h: Any, texts: Iterable[Any]) -> None:
    """Feed `texts` to the hash `h` row by row (never as one string)."""
    for t in texts:
        h.update(row_bytes(t))
        h.update(b"\x00")  # rows end in \x00: it never occurs in text


def has_cached(cache_dir: Path, key: str) -> bool:
    """Whether logits under `key` are stored (not whether they read back)."""
    return (cache_dir / f"{key}.safetensors").is_file()


def load_logits(
    cache_dir: Path, key: str, *, rows: int | None = None, width: int | None = None
) -> np.ndarray | None:
    """The logits stored under `key`, or None: not there, or not usable, said in one
    note. Usable: finite float32 logits of 2 dimensions and, where given, `rows` rows of
    `width` labels; anything else (a truncated file, an older edgekd's dtype, logits of
    another shape) is a miss, and the caller labels the rows again and overwrites it."""
    from safetensors.numpy import load_file

    path = cache_dir / f"{key}.safetensors"
    if not path.is_file():
        return None
    try:
        logits = load_file(str(path))["logits"]
        problem = entry_problem(logits, rows, width)
    except Exception:  # truncated by a crash, or damaged: it is only a cache
        problem = "are unreadable"
    if problem is None:
        return logits
    from edgekd.progress import console, shown

    console.print(f"note: cached teacher logits {shown(path.name)} {problem}; recomputing")
    return None


def store_logits(cache_dir: Path, key: str, logits: np.ndarray) -> np.ndarray:
    """Write `logits` under `key` (as float32) and return what was written. Atomic: a
    temporary file of this process's own, renamed over the entry, so a reader never
    sees half a file and two writers of one key leave one whole entry."""
    from safetensors.numpy import save_file

    logits = np.ascontiguousarray(logits, dtype=np.float32)
    path = cache_dir / f"{key}.safetensors"
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    save_file({"logits": logits}, str(tmp))
    os.replace(tmp, path)
    return logits


def entry_problem(logits: np.ndarray, rows: int | None, width: int | None) -> str | None:
    """Why a cached array cannot stand for the logits asked for (None: it can)."""
    expected = f"({'?' if rows is None else rows}, {'?' if width is None else width}) float32"
    if (
        logits.dtype != np.float32
        or logits.ndim != 2
        or (rows is not None and logits.shape[0] != rows)
        or (width is not None and logits.shape[1] != width)
    ):
        return f"are {tuple(logits.shape)} {logits.dtype}, not {expected}"
    if not np.isfinite(logits).all():
        return "hold NaN or infinity"
    return None


def states_path(cache_dir: Path, key: str) -> Path:
    return cache_dir / f"{key}.states.safetensors"


def store_states(cache_dir: Path, key: str, states: Any) -> None:
    """Write the token states (`edgekd.distill.states.TokenStates`) of the rows whose
    logits are stored under `key`, beside them; atomic as `store_logits`."""
    from safetensors.numpy import save_file

    path = states_path(cache_dir, key)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    arrays = {"flat": states.flat, "offsets": states.offsets}
    save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(tmp))
    os.replace(tmp, path)


def load_states(cache_dir: Path, key: str, rows: int, k: int) -> Any:
    """The token states stored under `key` for `rows` rows of `k` components, or None:
    absent, unreadable or not those (said in one note; the caller relabels)."""
    from safetensors.numpy import load_file

    from edgekd.distill.states import TokenStates

    path = states_path(cache_dir, key)
    if not path.is_file():
        return None
    try:
        arrays = load_file(str(path))
        states = TokenStates(arrays["flat"], arrays["offsets"])
        problem = states.problem(rows, k)
    except Exception:  # truncated by a crash, or damaged: it is only a cache
        problem = "are unreadable"
    if problem is None:
        return states
    from edgekd.progress import console, shown

    console.print(f"note: cached token states {shown(path.name)} {problem}; recomputing")
    return None
