"""edgekd as a package a team adopts: its version (from the installed metadata, in every
artifact it writes and on `--debug` tracebacks), its license, its typed API and the
files it installs.

Most tests here read the *installed* package, so `.ci/wheel-smoke` runs this file again
from a fresh venv holding only the built wheel: there they prove what the wheel ships.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import CliRunner

import edgekd
from conftest import REPO
from edgekd.cli import app

HEAVY = ("torch", "transformers", "onnxruntime")
REINSTALL = "the installed metadata is stale: reinstall (pip install --no-deps -e .)"


def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")
    return tomllib.loads((REPO / "pyproject.toml").read_text())


# ------------------------------------------------------------------ version


def test_version_is_the_installed_distributions():
    assert edgekd.__version__ == metadata.version("edgekd")
    assert edgekd.__version__ == pyproject()["project"]["version"], REINSTALL


def test_version_is_a_local_placeholder_when_edgekd_is_not_installed(monkeypatch):
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(edgekd, "_installed", missing)
    assert edgekd._version() == "0+unknown"


def test_version_option_prints_the_version_and_imports_no_heavy_framework():
    # A real process, as a user's shell runs it: its exit code, its stdout, and (at exit)
    # which heavy frameworks were imported to print one line.
    code = (
        "import atexit, sys; "
        f"atexit.register(lambda: print([m for m in {HEAVY!r} if m in sys.modules], "
        "file=sys.stderr)); "
        "sys.argv = ['edgekd', '--version']; "
        "from edgekd.cli import app; app(prog_name='edgekd')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"edgekd {edgekd.__version__}\n"
    assert out.stderr.strip() == "[]"


def test_debug_traceback_is_headed_by_the_version_when_an_internal_error_is_raised(monkeypatch):
    import edgekd.devices.base as base

    def bug(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(base, "packaged_devices", bug)
    r = CliRunner().invoke(app, ["--debug", "devices"])
    assert isinstance(r.exception, ZeroDivisionError)
    python = sys.version.split()[0]
    assert r.stderr == f"edgekd {edgekd.__version__} (Python {python})\n"
    # Without --debug the one-line error stays one line: no version line before it.
    r = CliRunner().invoke(app, ["devices"])
    assert r.exit_code == 4 and r.stderr.startswith("error: internal error")


# ------------------------------------------------------------------ version in artifacts


def test_export_report_and_bundle_manifest_name_the_edgekd_that_wrote_them(tiny_chain: Path):
    version = edgekd.__version__
    export = json.loads((tiny_chain / "export" / "export.json").read_text())
    manifest = json.loads((tiny_chain / "bundle" / "manifest.json").read_text())
    metrics = json.loads((tiny_chain / "student" / "metrics.json").read_text())
    assert export["edgekd_version"] == manifest["edgekd_version"] == version
    assert metrics["edgekd_version"] == version
    with zipfile.ZipFile(tiny_chain / "bundle.zip") as z:  # what ships is the same file
        assert json.loads(z.read("manifest.json"))["edgekd_version"] == version
    from edgekd.artifacts import BundleManifest, ExportReport

    assert ExportReport.read(tiny_chain / "export").edgekd_version == version
    assert BundleManifest.read(tiny_chain / "bundle").edgekd_version == version


def test_resolved_configs_beside_artifacts_open_with_the_edgekd_version(tiny_chain: Path):
    for stage in ("student", "export"):
        first = (tiny_chain / stage / "config.yaml").read_text().splitlines()[0]
        assert first.startswith(f"# Resolved by edgekd {edgekd.__version__}:"), (stage, first)


@pytest.mark.parametrize(
    "model,fields",
    [
        ("TeacherConfig", {}),
        ("DistillConfig", {"teacher": "t", "epochs": 3}),
        ("ExportConfig", {"int8": False}),
        ("PlanConfig", {"teacher": "t", "data": {"spec": "d"}}),
    ],
)
def test_resolved_config_loads_back_as_written_when_it_carries_the_version(tmp_path, model, fields):
    import edgekd.config as config
    from edgekd.cli import load_config

    cls = getattr(config, model)
    cfg = cls(**fields)
    path = tmp_path / "config.yaml"
    config.save_config(cfg, path)
    assert path.read_text().startswith(config.config_header())
    # Read back as `--config` reads it: every field forbids extras, so a version stored
    # as a field would be refused here.
    assert load_config(cls, path, None) == cfg
    assert config.validate(cls, config.load_yaml(path), str(path)) == cfg


def test_artifact_from_before_versions_reads_as_unversioned_and_is_stamped_when_rewritten(
    tmp_path,
):
    from edgekd.artifacts import QuickstartSummary

    check = {"kind": "check", "model": "int8", "passed": True, "limits": []}
    old = {"kind": "quickstart", "rows": [], "seconds": 1.0, "seq_len": 8, "check": check}
    (tmp_path / "quickstart.json").write_text(json.dumps(old))
    summary = QuickstartSummary.read(tmp_path)
    # Not claimed for this edgekd, nor is the check inside it.
    assert summary.edgekd_version is None and summary.check.edgekd_version is None
    summary.write(tmp_path / "again.json")
    assert QuickstartSummary.read(tmp_path / "again.json").edgekd_version == edgekd.__version__


def test_artifact_version_that_is_not_a_string_is_refused(tmp_path):
    from edgekd.artifacts import EvalResult
    from edgekd.errors import EdgeKDError

    bad = tmp_path / "eval.json"
    fields = {"kind": "eval", "model": "m", "accuracy": 0.5, "n": 4}
    bad.write_text(json.dumps({"edgekd_version": 1, **fields}))
    with pytest.raises(EdgeKDError, match="edgekd_version"):
        EvalResult.read(bad)


# ------------------------------------------------------------------ license


def test_license_is_an_spdx_expression_with_its_text_shipped():
    project = pyproject()["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text
    meta = metadata.metadata("edgekd")
    assert meta["License-Expression"] == "Apache-2.0", REINSTALL
    assert meta.get_all("License-File") == ["LICENSE"], REINSTALL


def test_changelog_records_this_version_and_keeps_an_unreleased_section():
    version = pyproject()["project"]["version"]
    changelog = (REPO / "CHANGELOG.md").read_text()
    headings = [x for x in changelog.splitlines() if x.startswith("## ")]
    assert headings[0] == "## [Unreleased]", headings
    assert any(h.startswith(f"## [{version}] - ") for h in headings), (
        f"CHANGELOG.md has no section for {version}: add it when bumping the version"
    )


def test_readme_links_the_changelog_contributing_security_and_license():
    readme = (REPO / "README.md").read_text()
    for name in ("CHANGELOG.md", "CONTRIBUTING.md", "SECURITY.md", "LICENSE"):
        assert f"]({name})" in readme, f"README.md does not link {name}"
        assert (REPO / name).is_file(), name


# ------------------------------------------------------------------ what installs


def test_py_typed_marker_is_package_data_and_installed():
    package_data = pyproject()["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data["edgekd"]
    assert Path(edgekd.__file__).with_name("py.typed").is_file()


def _package_root() -> Path:
    """The folder the imported `edgekd` package sits in (site-packages for a wheel; the
    source tree for an editable install)."""
    return Path(edgekd.__file__).resolve().parents[1]


def test_installed_package_holds_every_file_of_the_source_package():
    installed = Path(edgekd.__file__).resolve().parent
    if installed == (REPO / "edgekd").resolve():
        pytest.skip("an editable install imports the source tree (.ci/wheel-smoke runs the wheel)")
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "edgekd", "exporters", "devices"],
        capture_output=True,
        text=True,
    )
    if tracked.returncode != 0:
        pytest.skip(f"git cannot list the source files here ({tracked.stderr.strip()})")
    # exporters/ and devices/ install as edgekd.exporters and edgekd.devices.
    where = {"edgekd": "", "exporters": "exporters/", "devices": "devices/"}
    expected = set()
    for name in tracked.stdout.split():
        top, _, rest = name.partition("/")
        expected.add(where[top] + rest)
    present = {str(p.relative_to(installed)) for p in installed.rglob("*") if p.is_file()}
    missing = sorted(expected - present)
    assert not missing, f"the installed package lacks {missing}: add them to package-data"


@pytest.mark.slow  # mypy in a subprocess, ~2 s
def test_user_script_type_checks_against_the_installed_api(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed (pip install mypy)")
    (tmp_path / "user.py").write_text(
        textwrap.dedent(
            """\
            from pathlib import Path

            import edgekd
            from edgekd import api as kd


            def ship(student: Path, out: Path) -> str:
                report = kd.export(kd.ExportConfig(int8=True), student, out)
                model = report.models[report.shipped()]
                return f"edgekd {edgekd.__version__}: {model.path}, {model.bytes} B"


            kd.distill(42, "out")  # the mistake a type checker must catch
            """
        )
    )
    # Third-party packages are skipped (Any) so the check takes a second, not a minute of
    # torch; edgekd is followed as an installed package: without py.typed mypy skips it.
    (tmp_path / "mypy.ini").write_text(
        "[mypy]\nfollow_imports = skip\n\n[mypy-edgekd.*]\nfollow_imports = normal\n"
    )
    # An editable install is an import hook mypy cannot follow: name the folder holding
    # the package (site-packages for a wheel, where this changes nothing).
    env = {**os.environ, "PYTHONPATH": str(_package_root())}
    mypy = [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir", os.devnull]
    out = subprocess.run(
        [*mypy, "user.py"],
        cwd=tmp_path,  # not the repository root, whose edgekd/ mypy would read as source
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = [x for x in out.stdout.splitlines() if ": error:" in x]
    assert errors == [
        'user.py:13: error: Argument 1 to "distill" has incompatible type "int"; '
        'expected "DistillConfig"  [arg-type]'
    ], out.stdout + out.stderr
