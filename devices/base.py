"""`Device`: a spec (what and where) and a runner (how the agent gets there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from edgekd.config import StrictModel, load_yaml, validate
from edgekd.errors import EdgeKDError
from edgekd.registry import DEVICES

SPEC_DIR = Path(__file__).parent / "specs"
AGENT = Path(__file__).parent / "agent.py"


class DeviceSpec(StrictModel):
    name: str
    description: str = ""
    runner: str = Field("local", description="Registered runner that carries the agent.")
    threads: int = Field(1, ge=1, description="Intra-op threads unless --threads overrides.")
    cpu_affinity: list[int] | None = Field(None, description="Cores to pin the agent to.")


class Device:
    """Runs `agent.py` on the target with `args` and returns its JSON."""

    def __init__(self, spec: DeviceSpec) -> None:
        self.spec = spec

    def run_agent(self, model: Path, args: list[str], files: dict[str, Path]) -> dict[str, Any]:
        raise NotImplementedError


def packaged_devices() -> list[str]:
    return sorted(p.stem for p in SPEC_DIR.glob("*.yaml"))


def load_spec(name_or_path: str) -> DeviceSpec:
    path = Path(name_or_path)
    if not path.is_file():
        path = SPEC_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            raise EdgeKDError(
                f"unknown device {name_or_path!r}; valid names: "
                f"{', '.join(packaged_devices())}, or a path to a YAML spec"
            )
    spec = validate(DeviceSpec, load_yaml(path), str(path))
    if spec.runner not in DEVICES:
        DEVICES.get(spec.runner)  # raises, listing valid runners
    return spec


def load_device(name_or_path: str) -> Device:
    spec = load_spec(name_or_path)
    return DEVICES.get(spec.runner)(spec)  # type: ignore[no-any-return]
