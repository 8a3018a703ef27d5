"""Configuration as data: the one override syntax (`--set a.b=value`) and the
components' `{name, options}` form."""

import contextlib
import os
import signal

import pytest
from typer.testing import CliRunner

from conftest import assert_refused
from edgekd.cli import app
from edgekd.config import (
    MAX_DEPTH,
    AugmentConfig,
    DistillConfig,
    ExportConfig,
    apply_sets,
    load_yaml,
    parse_sets,
    parse_yaml,
    validate,
)
from edgekd.errors import EdgeKDError
from edgekd.io import load_json
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


@pytest.mark.parametrize(
    ("text", "value"),
    [("2e6", 2_000_000), ("1E3", 1000), ("-3e2", -300), ("2.0e6", 2e6), ("1e30", 1e30)],
)
def test_parse_yaml_reads_whole_e_notation_without_a_point_as_an_int(text, value):
    got = parse_yaml(text)
    # 1e30 stays a float: past 2**53 a float is no exact whole number.
    assert got == value and type(got) is type(value)


def test_a_float_field_given_e_notation_stays_a_float_and_float_tags_hold():
    sets = parse_sets(["lr=1e3"])
    cfg = DistillConfig.model_validate(apply_sets({"teacher": "t", "data": {"spec": "d"}}, sets))
    assert cfg.lr == 1000.0 and type(cfg.lr) is float
    assert type(parse_yaml("!!float 3")) is float and type(parse_yaml("!!float 1e3")) is float


def test_an_int_field_takes_a_count_in_e_notation():
    sets = parse_sets(["data.max_train=1e4"])
    cfg = DistillConfig.model_validate(apply_sets({"teacher": "t", "data": {"spec": "d"}}, sets))
    assert cfg.data.max_train == 10_000


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
    ("raw", "where", "valid"),
    [
        (
            {"teacher": "t", "student_options": {}},
            "'student_options'",
            "epochs, last_epoch_steps, time_budget",
        ),
        ({"teacher": "t", "augment": {"p_mask": 0.2}}, "'augment.p_mask'", "methods, n_iter"),
        ({"teacher": "t", "data": {"spek": "x"}}, "'data.spek'", "spec, "),
    ],
)
def test_validate_lists_the_valid_fields_when_a_field_is_unknown(raw, where, valid):
    with pytest.raises(EdgeKDError, match="no such field; valid: ") as e:
        validate(DistillConfig, raw, "x.yaml")
    assert where in str(e.value) and valid in str(e.value) and "\n" not in str(e.value)


def test_early_passes_over_more_augmented_rows_than_the_cap_are_refused():
    passes = [{"augmented_rows": 8_192, "steps": 40}, {"augmented_rows": 16_384, "steps": 9}]
    with pytest.raises(EdgeKDError, match="cover up to 16,384 augmented rows, above augment"):
        validate(
            DistillConfig,
            {"teacher": "t", "augment": {"max_rows": 10_000}, "early_passes": passes},
            "x",
        )
    fits = validate(
        DistillConfig,
        {"teacher": "t", "augment": {"max_rows": 16_384}, "early_passes": passes},
        "x",
    )
    assert [p.steps for p in fits.early_passes or []] == [40, 9]


def test_export_formats_are_registered_components_and_builtins_keep_their_switch():
    with pytest.raises(EdgeKDError, match="int8 is not listed in formats: set int8: true"):
        validate(ExportConfig, {"formats": ["int8"]}, "export")
    with pytest.raises(EdgeKDError, match="unknown export format 'coreml'; valid names"):
        validate(ExportConfig, {"formats": ["coreml"]}, "export")


# ------------------------------------------------------------------ crafted config files

runner = CliRunner()


class Hung(BaseException):
    """Raised by the alarm: a BaseException, so no `except Exception` swallows it."""


@contextlib.contextmanager
def finishes_within(seconds: int):
    """Fail the test, instead of hanging the run, if the block blocks (e.g. on a FIFO)."""

    def alarm(signum, frame):
        raise Hung(f"still running after {seconds} s: it blocked")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def refused(r, *fragments: str) -> str:
    return assert_refused(r, *fragments)


