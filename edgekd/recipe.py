"""`edgekd run recipe.yaml`: teacher → distill → export → profile → check → report.

A recipe is data (YAML validated by `Recipe`). Each stage writes one folder under
`out/` and a `.stage.json` holding its cache key: the sha256 of the stage's
resolved config, the keys of the stages it reads, and the content hashes of
external inputs (data files, a local teacher, the budget's limits). A rerun skips
every stage whose key is unchanged, so editing only the budget re-runs only the
check and the report that shows it. `manifest.json` records versions, input
hashes, and each stage's key, status and seconds.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import re
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from edgekd.artifacts import (
    CHECK_GLOB,
    MODEL_FILES,
    REPORT_PAGE,
    CheckResult,
    ExportReport,
    PlanResult,
    ProfileResult,
    RunManifest,
    StageMarker,
    StageRecord,
)
from edgekd.budget import Budget, load_budget
from edgekd.config import (
    PLAIN_NAME,
    DataConfig,
    DistillConfig,
    ExportConfig,
    PlanConfig,
    ProfileConfig,
    StrictModel,
    TeacherConfig,
    load_yaml,
    seed_field,
    validate,
)
from edgekd.errors import EdgeKDError
from edgekd.io import atomic_dir, check_not_input, claim_folder, config_inputs, sha256_file
from edgekd.progress import console, shown
from edgekd.registry import Component
from edgekd.resolve import layered

SAFE_NAME = re.compile(PLAIN_NAME)


class TeacherStage(StrictModel):
    path: str | None = Field(
        None, description="A fine-tuned classifier (folder or hub id); unset: fine-tune one."
    )
    finetune: dict[str, Any] = Field(
        default_factory=dict,
        description="`edgekd teacher` fields (base, epochs, ...; data comes from the recipe).",
    )


class ProfileStage(StrictModel):
    devices: list[str] = Field(default_factory=lambda: ["local-cpu"], min_length=1)
    hosts: dict[str, str] = Field(default_factory=dict, description="ssh device → [user@]host.")
    threads: int | None = Field(None, ge=1, description="Unset: each device's own.")
    runs: int = Field(200, ge=1)
    trials: int = Field(5, ge=1)
    warmup: int = Field(20, ge=0)
    seq_len: int | None = Field(
        None, ge=1, description="Synthetic input tokens; unset: median dev length (teacher)."
    )
    teacher: bool = Field(True, description="Also profile the teacher's fp32 ONNX (baseline).")


class PlanStage(StrictModel):
    """`variants: plan`: the candidates `edgekd plan` times on the first profile device
    (at the profile's threads), and how many of those that fit are distilled."""

    grid: list[dict[str, Any]] | None = Field(
        None, description="Candidates, each {name, options}; unset: edgekd plan's grid."
    )
    top: int = Field(3, ge=1, description="Distil this many of the fitting candidates.")
    runs: int = Field(200, ge=1)
    trials: int = Field(5, ge=1)
    seq_len: int | None = Field(None, ge=1, description="Unset: median dev length.")


class Recipe(StrictModel):
    # Sections held as plain data (merged per variant) but read as these configs: `--set`
    # starts a missing component there from its default (distill.student.options.x).
    SECTIONS: ClassVar[dict[str, type[StrictModel]]] = {"distill": DistillConfig}

    name: str = Field(..., pattern=PLAIN_NAME)
    out: str | None = Field(None, description="Run folder; default runs/<name>.")
    seed: int = seed_field("Seed of every stage the recipe runs")
    data: DataConfig
    teacher: TeacherStage = Field(default_factory=TeacherStage)
    distill: dict[str, Any] = Field(
        default_factory=dict, description="`edgekd distill` fields (teacher and data excepted)."
    )
    variants: dict[str, dict[str, Any]] | Literal["plan"] = Field(
        default_factory=lambda: {"student": dict[str, Any]()},
        description="Student variants: name → distill fields that differ (plus `export:`); "
        "or `plan`: the top candidates of `edgekd plan` that fit the budget (see `plan:`).",
    )
    plan: PlanStage = Field(default_factory=PlanStage)
    export: ExportConfig = Field(default_factory=ExportConfig)
    profile: ProfileStage = Field(default_factory=ProfileStage)
    budget: str | dict[str, Any] = Field(..., description="Budget file path, or limits inline.")
    report: bool = True

    @field_validator("variants")
    @classmethod
    def _variant_names_are_folder_names(
        cls, value: dict[str, dict[str, Any]] | str
    ) -> dict[str, dict[str, Any]] | str:
        if isinstance(value, str):
            return value
        if not value:
            raise ValueError("list at least one variant, or write `variants: plan`")
        # Each name becomes a folder under the run folder: `../x` or `/abs` would write
        # (and replace) outside it.
        for name in value:
            if not SAFE_NAME.match(name):
                raise ValueError(
                    f"variant name {name!r} must be a plain folder name (letters, digits, "
                    "'_', '-', '.'; no '/'); rename it"
                )
        return value

    def out_dir(self) -> Path:
        return Path(self.out or f"runs/{self.name}")

    def named_variants(self) -> dict[str, dict[str, Any]]:
        """The variants, once a plan has named them (`planned`)."""
        if isinstance(self.variants, str):
            raise EdgeKDError("recipe: `variants: plan` is resolved by running the plan stage")
        return self.variants

    def planned(self, plan: PlanResult) -> Recipe:
        """This recipe with `variants: plan` replaced by the plan's top candidates."""
        top = plan.top(self.plan.top)
        if not top:
            raise EdgeKDError(
                f"no plan candidate fits the budget on {plan.device}; see plan/plan.json "
                "(each candidate's failed limits) and loosen the budget or extend plan.grid",
                1,
            )
        return self.model_copy(update={"variants": {c.name: {"student": c.student} for c in top}})

    def plan_config(self, teacher: str) -> PlanConfig:
        """The plan stage's config: the first profile device at the profile's threads."""
        device = self.profile.devices[0]
        fields: dict[str, Any] = {
            "teacher": teacher,
            "data": self.data.model_copy(update={"seed": self.seed}).model_dump(),
            "device": device,
            "host": self.profile.hosts.get(device),
            "threads": self.profile.threads,
            "seq_len": self.plan.seq_len,
            "runs": self.plan.runs,
            "trials": self.plan.trials,
            "top": self.plan.top,
            "export": self.export.model_dump(),
        }
        if self.plan.grid is not None:
            fields["grid"] = self.plan.grid
        cfg = validate(PlanConfig, fields, "recipe plan")
        # A candidate is timed as it will be distilled: the recipe's own student options
        # (distill.student) under the candidate's, when it names the same student.
        default = DistillConfig.model_fields["student"].get_default(call_default_factory=True)
        base = Component.model_validate(self.distill.get("student", default))
        grid = [
            c.model_copy(update={"options": {**base.options, **c.options}})
            if c.name == base.name
            else c
            for c in cfg.grid
        ]
        return cfg.model_copy(update={"grid": grid})

    def distill_config(self, variant: str, teacher: str) -> DistillConfig:
        fields = deep_merge(self.distill, self.named_variants()[variant])
        fields.pop("export", None)
        for key in ("teacher", "data"):
            if key in fields:
                raise EdgeKDError(f"recipe: set `{key}` at the top level, not in distill", 2)
        fields.setdefault("seed", self.seed)
        data = self.data.model_copy(update={"seed": self.seed})
        try:
            return validate(
                DistillConfig,
                {**fields, "teacher": teacher, "data": data.model_dump()},
                f"recipe variant {variant}",
            )
        except EdgeKDError as e:  # a component's option: say which variant it is in
            if str(e).startswith("recipe variant"):
                raise
            raise EdgeKDError(f"recipe variant {variant}: {e}", 2) from None

    def export_config(self, variant: str) -> ExportConfig:
        extra = self.named_variants()[variant].get("export", {})
        fields = deep_merge(self.export.model_dump(), extra)
        # An early-exit student's threshold holds the budget's accuracy terms unless the
        # export section says otherwise (one place to state what must hold).
        given = self.export.model_fields_set | set(extra)
        student = deep_merge(self.distill, self.named_variants()[variant]).get("student")
        exits = isinstance(student, dict) and (student.get("options") or {}).get("early_exit")
        if exits and "exit_threshold" not in given:
            limits = self.budget_model()
            if limits.min_agreement is not None and "exit_min_agreement" not in given:
                fields["exit_min_agreement"] = limits.min_agreement
            if limits.min_accuracy is not None and "exit_min_accuracy" not in given:
                fields["exit_min_accuracy"] = limits.min_accuracy
        return validate(ExportConfig, fields, f"variant {variant}")

    def budget_model(self) -> Budget:
        if isinstance(self.budget, str):
            return load_budget(self.budget)
        return validate(Budget, self.budget, "recipe budget")


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = (
            deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        )
    return out


def load_recipe(path: str | Path, overrides: dict[str, Any] | None = None) -> Recipe:
    """Read and check a recipe; `overrides` maps dotted fields (distill.epochs) to values."""
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise EdgeKDError(f"{path} must be a YAML mapping (name, data, teacher, ...)", 2)
    # `-s` over the file, as every command resolves its config (edgekd.resolve).
    recipe = validate(Recipe, layered(Recipe, data, overrides), str(path))
    # Every section fails now, before hours of training, not when its stage starts.
    from edgekd.distill.trainer import preflight

    checked = recipe
    if recipe.variants == "plan":  # each candidate as a variant would distil it
        from edgekd.stages.plan import candidate_name

        plan = recipe.plan_config(recipe.teacher.path or "teacher")
        checked = recipe.model_copy(
            update={"variants": {candidate_name(c): {"student": c.model_dump()} for c in plan.grid}}
        )
    for variant in checked.named_variants():
        cfg = checked.distill_config(variant, recipe.teacher.path or "teacher")
        if cfg.assistant is None:
            try:
                preflight(cfg)
            except EdgeKDError as e:
                raise EdgeKDError(f"variant {variant}: {e}", 2) from None
        checked.export_config(variant)
    if recipe.teacher.path is None:
        validate(TeacherConfig, recipe.teacher.finetune, f"{path}: teacher.finetune")
    recipe.budget_model()
    from edgekd.devices.base import load_spec

    names = [load_spec(d, host=recipe.profile.hosts.get(d)).name for d in recipe.profile.devices]
    if len(set(names)) < len(names):
        raise EdgeKDError(f"{path}: profile.devices name one device twice ({names}); fix", 2)
    return recipe


# ------------------------------------------------------------------ content hashes


def digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def content_hash(spec: str) -> str:
    """sha256 over a local file or folder's files (names + contents); a hub id hashes
    as its name (its content cannot be read offline: pin a revision upstream)."""
    path = Path(spec)
    if path.is_file():
        return sha256_file(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and ".git" not in p.parts)
        return digest([(str(p.relative_to(path)), sha256_file(p)) for p in files])
    return digest(f"hub:{spec}")


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("edgekd", "torch", "transformers", "onnx", "onnxruntime", "optimum"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


# ------------------------------------------------------------------ stage runner


class Stages:
    """Runs or skips stages by cache key and keeps the manifest's stage list."""

    def __init__(self, out: Path, force: bool = False) -> None:
        self.out = out
        self.force = force
        self.records: list[StageRecord] = []
        self.code = versions()["edgekd"]

    def run(
        self, name: str, folder: Path, inputs: dict[str, Any], fn: Callable[[Path], Any]
    ) -> str:
        """Run `fn(folder)` unless `folder` holds a result for the same `inputs`; return the key."""
        key = digest({"stage": name, "edgekd": self.code, **inputs})
        marker = StageMarker.path(folder)
        t = time.perf_counter()
        status: Literal["ran", "cached"]
        if not self.force and marker.is_file() and StageMarker.read(folder).key == key:
            status = "cached"
            console.print(f"[dim]{name}: unchanged, cached ({shown(folder)})[/]")
        else:
            console.rule(f"{name}")
            fn(folder)
            StageMarker(stage=name, key=key).write(folder)
            status = "ran"
            # One plain line per finished stage, for CI logs where rules and bars blur.
            console.print(f"{name}: done in {time.perf_counter() - t:.1f} s ({shown(folder)})")
        self.records.append(
            StageRecord(
                stage=name,
                folder=str(folder.relative_to(self.out)),
                key=key,
                status=status,
                seconds=round(time.perf_counter() - t, 3),
            )
        )
        return key


def run_recipe(
    path: str | Path,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> int:
    """Run `path`'s recipe; return 0 if every budget check passed, else 1."""
    from edgekd.devices.base import load_spec

    recipe = load_recipe(path, overrides)
    # The run folder never is, holds or lies in its data, teacher, base model or budget file.
    check_not_input(recipe.out_dir(), config_inputs(recipe.model_dump()))
    # Unreadable or offline data fails here, before the run folder is claimed (the read
    # is kept: the profile stages time these dev texts).
    dev_texts(recipe.data)
    out = claim_folder(recipe.out_dir(), overwrite)
    started = time.time()
    stages = Stages(out, force)
    inputs = {"data": content_hash(recipe.data.spec)}

    # 1. teacher: given, or fine-tuned here.
    if recipe.teacher.path is not None:
        teacher = recipe.teacher.path
        teacher_key = inputs["teacher"] = content_hash(teacher)
    else:
        tcfg = validate(
            TeacherConfig,
            {
                "seed": recipe.seed,
                **recipe.teacher.finetune,
                "data": deep_merge(
                    recipe.data.model_dump(), recipe.teacher.finetune.get("data", {})
                ),
            },
            "teacher.finetune",
        )
        teacher = str(out / "teacher")
        teacher_key = stages.run(
            "teacher",
            out / "teacher",
            {"config": tcfg.model_dump(), "data": inputs["data"]},
            partial(finetune_teacher, tcfg),
        )

    # 1b. `variants: plan`: the candidates that fit, timed untrained on the first device.
    budget = recipe.budget_model()
    if recipe.variants == "plan":
        pcfg_plan = recipe.plan_config(teacher)
        stages.run(
            "plan",
            out / "plan",
            {
                "config": pcfg_plan.model_dump(exclude={"teacher"}),
                "teacher": teacher_key,
                "data": inputs["data"],
                "budget": budget.model_dump(),
            },
            partial(run_plan, pcfg_plan, budget),
        )
        recipe = recipe.planned(PlanResult.read(out / "plan"))

    # 2-3. each variant: distill, export.
    export_keys: dict[str, str] = {}
    for variant in recipe.named_variants():
        dcfg = recipe.distill_config(variant, teacher)
        ecfg = recipe.export_config(variant)
        vdir = out / variant
        dkey = stages.run(
            f"distill {variant}",
            vdir / "student",
            {
                "config": dcfg.model_dump(exclude={"teacher"}),
                "teacher": teacher_key,
                "data": inputs["data"],
            },
            partial(distill, dcfg),
        )
        export_keys[variant] = stages.run(
            f"export {variant}",
            vdir / "export",
            {"config": ecfg.model_dump(), "student": dkey},
            partial(export, vdir / "student", ecfg),
        )

    # 4. profile: the teacher's ONNX (baseline) and every variant, on every device.
    pcfg = recipe.profile
    specs = {d: load_spec(d, host=pcfg.hosts.get(d)) for d in pcfg.devices}
    pinputs = {"config": pcfg.model_dump(), "specs": {d: s.model_dump() for d, s in specs.items()}}
    seq_len = pcfg.seq_len or median_length(teacher, recipe.data)
    profile_keys: dict[str, str] = {}
    if pcfg.teacher:
        tokey = stages.run(
            "teacher onnx",
            out / "teacher-onnx",
            {"teacher": teacher_key, "dtype": "fp32"},
            partial(export_teacher_onnx, teacher),
        )
        profile_keys["teacher"] = stages.run(
            "profile teacher",
            out / "teacher-profile",
            {**pinputs, "model": tokey, "seq_len": seq_len},
            partial(profile_models, [out / "teacher-onnx" / MODEL_FILES["fp32"]], recipe, seq_len),
        )
    for variant, ekey in export_keys.items():
        models = exported_models(out / variant / "export")
        profile_keys[variant] = stages.run(
            f"profile {variant}",
            out / variant / "profile",
            {**pinputs, "export": ekey, "seq_len": seq_len},
            partial(profile_models, models, recipe, seq_len),
        )

    # 5. check every variant on every device.
    passed = True
    check_keys = []
    for variant in recipe.named_variants():
        vdir = out / variant
        folder = vdir / "check"
        check_keys.append(
            stages.run(
                f"check {variant}",
                folder,
                {
                    "budget": budget.model_dump(),
                    "export": export_keys[variant],
                    "profile": profile_keys[variant],
                    "defaults": {d: s.budget for d, s in specs.items()},
                },
                partial(check, budget, [vdir / "export", vdir / "profile"], specs, pcfg.threads),
            )
        )
        passed &= all(c.passed for c in checks_of(folder))

    # 6. report, on this recipe's folders only (not those of variants since removed).
    if recipe.report:
        current = [out / "teacher-onnx", out / "teacher-profile"]
        current += [
            out / v / stage
            for v in recipe.named_variants()
            for stage in ("export", "profile", "check")
        ]

        stages.run(
            "report",
            out / "report",
            {"checks": check_keys, "profiles": profile_keys, "exports": export_keys},
            partial(write_report_into, out, current),
        )

    RunManifest(
        recipe=str(Path(path)),
        recipe_sha256=sha256_file(path),
        overrides=overrides or {},
        resolved=recipe.model_dump(mode="json"),
        versions=versions(),
        inputs=inputs,
        seq_len=seq_len,
        stages=stages.records,
        passed=passed,
        started=time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        seconds=round(time.time() - started, 1),
    ).write(out)
    ran = sum(r.status == "ran" for r in stages.records)
    console.print(
        f"{ran} stage(s) ran, {len(stages.records) - ran} cached, "
        f"{time.time() - started:.0f} s; budget {'met' if passed else '[bold red]missed[/]'}"
        + (f"; report: {out / 'report' / REPORT_PAGE}" if recipe.report else "")
    )
    return 0 if passed else 1


# ------------------------------------------------------------------ stage bodies
# Each takes its inputs first and the folder last (what `Stages.run` passes): thin
# adapters over the stage library, which does the work and writes the files.


def finetune_teacher(cfg: TeacherConfig, folder: Path) -> None:
    from edgekd.stages.teacher import teacher

    teacher(cfg, folder)


def distill(cfg: DistillConfig, folder: Path) -> None:
    from edgekd.stages.distill import distill

    distill(cfg, folder)


def export(student: Path, cfg: ExportConfig, folder: Path) -> None:
    from edgekd.stages.export import export

    export(cfg, student, folder)


def run_plan(cfg: PlanConfig, budget: Budget, folder: Path) -> None:
    from edgekd.stages.plan import plan

    plan(cfg, budget, folder)


def export_teacher_onnx(teacher: str, folder: Path) -> None:
    from edgekd.exporters.teacher import export_teacher

    export_teacher(teacher, folder)


def exported_models(export_dir: Path) -> list[Path]:
    return ExportReport.read(export_dir).model_paths(export_dir)


def median_length(teacher: str, data: DataConfig) -> int:
    """Median dev length in teacher tokens: the inputs this task will really see."""
    from transformers import AutoTokenizer

    from edgekd.data import median_tokens

    return median_tokens(AutoTokenizer.from_pretrained(teacher), dev_texts(data))


@functools.lru_cache(maxsize=2)
def _dev_texts(data_json: str) -> list[Any]:
    from edgekd.data import load_task

    return load_task(DataConfig.model_validate_json(data_json)).dev.texts


def dev_texts(data: DataConfig) -> list[Any]:
    """The dev texts, read once per run however many stages profile with them."""
    return _dev_texts(data.model_dump_json())


def profile_models(models: list[Path], recipe: Recipe, seq_len: int, folder: Path) -> None:
    from edgekd.stages.profile import profile

    p = recipe.profile
    cfg = ProfileConfig(
        devices=p.devices,
        hosts=p.hosts,
        threads=p.threads,
        runs=p.runs,
        trials=p.trials,
        warmup=p.warmup,
        seq_lens=[seq_len],
    )
    with atomic_dir(folder) as tmp:
        for r in profile(cfg, models, tmp, dev_texts(recipe.data)):
            assert isinstance(r, ProfileResult)  # one length: no sweep
            console.print(
                f"{r.device} {Path(r.model).name}: p50 {r.p50_ms:.3f} ms, p90 {r.p90_ms:.3f} ms"
                + (" [yellow](noisy)[/]" if r.noisy else "")
            )


def write_report_into(run_dir: Path, only: list[Path], folder: Path) -> None:
    from edgekd.stages.report import report

    report(run_dir, folder, only)


def check(
    budget: Budget, dirs: list[Path], specs: dict[str, Any], threads: int | None, folder: Path
) -> None:
    """One check per device (JSON + JUnit each), the shape `edgekd check` writes."""
    from edgekd.render import print_check
    from edgekd.stages.check import check

    with atomic_dir(folder) as tmp:
        for spec in specs.values():
            # The spec's name: what the profiles call it, and the budget's `devices:` key;
            # latency limits apply at the threads the profiles ran with.
            result = check(
                budget, dirs, tmp, spec.name, threads or spec.threads, defaults=spec.budget
            )
            print_check(result)


def checks_of(folder: Path) -> list[CheckResult]:
    return [CheckResult.read(p) for p in sorted(folder.glob(CHECK_GLOB))]
