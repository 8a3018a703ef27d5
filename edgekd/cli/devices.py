"""`edgekd devices`: the packaged device specs."""

from __future__ import annotations

import typer


def devices(
    show: str | None = typer.Option(
        None,
        "--show",
        help="Print this spec's YAML (copy it to make your own).",
        show_default="none: list them all",
    ),
) -> None:
    """List the packaged device specs."""
    from edgekd.devices.base import SPEC_DIR, load_spec, packaged_devices
    from edgekd.render import print_devices

    if show:
        load_spec(show)  # unknown names fail with the list of valid ones
        typer.echo(SPEC_DIR.joinpath(f"{show}.yaml").read_text(), nl=False)
        return
    print_devices({name: load_spec(name) for name in packaged_devices()})
