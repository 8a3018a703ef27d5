"""The stage library: one module per stage, each one function that owns its output.

    teacher   TeacherConfig                       → HF classifier folder   (TeacherMetrics)
    distill   DistillConfig                       → student folder         (DistillMetrics)
    export    ExportConfig, student folder        → ONNX folder            (ExportReport)
    profile   ProfileConfig, ONNX files           → profile-*.json         (ProfileResult)
    check     Budget, artifact folders            → check.json             (CheckResult)
    bundle    export folder                       → bundle folder + .zip   (BundleManifest)
    report    run folder                          → report.html + PNGs     (page path)
    trim      student folder                      → trimmed student        (TrimReport)
    evaluate  DataConfig, any model               → accuracy               (EvalResult)

The CLI, recipes, quickstart, the benchmarks and `edgekd.api` call these functions;
none of them writes a stage's files itself. Importing this package is cheap: each
stage module imports what it needs.
"""
