"""The one exception type users see as a one-line message."""


class EdgeKDError(Exception):
    """A user-facing error: its message is one line that names the fix.

    The CLI prints it as `error: <message>` and exits with `exit_code`
    (1 for bad input, 2 for a malformed config or budget file).
    """

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
