"""The thread governor: it runs the faster thread count, re-probes, and never changes
the student."""

import time

import pytest
import torch

from conftest import NATIVE_BF16
from edgekd.threads import ThreadGovernor, available_cores

PRECISIONS = pytest.mark.parametrize("precision", ["fp32", pytest.param("bf16", marks=NATIVE_BF16)])


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


def test_governor_pace_is_the_rate_the_governor_trains_at(monkeypatch):
    # What the time budget plans with (`probe_train_rate`): the governor's long-run rate
    # from each count's speed. By hand: (9 × 2,000 + 1,300) / 10 = 1,930 rows/s.
    assert ThreadGovernor.pace([2000.0, 1300.0], probe_every=10) == 1930.0
    assert ThreadGovernor.pace([1700.0]) == 1700.0  # one count: nothing re-timed
    clock = Clock()
    monkeypatch.setattr(time, "perf_counter", clock)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    gov = ThreadGovernor(cores=2, seconds=1.0, probe_every=10)
    speed, rows = {2: 2000.0, 1: 1300.0}, 0
    gov.step(50)
    for _ in range(40_000):  # ~1,000 s: ~1,000 windows, the first two's start negligible
        clock.now += 50 / speed[gov.current]
        rows += 50
        gov.step(50)
    assert abs(rows / clock.now - 1930.0) < 0.005 * 1930.0


def test_governor_on_one_core_never_switches(monkeypatch):
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    gov = ThreadGovernor(cores=1, seconds=0.0)
    for _ in range(5):
        gov.step(1)
    assert gov.current == 1 and gov.counts == [1]
    assert available_cores() >= 1


def on_one_and_two_threads(run):
    """`run(threads)` on 1 thread, then on 2 (each sets its count), the count restored."""
    before = torch.get_num_threads()
    try:
        return run(1), run(2)
    finally:
        torch.set_num_threads(before)


@PRECISIONS
def test_bilstm_training_is_bit_identical_on_one_and_two_threads(precision):
    # On batches of one length each, as the trainer's are (`bucketed_batches`), with
    # its fused Adam: the governor may switch threads mid-run and the seed still gives
    # one student. (Mixed-length batches take a packed path that does not: ~5e-7 apart.)
    # In bf16 too: oneDNN's bf16 LSTM and matrix products keep the same bits.
    from edgekd.distill.trainer import training_precision
    from edgekd.students.bilstm import BiLSTMConfig, BiLSTMStudent

    def train(threads):
        torch.set_num_threads(threads)
        torch.manual_seed(0)
        model = BiLSTMStudent(BiLSTMConfig(hidden_size=32), 500, 3)
        optim = torch.optim.Adam(model.parameters(), 1e-3, fused=True)
        gen = torch.Generator().manual_seed(1)
        for length in (12, 3, 1, 7, 20):
            ids = torch.randint(1, 500, (16, length), generator=gen)
            with training_precision(precision, "cpu"):
                loss = (model(ids, torch.ones_like(ids)).float() ** 2).mean()
            loss.backward()
            optim.step()
            optim.zero_grad()
        return model.state_dict()

    one, two = on_one_and_two_threads(train)
    assert all(torch.equal(one[k], two[k]) for k in one)


def test_mkl_strict_mode_is_on_once_edgekd_is_imported():
    # conftest imports edgekd before torch computes anything, as the CLI does.
    from edgekd.threads import strict_blas

    assert strict_blas() in (True, None)  # None: a torch without MKL (nothing to ask)


def test_governor_keeps_one_count_when_blas_is_not_strict(monkeypatch):
    from edgekd import threads

    monkeypatch.setattr(threads, "strict_blas", lambda: False)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    gov = ThreadGovernor(cores=2, seconds=0.0)
    assert gov.counts == [2] and "strict" in (gov.note or "")
    monkeypatch.setattr(threads, "strict_blas", lambda: True)
    assert ThreadGovernor(cores=2).note is None


