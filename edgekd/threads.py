"""CPU threads: how many cores edgekd may use, and how its threads wait.

Under another process busy on both cores, PyTorch's OpenMP threads (libgomp) spin
between parallel regions for up to 300,000 iterations by default, burning the
time slices the other process needs, and every barrier then waits for a thread the
scheduler has parked: a 64-d BiLSTM training at batch 256 fell from 3,087 to 367
rows/s (8.4×) under a 2-thread matmul load on 2 cores. With a short spin before
sleeping (`GOMP_SPINCOUNT`) it kept ~45% of its quiet speed at a ~15% quiet cost
(benchmarks/load.py measures both). onnxruntime labelling uses single-thread
sessions, one per core (`edgekd.students.predict.OnnxPredictor(workers=...)`), which
have no pool to spin in.
"""

from __future__ import annotations

import os

# Iterations a libgomp thread spins before it sleeps; read once, when torch first loads
# libgomp, so this must run before `import torch` (edgekd/__init__ calls it). A value
# the user exported wins.
GOMP_SPINCOUNT = "30000"


def set_wait_policy() -> None:
    os.environ.setdefault("GOMP_SPINCOUNT", GOMP_SPINCOUNT)


def available_cores() -> int:
    """Cores this process may run on (its affinity mask, so `taskset` and container
    CPU sets count), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows: no affinity call
        return max(1, os.cpu_count() or 1)
