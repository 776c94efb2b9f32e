"""The one exception type for bad user input.

Every error a user can fix (an unknown name, a bad flag value, a missing file) is a
`UsageError` whose message is one line naming the thing and the fix. The CLIs print it
as `error: <message>` and exit with status 2 instead of showing a traceback.
"""


class UsageError(ValueError):
    """Bad input that the user can fix; the message is one line and says how."""
