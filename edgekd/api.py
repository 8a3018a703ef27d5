"""The Python API: the stages the CLI runs, as functions, with their configs.

    from edgekd import api as kd

    student = kd.distill(kd.DistillConfig(teacher=..., data=kd.DataConfig(spec=...)), "out/s")
    export = kd.export(kd.ExportConfig(int8=True), "out/s", "out/e")
    (prof,) = kd.profile(kd.ProfileConfig(threads=1), [Path("out/e") / export.models["int8"].path])
    verdict = kd.check(kd.Budget(max_bytes=2_000_000), ["out/e"])
    vs_main = kd.check(None, ["out/e"], baseline="main/e")  # regressions against a baseline
    fits = kd.plan(kd.PlanConfig(teacher=..., data=...), kd.Budget(max_p90_ms=2), "out/plan")

Each stage is the stage library's own function (`edgekd.stages`), called here as the CLI
and recipes call it: its config first, then its inputs, then its output folder. It owns
that folder (refused if it holds files edgekd did not write, unless `overwrite=True`;
`profile` and `check` add their files to it) and returns the typed artifact it wrote
(`edgekd.artifacts`). Errors a user can cause raise `EdgeKDError` with a one-line
message naming the fix.
"""

from __future__ import annotations

from edgekd.artifacts import (
    BundleManifest,
    CheckResult,
    DistillMetrics,
    EvalResult,
    ExportReport,
    PlanResult,
    ProfileResult,
    ProfileSweep,
    TeacherMetrics,
    TrimReport,
)
from edgekd.budget import Budget, load_budget
from edgekd.config import (
    AugmentConfig,
    DataConfig,
    DistillConfig,
    ExportConfig,
    PlanConfig,
    ProfileConfig,
    TeacherConfig,
    load_yaml,
    validate,
)
from edgekd.errors import EdgeKDError
from edgekd.recipe import Recipe, load_recipe, run_recipe
from edgekd.stages.bundle import Bundle
from edgekd.stages.bundle import make_bundle as bundle
from edgekd.stages.check import check
from edgekd.stages.distill import distill
from edgekd.stages.evaluate import evaluate
from edgekd.stages.export import export
from edgekd.stages.plan import plan
from edgekd.stages.profile import profile
from edgekd.stages.report import report
from edgekd.stages.teacher import teacher
from edgekd.stages.trim import trim

__all__ = [
    "AugmentConfig",
    "Budget",
    "Bundle",
    "BundleManifest",
    "CheckResult",
    "DataConfig",
    "DistillConfig",
    "DistillMetrics",
    "EdgeKDError",
    "EvalResult",
    "ExportConfig",
    "ExportReport",
    "PlanConfig",
    "PlanResult",
    "ProfileConfig",
    "ProfileResult",
    "ProfileSweep",
    "Recipe",
    "TeacherConfig",
    "TeacherMetrics",
    "TrimReport",
    "bundle",
    "check",
    "distill",
    "evaluate",
    "export",
    "load_budget",
    "load_recipe",
    "load_yaml",
    "plan",
    "profile",
    "report",
    "run_recipe",
    "teacher",
    "trim",
    "validate",
]
