"""Exceptions a user can cause, said in one line that names the file and the fix.

The CLI turns an `EdgeKDError` into `error: <message>`; everything else raised by a
command comes here first. What a user's input can cause (a missing or unreadable file,
a folder where a file belongs, a corrupt model or weights file) gets a one-line reason
and exit 2; anything else is a bug: exit 4 with a line that says how to see the
traceback (`--debug` or EDGEKD_DEBUG=1). The line passes `printable`: a file name or
an exception's text may hold escape sequences, and they print as `\\x1b`, never raw.
"""

from __future__ import annotations

import errno
import json

from edgekd.errors import BAD_INPUT, INTERNAL_ERROR, printable

# Class names, so that reading them needs no import of onnxruntime, onnx or safetensors.
CORRUPT_MODEL = {
    "SafetensorError": "a .safetensors weights file is corrupt or truncated",
    "InvalidProtobuf": "an ONNX model file is not a valid model",
    "InvalidGraph": "an ONNX model's graph is invalid",
    "NoSuchFile": "an ONNX model file does not exist",
    "DecodeError": "a model file is not a valid protobuf (truncated or not ONNX)",
    "HeaderTooLarge": "a .safetensors weights file has a corrupt header",
}


def first_line(e: BaseException, limit: int = 160) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:limit]


def describe(e: BaseException) -> tuple[str, int]:
    """The one line and exit code for an exception that is not an `EdgeKDError`."""
    message, code = _describe(e)
    return printable(message), code


def _describe(e: BaseException) -> tuple[str, int]:
    if isinstance(e, OSError) and e.filename is not None:
        name = e.filename
        if isinstance(e, FileNotFoundError):
            return f"{name} does not exist; check the path", BAD_INPUT
        if isinstance(e, PermissionError):
            return f"{name}: permission denied; fix its permissions or use another path", BAD_INPUT
        if isinstance(e, IsADirectoryError):
            return f"{name} is a folder where a file is expected; pass the file", BAD_INPUT
        if isinstance(e, NotADirectoryError):
            return f"{name} is a file where a folder is expected; pass the folder", BAD_INPUT
        if e.errno == errno.ENOSPC:
            return f"no space left on the device holding {name}; free some space", BAD_INPUT
        return f"{name}: {e.strerror or first_line(e)}; check the path", BAD_INPUT
    if isinstance(e, UnicodeDecodeError):
        return (
            f"a file is not UTF-8 text (byte {e.start}: {e.object[e.start : e.start + 1]!r}); "
            "convert it to UTF-8",
            BAD_INPUT,
        )
    if isinstance(e, json.JSONDecodeError):
        return (
            f"a JSON file is malformed ({e.msg}, line {e.lineno}); rewrite it with the "
            "edgekd command that made it",
            BAD_INPUT,
        )
    for cls in type(e).__mro__:
        if cls.__name__ in CORRUPT_MODEL:
            return (
                f"{CORRUPT_MODEL[cls.__name__]} ({first_line(e)}); re-create it with the "
                "edgekd command that wrote it",
                BAD_INPUT,
            )
    return (
        f"internal error ({type(e).__name__}: {first_line(e)}); rerun with --debug for the "
        "traceback and report it",
        INTERNAL_ERROR,
    )
