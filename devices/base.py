"""`Device`: a spec (what and where) and a runner (how the agent gets there).

Every runner runs the same `agent.py`; only the transport differs. A remote
runner stages the agent and its input files under fixed names in a fresh temp
folder on the target, so no command it sends ever contains a user's path.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, Field, model_validator

from edgekd.config import MAX_THREADS, PLAIN_NAME, StrictModel, load_yaml, validate
from edgekd.errors import EdgeKDError
from edgekd.registry import DEVICES, Component, NoOptions

SPEC_DIR = Path(__file__).parent / "specs"
AGENT = Path(__file__).parent / "agent.py"
STAGED_SUFFIX = {
    "model": ".onnx",
    "vs": ".onnx",
    "texts": ".txt",
    "tokenizer": ".json",
    "vs-tokenizer": ".json",
}


class DeviceSpec(StrictModel):
    # The name lands in file names (profile-NAME-model.json): a plain word, no '/'.
    name: str = Field(..., pattern=PLAIN_NAME)
    description: str = ""
    runner: str = Field("local", description="Registered runner that carries the agent.")
    # Bounded as --threads is: a spec's 100,000 hung the agent creating threads.
    threads: int = Field(
        1, ge=1, le=MAX_THREADS, description="Intra-op threads unless --threads overrides."
    )
    cpu_affinity: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, description="Cores to pin the agent to (numbers from 0)."
    )
    provider: str = Field(
        "CPUExecutionProvider", description="onnxruntime execution provider on the target."
    )
    preset: str = Field(
        "auto",
        pattern="^(auto|avx2|avx512_vnni|arm64)$",
        description="int8 preset for this target; auto reads cpu_flags (or this machine's).",
    )
    cpu_flags: list[str] | None = Field(
        None, description="The target's CPU flags (/proc/cpuinfo), for preset auto."
    )
    budget: dict[str, Any] = Field(
        default_factory=dict,
        description="Default limits for this device (budget fields); a budget file's "
        "`devices:` entry for it takes precedence.",
    )
    timeout_s: float = Field(900, gt=0, description="Limit per agent command, seconds.")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="The runner's own fields (ssh: host, user, port, ...; adb: serial, "
        "adb); a spec file writes them beside the fields above.",
    )

    def threads_for(self, requested: int | None) -> int:
        """The thread count a run on this device uses: `requested` (0: all cores, as
        onnxruntime reads it), or this spec's own when unset. Profile, plan and check
        resolve it here alike, so 0 never falls back to the spec as a falsy value."""
        return self.threads if requested is None else requested

    @model_validator(mode="before")
    @classmethod
    def _runner_fields(cls, value: Any) -> Any:
        # A spec is flat, as users write it: every key that is not a field of every
        # device belongs to its runner, and is validated by the runner's own model.
        if not isinstance(value, dict):
            return value
        common = {k: v for k, v in value.items() if k in cls.model_fields}
        own = {k: v for k, v in value.items() if k not in cls.model_fields}
        options = common.get("options") or {}
        return {**common, "options": {**options, **own} if isinstance(options, dict) else options}

    @model_validator(mode="after")
    def _runner_options(self) -> DeviceSpec:
        self.runner_options()  # an unknown runner or a bad field of its: one line, now
        return self

    def runner_options(self) -> Any:
        """The runner's typed options (its `Config`), validated through `DEVICES`."""
        return DEVICES.options(Component(name=self.runner, options=self.options), "")

    def int8_preset(self) -> str:
        """The preset `edgekd export --device` uses for this target."""
        if self.preset != "auto" or self.cpu_flags is None:
            return self.preset
        from edgekd.exporters.quantize import detect_preset

        machine = "aarch64" if {"asimd", "fp"} & set(self.cpu_flags) else "x86_64"
        return detect_preset(set(self.cpu_flags), machine)[0]

    def agent_args(self) -> list[str]:
        """Agent flags that come from the spec rather than from the caller."""
        args = ["--provider", self.provider]
        if self.cpu_affinity:
            args += ["--cpu-affinity", ",".join(str(c) for c in self.cpu_affinity)]
        return args


class RemoteOptions(StrictModel):
    """The fields every remote runner (ssh, adb) takes."""

    python: str = Field("python3", description="Python on the target, with onnxruntime + numpy.")
    remote_root: str = Field(
        "/tmp", description="Folder on the target under which a temp folder is made."
    )


