"""One precedence for every command's configuration. Lowest first:

1. the config model's default (on the command line, the `command_line` default a
   field declares instead, where it does: `ExportConfig.int8`, off unless `--int8`);
2. the `--config` file (a recipe, for `edgekd run`);
3. `-s/--set field=value`, in the order given;
4. the options the user typed. An option left out sets nothing, whatever `--help`
   shows as its default: that default is the model's, level 1.

A component named by a higher level (`--student bert`, `-s loss=kd`, `--augment
mask,tang`) replaces a lower level's and keeps the options that level gave one of
the same name; options set by `-s` or a flag then reach the component named last,
whichever order they were given in. The result validates once, so a rule lives in
its model's validators however its fields were set.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_args

from pydantic import BaseModel

from edgekd.config import apply_sets, load_fields, parse_sets, validate
from edgekd.errors import EdgeKDError
from edgekd.registry import Component

M = TypeVar("M", bound=BaseModel)


@dataclass
class Typed:
    """The command line's part: `values`, the dotted fields the typed options set;
    `flags`, how the user spells each field the command has an option for (typed or
    not), for errors."""

    values: dict[str, Any] = field(default_factory=dict)
    flags: dict[str, str] = field(default_factory=dict)


def resolve(
    model: type[M],
    config: str | Path | None = None,
    sets: list[str] | dict[str, Any] | None = None,
    typed: Typed | None = None,
    source: str | None = None,
) -> M:
    """`model` from its defaults, the `config` file, `sets` (`-s` pairs, or already
    parsed) and the `typed` options, in that order; validated once."""
    data = layered(model, load_fields(config), sets, typed)
    return validate(model, data, source or (str(config) if config else "options"))


def layered(
    model: type[BaseModel],
    data: dict[str, Any],
    sets: list[str] | dict[str, Any] | None = None,
    typed: Typed | None = None,
) -> dict[str, Any]:
    """`data` (a file's fields) with `sets`, then `typed`'s values, set over it: the
    precedence, as plain data (not yet validated)."""
    data = copy.deepcopy(data)
    if typed is not None:  # the command line's own defaults, under the file's fields
        data = {**command_line_defaults(model), **data}
    parsed = sets if isinstance(sets, dict) else parse_sets(sets)
    flags = typed.flags if typed is not None else {}
    levels = [("--set", parsed)] + [
        (flags.get(k, "options"), {k: v}) for k, v in (typed.values if typed else {}).items()
    ]
    # Components first, so options set at any level reach the one named last.
    for label, level in levels:
        for key, value in level.items():
            if chooses_component(model, key):
                data = apply_sets(data, {key: named_again(get(data, key), value)}, model, label)
    for label, level in levels:
        rest = {k: v for k, v in level.items() if not chooses_component(model, k)}
        data = apply_sets(data, rest, model, label, flags)
    missing = [n for n, f in model.model_fields.items() if f.is_required() and n not in data]
    for name in missing:  # say the option, not pydantic's "field required"
        spelled = [f for k, f in flags.items() if k == name or k.startswith(f"{name}.")]
        if spelled:
            raise EdgeKDError(f"no {name} given; pass {spelled[0]} (or set {name} in --config)")
    return data


def command_line_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """The fields whose default differs on the command line (`command_line` in the
    field's json_schema_extra), at that default."""
    out = {}
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and "command_line" in extra:
            out[name] = extra["command_line"]
    return out


def component_name(value: Any) -> str | None:
    """The name of a component as plain config data (`bilstm` or `{name: bilstm, ...}`)."""
    return value.get("name") if isinstance(value, dict) else value


def named_again(old: Any, new: Any) -> Any:
    """`new` (a component, or a list of them), keeping `old`'s entry, options and all,
    where a bare name names the same component again."""
    if isinstance(new, str) and component_name(old) == new:
        return old
    if isinstance(new, list) and isinstance(old, list):
        names = [component_name(c) for c in old]
        kept = {n: c for n, c in zip(names, old, strict=True) if names.count(n) == 1}
        return [kept.get(n, n) if isinstance(n, str) else n for n in new]
    return new


def chooses_component(model: type[BaseModel], dotted: str) -> bool:
    """Whether `dotted` is a field of `model` that holds a component or a list of them
    (`student`, `augment.methods`, a recipe's `distill.loss`)."""
    current: Any = model
    info = None
    for part in dotted.split("."):
        if current is None:
            return False
        section = getattr(current, "SECTIONS", {}).get(part)
        info = None if section else current.model_fields.get(part)
        if section is None and info is None:
            return False
        kinds = [] if info is None else get_args(info.annotation) or [info.annotation]
        nested = [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)]
        current = section or (nested[0] if len(nested) == 1 else None)
    if info is None:
        return False
    kinds = get_args(info.annotation) or (info.annotation,)
    inner = [a for k in kinds for a in (get_args(k) or (k,))]  # list[Component] → Component
    return Component in kinds or Component in inner


def get(data: Any, dotted: str) -> Any:
    """The value at `dotted` in plain config data (a list step picks by name); None
    where it is missing."""
    node = data
    for part in dotted.split("."):
        if isinstance(node, list):
            node = next((c for c in node if component_name(c) == part), None)
        elif isinstance(node, dict):
            node = node.get(part)
        else:
            return None
    return node
