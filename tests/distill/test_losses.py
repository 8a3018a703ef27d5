"""Golden values computed by hand, so a wrong formula cannot hide behind a fixture."""

import math

import pytest
import torch

from edgekd.distill.losses import NO_LABEL, HintonKDLoss, LogitMSELoss

S = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
T = torch.tensor([[2.0, 0.0], [1.0, 1.0]])


def test_logit_mse_sums_classes_and_averages_rows():
    # row 1: (1-2)² + (2-0)² = 5; row 2: 1 + 1 = 2; mean = 3.5
    assert LogitMSELoss()(S, T).item() == pytest.approx(3.5)


def test_logit_mse_mixes_gold_ce_and_skips_unlabelled_rows():
    # CE of row 1 with label 1: -log softmax([1,2])[1] = log(1 + e^-1) = 0.313262
    ce = math.log(1 + math.exp(-1))
    labels = torch.tensor([1, NO_LABEL])
    got = LogitMSELoss(ce_weight=0.25)(S, T, labels).item()
    assert got == pytest.approx(0.75 * 3.5 + 0.25 * ce, rel=1e-6)


def test_hinton_kd_matches_hand_computed_kl_at_t2():
    # T = 2: teacher row 1 → softmax([1, 0]) = [e/(e+1), 1/(e+1)] = [0.731059, 0.268941];
    # student row 1 → softmax([0.5, 1]) = [0.377541, 0.622459].
    # Row 2: both uniform → KL 0.
    pt = [math.e / (math.e + 1), 1 / (math.e + 1)]
    ps = [1 / (1 + math.exp(0.5)), math.exp(0.5) / (1 + math.exp(0.5))]
    kl_row1 = sum(p * math.log(p / q) for p, q in zip(pt, ps, strict=True))
    expected = (kl_row1 + 0.0) / 2 * 2**2  # batch mean, times T²
    assert HintonKDLoss(temperature=2.0)(S, T).item() == pytest.approx(expected, rel=1e-6)


def test_hinton_kd_with_ce_weight_one_is_plain_cross_entropy():
    labels = torch.tensor([0, 1])
    # -log softmax([1,2])[0] = log(1+e) = 1.313262; -log softmax([0,0])[1] = log 2
    expected = (math.log(1 + math.e) + math.log(2)) / 2
    got = HintonKDLoss(ce_weight=1.0, temperature=4.0)(S, T, labels).item()
    assert got == pytest.approx(expected, rel=1e-6)


def test_losses_reject_bad_weights():
    with pytest.raises(ValueError, match="ce_weight"):
        LogitMSELoss(ce_weight=1.5)
    with pytest.raises(ValueError, match="temperature"):
        HintonKDLoss(temperature=0)


def test_annealing_phi_steps_down_tau_with_k_epochs_per_step():
    from edgekd.distill.losses import AnnealingKDLoss

    loss = AnnealingKDLoss(tau_max=4, epochs_per_step=2)
    # τ: 4,4,3,3,2,2,1,1 → Φ = 1 − (τ−1)/4: 0.25, 0.25, 0.5, 0.5, 0.75, 0.75, 1, 1
    assert [loss.phi(e) for e in range(1, 9)] == [0.25, 0.25, 0.5, 0.5, 0.75, 0.75, 1.0, 1.0]
    assert loss.min_epochs == 8


def test_annealing_loss_scales_teacher_then_switches_to_gold_ce():
    from edgekd.distill.losses import AnnealingKDLoss

    loss = AnnealingKDLoss(tau_max=4, epochs_per_step=2)
    loss.start_epoch(1)
    # S − 0.25·T = [[0.5, 2], [−0.25, −0.25]] → rows 4.25 and 0.125 → mean 2.1875
    assert loss(S, T).item() == pytest.approx(2.1875)
    loss.start_epoch(9)  # stage II: CE on gold labels only
    labels = torch.tensor([0, 1])
    assert loss(S, T, labels).item() == pytest.approx(
        (math.log(1 + math.e) + math.log(2)) / 2, rel=1e-6
    )


def test_uniform_teacher_is_label_smoothing():
    from edgekd.distill.losses import UniformTeacherLoss

    eps = 0.2
    labels = torch.tensor([0, 1])
    got = UniformTeacherLoss(ce_weight=1 - eps)(S, T, labels)
    # label smoothing ε with C = 2: target (1−ε)·onehot + ε/2. Its CE = (1−ε)·CE + ε·H(u, p),
    # and ε·KL(u||p) = ε·(H(u, p) − log 2): the two differ by the constant ε·log 2.
    smoothed = torch.nn.functional.cross_entropy(S, labels, label_smoothing=eps)
    assert got.item() == pytest.approx(smoothed.item() - eps * math.log(2), rel=1e-6)


def test_ensemble_probs_mode_returns_logits_of_mean_distribution():
    from edgekd.distill.losses import ensemble_logits

    a, b = torch.tensor([[0.0, 0.0]]), torch.tensor([[math.log(3), 0.0]])
    # σ(a) = [0.5, 0.5], σ(b) = [0.75, 0.25] → mean [0.625, 0.375]
    out = ensemble_logits([a, b], "probs")
    assert torch.softmax(out, -1).tolist()[0] == pytest.approx([0.625, 0.375])
    assert ensemble_logits([a, b], "logits").tolist()[0] == pytest.approx([math.log(3) / 2, 0])
    t2 = ensemble_logits([a, b], "probs", temperature=2.0)
    mean_soft = (torch.softmax(a / 2, -1) + torch.softmax(b / 2, -1)) / 2
    assert torch.softmax(t2 / 2, -1)[0].tolist() == pytest.approx(mean_soft[0].tolist())
