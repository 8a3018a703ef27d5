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


def test_options_are_validated_by_the_components_config_model():
    from edgekd.registry import STUDENTS, Component

    opts = STUDENTS.options(Component(name="bilstm", options={"hidden_size": 8}), "student")
    assert opts.hidden_size == 8 and opts.embedding_dim == 64  # the model's defaults
    with pytest.raises(EdgeKDError, match=r"has no option 'hiden'; valid: vocab, embedding_dim"):
        STUDENTS.options(Component(name="bilstm", options={"hiden": 8}), "student")
    with pytest.raises(EdgeKDError, match=r"option 'hidden_size': .*; fix student.options"):
        STUDENTS.options(Component(name="bilstm", options={"hidden_size": "8"}), "student")
    # A component without a Config takes no options.
    assert LOSSES.options(Component(name="mse"), "loss").model_dump() == {}
    with pytest.raises(EdgeKDError, match="loss 'mse' has no option 'tau'; valid: none"):
        LOSSES.options(Component(name="mse", options={"tau": 1}), "loss")


def test_a_component_is_written_as_a_name_or_name_and_options():
    from edgekd.registry import Component

    assert Component.model_validate("kd") == Component(name="kd", options={})
    assert Component.model_validate({"name": "kd", "options": {"x": 1}}).options == {"x": 1}
    with pytest.raises(ValueError):
        Component.model_validate({"name": "kd", "option": {}})
