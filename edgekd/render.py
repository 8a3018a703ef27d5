"""How results look on a terminal: rich tables for profiles, sweeps, A/B timings and
budget checks. Shared by the CLI, quickstart and recipes, so none of them imports the
CLI.

Model names, devices, paths, labels and limits come from users and files: each one
goes into markup through `shown` (its control characters made visible, its `[`
escaped) and into a plain line through `printable`; the consoles are `SafeConsole`s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from edgekd.artifacts import (
    CheckResult,
    DistillMetrics,
    EvalResult,
    ExportReport,
    PlanResult,
    ProfileResult,
    ProfileSweep,
    QuickstartSummary,
    TeacherMetrics,
    TrimReport,
)
from edgekd.errors import printable, printable_json


def echo(line: str) -> None:
    """One plain line on stdout, its control characters made visible."""
    typer.echo(printable(line))


def print_teacher(m: TeacherMetrics, out: Path) -> None:
    echo(f"teacher: dev accuracy {m.dev_accuracy:.4f} → {out}")


def print_distill(m: DistillMetrics, out: Path) -> None:
    """The student's line (once, however many processes trained it), then TF-IDF's."""
    from edgekd.progress import main_process

    if not main_process():
        return
    echo(
        f"student: accuracy {m.student_accuracy:.4f} (teacher {m.teacher_accuracy:.4f}, "
        f"agreement {m.agreement:.4f}, {m.params:,} params) → {out}"
    )
    if m.tfidf is not None:
        margin = 100 * (m.student_accuracy - m.tfidf.accuracy)
        echo(f"TF-IDF + LR on the same rows: {m.tfidf.accuracy:.4f} (student {margin:+.1f} pt)")


def print_eval(r: EvalResult, model: str) -> None:
    echo(f"{model}: accuracy {r.accuracy:.4f} on {r.n} dev rows")


def print_trim(r: TrimReport, out: Path) -> None:
    echo(
        f"vocabulary {r.vocab_before:,} → {r.vocab_after:,} tokens, dev accuracy "
        f"{r.dev_accuracy_before:.4f} → {r.dev_accuracy_after:.4f} → {out}"
    )


def print_predictions(rows: list[Any], results: list[dict[str, Any]], as_json: bool) -> None:
    """One line per text: a JSON object, or label, probabilities and text tab-separated
    (each field through `printable`, so a text's tab, line break or escape sequence
    cannot add a column, a row or a colour)."""
    for text, r in zip(rows, results, strict=True):
        if as_json:
            typer.echo(printable_json(json.dumps({"text": text, **r}, ensure_ascii=False)))
            continue
        probs = "  ".join(f"{printable(k)} {v:.3f}" for k, v in r["probabilities"].items())
        shown = text if isinstance(text, str) else " ⟂ ".join(text)
        typer.echo(f"{printable(r['label'])}\t{probs}\t{printable(shown)}")


def print_devices(specs: dict[str, Any]) -> None:
    """One line per device spec (name → spec): its runner, where it runs, threads and
    int8 preset."""
    for name, spec in specs.items():
        own = spec.options
        where = own.get("host") or own.get("serial")
        where = where or ("set host" if spec.runner == "ssh" else "this machine")
        if spec.runner == "adb" and not own.get("serial"):
            where = "the one attached phone"
        echo(
            f"{name}: runner={spec.runner} ({where}) threads={spec.threads} "
            f"preset={spec.int8_preset()} — {spec.description}"
        )


def print_profile_result(result: ProfileResult | ProfileSweep) -> None:
    """A sweep's table, an A/B ratio's, or one model's."""
    if isinstance(result, ProfileSweep):
        print_sweep([r.model_dump(exclude_none=True) for r in result.sweep])
    elif result.vs:
        print_vs(result.model_dump(exclude_none=True))
    else:
        print_profile(result.model_dump(exclude_none=True))


