"""Configuration as data: the one override syntax (`--set a.b=value`) and the
components' `{name, options}` form."""

import pytest

from edgekd.config import DistillConfig, ExportConfig, apply_sets, parse_sets, parse_yaml, validate
from edgekd.errors import EdgeKDError
from edgekd.recipe import Recipe


def test_parse_sets_reads_values_as_yaml():
    sets = parse_sets(["epochs=4", "lr=1e-3", "augment.methods=[tang, minimax]", "x.y=true"])
    assert sets == {"epochs": 4, "lr": 0.001, "augment.methods": ["tang", "minimax"], "x.y": True}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1e-3", 0.001),
        ("-2.5", -2.5),
        (".5", 0.5),
        ("-.5e1", -5.0),
        ("1_000.0", 1000.0),
        (".inf", float("inf")),
    ],
)
def test_parse_yaml_reads_numbers_as_yaml_1_2(text, value):
    assert parse_yaml(text) == value


@pytest.mark.parametrize("text", ["._", ".", "_.", "-._", "1_"])
def test_parse_yaml_keeps_digitless_dots_as_strings(text):
    # `._` once matched the float pattern and crashed float('.') (found by hypothesis).
    assert isinstance(parse_yaml(text), (str, int))


@pytest.mark.parametrize("pair", ["oops", "=3", "a..b=1", "a.=1"])
def test_parse_sets_refuses_what_is_not_field_equals_value(pair):
    with pytest.raises(EdgeKDError, match="is not field=value"):
        parse_sets([pair])


def test_apply_sets_reaches_into_a_bare_component_and_a_missing_one():
    data = apply_sets({"student": "bert"}, {"student.options.layers": 2}, DistillConfig)
    assert data == {"student": {"name": "bert", "options": {"layers": 2}}}
    # No `loss` in the data: it starts from the default component, mse.
    data = apply_sets({}, {"loss.options.tau_max": 3}, DistillConfig)
    assert data == {"loss": {"name": "mse", "options": {"tau_max": 3}}}


def test_apply_sets_picks_a_listed_component_by_name():
    data = {"augment": {"methods": ["tang", {"name": "minimax", "options": {"k": 1}}]}}
    data = apply_sets(data, {"augment.methods.minimax.options.k": 3}, DistillConfig)
    data = apply_sets(data, {"augment.methods.tang.options.p_ng": 0.5}, DistillConfig)
    assert data["augment"]["methods"] == [
        {"name": "tang", "options": {"p_ng": 0.5}},
        {"name": "minimax", "options": {"k": 3}},
    ]
    with pytest.raises(
        EdgeKDError, match=r"augment\.methods has no 'mixup' \(it lists tang, minimax\)"
    ):
        apply_sets(data, {"augment.methods.mixup.options.alpha": 1}, DistillConfig)


def test_apply_sets_refuses_a_value_as_a_section():
    with pytest.raises(EdgeKDError, match="epochs is not a section"):
        apply_sets({"epochs": 3}, {"epochs.x": 1}, DistillConfig)


def test_recipe_distill_section_is_dotted_like_a_distill_config():
    data = apply_sets({}, {"distill.student.options.hidden_size": 8}, Recipe)
    assert data == {"distill": {"student": {"name": "bilstm", "options": {"hidden_size": 8}}}}


def test_distill_config_validates_every_components_options_when_read():
    base = {"teacher": "t"}
    for field, bad, message in [
        ("student", {"name": "bilstm", "options": {"pooling": "mean"}}, "option 'pooling'"),
        ("loss", {"name": "annealing", "options": {"tau_max": 0}}, "option 'tau_max'"),
        ("intermediate", {"name": "alp", "options": {"layer": 1}}, "no option 'layer'"),
        ("augment", {"methods": [{"name": "ngram", "options": {"max_n": 0}}]}, "max_n"),
    ]:
        with pytest.raises(EdgeKDError, match=message):
            validate(DistillConfig, {**base, field: bad}, "test")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"student_options": {"hidden_size": 8}}, "student: {name: bilstm, options: {...}}"),
        ({"loss_options": {"tau_max": 3}}, "loss: {name: annealing, options: {...}}"),
        ({"augment": {"p_mask": 0.2}}, "methods: [{name: mask, options: {p: 0.1}}]"),
        ({"augment": {"minimax_k": 2}}, "{name: minimax, options: {k: 2}}"),
    ],
)
def test_options_moved_in_0_3_are_refused_with_their_new_place(old, new):
    with pytest.raises(EdgeKDError, match=r"since edgekd 0\.3") as e:
        validate(DistillConfig, {"teacher": "t", **old}, "old.yaml")
    assert new in str(e.value)


def test_export_formats_are_registered_components_and_builtins_keep_their_switch():
    with pytest.raises(EdgeKDError, match="int8 is not listed in formats: set int8: true"):
        validate(ExportConfig, {"formats": ["int8"]}, "export")
    with pytest.raises(EdgeKDError, match="unknown export format 'coreml'; valid names"):
        validate(ExportConfig, {"formats": ["coreml"]}, "export")
