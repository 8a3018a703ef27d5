"""The report: Pareto front by hand, and the page rendered the way a person sees it."""

import json
import re
import shutil
import subprocess

import pytest

from conftest import identity_model
from edgekd.artifacts import ReportPoints
from edgekd.errors import EdgeKDError
from edgekd.stages.report import FRONT_COLOUR, collect_points, pareto_front
from edgekd.stages.report import report as write_report

CHROMIUM = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)


def test_pareto_front_keeps_only_undominated_models():
    rows = [
        (0.90, 6.0, 90e6),  # teacher: most accurate → front
        (0.86, 0.2, 1.3e6),  # small and fast → front
        (0.85, 0.3, 5.0e6),  # worse than the row above on all three → not
        (0.86, 0.2, 1.3e6),  # a tie with row 2 dominates nothing and is not dominated
        (0.80, 0.1, 9.0e6),  # fastest → front
    ]
    assert pareto_front(rows) == [True, True, False, True, True]


@pytest.fixture
def run_dir(tmp_path):
    """A run as `edgekd run` lays it out: teacher ONNX, one student, profiles, a check."""
    run = tmp_path / "run"
    (run / "student" / "export").mkdir(parents=True)
    (run / "teacher-onnx").mkdir()
    for name in ("model.onnx", "model.int8.onnx"):
        identity_model(run / "student" / "export" / name)
    identity_model(run / "teacher-onnx" / "model.onnx")
    (run / "student" / "export" / "export.json").write_text(json.dumps({
        "teacher_accuracy": 0.90,
        "models": {"fp32": {"path": "model.onnx", "accuracy": 0.86},
                   "int8": {"path": "model.int8.onnx", "accuracy": 0.85}},
    }))  # fmt: skip
    profiles = run / "profiles"
    profiles.mkdir()
    for i, (model, p50) in enumerate(
        [
            (run / "teacher-onnx" / "model.onnx", 6.0),
            (run / "student" / "export" / "model.onnx", 0.3),
            (run / "student" / "export" / "model.int8.onnx", 0.2),
        ]
    ):
        (profiles / f"profile-{i}.json").write_text(json.dumps({
            "model": str(model), "device": "local-cpu", "threads": 1, "seq_len": 24,
            "p50_ms": p50, "p90_ms": p50 * 1.2, "iqr_ms": 0.01, "load_ms": 5.0,
            "peak_rss_mb": 70.0, "cpu": "test CPU",
        }))  # fmt: skip
    (run / "student" / "check").mkdir()
    (run / "student" / "check" / "check-local-cpu.json").write_text(json.dumps({
        "model": "int8", "device": "local-cpu", "passed": False, "limits": [
            {"limit": "max_bytes", "metric": "bytes", "op": "<=", "threshold": 100.0,
             "measured": 150.0, "unit": "B"},
            {"limit": "min_accuracy", "metric": "accuracy", "op": ">=", "threshold": 0.8,
             "measured": 0.85, "unit": ""},
        ],
    }))  # fmt: skip
    return run


def test_collect_points_labels_teacher_and_students_with_their_profiles(run_dir):
    points = {p.label: p for p in collect_points(run_dir)}
    assert set(points) == {"teacher fp32", "student fp32", "student int8"}
    assert points["teacher fp32"].accuracy == 0.90
    assert points["student int8"].profiles["local-cpu"]["p50_ms"] == 0.2


def test_report_writes_page_plot_and_budget_table(run_dir):
    page = write_report(run_dir)
    text = page.read_text()
    assert (page.parent / "pareto-local-cpu.png").stat().st_size > 10_000
    assert text.count("data:image/png;base64,") == 1  # self-contained: the plot inlined
    assert "<h2>local-cpu</h2>" in text and "teacher fp32" in text
    assert "student/check: int8 model on local-cpu" in text
    assert '<span class="bad">FAIL</span>' in text and "150 B" in text
    points = {p.label: p for p in ReportPoints.read(page.parent).points}
    assert points["student int8"].p50_ms == {"local-cpu": 0.2}
    assert points["teacher fp32"].accuracy == 0.90


