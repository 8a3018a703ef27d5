"""edgekd: distil, export, profile and budget-check text classifiers for edge devices.

Importing this package is cheap on purpose: torch, transformers and onnxruntime are
imported only by the modules that need them, so `edgekd --help` starts instantly.
"""

__version__ = "0.1.0"
