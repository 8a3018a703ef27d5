"""The stage library: one module per stage, each one function that owns its output.

Every stage takes its config first, then its inputs, then its output folder, then
options: the CLI, recipes (which bind config and inputs and pass the folder), quickstart,
the benchmarks and `edgekd.api` all call it so. What it writes is a typed artifact of
`edgekd.artifacts`, and none of the callers writes a stage's files itself.

    teacher(cfg, out)                   TeacherConfig       → HF classifier  (TeacherMetrics)
    distill(cfg, out)                   DistillConfig       → student folder (DistillMetrics)
    export(cfg, student, out, data)     ExportConfig        → ONNX folder    (ExportReport)
    profile(cfg, models, out, texts)    ProfileConfig       → profile-*.json (ProfileResult)
    check(budget, artifacts, out, ...)  Budget or its YAML  → check.json     (CheckResult)
    plan(cfg, budget, out)              PlanConfig, Budget  → plan.json      (PlanResult)
    make_bundle(export, out, model)     -                   → bundle + .zip  (BundleManifest)
    report(run, out, only)              -                   → report.html    (its path)
    trim(student, out, min_freq, ...)   -                   → trimmed copy   (TrimReport)
    evaluate(data, model, out)          DataConfig          → eval.json      (EvalResult)

`profile` and `check` add their files to `out` (an export folder may hold its profile,
where `bundle` finds it); the others write `out` whole or not at all. `baseline` is no
stage: it is how `check --baseline` compares two runs. Importing this package is cheap:
each stage module imports what it needs.
"""
