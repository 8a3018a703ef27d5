"""The adb runner: argv construction, and the whole push/shell/pull flow against a
stand-in `adb` that does on this machine what adb does on a phone."""

import json
import os
import sys
from pathlib import PurePosixPath

import pytest

from conftest import identity_model
from edgekd.devices.base import load_device
from edgekd.devices.profile import profile_model
from edgekd.errors import EdgeKDError

# push/pull copy files, shell runs its single argument with sh -c (as adbd does on
# the phone); every call is logged so the test can read the exact argv.
FAKE_ADB = """#!{python}
import json, shutil, subprocess, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:1] == ["-s"]:
    args = args[2:]
if args[0] in ("push", "pull"):
    shutil.copy(args[1], args[2])
elif args[0] == "shell":
    assert len(args) == 2, "the runner passes one quoted shell line"
    sys.exit(subprocess.run(["sh", "-c", args[1]]).returncode)
"""


@pytest.fixture
def fake_adb(tmp_path):
    log = tmp_path / "adb.log"
    adb = tmp_path / "adb"
    adb.write_text(FAKE_ADB.format(python=sys.executable, log=str(log)))
    adb.chmod(0o755)
    phone = tmp_path / "phone"
    phone.mkdir()
    spec = tmp_path / "phone.yaml"
    spec.write_text(
        f"name: phone\nrunner: adb\nserial: emulator-5554\nadb: {adb}\n"
        f"python: {sys.executable}\nremote_root: {phone}\nthreads: 2\n"
    )
    return spec, log, phone


def test_adb_runner_pushes_runs_pulls_and_cleans_up(fake_adb, tmp_path):
    spec, log, phone = fake_adb
    model = identity_model(tmp_path / "student model.onnx")
    r = profile_model(model, str(spec), runs=6, trials=2, warmup=1, seq_len=4)
    assert r["device"] == "phone" and r["threads"] == 2 and r["p50_ms"] > 0
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(c[:2] == ["-s", "emulator-5554"] for c in calls)
    verbs = [c[2] for c in calls]
    assert verbs[0] == "shell" and verbs[-1] == "shell"  # mkdir first, rm -rf last
    assert verbs.count("push") == 2 and "pull" in verbs  # agent + model; result back
    pushed = [PurePosixPath(c[4]).name for c in calls if c[2] == "push"]
    assert pushed == ["agent.py", "model.onnx"]  # fixed names, never the user's
    assert calls[-1][3].startswith("rm -rf ") and not os.listdir(phone)


def test_adb_shell_line_quotes_every_argument(fake_adb):
    spec, _, _ = fake_adb
    dev = load_device(str(spec))
    argv = dev.shell_argv(["python3", "/data/local/tmp/edgekd-ab/agent.py", "--texts", "x y"])
    assert argv[1:3] == ["-s", "emulator-5554"] and argv[3] == "shell"
    assert argv[4] == "python3 /data/local/tmp/edgekd-ab/agent.py --texts 'x y'"


def test_adb_runner_defaults_to_android_tmp_and_any_attached_phone(tmp_path):
    spec = tmp_path / "p.yaml"
    spec.write_text("name: p\nrunner: adb\n")
    dev = load_device(str(spec))
    assert dev.opts.remote_root == "/data/local/tmp"
    assert dev.adb_argv("devices") == ["adb", "devices"]  # no -s without a serial


def test_adb_runner_names_the_fix_when_adb_fails(fake_adb, tmp_path):
    spec, _, _ = fake_adb
    dev = load_device(str(spec), adb=str(tmp_path / "no-adb"))
    with pytest.raises(EdgeKDError, match="no-adb is not installed or not on PATH"):
        dev.run_agent({"model": identity_model(tmp_path / "m.onnx")}, [])


def test_adb_runner_reports_a_failing_agent_and_still_cleans_up(fake_adb, tmp_path):
    spec, _, phone = fake_adb
    dev = load_device(str(spec), python=str(tmp_path / "no-python"))
    with pytest.raises(EdgeKDError, match=r"no-python \(adb shell\) on phone failed: .*not found"):
        dev.run_agent({"model": identity_model(tmp_path / "m.onnx")}, [])
    assert not os.listdir(phone)
