"""The documentation holds together: the CLI reference the site generates covers every
command and option of the real command line, the README's links into the docs resolve,
snippets name files and sections that exist, and commands only appear in blocks that
tests/test_readme.py runs. (`mkdocs build --strict` in .ci/run checks the site's own
links and anchors; these checks are fast and need no build.)"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
import typer
from test_readme import doc_files, fences
from typer.main import get_command

from conftest import REPO

pytest.importorskip("mkdocs")  # the dev extra (requirements.lock); the site's hooks use it
slugify = pytest.importorskip("markdown.extensions.toc").slugify  # MkDocs' heading anchors


def hook(name: str) -> ModuleType:
    """A MkDocs hook module from docs/hooks/, loaded as MkDocs loads it: by file path."""
    spec = importlib.util.spec_from_file_location(name, REPO / "docs" / "hooks" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sections(page: str) -> dict[str, str]:
    """A rendered reference page's text under each `{ #anchor }` heading."""
    parts = re.split(r"^#+ .*\{ #([\w-]+) \}$", page, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_cli_reference_lists_every_command_and_option_of_the_app():
    from edgekd.cli import app

    page = sections(hook("cli_reference").render())
    root = get_command(app)
    ctx = root.context_class(root, info_name="edgekd")
    assert root.list_commands(ctx), "the app has no commands"
    for name in root.list_commands(ctx):
        command = root.get_command(ctx, name)
        if command.hidden:
            continue
        text = page[f"edgekd-{name}"]  # its own heading, linkable as #edgekd-NAME
        assert f"edgekd {name}" in text
        for param in command.params:
            if param.hidden or param.name == "help":
                continue
            # An option by its last spelling (--no-guard), an argument by its metavar.
            spelled = (param.opts + param.secondary_opts)[-1]
            if param.param_type_name == "argument":
                spelled = f"`{(param.metavar or param.name).upper()} " if param.metavar else ""
                spelled = spelled or f"`{param.name}"
            assert spelled in text, f"edgekd {name}: {spelled} is missing from the reference"


def test_cli_reference_renders_a_command_group_help_and_defaults(monkeypatch):
    """A sub-command group (`edgekd cache list`) gets its own heading under its parent;
    a required option, a default and a pipe inside the help survive as one table row."""
    app = typer.Typer(help="Root.")
    cache = typer.Typer(help="Manage the cache.")

    @app.command()
    def go(out: Path = typer.Option(..., help="Where | to."), n: int = typer.Option(3)) -> None:
        """Do it."""

    @cache.command("list")
    def list_(verbose: bool = typer.Option(False, help="More.")) -> None:
        """List entries."""

    app.add_typer(cache, name="cache")
    reference = hook("cli_reference")
    monkeypatch.setattr(reference, "command_tree", lambda: get_command(app))
    page = sections(reference.render())
    assert set(page) == {"edgekd", "edgekd-go", "edgekd-cache", "edgekd-cache-list"}
    assert "| `--out <path>` | Where \\| to. | **required** |" in page["edgekd-go"]
    assert "`3`" in page["edgekd-go"] and "List entries." in page["edgekd-cache-list"]
    assert "[`list`](#edgekd-cache-list)" in page["edgekd-cache"]


def anchors(path: Path) -> set[str]:
    """The anchors a Markdown page's headings get: an explicit `{ #id }`, or the slug
    Python-Markdown (and, for these headings, GitHub) makes of the heading."""
    found, inside = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif not inside and line.startswith("#"):
            heading = line.lstrip("#").strip()
            explicit = re.search(r"\{ ?#([\w-]+) ?\}\s*$", heading)
            found.add(explicit[1] if explicit else slugify(heading, "-"))
    return found


@pytest.mark.parametrize("page", ["README.md", "benchmarks/NOTES.md"])
def test_links_outside_the_site_resolve(page):
    """README.md and the lab notes are read on GitHub too: each relative link names a
    file that exists, and an anchor one of its headings."""
    path = REPO / page
    text = "\n".join(
        line for line in path.read_text(encoding="utf-8").splitlines() if "--8<--" not in line
    )
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links, f"{page} links nothing"
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue  # http(s), mailto: not checked offline
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        assert file.exists(), f"{page}: link {link} names no file"
        if anchor and file.suffix == ".md":
            assert anchor in anchors(file), f"{page}: {link}: no such heading in {target}"


def test_readme_links_every_guide_and_the_cli_reference():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for guide in sorted((REPO / "docs" / "guides").glob("*.md")):
        assert f"(docs/guides/{guide.name})" in readme, f"README.md does not link {guide.name}"
    assert "(docs/reference/cli.md)" in readme


def test_snippets_name_files_and_sections_that_exist():
    used = 0
    for page in doc_files():
        for line in (REPO / page).read_text(encoding="utf-8").splitlines():
            found = re.fullmatch(r'\s*--8<-- "([^":]+)(?::([\w-]+))?"\s*', line)
            if not found:
                continue
            used += 1
            path, section = REPO / found[1], found[2]
            assert path.is_file(), f"{page}: snippet {found[1]} does not exist"
            if section:
                text = path.read_text(encoding="utf-8")
                for end in ("start", "end"):
                    assert f"--8<-- [{end}:{section}]" in text, f"{page}: {found[0]}: no {end}"
    assert used, "no page uses a snippet"


def test_commands_appear_only_in_blocks_that_run():
    """A shell command in a ```sh or ```console block would dodge test_readme: only
    bash runs, text/yaml/python are shown, and a bash block holds no snippet."""
    for page in doc_files():
        for heading, _, language, body in fences(page):
            where = f"{page}: block under '{heading}'"
            assert language in ("bash", "text", "yaml", "python", ""), f"{where}: {language}"
            if language == "bash":
                assert not any("--8<--" in line for line in body), where
            if language == "" and page != "README.md":
                raise AssertionError(f"{where}: name its language (text for output)")


def test_site_build_excludes_the_hooks_and_ignores_the_built_site():
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert "docs/hooks/cli_reference.py" in config and "hooks/" in config.split("exclude_docs")[1]
    site = re.search(r"^site_dir: (\S+)", config, re.M)
    assert site and f"{site[1]}/" in (REPO / ".gitignore").read_text().splitlines()
    assert "mkdocs build --strict" in (REPO / ".ci" / "run").read_text()


def test_table_pipes_escaped_for_github_read_plain_on_the_site():
    unescape = hook("gfm_tables").unescape_code_pipes
    row = "| `--ensemble logits\\|probs` | mean of logits \\| of probabilities |"
    assert unescape(row) == "| `--ensemble logits|probs` | mean of logits \\| of probabilities |"
    assert unescape("text `a\\|b`") == "text `a\\|b`"  # not a table row: as written
