import pytest

from edgekd.errors import EdgeKDError
from edgekd.registry import LOSSES, Registry


def test_get_lists_valid_names_when_unknown():
    with pytest.raises(
        EdgeKDError, match=r"unknown loss 'nope'; valid names: annealing, kd, mse, uniform"
    ):
        LOSSES.get("nope")


def test_get_resolves_lazy_entry_once():
    reg: Registry[object] = Registry("thing", {"path": "pathlib:Path"})
    import pathlib

    assert reg.get("path") is pathlib.Path
    assert reg._entries["path"] is pathlib.Path  # cached after first resolution


def test_register_rejects_duplicate_name():
    reg: Registry[object] = Registry("thing", {"a": "os:getcwd"})
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a", object())
    reg.register("b", dict)
    assert reg.names() == ["a", "b"] and reg.get("b") is dict
