"""Extending edgekd: each kind of component is one new module plus one registry line.

Each test writes a plugin into a temp folder, as a user's own package would be,
registers it with one line (`monkeypatch.setitem` on the registry's table, so the
built-in registries are left as they were), and runs it through the stages. No
edgekd file changes: that is the claim under test.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from edgekd.api import (
    Budget,
    DataConfig,
    DistillConfig,
    ExportConfig,
    ProfileConfig,
    check,
    distill,
    export,
    profile,
)
from edgekd.errors import EdgeKDError
from edgekd.registry import AUGMENTERS, DEVICES, FORMATS, STUDENTS

# A student package: mean of word embeddings → linear layer (a fastText-like bag).
BAG_STUDENT = """
import torch
from pydantic import Field
from torch import nn

from edgekd.config import StrictModel
from edgekd.data import sides_of
from edgekd.students.base import Student
from edgekd.students.tokenizer import build_word_tokenizer


class BagConfig(StrictModel):
    dim: int = Field(16, ge=1, description="Embedding width.")
    max_length: int = Field(32, ge=1, description="Tokens per text.")


class BagStudent(Student):
    name = "bag"
    Config = BagConfig

    def __init__(self, config, vocab_size, num_labels):
        super().__init__(config, vocab_size, num_labels)
        self.embedding = nn.Embedding(vocab_size, config.dim, padding_idx=0)
        self.out = nn.Linear(config.dim, num_labels)

    def forward(self, input_ids, attention_mask):
        mask = attention_mask.unsqueeze(-1).to(self.embedding.weight.dtype)
        mean = (self.embedding(input_ids) * mask).sum(1) / mask.sum(1).clamp_min(1.0)
        return self.out(mean)

    @classmethod
    def prepare(cls, options, texts, num_labels, teacher, teacher_tokenizer):
        config = BagConfig(**options)
        tok = build_word_tokenizer(list(sides_of(texts)), 5000, 1, True, config.max_length)
        return cls(config, tok.vocab_size, num_labels), tok
"""

# A training-time method in one file: Pereyra et al.'s (2017) confidence penalty, a
# term −β·H(p) on the student's own distribution, counting the steps it joins and the
# backward passes its term takes part in (its hook fires only if the loop adds it).
CONFIDENCE_METHOD = """
from pydantic import Field

from edgekd.config import StrictModel
from edgekd.distill.methods import TrainingMethod
from edgekd.errors import EdgeKDError


class ConfidenceOptions(StrictModel):
    beta: float = Field(0.1, ge=0, description="Weight of the entropy bonus.")


class ConfidencePenalty(TrainingMethod):
    Config = ConfidenceOptions
    steps = 0
    backward = 0

    def __init__(self, beta):
        self.beta = beta

    @classmethod
    def check(cls, cfg, student_cls, options):
        if cfg.student.name != "bilstm":
            raise EdgeKDError("confidence is tried on the bilstm student only")

    @classmethod
    def build(cls, options, run):
        return cls(options.beta)

    def loss(self, step):
        type(self).steps += 1
        log_p = step.logits.log_softmax(-1)
        term = self.beta * (log_p.exp() * log_p).sum(-1).mean()  # −β·H(p)
        term.register_hook(lambda grad: setattr(type(self), "backward", type(self).backward + 1))
        return term
"""

# An export format in one file: the fp32 graph's operator counts, as `ops.json`.
OPCOUNT_FORMAT = """
import collections
import json

import onnx
from pydantic import Field

from edgekd.config import StrictModel
from edgekd.exporters.base import ExportFormat


class OpCountOptions(StrictModel):
    top: int = Field(3, ge=1, description="Most frequent operators kept.")


class OpCountFormat(ExportFormat):
    name = "opcount"
    Config = OpCountOptions

    def write(self, job):
        graph = onnx.load(str(job.folder / "model.onnx")).graph
        counts = collections.Counter(node.op_type for node in graph.node)
        top = dict(counts.most_common(self.options.top))
        (job.folder / "ops.json").write_text(json.dumps(top))
        job.report["opcount"] = top
"""

# A device runner in one file: the agent in a child process under a named Python, with
# one option of its own.
PYTHON_RUNNER = """
import json
from pathlib import Path

from pydantic import Field

from edgekd.config import StrictModel
from edgekd.devices.base import AGENT, Device, run_command


class PythonOptions(StrictModel):
    python: str = Field(..., description="The interpreter that runs the agent.")


class PythonDevice(Device):
    Config = PythonOptions

    def run_agent(self, files, args):
        cmd = [self.opts.python, str(AGENT), *args, *self.spec.agent_args()]
        for flag, path in files.items():
            cmd += [f"--{flag}", str(path)]
        out = run_command(cmd, f"agent on {self.spec.name}", self.spec.timeout_s)
        return json.loads(out.strip().splitlines()[-1])
"""


def plugin(folder: Path, module: str, source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Write `module` (a dotted name: a package's file) under `folder`, importable."""
    path = folder.joinpath(*module.split(".")).with_suffix(".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    for parent in path.relative_to(folder).parents:
        if parent != Path("."):
            (folder / parent / "__init__.py").touch()
    path.write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(folder))


