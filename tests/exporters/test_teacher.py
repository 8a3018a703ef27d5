"""The teacher's ONNX labellers (`edgekd.exporters.teacher`): where they are exported."""

import importlib.metadata as md
from pathlib import Path

import pytest

from edgekd.config import DistillConfig
from edgekd.exporters import teacher


def test_labeller_code_changes_when_the_source_preset_or_onnxruntime_changes(monkeypatch):
    from edgekd.exporters import quantize

    now = teacher.labeller_code.__wrapped__()
    assert now == teacher.labeller_code.__wrapped__() and len(now) == 64
    real = md.version
    monkeypatch.setattr(md, "version", lambda pkg: "9.9" if pkg == "onnxruntime" else real(pkg))
    newer = teacher.labeller_code.__wrapped__()
    monkeypatch.setattr(md, "version", real)
    # Another CPU: u8 weights (avx2) where this one may take s8, or the other way round.
    other = "avx2" if quantize.resolve_preset("auto").name != "avx2" else "avx512_vnni"
    monkeypatch.setattr(quantize, "resolve_preset", lambda name: quantize.PRESETS[other])
    elsewhere = teacher.labeller_code.__wrapped__()
    monkeypatch.undo()
    read = []
    monkeypatch.setattr(teacher, "source_digest", lambda roots: read.extend(roots) or "edited")
    edited = teacher.labeller_code.__wrapped__()
    assert len({now, newer, elsewhere, edited}) == 4
    # The export, the quantizer, the labelling loop and what the export traces through.
    names = {(p.parent.name, p.name) for p in read}
    assert {("exporters", "teacher.py"), ("exporters", "quantize.py")} <= names
    assert {("students", "predict.py"), ("distill", "teacher.py")} <= names
    assert ("distill", "pooled.py") in names


def test_onnx_labelers_export_folder_names_the_labeller_code(tmp_path, monkeypatch):
    # An older edgekd's export (another quantizer) stays where it was, never loaded by
    # this one; the same code finds its own export again. Nothing is exported here.
    cfg = DistillConfig(teacher="t", cache_dir=str(tmp_path))
    monkeypatch.setattr(teacher, "labeller_code", lambda: "a" * 64)
    a, again = teacher.OnnxLabelers(cfg, "t", "f" * 64), teacher.OnnxLabelers(cfg, "t", "f" * 64)
    monkeypatch.setattr(teacher, "labeller_code", lambda: "b" * 64)
    b = teacher.OnnxLabelers(cfg, "t", "f" * 64)
    assert a.folder == again.folder != b.folder
    assert (a.folder.parent, a.folder.name) == (tmp_path / "teachers", "f" * 32 + "-" + "a" * 12)
    assert b.code == "b" * 64 and not tmp_path.joinpath("teachers").exists()


def test_onnx_labelers_quantize_the_teacher_with_one_scale_per_embedding_table(
    tmp_path, monkeypatch
):
    # The students' int8 embeddings take a scale per row; the teacher's labels were
    # measured with onnxruntime's one per table (no agreement gained per row), and its
    # cached labels depend on it. Nothing is exported: the quantizer records its options.
    from edgekd.exporters import quantize

    made = []

    class Recorder:
        def __init__(self, **options):
            made.append(options)

        def quantize(self, src, dst):
            dst.write_bytes(b"int8")

    monkeypatch.setattr(quantize, "DynamicInt8Quantizer", Recorder)
    monkeypatch.setattr(teacher, "OnnxPredictor", lambda path, **kw: path)
    labelers = teacher.OnnxLabelers(
        DistillConfig(teacher="t", cache_dir=str(tmp_path)), "t", "f" * 64
    )
    labelers.folder.mkdir(parents=True)
    (labelers.folder / teacher.MODEL_FILES["fp32"]).touch()
    assert labelers.predictor("int8") == labelers.folder / teacher.MODEL_FILES["int8"]
    assert made == [{"embedding": "tensor"}]


def test_onnx_labelers_call_the_teacher_with_the_configs_batch_size(tmp_path, monkeypatch):
    # The rows a call holds set int8's labels (a call is quantized by its own rows), so
    # the size the config names, 64 unset, is the one the sessions get. Nothing is
    # exported: the model file is a stand-in and the predictor records what it was asked.
    asked = []
    monkeypatch.setattr(teacher, "OnnxPredictor", lambda path, **kw: asked.append(kw))
    for size in (None, 40):
        cfg = DistillConfig(
            teacher="t", cache_dir=str(tmp_path), **({"teacher_batch_size": size} if size else {})
        )
        labelers = teacher.OnnxLabelers(cfg, "t", "f" * 64)
        labelers.folder.mkdir(parents=True, exist_ok=True)
        (labelers.folder / teacher.MODEL_FILES["fp32"]).touch()
        labelers.predictor("fp32")
        assert asked[-1]["batch_size"] == (size or 64)


