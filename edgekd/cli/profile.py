"""`edgekd profile`: one ONNX model timed at batch 1 on one device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from edgekd.cli.base import DATA_FIELDS, Fields, field, typed
from edgekd.cli.options import CONFIG, PAIR_COL, SETS, TEXT_COL
from edgekd.config import DataConfig, ProfileConfig, override
from edgekd.errors import EdgeKDError
from edgekd.resolve import resolve


def lengths(value: str) -> list[int]:
    """`--seq-len 16,32,64` as the lengths it lists (their range is ProfileConfig's)."""
    try:
        return [int(n) for n in value.split(",")]
    except ValueError:
        raise EdgeKDError(f"--seq-len {value!r}: give integers, e.g. 64 or 16,32,64") from None


# Option → ProfileConfig field.
FIELDS: Fields = {
    **{k: k for k in ("threads", "runs", "trials", "warmup", "processes")},
    "device": ("devices", lambda name: [name]),
    "seq_len": ("seq_lens", lengths),
    "vs": ("vs", str),
}
# Option → DataConfig field, for the dev texts timed end to end.
TEXTS: Fields = {k: DATA_FIELDS[k] for k in ("data", "text_column", "text_pair_column")}


def profile(
    ctx: typer.Context,
    model: Path = typer.Argument(..., help="ONNX file."),
    device: str = field(
        ProfileConfig,
        "devices",
        "--device",
        help="Device name (`edgekd devices`) or YAML spec path.",
    ),
    host: str | None = typer.Option(
        None, "--host", help="[USER@]HOST for an ssh device.", show_default="the spec's"
    ),
    threads: int | None = field(
        ProfileConfig,
        "threads",
        "--threads",
        min=0,
        default="the device's",
        help="onnxruntime intra-op threads (0: all cores).",
    ),
    runs: int = field(
        ProfileConfig,
        "runs",
        "--runs",
        min=1,
        help="Timed runs in all, split into --trials (at least one each).",
    ),
    trials: int = field(
        ProfileConfig,
        "trials",
        "--trials",
        min=1,
        help="Trials; p50/p90 are medians of the trials' own.",
    ),
    warmup: int = field(ProfileConfig, "warmup", "--warmup", min=0),
    seq_len: str = field(
        ProfileConfig,
        "seq_lens",
        "--seq-len",
        help="Tokens per synthetic input; a list (16,32,64,128) sweeps lengths.",
    ),
    vs: Path | None = typer.Option(
        None,
        "--vs",
        help="Time this second model alternately with MODEL; report the ratio.",
        show_default="none",
    ),
    processes: int = field(
        ProfileConfig,
        "processes",
        "--processes",
        min=1,
        help="--vs: agent processes; the interval spans their spread.",
    ),
    data: str | None = typer.Option(
        None,
        "--data",
        help="Dev texts for end-to-end (tokenize + infer) timing.",
        show_default="none: model only",
    ),
    text_column: str | None = TEXT_COL,
    text_pair_column: str | None = PAIR_COL,
    json_out: Path | None = typer.Option(
        None, "--json", help="Write the result to this JSON file.", show_default="none"
    ),
    config: Path | None = CONFIG,
    set_: list[str] | None = SETS,
) -> None:
    """Latency percentiles, load time, memory and size at batch 1 on onnxruntime."""
    from edgekd.render import print_profile_result
    from edgekd.stages.profile import profile as run_profile

    cfg = one_device(resolve(ProfileConfig, config, set_, typed(ctx, FIELDS)), host)
    texts = dev_texts(resolve(DataConfig, typed=typed(ctx, TEXTS))) if data else None
    (result,) = run_profile(cfg, [model], texts=texts)
    print_profile_result(result)
    if json_out:
        result.write(json_out)


def one_device(cfg: ProfileConfig, host: str | None) -> ProfileConfig:
    """`cfg`, which must name one device (this command shows one result); `--host` is
    that device's, over the config's."""
    if len(cfg.devices) != 1:
        raise EdgeKDError(
            f"edgekd profile times one device, the config names {len(cfg.devices)}; "
            "pass --device NAME (recipes profile several)"
        )
    return override(cfg, hosts={**cfg.hosts, cfg.devices[0]: host}) if host else cfg


def dev_texts(data: DataConfig) -> list[Any]:
    from edgekd.data import load_task

    return load_task(data).dev.texts
