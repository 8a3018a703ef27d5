"""Shared fixtures: a tiny random BERT classifier and a tiny labelled dataset, both
built here (nothing downloaded), plus the path to ../shared when it is present."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest


def _worker_cores() -> None:
    """On a `pytest -n` worker, run on its own share of the cores: N workers on N cores
    each take one, and the edgekd commands its tests start see one (edgekd sizes its
    threads by the affinity mask). Without it each worker's torch runs a thread per core
    beside the other's: the fast tier took 5.4 minutes on 2 workers, 3.7 on one."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    share = len(cores) // workers
    if share >= 1:
        index = int(os.environ["PYTEST_XDIST_WORKER"].removeprefix("gw"))
        os.sched_setaffinity(0, cores[index * share : (index + 1) * share])


_worker_cores()  # before torch is imported: its thread pool is sized from the mask

import edgekd  # noqa: E402, F401  (first: it turns on MKL's strict mode before torch computes)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

POSITIVE = ["good", "great", "fine", "love", "superb", "fun"]
NEGATIVE = ["bad", "awful", "poor", "hate", "dull", "boring"]
# A BiLSTM student small enough to train in a second: 16-d embeddings, 8 units a
# direction, a 16-unit MLP. Tests that only need *a* student use this one.
SMALL_BILSTM = {"embedding_dim": 16, "hidden_size": 8, "mlp_size": 16}
# Augmented variants per text for a test whose subject is not the transfer set. Tiny
# data is a small task: auto draws 200 per text with neighbour (~28,000 candidates from
# tiny_data's ~140 training texts, ~10 s a distill); 4 give ~560.
FEW_VARIANTS = 4


def _native_bf16() -> bool:
    from edgekd.distill.trainer import native_bf16

    return native_bf16()


# bf16 tests run where this machine computes bf16 natively: the only place
# `precision: bf16` runs (elsewhere it is refused).
NATIVE_BF16 = pytest.mark.skipif(
    not _native_bf16(), reason="no native bf16 here (AVX512-BF16 or AMX)"
)

FILLER = ["the", "movie", "plot", "was", "a", "and", "film", "actors", "really", "very"]

# How `pytest -n auto` (README) splits the suite over its workers: `--dist loadfile
# --no-loadscope-reorder` (pyproject.toml), a test file per unit, in collection order,
# but with the units below. The documentation's blocks (tests/test_readme.py) take 10 of
# the full suite's 24 minutes serial on 2 cores, in one sandbox: as one unit, dealt late,
# they outlast the rest of the suite on the other worker (18.4 minutes of wall, 24 serial).
# Split in two halves, each in a sandbox of its own (a half starts from the README's
# Step by step, as a page run alone with -k does) and dealt first, they don't: with the
# workers pinned (_worker_cores), 10.9 minutes on a fresh clone (7dd2dc4).
DOCS_GROUPS = ("docs-guides", "docs-benchmarks")
# Benchmark pages whose commands read what a guide's wrote: profile_hygiene.py profiles
# the students of `edgekd run examples/recipe-sst2-bilstm.yaml` (docs/guides/recipes.md).
AFTER_GUIDES = ("docs/benchmarks/profiling.md",)


def xdist_unit(nodeid: str) -> str:
    """The unit a test is dealt to a worker in: its file, but a block of the docs in its
    half (DOCS_GROUPS): the README's, the guides' and examples/ (with AFTER_GUIDES), or
    the benchmark pages' and the lab notes'. A block's test id opens with its page."""
    path, _, name = nodeid.partition("::")
    if path != "tests/test_readme.py" or "[" not in name:
        return path
    page = name.partition("[")[2].partition(":")[0]
    benchmarks = page.startswith(("docs/benchmarks/", "benchmarks/")) and page not in AFTER_GUIDES
    return DOCS_GROUPS[1] if benchmarks else DOCS_GROUPS[0]


