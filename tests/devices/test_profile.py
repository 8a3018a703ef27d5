import pytest

from conftest import identity_model
from edgekd.devices.profile import combine_processes, profile_model
from edgekd.errors import EdgeKDError


def fake_run(ratios, p50):
    stats = {"p50_ms": p50, "p90_ms": p50, "p99_ms": p50, "iqr_ms": 0.0, "load_ms": 1.0}
    b = {**stats, "p50_ms": p50 * 2}
    vs = {"b": b, "trial_ratios": ratios, "ratio_b_over_a": sorted(ratios)[1]}
    vs["p90_trial_ratios"] = [r + 1 for r in ratios]  # tails: another series, pooled alike
    return {**stats, "peak_rss_mb": 50.0 + p50, "vs": vs}


def test_combine_processes_pools_ratios_and_keeps_per_process_medians():
    runs = [fake_run([1.9, 2.0, 2.1], 1.0), fake_run([2.2, 2.3, 2.4], 3.0)]
    out = combine_processes(runs)
    assert out["vs"]["processes"] == 2 and out["vs"]["process_ratios"] == [2.0, 2.3]
    assert out["vs"]["ratio_b_over_a"] == pytest.approx((2.1 + 2.2) / 2)  # pooled median
    lo, hi = out["vs"]["ratio_ci95"]
    assert lo < 2.0 and hi > 2.3  # spans both processes, not one process's ±0.1
    assert out["vs"]["p90_ratio_b_over_a"] == pytest.approx((3.1 + 3.2) / 2)
    assert out["vs"]["p90_ratio_ci95"][0] < 3.0 and out["vs"]["p90_ratio_ci95"][1] > 3.3
    assert out["p50_ms"] == 2.0 and out["vs"]["b"]["p50_ms"] == 4.0
    assert out["peak_rss_mb"] == 53.0
    assert "processes" not in runs[0]["vs"]  # the inputs are left as they were


def test_profile_vs_runs_one_agent_per_process(tmp_path):
    a = identity_model(tmp_path / "a.onnx")
    b = identity_model(tmp_path / "b.onnx")
    r = profile_model(a, runs=4, trials=2, warmup=0, seq_len=4, vs=b, processes=2)
    assert r["vs"]["processes"] == 2 and len(r["vs"]["trial_ratios"]) == 4


def test_profile_model_refuses_fewer_runs_than_trials_by_the_configs_rule(tmp_path):
    model = identity_model(tmp_path / "id.onnx")
    with pytest.raises(EdgeKDError, match=r"runs 2 < trials 5: each trial needs a run; raise"):
        profile_model(model, runs=2, trials=5)


def test_profile_model_passes_threads_zero_as_all_cores_when_set(tmp_path):
    # 0 is onnxruntime's "all cores", not "unset": it must not fall back to the
    # device spec's count (local-cpu's 1).
    model = identity_model(tmp_path / "id.onnx")
    assert profile_model(model, runs=2, trials=1, warmup=0, seq_len=4, threads=0)["threads"] == 0
    assert profile_model(model, runs=2, trials=1, warmup=0, seq_len=4)["threads"] == 1


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("student.json", '{"kind": "student"}', "is not a valid student.json"),
        ("student.json", "{bad", "is not valid JSON"),
        ("config.json", '{"vocab_size": "many"}', "vocab_size many is not a positive whole number"),
        ("config.json", '{"vocab_size": -4}', "vocab_size -4 is not a positive whole number"),
    ],
)
def test_tokenizer_info_refuses_a_crafted_file_beside_the_model_in_one_line(
    tmp_path, name, text, says
):
    from edgekd.devices.profile import tokenizer_info

    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / name).write_text(text)
    with pytest.raises(EdgeKDError, match=says) as e:
        tokenizer_info(tmp_path / "model.onnx")
    assert "\n" not in str(e.value)


def test_profile_stage_refuses_a_devices_impossible_result_in_one_line(tmp_path, monkeypatch):
    """An agent's result is checked like a file: a board or a phone that sends a -1 ms
    p90 (crafted, or a broken clock) is one line naming the model and the field, never
    an internal error and never a profile.json a budget would pass."""
    import edgekd.stages.profile as stage
    from edgekd.config import ProfileConfig

    model = identity_model(tmp_path / "id.onnx")

    def lying_agent(model, device, *args, **kwargs):
        return {"model": str(model), "device": device, "threads": 1, "p50_ms": 1.0, "p90_ms": -1.0}

    monkeypatch.setattr(stage.device, "profile_model", lying_agent)
    with pytest.raises(EdgeKDError, match=r"the profile of id.onnx on local-cpu: field 'p90_ms'"):
        stage.profile(ProfileConfig(), [model], tmp_path / "out")
    assert not (tmp_path / "out").exists()
