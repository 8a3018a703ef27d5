"""MkDocs hook: the benchmark files as pages of the site, read where they are written.

`benchmarks/results/NAME.md` (each benchmark script writes its own) becomes the page
`benchmarks/results/NAME.md`, with an index of them all, and the lab notes kept beside
the scripts (`benchmarks/NOTES.md`) become `benchmarks/notes.md`. The site shows the
files a benchmark run last wrote, never a copy, and the relative links between them
(`results/NAME.md` from the notes) read the same on the site as in the repository.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

INDEX = """\
# Raw results

The Markdown each benchmark script wrote on its last full run, as committed in
`benchmarks/results/` (beside it, the JSON with every figure). The pages of this
section explain what each measures and what was learnt; these are the tables
themselves.

| results file | title |
|---|---|
"""


def title(path: Path) -> str:
    """The file's first heading; a smoke run's note line comes first in a smoke run."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem


def on_files(files: Any, config: Any, **kwargs: Any) -> Any:
    from mkdocs.structure.files import File, InclusionLevel

    bench = Path(config.config_file_path).parent / "benchmarks"
    rows = []
    for path in sorted((bench / "results").glob("*.md")):
        uri = f"benchmarks/results/{path.name}"
        # Reached from the index and the pages that quote them, not listed in the nav.
        page = File.generated(
            config, uri, abs_src_path=str(path), inclusion=InclusionLevel.NOT_IN_NAV
        )
        files.append(page)
        rows.append(f"| [{path.name}]({path.name}) | {title(path).replace('|', '/')} |")
    index = INDEX + "\n".join(rows) + "\n"
    files.append(File.generated(config, "benchmarks/results/index.md", content=index))
    notes = bench / "NOTES.md"
    files.append(File.generated(config, "benchmarks/notes.md", abs_src_path=str(notes)))
    return files