def test_a_student_package_and_one_registry_line_go_through_every_stage(
    tmp_path, tiny_data, tiny_teacher, monkeypatch
):
    plugin(tmp_path / "plugins", "bagkd.student", BAG_STUDENT, monkeypatch)
    monkeypatch.setitem(STUDENTS._entries, "bag", "bagkd.student:BagStudent")  # the one line

    # Its options are validated by its own model when the config is read.
    with pytest.raises(EdgeKDError, match=r"student 'bag' has no option 'hidden_size'; valid: dim"):
        DistillConfig(
            teacher=str(tiny_teacher), student={"name": "bag", "options": {"hidden_size": 8}}
        )

    cfg = DistillConfig(
        teacher=str(tiny_teacher),
        data=DataConfig(spec=str(tiny_data)),
        student={"name": "bag", "options": {"dim": 8}},
        epochs=2,
        batch_size=16,
    )
    metrics = distill(cfg, tmp_path / "student")
    assert metrics.student == "bag" and 0 <= metrics.student_accuracy <= 1

    report = export(ExportConfig(guard=False), tmp_path / "student", tmp_path / "export")
    assert set(report.models) == {"fp32", "int8"}
    assert report.models["fp32"].agreement == 1.0  # ONNX matches PyTorch row for row

    (result,) = profile(
        ProfileConfig(runs=4, trials=2, warmup=1, seq_lens=[8]),
        [tmp_path / "export" / "model.int8.onnx"],
        tmp_path / "export",
    )
    assert result.p90_ms > 0
    verdict = check(
        Budget(model="int8", max_bytes=10_000_000, min_agreement=0.5), [tmp_path / "export"]
    )
    assert {r.limit: r.measured is not None for r in verdict.limits} == {
        "max_bytes": True,
        "min_agreement": True,
    }


def test_a_training_method_in_one_file_and_one_registry_line_joins_every_step(
    tmp_path, tiny_data, tiny_teacher, monkeypatch
):
    plugin(tmp_path / "plugins", "confkd.method", CONFIDENCE_METHOD, monkeypatch)
    monkeypatch.setitem(AUGMENTERS._entries, "confidence", "confkd.method:ConfidencePenalty")

    def config(student: str, **options: float) -> DistillConfig:
        return DistillConfig(
            teacher=str(tiny_teacher),
            data=DataConfig(spec=str(tiny_data)),
            student={"name": student},
            augment={"methods": [{"name": "confidence", "options": options}]},
            epochs=2,
            batch_size=16,
        )

    # Its options are validated by its own model, its `check` runs before any data.
    with pytest.raises(EdgeKDError, match=r"has no option 'gamma'; valid: beta"):
        config("bilstm", gamma=1.0)
    with pytest.raises(EdgeKDError, match="tried on the bilstm student only"):
        distill(config("cnn"), tmp_path / "refused")
    assert not (tmp_path / "refused").exists()

    metrics = distill(config("bilstm", beta=0.5), tmp_path / "student")
    from confkd.method import ConfidencePenalty  # type: ignore[import-not-found]

    # Called on the training steps: at least one batch in each of the 2 epochs.
    assert ConfidencePenalty.steps >= 2
    assert ConfidencePenalty.backward == ConfidencePenalty.steps  # each term was trained on
    assert metrics.student == "bilstm"


def test_an_export_format_in_one_file_and_one_registry_line_is_written(
    tmp_path, tiny_data, tiny_teacher, monkeypatch
):
    from conftest import distill_tiny_bilstm

    plugin(tmp_path / "plugins", "opcount", OPCOUNT_FORMAT, monkeypatch)
    monkeypatch.setitem(FORMATS._entries, "opcount", "opcount:OpCountFormat")  # the one line

    with pytest.raises(EdgeKDError, match=r"export format 'opcount': option 'top'"):
        ExportConfig(formats=[{"name": "opcount", "options": {"top": 0}}])
    with pytest.raises(EdgeKDError, match="unknown export format 'opcnt'; valid names: e2e, int8"):
        ExportConfig(formats=["opcnt"])

    student = distill_tiny_bilstm(tiny_teacher, tiny_data, tmp_path / "student")
    cfg = ExportConfig(int8=False, formats=[{"name": "opcount", "options": {"top": 2}}])
    report = export(cfg, student, tmp_path / "export")
    ops = json.loads((tmp_path / "export" / "ops.json").read_text())
    import collections

    import onnx

    graph = onnx.load(str(tmp_path / "export" / "model.onnx")).graph
    assert ops == dict(collections.Counter(n.op_type for n in graph.node).most_common(2))
    assert report.formats == ["onnx", "opcount"] and report.opcount == ops


def test_a_device_runner_in_one_file_and_one_registry_line_profiles(
    tmp_path, tiny_data, tiny_teacher, monkeypatch
):
    import sys

    from conftest import distill_tiny_bilstm

    plugin(tmp_path / "plugins", "pyrunner", PYTHON_RUNNER, monkeypatch)
    monkeypatch.setitem(DEVICES._entries, "python", "pyrunner:PythonDevice")  # the one line

    spec = tmp_path / "box.yaml"
    # The runner's own field sits beside the common ones, typed by its model.
    spec.write_text(f"name: box\nrunner: python\npython: {sys.executable}\nthreads: 1\n")
    typo = tmp_path / "typo.yaml"
    typo.write_text("name: box\nrunner: python\npyton: python3\n")
    from edgekd.devices.base import load_spec

    with pytest.raises(
        EdgeKDError, match="runner 'python' has no field 'pyton'; its own fields: python"
    ):
        load_spec(str(typo))

    student = distill_tiny_bilstm(tiny_teacher, tiny_data, tmp_path / "student")
    export(ExportConfig(int8=False), student, tmp_path / "export")
    (result,) = profile(
        ProfileConfig(devices=[str(spec)], runs=4, trials=2, warmup=1, seq_lens=[8]),
        [tmp_path / "export" / "model.onnx"],
        tmp_path / "export",
    )
    assert result.device == "box" and result.p50_ms > 0
    assert (tmp_path / "export" / "profile-box-model.json").is_file()