def print_profile_lines(results: list[ProfileResult | ProfileSweep]) -> None:
    """A recipe's profile stage: one line per device, model and length (p50, p90)."""
    from edgekd.progress import console, shown

    for result in results:
        for r in result.sweep if isinstance(result, ProfileSweep) else [result]:
            console.print(
                f"{shown(r.device)} {shown(Path(r.model).name)}: p50 {r.p50_ms:.3f} ms, "
                f"p90 {r.p90_ms:.3f} ms" + (" [yellow](noisy)[/]" if r.noisy else "")
            )


def print_checks(results: list[CheckResult]) -> None:
    """A recipe's check stage: each device's verdict, as `edgekd check` shows one."""
    for result in results:
        print_check(result)


def print_verdict(result: CheckResult, json_out: str | None) -> None:
    """The verdict as JSON on stdout (`--json -`), else as tables (and to a JSON file)."""
    if json_out == "-":
        typer.echo(printable_json(result.model_dump_json(indent=2)))
        return
    print_check(result)
    if json_out:
        result.write(Path(json_out))


def print_profile(r: dict[str, Any]) -> None:
    from rich.table import Table

    from edgekd.progress import SafeConsole, shown

    table = Table(
        title=f"{shown(Path(r['model']).name)} on {shown(r['device'])} ({shown(r['cpu'])}), "
        f"{r['threads']} thread(s), batch 1, seq {r['seq_len']}, {r['trials']} trials"
    )
    for col in ("", "p50 ms", "p90 ms", "p99 ms", "IQR ms", "spread", "per s"):
        table.add_column(col, justify="right")
    rows = [("infer", r)]
    if "end_to_end" in r:
        rows.append(("tokenize+infer", r["end_to_end"]))
    for name, m in rows:
        table.add_row(
            name,
            *(f"{m[k]:.3f}" for k in ("p50_ms", "p90_ms", "p99_ms", "iqr_ms")),
            f"{100 * m['trial_spread']:.1f}%",
            f"{m['throughput_per_s']:.0f}",
        )
    SafeConsole().print(table)
    echo(
        f"load {r['load_ms']:.1f} ms, peak RSS {r['peak_rss_mb']:.1f} MB, "
        f"file {r['bytes']:,} B, onnxruntime {r['onnxruntime']}"
    )
    if r.get("early_exit"):
        exits = Table(title="early exit on the dev rows, by threshold (model call, batch 1)")
        for col in ("threshold", "mean exit layer", "p50 ms", "p90 ms", "× threshold 0"):
            exits.add_column(col, justify="right")
        full = r["early_exit"][0]["p50_ms"]  # threshold 0: every layer runs
        for e in r["early_exit"]:
            exits.add_row(
                f"{e['threshold']:g}",
                f"{e['mean_exit_layer']:.2f}",
                f"{e['p50_ms']:.3f}",
                f"{e['p90_ms']:.3f}",
                f"{e['p50_ms'] / full:.2f}" if full else "—",
            )
        SafeConsole().print(exits)


