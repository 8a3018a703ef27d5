"""Token-state distillation (`token_states`): the ragged store, the basis, the sink that
records states while the labelers run, the cache beside the logits, the students'
token states and the loss, by hand; then a run end to end."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgekd.config import DataConfig, DistillConfig
from edgekd.distill.cache import load_states, store_states
from edgekd.distill.methods import MethodRun, Step, TokenStateLoss, check_methods
from edgekd.distill.states import StateBasis, StateSink, TokenStates, row_states
from edgekd.errors import EdgeKDError
from edgekd.registry import STUDENTS


def ragged() -> TokenStates:
    # Rows of 2, 0 and 3 tokens, k = 2: token t of the whole set holds (t, −t).
    rows = [np.array([[0, 0], [1, -1]]), np.zeros((0, 2)), np.array([[2, -2], [3, -3], [4, -4]])]
    return TokenStates.of_rows(rows, 2)


def test_token_states_take_concat_and_head_keep_each_rows_tokens():
    s = ragged()
    assert len(s) == 3 and s.offsets.tolist() == [0, 2, 2, 5] and s.flat.dtype == np.float16
    picked = s.take([2, 0, 2])
    assert picked.offsets.tolist() == [0, 3, 5, 8]
    assert picked.flat[:, 0].tolist() == [2, 3, 4, 0, 1, 2, 3, 4]
    both = TokenStates.concat([s.head(1), s.take([2])], 2)
    assert both.offsets.tolist() == [0, 2, 5] and both.flat[:, 1].tolist() == [0, -1, -2, -3, -4]
    assert TokenStates.concat([], 2).offsets.tolist() == [0]


def test_token_states_padded_cuts_to_the_width_and_masks_past_each_end():
    target, mask = ragged().padded(np.array([2, 1, 0]), 2)
    assert target.shape == (3, 2, 2)
    assert target[0, :, 0].tolist() == [2, 3]  # row 2's first 2 of 3 tokens
    assert mask.tolist() == [[1, 1], [0, 0], [1, 1]]
    assert target[1].sum() == 0


@pytest.mark.parametrize(
    ("flat", "offsets", "problem"),
    [
        (np.zeros((3, 2), np.float32), [0, 3], "float32"),
        (np.zeros((3, 2), np.float16), [0, 1], "have 1 rows, not 2"),
        (np.zeros((3, 2), np.float16), [0, 2, 1], "do not cover"),
        (np.full((3, 2), np.inf, np.float16), [0, 1, 3], "infinity"),
    ],
)
def test_token_states_problem_names_what_a_crafted_entry_gets_wrong(flat, offsets, problem):
    states = TokenStates(flat, np.array(offsets, np.int64))
    assert problem in (states.problem(2, 2) or "")
    assert TokenStates.of_rows([np.zeros((1, 2)), np.zeros((2, 2))], 2).problem(2, 2) is None


def test_state_basis_projects_on_unit_variance_principal_components(tmp_path):
    rng = np.random.default_rng(0)
    # Width 4: variance 9 along e0, 1 along e1, ~0 elsewhere; the basis keeps e0 then e1.
    tokens = rng.normal(size=(5000, 4)) * np.array([3.0, 1.0, 0.01, 0.01]) + 5.0
    basis = StateBasis.fit(tokens, 2)
    assert np.abs(np.abs(basis.components[:, 0]) - [1, 0, 0, 0]).max() < 0.01
    projected = basis.project(tokens).astype(np.float64)
    assert projected.mean(0) == pytest.approx([0, 0], abs=0.01)
    assert projected.std(0) == pytest.approx([1, 1], rel=0.01)
    basis.save(tmp_path / "b.safetensors")
    again = StateBasis.load(tmp_path / "b.safetensors", 2, 4)
    assert again is not None and again.digest() == basis.digest()
    assert StateBasis.load(tmp_path / "b.safetensors", 3, 4) is None  # another k: a miss
    with pytest.raises(EdgeKDError, match="lower token_states"):
        StateBasis.fit(tokens[:1], 2)


def test_state_sink_records_each_texts_tokens_without_special_ones():
    basis = StateBasis(np.zeros(2, np.float32), np.eye(2, dtype=np.float32), np.ones(2, np.float32))
    sink = StateSink(basis, special={0, 101, 102})
    ids = np.array([[101, 7, 8, 102], [101, 9, 102, 0]])  # [CLS] a b [SEP]; [CLS] c [SEP] [PAD]
    hidden = np.arange(16, dtype=np.float32).reshape(2, 4, 2)
    sink.record(["ab", "c"], hidden, ids)
    got = sink.states_of(["c", "ab", "c"])
    assert got.offsets.tolist() == [0, 1, 3, 4]
    assert got.flat.tolist() == [[10, 11], [2, 3], [4, 5], [10, 11]]
    sink.forget(["ab"])
    with pytest.raises(RuntimeError, match="no token states recorded"):
        sink.states_of(["ab"])
    assert [len(r) for r in row_states(hidden, ids, {0, 101, 102})] == [2, 1]


def test_cached_states_read_back_and_a_damaged_entry_is_a_miss(tmp_path, capsys):
    store_states(tmp_path, "key", ragged())
    back = load_states(tmp_path, "key", 3, 2)
    assert back is not None and back.flat.tolist() == ragged().flat.tolist()
    assert load_states(tmp_path, "key", 4, 2) is None  # other rows: relabel
    (tmp_path / "key.states.safetensors").write_bytes(b"not safetensors")
    assert load_states(tmp_path, "key", 3, 2) is None
    assert "unreadable; recomputing" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["bilstm", "cnn"])
def test_table_students_token_states_pool_to_what_encode_gives(name):
    torch.manual_seed(0)
    cls = STUDENTS.get(name)
    model = cls(cls.Config(embedding_dim=8, dropout=0.0, mlp_size=8), 30, 2).eval()
    ids = torch.tensor([[5, 6, 7, 8], [9, 3, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        logits, (tokens,) = model(ids, mask, return_hidden=True)
        assert tokens.shape == (2, 4, cls.token_width(model.config))
        torch.testing.assert_close(logits, model(ids, mask))
        pooled, _ = model.encode_tokens(ids, mask)
        torch.testing.assert_close(pooled, model.encode(ids, mask))
        assert tokens[1, 2:].abs().sum() == 0  # nothing past the text's end
        if name == "bilstm":  # max pooling over the token states is the pooled vector
            torch.testing.assert_close(pooled[0], tokens[0].max(0).values)


def test_cnn_token_state_of_width_one_is_the_windows_feature_at_that_token():
    torch.manual_seed(0)
    cls = STUDENTS.get("cnn")
    model = cls(cls.Config(embedding_dim=8, dropout=0.0, widths=[1], filters=3), 30, 2).eval()
    ids = torch.tensor([[4, 7, 9]])
    with torch.no_grad():
        _, tokens = model.encode_tokens(ids, torch.ones_like(ids))
        want = torch.relu(model.windows[0](model.embedding(ids)[0]))
    torch.testing.assert_close(tokens[0], want)


def test_token_state_loss_is_the_masked_mean_square_error_of_the_mapped_states():
    states = TokenStates.of_rows([np.array([[1.0, 0.0]]), np.array([[0.0, 2.0], [1.0, 1.0]])], 2)
    loss = TokenStateLoss(states, width=2, weight=0.5)
    with torch.no_grad():  # W = identity, no bias: the student's states are the map's output
        loss.head.weight.copy_(torch.eye(2))
        loss.head.bias.zero_()
    tokens = torch.tensor([[[1.0, 1.0], [9.0, 9.0]], [[0.0, 0.0], [1.0, 1.0]]])
    mask = torch.tensor([[1, 0], [1, 1]])

    class Features:
        hidden = (tokens,)

    Features.mask = mask  # type: ignore[attr-defined]
    step = Step(
        None, None, {}, torch.zeros(2, 2), torch.zeros(2), 1, list, Features(), torch.tensor([0, 1])
    )
    # Row 0: one token, ((1−1)² + (1−0)²)/2 = 0.5; row 1: ((0−0)² + (0−2)²)/2 = 2 and
    # ((1−1)² + (1−1)²)/2 = 0; the padded token of row 0 counts for nothing.
    # Mean over 3 tokens: (0.5 + 2 + 0) / 3, times the weight 0.5.
    assert loss.loss(step).item() == pytest.approx(0.5 * 2.5 / 3)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"student": "bert"}, "student 'bert' has none to align"),
        ({"extra_teachers": ["t2"]}, "come from one teacher"),
    ],
)
def test_token_states_are_refused_before_any_data_when_they_cannot_align(fields, message):
    cfg = DistillConfig(teacher="t", token_states=4, **fields)
    with pytest.raises(EdgeKDError, match=message):
        check_methods(cfg, STUDENTS.get(cfg.student.name))


def test_token_states_need_a_wordpiece_student_and_single_texts():
    cfg = DistillConfig(teacher="t", token_states=4)
    word = STUDENTS.get("bilstm")(STUDENTS.get("bilstm").Config(vocab="word"), 10, 2)
    run = MethodRun(cfg, word, None, None, None, np.zeros(0), 0, False, ragged())  # type: ignore[arg-type]
    with pytest.raises(EdgeKDError, match="vocab: wordpiece"):
        TokenStateLoss.build(None, run)
    run.pairs = True
    with pytest.raises(EdgeKDError, match="sentence pairs"):
        TokenStateLoss.build(None, run)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_distill_with_token_states_caches_them_and_reruns_to_the_same_student(
    tmp_path, tiny_teacher, tiny_data, runtime
):
    from edgekd.distill.cache import default_cache_root
    from edgekd.stages.distill import distill
    from edgekd.students.base import load_student

    cfg = DistillConfig(
        teacher=str(tiny_teacher), data=DataConfig(spec=str(tiny_data)), epochs=2,
        batch_size=16, token_states=4, teacher_runtime=runtime,
        augment={"methods": ["tang"], "n_iter": 2},
    )  # fmt: skip
    first = distill(cfg, tmp_path / "a")
    stored = sorted((default_cache_root() / "logits").glob("*.states.safetensors"))
    assert len(stored) == 2  # the training rows' and the augmented chunk's
    again = distill(cfg, tmp_path / "b")  # from the cache: the same states, the same student
    assert again.student_accuracy == first.student_accuracy
    a, _, _ = load_student(tmp_path / "a")
    b, _, _ = load_student(tmp_path / "b")
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name
    # And the term changed the student: the same run without it trains other weights.
    without = distill(cfg.model_copy(update={"token_states": 0}), tmp_path / "c")
    c, _, _ = load_student(tmp_path / "c")
    assert not torch.equal(a.classifier.weight, c.classifier.weight)
    assert without.student == first.student
