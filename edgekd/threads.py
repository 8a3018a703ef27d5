"""CPU threads: how many cores edgekd may use, and how many a training loop uses.

PyTorch's CPU kernels split each op across threads and meet at a barrier after it.
With another process busy on the same cores, the scheduler parks one of those threads
and every barrier waits for it: a BiLSTM training on 2 threads fell from ~2,000 to
~30 rows/s (66×) under a 2-thread matmul load on 2 cores, while 1 thread kept ~1,000
(benchmarks/labelling_load.py). Shortening libgomp's spin (GOMP_SPINCOUNT 30,000
instead of 300,000) only lifted 30 to ~100. So training loops run a `ThreadGovernor`,
which measures and picks the thread count; onnxruntime labelling uses single-thread
sessions, one per core (`OnnxPredictor(workers=...)`), which have no barrier at all.

Switching thread counts must never change a student: the same command gives the same
weights, resumed or not, loaded or quiet. What makes training bit-identical on 1, 2 and
alternating threads (tests/test_threads.py, tests/distill/test_resume.py):
- MKL's strict reproducibility mode (`MKL_CBWR=AUTO,STRICT`, set by `import edgekd`),
  under which its matrix products no longer depend on the thread count;
- `ExactLayerNorm` and `exact_softmax`: torch's fused LayerNorm and softmax backward
  kernels sum over rows or within rows in per-thread pieces;
- `exact_sum` and `exact_clip_grad_norm_`: a reduction of a whole tensor to one number
  runs in per-thread partial sums (layer losses, gradient norms);
- no one-row training batch (`edgekd.data.bucketed_batches`): oneDNN's LSTM backward
  on one row does not follow the strict mode;
- `one_thread` around one-off work outside MKL's GEMMs (the SVD of the embedding
  initialisation).
Where the strict mode is not in effect (no MKL, or MKL ran before edgekd was imported),
the governor keeps one thread count for the whole run.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# mkl_service.h: the strict-mode bit of a CNR setting, and "every setting" to query.
MKL_CBWR_STRICT, MKL_CBWR_ALL = 0x10000, -1


def available_cores() -> int:
    """Cores this process may run on (its affinity mask, so `taskset` and container
    CPU sets count), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows: no affinity call
        return max(1, os.cpu_count() or 1)


def processes_here() -> int:
    """Processes of this run on this machine: torchrun's LOCAL_WORLD_SIZE (which
    `accelerate launch` sets), 1 alone. They share `available_cores()`."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:  # set by something else, to something else: count this one only
        return 1


def core_share() -> int:
    """This process's share of the cores (all of them alone). torchrun gives each
    process OMP_NUM_THREADS=1 whatever the machine, which would label on 1 of 16 cores."""
    return max(1, available_cores() // processes_here())


def strict_blas() -> bool | None:
    """Whether torch's MKL runs in strict reproducibility mode: None where torch has no
    MKL to ask (its BLAS is then not known to be thread-count exact)."""
    import torch

    suffix = {"darwin": ".dylib", "win32": ".dll"}.get(sys.platform, ".so")
    name = "torch_cpu" if sys.platform == "win32" else "libtorch_cpu"
    try:
        get = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / f"{name}{suffix}"))
        query = get.mkl_serv_cbwr_get  # MKL is linked into torch's CPU library
    except (OSError, AttributeError):
        return None
    query.argtypes, query.restype = [ctypes.c_int], ctypes.c_int
    return bool(query(MKL_CBWR_ALL) & MKL_CBWR_STRICT)


# torch splits work into threads only past 32,768 elements (at::internal::GRAIN_SIZE).
GRAIN = 32768
ROW = 1024  # `exact_sum`'s row width: 1,024 outputs to split among threads


def exact_sum(x: Any) -> Any:
    """The sum of every element of tensor `x`, the same bits on any thread count.

    torch reduces a large tensor to one number in per-thread partial sums (a two-pass
    reduction), so 1 and 2 threads differ in the last bits; a reduction along one
    dimension with many outputs is split by output instead, each summed whole by one
    thread. So rows of 1,024 are summed column by column first, then the 1,024 sums
    (below the grain: serial)."""
    import torch

    flat = x.reshape(-1)
    if flat.numel() <= GRAIN:
        return flat.sum()
    pad = -flat.numel() % ROW
    if pad:
        flat = torch.nn.functional.pad(flat, (0, pad))
    return flat.view(-1, ROW).sum(0).sum()


def exact_clip_grad_norm_(parameters: Any, max_norm: float) -> Any:
    """`torch.nn.utils.clip_grad_norm_` (2-norm, fp32 CPU training) through `exact_sum`:
    its per-tensor norms reduce a whole gradient to one number, thread by thread, and
    a scale that differs in the last bit changes every weight it clips."""
    import torch

    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.zeros(())
    total = torch.stack([exact_sum(g.detach().pow(2)) for g in grads]).sum().sqrt()
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.detach().mul_(scale)
    return total


@contextmanager
def one_thread() -> Iterator[None]:
    """Within: torch computes on one thread. For one-off work whose kernels are not
    thread-count exact even in MKL's strict mode (LAPACK's SVD, reductions to one
    number), so a student starts from the same weights on a 1-core and a 16-core box."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Within: torch computes on `count` threads (None: on as many as before). For a
    process's `core_share` while processes of one run label side by side."""
    import torch

    if count is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@functools.cache
