import pytest

from edgekd.progress import main_process


@pytest.mark.parametrize(("rank", "main"), [(None, True), ("0", True), ("", True), ("1", False)])
def test_main_process_is_rank_zero_or_a_lone_process(monkeypatch, rank, main):
    # torchrun and `accelerate launch` set RANK; the other ranks stay quiet.
    if rank is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", rank)
    assert main_process() is main
