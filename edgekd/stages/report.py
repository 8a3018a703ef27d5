"""`edgekd report RUN_DIR`: one self-contained HTML page and PNG plots of a run.

It reads what the other commands wrote under RUN_DIR (`export.json`,
`profile*.json`, `check*.json`, `manifest.json`), so it works on a recipe's
folder, a quickstart's or any folder of hand-run steps:

* accuracy vs p50 latency and accuracy vs bytes per device, teacher and every
  student model, with the Pareto front (no other model at least as accurate,
  as fast and as small) marked;
* a table per device; each budget check with every limit's pass/fail.

The PNGs are embedded as data URIs, so the page opens anywhere as one file.
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekd.artifacts import (
    CHECK_GLOB,
    PROFILE_GLOB,
    REPORT_PAGE,
    CheckResult,
    ExportReport,
    ProfileSweep,
    ReportPoint,
    ReportPoints,
    RunManifest,
    read_profile,
)
from edgekd.budget import measured
from edgekd.errors import EdgeKDError
from edgekd.io import atomic_dir, check_not_input, check_output

FRONT_COLOUR = "#d62728"  # Pareto-front markers; the render test looks for this red
OTHER_COLOUR = "#1f77b4"


@dataclass
class Point:
    """One model: its accuracy and size, and its profile on each device."""

    label: str
    accuracy: float | None
    bytes: int
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)  # device → profile


def positive(value: Any) -> float | None:
    """`value` when it can sit on a log axis or under a ratio (`measured` and above 0),
    else None: a p50 of 0, NaN or none, or a 0-byte model file, gets no ratio and no
    point on the plot (each crashed the page before)."""
    value = measured(value)
    return value if value is not None and value > 0 else None


def ratio(base: Any, value: Any) -> str:
    """`base / value` as "2.5×", or "—" unless both are `positive`."""
    a, b = positive(base), positive(value)
    return "—" if a is None or b is None else f"{a / b:.1f}×"


def front_marks(rows: list[tuple[Point, dict[str, Any]]]) -> list[bool]:
    """Each row on the Pareto front (`pareto_front`), counting only measured rows: one
    without accuracy, latency or size is never on it."""
    values = [
        (measured(p.accuracy), positive(prof.get("p50_ms")), positive(p.bytes)) for p, prof in rows
    ]
    known = [(a, t, b) for a, t, b in values if a is not None and t and b]
    marks = iter(pareto_front(known))  # type: ignore[arg-type]  # None filtered above
    return [next(marks) if a is not None and t and b else False for a, t, b in values]


def variant_name(export_dir: Path, run_dir: Path) -> str:
    """`run/small/export` → `small`; `run/export` (one student) → `student`."""
    folder = export_dir.parent if export_dir.name == "export" else export_dir
    return "student" if folder == run_dir else folder.name


def found(run_dir: Path, pattern: str, only: list[Path] | None) -> list[Path]:
    """Files matching `pattern` under `run_dir`, or only under the `only` folders."""
    roots = only if only is not None else [run_dir]
    return sorted(f for root in roots if root.is_dir() for f in root.rglob(pattern))


def collect_points(run_dir: Path, only: list[Path] | None = None) -> list[Point]:
    """Teacher and student models found under `run_dir`, with their profiles."""
    points: dict[Path, Point] = {}
    teacher_acc: float | None = None
    for export in found(run_dir, ExportReport.FILE, only):
        report = ExportReport.read(export)
        variant = variant_name(export.parent, run_dir)
        for kind, entry in report.models.items():
            path = (export.parent / entry.path).resolve()
            if path.is_file():
                label = f"{variant} {kind}"
                points[path] = Point(label, entry.accuracy, path.stat().st_size)
        teacher_acc = report.teacher_accuracy or teacher_acc
    for prof_path in found(run_dir, PROFILE_GLOB, only):
        read = read_profile(prof_path)
        if isinstance(read, ProfileSweep):  # the plots use single-length profiles
            continue
        prof = read.model_dump(exclude_none=True)
        model = Path(read.model).resolve()
        if model not in points and model.is_file():  # the teacher's ONNX, or a bare model
            is_teacher = "teacher" in model.parent.name
            label = "teacher fp32" if is_teacher else model.parent.name + " " + model.stem
            acc = teacher_acc if is_teacher else prof.get("accuracy")
            points[model] = Point(label, acc, model.stat().st_size)
        if model in points:
            points[model].profiles[read.device] = prof
    if not points:
        raise EdgeKDError(
            f"{run_dir} holds no export.json or profile*.json; pass a folder that "
            "`edgekd run`, `quickstart` or `export` + `profile` wrote"
        )
    return sorted(points.values(), key=lambda p: -p.bytes)


def pareto_front(rows: list[tuple[float, float, float]]) -> list[bool]:
    """For (accuracy, latency, bytes) rows, whether each is on the Pareto front:
    no other row is at least as good on all three and better on one."""

    def dominates(a: tuple[float, float, float], b: tuple[float, float, float]) -> bool:
        no_worse = a[0] >= b[0] and a[1] <= b[1] and a[2] <= b[2]
        return no_worse and (a[0] > b[0] or a[1] < b[1] or a[2] < b[2])

    return [not any(dominates(o, r) for o in rows if o is not r) for r in rows]


def device_rows(points: list[Point], device: str) -> list[tuple[Point, dict[str, Any]]]:
    return [(p, p.profiles[device]) for p in points if device in p.profiles]


def label_offsets(xs: list[float], ys: list[float]) -> list[int]:
    """Vertical label offsets (points) that stack the labels of nearby markers.

    Nearby = within 8% of the log-x span and 6% of the y span; each earlier
    neighbour pushes a label one line (11 pt) down.
    """
    lx = [math.log10(x) for x in xs]
    span_x = (max(lx) - min(lx)) or 1.0
    span_y = (max(ys) - min(ys)) or 1.0
    out = []
    for i in range(len(xs)):
        near = sum(
            abs(lx[i] - lx[j]) < 0.08 * span_x and abs(ys[i] - ys[j]) < 0.06 * span_y
            for j in range(i)
        )
        out.append(5 - 11 * near)
    return out


def plot_device(rows: list[tuple[Point, dict[str, Any]]], device: str, out: Path) -> Path | None:
    """Two panels: accuracy vs p50 ms, accuracy vs MB (log x), front in red."""
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator

    scored = [
        (p, prof)
        for p, prof in rows
        if measured(p.accuracy) is not None and positive(prof.get("p50_ms")) and positive(p.bytes)
    ]
    if not scored:
        return None
    front = front_marks(scored)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    panels = (
        ("p50 latency, ms (log)", lambda p, prof: prof["p50_ms"]),
        ("model file, MB (log)", lambda p, prof: p.bytes / 1e6),
    )
    for ax, (xlabel, x_of) in zip(axes, panels, strict=True):
        xs = [x_of(p, prof) for p, prof in scored]
        ys = [p.accuracy or 0.0 for p, _ in scored]  # scored: accuracy is set
        colours = [FRONT_COLOUR if f else OTHER_COLOUR for f in front]
        ax.scatter(xs, ys, c=colours, s=[90 if f else 45 for f in front], zorder=3)
        for (p, _), x, y, dy in zip(scored, xs, ys, label_offsets(xs, ys), strict=True):
            ax.annotate(p.label, (x, y), textcoords="offset points", xytext=(6, dy), fontsize=8)
        on_front = sorted((x, y) for x, y, f in zip(xs, ys, front, strict=True) if f)
        if len(on_front) > 1:
            # A staircase: between two front models, the better accuracy costs the step.
            ax.plot(
                *zip(*on_front, strict=True),
                color=FRONT_COLOUR,
                ls="--",
                lw=1,
                zorder=2,
                drawstyle="steps-post",
            )
        ax.margins(x=0.15, y=0.12)
        ax.set_xscale("log")
        # Ticks at 1, 2, 5 per decade: a 1-5 ms range would otherwise show one label.
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.set_xlabel(xlabel)
        ax.set_ylabel("dev accuracy")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"{device}: accuracy vs latency and size (red: Pareto front)")
    path = out / f"pareto-{device}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def table_html(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def fmt(value: Any, spec: str) -> str:
    """A number for the table; "—" for what is not one (None, NaN, a crafted string)."""
    value = measured(value)
    return "—" if value is None else format(value, spec)


def checks_html(run_dir: Path, only: list[Path] | None = None) -> str:
    parts = []
    for path in found(run_dir, CHECK_GLOB, only):
        check = CheckResult.read(path)
        verdict = "pass" if check.passed else "FAIL"
        where = path.parent.relative_to(run_dir)
        title = f"{where}: {check.model} model" + (f" on {check.device}" if check.device else "")
        rows = []
        for r in check.limits:
            status = f'<span class="{"ok" if r.passed else "bad"}">{r.status}</span>'
            rows.append(
                [
                    html.escape(r.limit),
                    html.escape(r.threshold_text()),
                    html.escape(r.measured_text()),
                    status,
                ]
            )
        parts.append(
            f'<h3>{html.escape(title)} — <span class="{"ok" if check.passed else "bad"}">'
            f"{verdict}</span></h3>"
            + table_html(["limit", "threshold", "measured", "status"], rows)
        )
    return "".join(parts) or "<p>No budget check in this run (edgekd check --json).</p>"


STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1150px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}
td:first-child,th:first-child{text-align:left}
img{max-width:100%;display:block;margin:0.5em 0}
.ok{color:#2a7a2a;font-weight:bold}.bad{color:#c00;font-weight:bold}
.note{color:#666;font-size:90%}
"""