def print_sweep(results: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from edgekd.progress import SafeConsole, shown

    r0 = results[0]
    table = Table(
        title=f"{shown(Path(r0['model']).name)} on {shown(r0['device'])}, {r0['threads']} thread(s)"
    )
    for col in ("seq len", "p50 ms", "p90 ms", "IQR ms", "spread", "e2e p50 ms"):
        table.add_column(col, justify="right")
    for r in results:
        e2e = r.get("end_to_end", {}).get("p50_ms")
        table.add_row(
            str(r["seq_len"]),
            *(f"{r[k]:.3f}" for k in ("p50_ms", "p90_ms", "iqr_ms")),
            f"{100 * r['trial_spread']:.1f}%",
            "—" if e2e is None else f"{e2e:.3f}",
        )
    SafeConsole().print(table)


def print_vs(r: dict[str, Any]) -> None:
    from rich.table import Table

    from edgekd.progress import SafeConsole, shown

    b = r["vs"]["b"]
    table = Table(
        title=f"alternating trials on {shown(r['device'])}, {r['threads']} thread(s), "
        f"seq {r['seq_len']}, {r['trials']} trials each × {r['vs'].get('processes', 1)} "
        "process(es)"
    )
    for col in ("model", "bytes", "p50 ms", "p90 ms", "IQR ms", "load ms"):
        table.add_column(col, justify="right")
    for m in (r, b):
        table.add_row(
            shown(Path(m["model"]).name),
            f"{m['bytes']:,}",
            *(f"{m[k]:.3f}" for k in ("p50_ms", "p90_ms", "iqr_ms", "load_ms")),
        )
    SafeConsole().print(table)
    ratio = r["vs"]["ratio_b_over_a"]
    lo, hi = r["vs"]["ratio_ci95"]
    a_name, b_name = Path(r["model"]).name, Path(b["model"]).name
    echo(
        f"{b_name} / {a_name} latency: {ratio:.2f}× (95% CI {lo:.2f}–{hi:.2f}); "
        + (
            f"{a_name} is faster"
            if lo > 1
            else f"{b_name} is faster"
            if hi < 1
            else "no clear difference"
        )
    )


def print_check(result: CheckResult) -> None:
    """The verdict as tables: the baseline comparison first (when there is one), then
    the limits; each note (why a metric was not measured) on a line of its own."""
    from rich.table import Table

    from edgekd.progress import SafeConsole, shown

    console = SafeConsole()
    if result.baseline is not None:
        table = Table(title=f"{shown(result.title())} against {shown(result.baseline)}")
        for col in ("metric", "baseline", "now", "change [95% CI]", "allowed", "status"):
            table.add_column(col)
        for r in result.regressions:
            style = "green" if r.passed else "bold red"
            table.add_row(
                shown(r.metric),
                shown(r.value_text(r.baseline)),
                shown(r.value_text(r.now)),
                shown(r.change_text()),
                shown(r.margin_text()),
                f"[{style}]{shown(r.status)}[/]",
            )
        console.print(table)
    if result.limits:
        table = Table(title=shown(result.title()))
        for col in ("limit", "threshold", "measured", "status"):
            table.add_column(col)
        for limit in result.limits:
            style = "green" if limit.passed else "bold red"
            table.add_row(
                shown(limit.limit),
                shown(limit.threshold_text()),
                shown(limit.measured_text()),
                f"[{style}]{shown(limit.status)}[/]",
            )
        console.print(table)
    for note in result.notes:
        console.print(f"note: {note}", markup=False, highlight=False)


def print_plan(result: PlanResult, out: Path | None = None) -> None:
    """The candidates, fitting ones first (ranked), each with what it costs; then where
    plan.json went (`out`)."""
    from rich.table import Table

    from edgekd.progress import SafeConsole, shown

    limits = ", ".join(f"{shown(k)} {v:g}" for k, v in result.limits.items())
    table = Table(
        title=f"plan on {shown(result.device)}, {result.threads} thread(s), "
        f"seq {result.seq_len}: {limits}"
    )
    for col in (
        "#",
        "candidate",
        "params",
        "ships",
        "bundle B",
        "p50 ms",
        "p90 ms",
        "RSS MB",
        "fits",
    ):
        table.add_column(col, justify="left" if col in ("candidate", "ships", "fits") else "right")
    for i, c in enumerate(result.candidates, 1):
        table.add_row(
            str(i) if c.fits else "",
            shown(c.name),
            f"{c.params:,}",
            shown(c.model),
            f"{c.bundle_bytes:,}",
            "—" if c.p50_ms is None else f"{c.p50_ms:.3f}",
            "—" if c.p90_ms is None else f"{c.p90_ms:.3f}",
            "—" if c.peak_rss_mb is None else f"{c.peak_rss_mb:.0f}",
            "[green]yes[/]" if c.fits else f"[red]no: {shown(', '.join(c.failed))}[/]",
        )
    SafeConsole().print(table)
    if out is not None:
        echo(f"plan → {out}")


def print_export(r: ExportReport, out: Path) -> None:
    """One line per exported model, then what the validation found."""
    for name, m in r.models.items():
        mcc = f", MCC {m.mcc:.4f}" if m.mcc is not None else ""
        echo(
            f"{name}: {m.path} {m.bytes:,} B, accuracy {m.accuracy:.4f}{mcc}, "
            f"agreement with PyTorch {m.agreement:.4f}"
        )
    if r.int8_refused:
        echo("int8: not kept, it ran slower than fp32 here (export.json says why)")
    if r.e2e is not None:
        # The batch sizes the export checked (1, 8 and 32); an older export's, 1 alone.
        sizes = list(r.e2e.max_probability_diff_by_batch) or ["1"]
        batches = " and ".join([", ".join(sizes[:-1]), sizes[-1]] if len(sizes) > 1 else sizes)
        echo(
            f"e2e: {r.e2e.path} {r.e2e.bytes:,} B (from {r.e2e.source}), same label as the "
            f"tokenizer path on {r.e2e.rows:,} of {r.e2e.rows:,} dev rows at batch {batches}"
        )
    pte = r.get("executorch")
    if pte and "accuracy" in pte:
        echo(
            f"executorch: {pte['path']} {pte['bytes']:,} B (int8), accuracy {pte['accuracy']:.4f}, "
            f"agreement with PyTorch {pte['agreement']:.4f}"
        )
    if r.early_exit is not None:
        ee = r.early_exit
        shipped = r.shipped()
        at = next((p for p in ee.dev.get(shipped, []) if p.threshold == ee.threshold), None)
        where = (
            f"; on dev ({shipped}): {at.mean_exit_layer:.2f} of {ee.layers} layers per row, "
            f"accuracy {at.accuracy:.4f}, agreement with every layer {at.agreement:.4f}"
            if at is not None
            else ""
        )
        echo(f"early exit: threshold {ee.threshold:g} ({ee.chosen_by}){where}")
    echo(
        f"validated at atol {r.atol:.0e} (max diff {r.models['fp32'].max_abs_diff or 0:.1e}) "
        f"→ {out}"
    )


def print_quickstart(summary: QuickstartSummary, data: str) -> None:
    """The quickstart's table: each model against the teacher's fp32 ONNX (first row).
    Eight columns that fit an 80-column terminal; quickstart.json has every figure."""
    from rich.table import Table

    from edgekd.progress import console, shown

    def num(value: float | None, fmt: str) -> str:
        return "n/a" if value is None else format(value, fmt)

    def ratio(base: float | None, value: float | None) -> str:
        return "n/a" if not base or not value else f"{base / value:.1f}×"

    table = Table(
        title=f"edgekd quickstart: {shown(data)}, 1 thread, batch 1, {summary.seq_len} tokens"
    )
    for col in ("model", "acc", "MB", "p50 ms", "p90 ms", "e2e p50", "smaller", "faster"):
        table.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    base = summary.rows[0]
    for r in summary.rows:
        table.add_row(
            shown(r.model),
            num(r.accuracy, ".4f"),
            num(None if r.bytes is None else r.bytes / 1e6, ".2f"),
            num(r.p50_ms, ".3f"),
            num(r.p90_ms, ".3f"),
            num(r.e2e_p50_ms, ".3f"),
            ratio(base.bytes, r.bytes),
            ratio(base.p50_ms, r.p50_ms),
        )
    console.print(table)
    if summary.tfidf_accuracy is not None:
        shipped, margin = summary.rows[-1], ""
        if shipped.accuracy is not None:
            points = 100 * (shipped.accuracy - summary.tfidf_accuracy)
            margin = f" ({shown(shipped.model)} {points:+.1f} pt)"
        console.print(f"TF-IDF + LR on the same rows: {summary.tfidf_accuracy:.4f}{margin}")
    console.print(
        f"e2e = tokenize + infer one dev text at a time; budget "
        f"{'met' if summary.check.passed else 'MISSED'}; total {summary.seconds:.0f} s"
    )
