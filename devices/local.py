"""The `local` runner: the agent in a child process on this machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from edgekd.devices.base import AGENT, Device, run_command


class LocalDevice(Device):
    def run_agent(self, files: dict[str, Path], args: list[str]) -> dict[str, Any]:
        cmd = [sys.executable, str(AGENT), *args, *self.spec.agent_args()]
        for flag, path in files.items():
            cmd += [f"--{flag}", str(path)]
        out = run_command(cmd, f"profiling agent on {self.spec.name}", self.spec.timeout_s)
        return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]
