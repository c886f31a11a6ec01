"""Errors a user can act on: printed as one line, never as a traceback."""


class MwinvError(Exception):
    """A failure with a message that names what was wrong (file, line or offset, value)."""
