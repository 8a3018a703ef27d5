import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import identity_model
from edgekd.devices import agent
from edgekd.devices.base import AGENT, load_spec
from edgekd.devices.profile import profile_model
from edgekd.errors import EdgeKDError

KEYS = {
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "mean_ms",
    "min_ms",
    "stdev_ms",
    "throughput_per_s",
    "load_ms",
    "peak_rss_mb",
    "runs",
    "trials",
    "iqr_ms",
    "trial_spread",
    "noisy",
    "threads",
    "cpu_affinity",
    "provider",
    "onnxruntime",
    "cpu",
    "bytes",
}


def test_percentile_interpolates_linearly():
    s = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert agent.percentile(s, 50) == 3.0
    assert agent.percentile(s, 90) == pytest.approx(4.6)  # index 3.6 → 4 + 0.6·(5-4)
    assert agent.percentile([7.0], 99) == 7.0


def test_agent_script_prints_full_json_schema(tmp_path):
    model = identity_model(tmp_path / "id.onnx")
    out = subprocess.run(
        [
            sys.executable,
            str(AGENT),
            "--model",
            str(model),
            "--runs",
            "20",
            "--warmup",
            "2",
            "--seq-len",
            "8",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    r = json.loads(out.stdout)
    assert set(r) >= KEYS
    assert r["runs"] == 20 and r["min_ms"] <= r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"]


@pytest.mark.slow
def test_local_agent_reports_its_own_peak_rss_not_the_parents(tmp_path):
    model = identity_model(tmp_path / "id.onnx")
    ballast = np.ones(400 * 1024 * 1024 // 8)  # this process: +400 MB resident
    r = profile_model(model, runs=5, warmup=1, seq_len=4)
    del ballast
    assert 0 < r["peak_rss_mb"] < 300  # onnxruntime + numpy alone is ~50-100 MB


@pytest.mark.slow
def test_profile_model_runs_local_cpu_with_end_to_end(tmp_path, tiny_teacher):
    from edgekd.exporters.teacher import export_teacher

    onnx_path = export_teacher(str(tiny_teacher), tmp_path / "t")
    r = profile_model(onnx_path, runs=10, warmup=2, seq_len=16, texts=["good movie", "bad"])
    assert r["device"] == "local-cpu" and r["end_to_end"]["p50_ms"] > 0
    assert np.isfinite(r["p90_ms"])


def test_profile_model_synthesizes_texts_when_none_given(tmp_path, tiny_teacher):
    from edgekd.devices.profile import synthetic_texts
    from edgekd.exporters.teacher import export_teacher

    onnx_path = export_teacher(str(tiny_teacher), tmp_path / "t")
    texts = synthetic_texts(onnx_path.parent / "tokenizer.json", words=5, n=3)
    assert len(texts) == 3 and all(len(t.split()) == 5 for t in texts)
    assert not any(w.startswith(("##", "[")) for t in texts for w in t.split())
    r = profile_model(onnx_path, runs=5, warmup=1, seq_len=8)
    assert r["end_to_end"]["p50_ms"] > 0


def test_load_spec_lists_valid_devices_when_unknown(tmp_path):
    with pytest.raises(
        EdgeKDError, match="valid names: android-arm64, local-cpu, raspberry-pi-4, x86-server"
    ):
        load_spec("toaster")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nrunner: pigeon\n")
    with pytest.raises(
        EdgeKDError, match="unknown device runner 'pigeon'; valid names: adb, local, ssh"
    ):
        load_spec(str(bad))


def test_device_spec_picks_its_int8_preset_from_its_cpu_flags(tmp_path):
    from edgekd.devices.base import load_spec

    spec = tmp_path / "pi.yaml"
    spec.write_text("name: pi\nrunner: local\ncpu_flags: [fp, asimd, crc32]\n")
    assert load_spec(str(spec)).int8_preset() == "arm64"
    spec.write_text("name: x\nrunner: local\ncpu_flags: [sse4_2, avx2, fma]\n")
    assert load_spec(str(spec)).int8_preset() == "avx2"
    spec.write_text("name: x\nrunner: local\npreset: avx512_vnni\n")
    assert load_spec(str(spec)).int8_preset() == "avx512_vnni"


def test_trial_stats_reports_median_of_trial_percentiles_and_pooled_iqr():
    # Trial medians 2, 3, 30 (one trial hit by a burst of load): p50 = their median, 3.
    # Pooled, sorted: 1,2,2,3,3,4,20,30,40; p25 at index 2 = 2, p75 at index 6 = 20.
    trials = [[1.0, 2.0, 3.0], [2.0, 3.0, 4.0], [20.0, 30.0, 40.0]]
    s = agent.trial_stats(trials)
    assert s["p50_ms"] == 3.0 and s["trial_p50_ms"] == [2.0, 3.0, 30.0]
    assert s["iqr_ms"] == pytest.approx(20.0 - 2.0)
    assert s["trial_spread"] == pytest.approx((30 - 2) / 3) and s["noisy"]
    assert not agent.trial_stats([[1.0, 1.0], [1.05, 1.05]])["noisy"]  # 5% < 10%


def test_bootstrap_ci_brackets_the_median_and_is_seeded():
    values = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6]
    lo, hi = agent.bootstrap_ci([values], seed=0)
    assert lo <= 1.3 <= hi
    assert lo >= 1.0 and hi <= 1.6
    assert agent.bootstrap_ci([values], seed=0) == (lo, hi)
    assert agent.bootstrap_ci([[2.0] * 5], seed=1) == (2.0, 2.0)


def test_bootstrap_ci_over_processes_widens_when_processes_disagree():
    # Each process is tight inside, but the processes sit at 1.0, 1.1 and 1.2: one
    # process's bootstrap would claim +-0.01; resampling processes must not.
    groups = [[c - 0.01, c, c + 0.01] * 4 for c in (1.0, 1.1, 1.2)]
    lo, hi = agent.bootstrap_ci(groups, seed=0)
    assert lo <= 1.0 + 0.01 and hi >= 1.2 - 0.01
    lo1, hi1 = agent.bootstrap_ci(groups[:1], seed=0)
    assert hi1 - lo1 == pytest.approx(0.02)


def test_alternate_interleaves_trials_abba_and_reports_ratio():
    calls = []
    out = agent.alternate(
        lambda: calls.append("a"), lambda: calls.append("b"), runs=4, warmup=1, trials=4, seed=0
    )
    # warm-up a b, then trials of 1 run: A B | B A | A B | B A
    assert "".join(calls) == "ab" + "abbaabba"
    assert out["a"]["trials"] == out["b"]["trials"] == 4
    assert len(out["trial_ratios"]) == 4 and out["ratio_ci95"][0] <= out["ratio_ci95"][1]
    assert len(out["p90_trial_ratios"]) == 4
    assert out["p90_ratio_ci95"][0] <= out["p90_ratio_b_over_a"] <= out["p90_ratio_ci95"][1]


@pytest.fixture
def keep_affinity():
    """main() pins the calling process; give pytest its cores back afterwards."""
    cores = os.sched_getaffinity(0)
    yield
    os.sched_setaffinity(0, cores)


def test_agent_vs_times_both_models_and_pins_affinity(tmp_path, keep_affinity):
    a = identity_model(tmp_path / "a.onnx")
    b = identity_model(tmp_path / "b.onnx")
    r = agent.main(
        [
            *("--model", str(a), "--vs", str(b), "--runs", "8", "--trials", "4"),
            *("--warmup", "1", "--seq-len", "4", "--cpu-affinity", "0"),
        ]
    )
    assert r["cpu_affinity"] == [0]
    assert r["vs"]["b"]["model"] == str(b) and r["vs"]["b"]["trials"] == 4
    assert r["vs"]["ratio_b_over_a"] > 0 and set(r) >= KEYS


def test_agent_refuses_a_provider_its_onnxruntime_lacks(tmp_path):
    a = identity_model(tmp_path / "a.onnx")
    with pytest.raises(SystemExit, match="TensorrtExecutionProvider is not in this onnxruntime"):
        agent.main(["--model", str(a), "--provider", "TensorrtExecutionProvider"])


def test_agent_writes_out_file_when_asked(tmp_path):
    a = identity_model(tmp_path / "a.onnx")
    r = agent.main(
        [
            *("--model", str(a), "--runs", "5", "--trials", "5", "--warmup", "0"),
            *("--out", str(tmp_path / "r.json")),
        ]
    )
    assert json.loads((tmp_path / "r.json").read_text()) == r


def test_agent_names_the_fix_for_cores_the_machine_lacks(tmp_path, keep_affinity):
    a = identity_model(tmp_path / "a.onnx")
    with pytest.raises(SystemExit, match=r"cpu_affinity \[4096\]: this machine has cores"):
        agent.main(["--model", str(a), "--cpu-affinity", "4096"])


@pytest.mark.slow  # exports a one-file pair model (~5 s)
def test_profile_times_a_pair_e2e_model_on_one_pair_a_call(tmp_path, tiny_teacher, pair_data):
    import onnxruntime as ort
    import torch

    from edgekd.artifacts import E2E_MODEL
    from edgekd.config import DataConfig, ExportConfig
    from edgekd.data import load_task
    from edgekd.distill.teacher import load_teacher
    from edgekd.stages.export import export
    from edgekd.students.base import save_student
    from edgekd.students.bilstm import BiLSTMStudent
    from edgekd.students.predict import extension_options

    # An untrained siamese BiLSTM: its model.e2e.onnx reads [N, 2] strings, and refuses
    # the [2] a pair line once became.
    torch.manual_seed(0)
    data = DataConfig(spec=str(pair_data), text_pair_column="sentence2")
    options = {"vocab": "wordpiece", "embedding_dim": 8, "hidden_size": 4, "mlp_size": 8}
    model, tok = BiLSTMStudent.prepare(
        options, load_task(data).train.texts, 2, *load_teacher(str(tiny_teacher))
    )
    (tmp_path / "s").mkdir()
    save_student(tmp_path / "s", model.eval(), tok, ["negative", "positive"])
    export(ExportConfig(e2e=True, int8=False, guard=False), tmp_path / "s", tmp_path / "e", data)
    path = tmp_path / "e" / E2E_MODEL

    # The agent's call, here: a pair line and a line of one text (both sides) each run.
    session = ort.InferenceSession(
        str(path), extension_options(), providers=["CPUExecutionProvider"]
    )
    call = agent.text_call(session, ["good film\tbad", "the plot"])
    call()
    call()
    # Through `edgekd profile`'s path: dev pairs, then synthetic texts (no tab).
    pairs = [("good film", "bad"), ("the plot", "")]
    for texts in (pairs, None):
        r = profile_model(path, runs=4, trials=2, warmup=1, seq_len=4, texts=texts)
        assert r["end_to_end_timing"] and r["p50_ms"] > 0
