"""Reaching the Hugging Face Hub: fail in milliseconds, not after a minute of retries."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from edgekd.errors import EdgeKDError


def hub_unreachable() -> str | None:
    """Why the Hugging Face Hub cannot be reached, or None if it may be.

    Without a network, `datasets` and `transformers` retry with back-off for most
    of a minute before failing; a DNS lookup answers in milliseconds. No verdict
    is given behind a proxy (DNS may fail while HTTPS works) or with
    HF_HUB_OFFLINE set (the libraries then read their cache and fail fast).
    """
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return None
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or ""
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return f"cannot resolve {host}"
    return None


def require_hub(name: str, what: str) -> None:
    """Raise a one-line error if `name` is no local path and the Hub is unreachable."""
    if Path(name).exists():
        return
    reason = hub_unreachable()
    if reason:
        raise EdgeKDError(
            f"{name!r} is not a local folder and the Hugging Face Hub is unreachable "
            f"({reason}); pass a local {what} folder, or set HF_HUB_OFFLINE=1 to use a cached copy"
        )
