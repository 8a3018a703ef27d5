"""The one exception type users see as a one-line message, and the exit codes.

| code | meaning |
|---|---|
| 0 | done; for a gate (check, run, quickstart): every limit holds |
| 1 | a gate's budget limit failed (and only that) |
| 2 | bad input: an option, config, data or file that cannot be used as given |
| 3 | the output path is not edgekd's to write (`--out` holds the user's files, ...) |
| 4 | an internal error (a bug): rerun with --debug for the traceback and report it |

Every string that came from a user or a file passes `printable` before edgekd prints
it: a path, a text or a label may hold escape sequences that would otherwise repaint
the terminal (a green "all checks passed" over the real error).
"""

import re

LIMIT_FAILED = 1
BAD_INPUT = 2
OUTPUT_REFUSED = 3
INTERNAL_ERROR = 4


# C0 controls (tab, newline and ESC among them), DEL, C1 controls (0x9b is a one-byte
# CSI on some terminals), the Arabic letter mark, LRM/RLM, the line and paragraph
# separators, and the bidi embeddings, overrides and isolates (U+202A–U+202E,
# U+2066–U+2069) that can reorder what a line shows.
UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
NAMED = {"\n": "\\n", "\r": "\\r", "\t": " "}


def _visible(m: re.Match[str]) -> str:
    c = m.group()
    if c in NAMED:
        return NAMED[c]
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def printable(s: str) -> str:
    """`s` safe to print on a terminal, on one line: each control character or bidi
    override shown as a visible escape (ESC as `\\x1b`, a line break as `\\n`, U+202E
    as `\\u202e`), a tab as a space; everything else, any script included, unchanged."""
    return UNPRINTABLE.sub(_visible, s)


def printable_json(s: str) -> str:
    """A JSON document safe to print: what `printable` escapes written as JSON's
    `\\uXXXX`. A JSON encoder already escapes the C0 controls inside strings, so a raw
    tab or line break is the document's own whitespace and stays; the rest can only be
    inside a string, where the escape decodes to the same text."""
    return UNPRINTABLE.sub(
        lambda m: m.group() if m.group() in "\t\n\r" else f"\\u{ord(m.group()):04x}", s
    )


class EdgeKDError(Exception):
    """A user-facing error: its message is one line that names the fix.

    The CLI prints it as `error: <message>` and exits with `exit_code` (see the table
    above; never 1, which a gate keeps for "a limit failed").
    """

    def __init__(self, message: str, exit_code: int = BAD_INPUT) -> None:
        # One line whatever it quotes: a column name or a path may hold a line break,
        # a file's text an escape sequence.
        super().__init__(printable(message))
        self.exit_code = exit_code
