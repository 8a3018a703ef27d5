"""The ssh runner, end to end against a real OpenSSH server on 127.0.0.1."""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath

import pytest

from conftest import identity_model
from edgekd.devices.base import load_device
from edgekd.devices.profile import profile_model
from edgekd.errors import EdgeKDError

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """A throw-away sshd on 127.0.0.1 that accepts one throw-away key."""
    if not (os.path.exists(SSHD) and shutil.which("ssh") and shutil.which("ssh-keygen")):
        pytest.skip("OpenSSH server not installed (Debian: apt-get install openssh-server)")
    d = tmp_path_factory.mktemp("sshd")
    keygen(d / "host_key")
    keygen(d / "user_key")
    shutil.copy(d / "user_key.pub", d / "authorized_keys")
    port = free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\n"
        f"AuthorizedKeysFile {d}/authorized_keys\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
        f"PidFile {d}/sshd.pid\n"
    )
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation folder
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(d / "sshd_config")],
        stdout=subprocess.DEVNULL,
        stderr=open(d / "sshd.log", "w"),  # noqa: SIM115
    )
    for _ in range(50):  # up to 5 s for the port to open
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        if proc.poll() is not None:
            pytest.skip(f"sshd did not start: {(d / 'sshd.log').read_text().strip()[-200:]}")
        time.sleep(0.1)
    host_key = " ".join((d / "host_key.pub").read_text().split()[:2])
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key}\n")
    spec = d / "loopback.yaml"
    spec.write_text(
        f"name: loopback\nrunner: ssh\nhost: 127.0.0.1\nport: {port}\n"
        f"identity_file: {d}/user_key\nknown_hosts: {d}/known_hosts\n"
        f"python: {sys.executable}\nremote_root: {d}\n"
    )
    yield d, spec
    proc.terminate()
    proc.wait(timeout=10)


@pytest.mark.slow
def test_ssh_runner_profiles_on_localhost_and_cleans_up(sshd, tmp_path):
    d, spec = sshd
    # A name a shell would mangle: it must never reach the remote shell.
    model = identity_model(tmp_path / "my model; $(touch pwned).onnx")
    r = profile_model(model, str(spec), runs=10, trials=2, warmup=1, seq_len=4)
    assert r["device"] == "loopback" and r["p50_ms"] > 0 and r["trials"] == 2
    assert r["model"] == str(model.resolve())
    assert PurePosixPath(r["remote_model"]).name == "model.onnx"
    assert not list(d.glob("edgekd.*")), "the remote temp folder was left behind"
    assert not list(Path.cwd().glob("pwned")) and not (d / "pwned").exists()


@pytest.mark.slow
def test_ssh_runner_compares_two_models_remotely(sshd, tmp_path):
    _, spec = sshd
    a = identity_model(tmp_path / "a.onnx")
    b = identity_model(tmp_path / "b.onnx")
    r = profile_model(a, str(spec), runs=8, trials=4, warmup=1, seq_len=4, vs=b)
    assert r["vs"]["b"]["model"] == str(b.resolve()) and r["vs"]["ratio_b_over_a"] > 0


@pytest.mark.slow
def test_ssh_runner_refuses_a_host_whose_key_is_not_known(sshd, tmp_path):
    _, spec = sshd
    other = tmp_path / "known_hosts"
    keygen(tmp_path / "impostor")
    port = spec.read_text().split("port: ")[1].split()[0]
    impostor = " ".join((tmp_path / "impostor.pub").read_text().split()[:2])
    other.write_text(f"[127.0.0.1]:{port} {impostor}\n")
    dev = load_device(str(spec), known_hosts=str(other))
    with pytest.raises(
        EdgeKDError, match=r"connect \(ssh\) on loopback failed: Host key verification failed"
    ):
        dev.run_agent({"model": identity_model(tmp_path / "m.onnx")}, ["--runs", "1"])


def test_ssh_runner_needs_a_host_and_a_known_hosts_file(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nrunner: ssh\n")
    with pytest.raises(EdgeKDError, match="needs a host; pass --host"):
        load_device(str(spec))
    with pytest.raises(
        EdgeKDError, match=r"known_hosts file .* does not exist; add the host's key"
    ):
        load_device(str(spec), host="pi@board", known_hosts=str(tmp_path / "none"))
    with pytest.raises(EdgeKDError, match="starts with '-'"):
        load_device(str(spec), host="-oProxyCommand=x")


def test_ssh_argv_quotes_the_remote_line_and_ends_options_before_the_host(tmp_path):
    (tmp_path / "kh").write_text("")
    spec = tmp_path / "s.yaml"
    spec.write_text(
        f"name: s\nrunner: ssh\nhost: board\nuser: pi\nport: 2200\nknown_hosts: {tmp_path}/kh\n"
    )
    dev = load_device(str(spec))
    argv = dev.ssh_argv(["python3", "/tmp/edgekd.x/agent.py", "--texts", "a b;c"])
    assert argv[0] == "ssh" and argv[-3:-1] == ["--", "pi@board"]
    assert "StrictHostKeyChecking=yes" in argv and "BatchMode=yes" in argv
    assert argv[argv.index("-p") + 1] == "2200"
    assert argv[-1] == "python3 /tmp/edgekd.x/agent.py --texts 'a b;c'"
    assert dev.upload_argv(PurePosixPath("/tmp/edgekd.x/model.onnx"))[-1] == (
        "cat > /tmp/edgekd.x/model.onnx"
    )
