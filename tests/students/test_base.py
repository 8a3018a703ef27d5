"""The student folder: `save_student` writes a typed, versioned student.json, and
`load_student` refuses a crafted or damaged folder in one line."""

import json
import shutil

import pytest

from edgekd import __version__
from edgekd.artifacts import StudentMeta
from edgekd.errors import EdgeKDError
from edgekd.students.base import load_student, save_student


def test_save_student_writes_student_json_stamped_with_the_edgekd_version(tiny_student, tmp_path):
    model, tok, labels = load_student(tiny_student)
    folder = tmp_path / "s"
    folder.mkdir()
    save_student(folder, model, tok, labels)
    meta = StudentMeta.read(folder)
    assert meta.edgekd_version == __version__
    assert (meta.student, meta.id2label, meta.vocab_size) == ("bilstm", labels, model.vocab_size)
    again, _, _ = load_student(folder)
    before, after = model.state_dict(), again.state_dict()
    assert before.keys() == after.keys() and all((before[k] == after[k]).all() for k in before)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m["config"].update(hidden_size=-3), "config.hidden_size"),
        (lambda m: m["config"].update(depth=9), "config.depth"),
        (lambda m: m.update(vocab_size=7), "does not hold the bilstm student"),
        # Shapes compared before anything is built: 10¹² rows would be 64 TB of fp32.
        (lambda m: m.update(vocab_size=10**12), r"embedding.weight: \(\d+, \d+\) stored, "),
        (lambda m: m.update(num_labels=3), "3 labels but 2 names in id2label"),
        (lambda m: m.update(vocab_size=0), "vocab_size"),
        (lambda m: m.pop("id2label"), "id2label"),
        (lambda m: m.update(student="lstm9"), "unknown student 'lstm9'"),
    ],
)
def test_load_student_refuses_a_crafted_student_json_in_one_line(
    tiny_student, tmp_path, edit, message
):
    folder = tmp_path / "s"
    shutil.copytree(tiny_student, folder)
    meta = json.loads((folder / "student.json").read_text())
    edit(meta)
    (folder / "student.json").write_text(json.dumps(meta))
    with pytest.raises(EdgeKDError, match=message) as e:
        load_student(folder)
    assert "\n" not in str(e.value)


def test_load_student_refuses_weights_that_are_not_safetensors(tiny_student, tmp_path):
    folder = tmp_path / "s"
    shutil.copytree(tiny_student, folder)
    (folder / "model.safetensors").write_bytes(b"\x80\x04 not a tensor file")
    with pytest.raises(EdgeKDError, match=r"model\.safetensors does not hold"):
        load_student(folder)


@pytest.mark.parametrize("text", ["{not json", "{}", '{"model": {"type": "Evil"}}'])
def test_load_student_refuses_a_crafted_tokenizer_json_in_one_line(tiny_student, tmp_path, text):
    folder = tmp_path / "s"
    shutil.copytree(tiny_student, folder)
    (folder / "tokenizer.json").write_text(text)
    with pytest.raises(EdgeKDError, match="is not a tokenizer file the tokenizers library") as e:
        load_student(folder)
    assert "\n" not in str(e.value) and "edgekd distill" in str(e.value)
