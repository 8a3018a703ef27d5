"""The trim stage: drop the embedding rows a student's training data never uses."""

from __future__ import annotations

from pathlib import Path

from edgekd.artifacts import TrimReport
from edgekd.data import align_labels, load_task
from edgekd.errors import EdgeKDError
from edgekd.io import check_not_input, check_output
from edgekd.stages.export import student_data_config
from edgekd.students.predict import StudentPredictor, score
from edgekd.students.trim import trim_student


def trim(
    student_dir: str | Path,
    out_dir: str | Path,
    min_freq: int = 1,
    keep_top: int | None = None,
    overwrite: bool = False,
) -> TrimReport:
    """Trim `student_dir` into `out_dir` (tokens seen at least `min_freq` times in its
    training data, at most `keep_top`); both are scored on dev, before and after."""
    student_dir, out_dir = Path(student_dir), Path(out_dir)
    check_output(out_dir, overwrite)  # before the student or its data loads
    check_not_input(out_dir, [student_dir])
    data = student_data_config(student_dir)
    if data is None:
        raise EdgeKDError(f"{student_dir} has no config.yaml naming its data; trim a distilled one")
    check_not_input(out_dir, [data.spec])
    before = StudentPredictor(student_dir)
    task = align_labels(load_task(data), before.label_names)
    counts = trim_student(student_dir, out_dir, task.train.texts, min_freq, keep_top, overwrite)
    accuracy = {
        name: score(StudentPredictor(path), task.dev.texts, task.dev.labels)["accuracy"]
        for name, path in (("before", student_dir), ("after", out_dir))
    }
    report = TrimReport(
        **counts, dev_accuracy_before=accuracy["before"], dev_accuracy_after=accuracy["after"]
    )
    report.write(out_dir)
    return report
