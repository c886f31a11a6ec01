"""mwinv: inverted middleware for database performance work."""

__version__ = "0.1.0"