def test_config_refused_at_once_when_a_fifo(tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    with finishes_within(10):
        r = runner.invoke(app, ["teacher", "--out", str(out), "--config", str(fifo)])
    refused(r, "is a FIFO (named pipe), not a regular file", "pass the YAML file itself")
    assert not out.exists()
    with finishes_within(10), pytest.raises(EdgeKDError, match="FIFO"):
        load_json(fifo, "re-create it")


def test_config_refused_naming_the_fix_when_a_folder(tmp_path):
    out = tmp_path / "out"
    r = runner.invoke(app, ["teacher", "--out", str(out), "--config", str(tmp_path)])
    refused(r, f"config file {tmp_path} is a folder", "pass the YAML file itself")
    assert not out.exists()


def test_config_refused_when_a_device():
    with finishes_within(10), pytest.raises(EdgeKDError, match="character device"):
        load_yaml("/dev/zero")


def test_config_refused_when_larger_than_1_mib(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 200_000)  # 2 MB of comments
    with pytest.raises(EdgeKDError, match=r"larger than 1,048,576 bytes"):
        load_yaml(big)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("dup.yaml", "epochs: 2\nlr: 1e-3\nepochs: 50\n"),
        ("dup.json", '{"epochs": 2, "lr": 0.001, "epochs": 50}'),
        ("nested-dup.yaml", "data:\n  spec: a\n  seed: 1\n  spec: b\n"),
    ],
)
def test_config_refused_naming_the_key_when_a_key_appears_twice(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / "out"
    r = runner.invoke(app, ["teacher", "--out", str(out), "--config", str(path)])
    line = refused(r, str(path), "appears twice", "fix that file")
    assert "'epochs'" in line or "'spec'" in line
    assert not out.exists()


def test_yaml_merge_key_overridden_when_the_mapping_sets_it():
    assert parse_yaml("base: &b {x: 1, y: 2}\nm: {<<: *b, x: 3}")["m"] == {"x": 3, "y": 2}


@pytest.mark.parametrize("style", ["yaml-flow", "yaml-block", "json"])
def test_config_refused_when_nested_10000_deep(tmp_path, style):
    deep = 10_000
    text = {
        "yaml-flow": "a: " + "[" * deep + "]" * deep,
        "yaml-block": "".join(f"{'  ' * i}k{i}:\n" for i in range(300)) + "  " * 300 + "v\n",
        "json": '{"a": ' + "[" * deep + "]" * deep + "}",
    }[style]
    path = tmp_path / f"deep.{style.split('-')[0]}"
    path.write_text(text)
    out = tmp_path / "out"
    r = runner.invoke(app, ["teacher", "--out", str(out), "--config", str(path)])
    refused(r, str(path), f"nested deeper than {MAX_DEPTH} levels", "fix that file")
    assert not out.exists()


def test_config_read_when_nested_exactly_64_deep():
    assert parse_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None


def test_yaml_refused_before_expanding_when_an_alias_bomb(tmp_path):
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):  # 10^9 values
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 10)}]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    with finishes_within(10), pytest.raises(EdgeKDError, match=r"more than 100,000 values"):
        load_yaml(path)


def test_yaml_refused_when_an_alias_holds_itself():
    with pytest.raises(EdgeKDError, match="holds it"):
        parse_sets(["x=&a [*a]"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"kind": "export", "kind": "other"}', "'kind' twice"),
        ("[" * 10_000 + "]" * 10_000, f"nested deeper than {MAX_DEPTH} levels"),
        ('{"a": "[[[[[[' + "[" * 100 + '"}', None),  # brackets inside a string: plain text
    ],
)
def test_load_json_refused_when_a_key_twice_or_too_deep(tmp_path, text, message):
    path = tmp_path / "export.json"
    path.write_text(text)
    if message is None:
        assert load_json(path, "re-create it")["a"].startswith("[[[")
        return
    with pytest.raises(EdgeKDError, match=message) as e:
        load_json(path, "re-create it with `edgekd export`")
    assert str(path) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (67_349, 40),  # SST-2: twice Tang et al.'s 20
        (7_500, 40),  # 300,000 / 7,500 = 40 exactly
        (7_499, 41),
        (3_000, 100),  # 300,000 / 3,000
        (1_350, 200),  # CLINC150 at 10 rows per class (less 150 held out): ⌈222.2⌉ → the cap
        (100, 200),
        (0, 200),
    ],
)
def test_auto_variants_per_text_fill_the_candidate_rows_within_40_to_200(rows, expected):
    assert AugmentConfig().variants_per_text(rows) == expected


