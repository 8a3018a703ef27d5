"""The learning rate's cool-down, shared by the teacher's fine-tune and `lr_decay:
cooldown` in distill: constant until the run knows where it ends, then linearly to 0."""

from __future__ import annotations

import math


def stale_end(step: int, share: float) -> int:
    """The end of a cool-down started at `step` because the run stopped improving: it
    spans `share` of the whole run, so ⌈step × share / (1 − share)⌉ steps (a fifth:
    800 steps so far → 200 more)."""
    return step + math.ceil(step * share / (1.0 - share))


class StepPlan:
    """The learning rate over the steps: a linear warm-up, a constant rate, then a
    linear cool-down to 0 over [decay_from, decay_to) ("warmup-stable-decay", Hu et
    al. 2024, MiniCPM). Unlike one linear decay it needs no step count up front: the
    cool-down starts when the run decides how long it will be (the budget's
    projection, the epoch cap, or a selection score that stopped rising), and the
    three step counts it chose are recorded, so a rerun reproduces it."""

    def __init__(self, warmup: int, decay_from: int | None = None, decay_to: int | None = None):
        self.warmup, self.decay_from, self.decay_to = warmup, decay_from, decay_to

    def factor(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / (self.warmup + 1)
        if self.decay_from is None or self.decay_to is None or step < self.decay_from:
            return 1.0
        return max(0.0, (self.decay_to - step) / max(1, self.decay_to - self.decay_from))

    def cool_down(self, step: int, end: int) -> None:
        if self.decay_from is None:
            self.decay_from, self.decay_to = step, max(step + 1, end)
