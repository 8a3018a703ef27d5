"""The `local` runner: the agent in a child process on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from edgekd.devices.base import AGENT, Device
from edgekd.errors import EdgeKDError


class LocalDevice(Device):
    def run_agent(self, model: Path, args: list[str], files: dict[str, Path]) -> dict[str, Any]:
        cmd = [sys.executable, str(AGENT), "--model", str(model), *args]
        for flag, path in files.items():
            cmd += [f"--{flag}", str(path)]
        cores = self.spec.cpu_affinity

        def pin() -> None:  # runs in the child before exec; no shell involved
            if cores:
                os.sched_setaffinity(0, cores)

        proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=pin, check=False)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise EdgeKDError(f"profiling agent failed on {self.spec.name}: {last}")
        return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
