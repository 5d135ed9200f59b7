"""The one exception type that reaches users as a single line (see heterospec.cli)."""


class UserError(Exception):
    """Bad input or a missing resource: printed as one line, never as a traceback."""