def test_exact_sum_matches_sum_and_ignores_the_thread_count():
    from edgekd.threads import exact_sum

    x = torch.randn(3, 17, 1031, generator=torch.Generator().manual_seed(0))  # 52,581 values

    def total(threads: int) -> torch.Tensor:
        torch.set_num_threads(threads)
        return exact_sum(x)

    sums = on_one_and_two_threads(total)
    assert torch.equal(sums[0], sums[1])
    assert torch.allclose(sums[0], x.double().sum().float(), rtol=1e-5)
    assert exact_sum(torch.ones(10)) == 10  # under the grain: a plain sum


def test_exact_softmax_has_torchs_gradients_and_is_undone_on_exit():
    import torch.nn.functional as F

    from edgekd.threads import exact_softmax

    originals = (torch.softmax, F.softmax, F.log_softmax, torch.Tensor.softmax)
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 3, 9, 9, generator=g), torch.randn(4, 3, 9, 9, generator=g)
    grads = []
    for exact in (False, True):
        for fn in (lambda t: F.softmax(t, dim=-1), lambda t: t.log_softmax(-1)):
            leaf = x.clone().requires_grad_()
            with exact_softmax() if exact else torch.enable_grad():
                (fn(leaf) * w).sum().backward()
            grads.append(leaf.grad)
    assert torch.allclose(grads[0], grads[2], atol=1e-6)
    assert torch.allclose(grads[1], grads[3], atol=1e-6)
    assert (torch.softmax, F.softmax, F.log_softmax, torch.Tensor.softmax) == originals
    assert "softmax" not in vars(torch.Tensor)  # still the C base class's method


def test_exact_clip_scales_as_torchs_clip():
    from edgekd.threads import exact_clip_grad_norm_

    g = torch.Generator().manual_seed(0)
    ours = [torch.nn.Parameter(torch.zeros(300, 200)) for _ in range(2)]
    theirs = [torch.nn.Parameter(torch.zeros(300, 200)) for _ in range(2)]
    for a, b in zip(ours, theirs, strict=True):
        a.grad = torch.randn(300, 200, generator=g)
        b.grad = a.grad.clone()
    norm = exact_clip_grad_norm_(ours, 1.0)
    assert torch.allclose(norm, torch.nn.utils.clip_grad_norm_(theirs, 1.0), rtol=1e-5)
    assert all(torch.allclose(a.grad, b.grad, atol=1e-7) for a, b in zip(ours, theirs, strict=True))


@PRECISIONS
def test_bert_training_is_bit_identical_on_one_and_two_threads(precision):
    # Attention scores of 8 rows × 4 heads × 40² = 51,200 values, past torch's 32,768
    # grain, where its own LayerNorm and softmax backward kernels split by thread.
    from edgekd.distill.trainer import training_precision
    from edgekd.students.bert import BertStudent, BertStudentConfig
    from edgekd.threads import exact_clip_grad_norm_, exact_layer_norms, exact_softmax

    def train(threads: int) -> dict[str, torch.Tensor]:
        torch.set_num_threads(threads)
        torch.manual_seed(0)
        config = BertStudentConfig(
            layers=2, hidden=64, heads=4, ffn=128, max_position_embeddings=64
        )
        model = BertStudent(config, 500, 3)
        assert exact_layer_norms(model) == 2 * 2 + 1  # 2 per layer and the embeddings'
        optim = torch.optim.Adam(model.parameters(), 1e-3, fused=True)
        gen = torch.Generator().manual_seed(1)
        for rows, length in ((8, 40), (1, 33), (16, 40)):
            ids = torch.randint(1, 500, (rows, length), generator=gen)
            with exact_softmax(), training_precision(precision, "cpu"):
                loss = (model(ids, torch.ones_like(ids)).float() ** 2).mean()
            loss.backward()
            exact_clip_grad_norm_(model.parameters(), 0.1)  # small: it clips
            optim.step()
            optim.zero_grad()
        return model.state_dict()

    one, two = on_one_and_two_threads(train)
    assert all(torch.equal(one[k], two[k]) for k in one)