def report(
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    only: list[Path] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write `report.html` and `pareto-<device>.png` into `out_dir` (RUN_DIR/report).

    `only` limits the search to those folders (a recipe passes its current stages,
    so a variant deleted from the recipe drops out of the report).
    """
    run_dir = Path(run_dir).resolve()
    if not run_dir.is_dir():
        raise EdgeKDError(f"{run_dir} is not a folder; pass the run folder to report on")
    out_dir = Path(out_dir) if out_dir else run_dir / "report"
    check_output(out_dir, overwrite)
    if only is not None:
        only = [Path(o).resolve() for o in only]
    # The folders it reads (each export.json's and profile's) are never written over; the
    # run folder holds them, and RUN_DIR/report (the default) lies inside it, beside them.
    read = {
        f.parent
        for pattern in (ExportReport.FILE, PROFILE_GLOB)
        for f in found(run_dir, pattern, only)
    }
    check_not_input(out_dir, [run_dir], nested_ok=True)
    check_not_input(out_dir, sorted(read - {run_dir}))
    points = collect_points(run_dir, only)
    devices = sorted({d for p in points for d in p.profiles})
    manifest = RunManifest.path(run_dir)
    with atomic_dir(out_dir, overwrite) as tmp:
        sections = []
        for device in devices:
            rows = device_rows(points, device)
            png = plot_device(rows, device, tmp)
            img = ""
            if png is not None:
                data = base64.b64encode(png.read_bytes()).decode("ascii")
                img = (
                    f'<img alt="accuracy vs latency and size on {device}" '
                    f'src="data:image/png;base64,{data}">'
                )
            front = front_marks(rows)
            cpu = html.escape(str(rows[0][1].get("cpu", "?")))
            # Ratios against the teacher when it was profiled, else the largest model.
            base = next(((p, prof) for p, prof in rows if p.label == "teacher fp32"), rows[0])
            table = table_html(
                [
                    "model",
                    "dev acc",
                    "bytes",
                    "p50 ms",
                    "p90 ms",
                    "IQR ms",
                    "load ms",
                    "peak RSS MB",
                    "smaller",
                    "faster",
                    "Pareto",
                ],
                [
                    [
                        html.escape(p.label),
                        fmt(p.accuracy, ".4f"),
                        f"{p.bytes:,}",
                        fmt(prof.get("p50_ms"), ".3f"),
                        fmt(prof.get("p90_ms"), ".3f"),
                        fmt(prof.get("iqr_ms"), ".3f"),
                        fmt(prof.get("load_ms"), ".1f"),
                        fmt(prof.get("peak_rss_mb"), ".1f"),
                        ratio(base[0].bytes, p.bytes),
                        ratio(base[1].get("p50_ms"), prof.get("p50_ms")),
                        "★" if f else "",
                    ]
                    for (p, prof), f in zip(rows, front, strict=True)
                ],
            )
            threads = rows[0][1].get("threads")
            sections.append(
                f"<h2>{html.escape(device)}</h2><p class=note>{cpu}, {threads} thread(s), "
                f"batch 1, seq {rows[0][1].get('seq_len')}; p50/p90 are medians over "
                f"trials.</p>{img}{table}"
            )
        unprofiled = [p for p in points if not p.profiles]
        if unprofiled:
            sections.append(
                "<h2>Not profiled</h2>"
                + table_html(
                    ["model", "dev acc", "bytes"],
                    [
                        [html.escape(p.label), fmt(p.accuracy, ".4f"), f"{p.bytes:,}"]
                        for p in unprofiled
                    ],
                )
            )
        footer = ""
        if manifest.is_file():
            versions = RunManifest.read(manifest).versions
            footer = (
                "<p class=note>"
                + html.escape(", ".join(f"{k} {v}" for k, v in versions.items()))
                + "</p>"
            )
        page = (
            f"<!doctype html><html><head><meta charset=utf-8><title>edgekd report: "
            f"{html.escape(run_dir.name)}</title><style>{STYLE}</style></head><body>"
            f"<h1>edgekd report: {html.escape(run_dir.name)}</h1>"
            + "".join(sections)
            + "<h2>Budgets</h2>"
            + checks_html(run_dir, only)
            + footer
            + "</body></html>\n"
        )
        (tmp / REPORT_PAGE).write_text(page, encoding="utf-8")
        ReportPoints(
            points=[
                ReportPoint(
                    label=p.label,
                    accuracy=p.accuracy,
                    bytes=p.bytes,
                    p50_ms={d: prof.get("p50_ms") for d, prof in p.profiles.items()},
                )
                for p in points
            ]
        ).write(tmp)
    return out_dir / REPORT_PAGE
