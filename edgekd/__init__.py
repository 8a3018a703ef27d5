"""edgekd: distil, export, profile and budget-check text classifiers for edge devices.

Importing this package is cheap on purpose: torch, transformers and onnxruntime are
imported only by the modules that need them, so `edgekd --help` starts instantly.
"""

import os
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed


def _version() -> str:
    """The installed distribution's version (pyproject.toml's `version`, as pip recorded
    it), so `edgekd --version`, bug reports and every artifact name one number that
    cannot drift from the package. "0+unknown" (PEP 440's local form) when this source
    tree is imported without being installed."""
    try:
        return _installed("edgekd")
    except PackageNotFoundError:
        return "0+unknown"


__version__ = _version()

# MKL's strict reproducibility mode: its GEMMs then give the same bits on any thread
# count, so the ThreadGovernor (edgekd.threads), which switches between 1 and all cores
# by measured speed, never changes a student, and a resumed run ends where an
# uninterrupted one does. Read once, when MKL first runs: a user's own setting wins.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