def test_first_token_teacher_runs_its_last_layer_for_cls_alone_to_the_same_logits(
    tiny_teacher, tmp_path, monkeypatch
):
    import numpy as np
    import torch

    from edgekd.distill.teacher import load_teacher, teacher_logits
    from edgekd.students.predict import OnnxPredictor

    model, tok = load_teacher(str(tiny_teacher))
    pruned = teacher.first_token_model(model, tok)
    assert pruned is not None
    widths = []
    last = model.bert.encoder.layer[-1]
    hook = last.intermediate.register_forward_hook(lambda m, i, o: widths.append(i[0].shape[1]))
    feed = tok(["good film", "a bad and dull film indeed"], padding=True, return_tensors="pt")
    with torch.inference_mode():
        pruned(**feed)
        model(**feed)
    hook.remove()
    assert widths == [1, feed["input_ids"].shape[1]]  # the FFN: [CLS] alone, then every token
    # Exported for the labellers, not through optimum, to the classifier's own logits.
    import optimum.exporters.onnx as optimum_onnx

    monkeypatch.setattr(optimum_onnx, "main_export", lambda *a, **k: 1 / 0)
    exported = []
    real = teacher.export_torch
    monkeypatch.setattr(
        teacher,
        "export_torch",
        lambda m, *a, **k: exported.append(type(m).__name__) or real(m, *a, **k),
    )
    path = teacher.export_teacher(str(tiny_teacher), tmp_path / "onnx", first_token=True)
    assert exported == ["FirstToken"]
    texts = ["good film", "a bad and dull film indeed", "films", "x y z good the " * 9]
    got = OnnxPredictor(path).logits(texts)
    assert np.abs(got - teacher_logits(model, tok, texts)).max() < teacher.POOLED_ATOL


# The classifiers `first_token_model` prunes, by family: BERT's layers (BERT, the
# RoBERTa family, ELECTRA with its narrower embeddings) and DistilBERT's in both attentions.
FAMILIES = [
    "bert",
    "roberta",
    "xlm-roberta",
    "camembert",
    "electra",
    "distilbert",
    "distilbert-sdpa",
]


def family_classifier(family: str, vocab: Path):
    """A 2-layer, 3-label classifier of `family` on the tiny teacher's WordPiece vocabulary,
    and its tokenizer. Initialised at 0.3 (not 0.02), so that its logits move by whole
    units between texts: at 0.02 they move by ~1e-4, and a pruning that drops the padding
    mask would pass a 1e-4 check."""
    import torch
    import transformers as tf

    size = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
            "intermediate_size": 64}  # fmt: skip
    distil = family.startswith("distilbert")
    # DistilBERT takes no token types.
    names = (
        ["input_ids", "attention_mask"]
        if distil
        else ["input_ids", "token_type_ids", "attention_mask"]
    )
    tok = tf.BertTokenizerFast.from_pretrained(vocab, model_input_names=names)
    common = {"vocab_size": tok.vocab_size, "max_position_embeddings": 80, "num_labels": 3,
              "pad_token_id": 0, "initializer_range": 0.3}  # fmt: skip
    torch.manual_seed(0)
    if distil:
        config = tf.DistilBertConfig(
            dim=32, n_layers=2, n_heads=2, hidden_dim=64, **common,
            attn_implementation="sdpa" if family.endswith("sdpa") else "eager",
        )  # fmt: skip
        model = tf.DistilBertForSequenceClassification(config)
    else:
        config_class, model_class = {
            "bert": (tf.BertConfig, tf.BertForSequenceClassification),
            "roberta": (tf.RobertaConfig, tf.RobertaForSequenceClassification),
            "xlm-roberta": (tf.XLMRobertaConfig, tf.XLMRobertaForSequenceClassification),
            "camembert": (tf.CamembertConfig, tf.CamembertForSequenceClassification),
            "electra": (tf.ElectraConfig, tf.ElectraForSequenceClassification),
        }[family]
        extra = {"embedding_size": 16} if family == "electra" else {}
        model = model_class(config_class(**size, **common, **extra))
    return model.eval(), tok


