"""The thread governor: it runs the faster thread count, re-probes, and never changes
the student."""

import time

import torch

from edgekd.threads import ThreadGovernor, available_cores


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_governor_switches_to_one_thread_when_two_stall_and_reprobes(monkeypatch):
    clock, counts = Clock(), []
    monkeypatch.setattr(time, "perf_counter", clock)
    monkeypatch.setattr(torch, "set_num_threads", counts.append)
    gov = ThreadGovernor(cores=2, seconds=1.0, probe_every=4)
    # Rows per second each count reaches: a busy machine stalls 2 threads.
    speed = {2: 30.0, 1: 1000.0}
    used = []
    gov.step(10)  # the first step only starts the clock
    for _ in range(1000):
        clock.now += 10 / speed[gov.current]  # one 10-row step at the current count's speed
        used.append(gov.current)
        gov.step(10)
    windows = [c for i, c in enumerate(used) if i == 0 or used[i - 1] != c]
    # 2 threads first, then a probe of 1 thread, which wins; every 4th window 2 again.
    assert windows[:4] == [2, 1, 2, 1]
    assert used.count(1) > 0.7 * len(used)
    assert counts[0] == 2 and set(counts) == {1, 2}
    gov.close()
    assert counts[-1] == 2  # the next stage gets every core back


def test_governor_keeps_all_cores_when_they_are_faster(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(time, "perf_counter", clock)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    gov = ThreadGovernor(cores=2, seconds=1.0, probe_every=10)
    speed, used = {2: 2000.0, 1: 1300.0}, []
    gov.step(50)
    for _ in range(2000):
        clock.now += 50 / speed[gov.current]
        used.append(gov.current)
        gov.step(50)
    # One probe window of 1 thread in every 10 (and the first probe): ~10%.
    assert 0.05 < used.count(1) / len(used) < 0.15


def test_governor_on_one_core_never_switches(monkeypatch):
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    gov = ThreadGovernor(cores=1, seconds=0.0)
    for _ in range(5):
        gov.step(1)
    assert gov.current == 1 and gov.counts == [1]
    assert available_cores() >= 1


def test_bilstm_training_is_bit_identical_on_one_and_two_threads():
    # On batches of one length each, as the trainer's are (`bucketed_batches`), with
    # its fused Adam: the governor may switch threads mid-run and the seed still gives
    # one student. (Mixed-length batches take a packed path that does not: ~5e-7 apart.)
    from edgekd.students.bilstm import BiLSTMConfig, BiLSTMStudent

    def train(threads):
        torch.set_num_threads(threads)
        torch.manual_seed(0)
        model = BiLSTMStudent(BiLSTMConfig(hidden_size=32), 500, 3)
        optim = torch.optim.Adam(model.parameters(), 1e-3, fused=True)
        gen = torch.Generator().manual_seed(1)
        for length in (12, 3, 1, 7, 20):
            ids = torch.randint(1, 500, (16, length), generator=gen)
            loss = (model(ids, torch.ones_like(ids)) ** 2).mean()
            loss.backward()
            optim.step()
            optim.zero_grad()
        return model.state_dict()

    before = torch.get_num_threads()
    try:
        one, two = train(1), train(2)
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(one[k], two[k]) for k in one)
