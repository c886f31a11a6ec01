"""Errors a user can act on: printed as one line, never as a traceback."""

import errno

# a full file system, or the user's quota on it
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class MwinvError(Exception):
    """A failure with a message that names what was wrong (file, line or offset, value)."""


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL
