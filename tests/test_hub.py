from conftest import PROXY_VARS
from edgekd.hub import hub_unreachable, require_hub


def test_hub_unreachable_names_the_host_that_does_not_resolve(offline_hub):
    assert hub_unreachable() == "cannot resolve no-such-host.invalid"


def test_hub_unreachable_gives_no_verdict_offline_or_behind_proxy(offline_hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the libraries read their cache, fast
    assert hub_unreachable() is None
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv(PROXY_VARS[0], "http://127.0.0.1:3128")  # DNS may fail, HTTPS work
    assert hub_unreachable() is None


def test_require_hub_accepts_local_folders_without_a_network(offline_hub, tmp_path):
    require_hub(str(tmp_path), "teacher")  # no error: a local path needs no Hub
