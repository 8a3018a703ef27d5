"""Per-epoch checkpoints, so a killed run resumes where it stopped.

After every finished epoch the training loop writes, beside its output folder, a
`.NAME.resume/` folder: `state.safetensors` (model, optimiser moments, best weights,
torch RNG) and `state.json` (the resolved config, a fingerprint of the data, the epoch,
the epoch history, the end the run had projected, optimiser hyper-parameters, Python
and NumPy RNG states; under a time budget, the seconds it had left). Only
tensors and JSON: nothing is unpickled on resume. Rerunning the same command finds it,
restores every piece and continues with the next epoch, so the final weights are the
same bytes as an uninterrupted run's; a run whose config or data differ says which
field changed and starts over. The folder is removed once the output is written.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from edgekd.config import EarlyPass
from edgekd.errors import EdgeKDError
from edgekd.io import atomic_dir, discard_owned, owned_files, read_json, write_json
from edgekd.progress import console, shown

STATE_JSON, STATE_TENSORS = "state.json", "state.safetensors"


def checkpoint_dir(out_dir: str | Path) -> Path:
    out = Path(out_dir)
    return out.parent / f".{out.name}.resume"


def discard_checkpoint(out_dir: str | Path) -> None:
    """Remove `out_dir`'s checkpoint once the output is written: only if edgekd's, and
    only the files its marker lists (a crafted checkpoint folder loses nothing else)."""
    folder = checkpoint_dir(out_dir)
    if not folder.is_symlink() and owned_files(folder) is not None:
        discard_owned(folder)


def fingerprint(config: dict[str, Any], texts: list[Any], labels: list[int]) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: the config and the training rows
    (hashed row by row: a million augmented rows never become one string)."""
    h = hashlib.sha256()
    for text, label in zip(texts, labels, strict=True):
        h.update(json.dumps([text, label], ensure_ascii=False).encode())
        h.update(b"\n")
    return {"config": config, "data_sha256": h.hexdigest()}


# Written by an overlapped run from its timings; they differ whenever another field did.
CLOCK_CHOSEN = frozenset({"early_passes"})


