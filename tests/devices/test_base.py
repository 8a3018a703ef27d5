import pytest

from edgekd.budget import Budget
from edgekd.devices.base import load_spec, packaged_devices
from edgekd.errors import EdgeKDError


def test_packaged_specs_all_load_with_valid_default_budgets():
    names = packaged_devices()
    assert {"local-cpu", "x86-server", "raspberry-pi-4", "android-arm64"} <= set(names)
    for name in names:
        spec = load_spec(name)
        assert spec.name == name
        Budget.model_validate(spec.budget)
    assert load_spec("raspberry-pi-4").int8_preset() == "arm64"
    assert load_spec("android-arm64").runner == "adb"


def test_load_spec_applies_overrides_like_host():
    assert load_spec("raspberry-pi-4", host="pi@10.0.0.7").runner_options().host == "pi@10.0.0.7"
    # None means "not given"
    assert load_spec("raspberry-pi-4", host=None).runner_options().host is None


def test_a_runner_validates_its_own_spec_fields():
    # ssh's fields belong to the ssh runner: typed by its config model, refused elsewhere.
    assert load_spec("raspberry-pi-4", port=2222).runner_options().port == 2222
    with pytest.raises(EdgeKDError, match="option 'port': Input should be less than or equal"):
        load_spec("raspberry-pi-4", port=70000)
    with pytest.raises(EdgeKDError, match="runner 'local' has no field 'host'; its own fields"):
        load_spec("local-cpu", host="pi@10.0.0.7")
    with pytest.raises(EdgeKDError, match="unknown device runner 'teleport'; valid names: adb"):
        load_spec("local-cpu", runner="teleport")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("name: x\nthreads: 0\n", "field 'threads': Input should be greater than or equal to 1"),
        ("name: x\nthreads: 100000\n", "field 'threads': Input should be less than or equal"),
        ("name: x\ncpu_affinity: [0, -1]\n", "field 'cpu_affinity.1': Input should be greater"),
        ("name: x\nbudget: {max_p90_ms: -1}\n", "budget: field 'max_p90_ms'"),
        ("name: x\nbudget: {max_latency: 3}\n", "'max_latency': no such field; valid: model"),
        ("name: x\ncolour: red\n", "has no field 'colour'; its own fields: none"),
        ("- a\n- b\n", "must be a YAML mapping"),
    ],
)
def test_bad_spec_gets_one_line_error(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(EdgeKDError, match=match) as e:
        load_spec(str(path))
    assert "\n" not in str(e.value) and e.value.exit_code == 2


def test_device_spec_threads_for_keeps_zero_and_fills_unset_from_the_spec():
    from edgekd.devices.base import DeviceSpec

    spec = DeviceSpec(name="board", threads=4)
    assert (spec.threads_for(None), spec.threads_for(0), spec.threads_for(2)) == (4, 0, 2)
