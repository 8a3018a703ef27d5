"""The `edgekd` command line: one module per command (or pair of commands).

Each command reads the same way: `edgekd.resolve` builds its config (typed option >
`-s` > `--config` file > the model's default), its stage runs, `edgekd.render` shows
the result. Start-up stays fast: torch, transformers and onnxruntime are imported only
inside the command that needs them (a test guards that `edgekd --help` imports none).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from edgekd.cli import (
    bundle,
    check,
    devices,
    distill,
    evaluate,
    export,
    plan,
    profile,
    recipe,
    teacher,
)
from edgekd.cli.base import app, user_errors
from edgekd.resolve import resolve as load_config  # --config and -s alone (tests, scripts)

# In `edgekd --help`'s order: the chain first, then its tools.
COMMANDS: dict[str, Callable[..., Any]] = {
    "teacher": teacher.teacher,
    "distill": distill.distill,
    "eval": evaluate.eval_,
    "export": export.export,
    "trim": export.trim,
    "bundle": bundle.bundle,
    "predict": bundle.predict,
    "profile": profile.profile,
    "check": check.check,
    "plan": plan.plan,
    "run": recipe.run_,
    "report": recipe.report,
    "devices": devices.devices,
    "quickstart": recipe.quickstart,
}
for _name, _command in COMMANDS.items():
    app.command(_name)(user_errors(_command))

__all__ = ["app", "load_config"]
