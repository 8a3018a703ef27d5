"""`edgekd run recipe.yaml`: teacher → distill → export → profile → check → report.

A recipe is data (YAML validated by `Recipe`). Its sections become each stage's config
(`Recipe.teacher_config`, `distill_config`, `export_config`, `profile_config`,
`plan_config`), and every stage is the stage library's own function (`edgekd.stages`),
called as the Python API calls it: config first, then its inputs, then its folder.
Each stage writes one folder under `out/` and a `.stage.json` holding its cache key:
the sha256 of the stage's resolved config, the keys of the stages it reads, the
content hashes of external inputs (data files, a local teacher, the budget's limits)
and the running edgekd's version and source digest (`code_fingerprint`).
A rerun skips every stage whose key is unchanged, so editing only the budget re-runs
only the check and the report that shows it. `manifest.json` records versions, input
hashes, and each stage's key, status and seconds.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
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
    RunManifest,
    StageMarker,
    StageRecord,
)
from edgekd.budget import Budget, load_budget
from edgekd.config import (
    MAX_THREADS,
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
from edgekd.io import (
    atomic_dir,
    check_not_input,
    claim_folder,
    config_inputs,
    sha256_file,
    source_digest,
    versions,
)
from edgekd.progress import console, shown
from edgekd.registry import Component
from edgekd.resolve import layered

SAFE_NAME = re.compile(PLAIN_NAME)
# Folders and files a run writes beside its variants' folders: a variant of one of these
# names would write into the teacher's or the report's folder (and a rerun of that stage
# would replace the variant's student with it).
RUN_NAMES = ("teacher", "teacher-onnx", "teacher-profile", "plan", "report", RunManifest.FILE)


class TeacherStage(StrictModel):
    path: str | None = Field(
        None, description="A fine-tuned classifier (folder or hub id); unset: fine-tune one."
    )
    finetune: dict[str, Any] = Field(
        default_factory=dict,
        description="`edgekd teacher` fields (base, epochs, ...; data comes from the recipe).",
    )


def same(model: type[StrictModel], name: str) -> Any:
    """`model`'s field `name` as that config declares it (default, bounds, description):
    a recipe section holding a stage's setting writes no default of its own."""
    return copy.copy(model.model_fields[name])


