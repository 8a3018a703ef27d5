"""The one exception type users see as a one-line message, and the exit codes.

| code | meaning |
|---|---|
| 0 | done; for a gate (check, run, quickstart): every limit holds |
| 1 | a gate's budget limit failed (and only that) |
| 2 | bad input: an option, config, data or file that cannot be used as given |
| 3 | the output path is not edgekd's to write (`--out` holds the user's files, ...) |
| 4 | an internal error (a bug): rerun with --debug for the traceback and report it |
"""

LIMIT_FAILED = 1
BAD_INPUT = 2
OUTPUT_REFUSED = 3
INTERNAL_ERROR = 4


class EdgeKDError(Exception):
    """A user-facing error: its message is one line that names the fix.

    The CLI prints it as `error: <message>` and exits with `exit_code` (see the table
    above; never 1, which a gate keeps for "a limit failed").
    """

    def __init__(self, message: str, exit_code: int = BAD_INPUT) -> None:
        # One line whatever it quotes: a column name or a path may hold a line break.
        super().__init__(message.replace("\r", "\\r").replace("\n", "\\n"))
        self.exit_code = exit_code
