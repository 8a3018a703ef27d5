"""`edgekd bundle` (what ships) and `edgekd predict` (a bundle run on texts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import typer

from edgekd.cli.options import OFF, OVERWRITE
from edgekd.errors import EdgeKDError


def bundle(
    export_dir: Path = typer.Argument(..., help="Folder from `edgekd export`."),
    out: Path = typer.Option(..., "--out", help="Bundle folder; a .zip is written beside it."),
    model: Literal["auto", "int8", "fp32", "e2e"] = typer.Option(
        "auto",
        "--model",
        help="Which model ships: auto (int8 if the export kept one, else fp32), int8, fp32, "
        "or e2e (model.e2e.onnx alone, from `edgekd export --e2e`).",
    ),
    overwrite: bool = OVERWRITE,
) -> None:
    """Package the shipping model, tokenizer, labels and a sha256 manifest."""
    from edgekd.render import echo
    from edgekd.stages.bundle import make_bundle

    archive = make_bundle(export_dir, out, model, overwrite)
    echo(f"bundle → {out} and {archive}")


def predict(
    bundle_path: Path = typer.Argument(
        ..., metavar="BUNDLE", help="Bundle folder or .zip, or a model.e2e.onnx alone."
    ),
    texts: list[str] | None = typer.Argument(
        None, help="Texts to classify.", show_default="none: read --file"
    ),
    file: Path | None = typer.Option(
        None,
        "--file",
        help="One text per line; 'first<TAB>second' is a sentence pair.",
        show_default="none",
    ),
    json_out: bool = typer.Option(
        False, "--json", help="One JSON object per line instead of a table.", show_default=OFF
    ),
    threads: int = typer.Option(
        0, "--threads", min=0, help="onnxruntime intra-op threads (0: all cores)."
    ),
) -> None:
    """Classify texts with a bundle (onnxruntime + numpy only: no torch, no transformers)."""
    from edgekd.render import print_predictions
    from edgekd.stages.bundle import Bundle, OneFile

    rows = [*(texts or []), *(read_texts(file) if file is not None else [])]
    if not rows:
        raise EdgeKDError("no texts given; pass them as arguments or with --file")
    model = OneFile(bundle_path, threads) if bundle_path.suffix == ".onnx" else None
    print_predictions(rows, (model or Bundle(bundle_path, threads)).predict(rows), json_out)


def read_texts(file: Path) -> list[Any]:
    """`--file`'s texts, one a line; `first<TAB>second` a sentence pair."""
    from edgekd.io import read_regular

    if file.is_dir():
        raise EdgeKDError(f"--file {file} is a folder; give a text file, one text per line")
    # A regular file only: a FIFO would block the read (and was called missing).
    data = read_regular(file, "--file", "give a text file, one text per line")
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise EdgeKDError(
            f"--file {file} is not UTF-8 (byte {e.start}); save it as UTF-8"
        ) from None
    rows: list[Any] = []
    for line in lines:
        if line.strip():
            first, tab, second = line.partition("\t")
            rows.append((first, second) if tab else line)
    return rows
