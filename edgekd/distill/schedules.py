"""Per-epoch schedules for loss attributes (temperature, ce_weight, ...), as data.

`schedules: {temperature: {kind: linear, start: 4, end: 1}}` in a distill config
sets `loss.temperature` before every epoch.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Schedule(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    kind: Literal["constant", "linear", "cosine", "step"] = "linear"
    start: float
    end: float = Field(0.0, description="Value at the last epoch (ignored by constant).")
    every: int = Field(1, ge=1, description="step: epochs between drops.")
    factor: float = Field(0.5, gt=0, description="step: multiplier per drop.")

    def value(self, epoch: int, epochs: int) -> float:
        """Value at `epoch` (1-based) of `epochs`; linear/cosine go start → end."""
        progress = 0.0 if epochs <= 1 else (epoch - 1) / (epochs - 1)
        if self.kind == "constant":
            return self.start
        if self.kind == "linear":
            return self.start + (self.end - self.start) * progress
        if self.kind == "cosine":
            return self.end + (self.start - self.end) * (1 + math.cos(math.pi * progress)) / 2
        return self.start * self.factor ** ((epoch - 1) // self.every)