def _exact_softmax_class() -> Any:
    import torch

    class ExactSoftmax(torch.autograd.Function):
        """softmax (or log_softmax) whose backward is elementwise ops and one sum along
        `dim`. torch's own backward kernel (`_softmax_backward_data`) gives other bits
        on 1 and 2 threads past 32,768 values (BERT's attention: 8 × 12 × 20 × 20)."""

        @staticmethod
        def forward(ctx: Any, x: Any, dim: int, log: bool) -> Any:  # type: ignore[override]
            y = torch.log_softmax(x, dim) if log else torch.softmax(x, dim)
            ctx.save_for_backward(y)
            ctx.dim, ctx.log = dim, log
            return y

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:  # type: ignore[override]
            (y,) = ctx.saved_tensors
            if ctx.log:
                return g - y.exp() * g.sum(ctx.dim, keepdim=True), None, None
            return y * (g - (g * y).sum(ctx.dim, keepdim=True)), None, None

    return ExactSoftmax


def _exact_call(original: Any, log: bool) -> Any:
    """`original` (a softmax or log_softmax, function or method) with an exact backward
    for the plain call `(x, dim[, dtype=])` on a tensor that needs a gradient."""
    import torch

    exact = _exact_softmax_class()

    def call(*args: Any, **kwargs: Any) -> Any:
        x = args[0] if args else kwargs.get("input")
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        dtype = kwargs.get("dtype")
        plain = len(args) <= 2 and set(kwargs) <= {"input", "dim", "dtype"}
        if not (plain and isinstance(dim, int) and isinstance(x, torch.Tensor)):
            return original(*args, **kwargs)
        if not (torch.is_grad_enabled() and x.requires_grad):
            return original(*args, **kwargs)
        return exact.apply(x if dtype is None else x.to(dtype), dim, log)

    return call


@contextmanager
def exact_softmax() -> Iterator[None]:
    """Within: every softmax and log_softmax that torch, torch.nn.functional or a tensor
    method computes for a gradient backpropagates through `ExactSoftmax`. Attention
    code calls them by attribute (transformers' eager BERT attention calls
    `nn.functional.softmax`), so a training step's forward is wrapped in this rather
    than every model rewritten; the old functions are back on the way out."""
    import torch
    import torch.nn.functional as F

    owners = [(torch, "softmax", False), (torch, "log_softmax", True), (F, "softmax", False),
              (F, "log_softmax", True), (torch.Tensor, "softmax", False),
              (torch.Tensor, "log_softmax", True)]  # fmt: skip
    # Tensor's methods live on its C base class: what was not in the owner's own
    # namespace is deleted again on the way out, not copied into it.
    saved = [(o, name, getattr(o, name), name in vars(o)) for o, name, _ in owners]
    try:
        for (owner, name, log), (_, _, original, _) in zip(owners, saved, strict=True):
            setattr(owner, name, _exact_call(original, log))
        yield
    finally:
        for owner, name, original, own in saved:
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)


