"""requirements.lock, the set the README's set-up installs, agrees with pyproject.toml:
every dependency (and the dev extra) is pinned, hashed, and inside its declared range;
torch, which the lock leaves out, is pinned by the set-up's own line inside its range."""

from __future__ import annotations

import re

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from conftest import REPO

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; 3.10 users need no lock test


def lock_entries(text: str) -> dict[str, tuple[Version, int]]:
    """name → (pinned version, number of hashes) of every `name==version \\` entry."""
    entries: dict[str, tuple[Version, int]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        head = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", block)
        if head:
            name = canonicalize_name(head.group(1))
            entries[name] = (Version(head.group(2)), block.count("--hash=sha256:"))
    return entries


def declared() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = project["dependencies"] + project["optional-dependencies"]["dev"]
    return [Requirement(r) for r in names]


def setup_command() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    return readme.split("<!-- setup -->", 1)[1].split("```")[1]


def test_lock_pins_every_declared_dependency_inside_its_range():
    pins = lock_entries((REPO / "requirements.lock").read_text())
    for req in declared():
        name = canonicalize_name(req.name)
        if name == "torch":
            continue  # pinned by the set-up's own line (next test)
        assert name in pins, f"{req.name} is missing from requirements.lock: run bash .ci/lock"
        version, _ = pins[name]
        assert req.specifier.contains(version, prereleases=True), (
            f"requirements.lock pins {req.name}=={version} outside pyproject's {req}: "
            "run bash .ci/lock"
        )


def test_lock_hashes_every_entry_and_leaves_torch_to_the_setup_line():
    pins = lock_entries((REPO / "requirements.lock").read_text())
    assert len(pins) > 50  # the whole closure, not only the direct dependencies
    assert all(hashes >= 1 for _, hashes in pins.values()), "an entry without --hash"
    assert "torch" not in pins and not any(n.startswith("nvidia-") for n in pins)
    torch = next(r for r in declared() if r.name == "torch")
    pinned = re.search(r"pip install torch==(\S+)", setup_command())
    assert pinned and torch.specifier.contains(pinned.group(1)), setup_command()


def test_setup_installs_from_the_lock_with_hashes_and_resolves_nothing():
    command = setup_command()
    assert "--require-hashes -r requirements.lock" in command
    # --no-deps everywhere after torch: nothing is left for pip's resolver to choose.
    after_torch = command.split("pip install torch==", 1)[1].split("&&")[1:]
    installs = [c for c in after_torch if "pip install" in c]
    assert installs and all("--no-deps" in c for c in installs), command
