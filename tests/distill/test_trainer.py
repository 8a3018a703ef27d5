"""The training loop's pieces that have a value to check by hand: the learning-rate
curve and the weight average."""

import pytest
import torch

from edgekd.distill.trainer import (
    cooldown_start,
    ends_at,
    keeps_later,
    lr_factor,
    native_bf16,
    steps_that_fit,
    training_precision,
    weight_average,
)


def test_lr_factor_warms_up_then_decays_linearly_to_zero():
    # 10 steps, 2 of warm-up: 1/2, 2/2, then 1 − (step − 2)/8.
    got = [lr_factor(s, 10, 2, "linear") for s in range(10)]
    assert got == pytest.approx([0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125])
    assert lr_factor(6, 10, 2, "cosine") == pytest.approx(0.5)  # half-way: cos(π/2) = 0
    assert lr_factor(7, 10, 0, "none") == 1.0


def test_lr_factor_is_constant_under_a_cool_down_it_leaves_to_the_runs_plan():
    assert lr_factor(7, 10, 0, "cooldown") == 1.0
    assert lr_factor(0, 10, 2, "cooldown") == 0.5  # the warm-up still applies


@pytest.mark.parametrize(
    ("done", "end", "now", "start"),
    [
        (700, 1000, False, None),  # the last fifth starts at 800: not before 700 + 100
        (800, 1000, False, 800),  # due within the next epoch: it starts there
        (800, 1050, False, 840),  # ⌈0.8 × 1,050⌉ = 840, 40 steps into the next epoch
        (900, 1000, False, 900),  # its point passed (a slower pace moved the end): at once
        (300, 1000, True, 300),  # a plateau or early stop: at once
        (0, 110, False, 88),  # a run of 1.1 epochs cools down within its first
    ],
)
def test_cooldown_start_begins_the_last_share_before_the_plan_is_looked_at_again(
    done, end, now, start
):
    # 100 steps an epoch, a cool-down over the last 20% of the steps.
    assert cooldown_start(done, end, 100, 0.2, now=now) == start


def test_ends_at_names_the_last_epoch_and_its_steps():
    assert ends_at(1050, 100) == (11, 50)
    assert ends_at(1000, 100) == (10, None)  # a whole epoch
    assert ends_at(1, 100) == (1, 1)


def test_steps_that_fit_hold_the_time_left_at_the_last_epochs_pace():
    assert steps_that_fit(40.0, 29.0, 2_300) == 1_667  # ⌊29 / 40 × 2,300⌋
    assert steps_that_fit(40.0, -1.0, 2_300) == 0  # past the budget


def test_weight_average_is_none_without_a_horizon():
    assert weight_average(torch.nn.Linear(1, 1), None, 100) is None


def test_weight_average_follows_the_ema_of_the_steps():
    # Horizon 0.5 epoch of 4 steps: decay 1 − 1/2 = 0.5. Weights 1, 3, 5 at the steps:
    # the first copies (1), then 0.5·1 + 0.5·3 = 2, then 0.5·2 + 0.5·5 = 3.5.
    model = torch.nn.Linear(1, 1, bias=False)
    avg = weight_average(model, 0.5, 4)
    for w in (1.0, 3.0, 5.0):
        with torch.no_grad():
            model.weight.fill_(w)
        avg.update_parameters(model)
    assert avg.module.weight.item() == pytest.approx(3.5)
    assert model.weight.item() == 5.0  # the trained weights are untouched


def test_weight_average_decay_scales_with_the_epoch_length():
    # The same horizon in epochs: 1 − 1/(0.25·3,500) on a long epoch, 1 − 1/(0.25·40)
    # on a short one; a horizon under one step keeps the last weights (decay 0).
    for steps, decay in ((3500, 1 - 1 / 875), (40, 0.9), (2, 0.0)):
        model = torch.nn.Linear(1, 1, bias=False)
        avg = weight_average(model, 0.25, steps)
        for w in (0.0, 1.0):
            with torch.no_grad():
                model.weight.fill_(w)
            avg.update_parameters(model)
        assert avg.module.weight.item() == pytest.approx(1 - decay)