def exact_layer_norms(model: Any) -> int:
    """Replace every `nn.LayerNorm` in `model` by an `ExactLayerNorm` holding the same
    parameters (state-dict names unchanged); the number replaced."""
    import torch

    exact, swapped = _exact_layer_norm_class(), 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is torch.nn.LayerNorm:
                setattr(module, name, exact(child))
                swapped += 1
    return swapped


@functools.cache
def _exact_layer_norm_class() -> type:  # built on first use: importing threads is cheap
    import torch
    import torch.nn.functional as F

    class ExactLayerNorm(torch.nn.Module):
        """LayerNorm as normalise, then `* weight + bias` as separate ops. torch's fused
        CPU kernel sums the weight and bias gradients over rows in per-thread
        partials, so 1 and 2 threads differ in the last bits (every BERT LayerNorm,
        then the whole model after a few hundred steps); autograd's sum over rows of
        a broadcast product splits the columns instead, the same on any count."""

        def __init__(self, norm: torch.nn.LayerNorm) -> None:
            super().__init__()
            self.normalized_shape, self.eps = norm.normalized_shape, norm.eps
            self.weight, self.bias = norm.weight, norm.bias

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = F.layer_norm(x, self.normalized_shape, None, None, self.eps)
            if self.weight is not None:
                y = y * self.weight
            return y + self.bias if self.bias is not None else y

    return ExactLayerNorm


def thread_counts(cores: int | None = None) -> list[int]:
    """The intra-op thread counts a loop may switch between, most first: all of
    `cores` (default: this process's) and 1; only the first where switching would
    change the weights (torch's BLAS not MKL in strict mode)."""
    counts = sorted({1, cores or available_cores()}, reverse=True)
    return counts if len(counts) == 1 or strict_blas() else counts[:1]


# The other thread count runs one window in this many, so its speed is re-timed and a
# load that comes or goes is seen within ~20 s (10 windows of 2 s).
PROBE_EVERY = 10


class ThreadGovernor:
    """Chooses PyTorch's intra-op thread count while a loop runs, from measured speed.

    On a quiet machine all cores pay (the BiLSTM trains ~1.5× faster on 2 threads
    than on 1). Under another process busy on the same cores, every parallel region
    ends in a barrier that waits for a thread the scheduler has parked: 2 threads fell
    to 1-6% of their quiet speed while 1 thread kept 78-94% (benchmarks/labelling_load.py).
    So the loop is timed in windows of `seconds`; each count's latest speed is kept,
    the faster count runs, and every `probe_every`-th window runs the other count, so
    a load that comes or goes is followed within seconds. A probe costs at most one
    window in ten. Training is bit-identical on 1 and 2 threads in MKL's strict mode
    (module docstring), so the choice never changes the student; without that mode
    (`strict_blas()` not True) it never switches, and `note` says so.
    """

    def __init__(
        self, cores: int | None = None, seconds: float = 2.0, probe_every: int = PROBE_EVERY
    ) -> None:
        import torch

        self.torch = torch
        self.counts = thread_counts(cores)
        self.note: str | None = None
        if len(self.counts) == 1 and (cores or available_cores()) > 1:
            self.note = (
                f"threads: {self.counts[0]} for the whole run, since torch's BLAS is not "
                "MKL in strict mode (MKL_CBWR=AUTO,STRICT, set when edgekd is imported "
                "before torch computes) and switching would change the weights; a busy "
                "machine slows this run more than it would"
            )
        self.seconds, self.probe_every = seconds, probe_every
        self.speed: dict[int, float] = {}  # rows/s of each count's latest window
        self.current = self.counts[0]
        self.windows, self.rows = 0, 0
        self.start: float | None = None
        torch.set_num_threads(self.current)

    @staticmethod
    def pace(speeds: Sequence[float], probe_every: int = PROBE_EVERY) -> float:
        """Rows/s the governor trains at in the long run where its counts run at
        `speeds`: the fastest in all windows but one of every `probe_every`, the other
        count in that one. Windows are equal seconds, so the speeds average by time: 2
        threads at 1,500 rows/s and 1 at 1,000 give (9 × 1,500 + 1,000) / 10 = 1,450."""
        fast = max(speeds)
        if len(speeds) < 2:
            return fast
        return ((probe_every - 1) * fast + min(speeds)) / probe_every

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
