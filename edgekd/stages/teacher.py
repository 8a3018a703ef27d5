"""The teacher stage: fine-tune a BERT-style encoder into a classifier folder."""

from __future__ import annotations

from pathlib import Path

from edgekd.artifacts import CONFIG, TeacherMetrics
from edgekd.config import TeacherConfig, save_config
from edgekd.data import load_task
from edgekd.distill.checkpoint import checkpoint_dir, discard_checkpoint
from edgekd.distill.teacher import finetune
from edgekd.distill.trainer import check_precision
from edgekd.io import atomic_dir, check_not_input, check_output


def teacher(cfg: TeacherConfig, out_dir: str | Path, overwrite: bool = False) -> TeacherMetrics:
    """The teacher stage: fine-tune into `out_dir` (written whole, or not at all) with its
    resolved config.yaml and metrics.json; a killed run resumes from its last epoch."""
    check_output(out_dir, overwrite)  # before any data is read
    check_not_input(out_dir, [cfg.data.spec, cfg.base])
    check_precision(cfg.precision)  # before any data is read
    task = load_task(cfg.data)
    with atomic_dir(out_dir, overwrite) as tmp:
        found, resolved = finetune(cfg, task, tmp, checkpoint_dir(out_dir))
        metrics = TeacherMetrics(**found)
        save_config(resolved, tmp / CONFIG)  # what was trained: rerunning it reproduces it
        metrics.write(tmp)
    discard_checkpoint(out_dir)
    return metrics
