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
    preset: str = Field(
        "auto",
        pattern="^(auto|avx2|avx512_vnni|arm64)$",
        description="int8 preset for this target; auto reads cpu_flags (or this machine's).",
    )
    cpu_flags: list[str] | None = Field(
        None, description="The target's CPU flags (/proc/cpuinfo), for preset auto."
    )

    def int8_preset(self) -> str:
        """The preset `edgekd export --device` uses for this target."""
        if self.preset != "auto" or self.cpu_flags is None:
            return self.preset
        from edgekd.exporters.quantize import detect_preset

        machine = "aarch64" if {"asimd", "fp"} & set(self.cpu_flags) else "x86_64"
        return detect_preset(set(self.cpu_flags), machine)[0]


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