@pytest.hookimpl(optionalhook=True)  # an xdist hook: without pytest-xdist, never called
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: a worker per core this process may run on. xdist's own count asks
    psutil, which reads the host's cores inside a container limited to a few (64
    workers of ~2 GB each on a 2-core CI box); the affinity mask is what we get."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` with xdist_unit's units. (xdist's `loadgroup` marks can't do it
    under pytest 9.2: xdist 3.8 renames a grouped test through `item._nodeid`, which
    pytest 9.2 no longer reads, so every test became its own unit.)"""
    if config.getvalue("dist") != "loadfile":
        return None  # another --dist given on the command line: xdist's own
    from xdist.scheduler import LoadScopeScheduling

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_unit(nodeid)

    return Units(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, the docs' halves first: workers report this order, and the
    scheduler deals units in it (--no-loadscope-reorder). A stable sort, so each unit
    keeps its tests' order (the docs' blocks build on each other)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: xdist_unit(item.nodeid) not in DOCS_GROUPS)


@pytest.fixture(scope="session")
def shared() -> Path:
    if not (SHARED / "data" / "sst2" / "dev.tsv").is_file():
        pytest.skip(f"../shared data not found at {SHARED}")
    return SHARED


def make_rows(n: int, seed: int) -> list[tuple[str, int]]:
    """Sentences whose label is set by one sentiment word among filler words."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.randint(0, 1)
        words = rng.sample(FILLER, rng.randint(1, 6))
        words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE if label else NEGATIVE))
        rows.append((" ".join(words), label))
    return rows


def make_pair_rows(n: int, seed: int) -> list[tuple[str, str, int]]:
    """Sentence pairs labelled 1 when both sides carry the same sentiment."""
    rng = random.Random(seed)
    rows = []
    for (a, ya), (b, yb) in zip(make_rows(n, seed), make_rows(n, seed + 100), strict=True):
        if rng.random() < 0.5:  # balance the classes: half the pairs agree by construction
            b, yb = a, ya
        rows.append((a, b, int(ya == yb)))
    return rows


@pytest.fixture(scope="session")
def pair_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pair task: train.tsv (160 rows) and dev.tsv (40) with sentence1, sentence2, label."""
    folder = tmp_path_factory.mktemp("pairs")
    for name, n, seed in (("train", 160, 1), ("dev", 40, 2)):
        rows = make_pair_rows(n, seed)
        (folder / f"{name}.tsv").write_text(
            "sentence1\tsentence2\tlabel\n" + "".join(f"{a}\t{b}\t{y}\n" for a, b, y in rows)
        )
    return folder


def write_tsv(path: Path, rows: list[tuple[str, int]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows))
    return path


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GLUE-style folder: train.tsv (160 rows) and dev.tsv (40 rows)."""
    folder = tmp_path_factory.mktemp("data")
    write_tsv(folder / "train.tsv", make_rows(160, seed=1))
    write_tsv(folder / "dev.tsv", make_rows(40, seed=2))
    return folder