@pytest.mark.parametrize("family", FAMILIES)
def test_first_token_model_runs_the_last_layer_for_one_token_to_the_same_logits(
    family, tiny_teacher, monkeypatch
):
    import torch

    model, tok = family_classifier(family, tiny_teacher)
    texts = ["good film", "a bad and dull film indeed", "x y z good the " * 9]
    feed = tok(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        want = model(**feed).logits
    assert float((want - want[0]).abs().max()) > 0.1  # logits that tell texts apart
    pruned = teacher.first_token_model(model, tok)
    assert pruned is not None
    last = model.base_model.encoder.layer[-1] if hasattr(model.base_model, "encoder") else None
    ffn = last.intermediate if last is not None else model.distilbert.transformer.layer[-1].ffn.lin1
    widths = []
    hook = ffn.register_forward_hook(lambda m, i, o: widths.append(i[0].shape[1]))
    with torch.inference_mode():
        got = pruned(**feed).logits
    hook.remove()
    assert widths == [1]  # the last FFN ran for the first token alone
    assert float((got - want).abs().max()) <= teacher.POOLED_ATOL
    # The check is what lets it label: an attention that forgets the padding is refused.
    real = teacher._first_attention
    monkeypatch.setattr(
        teacher, "_first_attention", lambda q, k, v, n, added: real(q, k, v, n, added * 0)
    )
    assert teacher.first_token_model(model, tok) is None


@pytest.mark.parametrize("family", ["roberta", "electra", "distilbert"])
def test_export_teacher_prunes_each_family_to_its_classifiers_logits(
    family, tiny_teacher, tmp_path, monkeypatch, capsys
):
    import numpy as np
    import optimum.exporters.onnx as optimum_onnx

    from edgekd.distill.teacher import load_teacher, teacher_logits
    from edgekd.students.predict import OnnxPredictor

    model, tok = family_classifier(family, tiny_teacher)
    model.save_pretrained(tmp_path / "teacher")
    tok.save_pretrained(tmp_path / "teacher")
    monkeypatch.setattr(optimum_onnx, "main_export", lambda *a, **k: 1 / 0)
    path = teacher.export_teacher(str(tmp_path / "teacher"), tmp_path / "onnx", first_token=True)
    assert "whole teacher graph" not in "".join(capsys.readouterr())
    model, tok = load_teacher(str(tmp_path / "teacher"))
    texts = ["good film", "a bad and dull film indeed", "films", "x y z good the " * 9]
    want = teacher_logits(model, tok, texts)
    assert np.abs(OnnxPredictor(path).logits(texts) - want).max() < teacher.POOLED_ATOL


def test_first_token_teacher_is_refused_where_the_logits_may_read_other_tokens(
    tiny_teacher, monkeypatch
):
    from edgekd.distill.teacher import load_teacher

    model, tok = load_teacher(str(tiny_teacher))
    model.config.position_embedding_type = "relative_key"  # attention reads positions
    assert teacher.first_token_model(model, tok) is None
    model.config.position_embedding_type = "absolute"
    monkeypatch.setattr(teacher, "POOLED_ATOL", -1.0)  # any difference at all: refused
    assert teacher.first_token_model(model, tok) is None
    assert teacher.first_token_model(model.bert, tok) is None  # not a classifier


def test_onnx_labelers_export_the_first_token_teacher(tmp_path, monkeypatch):
    asked = []

    def export(name, folder, **options):
        asked.append(options)
        folder.mkdir(parents=True)
        (folder / teacher.MODEL_FILES["fp32"]).touch()

    monkeypatch.setattr(teacher, "export_teacher", export)
    monkeypatch.setattr(teacher, "OnnxPredictor", lambda path, **kw: path)
    labelers = teacher.OnnxLabelers(
        DistillConfig(teacher="t", cache_dir=str(tmp_path)), "t", "f" * 64
    )
    labelers.predictor("fp32")
    assert asked == [{"states": False, "first_token": True}]


@pytest.mark.parametrize("stop", ["none", "raises"])
def test_first_token_teacher_falls_back_to_the_whole_graph(
    tiny_teacher, tmp_path, monkeypatch, capsys, stop
):
    import optimum.exporters.onnx as optimum_onnx

    def refuse(model, tokenizer):
        if stop == "raises":
            raise RuntimeError("no attention mask here")
        return None

    whole = []

    def main_export(name, folder, **options):
        whole.append(name)
        (Path(folder) / teacher.MODEL_FILES["fp32"]).write_bytes(b"onnx")

    monkeypatch.setattr(teacher, "first_token_model", refuse)
    monkeypatch.setattr(optimum_onnx, "main_export", main_export)
    path = teacher.export_teacher(str(tiny_teacher), tmp_path / "onnx", first_token=True)
    assert whole == [str(tiny_teacher)] and path.read_bytes() == b"onnx"
    said = "".join(capsys.readouterr())
    assert "labelling with the whole teacher graph" in said
    assert ("no attention mask here" in said) == (stop == "raises")


def test_first_token_is_not_asked_of_a_teacher_exported_with_its_states(tiny_teacher, tmp_path):
    import onnx

    path = teacher.export_teacher(
        str(tiny_teacher), tmp_path / "onnx", states=True, first_token=True
    )
    outputs = [o.name for o in onnx.load(str(path)).graph.output]
    assert outputs == ["logits", "hidden"]  # every token's last-layer state: no pruning