@pytest.mark.parametrize(
    ("rows", "minutes", "expected"),
    [
        (67_349, None, 40),  # no budget: sized as the default's
        (67_349, 5.0, 40),  # the pool, 400,000 // 67,349 = 5, is under the default's 40
        (67_349, 13.0, 40),  # 1,040,000 // 67,349 = 15
        (67_349, 30.0, 93),  # ⌈40 × 30 / 13⌉ = ⌈92.3⌉, over 2,400,000 // 67,349 = 35
        (67_349, 60.0, 185),  # ⌈184.6⌉, over 71
        (1_350, 26.0, 200),  # ⌈2 × 222.2⌉ = 445: the cap holds
    ],
)
def test_auto_variants_per_text_scale_with_the_budget_past_the_default(rows, minutes, expected):
    assert AugmentConfig().variants_per_text(rows, minutes) == expected


@pytest.mark.parametrize(
    ("rows", "minutes", "varied", "expected"),
    [
        (61_591, 13.0, 6_500, 160),  # SST-2-like: 1,040,000 // 6,500 sentences varied
        (61_591, 30.0, 6_500, 200),  # 369: the cap holds
        (61_591, 5.0, 6_500, 61),  # 400,000 // 6,500
        (61_591, None, 6_500, 40),  # no budget labels every row: no pool to draw
        (8_041, 13.0, 8_041, 129),  # CoLA-like, every text varied: 129.3
        (14_442, 13.0, 14_442, 72),  # CLINC150-like: 72.01
        (7_500, 26.0, 7_500, 200),  # 277, over the scale's 2 × 300,000 / 7,500 = 80
        (6_000, 26.0, 6_000, 200),  # 346, over 600,000 / 6,000 = 100
        (100_000, 13.0, 100_000, 40),  # 10: the default's 40 holds
    ],
)
def test_auto_variants_per_text_fill_a_pool_of_80000_rows_a_budget_minute(
    rows, minutes, varied, expected
):
    assert AugmentConfig().variants_per_text(rows, minutes, varied) == expected


def test_set_variants_per_text_ignore_the_budget():
    assert AugmentConfig(n_iter=7).variants_per_text(67_349, 60.0) == 7


@pytest.mark.parametrize(
    ("texts", "wordpiece", "expected"),
    [
        (1_350, True, ["neighbour", "tang"]),  # CLINC150 at 10 rows per class
        (7_499, True, ["neighbour", "tang"]),  # 300,000 / 40 = 7,500: the first not small
        (7_500, True, ["tang"]),
        (61_000, True, ["tang"]),  # SST-2
        (1_350, False, ["tang"]),  # neighbour reads a WordPiece teacher's vocabulary
        (0, True, ["neighbour", "tang"]),
    ],
)
def test_auto_methods_add_neighbour_only_on_a_small_task_with_a_wordpiece_teacher(
    texts, wordpiece, expected
):
    assert [m.name for m in AugmentConfig().methods_for(texts, wordpiece)] == expected


def test_listed_methods_are_kept_on_every_task_and_auto_lists_tang_before_the_data():
    listed = AugmentConfig(methods=[{"name": "tang", "options": {"p_mask": 0.2}}])
    assert listed.methods_for(100, True) == listed.methods  # options and all
    assert AugmentConfig(methods=[]).methods_for(100, True) == []
    # Before the data is read, checks see the part auto holds on every task.
    assert [m.name for m in AugmentConfig().listed] == ["tang"]
    assert AugmentConfig.model_validate({"methods": "auto"}).methods == "auto"


def test_auto_methods_line_names_the_choice_and_why():
    auto = AugmentConfig()
    assert auto.describe_auto(3_366, True) == (
        "augment: neighbour, tang (auto: a small task, 3,366 training texts < 7,500)"
    )
    assert auto.describe_auto(61_000, True) == (
        "augment: tang (auto: 61,000 training texts, not a small task)"
    )
    assert auto.describe_auto(1_350, False).startswith(
        "augment: tang (auto: a small task, 1,350 training texts; neighbour left out"
    )


def test_resolved_augment_states_methods_and_variants_as_values():
    resolved = AugmentConfig().resolved(3_000, None, wordpiece=True)
    assert resolved.n_iter == 100 and [m.name for m in resolved.methods] == ["neighbour", "tang"]
    # What a run records reruns as itself: nothing auto is left to resolve again.
    assert resolved.resolved(61_000, 60.0, wordpiece=False) == resolved


def test_set_variants_per_text_are_kept_and_below_one_refused():
    assert AugmentConfig(n_iter=7).variants_per_text(10) == 7
    assert AugmentConfig.model_validate({"n_iter": "auto"}).n_iter == "auto"
    with pytest.raises(ValueError, match="valid integer"):
        AugmentConfig.model_validate({"n_iter": "forty"})
    with pytest.raises(ValueError, match="at least 1, or auto"):
        AugmentConfig(n_iter=0)
