"""MkDocs hook: the CLI reference (`docs/reference/cli.md`), rendered from the Typer app
at build time, so it cannot drift from the code.

The page's source holds the introduction and one marker line, `<!-- cli-reference -->`;
this hook replaces the marker with, for every command and sub-command of
`typer.main.get_command(edgekd.cli.app)` (the click command tree `edgekd` runs), its
help text, usage line and one table row per option: the option as `edgekd COMMAND
--help` spells it, its help, its default. Only click's public surface is read
(`list_commands`, `get_command`, `get_usage`, `Parameter.get_help_record`), so the page
follows whatever the app declares, a command group added later included. `edgekd.cli`
is imported by that name only: it may be a module or a package.
"""

from __future__ import annotations

import re
from typing import Any

# The page this hook fills in, and the line of it that the reference replaces.
PAGE = "reference/cli.md"
MARKER = "<!-- cli-reference -->"


def command_tree() -> Any:
    """The click command `edgekd` runs (imported late: the hook module loads first)."""
    import typer.main

    from edgekd.cli import app

    return typer.main.get_command(app)


def cell(text: str) -> str:
    """One Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def split_extras(help_text: str) -> tuple[str, dict[str, str], bool]:
    """click's help record is `help  [default: X; x>=0; required]` (bracketed groups
    after two spaces, or alone when there is no help): the help, the `key: value` extras
    (a bare range such as `x>=0` as `range`), and whether it is required."""
    extras: dict[str, str] = {}
    required = False
    while True:
        found = re.search(r"(?:^|\s{2})\[([^\[\]]*)\]\s*$", help_text)
        if not found:
            break
        help_text = help_text[: found.start()]
        for item in found.group(1).split("; "):
            key, sep, value = item.partition(": ")
            if sep:
                extras[key.strip()] = value.strip()
            elif item.strip() == "required":
                required = True
            elif item.strip():
                extras["range"] = item.strip()
    return help_text.strip(), extras, required


def default_cell(default: str) -> str:
    """A literal default as code (`0.0001`); typer's descriptive ones, which it writes in
    parentheses (`(off)`, `(none: no repair)`), as plain words."""
    if default.startswith("(") and default.endswith(")"):
        return f"*{cell(default[1:-1])}*"
    if default.startswith("**") or not default:
        return default
    return f"`{cell(default)}`"


def anchor(path: list[str]) -> str:
    return "-".join(path)


def render_command(command: Any, ctx: Any, path: list[str], out: list[str]) -> None:
    level = "#" * min(len(path) + 1, 6)
    name = " ".join(path)
    out.append(f"{level} {name} {{ #{anchor(path)} }}\n")
    if getattr(command, "deprecated", False):
        out.append('!!! warning "Deprecated"\n    This command is deprecated.\n')
    help_text = (command.help or "").strip()
    if help_text:
        # Paragraphs as written; terminal line breaks inside a paragraph joined.
        paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", help_text)]
        out.append("\n\n".join(paragraphs) + "\n")
    usage = command.get_usage(ctx).strip()
    out.append(f"```text\n{usage}\n```\n")

    rows = []
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        # click leaves out an argument without help; it is still part of the command.
        record = param.get_help_record(ctx) or ((param.metavar or param.name or "").upper(), "")
        spelled, text = record
        if spelled.split(",")[-1].strip() == "--help":
            continue  # every command has it
        text, extras, required = split_extras(text)
        if "range" in extras:
            text = f"{text} Range: `{extras['range']}`.".strip()
        default = "**required**" if required else extras.get("default", "")
        rows.append(f"| `{cell(spelled)}` | {cell(text)} | {default_cell(default)} |")
    if rows:
        out.append("| option | what | default |\n|---|---|---|")
        out.append("\n".join(rows) + "\n")

    subcommands = command.list_commands(ctx) if hasattr(command, "list_commands") else []
    if subcommands:
        out.append(
            "Commands: "
            + ", ".join(f"[`{sub}`](#{anchor([*path, sub])})" for sub in subcommands)
            + ".\n"
        )
    for sub in subcommands:
        child = command.get_command(ctx, sub)
        if child is None or getattr(child, "hidden", False):
            continue
        child_ctx = child.context_class(child, info_name=sub, parent=ctx)
        render_command(child, child_ctx, [*path, sub], out)


def render() -> str:
    """The reference of every command, as Markdown (headings from `##`)."""
    root = command_tree()
    ctx = root.context_class(root, info_name="edgekd")
    out: list[str] = []
    render_command(root, ctx, ["edgekd"], out)
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"docs/{PAGE} lacks the line {MARKER} where the reference goes")
    return markdown.replace(MARKER, render())
