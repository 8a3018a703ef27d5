"""CPU threads: how many cores edgekd may use, and how many a training loop uses.

PyTorch's CPU kernels split each op across threads and meet at a barrier after it.
With another process busy on the same cores, the scheduler parks one of those threads
and every barrier waits for it: a BiLSTM training on 2 threads fell from ~2,000 to
~30 rows/s (66×) under a 2-thread matmul load on 2 cores, while 1 thread kept ~1,000
(benchmarks/labelling_load.py). Shortening libgomp's spin (GOMP_SPINCOUNT 30,000
instead of 300,000) only lifted 30 to ~100. So training loops run a `ThreadGovernor`,
which measures and picks the thread count; onnxruntime labelling uses single-thread
sessions, one per core (`OnnxPredictor(workers=...)`), which have no barrier at all.
"""

from __future__ import annotations

import os


def available_cores() -> int:
    """Cores this process may run on (its affinity mask, so `taskset` and container
    CPU sets count), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows: no affinity call
        return max(1, os.cpu_count() or 1)


class ThreadGovernor:
    """Chooses PyTorch's intra-op thread count while a loop runs, from measured speed.

    On a quiet machine all cores pay (the BiLSTM trains ~1.5× faster on 2 threads
    than on 1). Under another process busy on the same cores, every parallel region
    ends in a barrier that waits for a thread the scheduler has parked: 2 threads fell
    to 1-6% of their quiet speed while 1 thread kept 78-94% (benchmarks/labelling_load.py).
    So the loop is timed in windows of `seconds`; each count's latest speed is kept,
    the faster count runs, and every `probe_every`-th window runs the other count, so
    a load that comes or goes is followed within seconds. A probe costs at most one
    window in ten. The BiLSTM's weights come out bit-identical on 1 and 2 threads
    (tests/test_threads.py), so the choice never changes the student.
    """

    def __init__(
        self, cores: int | None = None, seconds: float = 2.0, probe_every: int = 10
    ) -> None:
        import torch

        self.torch = torch
        self.counts = sorted({1, cores or available_cores()}, reverse=True)
        self.seconds, self.probe_every = seconds, probe_every
        self.speed: dict[int, float] = {}  # rows/s of each count's latest window
        self.current = self.counts[0]
        self.windows, self.rows = 0, 0
        self.start: float | None = None
        torch.set_num_threads(self.current)

    def step(self, rows: int) -> None:
        """After each step of `rows` rows; at a window's end, pick the next count."""
        import time

        now = time.perf_counter()
        if self.start is None:  # timing starts after the first step (warm-up)
            self.start = now
            return
        self.rows += rows
        if now - self.start < self.seconds or len(self.counts) == 1:
            return
        self.speed[self.current] = self.rows / (now - self.start)
        self.windows, self.rows, self.start = self.windows + 1, 0, now
        other = next(c for c in self.counts if c != self.current)
        if other not in self.speed or self.windows % self.probe_every == 0:
            nxt = other
        else:
            nxt = max(self.speed, key=self.speed.__getitem__)
        if nxt != self.current:
            self.current = nxt
            self.torch.set_num_threads(nxt)

    def restart(self) -> None:
        """Drop the window under way: the time since was spent on something other
        than training steps (an evaluation), and would read as a slow thread count."""
        self.start, self.rows = None, 0

    def close(self) -> None:
        """Give the process back all its cores (the next stage decides for itself)."""
        self.torch.set_num_threads(self.counts[0])