def identity_model(path: Path) -> Path:
    """A one-node ONNX graph (input_ids → Identity): the cheapest model an agent can time."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    y = helper.make_tensor_value_info("logits", TensorProto.INT64, ["batch", "seq"])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["input_ids"], ["logits"])], "g", [x], [y]
    )
    # IR 10: onnx 1.23 writes IR 14 by default, newer than onnxruntime 1.31 reads (13).
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, str(path))
    return path


def build_tiny_bert(folder: Path, classifier: bool = True, seed: int = 0, layers: int = 2) -> Path:
    """A `layers`-layer (default 2), hidden-32 BERT with a WordPiece vocabulary of the
    test words."""
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        BertModel,
        BertTokenizerFast,
    )

    folder.mkdir(parents=True, exist_ok=True)
    words = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        *FILLER,
        *POSITIVE,
        *NEGATIVE,
        "##s",
        "##ly",
        "x",
        "y",
        "z",
    ]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    tok = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    config = BertConfig(
        vocab_size=len(words),
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=2,
        id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1},
    )
    torch.manual_seed(seed)
    # A bare encoder stands in for a pretrained base like the packaged MiniLM.
    model = BertForSequenceClassification(config) if classifier else BertModel(config)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


def mark_mean_pooled(folder: Path) -> Path:
    """Give a bare encoder folder sentence-transformers' files saying it was trained on
    the mean of its tokens (as the packaged MiniLM's say)."""
    import json

    kinds = ("Transformer", "Pooling")
    modules = [
        {"path": path, "type": f"sentence_transformers.models.{kind}"}
        for path, kind in zip(("", "1_Pooling"), kinds, strict=True)
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    pooling = {"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return folder


def build_other_vocab(folder: Path) -> Path:
    """A student tokenizer whose vocabulary differs from the tiny teacher's."""
    from transformers import BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "films", "bad", "the"]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    return folder


def distill_tiny_bilstm(teacher: Path, data: Path, out: Path, epochs: int = 1) -> Path:
    """A small BiLSTM student (16-d embeddings, 8 units) distilled from `teacher`, on
    `FEW_VARIANTS` augmented variants per text."""
    from edgekd.config import DataConfig, DistillConfig
    from edgekd.stages.distill import distill as run_distill

    cfg = DistillConfig(
        teacher=str(teacher),
        data=DataConfig(spec=str(data)),
        epochs=epochs,
        student={"name": "bilstm", "options": SMALL_BILSTM},
        augment={"n_iter": FEW_VARIANTS},
    )
    run_distill(cfg, out)
    return out


@pytest.fixture(scope="session")
def tiny_teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("teacher"))


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime in ns) of every file under `folder`, by relative path."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="session")
def tiny_chain(tmp_path_factory: pytest.TempPathFactory, tiny_teacher: Path, tiny_data: Path):
    """One tiny chain for the whole run, read-only: `student/` (the BiLSTM of
    `distill_tiny_bilstm`), `export/` (fp32 + int8, no guard) and `bundle/` + `bundle.zip`
    beside them. Built once (~1 s) instead of once per module; a test that must change
    one of them copies it first, and teardown fails the run if any file here changed."""
    from edgekd.config import ExportConfig
    from edgekd.stages.bundle import make_bundle
    from edgekd.stages.export import export as run_export

    root = tmp_path_factory.mktemp("chain")
    distill_tiny_bilstm(tiny_teacher, tiny_data, root / "student")
    run_export(ExportConfig(guard=False), root / "student", root / "export")
    make_bundle(root / "export", root / "bundle")
    before = snapshot(root)
    yield root
    assert snapshot(root) == before, f"a test wrote into the shared chain at {root}: copy it first"


@pytest.fixture(scope="session")
def tiny_student(tiny_chain: Path) -> Path:
    return tiny_chain / "student"


@pytest.fixture(scope="session")
def tiny_export(tiny_chain: Path) -> Path:
    return tiny_chain / "export"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gets its own teacher-logit cache, never the user's."""
    monkeypatch.setenv("EDGEKD_CACHE", str(tmp_path / "cache"))


PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


@pytest.fixture
def offline_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Hub endpoint that cannot resolve, with no proxy or offline flag to mask it."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://no-such-host.invalid")


def through_cache(cache: Path, key: str, compute: Any, rows: int = 3, width: int = 2):
    """(logits, hit): `rows` × `width` logits under `key` in `cache`, as the labelling
    path reads and fills it (`group_logits` on one process), `compute()` labelling."""
    from edgekd.distill.labeling import ALONE, Meter, group_logits

    def labeler(texts: list[Any], what: str) -> Any:
        return compute()

    logits, _, hit = group_logits(
        ALONE, cache, key, lambda: ["x"] * rows, rows, labeler, "test", width, Meter()
    )
    return logits, hit


def assert_refused(result: Any, *fragments: str, code: int = 2) -> str:
    """A CLI refusal as users must see it: exit `code`, one `error:` line on stderr
    naming each of `fragments`, no traceback. Returns the line."""
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == code, (result.exit_code, result.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]
