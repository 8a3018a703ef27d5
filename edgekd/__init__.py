"""edgekd: distil, export, profile and budget-check text classifiers for edge devices.

Importing this package is cheap on purpose: torch, transformers and onnxruntime are
imported only by the modules that need them, so `edgekd --help` starts instantly.
"""

import os

__version__ = "0.1.0"

# MKL's strict reproducibility mode: its GEMMs then give the same bits on any thread
# count, so the ThreadGovernor (edgekd.threads), which switches between 1 and all cores
# by measured speed, never changes a student, and a resumed run ends where an
# uninterrupted one does. Read once, when MKL first runs: a user's own setting wins.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
