"""Mean-pooled teachers: read from the base's own pooling config, saved, reloaded and
exported with the same logits."""

import json

import numpy as np
import pytest
import torch

from conftest import SMALL_BILSTM
from edgekd.config import DataConfig, TeacherConfig
from edgekd.distill.pooled import ARCHITECTURE, POOLING_KEY, base_pooling, mean_pool
from edgekd.errors import EdgeKDError


def test_base_pooling_is_mean_when_sentence_transformers_config_says_so(tmp_path):
    from conftest import mark_mean_pooled

    assert base_pooling(mark_mean_pooled(tmp_path)) == "mean"


@pytest.mark.parametrize(
    "modules, pooling",
    [
        (None, None),  # a plain HF folder
        ("not json", None),
        ([{"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}], {"x": 1}),
        ([{"path": "../outside", "type": "sentence_transformers.models.Pooling"}], None),
        ([{"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}],
         {"pooling_mode_mean_tokens": "yes"}),
    ],
)  # fmt: skip
def test_base_pooling_is_cls_when_config_missing_malformed_or_outside(tmp_path, modules, pooling):
    base = tmp_path / "base"
    base.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    if modules is not None:
        text = modules if isinstance(modules, str) else json.dumps(modules)
        (base / "modules.json").write_text(text)
    if pooling is not None:
        (base / "1_Pooling").mkdir()
        (base / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    assert base_pooling(base) == "cls"


def test_mean_pool_averages_only_unmasked_positions():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    mask = torch.tensor([[1, 1, 0]])
    assert mean_pool(hidden, mask).tolist() == [[2.0, 3.0]]  # (1+3)/2, (2+4)/2


@pytest.fixture(scope="module")
def pooled_teacher(tmp_path_factory, tiny_data):
    """A mean-pooled teacher fine-tuned by the teacher stage from a tiny base whose
    sentence-transformers files say mean."""
    from conftest import build_tiny_bert, mark_mean_pooled
    from edgekd.stages.teacher import teacher

    tmp = tmp_path_factory.mktemp("pooled")
    base = mark_mean_pooled(build_tiny_bert(tmp / "base", classifier=False))
    cfg = TeacherConfig(
        base=str(base), data=DataConfig(spec=str(tiny_data)), epochs=1, batch_size=16
    )
    teacher(cfg, tmp / "teacher")
    return tmp / "teacher"


def test_teacher_stage_builds_mean_pooled_classifier_when_base_was_trained_so(pooled_teacher):
    config = json.loads((pooled_teacher / "config.json").read_text())
    assert config[POOLING_KEY] == "mean" and config["architectures"] == [ARCHITECTURE]
    metrics = json.loads((pooled_teacher / "metrics.json").read_text())
    assert metrics["pooling"] == "mean"
    resolved = (pooled_teacher / "config.yaml").read_text()
    assert "pooling: mean" in resolved


def test_load_teacher_gives_same_logits_as_mean_of_tokens_through_head(pooled_teacher):
    from edgekd.distill.teacher import load_teacher

    model, tok = load_teacher(str(pooled_teacher))
    enc = tok(["good film", "a bad and dull film indeed"], padding=True, return_tensors="pt")
    with torch.inference_mode():
        logits = model(**enc).logits
        states = model.base_model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).float()
        by_hand = model.classifier((states * mask).sum(1) / mask.sum(1))
    assert torch.allclose(logits, by_hand, atol=1e-6)


def test_pooled_teacher_gives_same_logits_from_inputs_embeds_as_from_ids(pooled_teacher):
    # MixKD labels mixed word vectors through `inputs_embeds`; a pooled teacher once took
    # only ids, and `--augment tang,mixup` stopped on its first step.
    from edgekd.distill.mixup import teacher_mixed_logits
    from edgekd.distill.teacher import load_teacher

    model, tok = load_teacher(str(pooled_teacher))
    enc = tok(["good film", "a bad and dull film indeed"], padding=True, return_tensors="pt")
    with torch.inference_mode():
        by_ids = model(**enc).logits
        table = model.get_input_embeddings()
        by_vectors = model(
            inputs_embeds=table(enc["input_ids"]), attention_mask=enc["attention_mask"]
        ).logits
        ids = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -1)
        mixed = teacher_mixed_logits(model, ids, ids, torch.tensor([0.3, 0.8]))
        # Two different texts at λ = 0.3: the teacher on 0.3·E(a) + 0.7·E(b).
        a, b = ids[:1], ids[1:]
        two = teacher_mixed_logits(model, a, b, torch.tensor([0.3]))
        ea = table(a.clamp_min(0)) * (a >= 0).unsqueeze(-1)
        eb = table(b.clamp_min(0)) * (b >= 0).unsqueeze(-1)
        mask = ((a >= 0) | (b >= 0)).long()
        by_hand = model(inputs_embeds=0.3 * ea + 0.7 * eb, attention_mask=mask).logits
    assert torch.allclose(by_vectors, by_ids, atol=1e-5)
    # A text mixed with itself is itself, whatever λ.
    assert torch.allclose(mixed, by_ids, atol=1e-5)
    assert torch.allclose(two, by_hand, atol=1e-6) and not torch.allclose(two, by_ids[1:])
    with pytest.raises(ValueError, match="input_ids or inputs_embeds"):
        model(attention_mask=enc["attention_mask"])


def test_load_teacher_refuses_pooled_folder_missing_a_weight(pooled_teacher, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    from edgekd.distill.teacher import load_teacher

    copy = tmp_path / "t"
    shutil.copytree(pooled_teacher, copy)
    state = load_file(copy / "model.safetensors")
    del state["classifier.weight"]
    save_file(state, copy / "model.safetensors")
    with pytest.raises(EdgeKDError, match=r"cannot load teacher .*classifier\.weight") as e:
        load_teacher(str(copy))
    assert "\n" not in str(e.value)


def test_export_teacher_pooled_onnx_matches_pytorch_logits(pooled_teacher, tmp_path):
    from edgekd.distill.teacher import load_teacher, teacher_logits
    from edgekd.exporters.teacher import export_teacher
    from edgekd.students.predict import OnnxPredictor

    path = export_teacher(str(pooled_teacher), tmp_path / "onnx")
    texts = ["good film", "a bad and dull film indeed", "films"]
    got = OnnxPredictor(path).logits(texts)
    model, tok = load_teacher(str(pooled_teacher))
    want = teacher_logits(model, tok, texts)
    assert np.abs(got - want).max() < 1e-4


@pytest.mark.parametrize("student", ["bilstm", "bert"])
def test_distill_learns_from_a_mean_pooled_teacher(pooled_teacher, tiny_data, tmp_path, student):
    from edgekd.config import DistillConfig
    from edgekd.stages.distill import distill

    options = {"bilstm": SMALL_BILSTM,
               "bert": {"layers": 1}}[student]  # fmt: skip
    cfg = DistillConfig(
        teacher=str(pooled_teacher), data=DataConfig(spec=str(tiny_data)), epochs=1,
        student={"name": student, "options": options}, augment={"methods": []},
    )  # fmt: skip
    m = distill(cfg, tmp_path / "s")
    assert m.student == student and 0 <= m.agreement <= 1
    if student == "bert":  # its head reads the [CLS] pooler: the teacher's is not copied
        assert any(n.startswith("classifier: the teacher's reads mean") for n in m["init"])


def test_pooling_cls_forces_standard_head_on_mean_trained_base(tmp_path, tiny_data):
    from conftest import build_tiny_bert, mark_mean_pooled
    from edgekd.data import load_task
    from edgekd.distill.teacher import build_classifier

    base = str(mark_mean_pooled(build_tiny_bert(tmp_path / "base", classifier=False)))
    task = load_task(DataConfig(spec=str(tiny_data)))
    forced = build_classifier(TeacherConfig(base=base, pooling="cls"), base, task)
    auto = build_classifier(TeacherConfig(base=base), base, task)
    assert type(forced[0]).__name__ == "BertForSequenceClassification" and forced[2] == "cls"
    assert type(auto[0]).__name__ == "PooledClassifier" and auto[2] == "mean"


def test_base_pooling_reads_a_hub_bases_files_through_the_hub_client(tmp_path, monkeypatch):
    # The hub is unreachable here: its client is replaced by one serving a folder, as
    # its cache would. The two files are fetched by their names inside the repository.
    import huggingface_hub

    from conftest import mark_mean_pooled

    served = mark_mean_pooled(tmp_path)
    asked = []

    def download(repo: str, name: str) -> str:
        asked.append((repo, name))
        if not (served / name).is_file():
            raise huggingface_hub.errors.EntryNotFoundError(name)
        return str(served / name)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    assert base_pooling("org/sentence-encoder") == "mean"
    assert asked == [("org/sentence-encoder", "modules.json"),
                     ("org/sentence-encoder", "1_Pooling/config.json")]  # fmt: skip
    (served / "modules.json").unlink()  # a plain HF classifier on the hub
    assert base_pooling("org/classifier") == "cls"


@pytest.mark.parametrize("path", ["../../etc", "/etc"])
def test_base_pooling_is_cls_when_a_hub_bases_module_path_climbs_out(tmp_path, monkeypatch, path):
    import huggingface_hub

    modules = [{"path": path, "type": "sentence_transformers.models.Pooling"}]
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    fetched = []

    def download(repo: str, name: str) -> str:
        fetched.append(name)
        return str(tmp_path / name)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    assert base_pooling("org/crafted") == "cls"
    assert fetched == ["modules.json"]  # the climbing name was never asked for


def test_base_pooling_is_cls_when_a_pooling_file_is_over_its_cap(tmp_path):
    from conftest import mark_mean_pooled
    from edgekd.distill.pooled import POOLING_FILE_BYTES

    base = mark_mean_pooled(tmp_path)
    config = base / "1_Pooling" / "config.json"
    config.write_text(config.read_text() + " " * POOLING_FILE_BYTES)  # valid JSON, too big
    assert base_pooling(base) == "cls"