@pytest.mark.parametrize("p50", [0.0, float("nan"), None])
def test_report_shows_an_unmeasured_latency_as_a_dash_when_p50_is(run_dir, p50):
    """A profile whose p50 is 0, NaN or absent (a crafted or broken file; NaN is what
    `measured` reads as not measured) and a 0-byte model: the page still renders, with
    "—" where a ratio would divide by them and no star, and the plot keeps the rest.
    Before, each crashed the report (math domain error, KeyError, ZeroDivisionError)."""
    prof = run_dir / "profiles" / "profile-2.json"  # the int8 student's
    data = json.loads(prof.read_text())
    if p50 is None:
        del data["p50_ms"]
    else:
        data["p50_ms"] = p50
    prof.write_text(json.dumps(data))
    (run_dir / "student" / "export" / "model.onnx").write_bytes(b"")  # 0 bytes
    page = write_report(run_dir)
    # model, acc, bytes, p50, p90, IQR, load, RSS, smaller, faster, Pareto
    rows = {
        cells[0]: cells
        for cells in (re.findall(r"<td>(.*?)</td>", r) for r in page.read_text().split("<tr>"))
        if len(cells) == 11
    }
    assert rows["student int8"][9:] == ["—", ""]  # faster than nothing measured; no star
    assert rows["student fp32"][8] == "—"  # smaller: its file is 0 bytes
    assert rows["teacher fp32"][10] == "★"  # the measured rows still make the front
    assert (page.parent / "pareto-local-cpu.png").stat().st_size > 10_000


def test_report_gives_no_star_to_a_nan_accuracy_and_a_dash_to_a_string_cell(run_dir):
    export = run_dir / "student" / "export" / "export.json"
    data = json.loads(export.read_text())
    data["models"]["int8"]["accuracy"] = float("nan")  # NaN reads as not measured
    export.write_text(json.dumps(data))
    prof = run_dir / "profiles" / "profile-2.json"
    prof.write_text(json.dumps({**json.loads(prof.read_text()), "iqr_ms": "fast"}))
    page = write_report(run_dir)
    rows = {
        cells[0]: cells
        for cells in (re.findall(r"<td>(.*?)</td>", r) for r in page.read_text().split("<tr>"))
        if len(cells) == 11
    }
    assert rows["student int8"][1] == "—" and rows["student int8"][5] == "—"
    assert rows["student int8"][10] == ""  # it would be undominated: NaN compares false
    assert rows["student fp32"][10] == "★"


def test_report_on_an_empty_folder_names_the_fix(tmp_path):
    with pytest.raises(EdgeKDError, match=r"holds no export\.json or profile"):
        write_report(tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium)")
def test_report_renders_with_visible_plots_in_headless_chromium(run_dir, tmp_path):
    from PIL import Image

    page = write_report(run_dir)
    shot = tmp_path / "shot.png"
    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
         "--window-size=1280,1400", f"--screenshot={shot}", page.as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    img = Image.open(shot).convert("RGB")
    target = tuple(int(FRONT_COLOUR[i : i + 2], 16) for i in (1, 3, 5))
    # Pareto markers are drawn in FRONT_COLOUR and nothing else on the page is: if the
    # <img> failed to decode or were hidden, none of its pixels would be on screen.
    red = sum(
        1 for px in img.getdata() if all(abs(a - b) <= 12 for a, b in zip(px, target, strict=True))
    )
    assert red > 200, f"only {red} Pareto-marker pixels visible"


def test_label_offsets_stack_labels_of_nearby_markers_only():
    from edgekd.stages.report import label_offsets

    # x 1.0 and 1.02 (log-close), y equal: the second label goes one line down;
    # x 10 is far on a 1..10 log axis, so its label stays up.
    assert label_offsets([1.0, 1.02, 10.0], [0.85, 0.85, 0.85]) == [5, -6, 5]