class ProfileStage(StrictModel):
    """The teacher's ONNX and every variant's models timed on each device at one length:
    `ProfileConfig` (`Recipe.profile_config`), whose rules it meets when the recipe loads."""

    devices: list[str] = same(ProfileConfig, "devices")
    hosts: dict[str, str] = same(ProfileConfig, "hosts")
    threads: int | None = Field(
        None, ge=0, le=MAX_THREADS, description="0: all cores; unset: each device's own."
    )
    runs: int = same(ProfileConfig, "runs")
    trials: int = same(ProfileConfig, "trials")
    warmup: int = same(ProfileConfig, "warmup")
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
    top: int = same(PlanConfig, "top")
    runs: int = same(PlanConfig, "runs")
    trials: int = same(PlanConfig, "trials")
    seq_len: int | None = same(PlanConfig, "seq_len")


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
            if name.lower() in RUN_NAMES:  # lower: one folder on a case-blind disk
                raise ValueError(
                    f"variant name {name!r} is a folder the run writes itself "
                    f"({', '.join(RUN_NAMES)}); rename it"
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

    def teacher_config(self) -> TeacherConfig:
        """The teacher stage's config (no `teacher.path`): `teacher.finetune` over the
        recipe's data and seed."""
        fields = self.teacher.finetune
        data = fields.get("data", {})
        if isinstance(data, dict):  # else refused by the model below, naming the field
            data = deep_merge(self.data.model_dump(), data)
        return validate(
            TeacherConfig, {"seed": self.seed, **fields, "data": data}, "teacher.finetune"
        )

    def profile_config(self, seq_len: int | None) -> ProfileConfig:
        """The profile stage's config: every device at `seq_len` tokens (None: the
        config's default length, which only the load-time check uses)."""
        fields = self.profile.model_dump(exclude={"seq_len", "teacher"})
        if seq_len is not None:
            fields["seq_lens"] = [seq_len]
        return validate(ProfileConfig, fields, "recipe profile")

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
        from edgekd.stages.export import exit_terms

        extra = self.named_variants()[variant].get("export", {})
        fields = deep_merge(self.export.model_dump(), extra)
        # An early-exit student's threshold holds the budget's accuracy terms (as `edgekd
        # export --budget` reads them) unless the export section says otherwise (one place
        # to state what must hold).
        given = self.export.model_fields_set | set(extra)
        student = deep_merge(self.distill, self.named_variants()[variant]).get("student")
        exits = isinstance(student, dict) and (student.get("options") or {}).get("early_exit")
        if exits and "exit_threshold" not in given:
            terms = exit_terms(self.budget_model(), required=False)
            fields.update({k: v for k, v in terms.items() if k not in given})
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
    from edgekd.distill.trainer import check_precision, preflight

    checked = recipe
    if recipe.variants == "plan":  # each candidate as a variant would distil it
        from edgekd.stages.plan import candidate_name

        plan = recipe.plan_config(recipe.teacher.path or "teacher")
        checked = recipe.model_copy(
            update={"variants": {candidate_name(c): {"student": c.model_dump()} for c in plan.grid}}
        )
    for variant in checked.named_variants():
        cfg = checked.distill_config(variant, recipe.teacher.path or "teacher")
        try:
            preflight(cfg)
        except EdgeKDError as e:
            raise EdgeKDError(f"variant {variant}: {e}", 2) from None
        checked.export_config(variant)
    if recipe.teacher.path is None:
        finetune = recipe.teacher_config()  # its own errors name teacher.finetune
        try:
            check_precision(finetune.precision)
        except EdgeKDError as e:
            raise EdgeKDError(f"teacher.finetune: {e}", 2) from None
    recipe.profile_config(recipe.profile.seq_len)  # runs ≥ trials, ranges: before training
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


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """The digest of the edgekd code that is running (its package folders' sources).

    A stage's key holds it beside the version: an edited or newer checkout of the same
    version can make another artifact from the same config (a default changed, an `auto`
    option resolved another way), so a stage cached by other code runs again. ~1 MB of
    source: a few ms, once a process. `find_spec` of a subpackage imports only `edgekd`,
    so torch stays unloaded."""
    return source_digest(code_roots())


def code_roots() -> list[Path]:
    """The folders edgekd's packages import from (an editable checkout: edgekd/,
    exporters/ and devices/; an installed wheel: edgekd/, the other two inside it)."""
    import importlib.util

    roots: list[Path] = []
    for name in ("edgekd", "edgekd.exporters", "edgekd.devices"):
        spec = importlib.util.find_spec(name)
        roots += [Path(p) for p in (spec.submodule_search_locations if spec else None) or []]
    return roots


# ------------------------------------------------------------------ stage runner


class Stages:
    """Runs or skips stages by cache key and keeps the manifest's stage list."""

    def __init__(self, out: Path, force: bool = False) -> None:
        self.out = out
        self.force = force
        self.records: list[StageRecord] = []
        self.code = f"{versions()['edgekd']}+{code_fingerprint()[:16]}"

    def run(
        self,
        name: str,
        folder: Path,
        inputs: dict[str, Any],
        stage: Callable[[Path], Any],
        whole: bool = False,
        show: Callable[[Any], None] | None = None,
    ) -> str:
        """Run `stage(folder)` unless `folder` holds a result for the same `inputs`; return
        the key. `stage` is a stage function with its config and inputs bound, so the
        folder is its last positional argument, as in the Python API.

        `whole`: a stage that adds its files to a folder it does not own (profile and
        check: the README profiles into an export folder) runs into a fresh one that then
        replaces `folder`, so no file of an earlier run (a device since dropped) stays.
        `show`: prints what the stage returned, when it ran."""
        key = digest({"stage": name, "edgekd": self.code, **inputs})
        marker = StageMarker.path(folder)
        t = time.perf_counter()
        status: Literal["ran", "cached"]
        if not self.force and marker.is_file() and StageMarker.read(folder).key == key:
            status = "cached"
            console.print(f"[dim]{name}: unchanged, cached ({shown(folder)})[/]")
        else:
            console.rule(f"{name}")
            if whole:
                with atomic_dir(folder) as tmp:
                    result = stage(tmp)
            else:
                result = stage(folder)
            if show is not None:
                show(result)
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
    from edgekd.exporters.teacher import export_teacher
    from edgekd.render import print_checks, print_profile_lines
    from edgekd.stages.check import check_devices
    from edgekd.stages.distill import distill
    from edgekd.stages.export import export
    from edgekd.stages.plan import plan
    from edgekd.stages.profile import profile
    from edgekd.stages.report import report
    from edgekd.stages.teacher import teacher as finetune

    recipe = load_recipe(path, overrides)
    # The run folder never is, holds or lies in its data, teacher, base model or budget file.
    check_not_input(recipe.out_dir(), config_inputs(recipe.model_dump()))
    # Unreadable or offline data fails here, before the run folder is claimed (the read
    # is kept: the profile stages time these dev texts).
    texts = dev_texts(recipe.data)
    out = claim_folder(recipe.out_dir(), overwrite)
    started = time.time()
    stages = Stages(out, force)
    inputs = {"data": content_hash(recipe.data.spec)}

    # 1. teacher: given, or fine-tuned here.
    if recipe.teacher.path is not None:
        teacher = recipe.teacher.path
        teacher_key = inputs["teacher"] = content_hash(teacher)
    else:
        tcfg = recipe.teacher_config()
        teacher = str(out / "teacher")
        teacher_key = stages.run(
            "teacher",
            out / "teacher",
            {"config": tcfg.model_dump(), "data": inputs["data"]},
            partial(finetune, tcfg),
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
            partial(plan, pcfg_plan, budget, written_grid=recipe.plan.grid is not None),
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
            partial(export, ecfg, vdir / "student"),
        )

    # 4. profile: the teacher's ONNX (baseline) and every variant, on every device.
    pcfg = recipe.profile
    specs = {d: load_spec(d, host=pcfg.hosts.get(d)) for d in pcfg.devices}
    pinputs = {"config": pcfg.model_dump(), "specs": {d: s.model_dump() for d, s in specs.items()}}
    seq_len = pcfg.seq_len or median_length(teacher, recipe.data)
    timing = recipe.profile_config(seq_len)
    profile_keys: dict[str, str] = {}
    if pcfg.teacher:
        tokey = stages.run(
            "teacher onnx",
            out / "teacher-onnx",
            {"teacher": teacher_key, "dtype": "fp32"},
            partial(export_teacher, teacher),
        )
        profile_keys["teacher"] = stages.run(
            "profile teacher",
            out / "teacher-profile",
            {**pinputs, "model": tokey, "seq_len": seq_len},
            partial(profile, timing, [out / "teacher-onnx" / MODEL_FILES["fp32"]], texts=texts),
            whole=True,
            show=print_profile_lines,
        )
    for variant, ekey in export_keys.items():
        models = exported_models(out / variant / "export")
        profile_keys[variant] = stages.run(
            f"profile {variant}",
            out / variant / "profile",
            {**pinputs, "export": ekey, "seq_len": seq_len},
            partial(profile, timing, models, texts=texts),
            whole=True,
            show=print_profile_lines,
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
                partial(
                    check_devices,
                    budget,
                    [vdir / "export", vdir / "profile"],
                    specs=list(specs.values()),
                    threads=pcfg.threads,
                ),
                whole=True,
                show=print_checks,
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
            partial(report, out, only=current),
        )

    RunManifest(
        recipe=str(Path(path)),
        recipe_sha256=sha256_file(path),
        overrides=overrides or {},
        resolved=recipe.model_dump(mode="json"),
        versions={**versions(), "edgekd source": code_fingerprint()[:16]},
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


# ------------------------------------------------------------------ what stages read


def exported_models(export_dir: Path) -> list[Path]:
    return ExportReport.read(export_dir).model_paths(export_dir)


def median_length(teacher: str, data: DataConfig) -> int:
    """Median dev length in teacher tokens: the inputs this task will really see."""

    from edgekd.data import median_tokens
    from edgekd.students.tokenizer import hf_tokenizer

    return median_tokens(hf_tokenizer(teacher, "teacher"), dev_texts(data))


@functools.lru_cache(maxsize=2)
def _dev_texts(data_json: str) -> list[Any]:
    from edgekd.data import load_task

    return load_task(DataConfig.model_validate_json(data_json)).dev.texts


def dev_texts(data: DataConfig) -> list[Any]:
    """The dev texts, read once per run however many stages profile with them."""
    return _dev_texts(data.model_dump_json())


def checks_of(folder: Path) -> list[CheckResult]:
    return [CheckResult.read(p) for p in sorted(folder.glob(CHECK_GLOB))]
