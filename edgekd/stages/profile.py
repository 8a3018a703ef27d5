"""The profile stage: ONNX models timed at batch 1 on each configured device.

One `ProfileResult` per (device, model) at one input length, or a `ProfileSweep`
over several lengths; with `out_dir`, each is written as
`profile-DEVICE-MODEL.json` there, where `check` and `report` find it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from edgekd.artifacts import ProfileResult, ProfileSweep
from edgekd.config import ProfileConfig, validate
from edgekd.devices import profile as device
from edgekd.devices.agent import NOISY_SPREAD
from edgekd.errors import printable
from edgekd.progress import track


def profile(
    cfg: ProfileConfig,
    models: list[Path],
    out_dir: str | Path | None = None,
    texts: list[Any] | None = None,
) -> list[ProfileResult | ProfileSweep]:
    """Time each of `models` on each of `cfg.devices`; `texts` (dev rows) make the
    tokenize+infer timing real, else synthetic texts of each length are used."""
    jobs = [(name, Path(model)) for name in cfg.devices for model in models]
    out: list[ProfileResult | ProfileSweep] = []
    for name, model in track(jobs, f"profile {len(models)} model(s)") if len(jobs) > 1 else jobs:
        exits = None
        if cfg.vs is None and device.is_early_exit(model):
            if texts:
                from edgekd.exporters.early_exit import THRESHOLDS

                exits = list(THRESHOLDS)
            else:
                print(
                    f"note: {printable(model.name)} exits early; pass --data to time each exit "
                    "threshold on real rows (synthetic ids only time its default)",
                    file=sys.stderr,
                )
        # What the agent returns is checked like a file: a device (an ssh board, a phone)
        # can send a -1 ms p90, which must be one line naming it, not an internal error.
        runs = [
            validate(
                ProfileResult,
                device.profile_model(
                    model,
                    name,
                    cfg.threads,
                    cfg.runs,
                    cfg.warmup,
                    n,
                    texts,
                    cfg.trials,
                    cfg.vs,
                    cfg.hosts.get(name),
                    cfg.processes,
                    exits,
                ),
                f"the profile of {model.name} on {name}",
            )
            for n in cfg.seq_lens
        ]
        for r in runs:
            warn_if_noisy(r)
        result: ProfileResult | ProfileSweep = (
            runs[0] if len(runs) == 1 else ProfileSweep(sweep=runs)
        )
        if out_dir is not None:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            result.write(Path(out_dir) / ProfileResult.file_name(runs[0].device, model))
        out.append(result)
    return out


def warn_if_noisy(r: ProfileResult) -> None:
    """A warning per series whose trial medians spread past NOISY_SPREAD."""
    series: dict[str, Any] = {Path(r.model).name: r.model_dump(), "tokenize+infer": r.end_to_end}
    if r.vs:
        series[Path(r.vs["b"]["model"]).name] = r.vs["b"]
    for name, m in series.items():
        if m and m.get("noisy"):
            print(  # plain: one line whatever the terminal's width
                f"warning: {printable(name)} at seq {r.seq_len}: trial medians spread "
                f"{100 * m['trial_spread']:.0f}% (> {100 * NOISY_SPREAD:.0f}%), the machine was "
                "busy; rerun on an idle machine or raise --runs",
                file=sys.stderr,
            )
