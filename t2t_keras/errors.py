"""The exceptions the commands turn into one line instead of a traceback.

Every error a user can fix (an unknown name, a bad flag value, a missing file) is a
`UsageError` whose message is one line naming the thing and the fix. The CLIs print it
as `error: <message>` and exit with status 2. A command asked to stop (SIGTERM, Ctrl-C)
after keeping its work raises `Stopped`: its line, and the signal's exit status.
"""


class UsageError(ValueError):
    """Bad input that the user can fix; the message is one line and says how."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt would be (every command turns SIGTERM into
    it): the same clean-up, then the line and exit status 143 (128 + SIGTERM) instead of 130."""

    status = 143


class Stopped(Exception):
    """A command stopped on a signal after keeping its work; the message is one line that says
    what was kept, `status` the exit status (128 + the signal's number, as shells report it)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status
