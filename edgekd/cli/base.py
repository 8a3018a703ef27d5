"""What every command shares: the app, one-line errors, and how an option becomes a
config field.

An option's default and help come from its config model's field (`field`), so the
model is the one place a default is written; `typed` hands `edgekd.resolve` only the
options the user typed, so one left out never overrides a --config file or `-s`.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import typer
from pydantic import BaseModel
from typer.core import TyperGroup

try:  # recent typer carries its own copy of click; older releases use click itself
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover
    # The same class under its older home; mypy sees two unrelated classes.
    from click.exceptions import ClickException  # type: ignore[assignment]

from edgekd import __version__
from edgekd.errors import EdgeKDError, printable
from edgekd.resolve import Typed


class OneLineErrors(TyperGroup):
    """Usage errors (an unknown option, a value out of range) as one line on stderr,
    exit 2, like every other bad input; typer would draw a multi-line box."""

    # click's signature: `standalone_mode` passed by position lands here too.
    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        # Every argument as given but standalone_mode: click's own exit handling stays off.
        expand = windows_expand_args
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, expand, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, expand, **extra)
        except ClickException as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # bare `edgekd`: the help page
                e.show()
                sys.exit(e.exit_code)
            where = e.ctx.command_path if getattr(e, "ctx", None) else "edgekd"  # type: ignore[attr-defined]
            message = e.format_message().rstrip(".")
            typer.echo(printable(f"error: {message}; see `{where} --help`"), err=True)
            sys.exit(e.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=OneLineErrors,
    help="Distil a text classifier into an edge model, export it, profile it, check budgets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

F = TypeVar("F", bound=Callable[..., Any])

DEBUG = {"on": False}  # set by --debug; EDGEKD_DEBUG=1 does the same


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"edgekd {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    debug: bool = typer.Option(
        False,
        "--debug",
        help="On an internal error, print its traceback; show the dependencies' warnings "
        "edgekd hides (also EDGEKD_DEBUG=1).",
        show_default="off",
    ),
    version: bool = typer.Option(
        False,
        "--version",
        help="Print edgekd's version (the installed package's) and exit.",
        callback=_print_version,
        is_eager=True,  # before a command is required, as `--help` is
        show_default="off",
    ),
) -> None:
    """Distil a text classifier into an edge model, export it, profile it, check budgets."""
    from edgekd.progress import progress_style, quiet_dependencies

    DEBUG["on"] = debug
    # Warnings a dependency raises about its own API (transformers' `torch_dtype`) say
    # nothing a user can act on; --debug shows them for a bug report.
    quiet_dependencies(not (debug or os.environ.get("EDGEKD_DEBUG")))
    try:
        progress_style()  # a bad EDGEKD_PROGRESS fails now, not at the first progress bar
    except EdgeKDError as e:
        typer.echo(f"error: {printable(str(e))}", err=True)
        raise typer.Exit(e.exit_code) from None


def user_errors(fn: F) -> F:
    """Print an error as one line on stderr and exit with its code (edgekd.errors):
    an `EdgeKDError` as it says, anything else through `failures.describe`. The line
    passes `printable`: a path or a file's text it quotes cannot drive the terminal."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except EdgeKDError as e:
            typer.echo(f"error: {printable(str(e))}", err=True)
            raise typer.Exit(e.exit_code) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as e:
            from edgekd.errors import INTERNAL_ERROR
            from edgekd.failures import describe

            message, code = describe(e)
            if code == INTERNAL_ERROR and (DEBUG["on"] or os.environ.get("EDGEKD_DEBUG")):
                # The traceback follows; a report needs the version that raised it.
                typer.echo(f"edgekd {__version__} (Python {sys.version.split()[0]})", err=True)
                raise
            typer.echo(f"error: {printable(message)}", err=True)
            raise typer.Exit(code) from None

    return wrapper  # type: ignore[return-value]


def field(
    model: type[BaseModel],
    name: str,
    *decls: str,
    help: str | None = None,
    default: str | None = None,
    **extra: Any,
) -> Any:
    """A typer option whose default and help come from `model`'s field: the config
    model stays the one place a default is written (the command line's own, where the
    field declares one; a list shows comma-separated, as `--seq-len 16,32` takes it).
    `default` is the text shown instead (needed where the field's default is None:
    say what that means, e.g. "auto-detected"). `extra`: typer's (min=1)."""
    info = model.model_fields[name]
    value = info.get_default(call_default_factory=True)
    own = info.json_schema_extra
    if isinstance(own, dict) and "command_line" in own:
        value = own["command_line"]
    if isinstance(value, list):
        value = ",".join(map(str, value))
    if value is None and default is None:
        raise TypeError(f"{model.__name__}.{name} defaults to None: say what that means")
    shown = default or True
    return typer.Option(value, *decls, help=help or info.description, show_default=shown, **extra)


def default_name(model: type[BaseModel], name: str) -> str:
    """The component (or components) a field names by default, as `--help` shows it."""
    value = model.model_fields[name].get_default(call_default_factory=True)
    items = value if isinstance(value, list) else [value]
    return ",".join(getattr(c, "name", str(c)) for c in items)


# An option's config field: dotted, or (dotted, what the typed value becomes there).
Target = str | tuple[str, Callable[[Any], Any]]
Fields = Mapping[str, Target | list[Target]]  # option → the field or fields it sets


def typed(ctx: typer.Context, fields: Fields) -> Typed:
    """The options of `fields` (parameter → the field or fields it sets) the user
    typed, as config fields; one left at its default sets nothing."""
    spelled = {p.name: "/".join(p.opts + p.secondary_opts) for p in ctx.command.params}
    out = Typed()
    for name, targets in fields.items():
        source = ctx.get_parameter_source(name)
        if source is None:  # not a parameter of this command: a bug here, never "untyped"
            raise TypeError(f"{ctx.command.name} has no parameter {name!r}")
        # By name: typer carries its own copy of click, whose enum is not click's.
        given = source.name not in ("DEFAULT", "DEFAULT_MAP")
        for target in targets if isinstance(targets, list) else [targets]:
            key, convert = (target, None) if isinstance(target, str) else target
            out.flags.setdefault(key, spelled[name] or name)
            if given:
                out.values[key] = convert(ctx.params[name]) if convert else ctx.params[name]
    return out


# DataConfig's options, shared by every command that reads data (`--data` is its spec).
DATA_FIELDS = {
    "data": "spec",
    "text_column": "text_column",
    "label_column": "label_column",
    "text_pair_column": "text_pair_column",
    "max_train": "max_train",
    "max_dev": "max_dev",
    "train_split": "train_split",
    "dev_split": "dev_split",
    "encoding": "encoding",
}


def under(section: str, fields: Mapping[str, str]) -> Fields:
    """`fields` (option → field) as fields of `section` (`data.spec`)."""
    return {option: f"{section}.{name}" for option, name in fields.items()}
