"""One small generic registry for every pluggable kind (students, losses, exporters, ...).

Entries are `"module:attribute"` strings resolved on first use, so listing or
validating names never imports torch. Third-party code adds entries with
`register` (a string or the object itself).
"""

from __future__ import annotations

import importlib
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from edgekd.errors import EdgeKDError

T = TypeVar("T")


class NoOptions(BaseModel):
    """The config model of a component that takes no options."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class Component(BaseModel):
    """A registered component as configured: `{name: kd, options: {...}}`, or the bare
    name (`kd`) when it keeps its defaults. `options` stays plain data here (it is what
    the resolved config records and the recipe cache hashes); `Registry.options`
    validates it against the component's own `Config` model."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value


def first_error(e: ValidationError) -> tuple[str, str]:
    """(dotted field, message) of a pydantic error's first entry."""
    err = e.errors()[0]
    return ".".join(str(p) for p in err["loc"]) or "(top level)", err["msg"]


class Registry(Generic[T]):
    """Maps names to lazily imported objects of one kind."""

    def __init__(self, kind: str, entries: dict[str, str] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, str | T] = dict(entries or {})

    def register(self, name: str, target: str | T) -> None:
        """Add `name`; `target` is the object or a `"module:attribute"` path."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = target

    def names(self) -> list[str]:
        return sorted(self._entries)

    def names_in_order(self) -> list[str]:
        """Names in the order they were registered (FORMATS runs in this order)."""
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def get(self, name: str) -> T:
        """Return the object for `name`, importing it on first use."""
        if name not in self._entries:
            valid = ", ".join(self.names())
            raise EdgeKDError(f"unknown {self.kind} {name!r}; valid names: {valid}")
        target = self._entries[name]
        if isinstance(target, str):
            resolved: Any = resolve(target)
            self._entries[name] = resolved
            return resolved  # type: ignore[no-any-return]
        return target

    def config_model(self, name: str) -> type[BaseModel]:
        """The pydantic model of `name`'s options (its `Config`; none: no options)."""
        return getattr(self.get(name), "Config", None) or NoOptions

    def options(self, component: Component, where: str) -> Any:
        """`component.options` validated against its config model: one line naming the
        first unknown or bad field, the valid fields, and the `--set` path that fixes
        it (`where` is the component's place in the config, e.g. `student`)."""
        model = self.config_model(component.name)
        valid = list(model.model_fields)
        unknown = sorted(set(component.options) - set(valid))
        # `where` "": the options sit flat in their file (a device spec).
        path = f"{where}.options." if where else ""
        if unknown and not path:
            raise EdgeKDError(
                f"{self.kind} {component.name!r} has no field {unknown[0]!r}; its own fields: "
                f"{', '.join(valid) or 'none'}; fix that key"
            )
        if unknown:
            raise EdgeKDError(
                f"{self.kind} {component.name!r} has no option {unknown[0]!r}; valid: "
                f"{', '.join(valid) or 'none'} (set {path}<field>)"
            )
        try:
            return model.model_validate(component.options)
        except ValidationError as e:
            field, message = first_error(e)
            raise EdgeKDError(
                f"{self.kind} {component.name!r}: option {field!r}: {message}; fix {path}{field}"
            ) from None


def resolve(target: str) -> Any:
    """The object at `"module:attribute"`, imported now."""
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


# The built-ins. Adding a kind of student, loss, exporter or device is one file plus
# one line here (or a `register` call from user code).
STUDENTS: Registry[Any] = Registry(
    "student",
    {
        "bilstm": "edgekd.students.bilstm:BiLSTMStudent",
        "cnn": "edgekd.students.cnn:CNNStudent",
        "bert": "edgekd.students.bert:BertStudent",
        "mobilebert": "edgekd.students.mobilebert:MobileBertStudent",
    },
)
LOSSES: Registry[Any] = Registry(
    "loss",
    {
        "mse": "edgekd.distill.losses:LogitMSELoss",
        "kd": "edgekd.distill.losses:HintonKDLoss",
        "annealing": "edgekd.distill.losses:AnnealingKDLoss",
        "uniform": "edgekd.distill.losses:UniformTeacherLoss",
    },
)
# Export formats, run in this order by the export stage: onnx first (every other format
# starts from the fp32 graph), the mobile `.ort` last (it converts the model that ships).
# A student's own ONNX exporter is named by the student (`Student.exporter`).
FORMATS: Registry[Any] = Registry(
    "export format",
    {
        "onnx": "edgekd.exporters.base:OnnxFormat",
        "int8": "edgekd.exporters.int8:Int8Format",
        "e2e": "edgekd.exporters.e2e:E2EFormat",
        "pte": "edgekd.exporters.executorch:PteFormat",
        "ort": "edgekd.exporters.mobile:OrtFormat",
    },
)
QUANTIZERS: Registry[Any] = Registry(
    "int8 mode",
    {
        "dynamic": "edgekd.exporters.quantize:DynamicInt8Quantizer",
        "static": "edgekd.exporters.quantize:StaticInt8Quantizer",
    },
)
AUGMENTERS: Registry[Any] = Registry(
    "augmenter",
    {
        "mask": "edgekd.distill.augment:MaskAugmenter",
        "pos": "edgekd.distill.augment:PosAugmenter",
        "ngram": "edgekd.distill.augment:NgramAugmenter",
        "tang": "edgekd.distill.augment:TangAugmenter",
        "swap": "edgekd.distill.augment:SwapAugmenter",
        "neighbour": "edgekd.distill.augment:NeighbourAugmenter",
        "minimax": "edgekd.distill.minimax:MinimaxSelector",
        "mixup": "edgekd.distill.mixup:MixKD",
        "mate": "edgekd.distill.mate:MateKD",
    },
)
LAYER_LOSSES: Registry[Any] = Registry(
    "intermediate loss",
    {
        "pkd": "edgekd.distill.layers:PKDLoss",
        "tinybert": "edgekd.distill.layers:TinyBERTLoss",
        "alp": "edgekd.distill.layers:ALPLoss",
        "distilbert": "edgekd.distill.layers:DistilBERTLoss",
        "minilm": "edgekd.distill.layers:MiniLMLoss",
        "mobilebert": "edgekd.distill.layers:MobileBERTLoss",
    },
)
DEVICES: Registry[Any] = Registry(
    "device runner",
    {
        "local": "edgekd.devices.local:LocalDevice",
        "ssh": "edgekd.devices.ssh:SshDevice",
        "adb": "edgekd.devices.adb:AdbDevice",
    },
)