@pytest.mark.parametrize(
    ("eta", "expected"),
    [
        (0, 2.5),  # uniform: (1 + 2 + 3 + 4) / 4
        (1, 3.0),  # ∝ i: (1·1 + 2·2 + 3·3 + 4·4) / (1 + 2 + 3 + 4) = 30 / 10
        (2, 3.25),  # ∝ i(i+1): (1·2 + 2·6 + 3·12 + 4·20) / (2 + 6 + 12 + 20) = 130 / 40
    ],
)
def test_average_epoch_weighs_epoch_i_by_its_rising_factorial(eta, expected):
    from edgekd.distill.trainer import average_epoch

    average, weights = torch.nn.Linear(1, 1, bias=False), torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        average.weight.fill_(-7.0)  # whatever it starts as, epoch 1 replaces it
    for epoch in (1, 2, 3, 4):
        with torch.no_grad():
            weights.weight.fill_(float(epoch))
        average_epoch(average, weights, epoch, eta)
        if epoch == 1:
            assert average.weight.item() == 1.0
    assert average.weight.item() == pytest.approx(expected)
    assert weights.weight.item() == 4.0  # the epoch's own weights are untouched


def test_keeps_later_within_one_standard_error_of_the_best():
    # 500 rows at 0.88: standard error √(0.88·0.12/500) = 0.01453.
    assert keeps_later(0.8660, 0.88, 500)  # 1.40 points lower: within the noise
    assert not keeps_later(0.8650, 0.88, 500)  # 1.50 points lower: beyond it
    assert keeps_later(0.90, 0.88, 500)  # better: kept
    assert keeps_later(0.0, -1.0, 500)  # nothing kept yet
    # A perfect best has no noise: any drop is real.
    assert not keeps_later(0.998, 1.0, 500)


def test_split_between_shares_each_batch_out_in_step_order():
    from edgekd.distill.trainer import split_between

    batches = [[0, 1, 2, 3, 4], [5, 6, 7], [8]]
    assert split_between(batches, 1) is batches
    # accelerate gives list item k to process k mod 2: process 0 reads the even items.
    parts = split_between(batches, 2)
    assert parts == [[0, 2, 4], [1, 3], [5, 7], [6], [8], [8]]
    assert parts[0::2] == [[0, 2, 4], [5, 7], [8]] and parts[1::2] == [[1, 3], [6], [8]]


def test_training_precision_runs_matrix_products_in_bf16_and_leaves_fp32_alone():
    linear, x = torch.nn.Linear(4, 3), torch.randn(2, 4)
    with training_precision("bf16", "cpu"):
        out = linear(x)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    # The weights and their gradients (what Adam reads) stay fp32.
    assert linear.weight.dtype == linear.weight.grad.dtype == torch.float32
    with training_precision("fp32", "cpu"):
        assert linear(x).dtype == torch.float32


@pytest.mark.parametrize(
    ("avx512_bf16", "amx", "expected"),
    [(False, False, False), (True, False, True), (False, True, True)],
)
def test_native_bf16_needs_avx512_bf16_or_amx_when_on_cpu(monkeypatch, avx512_bf16, amx, expected):
    from edgekd.distill import trainer

    monkeypatch.setattr(trainer, "on_cpu_only", lambda: True)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert native_bf16() is expected


def test_features_float_brings_a_bf16_forwards_outputs_to_fp32():
    from edgekd.distill.layers import Attention, Features

    bf = torch.ones(2, 3, 4, dtype=torch.bfloat16)
    feat = Features(bf[:, 0], (bf, bf), torch.ones(2, 3), [Attention(bf, bf, bf, 2)])
    out = feat.float()
    tensors = [out.logits, *out.hidden, out.attention[0].q, out.attention[0].k, out.attention[0].v]
    assert all(t.dtype == torch.float32 for t in tensors) and out.attention[0].heads == 2
    assert Features(bf, (bf,), torch.ones(2)).float().attention is None