def first_difference(old: Any, new: Any, path: str = "") -> str | None:
    """The dotted path of the first field that differs, with both values. Fields a
    run's clock chose (`CLOCK_CHOSEN`) come last: a field the user changed is the news."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=lambda k: (k in CLOCK_CHOSEN, str(k))):
            found = first_difference(old.get(key), new.get(key), f"{path}.{key}" if path else key)
            if found:
                return found
        return None
    return None if old == new else f"{path or 'value'} ({old!r} → {new!r})"


def planned_fields(folder: Path, cfg: Any) -> dict[str, Any] | None:
    """The fields a time budget chose for the interrupted run in `folder` (`epochs`,
    `augment` with its `max_rows`, `early_passes`), when that run had the config `cfg`
    but for them; else None. A resumed run keeps its plan: re-planning from new timings would
    change the epochs and the rows, and so the checkpoint would no longer match."""
    if owned_files(folder) is None or not (folder / STATE_JSON).is_file():
        return None
    try:
        saved = read_json(folder / STATE_JSON)["config"]
        augment = cfg.augment.model_copy(update={"max_rows": saved["augment"]["max_rows"]})
        fields = {"epochs": int(saved["epochs"]), "augment": augment}
        if saved.get("early_passes") is not None:  # the passes trained before its epochs
            fields["early_passes"] = [EarlyPass.model_validate(p) for p in saved["early_passes"]]
    except (OSError, ValueError, KeyError, TypeError, EdgeKDError):
        return None
    if first_difference(saved, cfg.model_copy(update=fields).model_dump(mode="json")):
        return None
    return fields


@dataclass
class Resume:
    """What the loop restores: the next epoch and the early-stopping state."""

    epoch: int = 0
    best_acc: float = -1.0
    best_epoch: int = 0
    best_state: dict[str, torch.Tensor] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    # Why training ended after `epoch`, when it did ("early stop", "time", "plateau"):
    # a run killed between this checkpoint and its output resumes to the end, not into
    # an epoch the first run had decided not to train.
    final: str | None = None
    # Under a time budget: the seconds it had left (less the loop's reserve) when this
    # checkpoint was written; the resumed run spends them (`budget_left`).
    budget_left_s: float | None = None
    # The epoch the run was to end with, and its steps when in part (the clock's choice
    # after `epoch`): the resumed run ends where the interrupted one would have.
    last: int | None = None
    part_steps: int | None = None


def _optimizer_state(optim: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], Any]:
    state = optim.state_dict()
    tensors, plain = {}, {}
    for idx, slots in state["state"].items():
        for name, value in slots.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.{idx}.{name}"] = value.detach().cpu().contiguous()
            else:
                plain[f"{idx}.{name}"] = value
    return tensors, {"param_groups": state["param_groups"], "plain": plain}


def _load_optimizer(
    optim: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: Any
) -> None:
    slots: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            idx, name = key[len("optim.") :].split(".", 1)
            slots.setdefault(int(idx), {})[name] = value
    for key, value in meta["plain"].items():
        idx, name = key.split(".", 1)
        slots.setdefault(int(idx), {})[name] = value
    # torch checks the groups' sizes but not the moments' shapes, which a crafted file
    # may get wrong: the first step would fail, epochs into the run.
    params = [p for group in optim.param_groups for p in group["params"]]
    for i, slot in slots.items():
        if not 0 <= i < len(params):
            raise ValueError(f"optimiser state for parameter {i} of {len(params)}")
        for name, value in slot.items():
            if isinstance(value, torch.Tensor) and value.ndim and value.shape != params[i].shape:
                raise ValueError(f"optimiser {name} of parameter {i}: shape {tuple(value.shape)}")
    optim.load_state_dict({"state": slots, "param_groups": meta["param_groups"]})


def save(
    folder: Path,
    match: dict[str, Any],
    model: torch.nn.Module,
    optim: torch.optim.Optimizer,
    done: Resume,
    extra_modules: dict[str, torch.nn.Module],
    generators: dict[str, np.random.Generator],
    scheduler: Any = None,
    torch_generators: dict[str, torch.Generator] | None = None,
) -> None:
    """Write the state after epoch `done.epoch` (atomically: a kill mid-write keeps the
    last one)."""
    from safetensors.torch import save_file

    parts = {"model": model.state_dict(), "best": done.best_state or {}}
    parts |= {name: module.state_dict() for name, module in extra_modules.items()}
    tensors: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for prefix, state in parts.items():
        for k, v in state.items():
            t = v.detach().cpu().contiguous()
            # Tied weights (a masked LM's decoder is its word table) share storage, which
            # safetensors refuses: the second name gets its own copy.
            if t.numel() and t.data_ptr() in seen:
                t = t.clone()
            seen.add(t.data_ptr())
            tensors[f"{prefix}.{k}"] = t
    optim_tensors, optim_meta = _optimizer_state(optim)
    tensors |= optim_tensors
    tensors["rng.torch"] = torch.get_rng_state()
    for name, gen in (torch_generators or {}).items():
        tensors[f"rng.{name}"] = gen.get_state()
    py_state = random.getstate()
    # numpy's global RandomState is MT19937 (edgekd never swaps its bit generator), so
    # its legacy state is the 5-tuple `load` unpacks, not the dict other generators give.
    np_state = cast(tuple[Any, ...], np.random.get_state())
    meta = {
        **match,
        "epoch": done.epoch,
        "best_acc": done.best_acc,
        "best_epoch": done.best_epoch,
        "history": done.history,
        "final": done.final,
        "budget_left_s": done.budget_left_s,
        "last": done.last,
        "part_steps": done.part_steps,
        "optimizer": optim_meta,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "rng": {
            "python": [py_state[0], list(py_state[1]), py_state[2]],
            "numpy": _jsonable(np_state),
            **{name: g.bit_generator.state for name, g in generators.items()},
        },
    }
    with atomic_dir(folder) as tmp:
        save_file(tensors, str(tmp / STATE_TENSORS))
        write_json(tmp / STATE_JSON, meta)


def _jsonable(state: tuple[Any, ...]) -> list[Any]:
    return [x.tolist() if isinstance(x, np.ndarray) else x for x in state]


def load(
    folder: Path,
    match: dict[str, Any],
    model: torch.nn.Module,
    optim: torch.optim.Optimizer,
    extra_modules: dict[str, torch.nn.Module],
    generators: dict[str, np.random.Generator],
    scheduler: Any = None,
    torch_generators: dict[str, torch.Generator] | None = None,
    check: Callable[[Resume], None] | None = None,
) -> Resume:
    """Restore the state in `folder` when it matches `match`; else a fresh `Resume`,
    the model and the rest as they were. `check`: the resuming loop's own test of the
    state (raises ValueError), made before anything is set."""
    from safetensors.torch import load_file

    if owned_files(folder) is None or not (folder / STATE_JSON).is_file():
        return Resume()
    try:
        meta = read_json(folder / STATE_JSON)
        tensors = load_file(str(folder / STATE_TENSORS))
    except Exception as e:  # a checkpoint cut short by a crash: start over, say so
        console.print(
            f"not resuming: the checkpoint in {folder} is unreadable ({type(e).__name__})"
        )
        return Resume()
    changed = first_difference({k: meta.get(k) for k in match}, match)
    if changed:
        console.print(
            f"not resuming the interrupted run in {folder}: {changed} changed; starting over"
        )
        return Resume()

    # A file that matches the run but not its shapes or types (crafted, or written by
    # another edgekd) is not resumed: everything it would set is put back as it was
    # (a failed `load_state_dict` may have copied some tensors before it raised).
    pieces = _Pieces(model, optim, extra_modules, generators, scheduler, torch_generators or {})
    before = pieces.snapshot()
    try:
        resume = _restore(meta, tensors, pieces, check)
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as e:
        pieces.put_back(before)
        console.print(
            f"not resuming: the checkpoint in {folder} does not fit this run "
            f"({type(e).__name__}); starting over"
        )
        return Resume()
    if resume.final is None:
        console.print(f"resuming from epoch {resume.epoch + 1} (checkpoint {shown(folder)})")
    else:
        console.print(f"resuming after epoch {resume.epoch}, where training ended ({resume.final})")
    return resume


@dataclass
class _Pieces:
    """What a checkpoint sets: the objects `load` was given."""

    model: torch.nn.Module
    optim: torch.optim.Optimizer
    modules: dict[str, torch.nn.Module]
    generators: dict[str, np.random.Generator]
    scheduler: Any
    torch_generators: dict[str, torch.Generator]

    def snapshot(self) -> dict[str, Any]:
        """Copies of everything `_restore` sets, for `put_back`."""
        scheduler = None if self.scheduler is None else self.scheduler.state_dict()
        return {
            "model": copy.deepcopy(self.model.state_dict()),
            "modules": {n: copy.deepcopy(m.state_dict()) for n, m in self.modules.items()},
            "optim": copy.deepcopy(self.optim.state_dict()),
            "scheduler": copy.deepcopy(scheduler),
            "torch": torch.get_rng_state(),
            "torch_generators": {n: g.get_state() for n, g in self.torch_generators.items()},
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "generators": {n: g.bit_generator.state for n, g in self.generators.items()},
        }

    def put_back(self, saved: dict[str, Any]) -> None:
        self.model.load_state_dict(saved["model"])
        for name, module in self.modules.items():
            module.load_state_dict(saved["modules"][name])
        self.optim.load_state_dict(saved["optim"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(saved["scheduler"])
        torch.set_rng_state(saved["torch"])
        for name, gen in self.torch_generators.items():
            gen.set_state(saved["torch_generators"][name])
        random.setstate(saved["python"])
        np.random.set_state(saved["numpy"])
        for name, g in self.generators.items():
            g.bit_generator.state = saved["generators"][name]


def _restore(
    meta: Any,
    tensors: dict[str, torch.Tensor],
    pieces: _Pieces,
    check: Callable[[Resume], None] | None,
) -> Resume:
    """Set every piece from a checkpoint whose fingerprint matched; raises on a piece
    that does not fit (`load` then puts the pieces back). `check(resume)` raises
    ValueError where the loop that resumes would find the state inconsistent."""

    def part(prefix: str) -> dict[str, torch.Tensor]:
        return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}

    best = part("best.")
    # The best weights are loaded only when training ends: checked now, not hours later.
    if best:
        _check_like(best, pieces.model.state_dict(), "best weights")
    history = meta["history"]
    if not isinstance(history, list) or not all(map(_plain_record, history)):
        raise TypeError("history is not a list of records of numbers")
    epoch, best_epoch = meta["epoch"], meta["best_epoch"]
    for count in (epoch, best_epoch):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"epoch {count!r}")
    best_acc = _seconds(meta["best_acc"])  # any finite number
    if best_acc is None:
        raise ValueError(f"best accuracy {meta['best_acc']!r}")
    final = meta.get("final")
    resume = Resume(
        epoch=epoch,
        best_acc=best_acc,
        best_epoch=best_epoch,
        best_state=best or None,
        history=history,
        final=str(final)[:20] if final is not None else None,
        budget_left_s=_seconds(meta.get("budget_left_s")),
        last=_count(meta.get("last")),
        part_steps=_count(meta.get("part_steps")),
    )
    if check is not None:
        check(resume)
    pieces.model.load_state_dict(part("model."))
    for name, module in pieces.modules.items():
        module.load_state_dict(part(f"{name}."))
    _load_optimizer(pieces.optim, tensors, meta["optimizer"])
    torch.set_rng_state(tensors["rng.torch"])
    for name, gen in pieces.torch_generators.items():
        gen.set_state(tensors[f"rng.{name}"])
    if pieces.scheduler is not None:
        pieces.scheduler.load_state_dict(meta["scheduler"])
    version, internal, gauss = meta["rng"]["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = meta["rng"]["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    for name, g in pieces.generators.items():
        g.bit_generator.state = meta["rng"][name]
    return resume


# The history's step-count pairs: a student's cool-down, a teacher's decay; the loops
# unpack them in two.
PAIR_FIELDS = frozenset({"cooldown", "decay"})


def _plain_record(record: Any) -> bool:
    """Whether `record` is one history entry as `save` writes them: names to None, a
    finite number or a short string, and each of `PAIR_FIELDS` to a pair of step
    counts (or Nones)."""

    def pair(v: Any) -> bool:
        return (
            isinstance(v, list)
            and len(v) == 2
            and all(x is None or (isinstance(x, int) and not isinstance(x, bool)) for x in v)
        )

    def scalar(v: Any) -> bool:
        if v is None or isinstance(v, bool):
            return True
        if isinstance(v, (int, float)):
            return _seconds(v) is not None
        return isinstance(v, str) and len(v) <= 200

    if not isinstance(record, dict):
        return False
    return all(
        isinstance(k, str) and (pair(v) if k in PAIR_FIELDS else scalar(v))
        for k, v in record.items()
    )


def _check_like(
    state: dict[str, torch.Tensor], reference: dict[str, torch.Tensor], what: str
) -> None:
    """Raise unless `state` has `reference`'s names and shapes."""
    if set(state) != set(reference):
        raise ValueError(f"{what}: other tensor names")
    for k, v in state.items():
        if v.shape != reference[k].shape:
            raise ValueError(f"{what}: {k} has shape {tuple(v.shape)}")


def _seconds(value: Any) -> float | None:
    """A recorded number of seconds, or None when absent or not a finite number (an
    older checkpoint has none; a crafted one may hold anything)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        seconds = float(value)  # an integer past a float's range overflows
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) else None


def _count(value: Any) -> int | None:
    """A recorded positive count (epochs, steps), or None."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None


def budget_left(folder: Path) -> float | None:
    """The seconds of its time budget the interrupted run in `folder` had left when it
    wrote its last checkpoint (less the loop's reserve), or None (no checkpoint, no
    budget, or a value that is not a number). A resumed run spends these, not a fresh
    budget: without them it had no clock, and trained no further than the plan's
    forecast of epochs (a cool-down planned past them never reached its end)."""
    if owned_files(folder) is None or not (folder / STATE_JSON).is_file():
        return None
    try:
        return _seconds(read_json(folder / STATE_JSON).get("budget_left_s"))
    except (OSError, ValueError, AttributeError, EdgeKDError):
        return None