class Device:
    """Runs `agent.py` on the target and returns its JSON.

    Subclasses implement `run_agent`, and declare `Config`, the spec fields of their
    own (validated when the spec is read); `files` maps agent flags (`model`, `vs`,
    `texts`, `tokenizer`) to local files the agent reads.
    """

    Config: ClassVar[type[BaseModel]] = NoOptions

    def __init__(self, spec: DeviceSpec) -> None:
        self.spec = spec
        self.opts = spec.runner_options()

    def run_agent(self, files: dict[str, Path], args: list[str]) -> dict[str, Any]:
        raise NotImplementedError


class RemoteDevice(Device):
    """Stage, run, fetch, clean up: the transport-independent half of ssh and adb."""

    Config: ClassVar[type[BaseModel]] = RemoteOptions

    def make_dir(self) -> PurePosixPath:
        raise NotImplementedError

    def push(self, local: Path, remote: PurePosixPath) -> None:
        raise NotImplementedError

    def shell(self, argv: list[str]) -> str:
        """Run `argv` on the target (each element quoted there) and return stdout."""
        raise NotImplementedError

    def fetch(self, remote: PurePosixPath) -> str:
        raise NotImplementedError

    def run_agent(self, files: dict[str, Path], args: list[str]) -> dict[str, Any]:
        folder = self.make_dir()
        try:
            agent = folder / "agent.py"
            self.push(AGENT, agent)
            cmd = [self.opts.python, str(agent), *args, *self.spec.agent_args()]
            for flag, path in files.items():
                # Fixed names on the target: a user's file name never reaches a shell.
                remote = folder / f"{flag}{STAGED_SUFFIX.get(flag, '.bin')}"
                self.push(path, remote)
                cmd += [f"--{flag}", str(remote)]
            out = folder / "result.json"
            self.shell([*cmd, "--out", str(out)])
            result: dict[str, Any] = json.loads(self.fetch(out))
        finally:
            # A failed cleanup (say, the link dropped) must not hide the error that
            # stopped the run; /tmp-like roots are cleared by the target anyway.
            with contextlib.suppress(EdgeKDError):
                self.shell(["rm", "-rf", str(folder)])
        result["remote_model"] = result["model"]
        result["model"] = str(files["model"].resolve())
        if "vs" in result:
            result["vs"]["b"]["model"] = str(files["vs"].resolve())
        return result


def run_command(
    argv: list[str], what: str, timeout: float, fix: str = "", stdin: Path | None = None
) -> str:
    """Run a transport command (no shell); a failure is one line naming the fix."""
    try:
        with open(stdin, "rb") if stdin else contextlib.nullcontext() as f:
            proc = subprocess.run(argv, stdin=f, capture_output=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise EdgeKDError(f"{argv[0]} is not installed or not on PATH; install it") from None
    except subprocess.TimeoutExpired:
        raise EdgeKDError(
            f"{what} took over {timeout:.0f} s; raise timeout_s in the spec"
        ) from None
    stdout = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        stderr = proc.stderr.decode("utf-8", "replace")
        lines = stderr.strip().splitlines() or stdout.strip().splitlines()
        last = lines[-1] if lines else f"exit status {proc.returncode}"
        raise EdgeKDError(f"{what} failed: {last}" + (f"; {fix}" if fix else ""))
    return stdout


def packaged_devices() -> list[str]:
    return sorted(p.stem for p in SPEC_DIR.glob("*.yaml"))


def load_spec(name_or_path: str, **overrides: Any) -> DeviceSpec:
    """A packaged spec by name or a YAML file, with `overrides` (e.g. host) applied."""
    path = Path(name_or_path)
    # Something at that path that is no regular file (a FIFO, a folder) is named by
    # `load_yaml`'s reader, not called an unknown device.
    named = os.sep in name_or_path or path.suffix in (".yaml", ".yml")
    if not path.is_file() and not (named and os.path.lexists(path)):
        path = SPEC_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            raise EdgeKDError(
                f"unknown device {name_or_path!r}; valid names: "
                f"{', '.join(packaged_devices())}, or a path to a YAML spec"
            )
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise EdgeKDError(f"{path} must be a YAML mapping (name, runner, ...); fix the file", 2)
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        spec = validate(DeviceSpec, data, str(path))
    except EdgeKDError as e:  # the runner's own fields: say which file
        raise EdgeKDError(str(e) if str(e).startswith(str(path)) else f"{path}: {e}", 2) from None
    if spec.budget:
        from edgekd.budget import Budget

        validate(Budget, spec.budget, f"{path}: budget")
    return spec


def load_device(name_or_path: str, **overrides: Any) -> Device:
    spec = load_spec(name_or_path, **overrides)
    return DEVICES.get(spec.runner)(spec)  # type: ignore[no-any-return]
