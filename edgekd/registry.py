"""One small generic registry for every pluggable kind (students, losses, exporters, ...).

Entries are `"module:attribute"` strings resolved on first use, so listing or
validating names never imports torch. Third-party code adds entries with
`register` (a string or the object itself).
"""

from __future__ import annotations

import importlib
from typing import Any, Generic, TypeVar

from edgekd.errors import EdgeKDError

T = TypeVar("T")


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
        "bert": "edgekd.students.bert:BertStudent",
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
        "minimax": "edgekd.distill.minimax:MinimaxSelector",
        "mixup": "edgekd.distill.mixup:MixKD",
    },
)
LAYER_LOSSES: Registry[Any] = Registry(
    "intermediate loss",
    {
        "pkd": "edgekd.distill.layers:PKDLoss",
        "tinybert": "edgekd.distill.layers:TinyBERTLoss",
        "alp": "edgekd.distill.layers:ALPLoss",
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
