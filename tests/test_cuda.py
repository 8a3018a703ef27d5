"""The chain on a CUDA machine: accelerate puts the teacher being fine-tuned and the
student being trained on the GPU, and every pass that reads them (the linear probe,
scoring, labelling, the student's predictions) follows them there. These run only
where torch sees a GPU; CI has none, so they are run by hand on one (see CONTRIBUTING).
A run of the suite on an H100 found the probe and the student's scoring feeding host
tensors to GPU weights (`index is on cpu, different from other tensors on cuda:0`)."""

import numpy as np
import pytest
import torch

from conftest import SMALL_BILSTM
from edgekd.config import DataConfig, DistillConfig, TeacherConfig

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (torch sees none)"
)


def test_teacher_fine_tunes_on_the_gpu_through_its_linear_probe(tmp_path, tiny_data):
    from conftest import build_tiny_bert
    from edgekd.stages.teacher import teacher

    base = build_tiny_bert(tmp_path / "base", classifier=False)
    cfg = TeacherConfig(base=str(base), data=DataConfig(spec=str(tiny_data)), epochs=1)
    m = teacher(cfg, tmp_path / "teacher")
    assert 0 <= m.dev_accuracy <= 1


def test_teacher_logits_follow_a_model_on_the_gpu(tiny_teacher):
    from edgekd.distill.teacher import load_teacher, teacher_logits

    model, tok = load_teacher(str(tiny_teacher))
    texts = ["good film", "a bad and dull film indeed"]
    on_cpu = teacher_logits(model, tok, texts)
    on_gpu = teacher_logits(model.to("cuda"), tok, texts)
    assert np.abs(on_cpu - on_gpu).max() < 1e-4


@pytest.mark.parametrize("student", ["bilstm", "bert"])
def test_distill_trains_and_scores_a_student_on_the_gpu(tiny_teacher, tiny_data, tmp_path, student):
    from edgekd.stages.distill import distill

    options = {"bilstm": SMALL_BILSTM,
               "bert": {"layers": 1}}[student]  # fmt: skip
    cfg = DistillConfig(
        teacher=str(tiny_teacher), data=DataConfig(spec=str(tiny_data)), epochs=2,
        student={"name": student, "options": options},
    )  # fmt: skip
    m = distill(cfg, tmp_path / "s")
    assert m.student == student and 0 <= m.agreement <= 1
