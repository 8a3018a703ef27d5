"""MkDocs hook: a table written for GitHub reads the same on the site.

In a table row GitHub needs a pipe inside a code span escaped (`` `logits\\|probs` ``)
and shows it without the backslash; Python-Markdown's tables keep a code span whole
already, so they would show the backslash. On table rows this drops it inside code
spans, and one source reads right in both places. Runs after the other hooks (last in
mkdocs.yml), so the generated CLI reference is covered too.
"""

from __future__ import annotations

import re
from typing import Any

CODE = re.compile(r"(`+)(.+?)\1")  # a code span, opened and closed by equal backtick runs


def unescape_code_pipes(markdown: str) -> str:
    lines = markdown.split("\n")
    for i, line in enumerate(lines):
        if line.lstrip().startswith("|") and "\\|" in line:
            lines[i] = CODE.sub(lambda m: m.group(0).replace("\\|", "|"), line)
    return "\n".join(lines)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return unescape_code_pipes(markdown)
